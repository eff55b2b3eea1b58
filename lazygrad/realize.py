"""The engine: realizes lazy nodes by scheduling, rendering, compiling (cached) and running kernels.

    realize([node, ...])
      schedule -> [ScheduleItem]            schedule/fuse.py
      for each kernel: linearize + render   renderer/
                       compile (disk cache) devices/<dev>.py
                       run, time, count     here (DEBUG output and lazygrad.stats)

The NPY device skips all of that and interprets the graph with numpy.

While `recording` is set (lazygrad.jit captures a function), every launch is also appended to it, so
the same programs can later run again on the same buffers without any of the steps above.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from lazygrad.beam import beam_opts
from lazygrad.devices import get_device
from lazygrad.graph import write_graph
from lazygrad.knobs import knobs
from lazygrad.lazy import LazyBuffer, walk
from lazygrad.renderer.c import CRenderer
from lazygrad.renderer.cuda import CUDARenderer
from lazygrad.renderer.linearize import linearize
from lazygrad.renderer.opencl import OpenCLRenderer
from lazygrad.schedule.fuse import ScheduleItem, create_schedule
from lazygrad.schedule.kernel import Kernel, format_ast
from lazygrad.stats import stats

RENDERERS = {"CPU": CRenderer(), "OPENCL": OpenCLRenderer(), "CUDA": CUDARenderer()}


@dataclass
class CompiledKernel:
    name: str
    source: str
    program: object
    global_size: tuple[int, ...]
    flops: int
    opts: tuple = ()            # the opts its loops were arranged with (renderer/opts.py)


_PROGRAMS: dict[tuple[str, Kernel, bool, int], CompiledKernel] = {}


@dataclass
class Launch:
    """One recorded step: a program run on buffers (its outputs first, then its inputs), or a copy
    of buffers[1] into buffers[0] when program is None (nothing at all for empty outputs, which have
    no input)."""
    program: object | None
    buffers: list
    in_place: tuple[bool, ...]  # per output: written into a buffer that existed before

    @property
    def inputs(self) -> list:
        return self.buffers[len(self.in_place):]


class Recording:
    """What runs while a jit capture is on: launches in order, buffers filled from the host (those
    with random numbers are drawn anew on each replay), and why replay is impossible if something
    ran without launches."""

    def __init__(self):
        self.launches: list[Launch] = []
        self.refills: list[tuple[object, object]] = []  # (buffer, function returning its new values)
        self.host_made: set[int] = set()                 # ids of buffers filled from host arrays
        self.not_replayable: str | None = None


recording: Recording | None = None


def record_host_buffer(buffer) -> None:
    """Tensor creation from host data calls this: such a buffer is a constant of the capture."""
    if recording is not None:
        recording.host_made.add(id(buffer))


def record_refill(buffer, make_values) -> None:
    """Random creation calls this: a replay refills `buffer` with `make_values()`."""
    if recording is not None:
        recording.refills.append((buffer, make_values))


def get_program(device_name: str, kernel: Kernel) -> CompiledKernel:
    """The runnable program for a kernel, from memory, the disk cache or the compiler. Its opts come
    from BEAM search when BEAM > 0, else from the default heuristic (none with NOOPT=1)."""
    key = (device_name, kernel, knobs.noopt, knobs.beam)
    if key in _PROGRAMS:
        return _PROGRAMS[key]
    device = get_device(device_name)
    renderer = RENDERERS[device_name.split(":")[0]]
    opts = beam_opts(device_name, kernel, renderer) if knobs.beam and not knobs.noopt else None
    program = linearize(kernel, renderer, optimize=not knobs.noopt, opts=opts)
    source = renderer.render_program(program)
    if knobs.debug >= 3:
        print(f"kernel {program.name}: full shape {kernel.full_shape}, reduce axes {kernel.reduce_axes}\n"
              f"{format_ast(kernel.ast)}\n"
              f"loops: global {[(loop.var, loop.size) for loop in program.global_loops]}, "
              f"reduce {[(loop.var, loop.size) for loop in program.reduce_loops]}, "
              f"parallel={program.parallel}, opts {[str(opt) for opt in program.opts]}", file=sys.stderr)
    if knobs.debug >= 4:
        print(source, file=sys.stderr)
    if knobs.debug >= 6:
        print(device.compiler.assembly(source), file=sys.stderr)
    binary = device.compile_cached(source)
    compiled = CompiledKernel(program.name, source, device.load(program.name, binary, len(program.params)),
                              tuple(loop.size for loop in program.global_loops), kernel.count_flops(),
                              program.opts)
    _PROGRAMS[key] = compiled
    return compiled


def _run_item(item: ScheduleItem) -> float:
    """Run one schedule item and realize its outputs; returns seconds spent on the device."""
    device = get_device(item.outputs[0].device)
    for node in item.inputs:
        node.check_current()
    buffers = [output.srcs[1].buffer if in_place else device.alloc(output.dtype, output.numel())
               for output, in_place in zip(item.outputs, item.in_place)]
    in_place = tuple(item.in_place)
    if item.kernel is None:  # a copy between devices
        buffers[0].copyin(item.inputs[0].buffer.array)
        if recording is not None:
            recording.launches.append(Launch(None, [buffers[0], item.inputs[0].buffer], in_place))
        item.outputs[0].mark_realized(buffers[0])
        return 0.0
    if item.outputs[0].numel() == 0:  # the outputs of one kernel share their shape
        if recording is not None:
            recording.launches.append(Launch(None, buffers, in_place))
        for output, buffer in zip(item.outputs, buffers):
            output.mark_realized(buffer)
        return 0.0
    compiled = get_program(item.outputs[0].device, item.kernel)
    inputs = [node.buffer for node in item.inputs]
    start = time.perf_counter()
    compiled.program(*buffers, *inputs)
    elapsed = time.perf_counter() - start
    moved = sum(buffer.nbytes for buffer in buffers) + sum(source.nbytes for source in inputs)
    stats.kernels += 1
    stats.flops += compiled.flops
    stats.bytes += moved
    if knobs.debug >= 2:
        label = compiled.name + (" (in place)" if any(in_place) else "")
        print(f"  {label:<40} global {str(list(compiled.global_size)):<18} {elapsed * 1e3:9.3f} ms "
              f"{compiled.flops / max(elapsed, 1e-9) / 1e9:8.2f} GFLOP/s {moved / max(elapsed, 1e-9) / 1e9:8.2f} GB/s", file=sys.stderr)
    if recording is not None:
        recording.launches.append(Launch(compiled.program, [*buffers, *inputs], in_place))
    for output, buffer, written in zip(item.outputs, buffers, in_place):
        if written:
            buffer.version += 1
        output.mark_realized(buffer)
    return elapsed


def _realize_copy_sources(nodes: list[LazyBuffer]) -> bool:
    """A copy reads a buffer on another device: realize that buffer there first. True if it did."""
    sources = [node.srcs[0] for node in nodes if node.op == "COPY" and not node.realized and not node.srcs[0].realized]
    if sources:
        realize(sources)
    return bool(sources)


def realize(outputs: list[LazyBuffer]) -> None:
    """Compute every node in outputs (those already realized are skipped)."""
    pending = [node for node in outputs if not node.realized]
    if not pending:
        return
    graph = walk(pending)
    if _realize_copy_sources(graph):
        pending = [node for node in pending if not node.realized]
        graph = walk(pending)
    by_device: dict[str, list[LazyBuffer]] = {}
    for node in pending:
        by_device.setdefault(node.device, []).append(node)
    for device_name, nodes in by_device.items():
        if knobs.graph:
            write_graph(nodes)
        device = get_device(device_name)
        if hasattr(device, "run_graph"):
            if recording is not None:
                recording.not_replayable = f"the {device_name} device computes without kernels"
            device.run_graph(nodes)
            continue
        schedule = create_schedule(nodes, graph if len(by_device) == 1 else None)
        if knobs.debug >= 5:
            for node in walk(nodes):
                print(f"  lazy: {node}", file=sys.stderr)
            for item in schedule:
                print(f"  schedule: {item.kernel.name if item.kernel else 'COPY'} -> {item.outputs}", file=sys.stderr)
        start = time.perf_counter()
        device_time = sum(_run_item(item) for item in schedule)
        if knobs.debug >= 1 and schedule:
            total = time.perf_counter() - start
            print(f"realized {len(schedule)} kernel(s) on {device_name}: {device_time * 1e3:.3f} ms on device, "
                  f"{total * 1e3:.3f} ms in total", file=sys.stderr)
