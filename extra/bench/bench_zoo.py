"""Models people run, beyond the four of bench_models.py: torchvision's architectures (classification,
two segmentation models and a video one), a YOLOv8-n style detector (zoo_detector.py) and two
sequence models (a 2-layer GRU and a 1-D convolution stack, an audio model's front end) exported to ONNX by torch and run through lazygrad.onnx (called
plainly, as a user would: from its fourth call OnnxModel replays the kernels its third launched),
against ONNX Runtime and torch eager, on the CPU at a chosen thread count. Each model is batch 1 at
its usual resolution, with seeded random weights (parameters torchvision initializes to zero, as
ViT's head, drawn too, so the check means something); the exports are cached under --onnx-dir.

    python extra/bench/bench_zoo.py                                   # every model, 2 threads
    python extra/bench/bench_zoo.py --models vit_b_16,densenet121 --threads 1 --repeats 9

What is timed: after 3 untimed calls per route (lazygrad's first one compiles, its third captures; its
seconds are the "first call" column), rounds of one call per route in turn, so machine noise falls
on all alike; medians over the rounds are printed. Checked: lazygrad's output against ONNX
Runtime's, within 1e-3 of the largest magnitude. `kernels` is what one replayed call launches.

Needs the bench extra (`pip install -e .[bench]`: torch, torchvision, onnxruntime, onnxscript).
Threads: lazygrad's kernels read OMP_NUM_THREADS once, so the script runs itself again with it set
when it differs from --threads.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import cpu_model  # noqa: E402
from lazygrad import Tensor, no_grad, stats  # noqa: E402
from lazygrad.onnx import OnnxModel  # noqa: E402

try:
    import onnxruntime
    import torch
    import torchvision
except ImportError as missing:
    torch = torchvision = onnxruntime = None
    MISSING = missing.name
else:
    from bench_models import ort_options

# name -> input shape: torchvision's classifiers (convolutions of many shapes: odd sizes, grouped,
# depthwise, squeeze-and-excitation, dense concatenations, a flatten into large Linears; two vision
# transformers), two segmentation models (dilated convolutions), a video one ((2+1)-D convolutions), a
# detector (split-and-concatenate stages, upsampling, a decoding head) and two sequence models (`sequence_model`)
MODELS = {
    "resnet50": (1, 3, 224, 224), "densenet121": (1, 3, 224, 224), "googlenet": (1, 3, 224, 224),
    "inception_v3": (1, 3, 299, 299), "squeezenet1_1": (1, 3, 224, 224), "shufflenet_v2_x1_0": (1, 3, 224, 224),
    "mnasnet1_0": (1, 3, 224, 224), "mobilenet_v3_small": (1, 3, 224, 224), "efficientnet_b0": (1, 3, 224, 224),
    "regnet_y_400mf": (1, 3, 224, 224), "convnext_tiny": (1, 3, 224, 224), "vit_b_16": (1, 3, 224, 224),
    "swin_t": (1, 3, 224, 224), "vgg11_bn": (1, 3, 224, 224), "squeezenet1_0": (1, 3, 224, 224),
    "resnext50_32x4d": (1, 3, 224, 224), "regnet_x_1_6gf": (1, 3, 224, 224),
    "deeplabv3_mobilenet_v3_large": (1, 3, 320, 320), "deeplabv3_resnet50": (1, 3, 320, 320),
    "r2plus1d_18": (1, 3, 16, 112, 112),
    "gru": (1, 64, 256), "conv1d": (1, 80, 3000), "detector": (1, 3, 640, 640),
}
TOLERANCE = 1e-3


def sequence_model(name: str):
    """The two sequence models: a 2-layer GRU of width 512 over 256 features then a Linear to 10
    classes at every step (64 steps), or six Conv1d of kernel 5 (80 then 64 channels) and ReLU over
    3000 positions."""
    if name == "gru":
        class Recurrent(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.gru, self.head = torch.nn.GRU(256, 512, num_layers=2, batch_first=True), torch.nn.Linear(512, 10)

            def forward(self, x):
                return self.head(self.gru(x)[0])
        return Recurrent()
    layers = []
    for index in range(6):
        layers += [torch.nn.Conv1d(80 if index == 0 else 64, 64, 5, padding=2), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


class MainOutput(torch.nn.Module if torch is not None else object):
    """A segmentation model's "out" (its output is a dict)."""
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def reference_model(name: str, seed: int):
    torch.manual_seed(seed)
    if name in ("gru", "conv1d"):
        model = sequence_model(name)
    elif name == "detector":
        from zoo_detector import Detector
        model = Detector()
    elif name.startswith("deeplabv3"):
        model = MainOutput(getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None))
    elif name == "r2plus1d_18":
        model = torchvision.models.video.r2plus1d_18(weights=None)
    else:
        model = getattr(torchvision.models, name)(weights=None, **({"aux_logits": False, "init_weights": True}
                                                                 if name in ("googlenet", "inception_v3") else {}))
    with torch.no_grad():
        for parameter in model.parameters():
            if not parameter.any():
                parameter.normal_(0.0, 0.02)
    return model.eval()


