"""BEAM search: tunes one kernel's opts by timing candidates on its device.

Data path: realize.get_program calls `beam_opts(device_name, kernel, renderer)` when BEAM=N > 0,
before it linearizes the kernel. The search starts from the default heuristic's opts, and
each round extends every kept candidate by one more valid opt (codegen/opts.py), compiles the new
candidates (in parallel threads: the compiler is a separate process), runs each on random inputs,
discards any that fail to compile or disagree with the kernel without opts, and keeps the
N fastest. A kernel whose buffers fit in the last-level cache is timed on rotated copies of them, so
no run finds its inputs in the cache from the run before. It stops when a round finds nothing faster, after BEAM_TIMEOUT seconds, or after
MAX_ROUNDS. The winner is stored in the disk cache (table "beam") keyed by the kernel and the
device, so the next process starts at once; IGNORE_BEAM_CACHE=1 searches again.

DEBUG>=1 prints one line per kernel (the speedup found, or that it came from the BEAM cache);
DEBUG>=3 logs each discarded candidate with the reason.
"""
from __future__ import annotations

import glob
import json
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

from lazygrad.codegen.axes import merge_dims
from lazygrad.codegen.kernel import Kernel, format_ast
from lazygrad.codegen.linearize import kernel_source
from lazygrad.codegen.opts import (
    OPTS_VERSION,
    Opt,
    OptError,
    apply_opts,
    candidate_opts,
    heuristic_opts,
)
from lazygrad.devices import get_device, synchronize
from lazygrad.devices.compile_pool import submit_compile
from lazygrad.diskcache import cache_get, cache_key, cache_put
from lazygrad.knobs import knobs
from lazygrad.ops import Ops
from lazygrad.shape.symbolic import Lin, var

MAX_ROUNDS = 6
MAX_CANDIDATES_PER_ROUND = 40
COMPILE_CHUNK = 4         # candidates compiled together, then timed; the deadline is checked between them
TIMED_RUNS = 5
TIMING_BUDGET = 0.25      # seconds of runs per candidate at most (after its first run)
ROTATION_BYTES = 256 << 20  # memory for copies of a small kernel's buffers, timed in turn
MAX_ROTATED_SETS = 64


@dataclass
class Candidate:
    opts: tuple[Opt, ...]
    seconds: float


def _log(level: int, text: str) -> None:
    if knobs.debug >= level:
        print(text, file=sys.stderr)


def beam_cache_key(device_name: str, kernel: Kernel, width: int) -> str:
    dtypes = tuple(dtype.name for dtype in kernel.buffer_dtypes)
    return cache_key("beam", OPTS_VERSION, device_name, platform.machine(), width, format_ast(kernel.ast),
                     kernel.full_shape, kernel.reduce_axes, dtypes)


# ---- inputs and one candidate's run ------------------------------------------------------------

def _buffer_sizes(kernel: Kernel) -> list[int]:
    """Elements each buffer parameter needs: one past the largest index any access can form."""
    sizes = [1] * len(kernel.buffer_dtypes)
    for node in kernel.ast.walk():
        if node.op not in (Ops.LOAD, Ops.STORE):
            continue
        number, tracker = node.arg
        probe = [var(f"p{axis}", 0, size - 1) if size > 1 else Lin.of(0) for axis, size in enumerate(tracker.shape)]
        offset, _ = tracker.index_and_valid(probe)
        sizes[number] = max(sizes[number], offset.max + 1)
    return sizes


def _random_values(dtype, size: int, rng: np.random.Generator) -> np.ndarray:
    if dtype.is_bool:
        return rng.integers(0, 2, size).astype(dtype.np)
    if dtype.is_int:
        low = 0 if np.iinfo(dtype.np).min == 0 else -8
        return rng.integers(low, 9, size).astype(dtype.np)
    return rng.uniform(-1, 1, size).astype(dtype.np)


def _close(actual: np.ndarray, expected: np.ndarray) -> bool:
    """Whether a candidate's output matches the unoptimized kernel's (exactly for ints and bools)."""
    if not expected.dtype.kind == "f":
        return bool(np.array_equal(actual, expected))
    tolerance = 1e-2 if expected.dtype == np.float16 else 1e-4
    finite = expected[np.isfinite(expected)]
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    return bool(np.allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=tolerance,
                            atol=tolerance * max(scale, 1.0), equal_nan=True))


def last_level_cache_bytes() -> int:
    """The size of the CPU's largest cache (from Linux's sysfs), or 32 MiB when it cannot be read."""
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        with open(path) as handle:
            text = handle.read().strip()
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        if text[:-1].isdigit() and text[-1] in units:
            sizes.append(int(text[:-1]) * units[text[-1]])
    return max(sizes, default=32 << 20)


