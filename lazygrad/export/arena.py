"""Places the intermediate buffers of an exported function in one static arena; the second step of
lazygrad.export (capture.py -> here -> c_source.py).

Each intermediate lives from the first step that touches it to the last one (both included: a
kernel's output never shares memory with what the same kernel reads). In order of first use, the
larger first among buffers born at the same step, each takes the lowest offset, a multiple of
ALIGNMENT, where it overlaps no buffer already placed whose lifetime overlaps its own (first fit).
Buffers that are never alive together share memory, so the arena of a chain of layers is about its
two largest neighbours, not the sum of every layer's output.
"""
from __future__ import annotations

from dataclasses import dataclass

ALIGNMENT = 64  # bytes: a cache line, and a whole vector register of the widest x86 vectors


@dataclass(frozen=True)
class Lifetime:
    nbytes: int
    first: int  # index of the first step that touches the buffer
    last: int   # index of the last step that touches it (>= first)


def aligned(nbytes: int, alignment: int = ALIGNMENT) -> int:
    """nbytes rounded up to a multiple of alignment."""
    return -(-nbytes // alignment) * alignment


def plan_arena(lifetimes: list[Lifetime], alignment: int = ALIGNMENT) -> tuple[list[int], int]:
    """The offset of each buffer in the arena (in the order given) and the arena's size in bytes."""
    order = sorted(range(len(lifetimes)), key=lambda index: (lifetimes[index].first, -lifetimes[index].nbytes, index))
    offsets = [0] * len(lifetimes)
    placed: list[tuple[int, int, Lifetime]] = []  # (offset, end, lifetime)
    for index in order:
        lifetime = lifetimes[index]
        size = aligned(lifetime.nbytes, alignment)
        overlapping = sorted((start, end) for start, end, other in placed
                             if other.first <= lifetime.last and lifetime.first <= other.last)
        offset = 0
        for start, end in overlapping:
            if offset + size <= start:
                break
            offset = max(offset, end)
        offsets[index] = offset
        placed.append((offset, offset + size, lifetime))
    return offsets, max((end for _, end, _ in placed), default=0)


def lifetimes_of(steps_buffers: list[list], buffers: list) -> list[Lifetime]:
    """The lifetime of each of `buffers` over steps given as their lists of buffers."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for index, step_buffers in enumerate(steps_buffers):
        for buffer in step_buffers:
            first.setdefault(id(buffer), index)
            last[id(buffer)] = index
    return [Lifetime(buffer.nbytes, first[id(buffer)], last[id(buffer)]) for buffer in buffers]
