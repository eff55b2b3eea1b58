"""What one kernel computes: an AST of loads, constants and ops, stored through views.

The scheduler (fuse.py) builds these from the lazy graph; renderers turn them into source. A
kernel knows nothing about LazyBuffers: its buffers are numbered parameters, the outputs first
(0, 1, ...) and the inputs after them, and every memory access carries the ShapeTracker that says
how it is indexed. A kernel has several outputs only when it has no reduce: sibling elementwise
kernels merged by the scheduler, each output stored at the same position of the iteration space.

Node ops are the op table's records (`Ops.LOAD`, `Ops.ADD`; ops/table.py), compared by identity:
  LOAD   arg=(buffer number, ShapeTracker)       a value read from an input buffer
  CONST  arg=(value, ShapeTracker or None)      a constant; the tracker carries a pad mask, if any
  VALID  arg=ShapeTracker                        True where the tracker's mask admits the position
  STORE  arg=(number, ShapeTracker), srcs=(value,)  one output: value written to buffer `number`;
         srcs=(value, guard): written only where the bool guard is true, the other elements keeping
         what the buffer held (an in-place write of a select over the buffer's own values,
         `Kernel.with_guarded_store`)
  SINK   srcs=(STORE, ...), dtype None          the root: the kernel's stores, outputs in order
  SUM / PROD / MAX_REDUCE  arg=axes              a reduce over axes of the kernel's full shape
  TAKE   arg=n, srcs=(source, index)             source evaluated where its last axis is the value
                                                 of index (0 outside [0, n)): an indexed load. The
                                                 source's views have the full shape and one more
                                                 dim, of size n
  any elementwise op of the op table, arg as in the lazy graph (CAST's target dtype)
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

from lazygrad.dtype import DType
from lazygrad.ops import REDUCE, OpDef, Ops

_INTERNED: "weakref.WeakValueDictionary[tuple, KernelNode]" = weakref.WeakValueDictionary()


@dataclass(frozen=True, eq=False)
class KernelNode:
    """One AST node. Nodes are interned (`KernelNode.make`), so equal nodes are the same object:
    comparing and hashing are O(1) even for ASTs whose shared subtrees would make a structural
    comparison exponential. `op` is the op's record (`Ops.ADD`), never its name."""
    op: OpDef
    dtype: DType | None  # None only for SINK
    srcs: tuple["KernelNode", ...] = ()
    arg: object = None

    @staticmethod
    def make(op: OpDef, dtype: DType, srcs: tuple["KernelNode", ...] = (), arg: object = None) -> "KernelNode":
        assert isinstance(op, OpDef), f"a kernel node's op is an OpDef (Ops.{op}), not {op!r}"
        # repr tells -0.0 from 0.0 (equal as floats) and lets NaN constants match each other
        key = (op, dtype, srcs, (repr(arg[0]), arg[1]) if op is Ops.CONST else arg)
        node = _INTERNED.get(key)
        if node is None:
            node = KernelNode(op, dtype, srcs, arg)
            _INTERNED[key] = node
        return node

    def __repr__(self) -> str:  # not the dataclass's, which would print every source, recursively
        return f"KernelNode({self.op}, {self.dtype}, {len(self.srcs)} srcs, arg={self.arg!r})"

    @property
    def is_reduce(self) -> bool:
        return self.op.kind == REDUCE

    def walk(self) -> list["KernelNode"]:
        """Every node once, sources before users."""
        order, seen = [], set()
        stack = [(self, False)]
        while stack:
            node, sources_done = stack.pop()
            if sources_done:
                order.append(node)
            elif node not in seen:
                seen.add(node)
                stack.append((node, True))
                stack.extend((src, False) for src in reversed(node.srcs) if src not in seen)
        return order


