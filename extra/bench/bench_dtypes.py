"""Matmuls in the storage floats (bfloat16, float8) against float32, and against torch when installed.

    python extra/bench/bench_dtypes.py                  # the shapes below, 7 rounds
    python extra/bench/bench_dtypes.py --repeats 11

What is measured, per shape (M x K @ K x N, jitted, realized output included):
  f32          both operands float32
  bf16         both operands bfloat16 (accumulated in float32, rounded once)
  f32 x f8     float32 activations by float8_e4m3fn weights (the weights converted in the kernel)
  torch bf16   torch.matmul of bfloat16 tensors, when torch is installed
Each round runs every column once, in turn, so machine noise falls on all alike; medians are printed
with each column's ratio to f32 (below 1: faster). The bfloat16 result is checked against the float32
product of the same values rounded once.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from lazygrad import Tensor, dtypes  # noqa: E402
from lazygrad.jit import jit  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

SHAPES = [(1024, 1024, 1024), (128, 768, 3072), (1, 4096, 4096)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(f"{'shape':>22} {'f32 ms':>8} {'bf16':>14} {'f32 x f8':>14} {'torch bf16':>14}")
    status = 0
    for m, k, n in SHAPES:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        a32, b32 = Tensor(a).realize(), Tensor(b).realize()
        a16, b16 = a32.cast(dtypes.bfloat16).realize(), b32.cast(dtypes.bfloat16).realize()
        b8 = b32.cast(dtypes.float8_e4m3fn).realize()
        columns = {"f32": (jit(lambda x, y: x @ y), a32, b32), "bf16": (jit(lambda x, y: x @ y), a16, b16),
                   "f32 x f8": (jit(lambda x, y: x @ y), a32, b8)}
        if torch is not None:
            ta, tb = torch.from_numpy(a).bfloat16(), torch.from_numpy(b).bfloat16()
            columns["torch bf16"] = (lambda x, y: torch.matmul(x, y), ta, tb)
        for function, x, y in columns.values():  # compile, capture, first replay
            for _ in range(3):
                result = function(x, y)
                if isinstance(result, Tensor):
                    result.realize()
        expected = (a.astype(ml_dtypes.bfloat16).astype(np.float64) @ b.astype(ml_dtypes.bfloat16).astype(np.float64))
        got = columns["bf16"][0](a16, b16).float().numpy()
        if not np.allclose(got, expected, rtol=2 ** -7, atol=1e-3):
            print(f"{m}x{k} @ {k}x{n}: bfloat16 result differs from float32's rounded once")
            status = 1
        times: dict[str, list[float]] = {name: [] for name in columns}
        for _ in range(args.repeats):
            for name, (function, x, y) in columns.items():
                start = time.perf_counter()
                result = function(x, y)
                if isinstance(result, Tensor):
                    result.realize()
                times[name].append(time.perf_counter() - start)
        median = {name: statistics.median(values) * 1e3 for name, values in times.items()}
        cells = [f"{median[name]:7.2f} {median[name] / median['f32']:5.2f}x" if name in median else f"{'-':>14}"
                 for name in ("bf16", "f32 x f8", "torch bf16")]
        print(f"{f'{m}x{k} @ {k}x{n}':>22} {median['f32']:8.2f} " + " ".join(cells))
    return status


if __name__ == "__main__":
    sys.exit(main())