def onnx_file(name: str, model, image: np.ndarray, directory: Path, seed: int) -> Path:
    path = directory / f"{name}-torch{torch.__version__}-torchvision{torchvision.__version__}-seed{seed}.onnx"
    if path.exists():
        return path
    directory.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(image),), str(partial), input_names=["image"],
                          output_names=["logits"], dynamo=True, external_data=False)
    os.replace(partial, path)
    return path


def run_model(name: str, args) -> dict:
    image = np.random.default_rng(args.seed).standard_normal(MODELS[name]).astype(np.float32)
    model = reference_model(name, args.seed)
    path = onnx_file(name, model, image, Path(args.onnx_dir), args.seed)
    session = onnxruntime.InferenceSession(str(path), ort_options(args.threads), providers=["CPUExecutionProvider"])
    onnx_model = OnnxModel(str(path))
    tensor = Tensor(image).realize()
    lazygrad_call = no_grad()(lambda x: onnx_model.run({"image": x})["logits"])
    torch_image = torch.from_numpy(image)

    def torch_call():
        with torch.inference_mode():
            return model(torch_image)
    routes = {"lazygrad": lambda: lazygrad_call(tensor).numpy(), "ort": lambda: session.run(None, {"image": image})[0],
              "torch": torch_call}
    start = time.perf_counter()
    lazygrad_out = routes["lazygrad"]()
    first = time.perf_counter() - start
    for call in routes.values():
        for _ in range(3):
            call()
    stats.reset()
    routes["lazygrad"]()
    kernels = stats.kernels
    seconds = {route: [] for route in routes}
    for _ in range(args.repeats):
        for route, call in routes.items():
            start = time.perf_counter()
            call()
            seconds[route].append(time.perf_counter() - start)
    expected = session.run(None, {"image": image})[0]
    error = float(np.abs(lazygrad_out - expected).max() / max(np.abs(expected).max(), 1e-30))
    return {"name": name, "first": first, "kernels": kernels, "error": error,
            **{route: statistics.median(times) * 1e3 for route, times in seconds.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"from {','.join(MODELS)}")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds (one call per route each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--onnx-dir", default=str(Path(os.environ.get("TMPDIR", "/tmp")) / "lazygrad_bench_zoo"))
    args = parser.parse_args()
    if torch is None:
        print(f"bench_zoo needs the bench extra (pip install -e .[bench]): {MISSING} is missing")
        return 1
    if os.environ.get("OMP_NUM_THREADS") != str(args.threads):
        environment = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
        return subprocess.call([sys.executable, *sys.argv], env=environment)
    torch.set_num_threads(args.threads)
    names = [name for name in args.models.split(",") if name]
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {','.join(MODELS)}")
    print(f"machine : {cpu_model()}, {args.threads} thread(s); torch {torch.__version__}, "
          f"torchvision {torchvision.__version__}, onnxruntime {onnxruntime.__version__}")
    print(f"timing  : 3 untimed calls per route, then the median of {args.repeats} rounds of every route in turn (ms)\n")
    print(f"{'model':<28} {'lazygrad':>9} {'ort':>8} {'torch':>8} {'lg/ort':>7} {'lg/torch':>8} "
          f"{'kernels':>8} {'first call':>10}  check")
    failed = False
    for name in names:
        result = run_model(name, args)
        ok = result["error"] <= TOLERANCE
        failed |= not ok
        print(f"{name:<28} {result['lazygrad']:9.1f} {result['ort']:8.1f} {result['torch']:8.1f} "
              f"{result['lazygrad'] / result['ort']:7.2f} {result['lazygrad'] / result['torch']:8.2f} "
              f"{result['kernels']:8d} {result['first']:9.1f}s  "
              f"{'OK' if ok else 'DIFFERS'} ({result['error']:.1e})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
