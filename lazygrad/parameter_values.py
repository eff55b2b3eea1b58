"""Values computed from parameters alone, built once and kept while the parameters hold the same
buffers at the same versions: an eval-mode batch norm's per-channel scale and shift
(nn/functional.py), and a weight copied into the layout a kernel reads (`kept_copy`: a matmul's
right operand in panels, tensor_methods/linalg.py; a convolution's weight in channel panels or
channels-last taps, nn/spatial.py).

Front-end layer. The engine already keeps the kernel that computes such a value between eager
calls (derived_values.py); this keeps the Tensor ops that build it too, which in an eager call cost
more than the kernels: a batch norm's scale and shift are 16 lazy nodes of the 22 it builds, and
MobileNetV2's 52 batch norms made 1,144 of the 2,787 nodes its eager call builds (a call 28 -> 25
ms, ResNet-18's 21.3 -> 18.8, 2 threads). Every in-place write bumps a buffer's version (lazy.py),
so an assigned or reloaded parameter computes its values anew.

Kept values are not used where they would be wrong or invisible: while a jit capture or an export
records (a replay must see the kernel, to compute it again when a parameter is assigned), when a
parameter needs its gradient, or when one is not a realized buffer of its own or a view of one
through reshapes and permutations (`W.T`; not a pending assign, a padded view, a sharded tensor).
"""
from __future__ import annotations

import math
import weakref
from collections import OrderedDict

from lazygrad import realize as engine
from lazygrad.lazy import LazyBuffer
from lazygrad.ops import Ops
from lazygrad.tensor import Tensor, no_grad

# (name, settings, ids of the parameters' buffers, their views) -> (weak references to the buffers,
# their versions, the values, their bytes), least recently used first
_KEPT: OrderedDict[tuple, tuple[list[weakref.ref], tuple[int, ...], tuple[Tensor, ...], int]] = OrderedDict()
# The bytes of the values kept at most: the least recently used go beyond it (a model's weights in
# panels are as large as its weights: ResNet-18's 45 MB)
KEPT_BYTES = 1 << 30
_kept_bytes = [0]  # a list, so that _forget, bound to it, still works while the interpreter exits


def kept_values(name: str, compute, parameters: tuple[Tensor | None, ...], settings: tuple) -> tuple[Tensor, ...]:
    """compute(), a tuple of Tensors of `parameters` (None for an absent one) and `settings` (plain
    values) alone: kept where it can be, else built as it is. Kept as built: the realize that
    computes them (the call's own, as intermediates its schedule stores) leaves them realized, and
    later calls read their buffers; building a graph never runs a kernel by itself."""
    stored = _parameter_buffers(parameters)
    if stored is None:
        return compute()
    buffers, views = stored
    key = (name, settings, tuple(id(buffer) for buffer in buffers), views)
    versions = tuple(buffer.version for buffer in buffers)
    entry = _KEPT.get(key)
    if engine.recording is not None:
        # a capture builds its own, which hash-consing makes the kept nodes while they are unrealized:
        # computed by the capture, into a buffer its replays reuse, they would not stay as kept
        if entry is not None:
            _forget(key)
        return compute()
    if entry is not None and entry[1] == versions \
            and all(reference() is buffer for reference, buffer in zip(entry[0], buffers)) \
            and all(_unwritten(value) for value in entry[2]):
        _KEPT.move_to_end(key)
        return entry[2]
    values = compute()

    def forget(_reference, key=key, drop=_forget) -> None:
        drop(key)
    _forget(key)
    size = sum(math.prod(value.shape) * value.dtype.itemsize for value in values)
    _KEPT[key] = ([weakref.ref(buffer, forget) for buffer in buffers], versions, values, size)
    _kept_bytes[0] += size
    while _kept_bytes[0] > KEPT_BYTES and len(_KEPT) > 1:
        _forget(next(iter(_KEPT)))
    return values


def _forget(key: tuple, _kept=_KEPT, _bytes=_kept_bytes) -> None:  # bound: module globals may be gone at exit
    entry = _kept.pop(key, None)
    if entry is not None:
        _bytes[0] -= entry[3]


def _unwritten(value: Tensor) -> bool:
    """Whether a kept value, if realized, still holds what it was computed as."""
    node = value.lazydata
    return node.buffer is None or node.buffer.version == node.version


def kept_copy(name: str, tensor: Tensor, build, settings: tuple) -> Tensor:
    """build(tensor, *settings), a copy of a parameter laid out for a kernel (Tensor ops ending in a
    stored value), kept as kept_values keeps values; `settings` are plain values, whatever else the
    layout depends on."""
    def compute() -> tuple[Tensor]:
        with no_grad():
            return (build(tensor, *settings),)
    return kept_values(name, compute, (tensor,), settings)[0]


def _parameter_buffers(parameters: tuple[Tensor | None, ...]) -> tuple[list, tuple] | None:
    """The buffers of the parameters and how each is viewed (the reshapes and permutations over the
    buffer's node, and its shape), or None where their values must not be kept."""
    buffers, views = [], []
    for tensor in parameters:
        if tensor is None:
            continue
        node = tensor.lazydata
        if (tensor.requires_grad and Tensor.grad_enabled) or node.__class__ is not LazyBuffer:
            return None
        view = []
        while node.buffer is None and (node.op is Ops.PERMUTE or node.op is Ops.RESHAPE):
            view.append((node.op, node.arg))
            node = node.srcs[0]
        if node.op is not Ops.BUFFER or node.buffer is None or node.buffer.version != node.version:
            return None
        buffers.append(node.buffer)
        views.append((tuple(view), node.shape))
    return buffers, tuple(views)
