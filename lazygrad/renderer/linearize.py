"""Turns a scheduled Kernel into a loop program: loops, straight-line statements, one store.

Called by every renderer. It decides the loop nest (global loops outside, reduce loops inside,
adjacent dims merged when every view allows it, so a contiguous 4096x4096 elementwise kernel is
one flat loop), names every value, and asks the renderer for the text of each expression, so the
dialect files only supply syntax. Views become index expressions here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from lazygrad.dtype import DType
from lazygrad.ops import OPS
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


@dataclass
class LoopProgram:
    name: str
    params: list[tuple[str, DType, bool]]        # (name, dtype, is_output)
    global_loops: list[Loop]
    reduce_loops: list[Loop]
    inner: list[Statement]                       # inside the reduce loops (empty without a reduce)
    accumulator: tuple[str, str, DType, str] | None  # (name, reduce op, dtype, value name to fold in)
    outer: list[Statement]                       # after the reduce, per output element
    store: tuple[str, str, str]                  # (param name, index text, value name)
    full_shape: tuple[int, ...] = ()
    inner_loops: list[Loop] = field(default_factory=list)  # output loops run inside the reduce, one
    #                                                        accumulator each (an array, see accumulator_index)
    parallel: bool = False       # split the outer loop over CPU cores
    vectorize: bool = False      # mark the innermost reduce loop as a SIMD reduction


def accumulator_index(inner_loops: list[Loop]) -> str:
    """The row-major position of the current inner-loop iteration in the accumulator array."""
    index = Lin.of(0)
    stride = 1
    for loop in reversed(inner_loops):
        index = index + var(loop.var, 0, loop.size - 1) * stride
        stride *= loop.size
    return index.render()


def _trackers(ast: KernelNode) -> set[ShapeTracker]:
    found = set()
    for node in ast.walk():
        if node.op in ("LOAD", "STORE"):
            found.add(node.arg[1])
        elif node.op == "CONST" and node.arg[1] is not None:
            found.add(node.arg[1])
        elif node.op == "VALID":
            found.add(node.arg)
    return found


def _reshape_ast(ast: KernelNode, mapping: dict[ShapeTracker, ShapeTracker]) -> KernelNode:
    """The same AST with every tracker replaced by its entry in mapping."""
    rebuilt: dict[KernelNode, KernelNode] = {}
    for node in ast.walk():
        srcs = tuple(rebuilt[src] for src in node.srcs)
        arg = node.arg
        if node.op in ("LOAD", "STORE"):
            arg = (arg[0], mapping[arg[1]])
        elif node.op == "CONST" and arg[1] is not None:
            arg = (arg[0], mapping[arg[1]])
        elif node.op == "VALID":
            arg = mapping[arg]
        rebuilt[node] = KernelNode.make(node.op, node.dtype, srcs, arg)
    return rebuilt[ast]


def reshape_kernel(kernel: Kernel, new_full: tuple[int, ...], new_axes: set[int]) -> Kernel | None:
    """The kernel over a reshaped iteration space, or None if some view would need a second view."""
    out_shape = kernel.output_shape
    new_out = tuple(1 if axis in new_axes else size for axis, size in enumerate(new_full))
    mapping = {}
    for tracker in _trackers(kernel.ast):
        assert tracker.shape in (kernel.full_shape, out_shape)
        reshaped = tracker.reshape(new_full if tracker.shape == kernel.full_shape else new_out)
        if len(reshaped.views) != len(tracker.views):
            return None
        mapping[tracker] = reshaped
    return Kernel(_reshape_ast(kernel.ast, mapping), tuple(new_full), tuple(sorted(new_axes)), kernel.buffer_dtypes)


def merge_dims(kernel: Kernel) -> Kernel:
    """Merge adjacent loop dims of the same kind wherever every view reshapes without a new view."""
    dim = 0
    while dim < len(kernel.full_shape) - 1:
        shape, axes = list(kernel.full_shape), set(kernel.reduce_axes)
        merged = None
        if (dim in axes) == (dim + 1 in axes):
            new_full = tuple(shape[:dim] + [shape[dim] * shape[dim + 1]] + shape[dim + 2:])
            new_axes = {axis if axis <= dim else axis - 1 for axis in axes}
            merged = reshape_kernel(kernel, new_full, new_axes)
        if merged is None:
            dim += 1
        else:
            kernel = merged
    return kernel


def split_dim(kernel: Kernel, dim: int, inner: int) -> Kernel | None:
    """Split loop dim into (size // inner, inner), both of the same kind."""
    shape, axes = list(kernel.full_shape), set(kernel.reduce_axes)
    new_full = tuple(shape[:dim] + [shape[dim] // inner, inner] + shape[dim + 1:])
    new_axes = {axis if axis < dim else axis + 1 for axis in axes} | ({dim} if dim in axes else set())
    return reshape_kernel(kernel, new_full, new_axes)


def _load_strides(kernel: Kernel, nodes) -> list[dict[int, int]]:
    """For each single-view load over the full shape: its memory stride along each loop dim."""
    probe = [var(f"p{a}", 0, max(size - 1, 0)) if size > 1 else Lin.of(0) for a, size in enumerate(kernel.full_shape)]
    strides = []
    for node in nodes:
        if node.op != "LOAD" or node.arg[1].shape != kernel.full_shape or len(node.arg[1].views) != 1:
            continue
        offset, _ = node.arg[1].index_and_valid(probe)
        strides.append({int(atom.name[1:]): coeff for atom, coeff in offset.terms.items() if atom.kind == "var"})
    return strides


ACCUMULATOR_LIMIT = 8192  # elements of a per-thread accumulator array (32 KiB of float32: L1-sized)


def choose_inner_axes(kernel: Kernel) -> tuple[Kernel, list[int]]:
    """For a reduce whose inner loop strides through memory (matmul's B, column sums), move the
    output axis that is contiguous in memory inside the reduce loop, with one accumulator per
    output: the loads then run along rows and vectorize. A few rows of the axis before it join, so
    each loaded row is reused from L1 (a register-and-cache tile, without packing)."""
    if not kernel.reduce_axes:
        return kernel, []
    reduce_node = next(node for node in kernel.ast.walk() if node.is_reduce)
    globals_ = [axis for axis, size in enumerate(kernel.full_shape) if axis not in kernel.reduce_axes and size > 1]
    if not globals_ or kernel.full_shape[globals_[-1]] > ACCUMULATOR_LIMIT:
        return kernel, []
    last, reduce_axis = globals_[-1], max(kernel.reduce_axes)
    strided = [strides for strides in _load_strides(kernel, reduce_node.srcs[0].walk())
               if strides.get(reduce_axis, 0) not in (0, 1) and strides.get(last) == 1]
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


def _walk_above(root: KernelNode, stop: KernelNode | None) -> list[KernelNode]:
    """Nodes reachable from root without entering `stop`, sources first (stop itself excluded)."""
    order, seen = [], set()
    stack = [(root, False)]
    while stack:
        node, sources_done = stack.pop()
        if sources_done:
            order.append(node)
        elif node not in seen and node is not stop:
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


def linearize(kernel: Kernel, renderer, optimize: bool = True, parallel_threshold: int = 1 << 15) -> LoopProgram:
    """The loop program of a kernel; `renderer` supplies the text of each expression.

    With optimize=False (NOOPT=1) the loop nest is the plain one: one loop per dim, one thread,
    no vectorization hints."""
    name = kernel.name
    inner_axes: list[int] = []
    if optimize:
        kernel = merge_dims(kernel)
        if renderer.accumulator_arrays:
            kernel, inner_axes = choose_inner_axes(kernel)
    full_shape, axes = kernel.full_shape, set(kernel.reduce_axes)
    full_indices: list[Lin] = []
    global_loops, reduce_loops, inner_loops = [], [], []
    for axis, size in enumerate(full_shape):
        if size == 1:
            full_indices.append(Lin.of(0))
            continue
        loop_var = f"{'r' if axis in axes else 'i'}{axis}"
        full_indices.append(var(loop_var, 0, max(size - 1, 0)))
        loops = reduce_loops if axis in axes else (inner_loops if axis in inner_axes else global_loops)
        loops.append(Loop(loop_var, size, axis in axes))
    out_indices = [Lin.of(0) if axis in axes else index for axis, index in enumerate(full_indices)]
    out_shape = kernel.output_shape

    def indices_for(tracker: ShapeTracker) -> list[Lin]:
        if tracker.shape == full_shape:
            return full_indices
        assert tracker.shape == out_shape
        return out_indices

    def index_text(tracker: ShapeTracker) -> tuple[str, str | bool]:
        offset, conditions = tracker.index_and_valid(indices_for(tracker))
        return offset.render(renderer), render_condition(conditions)

    params = [(f"data{number}", dtype, number == 0) for number, dtype in enumerate(kernel.buffer_dtypes)]
    names: dict[KernelNode, str] = {}
    namer = _Namer()

    def emit(node: KernelNode, statements: list[Statement]) -> None:
        operands = [names[src] for src in node.srcs]
        if node.op == "LOAD":
            index, valid = index_text(node.arg[1])
            expr = renderer.render_load(params[node.arg[0]][0], node.dtype, index, valid)
        elif node.op == "CONST":
            value = renderer.render_const(node.arg[0], node.dtype)
            if node.arg[1] is not None:
                _, valid = index_text(node.arg[1])
                value = renderer.render_masked(value, node.dtype, valid)
            expr = value
        elif node.op == "VALID":
            _, valid = index_text(node.arg)
            expr = renderer.render_const(valid, node.dtype) if isinstance(valid, bool) else f"({valid})"
        else:
            expr = renderer.render_op(node.op, [src.dtype for src in node.srcs], node.dtype, operands)
        names[node] = namer.next()
        statements.append(Statement(names[node], node.dtype, expr))

    value = kernel.ast.srcs[0]
    reduce_nodes = [node for node in value.walk() if node.is_reduce]
    assert len(reduce_nodes) <= 1, "one reduce per kernel"
    inner: list[Statement] = []
    accumulator = None
    reduce_node = reduce_nodes[0] if reduce_nodes else None
    if reduce_node is not None:
        for node in reduce_node.srcs[0].walk():
            emit(node, inner)
        accumulator_name = namer.next("acc")
        accumulator = (accumulator_name, reduce_node.op, reduce_node.dtype, names[reduce_node.srcs[0]])
        names[reduce_node] = accumulator_name + (f"[{accumulator_index(inner_loops)}]" if inner_loops else "")
    # Values after the reduce are emitted afresh, even one (a constant) also used inside the loop,
    # whose variable is out of scope here.
    outer: list[Statement] = []
    for node in _walk_above(value, reduce_node):
        emit(node, outer)
    store_index, _ = index_text(kernel.ast.arg[1])
    return LoopProgram(name, params, global_loops, reduce_loops, inner, accumulator, outer,
                       (params[0][0], store_index, names[value]), full_shape, inner_loops,
                       parallel=optimize and math.prod(full_shape) >= parallel_threshold and bool(global_loops),
                       vectorize=optimize)
