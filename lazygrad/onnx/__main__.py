"""`python -m lazygrad.onnx model.onnx [--run]`: describe an ONNX model and optionally run it on random inputs.

Prints the inputs and outputs (symbolic dims by name), the opset, the operator histogram and the
operators lazygrad.onnx does not support. With --run, feeds random inputs (symbolic dims take
--dim NAME=SIZE, default 1) and runs the model with DEBUG=2 kernel statistics.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from lazygrad import Context, Tensor, stats
from lazygrad.onnx.model import OnnxModel
from lazygrad.onnx.proto import ValueInfo


def random_input(info: ValueInfo, dims: dict[str, int], rng: np.random.Generator):
    if info.kind != "tensor" or info.dtype is None:
        raise ValueError(f"--run cannot make a random value for input {info} (only tensors are supported)")
    shape = tuple(dims.get(d, 1) if isinstance(d, str) else (1 if d is None else d) for d in (info.shape or ()))
    dtype = info.dtype
    if dtype.is_float:
        return rng.standard_normal(shape).astype(dtype.np)
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    return rng.integers(0, 4, shape).astype(dtype.np)


def describe(model: OnnxModel) -> str:
    opsets = ", ".join(f"{domain or 'ai.onnx'} {version}" for domain, version in sorted(model.opsets.items()))
    lines = [f"opsets: {opsets}", "inputs:"]
    lines += [f"  {info}" for info in model.inputs]
    lines += ["outputs:"] + [f"  {info}" for info in model.outputs]
    histogram = model.op_histogram()
    lines.append(f"operators ({sum(histogram.values())} nodes):")
    lines += [f"  {count:5d}  {op}" for op, count in histogram.most_common()]
    unsupported = model.unsupported()
    lines.append("unsupported: " + ("none" if not unsupported else "; ".join(unsupported)))
    return "\n".join(lines)


def run_random(model: OnnxModel, dims: dict[str, int], seed: int) -> str:
    rng = np.random.default_rng(seed)
    inputs = {info.name: random_input(info, dims, rng) for info in model.inputs}
    stats.reset()
    start = time.perf_counter()
    with Context(DEBUG=2):
        outputs = model.run(inputs)
        arrays = {name: value.numpy() if isinstance(value, Tensor) else value for name, value in outputs.items()}
    elapsed = time.perf_counter() - start
    lines = [f"ran on {model.device} in {elapsed:.3f} s: {stats.kernels} kernels, {stats.compiles} compiled, "
             f"{stats.cache_hits} from the disk cache"]
    for name, array in arrays.items():
        if isinstance(array, np.ndarray):
            preview = np.array2string(array.reshape(-1)[:6], precision=4, separator=", ")
            lines.append(f"  {name}: {array.dtype} {array.shape} {preview}")
        else:
            lines.append(f"  {name}: {type(array).__name__}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lazygrad.onnx", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="path to an .onnx file")
    parser.add_argument("--run", action="store_true", help="run the model on random inputs with DEBUG=2")
    parser.add_argument("--device", default=None, help="CPU, NPY, OPENCL, ... (default: DEV or CPU)")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="size of a symbolic dim")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        dims = {name: int(size) for name, size in (item.split("=", 1) for item in args.dim)}
    except ValueError:
        parser.error(f"--dim takes NAME=SIZE with an integer size, got {args.dim}")
    try:
        model = OnnxModel(args.model, device=args.device, strict=False)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(describe(model))
    if args.run:
        if model.unsupported():
            print("not running: the model uses unsupported operators", file=sys.stderr)
            return 1
        print(run_random(model, dims, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
