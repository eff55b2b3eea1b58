"""The engine: realizes lazy nodes by scheduling, rendering, compiling (cached) and running kernels.

    realize([node, ...])
      schedule -> [ScheduleItem]            schedule/fuse.py
      kernels without a program yet:        prepare_programs, here
        linearize + render, one by one      codegen/ (kernel_source), renderer/
        compile (disk cache), side by side  devices/<dev>.py on devices/compile_pool.py's threads
      for each kernel: run, time, count     here (DEBUG output and lazygrad.stats)

The NPY device skips all of that and interprets the graph with numpy.

While `recording` is set (lazygrad.jit captures a function), every launch is also appended to it, so
the same programs can later run again on the same buffers without any of the steps above.
"""
from __future__ import annotations

import math
import sys
import time
from concurrent.futures import wait
from dataclasses import dataclass

from lazygrad import derived_values
from lazygrad.beam import beam_opts
from lazygrad.codegen.kernel import Kernel, format_ast
from lazygrad.codegen.linearize import kernel_source, rendered_pieces
from lazygrad.devices import canonical_device, get_device, synchronize
from lazygrad.devices.compile_pool import CompileBatch
from lazygrad.graph import write_graph
from lazygrad.knobs import knobs
from lazygrad.lazy import LazyBuffer, walk
from lazygrad.program_cache import Rendered, load_rendered, program_key, store_rendered
from lazygrad.progress import Progress
from lazygrad.renderer.c import CRenderer
from lazygrad.renderer.cuda import CUDARenderer
from lazygrad.renderer.opencl import OpenCLRenderer
from lazygrad.schedule.fuse import ScheduleItem, create_schedule, memoized_schedule, walk_with_structure
from lazygrad.stats import stats
from lazygrad.ops import Ops

_RENDERERS: dict[str, object] = {}  # device name -> the renderer of its dialect


def renderer_for(device_name: str):
    """The renderer for a device's kernels, built once per device: the C dialect with the CPU's vector
    registers (its tiles fit them), CUDA's, and OpenCL's with that device's float vector width (so
    `OPENCL:1` gets its own)."""
    renderer = _RENDERERS.get(device_name)
    if renderer is None:
        kind = device_name.split(":")[0]
        if kind == "OPENCL":
            renderer = OpenCLRenderer(get_device(device_name).float_vector_width)
        elif kind == "CPU":
            device = get_device(device_name)
            renderer = CRenderer(*device.simd, byte_dot_lanes=device.byte_dot_lanes, threads=device.threads)
        else:
            renderer = {"CPU": CRenderer, "CUDA": CUDARenderer}[kind]()
        _RENDERERS[device_name] = renderer
    return renderer


@dataclass
class CompiledKernel:
    name: str
    source: str
    program: object
    device: str                 # the device it was compiled for and runs on
    global_size: tuple[int, ...]
    flops: int
    opts: tuple = ()            # the opts its loops were arranged with (codegen/opts.py)


# Loaded programs, least recently prepared first. A process that meets ever new shapes would run out
# of memory maps after some 13,000 kernels (each library keeps a few): past LOADED_PROGRAMS the least
# recently used is forgotten, and its library unloaded once no jit replay holds it (devices/cpu.py).
_PROGRAMS: dict[tuple[str, Kernel, bool, int], CompiledKernel] = {}
LOADED_PROGRAMS = 2048


@dataclass
class Launch:
    """One recorded step: a program run on buffers (its outputs first, then its inputs), or a copy
    of buffers[1] into buffers[0] when program is None (nothing at all for empty outputs, which have
    no input), or a host step (`host` names it): a Python function on the buffers, such as a
    collective of lazygrad.distributed, which a replay runs again in its place and never skips."""
    program: object | None
    buffers: list
    in_place: tuple[bool, ...]  # per output: written into a buffer that existed before
    kernel: Kernel | None = None  # what the program computes (lazygrad.export renders it again)
    host: str | None = None     # a host step's name ("all_reduce"); None for kernels and copies
    compiled: CompiledKernel | None = None  # its name, global size and flops, for a replay's DEBUG=2 lines

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
        self.data_dependent: str | None = None  # what made a shape depend on data, if anything did


