"""The lazy graph: immutable, hash-consed nodes recording what to compute, not computing it.

A `LazyBuffer` is one op applied to source nodes, with the dtype, shape and device of its result.
Building the same op on the same sources twice returns the same node, so shared work is found
without any analysis. Movement ops are nodes too; the scheduler folds chains of them into views.

An elementwise op of values computed in another order than their shape's (a convolution's
channels-last result viewed channels first) is built in that stored order, the permute on top
(`LazyBuffer.alu`), so it joins the kernel that computes them and is stored the same way.

When the engine realizes a node it attaches the device buffer and forgets the sources (`realized`),
so a training loop does not keep every past step's graph alive.

ASSIGN writes a value into the buffer of an already realized node (an optimizer updating its
parameters). Every buffer carries a version, bumped by each in-place write, and every realized node
remembers the version it holds: a node built on the old contents that runs after the write would
compute with the new ones, so reading a node whose version is behind raises `StaleValueError`
instead of returning a wrong answer.
"""
from __future__ import annotations

import functools
import itertools
import math
import weakref

import numpy as np

from lazygrad.dtype import DType, dtypes
from lazygrad.ops import MOVEMENT, OpDef, Ops, REDUCE
from lazygrad.shape.view import ShapeTracker, View

class StaleValueError(RuntimeError):
    """A value was computed from a buffer that has since been overwritten in place."""


# Assigns made, maybe not yet run (jit.py), in the order they were made: realized together, they are
# the outputs of one graph, whose structure keys its remembered schedule (schedule/fuse.py), so an
# eager step that makes the same assigns in the same order plans its schedule once. (In a set's order,
# which follows the nodes' addresses, MobileNetV2's 156 batch-norm statistics planned 156 kernels
# again every training step: with `accumulation_split` remembered, 16-25 ms of a 250-259 ms eager step.)
PENDING_ASSIGNS: "weakref.WeakValueDictionary[int, LazyBuffer]" = weakref.WeakValueDictionary()
_ASSIGNS_MADE = itertools.count()
# key -> weak reference to the node, its entry deleted as the node goes (LazyBuffer.__del__). Swept
# instead every few thousand nodes, the entries of an eager step's dead nodes outlived it: the
# garbage collector saw them grow and moved them to its oldest generation, whose collections (a
# walk of every object: 100 ms with torch imported) came every few hundred steps of a small model.
_CONSED: dict[tuple, weakref.ref] = {}
_weak_reference, _CONST = weakref.ref, Ops.CONST  # bound once: LazyBuffer.create runs for every op built
# (value, dtype, shape, device) -> a broadcast constant's nodes (CONST, RESHAPE, EXPAND; the last is
# the constant), held strongly: `x + 1` in a loop would otherwise build (and free) them every step
_CONSTANTS: dict[tuple, tuple] = {}
CONSTANT_CACHE_LIMIT = 1024
# A node's description (argument as compared, dtype, shape, device) -> the one tuple of it that nodes
# share. A tuple holding a DType stays tracked by the garbage collector, so one per node, living as
# long as the node, made an eager training step's graph a fifth larger to the collector (MobileNetV2:
# 600 -> 495 young collections in 12 steps, 20-30 -> 16-17 ms of collection a step); shared, they
# also compare by identity in the schedule cache's structure keys.
_DESCRIPTIONS: dict[tuple, tuple] = {}
DESCRIPTION_CACHE_LIMIT = 8192
# A float SUM adds its terms one by one into an accumulator per SIMD lane, so its rounding error grows
# with their number: 2^24 float32 0.1s summed to 1,649,062 (exact 1,677,721.6; numpy, pairwise,
# is within 1e-7). A sum of more than ACCUMULATION_LIMIT terms runs in stages: partial sums of the
# pieces of one reduced axis, then the sum of those, each stage split again while it is too long,
# so no accumulator takes more than ACCUMULATION_LIMIT / lanes terms (the same 2^24 sum: 1,677,711
# on CPU, 6e-6 off; random data within 2e-6 of float64). The limit is the longest row the kernel
# benchmarks sum (4096): 1024 cost their softmax 15% for a third kernel.
# Sums of a product of two values (matmuls, convolutions) and sums with more than SPLIT_OUTPUT_LIMIT
# outputs are left whole: their kernels keep their register tiles (split, ResNet-18's 3x3 convolutions
# over 512 channels, 4608 terms, lost theirs: 7 -> 66 ms each).
ACCUMULATION_LIMIT = 4096
SPLIT_OUTPUT_LIMIT = 1 << 16