def rotated_set_count(set_bytes: int, cache_bytes: int) -> int:
    """How many copies of a kernel's buffers to time in turn so that each run finds its inputs out
    of the last-level cache, as a kernel in a real graph does (its inputs were written by other
    kernels long before): enough to fill the cache twice over, within ROTATION_BYTES."""
    if set_bytes >= cache_bytes:
        return 1
    wanted = -(-2 * cache_bytes // max(set_bytes, 1))
    return max(1, min(wanted, ROTATION_BYTES // max(set_bytes, 1), MAX_ROTATED_SETS))


class KernelBench:
    """Compiles, runs and checks variants of one kernel on fixed random inputs. Small kernels run
    on rotated copies of their buffers (`sets`, identical inputs), one copy per timed run."""

    def __init__(self, device_name: str, kernel: Kernel, renderer):
        self.device_name, self.device = device_name, get_device(device_name)
        self.kernel, self.renderer = kernel, renderer
        rng = np.random.default_rng(0)
        sizes = _buffer_sizes(kernel)
        self.buffers = [self.device.alloc(dtype, size) for dtype, size in zip(kernel.buffer_dtypes, sizes)]
        count = kernel.output_count
        for buffer, dtype, size in zip(self.buffers[count:], kernel.buffer_dtypes[count:], sizes[count:]):
            buffer.copyin(_random_values(dtype, size, rng))
        for buffer in self.buffers[:count]:  # as clear_outputs leaves them: a guarded store writes only some
            buffer.copyin(np.zeros(buffer.size, dtype=buffer.dtype.np))
        reference = self.build([])  # no opts (NOOPT's loop bodies, with threads: big kernels stay quick)
        reference(*self.buffers)
        self.expected = [buffer.numpy() for buffer in self.buffers[:count]]
        copies = rotated_set_count(sum(buffer.nbytes for buffer in self.buffers), last_level_cache_bytes())
        self.sets = [self.buffers] + [self._copy_of_buffers() for _ in range(copies - 1)]
        self.last_run = 0  # the set the latest run used: its outputs are the ones checked

    def _copy_of_buffers(self) -> list:
        copies = []
        for buffer in self.buffers:
            copy = self.device.alloc(buffer.dtype, buffer.size)
            copies.append(copy.copyin(buffer.numpy()))
        return copies

    def clear_outputs(self) -> None:
        """Zero every set's outputs, so a candidate that writes nothing cannot pass the check."""
        for buffers in self.sets:
            for output in buffers[:self.kernel.output_count]:
                output.copyin(np.zeros(output.size, dtype=output.dtype.np))

    def run(self, program) -> float:
        """Seconds of one run of program on the next set of buffers."""
        self.last_run = (self.last_run + 1) % len(self.sets)
        buffers = self.sets[self.last_run]
        start = time.perf_counter()
        program(*buffers)
        synchronize(self.device_name)  # a CUDA launch returns before its kernel has run
        return time.perf_counter() - start

    def source(self, opts) -> tuple[str, str]:
        program, source = kernel_source(self.kernel, self.renderer, opts)
        return program.name, source

    def build(self, opts):
        name, source = self.source(opts)
        return self.device.load(name, self.device.compile_cached(source), len(self.buffers))

    def matches(self) -> bool:
        outputs = self.sets[self.last_run][:self.kernel.output_count]
        return all(_close(buffer.numpy(), expected) for buffer, expected in zip(outputs, self.expected))

    def time(self, program, best: float) -> float:
        """Median seconds of a few runs after a warm-up; one whose warm-up is far slower than the
        best so far stops there."""
        first = self.run(program)
        if first > 3 * best:
            return first
        runs = []
        while len(runs) < TIMED_RUNS and sum(runs) < TIMING_BUDGET:
            runs.append(self.run(program))
        return statistics.median(runs)


# ---- the search --------------------------------------------------------------------------------

def _compile_all(bench: KernelBench, proposals: list[tuple[Opt, ...]]) -> dict:
    """Source of every proposal compiled side by side (devices/compile_pool.py, the engine's own
    path); a failure maps to the exception."""
    pending = {}
    for opts in proposals:
        try:
            name, source = bench.source(list(opts))
            pending[opts] = (name, submit_compile(bench.device, source))
        except Exception as error:  # a renderer bug in one candidate must not end the search
            pending[opts] = error
    compiled = {}
    for opts, entry in pending.items():
        if isinstance(entry, Exception):
            compiled[opts] = entry
            continue
        name, future = entry
        try:
            compiled[opts] = (name, future.result())
        except Exception as error:
            compiled[opts] = error
    return compiled


def _evaluate(bench: KernelBench, opts: tuple[Opt, ...], compiled, best: float) -> Candidate | None:
    if isinstance(compiled, Exception):
        _log(3, f"  BEAM discarded {[str(opt) for opt in opts]}: {type(compiled).__name__}: {str(compiled)[:200]}")
        return None
    name, binary = compiled
    try:
        program = bench.device.load(name, binary, len(bench.buffers))
        bench.clear_outputs()
        seconds = bench.time(program, best)
    except Exception as error:
        _log(3, f"  BEAM discarded {[str(opt) for opt in opts]}: {type(error).__name__}: {error}")
        return None
    if not bench.matches():
        _log(3, f"  BEAM discarded {[str(opt) for opt in opts]}: result differs from the kernel without opts")
        return None
    return Candidate(opts, seconds)


def _progress(name: str, round_number: int, done: int, total: int, best: Candidate) -> None:
    text = f"\rBEAM {name}: round {round_number}, {done}/{total} candidates, best {best.seconds * 1e3:.3f} ms"
    print(text, end="", file=sys.stderr, flush=True)


def _starting_beam(bench: KernelBench, kernel: Kernel, renderer) -> tuple[list[Candidate], Candidate, set]:
    """The first candidates: the heuristic's opts and each shorter prefix of them (so a tile can
    take another shape), or no opts when the heuristic has none or its kernel fails. Growing from
    no opts as well would time kernels that drop linearize's own arrangement of a strided reduce,
    which can take a minute a run. Also the default candidate and the lists already tried."""
    heuristic = tuple(heuristic_opts(kernel, renderer))
    starts = [heuristic[:length] for length in range(len(heuristic), 0, -1)] or [()]
    compiled = _compile_all(bench, starts)
    timed = [_evaluate(bench, opts, compiled[opts], float("inf")) for opts in starts]
    beam = sorted((candidate for candidate in timed if candidate is not None), key=lambda c: c.seconds)
    if not beam and starts != [()]:
        compiled = _compile_all(bench, [()])
        beam = [candidate for candidate in [_evaluate(bench, (), compiled[()], float("inf"))] if candidate]
    if not beam:
        raise RuntimeError(f"BEAM: {kernel.name} without opts does not run correctly on {bench.device.name}")
    return beam, timed[0] if timed[0] is not None else beam[0], set(starts) | {()}


def _proposals(beam: list[Candidate], kernel: Kernel, renderer, seen: set, rng: random.Random) -> list[tuple]:
    """Each kept candidate extended by one valid opt, not tried before; at most
    MAX_CANDIDATES_PER_ROUND of them, drawn at random."""
    proposals = []
    for candidate in beam:
        optimized = apply_opts(kernel, list(candidate.opts), renderer)
        for opt in candidate_opts(optimized, renderer):
            extended = candidate.opts + (opt,)
            if extended not in seen:
                seen.add(extended)
                proposals.append(extended)
    rng.shuffle(proposals)
    return proposals[:MAX_CANDIDATES_PER_ROUND]


def search(device_name: str, kernel: Kernel, renderer, width: int, timeout: float) -> tuple[Candidate, Candidate]:
    """(the best candidate, the default heuristic's) for a dim-merged kernel."""
    deadline = time.perf_counter() + timeout
    bench = KernelBench(device_name, kernel, renderer)
    beam, default, seen = _starting_beam(bench, kernel, renderer)
    beam = beam[:width]
    rng = random.Random(0)
    show_progress = sys.stderr.isatty() or knobs.debug >= 1
    for round_number in range(1, MAX_ROUNDS + 1):
        proposals = _proposals(beam, kernel, renderer, seen, rng)
        found = []
        for done, opts in enumerate(proposals):
            if time.perf_counter() > deadline:
                break
            if done % COMPILE_CHUNK == 0:
                compiled = _compile_all(bench, proposals[done:done + COMPILE_CHUNK])
            candidate = _evaluate(bench, opts, compiled[opts], beam[0].seconds)
            if candidate is not None:
                found.append(candidate)
            if show_progress:
                _progress(kernel.name, round_number, done + 1, len(proposals), beam[0])
        best_before = beam[0].seconds
        beam = sorted(beam + found, key=lambda c: c.seconds)[:width]
        if beam[0].seconds >= best_before or time.perf_counter() > deadline:
            break
    if show_progress:
        print("\r\033[K", end="", file=sys.stderr, flush=True)
    return beam[0], default


def beam_opts(device_name: str, kernel: Kernel, renderer) -> list[Opt]:
    """The opts BEAM chose for this kernel (from the disk cache unless IGNORE_BEAM_CACHE=1)."""
    merged = merge_dims(kernel)
    key = beam_cache_key(device_name, merged, knobs.beam)
    cached = None if knobs.ignore_beam_cache else cache_get("beam", key)
    if cached is not None:
        opts = [Opt(*entry) for entry in json.loads(cached)["opts"]]
        try:
            apply_opts(merged, opts, renderer)
        except OptError:
            opts = None  # written by a different version of the opts: search again
        if opts is not None:
            _log(1, f"BEAM {kernel.name}: from the BEAM cache: {[str(opt) for opt in opts]}")
            return opts
    start = time.perf_counter()
    best, default = search(device_name, merged, renderer, knobs.beam, knobs.beam_timeout)
    took = time.perf_counter() - start
    _log(1, f"BEAM {kernel.name}: {default.seconds * 1e3:.3f} ms -> {best.seconds * 1e3:.3f} ms "
            f"({default.seconds / best.seconds:.2f}x over the default opts) with {[str(opt) for opt in best.opts]}, "
            f"searched in {took:.1f} s")
    record = {"opts": [[opt.op, opt.axis, opt.amount] for opt in best.opts], "seconds": best.seconds,
              "default_seconds": default.seconds, "search_seconds": took}
    cache_put("beam", key, json.dumps(record).encode())
    return list(best.opts)
