"""int8 (lazygrad.quantize) against float32: layers, the digits CNN and ResNet-18, jitted, alternating the two.

    python extra/bench/bench_quantize.py
    python extra/bench/bench_quantize.py --repeats 20 --only linear,digits
    python extra/bench/bench_quantize.py --onnx resnet18.onnx   # an ONNX model quantized by ONNX Runtime

Per case: the median time of a jitted call of the float32 model and of its quantized copy (inputs
quantized per call), alternated call by call; the time of each side's product kernel alone (the
slowest kernel of a warm plain call, read from DEBUG=2: the matmul or convolution); the model's bytes;
and for the digits CNN (the demo's checkpoint, or the demo's training run first when there is
none) the test accuracy of both. The int8 side also runs
the kernels that quantize its input (a max |x| and a rounding) and dequantize its output.

With --onnx (needs the bench extra), a float ONNX model with fixed input shapes is quantized by ONNX
Runtime three times: by `quantize_dynamic` (int8 weights; ConvInteger, MatMulInteger,
DynamicQuantizeLinear) and by `quantize_static` in QDQ form (QuantizeLinear and DequantizeLinear
around each product, uint8 activations calibrated on 4 random inputs, int8 weights per channel: what
lazygrad.onnx rewrites, onnx/qdq.py) and in QOperator form (QLinearConv, and ONNX Runtime's own
QLinearAdd, QGemm and others: onnx/ops_qlinear.py), and the four files run through lazygrad.onnx
(jitted) and ONNX Runtime, alternated call by call: each one's median time and lazygrad's largest
difference from ONNX Runtime's output (a static model's outputs are quantized: a difference of one
step where a value lies on a rounding boundary, float sums against ONNX Runtime's).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))           # lazygrad from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))           # extra/, for train_digits
sys.path.insert(0, str(Path(__file__).resolve().parent))               # extra/bench/, for bench_models

KERNEL_LINE = re.compile(r"^  (?P<name>\S+)\s.*?\s(?P<ms>[\d.]+) ms\s")


def cases():
    """name -> (build the float model, input shape)."""
    import lazygrad.nn as nn
    import train_digits
    from models.resnet import resnet18
    from lazygrad.nn.state import get_state_dict, load_state_dict, safe_load

    checkpoint = train_digits.HERE / "train_digits.safetensors"
    trained = None if checkpoint.exists() else train_digits.train(train_digits.load_digits_dataset(0), progress=False,
                                                                   log=lambda line: None).model

    def digits():  # the demo's checkpoint (`make demo`), else the same training run here
        model = train_digits.build_model(8)
        load_state_dict(model, safe_load(str(checkpoint)) if trained is None else get_state_dict(trained))
        return model
    return {
        "linear": (lambda: nn.Sequential(nn.Linear(1024, 1024)), (256, 1024)),
        "conv3x3": (lambda: nn.Sequential(nn.Conv2d(64, 64, 3, padding=1, bias=False)), (16, 64, 56, 56)),
        "conv1x1": (lambda: nn.Sequential(nn.Conv2d(256, 256, 1, bias=False)), (16, 256, 14, 14)),
        "digits": (digits, (200, 1, 8, 8)),
        "digits b1": (digits, (1, 1, 8, 8)),
        "resnet18": (lambda: resnet18(nn), (1, 3, 224, 224)),         # random weights (extra/models)
        "resnet18 b16": (lambda: resnet18(nn), (16, 3, 224, 224)),
    }


def slowest_kernel_ms(call) -> float:
    """The longest kernel of a warm plain call (its buffers from the pool, not fresh pages)."""
    from lazygrad.knobs import Context
    call()
    captured = io.StringIO()
    with Context(DEBUG=2), contextlib.redirect_stderr(captured):
        call()
    times = [float(match["ms"]) for match in map(KERNEL_LINE.match, captured.getvalue().splitlines()) if match]
    return max(times, default=0.0)


def onnx_rows(path: str, repeats: int) -> None:
    """The float model and ONNX Runtime's dynamic int8 quantization of it, through both runtimes."""
    import tempfile

    import onnxruntime
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

    from bench_models import ort_options

    import lazygrad
    from lazygrad import Tensor
    from lazygrad.jit import jit
    from lazygrad.onnx import OnnxModel
    directory = Path(tempfile.mkdtemp())
    quantized, static, operators = (str(directory / name) for name in ("int8.onnx", "int8_qdq.onnx", "int8_qop.onnx"))
    quantize_dynamic(path, quantized, weight_type=QuantType.QInt8, op_types_to_quantize=["Conv", "MatMul", "Gemm"])
    info = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs()[0]

    class RandomInputs(CalibrationDataReader):
        def __init__(self):
            self.seeds = iter(range(1, 5))

        def get_next(self):
            seed = next(self.seeds, None)
            return None if seed is None else \
                {info.name: np.random.default_rng(seed).standard_normal(info.shape).astype(np.float32)}
    for file, form in ((static, QuantFormat.QDQ), (operators, QuantFormat.QOperator)):
        quantize_static(path, file, RandomInputs(), quant_format=form, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, per_channel=True)
    print(f"\n{'onnx model':<30} {'lazygrad ms':>11} {'ORT ms':>8} {'ratio':>6} {'max |diff|':>10}")
    for label, file in (("float32", path), ("int8 (ORT dynamic)", quantized), ("int8 (ORT static, QDQ)", static),
                        ("int8 (ORT static, QOperator)", operators)):
        # ONNX Runtime's workers idle without spinning, which took the cores from lazygrad's next call
        # (ResNet-50 in float32: 43 ms right after ONNX Runtime's run, 17 alone)
        options = ort_options(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
        session = onnxruntime.InferenceSession(file, options, providers=["CPUExecutionProvider"])
        model = OnnxModel(file, device="CPU")
        info = session.get_inputs()[0]
        array = np.random.default_rng(0).standard_normal(info.shape).astype(np.float32)
        output = session.get_outputs()[0].name
        call = jit(lazygrad.no_grad()(lambda x: model.run({info.name: x})[output]))
        x = Tensor(array).realize()
        times: dict[str, list[float]] = {"lazygrad": [], "ort": []}
        for number in range(3 + repeats):
            start = time.perf_counter()
            result = call(x).numpy()
            middle = time.perf_counter()
            expected = session.run(None, {info.name: array})[0]
            if number >= 3:
                times["lazygrad"].append(middle - start)
                times["ort"].append(time.perf_counter() - middle)
        ours, theirs = statistics.median(times["lazygrad"]), statistics.median(times["ort"])
        print(f"{label:<30} {ours * 1e3:>11.2f} {theirs * 1e3:>8.2f} {ours / theirs:>6.2f} "
              f"{float(np.abs(result - expected).max()):>10.2e}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="cases, comma-separated (default: all)")
    parser.add_argument("--repeats", type=int, default=11, help="alternating rounds (the median is reported)")
    parser.add_argument("--onnx", help="a float ONNX model to quantize with ONNX Runtime and compare (bench extra)")
    args = parser.parse_args()
    import lazygrad
    from lazygrad import Tensor
    from lazygrad.jit import jit
    from lazygrad.quantize import model_bytes, quantize
    print(f"{'case':<12} {'float32 ms':>10} {'int8 ms':>8} {'ratio':>6} {'fp32 kernel':>11} {'int8 kernel':>11} "
          f"{'fp32 bytes':>10} {'int8 bytes':>10} {'accuracy fp32/int8':>19}")
    for name, (build, shape) in cases().items():
        if args.only and name not in args.only.split(","):
            continue
        lazygrad.manual_seed(0)
        models = {"float32": build().eval(), "int8": quantize(build()).eval()}
        x = Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32)).realize()
        calls = {side: jit(lazygrad.no_grad()(model.__call__)) for side, model in models.items()}
        times: dict[str, list[float]] = {side: [] for side in models}
        for number in range(3 + args.repeats):
            for side, call in calls.items():
                start = time.perf_counter()
                call(x).realize()
                if number >= 3:
                    times[side].append(time.perf_counter() - start)
        kernels = {side: slowest_kernel_ms(lambda: lazygrad.no_grad()(model.__call__)(x).realize())
                   for side, model in models.items()}
        accuracy = ""
        if name == "digits":
            import train_digits
            data = train_digits.load_digits_dataset(0)
            accuracy = "/".join(f"{train_digits.evaluate(model, data.test_images, data.test_labels):.4f}"
                                for model in models.values())
        fp32, int8 = statistics.median(times["float32"]), statistics.median(times["int8"])
        print(f"{name:<12} {fp32 * 1e3:>10.3f} {int8 * 1e3:>8.3f} {int8 / fp32:>6.2f} {kernels['float32']:>11.3f} "
              f"{kernels['int8']:>11.3f} {model_bytes(models['float32']):>10} {model_bytes(models['int8']):>10} "
              f"{accuracy:>19}", flush=True)
    if args.onnx:
        onnx_rows(args.onnx, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