recording: Recording | None = None


def record_host_buffer(buffer) -> None:
    """Tensor creation from host data calls this: such a buffer is a constant of the capture."""
    if recording is not None:
        recording.host_made.add(id(buffer))


def record_data_dependence(reason: str) -> None:
    """What makes a function's work depend on its data calls this with a reason: a result whose shape
    its data decides (a boolean mask index, nonzero), a value read as numbers to decide what runs next
    (an ONNX model's If condition). A replay would repeat the capture's choice, so the jit runs such a
    function plainly on every call (and lazygrad.export refuses it: `data_dependent`, kept apart from
    the other reasons)."""
    if recording is not None:
        recording.data_dependent = recording.data_dependent or reason
        recording.not_replayable = recording.not_replayable or reason


def record_refill(buffer, make_values) -> None:
    """Random creation calls this: a replay refills `buffer` with `make_values()`."""
    if recording is not None:
        recording.refills.append((buffer, make_values))


def run_host_step(name: str, function, outputs: list, inputs: list) -> None:
    """Runs `function(*outputs, *inputs)` on buffers now, and under a jit capture records it as a
    launch, so every replay runs it again between the same kernels. For work a kernel cannot do, such
    as the communication of a collective (lazygrad.distributed); `outputs` are fresh buffers the
    function fills, `inputs` buffers it reads (or must keep alive until it runs)."""
    def timed(*buffers):  # what the jit replays too: counted and timed in lazygrad.stats
        start = time.perf_counter()
        function(*buffers)
        stats.host_steps += 1
        stats.host_seconds += time.perf_counter() - start
    timed(*outputs, *inputs)
    if recording is not None:
        recording.launches.append(Launch(timed, [*outputs, *inputs], (False,) * len(outputs), host=name))


def get_program(device_name: str, kernel: Kernel) -> CompiledKernel:
    """The runnable program for a kernel, from memory, the disk cache or the compiler. Its opts come
    from BEAM search when BEAM > 0, else from the default heuristic (none with NOOPT=1)."""
    compiled = _PROGRAMS.get((device_name, kernel, knobs.noopt, knobs.beam))
    if compiled is None:
        prepare_programs(device_name, [kernel])
        compiled = _PROGRAMS[(device_name, kernel, knobs.noopt, knobs.beam)]
    return compiled


def prepare_programs(device_name: str, kernels: list[Kernel]) -> None:
    """Loads a program for every kernel that has none in memory yet. Each is rendered in turn and
    handed to a CompileBatch (devices/compile_pool.py), which sends the compiles on to the device's
    compile threads, several kernels per compiler run where the device can, so a first run compiles
    its kernels side by side while the next ones render; a kernel that appears twice compiles once.
    Shows a progress bar on a terminal when this takes over a second."""
    missing, used = {}, 0
    for kernel in kernels:
        key = (device_name, kernel, knobs.noopt, knobs.beam)
        compiled = _PROGRAMS.pop(key, None)
        if compiled is None:
            missing[key] = kernel
        else:
            _PROGRAMS[key] = compiled  # now the most recently used
            used += 1
    if not missing:
        return
    device = get_device(device_name)
    start, compiles_before = time.perf_counter(), stats.compiles
    started = []
    with Progress(f"compiling {len(missing)} kernel{'s' * (len(missing) > 1)}", len(missing)) as progress:
        batch = CompileBatch(device)
        for key, kernel in missing.items():
            rendered = _rendered(device_name, kernel)
            future = batch.submit(rendered.name, rendered.source)
            future.add_done_callback(lambda _: progress.advance())
            if knobs.beam:
                batch.close()
                wait([future])  # the next kernel's BEAM search times candidates: no compiles beside it
            started.append((key, kernel, rendered, future))
        batch.close()
        for key, kernel, rendered, future in started:
            program = _load(device, rendered, future.result())
            _PROGRAMS[key] = CompiledKernel(rendered.name, rendered.source, program, device_name,
                                            rendered.global_size, kernel.count_flops(), rendered.opts)
    while len(_PROGRAMS) > max(LOADED_PROGRAMS, used + len(missing)):  # never one this schedule runs
        del _PROGRAMS[next(iter(_PROGRAMS))]
    if knobs.debug >= 1:
        compiled = stats.compiles - compiles_before
        print(f"prepared {len(missing)} program(s) for {device_name} in {time.perf_counter() - start:.3f} s "
              f"({compiled} compiled, {len(missing) - compiled} from the disk cache)", file=sys.stderr)


