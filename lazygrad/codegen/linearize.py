"""Turns a scheduled Kernel and its opts into a loop program: loops, straight-line statements, stores.

Called by every renderer (through realize.get_program, and by BEAM for each candidate). It merges
adjacent dims when every view allows it (a contiguous 4096x4096 elementwise kernel is one flat
loop), applies the opts (codegen/opts.py: the default heuristic's unless given), decides the loop
nest (a BLOCK loop outermost, global loops, reduce loops inside; upcast and unrolled axes expanded
into copies of the body; LOCAL and GROUP axes become the work-items of a group, `local_loops`, which
GPU renderers map to local ids), names every value and builds it as a typed expression
(renderer/loop_program.py), which each dialect prints and codegen/interpret.py can run with numpy;
the renderer is asked only what its dialect can do. Views become index expressions here.

Vector copies: when the renderer reports a vector width W > 1 for the kernel's dtype
(`renderer.vector_width`, OpenCL's) and the kernel qualifies (`_vector_width`), each copy of the
body covers W neighbouring positions of the last upcast axis, its lanes. A value then is a vector
(`Statement.width` W) or, when every lane computes the same value, a scalar; a load that is
contiguous along the lanes and aligned to W is one vector load (`_is_vector_access`), other loads
gather their lanes, and stores are vector stores, or lane by lane for a reduce's outputs strided
along the lanes. Every other kernel gets one position per copy.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

from lazygrad.codegen.axes import merge_dims, split_dim
from lazygrad.codegen.kernel import Kernel, KernelNode
from lazygrad.codegen.pieces import concatenated_pieces
from lazygrad.codegen.opts import (
    BLOCK,
    GROUP,
    LOCAL,
    UNROLL,
    UPCAST,
    OptimizedKernel,
    apply_opts,
    byte_dot_axes,
    has_select_only_load,
    heuristic_opts,
    initial,
    load_strides,
)
from lazygrad.dtype import DType, dtypes
from lazygrad.ops import Ops
from lazygrad.renderer.loop_program import (
    Accumulate,
    Accumulator,
    Broadcast,
    ByteDot,
    Const,
    Element,
    Fma,
    InRange,
    Lane,
    Load,
    Loop,
    LoopProgram,
    Masked,
    Op,
    ReduceStage,
    Statement,
    Store,
    Valid,
    Var,
    Vector,
    VectorLoad,
)
from lazygrad.shape.symbolic import Condition, Lin, condition, var
from lazygrad.shape.view import ShapeTracker


def accumulator_index(inner_loops: list[Loop]) -> Lin:
    """The row-major position of the current inner-loop iteration in the accumulator array."""
    index = Lin.of(0)
    stride = 1
    for loop in reversed(inner_loops):
        index = index + var(loop.var, 0, loop.size - 1) * stride
        stride *= loop.size
    return index


ACCUMULATOR_LIMIT = 8192  # elements of a per-thread accumulator array (32 KiB of float32: L1-sized)
# A reduce's innermost loop shorter than this runs outputs inside it (choose_inner_axes): a max pool's
# 3x3 window over 64x112x112 (ResNet-18), 2 threads, AVX2: 3.3 ms as an `omp simd` reduction over 3
# columns, 0.3 ms with the 56 output columns vectorized inside the window loops.
SHORT_WINDOW = 8
# Kernels of at least this many loop iterations (outputs times reduce steps) run their outermost
# loop on the CPU threads.
PARALLEL_THRESHOLD = 1 << 15
# When the outputs' axis is a kernel's only one, choose_inner_axes moves runs of it inside, whole
# vectors of RUN_LANES, as few runs as make CHUNKS_FOR_THREADS or more, not the whole axis.
RUN_LANES = 16
CHUNKS_FOR_THREADS = 4


def choose_inner_axes(kernel: Kernel) -> tuple[Kernel, list[int]]:
    """For a reduce whose inner loop strides through memory (matmul's B, column sums) or is shorter
    than SHORT_WINDOW (a pooling window), move the last output axis (contiguous, or a small stride
    apart, in memory) inside the reduce loop, with one accumulator per output: the loads then run
    along rows and vectorize. For a strided reduce a few rows of the axis before it join, so each
    loaded row is reused from L1 (a register-and-cache tile, without packing)."""
    reduce_nodes = [node for node in kernel.ast.walk() if node.is_reduce]
    if len(reduce_nodes) != 1:
        return kernel, []
    reduce_node = reduce_nodes[0]
    globals_ = [axis for axis, size in enumerate(kernel.full_shape) if axis not in kernel.reduce_axes and size > 1]
    if not globals_ or kernel.full_shape[globals_[-1]] > ACCUMULATOR_LIMIT:
        return kernel, []
    last, reduce_axis = globals_[-1], max(kernel.reduce_axes)
    strides = load_strides(kernel, reduce_node.srcs[0].walk())
    strided = [load for load in strides if load.get(reduce_axis, 0) not in (0, 1, None) and load.get(last) == 1]
    # a window shorter than a vector (pooling's 3 columns): its loop cannot vectorize, the outputs can
    short_window = kernel.full_shape[reduce_axis] < SHORT_WINDOW and any(load.get(last) in (1, 2, 3, 4) for load in strides)
    if not strided and not short_window:
        return kernel, []
    inner = [last]
    size = kernel.full_shape[last]
    if len(globals_) == 1 and math.prod(kernel.full_shape) >= PARALLEL_THRESHOLD:
        # moved inside whole, the only output axis would leave no loop for the threads (a squeeze-
        # and-excitation block's pool of a channels-last value, 144 channels by 56x56 positions,
        # ran on one thread): runs of it go inside, the loop over the runs outside
        vectors = size // RUN_LANES if size % RUN_LANES == 0 else 0
        runs = next((runs for runs in range(CHUNKS_FOR_THREADS, vectors + 1) if vectors % runs == 0), None)
        split = None if runs is None else split_dim(kernel, last, size // runs)
        if split is not None:
            return split, [last + 1]
    if len(globals_) >= 2 and strided:  # (a window's rows overlap little: 2x slower with 8 of them)
        row_axis = globals_[-2]
        for rows in (8, 4, 2):
            fits = rows * kernel.full_shape[last] <= ACCUMULATOR_LIMIT
            if fits and kernel.full_shape[row_axis] % rows == 0 and kernel.full_shape[row_axis] > rows:
                split = split_dim(kernel, row_axis, rows)
                if split is not None:
                    kernel, inner = split, [row_axis + 1, last + 1]
                break
    return kernel, inner


def _sources(node: KernelNode) -> tuple[KernelNode, ...]:
    """The sources emitted before a node: all of them, except a TAKE's source, which its own
    emission evaluates at the taken position (`_Emitter.emit_take`)."""
    return node.srcs[1:] if node.op is Ops.TAKE else node.srcs


def _walk_above(roots: list[KernelNode], stops: set[KernelNode]) -> list[KernelNode]:
    """Nodes reachable from roots without entering `stops`, sources first (stops excluded); a TAKE's
    source is not entered (see `_sources`)."""
    order, seen = [], set()
    stack = [(root, False) for root in reversed(roots)]
    while stack:
        node, sources_done = stack.pop()
        if sources_done:
            order.append(node)
        elif node not in seen and node not in stops:
            seen.add(node)
            stack.append((node, True))
            stack.extend((src, False) for src in reversed(_sources(node)) if src not in seen)
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
    return (tiled and reduce_node.op is Ops.SUM and source.op is Ops.MUL and source.dtype in (dtypes.float32, dtypes.float64)
            and all(src.dtype == source.dtype for src in source.srcs))


LEAF_OPS = (Ops.LOAD, Ops.CONST, Ops.VALID)


def _access(indexer, tracker: ShapeTracker) -> tuple[Lin, Condition | bool]:
    """The index and the validity (True/False when decided) of an access at one position."""
    offset, conditions = indexer(tracker)
    return offset, condition(conditions)


def _is_vector_access(tracker: ShapeTracker, lanes: list) -> bool:
    """Whether the lanes of a copy access consecutive elements without a mask, starting at an index
    provably a multiple of the lane count (every coefficient and the constant are), so one aligned
    vector access reads or writes them all."""
    return _vector_access_validity(tracker, lanes) is True


def _vector_access_validity(tracker: ShapeTracker, lanes: list) -> Condition | bool | None:
    """For lanes of a copy that access consecutive elements from an index provably a multiple of the
    lane count (every coefficient and the constant are), valid all together or not at all (a
    channels-last input's padding): that validity (True, or its Condition); else None."""
    width = len(lanes)
    accesses = [indexer(tracker) for indexer in lanes]
    first = accesses[0][0]
    validity = condition(accesses[0][1])
    if validity is False or any(condition(conditions) != validity for _, conditions in accesses[1:]):
        return None
    for lane, (offset, _) in enumerate(accesses):
        if offset.terms == first.terms:  # the same terms: the constants differ by the step
            if offset.const - first.const != lane:
                return None
            continue
        step = offset - first
        if not step.is_const or step.const != lane:
            return None
    aligned = first.const % width == 0 and all(coefficient % width == 0 for coefficient in first.terms.values())
    return validity if aligned else None


class _Emitter:
    """Names values and writes their statements; a value already computed in the same scope reuses
    its variable, so a load shared by every copy of an upcast body is read once. The renderer
    is asked only what it can compute (vector widths and ops), never for text."""

    def __init__(self, renderer, params, namer: _Namer):
        self.renderer, self.params, self.namer = renderer, params, namer
        self.widths: dict[Var, int] = {}  # lanes of each vector value (absent: a scalar)

    def emit(self, node: KernelNode, names: dict, seen: dict, statements: list[Statement], lanes: list) -> None:
        """Name `node`'s value in one copy of the body; `lanes` holds the indexer of each position
        the copy covers (one, except in vector copies)."""
        if node.op is Ops.TAKE:
            self.emit_take(node, names, seen, statements, lanes)
            return
        if len(lanes) == 1:
            expr, width = self.scalar_expression(node, [names[src] for src in node.srcs], lanes[0]), 1
        else:
            expr, width = self.vector_expression(node, names, lanes)
        key = (node.dtype, width, expr)
        name = seen.get(key)
        if name is None:
            name = seen[key] = Var(self.namer.next())
            statements.append(Statement(name, node.dtype, expr, width=width))
            if width > 1:
                self.widths[name] = width
        names[node] = name

    def emit_take(self, node: KernelNode, names: dict, seen: dict, statements: list[Statement], lanes: list) -> None:
        """An indexed load: the index value checked against [0, n), then the source's statements
        emitted with the last axis of every view at that index (0 outside), so the address of each
        load comes from another buffer. Kernels with a TAKE get no opts, so there is one lane."""
        assert len(lanes) == 1, "a TAKE kernel has no vector copies"
        source, index = node.srcs
        size, indexer = node.arg, lanes[0]
        zero = Const(0, node.dtype)
        if size == 0:
            names[node] = zero
            return
        inside = Var(self.namer.next())
        statements.append(Statement(inside, dtypes.bool, InRange(names[index], size)))
        position = Var(self.namer.next())
        as_int64 = Op(Ops.CAST, (index.dtype,), dtypes.int64, (names[index],))
        statements.append(Statement(position, dtypes.int64, Op(Ops.WHERE, (dtypes.bool, dtypes.int64, dtypes.int64),
                                                                dtypes.int64, (inside, as_int64, Const(0, dtypes.int64)))))
        taken = var(position.name, 0, size - 1)
        source_names: dict = {}
        for source_node in _walk_above([source], set()):
            self.emit(source_node, source_names, seen, statements, [lambda tracker: indexer(tracker, taken)])
        expr = Op(Ops.WHERE, (dtypes.bool, node.dtype, node.dtype), node.dtype, (inside, source_names[source], zero))
        names[node] = Var(self.namer.next())
        statements.append(Statement(names[node], node.dtype, expr))

    def scalar_expression(self, node: KernelNode, operands: list, indexer):
        if node.op is Ops.LOAD:
            return self.load(node, *_access(indexer, node.arg[1]))
        if node.op is Ops.CONST:
            expr = Const(node.arg[0], node.dtype)
            if node.arg[1] is not None:
                _, valid = _access(indexer, node.arg[1])
                expr = expr if valid is True else Masked(expr, node.dtype, valid) if valid is not False else Const(0, node.dtype)
            return expr
        if node.op is Ops.VALID:
            _, valid = _access(indexer, node.arg)
            return Const(valid, node.dtype) if isinstance(valid, bool) else Valid(valid)
        return Op(node.op, tuple(src.dtype for src in node.srcs), node.dtype, tuple(operands))

    def load(self, node: KernelNode, index: Lin, valid: Condition | bool, splat: bool = False):
        """A LOAD node's read at index; never valid, a 0 (equal to every other 0 of its dtype)."""
        return Load(self.params[node.arg[0]][0], node.dtype, index, valid, splat) if valid is not False else Const(0, node.dtype)

    def vector_expression(self, node: KernelNode, names: dict, lanes: list) -> tuple:
        """(value, width) of a node across the lanes of a vector copy: a leaf the same in every lane
        stays a scalar, an aligned contiguous unmasked load is one vector load, other leaves gather
        their lanes; an op is scalar over scalars, else a vector op with scalar operands broadcast, or
        one that the renderer computes lane by lane (`vector_dtype`) a vector of its lanes' results."""
        renderer, width = self.renderer, len(lanes)
        if node.op in LEAF_OPS:
            values = [self.scalar_expression(node, [], indexer) for indexer in lanes]
            if all(value == values[0] for value in values):
                if node.op is Ops.LOAD:  # read once, broadcast where a vector needs it
                    return self.load(node, *_access(lanes[0], node.arg[1]), splat=True), 1
                return values[0], 1
            validity = _vector_access_validity(node.arg[1], lanes) if node.op is Ops.LOAD else None
            if validity is not None:
                index, _ = _access(lanes[0], node.arg[1])
                load = VectorLoad(self.params[node.arg[0]][0], node.dtype, index, width)
                return (load if validity is True else Masked(load, node.dtype, validity, width)), width
            return Vector(node.dtype, tuple(values)), width
        operands = [names[src] for src in node.srcs]
        if all(operand not in self.widths for operand in operands):
            return self.scalar_expression(node, operands, lanes[0]), 1
        # lane by lane where the renderer has no vector form: each lane's op on its operands' lanes
        if not renderer.computes_on_vectors(node.op, node.srcs[0].dtype, node.dtype):
            values = [self.scalar_expression(node, [self.lane_operand(operand, src.dtype, lane) for operand, src
                                                    in zip(operands, node.srcs)], indexer)
                      for lane, indexer in enumerate(lanes)]
            return Vector(node.dtype, tuple(values)), width
        operands = [self.vector_operand(operand, src.dtype, width) for operand, src in zip(operands, node.srcs)]
        return Op(node.op, tuple(src.dtype for src in node.srcs), node.dtype, tuple(operands), width), width

    def lane_operand(self, value, dtype: DType, lane: int):
        """One lane of a value (a scalar is the same in every lane)."""
        return Lane(value, dtype, lane) if value in self.widths else value

    def vector_operand(self, value, dtype: DType, width: int):
        """A value as a vector of `width` lanes: a scalar is broadcast."""
        return value if self.widths.get(value) == width else Broadcast(dtype, width, value)


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


def rendered_pieces(kernel: Kernel, renderer) -> list[Kernel] | None:
    """The pieces a concatenation runs as (codegen/pieces.py) on a renderer that prints pieces
    (`render_pieces`: the C dialect); None for other kernels and renderers."""
    return concatenated_pieces(kernel) if hasattr(renderer, "render_pieces") else None


def kernel_source(kernel: Kernel, renderer, opts: list | None = None, optimize: bool = True) -> tuple[LoopProgram, str]:
    """A kernel's loop program under `opts` (the heuristic's where None) and its source in the
    renderer's dialect: the one way a program is made, for a realize (realize.py) and for each
    candidate of a BEAM search (beam.py). Under the heuristic, a concatenation (codegen/pieces.py)
    on a renderer that prints pieces is a program per piece, all in one function; the program
    returned is then the first piece's, named for the kernel."""
    pieces = rendered_pieces(kernel, renderer) if opts is None and optimize else None
    if pieces is None:
        program = linearize(kernel, renderer, optimize=optimize, opts=opts)
        return program, renderer.render_program(program)
    programs = [linearize(piece, renderer) for piece in pieces]
    return dataclasses.replace(programs[0], name=kernel.name), renderer.render_pieces(kernel.name, programs)


def linearize(kernel: Kernel, renderer, optimize: bool = True, opts=None,
              parallel_threshold: int = PARALLEL_THRESHOLD) -> LoopProgram:
    """The loop program of a kernel for `renderer`, which says what its dialect can do (vector
    widths and ops, accumulator arrays, work-groups) and prints the program afterwards.

    `opts` (a list of Opt over the dim-merged kernel) arranges the loops; None asks the default
    heuristic (codegen/opts.py). With optimize=False (NOOPT=1) the loop nest is the plain one: one
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

    # (view, whether it is the output's, the position) -> its offset and conditions: the lanes of a
    # vector copy and the copies of an upcast body ask for the same ones again (MobileNetV2's
    # kernels: 51,000 asks, 19,800 distinct). Keyed by the view's id, the view kept in the value so
    # that no other takes its id meanwhile: hashing a view hashes every field of its stack.
    accesses: dict[tuple, tuple[ShapeTracker, tuple[Lin, list]]] = {}
    # (view, whether it is the output's, expanded axes) -> the access with each expanded axis a
    # variable, split into what every position shares and how far a step along each axis moves the
    # offset; None when an axis reaches a division, a remainder or a condition. Then a position's
    # access is that offset moved, not the view's arithmetic done again for each lane (rendering
    # MobileNetV2's training step, 445 kernels: 2.9 -> 1.5 s, with the keys by id above)
    steps_along: dict[tuple, tuple[ShapeTracker, tuple | None]] = {}
    lane_vars = {axis: var(f"lane{axis}", 0, full_shape[axis] - 1) for axis in upcast_axes + unroll_axes}
    lane_axes = {f"lane{axis}": axis for axis in lane_vars}

    def indices_at(position: dict[int, int], out: bool) -> list[Lin]:
        return [Lin.of(0) if out and axis in axes else Lin.of(position[axis]) if axis in position else index
                for axis, index in enumerate(loop_indices)]

    def expanded_access(tracker: ShapeTracker, out: bool, expanded: tuple[int, ...]):
        lanes = {axis: lane_vars[axis] for axis in expanded}
        offset, conditions = tracker.index_and_valid([Lin.of(0) if out and axis in axes else lanes.get(axis, index)
                                                      for axis, index in enumerate(loop_indices)])
        names = {f"lane{axis}" for axis in expanded}
        steps = {}
        for atom, coefficient in offset.terms.items():
            if atom.kind == "var":
                if atom.name in names:
                    steps[lane_axes[atom.name]] = coefficient
            elif atom.inner.mentions(names):
                return None
        if any(expr.mentions(names) for expr, _, _ in conditions):
            return None
        shared = Lin({atom: coefficient for atom, coefficient in offset.terms.items()
                      if atom.kind != "var" or atom.name not in names}, offset.const)
        return shared, steps, conditions

    def access(tracker: ShapeTracker, out: bool, position: dict[int, int]) -> tuple[Lin, list]:
        expanded = tuple(axis for axis in position if not (out and axis in axes))
        if not expanded:
            return tracker.index_and_valid(indices_at(position, out))
        key = (id(tracker), out, expanded)
        found = steps_along.get(key)
        if found is None:
            found = steps_along[key] = (tracker, expanded_access(tracker, out, expanded))
        general = found[1]
        if general is None:
            return tracker.index_and_valid(indices_at(position, out))
        shared, steps, conditions = general
        return shared.shifted(sum(step * position[axis] for axis, step in steps.items())), conditions

    def indexer_at(position: dict[int, int]):
        """The indexer of one position of the body: expanded axes at `position`, the rest loop
        variables. It maps a view to its offset and validity conditions there."""
        full_position = tuple(position.items())
        out_position = tuple(item for item in full_position if item[0] not in axes)

        def indexer(tracker: ShapeTracker, taken: Lin | None = None) -> tuple[Lin, list]:
            """`taken`: the index along the extra last dim of a TAKE's source."""
            if taken is not None:
                return tracker.index_and_valid(indices_at(position, False) + [taken])
            out = tracker.shape != full_shape
            assert not out or tracker.shape == out_shape
            key = (id(tracker), out, out_position if out else full_position)
            found = accesses.get(key)
            if found is None:
                found = accesses[key] = (tracker, access(tracker, out, position))
            return found[1]
        return indexer

    def lanes_at(positions: list[dict[int, int]]) -> list:
        return [indexer_at(position) for position in positions]

    output_count = kernel.output_count
    params = [(f"data{number}", dtype, number < output_count) for number, dtype in enumerate(kernel.buffer_dtypes)]
    emitter = _Emitter(renderer, params, _Namer())
    values = [store.srcs[0] for store in kernel.stores]
    guards = [store.srcs[1] if len(store.srcs) > 1 else None for store in kernel.stores]
    reduce_nodes = [node for node in kernel.ast.walk() if node.is_reduce]  # a reduce after those it reads
    assert len(reduce_nodes) <= 1 or not inner_loops, "accumulator arrays serve one reduce"
    plain = not (block_loops or inner_loops or group_lane)
    # a sum of uint8 by int8 products the renderer adds 4 to a lane at a time: the products are not
    # values of the tile (their bytes are not vectors), only the sums and what follows them
    byte_dot = byte_dot_axes(kernel, kinds, renderer) if optimize and plain else None
    products = frozenset(reduce_nodes[0].srcs[0].walk()) if byte_dot else frozenset()
    vector_width = _vector_width(kernel, renderer, upcast_axes, plain, lanes_at, products) if optimize else 1
    if byte_dot and vector_width != full_shape[byte_dot[0]]:
        byte_dot, vector_width = None, _vector_width(kernel, renderer, upcast_axes, plain, lanes_at)
    # each copy of the body: its positions, one per lane (a single one unless vectorized)
    outputs = _lanes(_combinations(full_shape, upcast_axes), vector_width)
    if byte_dot:  # one instruction takes the unrolled axis's 4 steps
        copies = [[{**lane, byte_dot[1]: 0} for lane in output] for output in outputs]
    else:
        copies = [[{**lane, **step} for lane in output] for step in _combinations(full_shape, unroll_axes)
                  for output in outputs]
    reductions: list[_Reduction] = []
    loops: list[list[_Reduction]] = []  # the reduces of each pass over the reduce loops
    shared = not (block_loops or inner_loops or group_lane or byte_dot)
    for node in reduce_nodes:
        stage = _Reduction(node, copies, len(outputs), emitter, inner_loops, bool(optimized.opts), bool(byte_dot))
        joins = shared and loops and _joins_loop(node, [earlier.node for earlier in loops[-1]])
        stage.emit_body(lanes_at, reductions, loops[-1][0] if joins else None)
        reductions.append(stage)
        if joins:
            loops[-1].append(stage)
        else:
            loops.append([stage])
    reduction = reductions[-1] if reductions else None
    reduce_node = reduction.node if reduction else None
    # Values after the reduce are emitted afresh, even one (a constant) also used inside the loop,
    # whose variable is out of scope here.
    outer: list[Statement] = []
    stores, partial_stores, raw_stores = [], [], []
    seen: dict = {}
    # A tile's epilogue (bias, relu, ...) reads each sum back from the output, not from its register:
    # gcc keeps a tile's accumulators in vector registers only when every use after the loop
    # vectorizes too, and a relu's select does not (an 8x slower matmul+relu without this). Vector
    # copies need no such help: their sums are vector variables.
    spill = (renderer.spills_tile_epilogue and vector_width == 1 and len(reductions) == 1 and len(outputs) > 1
             and values[0] is not reduce_node
             and reduce_node.dtype == kernel.buffer_dtypes[0] and reduce_node.dtype.itemsize >= 4)
    after_reduce = _walk_above(values + [guard for guard in guards if guard is not None], set(reduce_nodes))
    threads = next((opt.amount for opt in optimized.opts if opt.op == "THREADS"), None)
    for number, output in enumerate(outputs):
        lanes = lanes_at(output)
        store_indices = [_access(lanes[0], store.arg[1])[0] for store in kernel.stores]
        names = {stage.node: stage.targets[number] for stage in reductions}
        if spill:
            names[reduce_node] = Element(params[0][0], store_indices[0])
            raw_stores.append(Store(params[0][0], store_indices[0], reduction.targets[number]))
        for node in after_reduce:
            emitter.emit(node, names, seen, outer, lanes)
        for store, store_index, value, guard in zip(kernel.stores, store_indices, values, guards):
            param, guard = params[store.arg[0]][0], None if guard is None else names[guard]
            if vector_width == 1:
                stores.append(Store(param, store_index, names[value], guard))
            elif _is_vector_access(store.arg[1], lanes):
                stores.append(Store(param, store_index, emitter.vector_operand(names[value], value.dtype, vector_width),
                                    guard, vector_width))
            else:  # a reduce's outputs strided along the lanes (a split sum's partials): lane by lane
                stores += [Store(param, _access(indexer, store.arg[1])[0], emitter.lane_operand(names[value], value.dtype, lane), guard)
                           for lane, indexer in enumerate(lanes)]
        if reduction is not None and block_loops:
            partial_stores.append(Store(params[0][0], store_indices[0], reduction.targets[number]))
    stages = [_stage(loop, len(outputs)) for loop in loops]
    last = stages.pop() if stages else ReduceStage([], [], [])
    return LoopProgram(name, params, global_loops, reduce_loops, last.inner, last.accumulators, outer, stores,
                       full_shape, inner_loops,
                       parallel=_runs_on_threads(threads, full_shape, global_loops, optimize, parallel_threshold),
                       threads=threads,
                       vectorize=optimize, opts=optimized.opts, block_loop=block_loops[0] if block_loops else None,
                       partial_stores=partial_stores, combine=last.combine, raw_stores=raw_stores,
                       prior_stages=stages, reduces=last.reduces,
                       local_loops=local_loops, group_lane=group_lane, results=last.results,
                       vector_width=vector_width, select_only_loads=has_select_only_load(kernel),
                       masked_reads=_has_masked_read(kernel))


def _has_masked_read(kernel: Kernel) -> bool:
    """Whether a LOAD reads through a mask (padding): gcc 12's loop vectorizer (AVX-512) gave some
    such loads a wrong mask, zeros where a (4, 2) input padded to (6, 2) has values, or a (4, 17, 2)
    padded to (7, 21, 3), or a (2, 3, 3, 3) padded to (4, 5, 6, 3)
    (test_a_padded_read_is_right_on_every_device,
    test_fuzz_padded_views_of_short_axes). The wrong answers came where a loop had two iterations or
    the padding left two values of an axis, but no rule of that kind held up against a fuzz of
    padded views, so every masked read keeps it out: ShuffleNet-v2 10-18% slower, MnasNet 9-12%,
    Inception-v3 4%, the others within their noise, before padded copies of 24 channels took half
    vectors (codegen/opts.py `contiguous_vector_tile`) and won part of it back."""
    for node in kernel.ast.walk():
        if node.op is Ops.LOAD and any(view.mask is not None for view in node.arg[1].views):
            return True
    return False


def vector_dtype(kernel: Kernel, renderer, skip: frozenset = frozenset()) -> DType | None:
    """The one dtype of a kernel's values when every op is one the renderer computes on vectors
    (`renderer.vector_ops`), the only other values being masks those ops make that no store
    writes: what linearize needs to write a tile as vector copies (with plain loops and stores
    along the lanes, _vector_width). None otherwise. A renderer with `lanewise_ops` (C)
    computes the other elementwise ops lane by lane on vectors (an epilogue's sqrt, gelu's erf
    tests), masks included, so there a reduce's op, the one dtype and the unstored masks count.
    Nodes in `skip` (a byte dot product's, which the renderer reads from memory itself) do not count."""
    operations = getattr(renderer, "vector_ops", frozenset())
    lanewise = getattr(renderer, "lanewise_ops", False)
    nodes = [node for node in kernel.ast.walk() if node.op not in (Ops.SINK, Ops.STORE) and node not in skip]
    # masks (comparisons, and the selects they steer) may be vectors too where the renderer says so
    masks = {node for node in nodes if node.dtype == dtypes.bool and (lanewise or node.op in operations)}
    together = getattr(renderer, "vector_dtypes", {})
    kinds = {node.dtype for node in nodes if node not in masks} - _carried_dtypes(kernel, nodes, together)
    # several dtypes of one width where the renderer has vectors of each (C: an int32 product's
    # float32 epilogue): their vectors have the same lanes
    if len(kinds) > 1 and not (kinds <= set(together) and len({dtype.itemsize for dtype in kinds}) == 1 and lanewise):
        return None
    if not kinds or any(store.srcs[0] in masks for store in kernel.stores):
        return None
    if any(dtype.itemsize < 4 and dtype in together for dtype in kinds):
        return None  # a narrow integer computed on (compared, selected): its masks would have other lanes
    if any(node.op not in LEAF_OPS and node.op not in operations and (node.is_reduce or not lanewise) for node in nodes):
        return None  # a reduce's accumulator is updated with the vector op itself
    return max(kinds, key=lambda dtype: dtype.is_float)  # the one, or the float of an integer product's epilogue


def _carried_dtypes(kernel: Kernel, nodes: list[KernelNode], together) -> set:
    """Integer dtypes narrower than 4 bytes (a quantized uint8 or int8) that the kernel only reads,
    converts to and from and stores, never computes on, where the renderer has vectors of them: a
    quantize-dequantize pair's round trip through uint8, a quantized value stored or read back. Their
    vectors have the lanes of the kernel's 4-byte values, fewer bytes (C's __builtin_convertvector
    between the two); on them a comparison would give a mask of other lanes, so none may be compared.
    Where they made a kernel scalar, MobileNetV2 quantized to QDQ form ran its quantize-dequantize
    pairs of padded activations at 9 GFLOP/s."""
    narrow = {node.dtype for node in nodes if node.dtype in together and node.dtype.itemsize < 4}
    for node in itertools.chain(nodes, kernel.stores):
        for src in node.srcs:
            if src.dtype in narrow and not (node.op is Ops.STORE or node.op is Ops.CAST and node.dtype in together
                                            and node.dtype.itemsize == 4):
                narrow.discard(src.dtype)
    return {dtype for dtype in narrow if all(node.op in (Ops.LOAD, Ops.CAST) for node in nodes if node.dtype == dtype)}


def _vector_width(kernel: Kernel, renderer, upcast_axes: list[int], plain: bool, lanes_at,
                  skip: frozenset = frozenset()) -> int:
    """How many lanes of the last upcast axis each copy of the body covers: the renderer's vector
    width for the kernel's dtype and that axis's length, when every value has that dtype (or is a
    mask that one of the renderer's vector ops makes, a comparison, and is not stored),
    every op is one the renderer computes on vectors (`renderer.vector_ops`), the loops are plain
    (no BLOCK, GROUP or accumulator arrays) and, without a reduce, every store is contiguous and
    aligned along the lanes (a reduce's outputs, each stored once after its loops, may go lane by
    lane); else 1. `skip`: as vector_dtype's."""
    dtype = vector_dtype(kernel, renderer, skip)
    # a guarded store is a test per element, kept scalar: where the guard does not vary along the
    # inner loops, C compilers hoist it out of them (a KV cache row written in 0.02 ms, not 0.9)
    guarded = any(len(store.srcs) > 1 for store in kernel.stores)
    if not upcast_axes or not plain or dtype is None or guarded:
        return 1
    axis = upcast_axes[-1]
    width = renderer.vector_width(dtype, kernel.full_shape[axis])
    if width <= 1:
        return 1
    if kernel.reduce_axes:
        return width  # a store per output after a whole reduce: one strided along the lanes goes lane by lane
    starts = [position for position in _combinations(kernel.full_shape, upcast_axes) if position[axis] % width == 0]
    for start in starts:
        lanes = lanes_at([{**start, axis: start[axis] + lane} for lane in range(width)])
        if not all(_is_vector_access(store.arg[1], lanes) for store in kernel.stores):
            return 1
    return width


def _lanes(positions: list[dict[int, int]], width: int) -> list[list[dict[int, int]]]:
    """The copies of the body: each position alone, or with width > 1 the positions grouped in runs
    of `width` along the last upcast axis (which varies fastest, so runs are consecutive)."""
    if width == 1:
        return [[position] for position in positions]
    return [positions[start:start + width] for start in range(0, len(positions), width)]


def _runs_on_threads(threads: int | None, full_shape, global_loops, optimize: bool, parallel_threshold: int) -> bool:
    """Whether the outermost global loop is split over CPU threads: as a THREADS opt says (its
    count, or None), else when the kernel is big enough for the threads to pay off."""
    if threads is not None:
        return threads > 1 and bool(global_loops)
    return optimize and math.prod(full_shape) >= parallel_threshold and bool(global_loops)


def _joins_loop(node: KernelNode, others: list[KernelNode]) -> bool:
    """Whether a reduce can run in the same pass over the reduce loops as `others` (reduces of the
    same op and dtype, emitted before it): it reads none of them. A batch norm's gradient sums the
    gradient and its product with the normalized input; in one pass each value is read once and what
    both compute (a SiLU's gradient before a group norm's) is computed once."""
    first = others[0]
    if node.op is not first.op or node.dtype != first.dtype:
        return False
    below = set(node.srcs[0].walk())
    return not any(other in below for other in others)


def _stage(loop: list["_Reduction"], output_count: int) -> ReduceStage:
    """The ReduceStage of the reduces that share one pass over the reduce loops."""
    return ReduceStage([accumulator for reduction in loop for accumulator in reduction.accumulators],
                       loop[0].inner, [statement for reduction in loop for statement in reduction.combine],
                       [accumulator for reduction in loop for accumulator in reduction.accumulators[:output_count]],
                       reduces=len(loop))


class _Reduction:
    """The statements of a reduce: one accumulator per copy of the body (the upcast outputs times
    the unrolled steps, which accumulate independently: ILP, and SIMD for reduces such as max that
    C cannot vectorize as a reduction), the loop body, and the folding of each output's unrolled
    accumulators into its first one after the loop."""

    def __init__(self, reduce_node: KernelNode, copies: list[list[dict[int, int]]], output_count: int,
                 emitter: _Emitter, inner_loops: list[Loop], tiled: bool, byte_dot: bool = False):
        self.node, self.copies, self.emitter, self.output_count = reduce_node, copies, emitter, output_count
        self.fused = _fused_multiply_add(reduce_node, tiled)
        self.byte_dot = byte_dot  # a uint8-by-int8 product: the renderer's dot products read its bytes
        op, dtype = reduce_node.op, reduce_node.dtype
        self.width = len(copies[0])
        self.accumulators = [Accumulator(emitter.namer.next("acc"), op, dtype, self.width) for _ in copies]
        index = accumulator_index(inner_loops) if inner_loops else None
        self.targets = [Var(accumulator.name) if index is None else Element(accumulator.name, index)
                        for accumulator in self.accumulators]
        if self.width > 1:
            emitter.widths.update((target, self.width) for target in self.targets)
        self.combine = []
        for number in range(output_count, len(copies)):
            final, partial = self.targets[number % output_count], self.targets[number]
            update = Accumulate(op, dtype, final, partial, self.width)
            self.combine.append(Statement(final, dtype, update, declare=False, width=self.width))
        self.inner: list[Statement] = []
        self.seen: dict = {}  # the values the body computed, by expression (_Emitter.emit)

    def emit_body(self, lanes_at, earlier: list["_Reduction"], sharing: "_Reduction | None" = None) -> None:
        """The loop body; the results of `earlier` reduces (run before this one) are read by name.
        With `sharing`, a reduce of the same pass over the loops, the body goes on after that one's,
        reusing the values it computed."""
        if sharing is not None:
            self.inner, self.seen = sharing.inner, sharing.seen
        source, emitter = self.node.srcs[0], self.emitter
        dtype, width = self.node.dtype, self.width
        if self.byte_dot:
            self.emit_byte_dots(lanes_at)
            return
        # a fused multiply-add reads the product's operands: the product itself is not emitted (an
        # unused variable, which an exported file compiled with -Wall -Werror must not have)
        nodes = _walk_above(list(source.srcs) if self.fused else [source], {stage.node for stage in earlier})
        seen = self.seen
        for number, (target, positions) in enumerate(zip(self.targets, self.copies)):
            names = {stage.node: stage.targets[number % self.output_count] for stage in earlier}
            lanes = lanes_at(positions)
            for node in nodes:
                emitter.emit(node, names, seen, self.inner, lanes)
            operands = [names[src] for src in source.srcs] if self.fused else [names[source]]
            if width > 1:
                operands = [emitter.vector_operand(operand, dtype, width) for operand in operands]
            if self.fused:
                update = Fma(dtype, *operands, target, width)
            else:
                update = Accumulate(self.node.op, dtype, target, operands[0], width)
            self.inner.append(Statement(target, dtype, update, declare=False, width=width))

    def emit_byte_dots(self, lanes_at) -> None:
        """Each copy's sum as the renderer's byte dot products: the uint8 load's 4 bytes at the copy's
        first lane (the same in every lane), the int8 load's 4 bytes per lane from there on."""
        params = self.emitter.params
        weights, activations = sorted((src.srcs[0] for src in self.node.srcs[0].srcs), key=lambda load: load.dtype.name)
        for target, positions in zip(self.targets, self.copies):
            first = lanes_at(positions)[0]
            addresses = [Element(params[load.arg[0]][0], _access(first, load.arg[1])[0]) for load in (activations, weights)]
            update = ByteDot(target, *addresses, self.width)
            self.inner.append(Statement(target, self.node.dtype, update, declare=False, width=self.width))
