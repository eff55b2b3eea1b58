"""Values derived from buffers that did not change: kept between realizes, so an eager call does
not compute them again.

Engine layer (realize._run_item asks here before it runs a kernel). A kernel of a schedule that
reads only buffers realized before the schedule started (a model's parameters: a convolution's
weight copied into panels, a batch norm's scale and shift, a transposed linear weight) computes
the same outputs as last time while those buffers are the same objects at the same versions
(every in-place write bumps a buffer's version: lazy.py, jit replays too). Its last outputs are
kept here and handed out again instead of running it: an eager ResNet-18 call ran 89 kernels, of
which 41 only repacked weights; the jit skips the same launches on its replays (jit.py).

Only intermediates are kept, values a later kernel of the same schedule reads: what a realize was
asked for (`(x * 2).numpy()` in a loop) runs every time, as a benchmark expects. An entry lives as
long as every buffer it read: a weak reference to each drops the entry (and the outputs it holds)
when one of them is freed, so a per-call input does not keep its derived values alive past its own
life; and the least recently used entries go once the kept outputs pass KEPT_BYTES. An entry also
checks that nobody wrote its outputs in place since.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict

from lazygrad.codegen.kernel import Kernel
from lazygrad.devices.buffer import Buffer


class _Entry:
    __slots__ = ("sources", "source_versions", "outputs", "output_versions")

    def __init__(self, sources: list[weakref.ref], source_versions: tuple[int, ...], outputs: list[Buffer]):
        self.sources, self.source_versions = sources, source_versions
        self.outputs = outputs
        self.output_versions = tuple(buffer.version for buffer in outputs)


# (device, kernel, ids of the buffers read) -> their last outputs, least recently used first
_ENTRIES: OrderedDict[tuple, _Entry] = OrderedDict()
KEPT_BYTES = 1 << 30  # the outputs kept at most (ResNet-18's weight panels: 45 MB)
_kept_bytes = 0


def _key(device_name: str, kernel: Kernel, sources: list[Buffer]) -> tuple:
    return (device_name, kernel, tuple(id(buffer) for buffer in sources))


def cached_outputs(device_name: str, kernel: Kernel, sources: list[Buffer]) -> list[Buffer] | None:
    """The outputs kernel wrote when it last read these very buffers at their present versions,
    if nothing has written them since; else None."""
    key = _key(device_name, kernel, sources)
    entry = _ENTRIES.get(key)
    if entry is None:
        return None
    _ENTRIES.move_to_end(key)
    for reference, buffer in zip(entry.sources, sources):
        if reference() is not buffer:  # an id reused by another buffer (the entry's callback is due)
            return None
    if tuple(buffer.version for buffer in sources) != entry.source_versions:
        return None
    if tuple(buffer.version for buffer in entry.outputs) != entry.output_versions:
        return None
    return entry.outputs


def remember(device_name: str, kernel: Kernel, sources: list[Buffer], outputs: list[Buffer]) -> None:
    """Keep kernel's outputs for the next schedule that runs it on the same sources."""
    global _kept_bytes
    key = _key(device_name, kernel, sources)

    def forget(_reference, key=key) -> None:
        _drop(key)
    references = [weakref.ref(buffer, forget) for buffer in sources]
    _drop(key)
    _ENTRIES[key] = _Entry(references, tuple(buffer.version for buffer in sources), list(outputs))
    _kept_bytes += sum(buffer.nbytes for buffer in outputs)
    while _kept_bytes > KEPT_BYTES and len(_ENTRIES) > 1:
        _drop(next(iter(_ENTRIES)))


def _drop(key: tuple) -> None:
    global _kept_bytes
    entry = _ENTRIES.pop(key, None)
    if entry is not None:
        _kept_bytes -= sum(buffer.nbytes for buffer in entry.outputs)


def clear() -> None:
    """Drop every kept value (a benchmark that times whole computations; a caller that wants the
    memory back)."""
    global _kept_bytes
    _ENTRIES.clear()
    _kept_bytes = 0