def _load(device, rendered: Rendered, binary: bytes):
    """The loaded program; a binary from the disk cache that does not load (a broken library under
    a sound checksum) is compiled once more, replacing the entry, where the device can do that."""
    try:
        return device.load(rendered.name, binary, rendered.argument_count)
    except (OSError, AttributeError):  # ctypes: not a loadable library, or the symbol is missing
        if not hasattr(device, "recompile"):
            raise
        return device.load(rendered.name, device.recompile(rendered.source), rendered.argument_count)


def _rendered(device_name: str, kernel: Kernel) -> Rendered:
    """The kernel's program source, from the program cache (program_cache.py) or rendered now. BEAM
    keeps its own cache, and DEBUG >= 3 shows how the loops were chosen: both render every time."""
    if knobs.beam or knobs.debug >= 3:
        return _render(device_name, kernel)
    key = program_key(device_name, renderer_for(device_name), kernel, knobs.noopt)
    rendered = load_rendered(key)
    if rendered is None:
        rendered = _render(device_name, kernel)
        store_rendered(key, rendered)
    elif knobs.debug >= 4:
        print(rendered.source, file=sys.stderr)
    return rendered


def _render(device_name: str, kernel: Kernel) -> Rendered:
    """A kernel's program source, with its opts from BEAM or the heuristic."""
    renderer = renderer_for(device_name)
    # a concatenation's pieces take the heuristic's opts each (codegen/pieces.py), not a search
    searched = knobs.beam and not knobs.noopt and rendered_pieces(kernel, renderer) is None
    opts = beam_opts(device_name, kernel, renderer) if searched else None
    program, source = kernel_source(kernel, renderer, opts, optimize=not knobs.noopt)
    if knobs.debug >= 3:
        print(f"kernel {program.name}: full shape {kernel.full_shape}, reduce axes {kernel.reduce_axes}\n"
              f"{format_ast(kernel.ast)}\n"
              f"loops: global {[(loop.var, loop.size) for loop in program.global_loops]}, "
              f"reduce {[(loop.var, loop.size) for loop in program.reduce_loops]}, "
              f"parallel={program.parallel}, opts {[str(opt) for opt in program.opts]}", file=sys.stderr)
    if knobs.debug >= 4:
        print(source, file=sys.stderr)
    if knobs.debug >= 6:
        print(get_device(device_name).compiler.assembly(source), file=sys.stderr)
    return Rendered(program.name, source, tuple(loop.size for loop in program.global_loops), len(program.params),
                    tuple(program.opts))