def _describe_arg(node: KernelNode) -> str:
    if node.op in (Ops.LOAD, Ops.STORE):
        number, tracker = node.arg
        return f"data{number} " + " -> ".join(_describe_view(view) for view in tracker.views)
    if node.op is Ops.CONST:
        value, tracker = node.arg
        return repr(value) + ("" if tracker is None else " masked " + _describe_view(tracker.views[-1]))
    if node.op is Ops.VALID:
        return _describe_view(node.arg.views[-1])
    return "" if node.arg is None else repr(node.arg)


def _describe_view(view) -> str:
    text = f"shape={view.shape} strides={view.strides}"
    if view.offset:
        text += f" offset={view.offset}"
    if view.mask is not None:
        text += f" mask={view.mask}"
    return text


def format_ast(root: KernelNode) -> str:
    """One line per node, sources indented under users; a shared node is printed once and named."""
    names = {node: f"n{index}" for index, node in enumerate(root.walk())}
    printed: set[KernelNode] = set()
    lines = []
    stack = [(root, 0)]  # sources pushed in reverse, so they print in order
    while stack:
        node, depth = stack.pop()
        if node in printed:
            lines.append(f"{'  ' * depth}{names[node]} (see above)")
            continue
        printed.add(node)
        dtype = "" if node.dtype is None else node.dtype.name
        lines.append(f"{'  ' * depth}{names[node]} {node.op.name} {dtype} {_describe_arg(node)}".rstrip())
        stack.extend((src, depth + 1) for src in reversed(node.srcs))
    return "\n".join(lines)


@dataclass(frozen=True)
class Kernel:
    """SINK(STORE, ...) over an iteration space of `full_shape`; `reduce_axes` are reduced in the loop."""
    ast: KernelNode
    full_shape: tuple[int, ...]
    reduce_axes: tuple[int, ...]
    buffer_dtypes: tuple[DType, ...]   # the outputs' (in store order), then the inputs'

    @property
    def stores(self) -> tuple[KernelNode, ...]:
        return self.ast.srcs

    @property
    def output_count(self) -> int:
        return len(self.ast.srcs)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return tuple(1 if axis in self.reduce_axes else size for axis, size in enumerate(self.full_shape))

    @property
    def name(self) -> str:
        prefix = "r" if self.reduce_axes else "E"
        dims = [str(size) for axis, size in enumerate(self.full_shape) if axis not in self.reduce_axes]
        reduced = [str(self.full_shape[axis]) for axis in self.reduce_axes]
        return "_".join([prefix] + (dims or ["1"]) + (["r" + "x".join(reduced)] if reduced else []))

    def with_guarded_store(self, number: int, own_input: int) -> "Kernel | None":
        """This kernel with output `number`, a `WHERE(c, new, old)` whose `old` reads buffer
        `own_input` at the view it is stored through, stored as `new` only where c holds; None
        when it is no such select. Valid only where `own_input` is the output's own buffer, written
        in place: the elements left alone already hold their value. A KV cache's row written at a
        position held in a tensor then costs one row, not a pass over the whole cache."""
        store = self.stores[number]
        value = store.srcs[0]
        if len(store.srcs) > 1 or value.op is not Ops.WHERE:
            return None
        condition, new, old = value.srcs
        if old.op is not Ops.LOAD or old.arg != (own_input, store.arg[1]):
            return None
        guarded = KernelNode.make(Ops.STORE, store.dtype, (new, condition), store.arg)
        stores = tuple(guarded if index == number else other for index, other in enumerate(self.stores))
        return Kernel(KernelNode.make(Ops.SINK, None, stores), self.full_shape, self.reduce_axes, self.buffer_dtypes)

    def count_flops(self) -> int:
        """Arithmetic ops per kernel run (each elementwise op and reduce step counted once)."""
        total = 0
        output_size = math.prod(self.output_shape)
        full_size = math.prod(self.full_shape)
        reduce_nodes = [node for node in self.ast.walk() if node.is_reduce]
        inside = set()
        for reduce_node in reduce_nodes:
            inside.update(reduce_node.srcs[0].walk())
        for node in self.ast.walk():  # a reduce runs once per step, other ops once per output or step
            total += node.op.flops * (full_size if node.is_reduce or node in inside else output_size)
        return total
