"""Values split over several devices: one LazyBuffer per device, and the axis they split.

`Tensor.shard(devices, axis)` gives a tensor a `MultiLazyBuffer` in place of its LazyBuffer. It
answers the calls Tensor._apply makes of a LazyBuffer (alu, reduce, take, the movement ops, copy_to,
assign) by making the same call on every shard, so each device computes its own part and the
scheduler, the jit and DEBUG=2 see ordinary kernels on ordinary devices. `axis=None` replicates:
every device holds the whole value (parameters in data-parallel training).

Where a result's shard needs other devices' values, the communication is built from the graph's
own nodes, COPY between devices and elementwise ops to combine, so it is scheduled and captured
like any other work:

- a reduce over the split axis reduces each shard, then every device adds (multiplies, takes the
  maximum of) all the partial results, copied to it, in device order (an all-reduce; the same order
  everywhere, so every replica holds the same bits). A matmul whose sum runs over the split axis
  (a weight's gradient under a split batch) is such a reduce;
- operands split differently are brought to the first split operand's split: a replicated one is
  cut (a view, no copy), one split otherwise is gathered on every device first;
- a view that cuts across the shards' boundaries (a reshape that moves the split into several
  axes, a pad along it) gathers the whole value on every device and continues replicated;
  a shrink or flip along the split axis keeps each shard in place and records its new range.

Shards cover consecutive ranges of the axis, as numpy's array_split cuts them (the first
`size % devices` one longer); after a shrink some may be empty, after a flip their ranges are in
another order. All shards hold the same dtype; each has the tensor's shape with its own length
along the axis.
"""
from __future__ import annotations

import math

from lazygrad.dtype import DType, dtypes
from lazygrad.lazy import LazyBuffer
from lazygrad.ops import OpDef, Ops

# how an all-reduce combines the partial results of each reduce
_COMBINE = {Ops.SUM: Ops.ADD, Ops.PROD: Ops.MUL, Ops.MAX_REDUCE: Ops.MAX}


def split_bounds(size: int, parts: int) -> tuple[tuple[int, int], ...]:
    """(start, end) of each of `parts` consecutive pieces of `size`, the first `size % parts` longer."""
    short, longer = divmod(size, parts)
    bounds, start = [], 0
    for index in range(parts):
        end = start + short + (index < longer)
        bounds.append((start, end))
        start = end
    return tuple(bounds)


def _resized(shape: tuple[int, ...], axis: int, size: int) -> tuple[int, ...]:
    return shape[:axis] + (size,) + shape[axis + 1:]


def _range_along(shape: tuple[int, ...], axis: int, bound: tuple[int, int]) -> tuple:
    """A shrink's argument keeping `bound` of axis and all of every other axis."""
    return tuple(bound if dim == axis else (0, size) for dim, size in enumerate(shape))


