"""Kernel benchmarks: lazygrad's default opts and BEAM=4 against numpy and torch, in one run.

    python extra/bench/bench_kernels.py                     # everything, 7 timed runs each
    python extra/bench/bench_kernels.py --only matmul,conv2d --beam 2 --repeats 5
    python extra/bench/bench_kernels.py --beam 0            # skip the BEAM column

What is measured (float32)
  matmul N   NxN @ NxN (numpy and torch call BLAS)
  conv2d     input 32x16x32x32, weight 32x16x3x3, padding 1 (numpy: im2col windows + tensordot)
  softmax    row softmax of 4096x4096, from primitives (max, exp, sum, divide); torch.softmax
  sum rows   x.sum(axis=1) of 4096x4096; "of copy" is its bandwidth over numpy's copy bandwidth
  chain      ((a*b + c).relu() * 0.5 - a).exp() + 1).sqrt() on 2^24 elements (transcendental chain)

How it is timed: inputs are realized once; each repetition builds the lazy graph afresh and only
`.realize()` is timed; median of `--repeats` runs after one warm-up run. The BEAM column runs the
same graph under `Context(BEAM=N)`; its search time is the warm-up run's wall time (compiling
and searching every kernel of the graph), taken with IGNORE_BEAM_CACHE=1 unless --beam-cache. Each
lazygrad result is checked against numpy once, so a fast wrong kernel shows.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import bench_copy, check, cpu_model, median_seconds  # noqa: E402
from lazygrad import Context, Tensor, derived_values, stats  # noqa: E402
from lazygrad.devices import synchronize  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

SQUARE_N = 4096
CHAIN_N = 2 ** 24
F32 = 4


@dataclass
class Case:
    name: str
    build: Callable[[], Tensor]          # the lazygrad graph, built afresh each run
    reference: Callable[[], np.ndarray]  # numpy
    torch_run: Callable[[], object] | None
    work: float                          # flops (GFLOP/s) or bytes moved (GB/s) per run
    unit: str
    rtol: float = 1e-4


@dataclass
class Result:
    case: Case
    default_s: float
    beam_s: float | None
    beam_search_s: float | None
    numpy_s: float
    torch_s: float | None
    kernels: int
    check: str


def time_realize(build: Callable[[], Tensor], repeats: int) -> tuple[float, float, Tensor]:
    """(median seconds, seconds of the warm-up run, last result) of realizing fresh graphs."""
    start = time.perf_counter()
    out = build().realize()
    synchronize(out.device)  # a GPU's kernels run after realize returns
    warmup = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        out = build()
        derived_values.clear()  # every run computes all of it: no operand packed by an earlier run
        start = time.perf_counter()
        out.realize()
        synchronize(out.device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), warmup, out


def realized(*shape) -> tuple[Tensor, np.ndarray]:
    tensor = Tensor.rand(*shape).realize()
    return tensor, tensor.numpy()


def matmul_case(n: int) -> Case:
    (a, an), (b, bn) = realized(n, n), realized(n, n)
    ta, tb = (torch.from_numpy(an), torch.from_numpy(bn)) if torch else (None, None)
    return Case(f"matmul {n}", lambda: a @ b, lambda: an @ bn, (lambda: ta @ tb) if torch else None,
                2 * n ** 3, "GFLOP/s", rtol=1e-3)


def conv2d_case() -> Case:
    (x, xn), (w, wn) = realized(32, 16, 32, 32), realized(32, 16, 3, 3)
    tx, tw = (torch.from_numpy(xn), torch.from_numpy(wn)) if torch else (None, None)

    def numpy_conv():
        padded = np.pad(xn, ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # n c h w kh kw
        return np.tensordot(windows, wn, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)

    torch_run = (lambda: torch.nn.functional.conv2d(tx, tw, padding=1)) if torch else None
    flops = 2 * 32 * 32 * 32 * 32 * 16 * 9
    return Case("conv2d", lambda: x.conv2d(w, padding=1), numpy_conv, torch_run, flops, "GFLOP/s", rtol=1e-3)


def softmax_case() -> Case:
    x, xn = realized(SQUARE_N, SQUARE_N)
    tx = torch.from_numpy(xn) if torch else None

    def lazygrad_softmax():
        e = (x - x.max(axis=1, keepdim=True)).exp()
        return e / e.sum(axis=1, keepdim=True)

    def numpy_softmax():
        e = np.exp(xn - xn.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    torch_run = (lambda: torch.softmax(tx, dim=1)) if torch else None
    return Case("softmax", lazygrad_softmax, numpy_softmax, torch_run, 2 * F32 * SQUARE_N ** 2, "GB/s")


def sum_case() -> Case:
    x, xn = realized(SQUARE_N, SQUARE_N)
    tx = torch.from_numpy(xn) if torch else None
    return Case("sum rows", lambda: x.sum(axis=1), lambda: xn.sum(axis=1), (lambda: tx.sum(dim=1)) if torch else None,
                F32 * (SQUARE_N ** 2 + SQUARE_N), "GB/s")


def chain_case() -> Case:
    (a, an), (b, bn), (c, cn) = realized(CHAIN_N), realized(CHAIN_N), realized(CHAIN_N)
    ta, tb, tc = (torch.from_numpy(v) for v in (an, bn, cn)) if torch else (None, None, None)
    half = np.float32(0.5)
    return Case("chain", lambda: (((a * b + c).relu() * 0.5 - a).exp() + 1).sqrt(),
                lambda: np.sqrt(np.exp(np.maximum(an * bn + cn, 0) * half - an) + np.float32(1)),
                (lambda: (((ta * tb + tc).relu() * 0.5 - ta).exp() + 1).sqrt()) if torch else None,
                4 * F32 * CHAIN_N, "GB/s")


CASES = {"matmul": None, "conv2d": conv2d_case, "softmax": softmax_case, "sum": sum_case, "chain": chain_case}


def run_case(case: Case, repeats: int, beam: int, beam_cache: bool) -> Result:
    default_s, _, out = time_realize(case.build, repeats)
    expected = case.reference()
    verdict = check(out.numpy(), expected, rtol=case.rtol)
    stats.reset()
    case.build().realize()
    kernels = stats.kernels
    beam_s = beam_search_s = None
    if beam:
        with Context(BEAM=beam, IGNORE_BEAM_CACHE=not beam_cache):
            beam_s, beam_search_s, beam_out = time_realize(case.build, repeats)
        beam_verdict = check(beam_out.numpy(), expected, rtol=case.rtol)
        if beam_verdict != "OK":
            verdict = f"BEAM {beam_verdict}"
    numpy_s, _ = median_seconds(case.reference, repeats)
    torch_s = median_seconds(case.torch_run, repeats)[0] if case.torch_run else None
    return Result(case, default_s, beam_s, beam_search_s, numpy_s, torch_s, kernels, verdict)


def print_results(results: list[Result], copy_gbs: float, beam: int) -> None:
    columns = f"{'benchmark':<12}{'default ms':>11}{f'BEAM={beam} ms':>12}{'search s':>9}{'numpy ms':>10}{'torch ms':>10}" \
              f"{'default':>9}{'BEAM':>8}{'numpy':>8}{'torch':>8}{'unit':>8}{'kernels':>8}  check"
    print(columns)
    print("-" * len(columns))

    def ms(seconds):
        return f"{seconds * 1e3:.2f}" if seconds is not None else "-"

    def rate(seconds, work):
        return f"{work / seconds / 1e9:.1f}" if seconds is not None else "-"
    for result in results:
        case = result.case
        search = f"{result.beam_search_s:.1f}" if result.beam_search_s is not None else "-"
        print(f"{case.name:<12}{ms(result.default_s):>11}{ms(result.beam_s):>12}{search:>9}{ms(result.numpy_s):>10}"
              f"{ms(result.torch_s):>10}{rate(result.default_s, case.work):>9}{rate(result.beam_s, case.work):>8}"
              f"{rate(result.numpy_s, case.work):>8}{rate(result.torch_s, case.work):>8}{case.unit:>8}"
              f"{result.kernels:>8}  {'OK' if result.check == 'OK' else 'MISMATCH'}")
    print(f"numpy copy bandwidth (the floor for memory-bound kernels): {copy_gbs:.1f} GB/s")
    for result in results:
        if result.check != "OK":
            print(f"  {result.case.name}: {result.check}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per benchmark (median)")
    parser.add_argument("--beam", type=int, default=4, help="BEAM width for the BEAM column (0: skip it)")
    parser.add_argument("--beam-cache", action="store_true", help="reuse BEAM results from the disk cache")
    parser.add_argument("--matmul", default="512,1024,2048", help="matmul sizes, e.g. 512,1024")
    parser.add_argument("--only", default=",".join(CASES), help=f"benchmarks to run, from {','.join(CASES)}")
    args = parser.parse_args()
    print(f"machine: {cpu_model()}; torch {torch.__version__ + f' ({torch.get_num_threads()} threads)' if torch else 'not installed'}")
    copy_gbs = bench_copy(args.repeats)
    results = []
    for name in args.only.split(","):
        if name == "matmul":
            cases = [matmul_case(int(size)) for size in args.matmul.split(",")]
        else:
            cases = [CASES[name]()]
        for case in cases:
            results.append(run_case(case, args.repeats, args.beam, args.beam_cache))
            print(f"  done: {case.name}", file=sys.stderr, flush=True)
    print_results(results, copy_gbs, args.beam)


if __name__ == "__main__":
    main()
