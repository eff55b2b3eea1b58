"""Compiling many kernels at once: each device's `compile_cached` run on worker threads.

The engine (realize.prepare_programs) renders every kernel of a schedule that is not loaded yet
and hands each source to a `CompileBatch` as soon as it is rendered, so compiles overlap each other
and the rendering of the next kernel; BEAM compiles its candidates through the same pool
(`submit_compile`). Threads are enough: the C compiler is a separate process, so the GIL is free
while it runs.

A device that can compile several kernels in one compiler run (`compile_together`: the CPU, and
OpenCL as one program) gets the kernels missing from its disk cache in groups (a gcc run costs about
26 ms besides its kernels; a PoCL program build about 0.1 s besides its kernels' 0.1-1.5 s). A group
goes to the pool once its estimated work reaches GROUP_SECONDS; what is left when the schedule ends
is split over the workers. The CPU aligns every function to a cache line (cpu.py), so a kernel's
loops lie at the same offsets within cache lines in a group as alone, and run as fast.

Workers per device: one per core this process may use for CPU (gcc processes) and OpenCL (PoCL
builds release the GIL: 8 programs in 2.4-2.5 s on two threads against 3.5-5.1 s on one); CUDA
compiles one at a time (untried: no GPU was at hand).
"""
from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

_POOLS: dict[int, ThreadPoolExecutor] = {}  # id(device) -> its pool

# A kernel's compile alone at -O3 with gcc 12 here: about 40 ms and 0.3 ms per statement (a `;` of
# its source), fitted over the 642 kernels of MobileNetV2's training step and of ResNet-18's and
# MobileNetV2's inference (a register tile of 1073 statements, ResNet-18's at batch 16, 0.39 s; a
# copy 30-50 ms). Characters measure it badly: a vector literal of 16 lanes is one long, cheap
# line. A run's own cost (process start, assembler, link) is about 26 ms of those 40, so a group of
# about 0.3 s spends a sixth of its time on it where each kernel alone spent two thirds; a big
# kernel goes alone.
GROUP_SECONDS = 0.3
ALONE_SECONDS = 0.12


def estimated_compile_seconds(source: str) -> float:
    return 0.04 + 3e-4 * source.count(";")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def compile_workers(device) -> int:
    return usable_cores() if device.name.split(":")[0] in ("CPU", "OPENCL") else 1


def _pool(device) -> ThreadPoolExecutor:
    pool = _POOLS.get(id(device))
    if pool is None:
        pool = _POOLS[id(device)] = ThreadPoolExecutor(compile_workers(device), thread_name_prefix="lazygrad-compile")
    return pool


def submit_compile(device, source: str) -> Future:
    """A future of `device.compile_cached(source)` (its binary, or the compile error it raises)."""
    return _pool(device).submit(device.compile_cached, source)


class CompileBatch:
    """The compiles of one schedule: `submit(name, source)` gives a future of the kernel's binary;
    `close()` sends what is still held, and must come before waiting on any of them."""

    def __init__(self, device):
        self.device = device
        self.together = hasattr(device, "compile_together")
        self.held: list[tuple[str, str, Future]] = []
        self.held_seconds = 0.0

    def submit(self, name: str, source: str) -> Future:
        if not self.together:
            return submit_compile(self.device, source)
        future: Future = Future()
        binary = self.device.cached(source)
        if binary is not None:
            future.set_result(binary)
            return future
        seconds = estimated_compile_seconds(source)
        if seconds >= ALONE_SECONDS:
            self._send([(name, source, future)])
            return future
        self.held.append((name, source, future))
        self.held_seconds += seconds
        if self.held_seconds >= GROUP_SECONDS:
            self._send(self.held)
            self.held, self.held_seconds = [], 0.0
        return future

    def close(self) -> None:
        workers = compile_workers(self.device)
        for start in range(min(workers, len(self.held))):
            self._send(self.held[start::workers])
        self.held, self.held_seconds = [], 0.0

    def _send(self, group: list[tuple[str, str, Future]]) -> None:
        def finish(done: Future) -> None:
            if done.exception() is None:
                for (_, _, future), binary in zip(group, done.result()):
                    future.set_result(binary)
                return
            if len(group) == 1:
                group[0][2].set_exception(done.exception())
                return
            # one kernel of the group failed, or the compiler: compile each alone, so each error
            # is its own kernel's and the others still compile
            for _, source, future in group:
                submit_compile(self.device, source).add_done_callback(lambda alone, future=future: _copy(alone, future))
        _pool(self.device).submit(self.device.compile_together, [(name, source) for name, source, _ in group]) \
            .add_done_callback(finish)


def _copy(done: Future, future: Future) -> None:
    if done.exception() is None:
        future.set_result(done.result())
    else:
        future.set_exception(done.exception())