class LazyBuffer:
    __slots__ = ("op", "srcs", "arg", "dtype", "shape", "device", "buffer", "version", "_key", "_constant",
                 "__weakref__")

    def __init__(self, op: OpDef, srcs: tuple, arg, dtype: DType, shape: tuple[int, ...], device: str):
        self._key = None  # first: __del__ reads it, even of a node whose construction failed
        assert op.__class__ is OpDef, f"a lazy node's op is an OpDef (Ops.{op}), not {op!r}"
        self.op, self.srcs, self.arg = op, srcs, arg
        self.dtype, self.shape, self.device = dtype, shape, device
        self.buffer = None  # the device Buffer once realized
        self.version = 0    # the buffer's version this node holds
        self._constant = None  # on the top of a broadcast constant: see const()

    @staticmethod
    def create(op: OpDef, srcs: tuple, arg, dtype: DType, shape: tuple[int, ...], device: str) -> "LazyBuffer":
        # (op, (argument as compared, dtype, shape, device), the sources' ids...): sources by id, so the
        # table holds no node alive (an id reused after its node died can only find a dead entry: a
        # live unrealized node keeps its sources alive); repr tells -0.0 from 0.0 (equal as floats)
        # and lets NaN constants match each other; fuse.walk_with_structure reads key[1]. Built by
        # arity: one tuple, not one of the ids inside another (a third of this function's time).
        described = (repr(arg) if op is _CONST else arg, dtype, shape, device)
        try:
            shared = _DESCRIPTIONS.get(described)
        except TypeError:  # an unhashable arg is a bug in the caller
            raise TypeError(f"{op}: argument {arg!r} must be hashable")
        if shared is None:
            if len(_DESCRIPTIONS) >= DESCRIPTION_CACHE_LIMIT:
                _DESCRIPTIONS.clear()
            _DESCRIPTIONS[described] = described
        else:
            described = shared
        count = len(srcs)
        if count == 1:
            key = (op, described, id(srcs[0]))
        elif count == 2:
            key = (op, described, id(srcs[0]), id(srcs[1]))
        else:
            key = (op, described, *map(id, srcs))
        reference = _CONSED.get(key)
        if reference is not None:
            existing = reference()
            if existing is not None and existing.buffer is None:
                return existing
        node = LazyBuffer(op, srcs, arg, dtype, shape, device)
        node._key = key
        _CONSED[key] = _weak_reference(node)
        return node

    @staticmethod
    def from_buffer(buffer, shape: tuple[int, ...]) -> "LazyBuffer":
        node = LazyBuffer(Ops.BUFFER, (), None, buffer.dtype, tuple(shape), buffer.device)
        node.buffer = buffer
        node.version = buffer.version
        return node

    @staticmethod
    def const(value, dtype: DType, shape: tuple[int, ...], device: str) -> "LazyBuffer":
        """A constant broadcast to `shape` (a view of a single value, never materialized); on a tuple
        of devices (a sharded tensor's), one on each (multi.py)."""
        if type(device) is tuple:
            from lazygrad.multi import MultiLazyBuffer
            return MultiLazyBuffer.const(value, dtype, shape, device)
        key = (repr(value), dtype, shape, device)  # repr tells -0.0 from 0.0 and 1 from True
        chain = _CONSTANTS.get(key)
        if chain is not None:
            for link in chain:
                if link.buffer is not None:  # realized since: the RESHAPE is shared with the constants
                    break                    # of shape (1,), which a user can realize and overwrite
            else:
                return chain[-1]
        try:
            converted = dtype.np_type(value).item()
        except (OverflowError, ValueError):  # out-of-range integers wrap, as a C cast does
            converted = np.array(value).astype(dtype.np).item()
        scalar = LazyBuffer.create(Ops.CONST, (), converted, dtype, (), device)
        node, chain = scalar, (scalar,)
        if shape:
            reshaped = scalar.reshape((1,) * len(shape))
            node = reshaped.expand(tuple(shape))
            chain = (scalar, reshaped) if node is reshaped else (scalar, reshaped, node)
            # (what determines the chain, its nodes in walk order): fuse.walk_with_structure places
            # the chain in one step while none of its nodes is realized, which x + 1 is for every op
            node._constant = (("CONSTANT", scalar._key[1][0], dtype, node.shape, device), chain)
        if len(_CONSTANTS) >= CONSTANT_CACHE_LIMIT:
            _CONSTANTS.clear()
        _CONSTANTS[key] = chain
        return node

    @property
    def realized(self) -> bool:
        return self.buffer is not None

    def mark_realized(self, buffer) -> None:
        """Attach the computed buffer and drop the graph below this node."""
        self.buffer = buffer
        self.version = buffer.version
        self._forget_key()
        self._key = None
        self.srcs = ()  # after the key: dropping the graph runs its nodes' __del__
        self._constant = None

    def check_current(self) -> None:
        """Raise StaleValueError if the buffer was written in place after this node was realized."""
        if self.buffer.version != self.version:
            raise StaleValueError(
                f"a {self.dtype.name}{list(self.shape)} tensor on {self.device} was overwritten in place "
                f"(by assign(), e.g. an optimizer step) after this value was built from it; realize values "
                f"that read it (loss.item(), .realize()) before the in-place update, or clone() what you keep")

    def numel(self) -> int:
        return math.prod(self.shape)

    def _forget_key(self, _consed=_CONSED) -> None:  # the table bound here: module globals may be gone at exit
        """Delete this node's entry of the sharing table, or a dead node's under the same key."""
        key = self._key
        if key is not None:
            reference = _consed.pop(key, None)  # one lookup: the entry is nearly always this node's
            if reference is not None:
                referent = reference()  # None where the garbage collector cleared it first (a cycle)
                if referent is not None and referent is not self:
                    _consed[key] = reference  # a live node's, made after this one was realized

    __del__ = _forget_key

    def __repr__(self) -> str:
        state = "realized" if self.realized else f"{len(self.srcs)} srcs"
        return f"<LazyBuffer {self.op} {self.dtype.name}{list(self.shape)} {self.device} {state}>"

    # ---- elementwise and reduce ----------------------------------------------------------------

    def alu(self, op: OpDef, *others: "LazyBuffer", arg=None) -> "LazyBuffer":
        srcs = (self,) + others
        order = _common_stored_order(srcs)
        if order is not None:  # computed in the order its operands are stored, then viewed as asked
            inverse = tuple([order.index(axis) for axis in range(len(order))])
            return _elementwise(op, tuple([_in_order(source, order) for source in srcs]), arg).permute(inverse)
        return _elementwise(op, srcs, arg)

    def reduce(self, op: OpDef, axes: tuple[int, ...]) -> "LazyBuffer":
        assert op.kind == REDUCE
        axes = tuple(sorted(axis for axis in set(axes) if self.shape[axis] != 1))
        if not axes:
            return self
        new_shape = tuple(1 if axis in axes else size for axis, size in enumerate(self.shape))
        if op is Ops.SUM and self.dtype.is_float and not (self.op is Ops.MUL and self.srcs[0] is not self.srcs[1]):
            split = accumulation_split(self.shape, axes)
            if split is not None:
                return self._sum_in_two_stages(axes, *split).reshape(new_shape)
        return LazyBuffer.create(op, (self,), axes, self.dtype, new_shape, self.device)

    def _sum_in_two_stages(self, axes: tuple[int, ...], axis: int, parts: int) -> "LazyBuffer":
        """SUM over axes as `parts` partial sums, one per piece of `axis`, then their sum; the result
        keeps a 1 for each reduced axis and one more for the split (the caller reshapes it). Half
        floats sum in float32, as one kernel does, and round once at the end."""
        size = -(-self.shape[axis] // parts) * parts  # rounded up to whole pieces: zeros pad the last
        wide = self.cast(dtypes.float32) if self.dtype.itemsize < 4 else self
        if size > self.shape[axis]:
            wide = wide.pad(tuple((0, size - length if other == axis else 0) for other, length in enumerate(self.shape)))
        pieces = wide.reshape(self.shape[:axis] + (parts, size // parts) + self.shape[axis + 1:])
        first = tuple(other + (other > axis) for other in axes if other != axis) + (axis + 1,)
        return pieces.reduce(Ops.SUM, first).reduce(Ops.SUM, (axis,)).cast(self.dtype)

    def take(self, index: "LazyBuffer") -> "LazyBuffer":
        """TAKE: this node, of shape index.shape + (n,), read along its last axis at `index`."""
        assert self.shape[:-1] == index.shape and index.dtype.is_int, "TAKE: index shape or dtype"
        return LazyBuffer.create(Ops.TAKE, (self, index), None, self.dtype, index.shape, self.device)

    def cast(self, dtype: DType, bitcast: bool = False) -> "LazyBuffer":
        if dtype == self.dtype:
            return self
        return self.alu(Ops.BITCAST if bitcast else Ops.CAST, arg=dtype)

    # ---- movement: views, never copies --------------------------------------------------------

    def _movement(self, op: OpDef, arg, new_shape: tuple[int, ...]) -> "LazyBuffer":
        assert op.kind == MOVEMENT
        return LazyBuffer.create(op, (self,), arg, self.dtype, new_shape, self.device)

    def reshape(self, shape: tuple[int, ...]) -> "LazyBuffer":
        shape = tuple(shape)
        if shape == self.shape:
            return self
        return self._movement(Ops.RESHAPE, shape, shape)

    def permute(self, order: tuple[int, ...]) -> "LazyBuffer":
        order = tuple(order)
        if order == tuple(range(len(order))):
            return self
        if self.op is Ops.PERMUTE and self.buffer is None:  # one permute of the source (none if they cancel)
            arg = self.arg
            return self.srcs[0].permute(tuple([arg[axis] for axis in order]))
        shape = self.shape
        return self._movement(Ops.PERMUTE, order, tuple([shape[axis] for axis in order]))

    def expand(self, shape: tuple[int, ...]) -> "LazyBuffer":
        shape = tuple(shape)
        if shape == self.shape:
            return self
        return self._movement(Ops.EXPAND, shape, shape)

    def pad(self, padding: tuple[tuple[int, int], ...]) -> "LazyBuffer":
        padding = tuple([(int(lo), int(hi)) for lo, hi in padding])
        for lo, hi in padding:  # loops, not generators: a convolution pads and shrinks several times
            if lo or hi:
                break
        else:
            return self
        shape = tuple([size + lo + hi for size, (lo, hi) in zip(self.shape, padding)])
        return self._movement(Ops.PAD, padding, shape)

    def shrink(self, bounds: tuple[tuple[int, int], ...]) -> "LazyBuffer":
        bounds = tuple([(int(start), int(end)) for start, end in bounds])
        for (start, end), size in zip(bounds, self.shape):
            if start or end != size:
                break
        else:
            return self
        return self._movement(Ops.SHRINK, bounds, tuple([end - start for start, end in bounds]))

    def flip(self, axes: tuple[int, ...]) -> "LazyBuffer":
        axes = tuple(sorted(axis for axis in set(axes) if self.shape[axis] > 1))
        if not axes:
            return self
        return self._movement(Ops.FLIP, axes, self.shape)

    # ---- sources and sinks --------------------------------------------------------------------

    def order_read(self) -> tuple[int, ...] | None:
        """The order of this node's axes in which a computed value its elementwise ops read is
        stored, where that is no identity (a batch norm of a channels-last convolution's product
        viewed channels first: (0, 2, 3, 1)); None if it reads none so (a walk of at most
        STORED_READ_WALK_NODES nodes)."""
        stack, seen = [self], set()
        while stack and len(seen) < STORED_READ_WALK_NODES:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            stored = _stored_order(current)
            if stored and len(stored[1]) == len(self.shape) and stored[1] != tuple(range(len(self.shape))):
                return stored[1]
            if current.buffer is None and current.op.is_elementwise:
                stack.extend(current.srcs)
        return None

    def contiguous(self) -> "LazyBuffer":
        return LazyBuffer.create(Ops.CONTIGUOUS, (self,), None, self.dtype, self.shape, self.device)

    def assign(self, value: "LazyBuffer") -> "LazyBuffer":
        """`value` (same shape, dtype and device) stored into this node's buffer when it is realized
        and the engine finds the write safe, else into a new buffer; the result replaces this node."""
        assert (value.shape, value.dtype, value.device) == (self.shape, self.dtype, self.device)
        node = LazyBuffer.create(Ops.ASSIGN, (value, self), None, self.dtype, self.shape, self.device)
        PENDING_ASSIGNS[next(_ASSIGNS_MADE)] = node
        return node

    def copy_to(self, device) -> "LazyBuffer":
        """This value on another device; on a tuple of devices, a copy on each (multi.py)."""
        if device == self.device:
            return self
        if type(device) is tuple:
            from lazygrad.multi import MultiLazyBuffer
            return MultiLazyBuffer.shard(self, device, None)
        return LazyBuffer.create(Ops.COPY, (self,), None, self.dtype, self.shape, device)


def _elementwise(op: OpDef, srcs: tuple, arg) -> LazyBuffer:
    opdef = op
    dtype = opdef.out_dtype([s.dtype for s in srcs], arg) if opdef.out_dtype else srcs[-1].dtype
    return LazyBuffer.create(op, srcs, arg, dtype, srcs[0].shape, srcs[0].device)


def _of_broadcasts(node: LazyBuffer, depth: int = 3) -> bool:
    """Whether node is a broadcast (a constant, an EXPAND) or an elementwise op computed only from
    broadcasts, `depth` ops deep at most (a batch norm's mean, negated for its gradient): such a
    value has no order of its own to compute in."""
    if node.buffer is not None:
        return False
    if node.op is Ops.EXPAND or node._constant is not None:
        return True
    if depth and node.op.is_elementwise:
        for source in node.srcs:
            if not _of_broadcasts(source, depth - 1):
                return False
        return True
    return False


_UNORDERED = ()  # a computed value read through a view that is no permutation of its storage
_STORAGE_VIEWS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK})  # views _stored_order looks through


def _stored_order(node: LazyBuffer, kept: bool = False) -> tuple[LazyBuffer, tuple[int, ...]] | tuple | None:
    """How `node` reads a computed (unrealized) value through reshapes, permutes and shrinks: (that
    value, node's axes in the order their elements are stored), _UNORDERED if the view is not a
    permutation of the storage or of a prefix of it, None if node is no such view (a buffer, a
    constant, a broadcast). A prefix is a matmul's result without the rows its panels padded
    (linalg `_panel_product`; ResNet-18's 1x1 downsampling at batch 1). `kept`: a value stored by
    `contiguous()` counts too, realized or not (an activation kept for its gradient, stored channels
    last: elementwise ops compute in its order, `_common_stored_order`; the convolutions' layout
    rules do not take it, as ResNet-18's 3x3 convolutions then read their inputs channels last and
    its weight gradients' window panels were copied across the channels, 540 -> 670 ms a step)."""
    chain, base = [], node
    while base.op in _STORAGE_VIEWS and base.buffer is None:
        chain.append((base.op, base.arg))
        base = base.srcs[0]
    if not (kept and base.op is Ops.CONTIGUOUS) and \
            (base.buffer is not None or (not base.op.is_elementwise and base.op.kind != REDUCE)):
        return None
    order = _view_order(base.shape, tuple(chain)) if chain else tuple(range(len(base.shape)))
    return _UNORDERED if order is None else (base, order)


@functools.lru_cache(maxsize=1 << 12)
def _view_order(shape: tuple[int, ...], chain: tuple) -> tuple[int, ...] | None:
    """The axes of a contiguous value of `shape` read through the movements of `chain` (the outermost
    first), in the order their elements are stored from the first on; None if no order stores them."""
    tracker = ShapeTracker.from_shape(shape)
    for op, arg in reversed(chain):
        tracker = tracker.apply(op, arg)
    view = tracker.views[-1]
    if len(tracker.views) != 1 or view.offset or view.mask is not None:
        return None
    keys, last = [], math.inf
    for axis, (size, stride) in enumerate(zip(view.shape, view.strides)):
        if size != 1:  # a size-1 axis goes with the axis before it
            last = stride
        keys.append((-last, axis))
    order = tuple(sorted(range(len(keys)), key=keys.__getitem__))
    if View.contiguous(tuple(view.shape[axis] for axis in order)).strides != tuple(view.strides[axis] for axis in order):
        return None
    return order


def _common_stored_order(srcs: tuple) -> tuple[int, ...] | None:
    """The order in which an elementwise op of `srcs` should compute: the storage order of the
    computed values it reads, when they all share one that is not their logical order."""
    orders = set()
    for source in srcs:
        while source.op is Ops.PAD and source.buffer is None:  # a padded view keeps its source's order
            source = source.srcs[0]
        if source.buffer is None and (source.op.is_elementwise or source.op.kind == REDUCE):
            if _of_broadcasts(source):  # read in any order alike: a channels-last gradient minus
                continue                # its broadcast mean computes channels last, not across them
            return None  # a computed value read as it is stored: no other order is common to all
        stored = _stored_order(source, kept=True)
        if stored is not None:
            orders.add(stored[1] if stored else None)
    if len(orders) != 1:
        return None
    order = orders.pop()
    return None if order is None or order == tuple(range(len(order))) else order


def stored_out_of_order(node: LazyBuffer) -> bool:
    """Whether node reads a computed value stored in another order than node's axes (a
    convolution's channels-last result viewed channels first), so a kernel walking node's last
    axis would gather it."""
    stored = _stored_order(node)
    return stored is not None and (not stored or stored[1] != tuple(range(len(node.shape))))


def last_axis_strided(node: LazyBuffer) -> bool:
    """Whether node is a view (reshapes, permutes, shrinks) of a buffer or a computed value whose last
    axis, of more than one element, does not step through that value one element at a time (the
    columns of a channels-first activation viewed as (positions, channels))."""
    chain, base = [], node
    while base.op in _STORAGE_VIEWS and base.buffer is None:
        chain.append((base.op, base.arg))
        base = base.srcs[0]
    if not chain or node.shape[-1] == 1:
        return False
    return _last_stride(base.shape, tuple(chain)) not in (0, 1)


@functools.lru_cache(maxsize=1 << 12)
def _last_stride(shape: tuple[int, ...], chain: tuple) -> int | None:
    """The step in a contiguous value of `shape` along the last axis of its view through the
    movements of `chain` (the outermost first); None where that view is no single strided one."""
    tracker = ShapeTracker.from_shape(shape)
    for op, arg in reversed(chain):
        tracker = tracker.apply(op, arg)
    return tracker.views[-1].strides[-1] if len(tracker.views) == 1 else None


def stored_in_order(node: LazyBuffer) -> bool:
    """Whether node reads a computed value in the order it is stored."""
    stored = _stored_order(node)
    return bool(stored) and stored[1] == tuple(range(len(node.shape)))


# Nodes `reads_stored_in` looks at below the one asked about.
STORED_READ_WALK_NODES = 64


def reads_stored_in(node: LazyBuffer, order: tuple[int, ...]) -> bool:
    """Whether node's elementwise ops (through pads and shrinks: a concatenation's operands, a band
    of a convolution's input) read some computed value stored in `order` of node's axes (a
    convolution's channels-last output). The walk stops after STORED_READ_WALK_NODES nodes."""
    stack, seen = [node], set()
    while stack and len(seen) < STORED_READ_WALK_NODES:
        current = stack.pop()
        while (current.op is Ops.PAD or current.op is Ops.SHRINK) and current.buffer is None:
            current = current.srcs[0]
        if id(current) in seen:
            continue
        seen.add(id(current))
        stored = _stored_order(current)
        if stored and stored[1] == order:
            return True
        if current.buffer is None and current.op.is_elementwise:
            stack.extend(current.srcs)
    return False


def _in_order(node: LazyBuffer, order: tuple[int, ...]) -> LazyBuffer:
    """node permuted to `order`: a reshape of the computed value it reads when that is how it is stored
    (padded after, where node pads such a view: a concatenation's operands)."""
    if node.op is Ops.PAD and node.buffer is None:
        return _in_order(node.srcs[0], order).pad(tuple([node.arg[axis] for axis in order]))
    if node._constant is not None:  # the same constant broadcast to the permuted shape: kept, no new node
        scalar = node._constant[1][0]  # the chain's CONST (its description holds the value's repr)
        return LazyBuffer.const(scalar.arg, node.dtype, tuple([node.shape[axis] for axis in order]), node.device)
    stored = _stored_order(node, kept=True)
    if stored and stored[1] == order:
        value, shape = stored[0], tuple([node.shape[axis] for axis in order])
        if value.numel() != node.numel():  # a prefix of its storage
            value = value.reshape((value.numel(),)).shrink(((0, node.numel()),))
        return value.reshape(shape)
    return node.permute(order)


@functools.lru_cache(maxsize=1 << 12)  # an eager training step asks again for every batch norm's sums
def accumulation_split(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, int] | None:
    """(axis, parts) to run a SUM over axes in two stages, or None when it is short enough or wide.
    The first stage sums each of `parts` pieces of `axis` (with the other reduced axes), the second
    the `parts` partial sums. Preferred: an axis with a divisor that makes the first stage short
    enough, the fewest parts (the smallest intermediate), the outermost of equals (the first stage
    then reads whole inner rows); else the most parts any axis allows (that stage splits again).
    Where no reduced axis has a divisor (all prime), the longest is padded with zeros to a multiple
    of about its square root, the caller's pieces then being ceil(size / parts) long."""
    terms = math.prod(shape[axis] for axis in axes)
    if terms <= ACCUMULATION_LIMIT or math.prod(shape) // terms > SPLIT_OUTPUT_LIMIT:
        return None
    needed = -(-terms // ACCUMULATION_LIMIT)
    best, best_rank = None, None
    for axis in axes:
        size = shape[axis]
        divisors = [divisor for divisor in _divisors(size) if 1 < divisor < terms]
        if not divisors:
            continue
        enough = [divisor for divisor in divisors if divisor >= needed]
        parts = min(enough) if enough else max(divisors)
        rank = (0, parts) if enough else (1, -parts)
        if best_rank is None or rank < best_rank:
            best, best_rank = (axis, parts), rank
    if best is None:
        longest = max(axes, key=lambda axis: shape[axis])
        best = (longest, math.isqrt(shape[longest] - 1) + 1)
    return best


def _divisors(size: int) -> list[int]:
    small = [divisor for divisor in range(1, math.isqrt(size) + 1) if size % divisor == 0]
    return small + [size // divisor for divisor in reversed(small) if divisor * divisor != size]


def walk(roots: list[LazyBuffer]) -> list[LazyBuffer]:
    """Every node reachable from roots, sources before users (depth first, sources in order);
    realized nodes are leaves (they have dropped their sources)."""
    order, seen = [], set()
    for root in roots:
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, iter(root.srcs))]
        while stack:
            node, sources = stack[-1]
            for src in sources:
                if id(src) not in seen:
                    seen.add(id(src))
                    stack.append((src, iter(src.srcs)))
                    break
            else:
                stack.pop()
                order.append(node)
    return order
