"""Model benchmark on a GPU: ResNet-18 (batch 1) and the BERT encoder of bench_models.py (8 x 128
tokens) on lazygrad's CUDA device, jitted under lazygrad.no_grad(), against PyTorch eager under
inference_mode on the same GPU with the same weights.

    python extra/bench/bench_cuda_models.py                 # both models, median of 20 calls
    python extra/bench/bench_cuda_models.py --repeats 50
    python extra/bench/bench_cuda_models.py --kernels 10    # and each model's 10 slowest kernels

Needs cupy (pip install lazygrad[cuda]), torch with CUDA, and a GPU. TF32 is off in torch, so both
sides compute in float32; the largest difference between the outputs, over the largest |output|,
is printed with the times, the first call's time (compiles included) and the kernels per call.
With --kernels K, one more plain (unjitted) call runs under DEBUG=2 and its K slowest launches are
listed with their GFLOP/s and GB/s, and the sum of all its kernel times beside the jitted call's
time (the difference is launch and Python overhead).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.append(str(REPO))
sys.path.append(str(Path(__file__).resolve().parent))
os.environ.setdefault("DEV", "CUDA")  # lazygrad's default device, read when lazygrad is imported

import torch  # noqa: E402

import bench_models  # noqa: E402
import lazygrad.nn  # noqa: E402
from lazygrad import Tensor, stats  # noqa: E402
from lazygrad.devices import synchronize  # noqa: E402
from lazygrad.jit import jit  # noqa: E402
from lazygrad.nn.state import load_state_dict  # noqa: E402

CASES = ("resnet18 b1", "bert")


def median_ms(call, synchronize, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        call()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def slowest_kernels(call, count: int) -> str:
    kernels = bench_models.per_kernel_times(call)
    lines = [f"  {len(kernels)} launches, {sum(kernel.ms for kernel in kernels):.2f} ms in kernels; slowest {count}:"]
    for kernel in sorted(kernels, key=lambda kernel: -kernel.ms)[:count]:
        lines.append(f"  {kernel.index:>4} {kernel.name:<40}{kernel.global_size:<22}{kernel.ms:>9.3f} ms"
                     f"{kernel.gflops:>10.1f} GFLOP/s{kernel.gbs:>9.1f} GB/s")
    return "\n".join(lines)


def run(name: str, repeats: int, kernels: int) -> str:
    case = next(case for cases in bench_models.CASES.values() for case in cases if case.name == name)
    inputs = case.make_inputs(np.random.default_rng(0))
    reference = bench_models.torch_reference(case, 0).eval()
    model = case.build(lazygrad.nn)
    load_state_dict(model, {key: Tensor(value.detach().numpy().copy()) for key, value in reference.state_dict().items()})
    model.train(False)
    tensors = [Tensor(array).realize() for array in inputs.values()]
    jitted = jit(lazygrad.no_grad()(lambda *arguments: model(*arguments)))  # as torch's inference_mode
    start = time.perf_counter()
    output = jitted(*tensors).numpy()
    first = time.perf_counter() - start
    for _ in range(3):
        jitted(*tensors).realize()
    stats.reset()
    jitted(*tensors).realize()
    launches = stats.kernels
    ours = median_ms(lambda: jitted(*tensors).realize(), lambda: synchronize("CUDA"), repeats)
    reference = reference.cuda()
    torch_inputs = [torch.from_numpy(array).cuda() for array in inputs.values()]
    with torch.inference_mode():
        expected = reference(*torch_inputs).cpu().numpy()
        theirs = median_ms(lambda: reference(*torch_inputs), torch.cuda.synchronize, repeats)
    error = float(np.max(np.abs(output - expected)) / np.max(np.abs(expected)))
    slowest = "\n" + slowest_kernels(lazygrad.no_grad()(lambda: model(*tensors).realize()), kernels) if kernels else ""
    return (f"{name:12s} lazygrad jit {ours:8.2f} ms   torch {theirs:7.2f} ms   ratio {ours / theirs:5.1f}x   "
            f"first call {first:5.1f} s   {launches} kernels   max error / max |output| {error:.1e}" + slowest)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per side (median)")
    parser.add_argument("--kernels", type=int, default=0, metavar="K", help="list each model's K slowest kernels")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_cuda_models: torch sees no CUDA GPU here; nothing to compare", file=sys.stderr)
        return 1
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name in CASES:
        print(run(name, args.repeats, args.kernels), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
