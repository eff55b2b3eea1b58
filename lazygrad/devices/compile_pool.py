"""Compiling many kernels at once: each device's `compile_cached` run on worker threads.

The engine (realize.prepare_programs) renders every kernel of a schedule that is not loaded yet
and hands each source here as soon as it is rendered, so compiles overlap each other and the
rendering of the next kernel; BEAM compiles its candidates through the same pool. Threads are
enough: the C compiler is a separate process per kernel, so the GIL is free while it runs.

Workers per device: one per core this process may use for CPU (gcc processes) and OpenCL (PoCL
builds release the GIL: 8 programs in 2.4-2.5 s on two threads against 3.5-5.1 s on one); CUDA
compiles one at a time (untried: no GPU was at hand).
"""
from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

_POOLS: dict[int, ThreadPoolExecutor] = {}  # id(device) -> its pool


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def compile_workers(device) -> int:
    return usable_cores() if device.name.split(":")[0] in ("CPU", "OPENCL") else 1


def submit_compile(device, source: str) -> Future:
    """A future of `device.compile_cached(source)` (its binary, or the compile error it raises)."""
    pool = _POOLS.get(id(device))
    if pool is None:
        pool = _POOLS[id(device)] = ThreadPoolExecutor(compile_workers(device), thread_name_prefix="lazygrad-compile")
    return pool.submit(device.compile_cached, source)