class MultiLazyBuffer:
    __slots__ = ("lbs", "axis", "bounds", "shape", "dtype")

    def __init__(self, lbs: list[LazyBuffer], axis: int | None, bounds: tuple | None):
        self.lbs = list(lbs)
        self.axis = axis      # None: replicated, every shard the whole value
        self.bounds = bounds  # (start, end) along axis of each shard; None when replicated
        shape = self.lbs[0].shape
        self.shape = shape if axis is None else _resized(shape, axis, sum(end - start for start, end in bounds))
        self.dtype: DType = self.lbs[0].dtype

    @property
    def device(self) -> tuple[str, ...]:
        return tuple(lb.device for lb in self.lbs)

    @property
    def realized(self) -> bool:
        return all(lb.realized for lb in self.lbs)

    def numel(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"<MultiLazyBuffer {self.dtype.name}{list(self.shape)} axis={self.axis} {self.device}>"

    # ---- making one ---------------------------------------------------------------------------

    @staticmethod
    def shard(lb: LazyBuffer, devices: tuple[str, ...], axis: int | None) -> "MultiLazyBuffer":
        """`lb` cut along axis into one piece per device (whole on each for axis None), copied there."""
        if axis is None:
            return MultiLazyBuffer([lb.copy_to(device) for device in devices], None, None)
        bounds = split_bounds(lb.shape[axis], len(devices))
        pieces = [lb.shrink(_range_along(lb.shape, axis, bound)) for bound in bounds]
        return MultiLazyBuffer([piece.copy_to(device) for piece, device in zip(pieces, devices)], axis, bounds)

    @staticmethod
    def const(value, dtype: DType, shape: tuple[int, ...], devices: tuple[str, ...]) -> "MultiLazyBuffer":
        return MultiLazyBuffer([LazyBuffer.const(value, dtype, shape, device) for device in devices], None, None)

    def _local_shape(self, shape: tuple[int, ...], index: int) -> tuple[int, ...]:
        """`shape` (a logical shape with this split) as shard `index` holds it."""
        if self.axis is None:
            return shape
        start, end = self.bounds[index]
        return _resized(shape, self.axis, end - start)

    def _each(self, method: str, *args) -> list[LazyBuffer]:
        return [getattr(lb, method)(*args) for lb in self.lbs]

    # ---- communication ------------------------------------------------------------------------

    def gathered(self, device: str) -> LazyBuffer:
        """The whole value on one device: each shard copied there and put in its place (one kernel)."""
        if self.axis is None:
            devices = self.device
            return self.lbs[devices.index(device)] if device in devices else self.lbs[0].copy_to(device)
        result = None
        for lb, (start, end) in zip(self.lbs, self.bounds):
            if start == end:
                continue
            padding = tuple((start, size - end) if dim == self.axis else (0, 0) for dim, size in enumerate(self.shape))
            placed = lb.copy_to(device).pad(padding)
            if result is None:
                result = placed
            else:
                inside = LazyBuffer.const(True, dtypes.bool, lb.shape, device).pad(padding)
                result = inside.alu(Ops.WHERE, placed, result)
        return LazyBuffer.const(0, self.dtype, self.shape, device) if result is None else result

    def replicated(self) -> "MultiLazyBuffer":
        """Every device holding the whole value (an all-gather when split)."""
        if self.axis is None:
            return self
        return MultiLazyBuffer([self.gathered(device) for device in self.device], None, None)

    def split_like(self, axis: int | None, bounds: tuple | None) -> list[LazyBuffer]:
        """This value's shards as a value split along `axis` into `bounds` would hold them."""
        if axis == self.axis and bounds == self.bounds:
            return self.lbs
        whole = self.replicated()
        if axis is None:
            return whole.lbs
        return [lb.shrink(_range_along(self.shape, axis, bound)) for lb, bound in zip(whole.lbs, bounds)]

    # ---- elementwise and reduce ---------------------------------------------------------------

    def alu(self, op: OpDef, *others: "MultiLazyBuffer", arg=None) -> "MultiLazyBuffer":
        sources = (self,) + others
        split = next((source for source in sources if source.axis is not None), self)
        shards = [source.split_like(split.axis, split.bounds) for source in sources]
        lbs = [first.alu(op, *rest, arg=arg) for first, *rest in zip(*shards)]
        return MultiLazyBuffer(lbs, split.axis, split.bounds)

    def cast(self, dtype: DType, bitcast: bool = False) -> "MultiLazyBuffer":
        return self if dtype == self.dtype else self.alu(Ops.BITCAST if bitcast else Ops.CAST, arg=dtype)

    def reduce(self, op: OpDef, axes: tuple[int, ...]) -> "MultiLazyBuffer":
        partial = self._each("reduce", op, axes)
        if self.axis is None or self.axis not in axes:
            return MultiLazyBuffer(partial, self.axis, self.bounds)
        combine = _COMBINE[op]
        totals = []
        for device in self.device:  # the same order on every device: every replica gets the same bits
            total = partial[0].copy_to(device)
            for piece in partial[1:]:
                total = total.alu(combine, piece.copy_to(device))
            totals.append(total)
        return MultiLazyBuffer(totals, None, None)

    def take(self, index: "MultiLazyBuffer") -> "MultiLazyBuffer":
        """TAKE per shard, split as the index is (or as the source is, along an axis the index has)."""
        if index.axis is not None:
            axis, bounds = index.axis, index.bounds
        elif self.axis is not None and self.axis < len(index.shape):
            axis, bounds = self.axis, self.bounds
        else:
            axis, bounds = None, None
        sources = self.split_like(axis, bounds)
        indices = index.split_like(axis, bounds)
        return MultiLazyBuffer([source.take(each) for source, each in zip(sources, indices)], axis, bounds)

    # ---- movement -----------------------------------------------------------------------------

    def reshape(self, shape: tuple[int, ...]) -> "MultiLazyBuffer":
        shape = tuple(shape)
        if self.axis is None:
            return MultiLazyBuffer(self._each("reshape", shape), None, None)
        moved = _reshaped_split(self.shape, self.axis, self.bounds, shape)
        if moved is None:  # the shards are no ranges of one axis of the new shape
            return self.replicated().reshape(shape)
        axis, bounds = moved
        lbs = [lb.reshape(_resized(shape, axis, end - start)) for lb, (start, end) in zip(self.lbs, bounds)]
        return MultiLazyBuffer(lbs, axis, bounds)

    def permute(self, order: tuple[int, ...]) -> "MultiLazyBuffer":
        axis = None if self.axis is None else tuple(order).index(self.axis)
        return MultiLazyBuffer(self._each("permute", order), axis, self.bounds)

    def expand(self, shape: tuple[int, ...]) -> "MultiLazyBuffer":
        if self.axis is not None and shape[self.axis] != self.shape[self.axis]:
            return self.replicated().expand(shape)
        lbs = [lb.expand(self._local_shape(tuple(shape), index)) for index, lb in enumerate(self.lbs)]
        return MultiLazyBuffer(lbs, self.axis, self.bounds)

    def pad(self, padding: tuple[tuple[int, int], ...]) -> "MultiLazyBuffer":
        if self.axis is not None and tuple(padding[self.axis]) != (0, 0):
            return self.replicated().pad(padding)
        return MultiLazyBuffer(self._each("pad", padding), self.axis, self.bounds)

    def shrink(self, bounds: tuple[tuple[int, int], ...]) -> "MultiLazyBuffer":
        if self.axis is None:
            return MultiLazyBuffer(self._each("shrink", bounds), None, None)
        low, high = bounds[self.axis]
        lbs, kept = [], []
        for lb, (start, end) in zip(self.lbs, self.bounds):
            first, last = max(start, low), max(min(end, high), max(start, low))  # this shard's part of [low, high)
            local = tuple((first - start, last - start) if dim == self.axis else bound for dim, bound in enumerate(bounds))
            lbs.append(lb.shrink(local))
            kept.append((first - low, last - low))
        return MultiLazyBuffer(lbs, self.axis, tuple(kept))

    def flip(self, axes: tuple[int, ...]) -> "MultiLazyBuffer":
        flipped = self._each("flip", axes)
        if self.axis is None or self.axis not in axes:
            return MultiLazyBuffer(flipped, self.axis, self.bounds)
        size = self.shape[self.axis]
        return MultiLazyBuffer(flipped, self.axis, tuple((size - end, size - start) for start, end in self.bounds))

    # ---- sources and sinks --------------------------------------------------------------------

    def contiguous(self) -> "MultiLazyBuffer":
        return MultiLazyBuffer(self._each("contiguous"), self.axis, self.bounds)

    def order_read(self) -> tuple[int, ...] | None:
        """LazyBuffer.order_read of the shards, which are built alike: the first one's."""
        return self.lbs[0].order_read()

    def assign(self, value: "MultiLazyBuffer") -> "MultiLazyBuffer":
        """`value` stored into every shard's buffer, split as this value is."""
        lbs = [lb.assign(piece) for lb, piece in zip(self.lbs, value.split_like(self.axis, self.bounds))]
        return MultiLazyBuffer(lbs, self.axis, self.bounds)

    def copy_to(self, device) -> "LazyBuffer | MultiLazyBuffer":
        """To one device (a str): the whole value gathered there. To devices (a tuple): split the same
        way over them (one copy per shard when they are as many)."""
        if isinstance(device, str):
            return self.gathered(device)
        if device == self.device:
            return self
        if len(device) == len(self.lbs):
            return MultiLazyBuffer([lb.copy_to(to) for lb, to in zip(self.lbs, device)], self.axis, self.bounds)
        return MultiLazyBuffer.shard(self.gathered(device[0]), device, self.axis)


def _reshaped_split(shape: tuple[int, ...], axis: int, bounds: tuple, new_shape: tuple[int, ...]):
    """(axis, bounds) of the same shards in `new_shape`, or None when some shard is not a range of
    one of its axes. In storage order a shard is, for each index of the axes before `axis`, one run
    of the elements after it: the new axis must have the same axes' product before it, and each
    shard's run must start and end on a whole step of it."""
    before, after = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    if before * after == 0:
        return None
    for candidate in range(len(new_shape)):
        if math.prod(new_shape[:candidate]) != before:
            continue
        step = math.prod(new_shape[candidate + 1:])
        if step and all(start * after % step == 0 and end * after % step == 0 for start, end in bounds):
            return candidate, tuple((start * after // step, end * after // step) for start, end in bounds)
    return None


def first_shard(node) -> LazyBuffer:
    """The LazyBuffer the front end's layout checks read (how a value is stored, whether it is a
    transposed view): the node itself, or a sharded value's first shard, since every shard is built
    by the same calls."""
    return node.lbs[0] if isinstance(node, MultiLazyBuffer) else node


def lazy_nodes(node) -> list[LazyBuffer]:
    """The LazyBuffers that hold a Tensor's value: its node, or each shard of a sharded one."""
    return node.lbs if isinstance(node, MultiLazyBuffer) else [node]
