"""Values computed from parameters alone (an eval-mode batch norm's per-channel scale and shift),
built and realized once and kept while the parameters hold the same buffers at the same versions.

Front-end layer, called by nn/functional.py. The engine already keeps the kernel that computes
such a value between eager calls (derived_values.py); this keeps the Tensor ops that build it too,
which in an eager call cost more than the kernels: a batch norm's scale and shift are 16 lazy
nodes of the 22 it builds, and MobileNetV2's 52 batch norms made 1,144 of the 2,787 nodes its
eager call builds (a call 28 -> 25 ms, ResNet-18's 21.3 -> 18.8, 2 threads). Every in-place write
bumps a buffer's version (lazy.py), so an assigned or reloaded parameter computes its values anew.

Kept values are not used where they would be wrong or invisible: while a jit capture or an export
records (a replay must see the kernel, to compute it again when a parameter is assigned), when a
parameter needs its gradient, or when one is not a realized buffer of its own (a pending assign, a
view, a sharded tensor).
"""
from __future__ import annotations

import weakref

from lazygrad import realize as engine
from lazygrad.lazy import LazyBuffer
from lazygrad.ops import Ops
from lazygrad.tensor import Tensor

# (name, settings, ids of the parameters' buffers) -> (weak references to them, their versions, the values)
_KEPT: dict[tuple, tuple[list[weakref.ref], tuple[int, ...], tuple[Tensor, ...]]] = {}


def kept_values(name: str, compute, parameters: tuple[Tensor | None, ...], settings: tuple) -> tuple[Tensor, ...]:
    """compute(), a tuple of Tensors of `parameters` (None for an absent one) and `settings` (plain
    values) alone: realized and kept where it can be, else built as it is."""
    buffers = _parameter_buffers(parameters)
    if buffers is None:
        return compute()
    key = (name, settings, tuple(id(buffer) for buffer in buffers))
    versions = tuple(buffer.version for buffer in buffers)
    entry = _KEPT.get(key)
    if entry is not None and entry[1] == versions and all(reference() is buffer
                                                           for reference, buffer in zip(entry[0], buffers)):
        return entry[2]
    values = compute()
    Tensor.realize(*values)

    def forget(_reference, key=key) -> None:
        _KEPT.pop(key, None)
    _KEPT[key] = ([weakref.ref(buffer, forget) for buffer in buffers], versions, values)
    return values


def _parameter_buffers(parameters: tuple[Tensor | None, ...]) -> list | None:
    """The buffers of the parameters, or None where their values must not be kept."""
    if engine.recording is not None:
        return None
    buffers = []
    for tensor in parameters:
        if tensor is None:
            continue
        node = tensor.lazydata
        if (tensor.requires_grad and Tensor.grad_enabled) or node.__class__ is not LazyBuffer \
                or node.op is not Ops.BUFFER or node.buffer is None or node.buffer.version != node.version:
            return None
        buffers.append(node.buffer)
    return buffers