def _run_item(item: ScheduleItem, derived: bool = False) -> float:
    """Run one schedule item and realize its outputs; returns seconds spent on the device (measured
    only with DEBUG >= 1, which prints it; 0.0 otherwise). Runs for every kernel of every realize:
    plain loops, no per-launch work that only DEBUG output or a jit capture needs. `derived`: the
    item reads only buffers realized before its schedule began (derived_values.py)."""
    outputs, inputs, in_place = item.outputs, item.inputs, item.in_place
    device_name = outputs[0].device
    input_buffers = []
    for node in inputs:
        if node.buffer.version != node.version:
            node.check_current()  # raises StaleValueError
        input_buffers.append(node.buffer)
    if derived:
        kept = derived_values.cached_outputs(device_name, item.kernel, input_buffers)
        if kept is not None:
            for output, buffer in zip(outputs, kept):
                output.mark_realized(buffer)
            if recording is not None:  # the capture's launch writes the kept buffers, as it would have
                compiled = get_program(device_name, item.kernel)
                recording.launches.append(Launch(compiled.program, [*kept, *input_buffers], tuple(in_place),
                                                 item.kernel, compiled=compiled))
            if knobs.debug >= 2:
                print(f"  {item.kernel.name:<40} kept from an earlier run (what it reads is unchanged)", file=sys.stderr)
            return 0.0
    device = get_device(device_name)
    buffers = []
    for output, written in zip(outputs, in_place):
        if written:
            buffers.append(output.srcs[1].buffer)
        else:
            buffers.append(device.alloc(output.dtype, math.prod(output.shape)))
    if item.kernel is None:  # a copy between devices
        buffers[0].copyin(inputs[0].buffer.array)
        if knobs.debug >= 2:
            print(f"  {f'copy {inputs[0].device} -> {device_name}':<40} {buffers[0].nbytes} bytes", file=sys.stderr)
        if recording is not None:
            recording.launches.append(Launch(None, [buffers[0], inputs[0].buffer], tuple(in_place)))
        outputs[0].mark_realized(buffers[0])
        return 0.0
    if 0 in outputs[0].shape:  # no elements (the outputs of one kernel share their shape)
        if recording is not None:
            recording.launches.append(Launch(None, buffers, tuple(in_place)))
        for output, buffer in zip(outputs, buffers):
            output.mark_realized(buffer)
        return 0.0
    compiled = get_program(device_name, item.kernel)
    timed = knobs.debug >= 1
    if timed:
        start = time.perf_counter()
    compiled.program(*buffers, *input_buffers)
    if timed:
        synchronize(device_name)  # a CUDA launch returns before its kernel has run
    elapsed = time.perf_counter() - start if timed else 0.0
    moved = 0
    for buffer in buffers:
        moved += buffer.nbytes
    for buffer in input_buffers:
        moved += buffer.nbytes
    stats.kernels += 1
    stats.flops += compiled.flops
    stats.bytes += moved
    if knobs.debug >= 2:
        label = compiled.name + (" (in place)" if any(in_place) else "")
        if device_name != canonical_device(None):  # a shard's kernel, or work moved to another device
            label += f" on {device_name}"
        print_launch(label, compiled, elapsed, moved)
    if recording is not None:
        recording.launches.append(Launch(compiled.program, [*buffers, *input_buffers], tuple(in_place), item.kernel,
                                         compiled=compiled))
    for output, buffer, written in zip(outputs, buffers, in_place):
        if written:
            buffer.version += 1
        output.mark_realized(buffer)
    if derived and recording is None:  # a capture takes kept values but keeps none of its own
        derived_values.remember(device_name, item.kernel, input_buffers, buffers)
    return elapsed


def print_launch(label: str, compiled: CompiledKernel, elapsed: float, moved: int) -> None:
    """DEBUG=2's line for one kernel launch (a realize's, or a jit replay's)."""
    print(f"  {label:<40} global {str(list(compiled.global_size)):<18} {elapsed * 1e3:9.3f} ms "
          f"{compiled.flops / max(elapsed, 1e-9) / 1e9:8.2f} GFLOP/s {moved / max(elapsed, 1e-9) / 1e9:8.2f} GB/s",
          file=sys.stderr)


def _derived_items(targets: list[LazyBuffer], schedule: list[ScheduleItem]) -> list[bool]:
    """Per item, whether derived_values may keep its outputs: a kernel, not in place, with elements,
    reading at least one buffer and only buffers realized before the schedule began, whose outputs
    are intermediates (none of `targets`, what the realize was asked for). While a jit captures,
    a kept value is recorded as the launch that computed it (_run_item), so the replay sees every
    launch and shares the kept buffers instead of computing them again into its own (ViT-B/16's
    weights in panels: 330 MB). A schedule of one kernel has no intermediate (the per-op path:
    `(x + 1).realize()` pays nothing for this)."""
    if len(schedule) < 2:
        return [False] * len(schedule)
    produced = set()
    for item in schedule:
        for output in item.outputs:
            produced.add(id(output))
    asked = {id(node) for node in targets}
    flags = []
    for item in schedule:
        flags.append(item.kernel is not None and bool(item.inputs) and not any(item.in_place)
                     and 0 not in item.outputs[0].shape and not any(id(node) in produced for node in item.inputs)
                     and not any(id(node) in asked for node in item.outputs))
    return flags


