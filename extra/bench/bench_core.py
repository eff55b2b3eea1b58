"""Core benchmarks: lazygrad against numpy (and torch, when installed) on this machine.

    python extra/bench/bench_core.py                  # everything, 5 timed runs each
    python extra/bench/bench_core.py --quick          # skip the 2048 matmul
    python extra/bench/bench_core.py --matmul 512,1024 --repeats 9 --device CPU

What is measured
  copy       numpy copy of 64 MiB into a preallocated array: the memory bandwidth floor
  ew         ((a*b + c).relu() * 0.5 - a) on 2^24 float32: memory bound, 3 reads + 1 write
  ew+exp     the same chain followed by .exp() + 1 and .sqrt(): adds transcendental work
  sum        x.sum(axis=1) of a 4096x4096 float32
  softmax    row softmax of 4096x4096 written from primitives (max, exp, sum, divide)
  matmul N   float32 NxN @ NxN; numpy calls BLAS

How it is timed
  lazygrad: inputs are realized once; each repetition builds the lazy graph afresh and only
  `.realize()` is timed. One warm-up run (it includes compiling) precedes the median of
  `--repeats` runs. numpy and torch: the median of the same number of runs after one warm-up.
  lazygrad's result is checked once against numpy per benchmark, so a fast wrong kernel shows.

GB/s counts bytes read plus bytes written, in units of 1e9 bytes. "vs np" is how many times
faster lazygrad is than numpy (above 1: lazygrad is faster); "of copy" is the achieved bandwidth
as a fraction of the numpy copy bandwidth.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from lazygrad import Tensor, derived_values, stats  # noqa: E402
from lazygrad.devices import synchronize  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

ELEMENTWISE_N = 2 ** 24
SQUARE_N = 4096
COPY_BYTES = 64 * 2 ** 20
F32 = 4


# ---------------------------------------------------------------------------------------------
# Timing and checking
# ---------------------------------------------------------------------------------------------

def median_seconds(run: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median wall time of `repeats` calls of `run` after one warm-up; also the last result."""
    result = run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def time_lazygrad(build: Callable[[], Tensor], repeats: int) -> tuple[float, Tensor]:
    """Median time of `.realize()` on a freshly built graph; the warm-up run compiles."""
    build().realize()
    times, out = [], None
    for _ in range(repeats):
        out = build()
        derived_values.clear()  # every run computes all of it: no operand packed by an earlier run
        start = time.perf_counter()
        out.realize()
        synchronize(out.device)  # a GPU's kernels run after realize returns
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def check(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-4, atol: float = 1e-5) -> str:
    """'OK', or a one-line description of how lazygrad's result differs from numpy's."""
    try:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
        return "OK"
    except AssertionError:
        if actual.shape != expected.shape:
            return f"MISMATCH shape {actual.shape} vs {expected.shape}"
        bad = ~np.isclose(actual, expected, rtol=rtol, atol=atol)
        first = np.unravel_index(np.argmax(bad), bad.shape)
        diff = np.abs(actual.astype(np.float64) - expected)
        return (f"MISMATCH {int(bad.sum())}/{bad.size} elements, max abs diff {np.nanmax(diff):.3g}, "
                f"first at {tuple(int(i) for i in first)}: {actual[first]!r} vs {expected[first]!r}")


# ---------------------------------------------------------------------------------------------
# Results table
# ---------------------------------------------------------------------------------------------

@dataclass
class Row:
    name: str
    lazygrad_s: float
    numpy_s: float
    work: float = 0.0           # bytes moved (GB/s) or flops (GFLOP/s) per run
    unit: str = "GB/s"
    torch_s: float | None = None
    of_copy: bool = False       # also report bandwidth as a fraction of the copy floor
    kernels: int | None = None
    check: str = "OK"
    notes: list[str] = field(default_factory=list)


def rate(work: float, seconds: float) -> float:
    return work / seconds / 1e9


