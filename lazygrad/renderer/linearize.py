"""Turns a scheduled Kernel and its opts into a loop program: loops, straight-line statements, stores.

Called by every renderer (through realize.get_program, and by BEAM for each candidate). It merges
adjacent dims when every view allows it (a contiguous 4096x4096 elementwise kernel is one flat
loop), applies the opts (renderer/opts.py: the default heuristic's unless given), decides the loop
nest (a BLOCK loop outermost, global loops, reduce loops inside; upcast and unrolled axes expanded
into copies of the body; LOCAL and GROUP axes become the work-items of a group, `local_loops`, which
GPU renderers map to local ids), names every value, and asks the renderer for the text of each
expression, so the dialect files only supply syntax. Views become index expressions here.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from lazygrad.dtype import DType, dtypes
from lazygrad.renderer.axes import merge_dims, split_dim
from lazygrad.renderer.opts import (BLOCK, GROUP, LOCAL, UNROLL, UPCAST, Opt, OptimizedKernel, apply_opts,
                                    heuristic_opts, initial, load_strides)
from lazygrad.schedule.kernel import Kernel, KernelNode
from lazygrad.shape.symbolic import Lin, render_condition, var
from lazygrad.shape.view import ShapeTracker


@dataclass
class Loop:
    var: str
    size: int
    reduce: bool


@dataclass
class Statement:
    name: str
    dtype: DType
    expr: str
    declare: bool = True         # False: an assignment to an existing variable (an accumulator)


@dataclass
class Accumulator:
    name: str
    op: str                      # SUM, PROD or MAX_REDUCE
    dtype: DType


@dataclass
class ReduceStage:
    """One reduce of a kernel with several (earlier reduces feed later ones, as softmax's row max
    feeds its sum of exponentials): accumulators, the loop body over the reduce loops, and the
    folding of unrolled accumulators after them."""
    accumulators: list[Accumulator]
    inner: list[Statement]
    combine: list[Statement]


@dataclass
class LoopProgram:
    name: str
    params: list[tuple[str, DType, bool]]        # (name, dtype, is_output)
    global_loops: list[Loop]
    reduce_loops: list[Loop]
    inner: list[Statement]                       # inside the reduce loops, ending in accumulator updates
    accumulators: list[Accumulator]              # one per output of an iteration (several when upcast)
    outer: list[Statement]                       # after the reduce, per iteration of the global loops
    stores: list[tuple[str, str, str]]           # (param name, index text, value name)
    full_shape: tuple[int, ...] = ()
    inner_loops: list[Loop] = field(default_factory=list)  # output loops run inside the reduce, one
    #                                                        accumulator each (an array, see accumulator_index)
    parallel: bool = False       # split the outer loop over CPU cores
    threads: int | None = None   # how many (a THREADS opt); None: OpenMP's default, every core
    vectorize: bool = False      # mark the innermost reduce loop as a SIMD reduction
    opts: tuple[Opt, ...] = ()   # the opts applied (upcast and unrolled axes are expanded in place)
    block_loop: Loop | None = None  # BLOCK: a reduce loop around everything, partial results in the output
    partial_stores: list[tuple[str, str, str]] = field(default_factory=list)  # (param, index, accumulator)
    #                                                        per output: where its partial result lives
    combine: list[Statement] = field(default_factory=list)  # after the reduce loops: fold the accumulators of
    #                                                        unrolled steps into each output's first one
    raw_stores: list[tuple[str, str, str]] = field(default_factory=list)  # (param, index, accumulator): sums
    #                                                        stored before the epilogue, which reads them back
    prior_stages: list[ReduceStage] = field(default_factory=list)  # reduces run before this one, each over
    #                                                        the same reduce loops, in order
    local_loops: list[Loop] = field(default_factory=list)  # LOCAL axes, then the GROUP lane: the work-items of
    #                                                        one group, the last loop varying fastest
    group_lane: Loop | None = None  # GROUP: the lane axis (also in local_loops); each lane reduces every n-th step
    group_fold: list[Accumulator] = field(default_factory=list)  # GROUP: per output, the accumulator whose
    #                                                        lanes' partial results lane 0 folds after the reduce

    @property
    def stages(self) -> list[ReduceStage]:
        """Every reduce in the order they run (empty without a reduce)."""
        if not self.accumulators:
            return []
        return self.prior_stages + [ReduceStage(self.accumulators, self.inner, self.combine)]


def accumulator_index(inner_loops: list[Loop]) -> str:
    """The row-major position of the current inner-loop iteration in the accumulator array."""
    index = Lin.of(0)
    stride = 1
    for loop in reversed(inner_loops):
        index = index + var(loop.var, 0, loop.size - 1) * stride
        stride *= loop.size
    return index.render()


ACCUMULATOR_LIMIT = 8192  # elements of a per-thread accumulator array (32 KiB of float32: L1-sized)


def choose_inner_axes(kernel: Kernel) -> tuple[Kernel, list[int]]:
    """For a reduce whose inner loop strides through memory (matmul's B, column sums), move the
    output axis that is contiguous in memory inside the reduce loop, with one accumulator per
    output: the loads then run along rows and vectorize. A few rows of the axis before it join, so
    each loaded row is reused from L1 (a register-and-cache tile, without packing)."""
    reduce_nodes = [node for node in kernel.ast.walk() if node.is_reduce]
    if len(reduce_nodes) != 1:
        return kernel, []
    reduce_node = reduce_nodes[0]
    globals_ = [axis for axis, size in enumerate(kernel.full_shape) if axis not in kernel.reduce_axes and size > 1]
    if not globals_ or kernel.full_shape[globals_[-1]] > ACCUMULATOR_LIMIT:
        return kernel, []
    last, reduce_axis = globals_[-1], max(kernel.reduce_axes)
    strided = [strides for strides in load_strides(kernel, reduce_node.srcs[0].walk())
               if strides.get(reduce_axis, 0) not in (0, 1, None) and strides.get(last) == 1]
    if not strided:
        return kernel, []
    inner = [last]
    if len(globals_) >= 2:
        row_axis = globals_[-2]
        for rows in (8, 4, 2):
            fits = rows * kernel.full_shape[last] <= ACCUMULATOR_LIMIT
            if fits and kernel.full_shape[row_axis] % rows == 0 and kernel.full_shape[row_axis] > rows:
                split = split_dim(kernel, row_axis, rows)
                if split is not None:
                    kernel, inner = split, [row_axis + 1, last + 1]
                break
    return kernel, inner


def _walk_above(roots: list[KernelNode], stops: set[KernelNode]) -> list[KernelNode]:
    """Nodes reachable from roots without entering `stops`, sources first (stops excluded)."""
    order, seen = [], set()
    stack = [(root, False) for root in reversed(roots)]
    while stack:
        node, sources_done = stack.pop()
        if sources_done:
            order.append(node)
        elif node not in seen and node not in stops:
            seen.add(node)
            stack.append((node, True))
            stack.extend((src, False) for src in reversed(node.srcs) if src not in seen)
    return order


class _Namer:
    def __init__(self):
        self.count = 0

    def next(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count - 1}"


def _fused_multiply_add(reduce_node: KernelNode, tiled: bool) -> bool:
    """Whether a tiled float SUM of products accumulates with fma (one rounding per step, as BLAS
    does); elementwise a*b+c keeps its two roundings everywhere."""
    source = reduce_node.srcs[0]
    return (tiled and reduce_node.op == "SUM" and source.op == "MUL" and source.dtype in (dtypes.float32, dtypes.float64)
            and all(src.dtype == source.dtype for src in source.srcs))


class _Emitter:
    """Names values and writes their statements; a value whose text was already written in the
    same scope reuses its name, so a load shared by every copy of an upcast body is read once."""

    def __init__(self, renderer, params, namer: _Namer):
        self.renderer, self.params, self.namer = renderer, params, namer

    def emit(self, node: KernelNode, names: dict, seen: dict, statements: list[Statement], index_text) -> None:
        renderer = self.renderer
        operands = [names[src] for src in node.srcs]
        if node.op == "LOAD":
            index, valid = index_text(node.arg[1])
            expr = renderer.render_load(self.params[node.arg[0]][0], node.dtype, index, valid)
        elif node.op == "CONST":
            expr = renderer.render_const(node.arg[0], node.dtype)
            if node.arg[1] is not None:
                _, valid = index_text(node.arg[1])
                expr = renderer.render_masked(expr, node.dtype, valid)
        elif node.op == "VALID":
            _, valid = index_text(node.arg)
            expr = renderer.render_const(valid, node.dtype) if isinstance(valid, bool) else f"({valid})"
        else:
            expr = renderer.render_op(node.op, [src.dtype for src in node.srcs], node.dtype, operands)
        key = (node.dtype, expr)
        if key not in seen:
            seen[key] = self.namer.next()
            statements.append(Statement(seen[key], node.dtype, expr))
        names[node] = seen[key]


def _combinations(shape: tuple[int, ...], axes: list[int]) -> list[dict[int, int]]:
    """Every assignment of positions to the expanded axes, the last axis fastest."""
    return [dict(zip(axes, values)) for values in itertools.product(*(range(shape[axis]) for axis in axes))]


def _arrange(kernel: Kernel, renderer, optimize: bool, opts) -> tuple[OptimizedKernel, list[int]]:
    """The kernel with merged dims and its opts applied, and the axes choose_inner_axes moved
    inside the reduce (only when no opts apply)."""
    if not optimize:
        return initial(kernel), []
    kernel = merge_dims(kernel)
    optimized = apply_opts(kernel, heuristic_opts(kernel, renderer) if opts is None else opts, renderer)
    if optimized.opts or not renderer.accumulator_arrays:
        return optimized, []
    kernel, inner_axes = choose_inner_axes(kernel)
    return initial(kernel), inner_axes


def linearize(kernel: Kernel, renderer, optimize: bool = True, opts=None, parallel_threshold: int = 1 << 15) -> LoopProgram:
    """The loop program of a kernel; `renderer` supplies the text of each expression.

    `opts` (a list of Opt over the dim-merged kernel) arranges the loops; None asks the default
    heuristic (renderer/opts.py). With optimize=False (NOOPT=1) the loop nest is the plain one: one
    loop per dim, one thread, no vectorization hints, no opts."""
    name = kernel.name
    optimized, inner_axes = _arrange(kernel, renderer, optimize, opts)
    kernel, kinds = optimized.kernel, optimized.kinds
    full_shape, axes = kernel.full_shape, set(kernel.reduce_axes)
    upcast_axes = [axis for axis, kind in enumerate(kinds) if kind == UPCAST and full_shape[axis] > 1]
    unroll_axes = [axis for axis, kind in enumerate(kinds) if kind == UNROLL and full_shape[axis] > 1]
    loop_indices: list[Lin] = []
    global_loops, reduce_loops, inner_loops, block_loops, local_loops = [], [], [], [], []
    for axis, size in enumerate(full_shape):
        if size == 1 or axis in upcast_axes or axis in unroll_axes:
            loop_indices.append(Lin.of(0))
            continue
        loop_var = f"{'r' if axis in axes else 'i'}{axis}"
        loop_indices.append(var(loop_var, 0, max(size - 1, 0)))
        if kinds[axis] == BLOCK:
            loops = block_loops
        elif kinds[axis] in (LOCAL, GROUP):
            loops = local_loops
        else:
            loops = reduce_loops if axis in axes else (inner_loops if axis in inner_axes else global_loops)
        loops.append(Loop(loop_var, size, axis in axes))
    # the GROUP lane varies fastest among a group's work-items, so lane 0's neighbours are its lanes
    local_loops.sort(key=lambda loop: loop.reduce)
    group_lane = next((loop for loop in local_loops if loop.reduce), None)
    out_shape = kernel.output_shape

    def index_text_at(position: dict[int, int]):
        """index_text for one copy of the body: expanded axes at `position`, the rest loop variables."""
        full_indices = [Lin.of(position[axis]) if axis in position else index for axis, index in enumerate(loop_indices)]
        out_indices = [Lin.of(0) if axis in axes else index for axis, index in enumerate(full_indices)]

        def index_text(tracker: ShapeTracker) -> tuple[str, str | bool]:
            if tracker.shape == full_shape:
                indices = full_indices
            else:
                assert tracker.shape == out_shape
                indices = out_indices
            offset, conditions = tracker.index_and_valid(indices)
            return offset.render(renderer), render_condition(conditions)
        return index_text

    output_count = kernel.output_count
    params = [(f"data{number}", dtype, number < output_count) for number, dtype in enumerate(kernel.buffer_dtypes)]
    emitter = _Emitter(renderer, params, _Namer())
    values = [store.srcs[0] for store in kernel.stores]
    reduce_nodes = [node for node in kernel.ast.walk() if node.is_reduce]  # a reduce after those it reads
    assert len(reduce_nodes) <= 1 or not inner_loops, "accumulator arrays serve one reduce"
    outputs = _combinations(full_shape, upcast_axes)
    copies = [{**output, **step} for step in _combinations(full_shape, unroll_axes) for output in outputs]
    reductions: list[_Reduction] = []
    for node in reduce_nodes:
        stage = _Reduction(node, copies, len(outputs), emitter, inner_loops, bool(optimized.opts))
        stage.emit_body(index_text_at, reductions)
        reductions.append(stage)
    reduction = reductions[-1] if reductions else None
    reduce_node = reduction.node if reduction else None
    # Values after the reduce are emitted afresh, even one (a constant) also used inside the loop,
    # whose variable is out of scope here.
    outer: list[Statement] = []
    stores, partial_stores, raw_stores = [], [], []
    seen: dict = {}
    # A tile's epilogue (bias, relu, ...) reads each sum back from the output, not from its register:
    # gcc keeps a tile's accumulators in vector registers only when every use after the loop
    # vectorizes too, and a relu's select does not (an 8x slower matmul+relu without this).
    spill = (renderer.spills_tile_epilogue and len(reductions) == 1 and len(outputs) > 1 and values[0] is not reduce_node
             and reduce_node.dtype == kernel.buffer_dtypes[0] and reduce_node.dtype.itemsize >= 4)
    after_reduce = _walk_above(values, set(reduce_nodes))
    threads = next((opt.amount for opt in optimized.opts if opt.op == "THREADS"), None)
    for number, output in enumerate(outputs):
        index_text = index_text_at(output)
        store_indices = [index_text(store.arg[1])[0] for store in kernel.stores]
        names = {stage.node: stage.targets[number] for stage in reductions}
        if spill:
            names[reduce_node] = f"{params[0][0]}[{store_indices[0]}]"
        if spill:
            raw_stores.append((params[0][0], store_indices[0], reduction.targets[number]))
        for node in after_reduce:
            emitter.emit(node, names, seen, outer, index_text)
        for store, store_index, value in zip(kernel.stores, store_indices, values):
            stores.append((params[store.arg[0]][0], store_index, names[value]))
        if reduction is not None and block_loops:
            partial_stores.append((params[0][0], store_indices[0], reduction.targets[number]))
    return LoopProgram(name, params, global_loops, reduce_loops, reduction.inner if reduction else [],
                       reduction.accumulators if reduction else [], outer, stores, full_shape, inner_loops,
                       parallel=_runs_on_threads(threads, full_shape, global_loops, optimize, parallel_threshold),
                       threads=threads,
                       vectorize=optimize, opts=optimized.opts, block_loop=block_loops[0] if block_loops else None,
                       partial_stores=partial_stores, combine=reduction.combine if reduction else [],
                       raw_stores=raw_stores,
                       prior_stages=[ReduceStage(stage.accumulators, stage.inner, stage.combine) for stage in reductions[:-1]],
                       local_loops=local_loops, group_lane=group_lane,
                       group_fold=reduction.accumulators[:len(outputs)] if group_lane and reduction else [])


def _runs_on_threads(threads: int | None, full_shape, global_loops, optimize: bool, parallel_threshold: int) -> bool:
    """Whether the outermost global loop is split over CPU threads: as a THREADS opt says (its
    count, or None), else when the kernel is big enough for the threads to pay off."""
    if threads is not None:
        return threads > 1 and bool(global_loops)
    return optimize and math.prod(full_shape) >= parallel_threshold and bool(global_loops)


class _Reduction:
    """The statements of a reduce: one accumulator per copy of the body (the upcast outputs times
    the unrolled steps, which accumulate independently: ILP, and SIMD for reduces such as max that
    C cannot vectorize as a reduction), the loop body, and the folding of each output's unrolled
    accumulators into its first one after the loop."""

    def __init__(self, reduce_node: KernelNode, copies: list[dict[int, int]], output_count: int,
                 emitter: _Emitter, inner_loops: list[Loop], tiled: bool):
        self.node, self.copies, self.emitter, self.output_count = reduce_node, copies, emitter, output_count
        self.fused = _fused_multiply_add(reduce_node, tiled)
        op, dtype = reduce_node.op, reduce_node.dtype
        self.accumulators = [Accumulator(emitter.namer.next("acc"), op, dtype) for _ in copies]
        suffix = f"[{accumulator_index(inner_loops)}]" if inner_loops else ""
        self.targets = [accumulator.name + suffix for accumulator in self.accumulators]
        self.combine = []
        for number in range(output_count, len(copies)):
            final, partial = self.targets[number % output_count], self.targets[number]
            update = emitter.renderer.render_accumulate(op, dtype, final, partial)
            self.combine.append(Statement(final, dtype, update, declare=False))
        self.inner: list[Statement] = []

    def emit_body(self, index_text_at, earlier: list["_Reduction"]) -> None:
        """The loop body; the results of `earlier` reduces (run before this one) are read by name."""
        source, renderer = self.node.srcs[0], self.emitter.renderer
        nodes = _walk_above([source], {stage.node for stage in earlier})
        seen: dict = {}
        for number, (target, position) in enumerate(zip(self.targets, self.copies)):
            names = {stage.node: stage.targets[number % self.output_count] for stage in earlier}
            index_text = index_text_at(position)
            for node in nodes:
                self.emitter.emit(node, names, seen, self.inner, index_text)
            if self.fused:
                left, right = (names[src] for src in source.srcs)
                update = renderer.render_fma(self.node.dtype, left, right, target)
            else:
                update = renderer.render_accumulate(self.node.op, self.node.dtype, target, names[source])
            self.inner.append(Statement(target, self.node.dtype, update, declare=False))