def _run_schedule(device_name: str, outputs: list[LazyBuffer], schedule: list[ScheduleItem]) -> None:
    prepare_programs(device_name, [item.kernel for item in schedule
                                   if item.kernel is not None and 0 not in item.outputs[0].shape])
    if knobs.debug >= 5:
        for node in walk(outputs):
            print(f"  lazy: {node}", file=sys.stderr)
        for item in schedule:
            print(f"  schedule: {item.kernel.name if item.kernel else 'COPY'} -> {item.outputs}", file=sys.stderr)
    # Each item leaves the list as it runs: once no later item reads a node (and nothing else holds
    # it), its buffer goes back to the device's pool and a later kernel's output can take it.
    derived = _derived_items(outputs, schedule)
    if knobs.debug == 0:
        for index in range(len(schedule)):
            item, schedule[index] = schedule[index], None
            _run_item(item, derived[index])
        return
    start = time.perf_counter()
    device_time = 0.0
    for index in range(len(schedule)):
        item, schedule[index] = schedule[index], None
        device_time += _run_item(item, derived[index])
    if schedule:
        total = time.perf_counter() - start
        print(f"realized {len(schedule)} kernel(s) on {device_name}: {device_time * 1e3:.3f} ms on device, "
              f"{total * 1e3:.3f} ms in total", file=sys.stderr)


def _realize_copy_sources(nodes: list[LazyBuffer]) -> bool:
    """A copy reads a buffer on another device: realize that buffer there first. True if it did."""
    sources = [node.srcs[0] for node in nodes if node.op is Ops.COPY and not node.realized and not node.srcs[0].realized]
    if sources:
        realize(sources)
    return bool(sources)


_RUNS_GRAPHS: dict[str, bool] = {}  # device name -> whether it interprets graphs (NPY) instead of running kernels


def _runs_graphs(device_name: str) -> bool:
    runs_graphs = _RUNS_GRAPHS.get(device_name)
    if runs_graphs is None:
        runs_graphs = _RUNS_GRAPHS[device_name] = hasattr(get_device(device_name), "run_graph")
    return runs_graphs


def _realize_on_one_device(pending: list[LazyBuffer]) -> bool:
    """The usual realize: every node on one device with kernels. The graph is walked once, for its
    structure (walk_with_structure); a graph of the same structure scheduled before (a loop that
    realizes the same ops every step: `(x + 1).realize()`, a training step) runs that schedule,
    and any other is planned from the same walk. True if it ran; False for the general path (several
    devices, GRAPH=1, NPY, or a copy whose source had to be realized first, which changes the graph).

    A remembered schedule is keyed by the whole graph's structure, which says for every COPY whether
    its source is realized; only graphs whose copies' sources are realized already are remembered,
    so a hit never has a copy source to realize first."""
    device_name = pending[0].device
    for node in pending:
        if node.device != device_name:
            return False
    if knobs.graph or _runs_graphs(device_name):
        return False
    walked = walk_with_structure(pending)
    schedule = memoized_schedule(walked)
    if schedule is None:
        if _realize_copy_sources(walked[0]):
            return False
        schedule = create_schedule(pending, walked)
    del walked  # held through the run, it would keep every intermediate buffer until the end
    _run_schedule(device_name, pending, schedule)
    return True


def realize(outputs: list[LazyBuffer]) -> None:
    """Compute every node in outputs (those already realized are skipped)."""
    pending = []
    for node in outputs:
        if node.buffer is None:
            pending.append(node)
    if not pending:
        return
    if _realize_on_one_device(pending):
        return
    pending = [node for node in pending if not node.realized]  # a copy's source may have been one
    graph = walk(pending)
    if _realize_copy_sources(graph):
        pending = [node for node in pending if not node.realized]
    del graph  # held through the run, it would keep every intermediate buffer until the end
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
        _run_schedule(device_name, nodes, create_schedule(nodes))
