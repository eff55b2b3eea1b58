"""Turns a scheduled Kernel into a loop program: loops, straight-line statements, one store.

Called by every renderer. It decides the loop nest (global loops outside, reduce loops inside,
adjacent dims merged when every view allows it, so a contiguous 4096x4096 elementwise kernel is
one flat loop), names every value, and asks the renderer for the text of each expression, so the
dialect files only supply syntax. Views become index expressions here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

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
    parallel: bool = False       # split the outer loop over CPU cores
    vectorize: bool = False      # mark the innermost reduce loop as a SIMD reduction


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
        rebuilt[node] = KernelNode(node.op, node.dtype, srcs, arg)
    return rebuilt[ast]


def merge_dims(kernel: Kernel) -> Kernel:
    """Merge adjacent loop dims of the same kind wherever every view reshapes without a new view."""
    ast, shape, axes = kernel.ast, list(kernel.full_shape), set(kernel.reduce_axes)
    dim = 0
    while dim < len(shape) - 1:
        if (dim in axes) != (dim + 1 in axes):
            dim += 1
            continue
        new_full = shape[:dim] + [shape[dim] * shape[dim + 1]] + shape[dim + 2:]
        new_out = [1 if axis in axes else size for axis, size in enumerate(shape)]
        new_out = new_out[:dim] + [new_out[dim] * new_out[dim + 1]] + new_out[dim + 2:]
        out_shape = tuple(1 if axis in axes else size for axis, size in enumerate(shape))
        mapping = {}
        for tracker in _trackers(ast):
            target = new_full if tracker.shape == tuple(shape) else new_out
            assert tracker.shape in (tuple(shape), out_shape)
            reshaped = tracker.reshape(tuple(target))
            if len(reshaped.views) != len(tracker.views):
                break
            mapping[tracker] = reshaped
        else:
            ast = _reshape_ast(ast, mapping)
            shape = new_full
            axes = {axis if axis <= dim else axis - 1 for axis in axes}
            continue
        dim += 1
    return Kernel(ast, tuple(shape), tuple(sorted(axes)), kernel.buffer_dtypes)


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
    if optimize:
        kernel = merge_dims(kernel)
    full_shape, axes = kernel.full_shape, set(kernel.reduce_axes)
    full_indices: list[Lin] = []
    global_loops, reduce_loops = [], []
    for axis, size in enumerate(full_shape):
        if size == 1:
            full_indices.append(Lin.of(0))
            continue
        loop_var = f"{'r' if axis in axes else 'i'}{axis}"
        full_indices.append(var(loop_var, 0, max(size - 1, 0)))
        (reduce_loops if axis in axes else global_loops).append(Loop(loop_var, size, axis in axes))
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
    inside: set[KernelNode] = set()
    if reduce_nodes:
        reduce_node = reduce_nodes[0]
        inside = set(reduce_node.srcs[0].walk())
        for node in reduce_node.srcs[0].walk():
            emit(node, inner)
        accumulator_name = namer.next("acc")
        accumulator = (accumulator_name, reduce_node.op, reduce_node.dtype, names[reduce_node.srcs[0]])
        names[reduce_node] = accumulator_name
        inside.add(reduce_node)
    outer: list[Statement] = []
    for node in value.walk():
        if node not in inside:
            emit(node, outer)
    store_index, _ = index_text(kernel.ast.arg[1])
    return LoopProgram(name, params, global_loops, reduce_loops, inner, accumulator, outer,
                       (params[0][0], store_index, names[value]), full_shape,
                       parallel=optimize and math.prod(full_shape) >= parallel_threshold and bool(global_loops),
                       vectorize=optimize)