def print_table(rows: list[Row], copy_gbs: float, with_torch: bool) -> None:
    header = f"{'benchmark':<12}{'lazygrad ms':>12}{'numpy ms':>10}"
    if with_torch:
        header += f"{'torch ms':>10}"
    header += f"{'lg rate':>9}{'np rate':>9}{'unit':>8}{'vs np':>7}{'of copy':>9}{'kernels':>9}  check"
    print(header)
    print("-" * len(header))
    print(f"{'copy 64MiB':<12}{'':>12}{'':>10}" + (f"{'':>10}" if with_torch else "")
          + f"{'':>9}{copy_gbs:>9.1f}{'GB/s':>8}{'':>7}{1.0:>9.2f}{'':>9}")
    for row in rows:
        line = f"{row.name:<12}{row.lazygrad_s * 1e3:>12.2f}{row.numpy_s * 1e3:>10.2f}"
        if with_torch:
            line += f"{row.torch_s * 1e3:>10.2f}" if row.torch_s is not None else f"{'-':>10}"
        if row.work:
            line += f"{rate(row.work, row.lazygrad_s):>9.1f}{rate(row.work, row.numpy_s):>9.1f}{row.unit:>8}"
        else:
            line += f"{'-':>9}{'-':>9}{'':>8}"
        line += f"{row.numpy_s / row.lazygrad_s:>7.2f}"
        line += f"{rate(row.work, row.lazygrad_s) / copy_gbs:>9.2f}" if row.of_copy else f"{'-':>9}"
        line += f"{row.kernels:>9}" if row.kernels is not None else f"{'-':>9}"
        line += "  " + ("OK" if row.check == "OK" else "MISMATCH")
        print(line)
    for row in rows:
        if row.check != "OK":
            print(f"  {row.name}: {row.check}")


# ---------------------------------------------------------------------------------------------
# Benchmarks
# ---------------------------------------------------------------------------------------------

def rand(shape, device: str) -> tuple[Tensor, np.ndarray]:
    """A realized lazygrad tensor and a numpy copy of the same values."""
    tensor = Tensor.rand(*shape, device=device).realize()
    return tensor, tensor.numpy()


def to_torch(array: np.ndarray):
    return torch.from_numpy(array) if torch is not None else None


