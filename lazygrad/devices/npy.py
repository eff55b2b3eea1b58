"""The NPY device: runs the lazy graph op by op with numpy. No codegen; the oracle for every device.

Each op's meaning comes from its `ref` in the op table; movement ops map to numpy's own
reshape/transpose/broadcast/pad/slice/flip, so this device shares no view or index code with the
compiled devices and can catch their mistakes.
"""
from __future__ import annotations

import numpy as np

from lazygrad.devices.buffer import Buffer, HostAllocator
from lazygrad.dtype import DType
from lazygrad.lazy import LazyBuffer, walk
from lazygrad.ops import BINARY, GATHER, OpDef, Ops, REDUCE, TERNARY, UNARY


def _movement(op: OpDef, value: np.ndarray, arg) -> np.ndarray:
    if op is Ops.RESHAPE:
        return value.reshape(arg)
    if op is Ops.PERMUTE:
        return value.transpose(arg)
    if op is Ops.EXPAND:
        return np.broadcast_to(value, arg)
    if op is Ops.PAD:
        return np.pad(value, arg)
    if op is Ops.SHRINK:
        return value[tuple(slice(start, end) for start, end in arg)]
    if op is Ops.FLIP:
        return np.flip(value, arg)
    raise AssertionError(f"not a movement op: {op}")


def evaluate(node: LazyBuffer, values: dict[int, np.ndarray]) -> np.ndarray:
    """The value of one node, given the values of its sources."""
    if node.realized:
        node.check_current()
        return node.buffer.array.reshape(node.shape)
    srcs = [values[id(src)] for src in node.srcs]
    if node.op is Ops.CONST:
        return np.full(node.shape, node.arg, dtype=node.dtype.np)
    if node.op in (Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN):
        return np.ascontiguousarray(srcs[0])
    opdef = node.op
    with np.errstate(all="ignore"):
        if opdef.kind in (UNARY, BINARY, TERNARY):
            result = opdef.ref(*srcs, node.arg) if node.op in (Ops.CAST, Ops.BITCAST) else opdef.ref(*srcs)
        elif opdef.kind == REDUCE:
            result = opdef.ref(srcs[0], node.arg)
        elif opdef.kind == GATHER:
            result = opdef.ref(*srcs)
        else:
            result = _movement(node.op, srcs[0], node.arg)
    return np.asarray(result).astype(node.dtype.np, copy=False)


class NPYDevice:
    def __init__(self, name: str = "NPY"):
        self.name = name
        self.allocator = HostAllocator()

    def alloc(self, dtype: DType, size: int) -> Buffer:
        return Buffer(self.name, dtype, size, self.allocator)

    def wrap(self, dtype: DType, array: np.ndarray) -> Buffer:
        """A buffer over host memory that exists already (a memory-mapped file), without copying."""
        return Buffer.over(self.name, dtype, array)

    def run_graph(self, outputs: list[LazyBuffer]) -> None:
        """Compute and realize every output."""
        values: dict[int, np.ndarray] = {}
        for node in walk(outputs):
            values[id(node)] = evaluate(node, values)
        in_place = []
        for node in outputs:
            if node.realized:
                continue
            if node.op is Ops.ASSIGN and node.srcs[1].realized:
                in_place.append((node, np.array(values[id(node)])))  # written last: other values may
                continue                                                # be views of the old contents
            value = values[id(node)]
            node.mark_realized(self.alloc(node.dtype, value.size).copyin(np.ascontiguousarray(value)))
        for node, value in in_place:
            buffer = node.srcs[1].buffer
            buffer.copyin(value)
            buffer.version += 1
            node.mark_realized(buffer)
