"""Discrete Fourier transforms (lazygrad.fft) against numpy's and torch's FFTs, when installed.

    python extra/bench/bench_fft.py                 # the sizes below, 7 rounds
    python extra/bench/bench_fft.py --repeats 11

What is measured, per size (a batch of complex64 signals, the transform along the last axis):
  lazygrad   lazygrad.fft.fft, jitted, the realized output included
  numpy      np.fft.fft (numpy computes in complex128, then the result is cast to complex64)
  torch      torch.fft.fft of complex64, when torch is installed
Each round runs every column once, in turn, so machine noise falls on all alike; medians are printed,
with lazygrad's time over each other column's (above 1: lazygrad is slower). The result is checked
against numpy's.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from lazygrad import Tensor, derived_values, fft  # noqa: E402
from lazygrad.jit import jit  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

SIZES = [(256, 64), (1024, 64), (4096, 16), (1000, 16)]  # (length, batch)


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return (time.perf_counter() - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(f"{'length x batch':>16} {'lazygrad ms':>12} {'numpy ms':>9} {'ratio':>6} {'torch ms':>9} {'ratio':>6}")
    status = 0
    for n, batch in SIZES:
        rng = np.random.default_rng(0)
        data = (rng.standard_normal((batch, n)) + 1j * rng.standard_normal((batch, n))).astype(np.complex64)
        signal = Tensor(data).realize()
        transform = jit(lambda x: fft.fft(x).realize())
        def ours():
            derived_values.clear()  # every call computes all of it: no level kept from the last call's input
            return transform(signal).numpy()
        columns = {"lazygrad": ours,
                   "numpy": lambda: np.fft.fft(data).astype(np.complex64)}
        if torch is not None:
            torch_data = torch.from_numpy(data)
            columns["torch"] = lambda: torch.fft.fft(torch_data).numpy()
        for function in columns.values():  # warm up: compile, capture, caches
            function()
            function()
        error = np.abs(columns["lazygrad"]() - np.fft.fft(data)).max() / np.abs(np.fft.fft(data)).max()
        if error > 1e-5:
            print(f"n={n}: lazygrad's transform is off by {error:.2e} of the largest value")
            status = 1
        times = {name: [] for name in columns}
        for _ in range(args.repeats):
            for name, function in columns.items():
                times[name].append(_timed(function))
        ms = {name: statistics.median(values) for name, values in times.items()}
        torch_cells = (f"{ms['torch']:>9.3f} {ms['lazygrad'] / ms['torch']:>6.1f}" if "torch" in ms
                       else f"{'-':>9} {'-':>6}")
        print(f"{f'{n} x {batch}':>16} {ms['lazygrad']:>12.3f} {ms['numpy']:>9.3f} {ms['lazygrad'] / ms['numpy']:>6.1f} "
              f"{torch_cells}")
    return status


if __name__ == "__main__":
    sys.exit(main())