def bench_copy(repeats: int) -> float:
    src = np.random.default_rng(0).random(COPY_BYTES // F32, dtype=np.float32)
    dst = np.empty_like(src)
    dst.fill(0)  # touch every page before timing
    seconds, _ = median_seconds(lambda: np.copyto(dst, src), repeats)
    return rate(2 * COPY_BYTES, seconds)


def bench_elementwise(device: str, repeats: int) -> list[Row]:
    (a, an), (b, bn), (c, cn) = (rand((ELEMENTWISE_N,), device) for _ in range(3))
    ta, tb, tc = to_torch(an), to_torch(bn), to_torch(cn)
    moved = 4 * F32 * ELEMENTWISE_N  # 3 reads + 1 write

    def lg_chain(): return (a * b + c).relu() * 0.5 - a
    def np_chain(): return np.maximum(an * bn + cn, 0) * np.float32(0.5) - an
    def torch_chain(): return (ta * tb + tc).relu() * 0.5 - ta

    cases = [
        ("ew", lg_chain, np_chain, torch_chain, True),
        ("ew+exp", lambda: ((lg_chain()).exp() + 1).sqrt(),
         lambda: np.sqrt(np.exp(np_chain()) + np.float32(1)),
         lambda: (torch_chain().exp() + 1).sqrt(), False),
    ]
    rows = []
    for name, lg, ref, tch, of_copy in cases:
        lg_s, out = time_lazygrad(lg, repeats)
        np_s, expected = median_seconds(ref, repeats)
        torch_s = median_seconds(tch, repeats)[0] if torch is not None else None
        rows.append(Row(name, lg_s, np_s, moved, torch_s=torch_s, of_copy=of_copy,
                        check=check(out.numpy(), expected)))
    return rows


def bench_sum(device: str, repeats: int) -> Row:
    x, xn = rand((SQUARE_N, SQUARE_N), device)
    tx = to_torch(xn)
    moved = F32 * SQUARE_N * SQUARE_N + F32 * SQUARE_N
    lg_s, out = time_lazygrad(lambda: x.sum(axis=1), repeats)
    np_s, expected = median_seconds(lambda: xn.sum(axis=1), repeats)
    torch_s = median_seconds(lambda: tx.sum(dim=1), repeats)[0] if torch is not None else None
    return Row("sum axis=1", lg_s, np_s, moved, torch_s=torch_s, of_copy=True, check=check(out.numpy(), expected))


def bench_softmax(device: str, repeats: int) -> Row:
    x, xn = rand((SQUARE_N, SQUARE_N), device)
    tx = to_torch(xn)

    def lg_softmax():
        m = x.max(axis=1, keepdim=True)
        e = (x - m).exp()
        return e / e.sum(axis=1, keepdim=True)

    def np_softmax():
        e = np.exp(xn - xn.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def torch_softmax():
        e = (tx - tx.max(dim=1, keepdim=True).values).exp()
        return e / e.sum(dim=1, keepdim=True)

    lg_s, out = time_lazygrad(lg_softmax, repeats)
    stats.reset()
    lg_softmax().realize()
    kernels = stats.kernels
    np_s, expected = median_seconds(np_softmax, repeats)
    torch_s = median_seconds(torch_softmax, repeats)[0] if torch is not None else None
    return Row("softmax", lg_s, np_s, torch_s=torch_s, kernels=kernels, check=check(out.numpy(), expected))


def bench_matmul(n: int, device: str, repeats: int) -> Row:
    (a, an), (b, bn) = rand((n, n), device), rand((n, n), device)
    ta, tb = to_torch(an), to_torch(bn)
    lg_s, out = time_lazygrad(lambda: a @ b, repeats)
    np_s, expected = median_seconds(lambda: an @ bn, repeats)
    torch_s = median_seconds(lambda: ta @ tb, repeats)[0] if torch is not None else None
    return Row(f"matmul {n}", lg_s, np_s, 2 * n ** 3, unit="GFLOP/s", torch_s=torch_s,
               check=check(out.numpy(), expected, rtol=1e-3))


# ---------------------------------------------------------------------------------------------
# Machine description and main
# ---------------------------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def print_machine(device: str, repeats: int) -> None:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine : {cpu_model()}, {os.cpu_count()} logical cores ({usable} usable)")
    print(f"python  : {platform.python_version()}, numpy {np.__version__}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"torch   : {torch.__version__ + f', {torch.get_num_threads()} threads' if torch else 'not installed'}")
    print(f"lazygrad: device {device}, median of {repeats} runs after 1 warm-up")
    print()


def parse_sizes(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--matmul expects sizes like 512,1024, got {text!r}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="CPU", help="lazygrad device for the tensors (default CPU)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per benchmark (median reported)")
    parser.add_argument("--matmul", type=parse_sizes, default=[512, 1024, 2048], help="matmul sizes, e.g. 512,1024")
    parser.add_argument("--quick", action="store_true", help="skip matmul sizes above 1024")
    args = parser.parse_args()
    sizes = [n for n in args.matmul if not (args.quick and n > 1024)]

    print_machine(args.device, args.repeats)
    copy_gbs = bench_copy(args.repeats)
    rows = bench_elementwise(args.device, args.repeats)
    rows.append(bench_sum(args.device, args.repeats))
    rows.append(bench_softmax(args.device, args.repeats))
    for n in sizes:
        rows.append(bench_matmul(n, args.device, args.repeats))
    print_table(rows, copy_gbs, with_torch=torch is not None)


if __name__ == "__main__":
    main()
