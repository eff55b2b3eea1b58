"""The arena planner alone (lazygrad/export/arena.py): buffers whose lifetimes do not overlap share
memory, buffers alive together never do, and every offset is aligned."""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad.export.arena import ALIGNMENT, Lifetime, aligned, plan_arena


def assert_valid(lifetimes: list[Lifetime], offsets: list[int], size: int) -> None:
    for index, (lifetime, offset) in enumerate(zip(lifetimes, offsets)):
        assert offset % ALIGNMENT == 0
        assert offset + lifetime.nbytes <= size
        for other_index in range(index):
            other, other_offset = lifetimes[other_index], offsets[other_index]
            alive_together = lifetime.first <= other.last and other.first <= lifetime.last
            memory_overlaps = offset < other_offset + other.nbytes and other_offset < offset + lifetime.nbytes
            assert not (alive_together and memory_overlaps), (index, other_index)


def test_buffers_alive_at_different_times_share_memory():
    lifetimes = [Lifetime(1000, 0, 1), Lifetime(1000, 2, 3)]
    offsets, size = plan_arena(lifetimes)
    assert offsets == [0, 0] and size == aligned(1000)


def test_a_kernel_output_never_shares_with_what_the_same_kernel_reads():
    # buffer 0 is last read by step 1, which writes buffer 1
    offsets, size = plan_arena([Lifetime(256, 0, 1), Lifetime(256, 1, 2)])
    assert offsets == [0, 256] and size == 512


def test_a_chain_of_layers_needs_less_than_the_sum_of_its_intermediates():
    sizes = [4096, 8192, 2048, 8192, 1024, 512]
    lifetimes = [Lifetime(nbytes, step, step + 1) for step, nbytes in enumerate(sizes)]
    offsets, size = plan_arena(lifetimes)
    assert_valid(lifetimes, offsets, size)
    assert size == max(a + b for a, b in zip(sizes, sizes[1:]))  # two neighbours at a time
    assert size < sum(sizes)


def test_offsets_are_aligned_and_sizes_rounded_up():
    lifetimes = [Lifetime(1, 0, 5), Lifetime(65, 0, 5), Lifetime(3, 0, 5)]
    offsets, size = plan_arena(lifetimes)
    assert offsets == [192, 0, 128] and size == 256  # the larger first among buffers born together


def test_nothing_to_place_is_an_empty_arena():
    assert plan_arena([]) == ([], 0)


@pytest.mark.parametrize("seed", range(5))
def test_random_lifetimes_never_overlap_in_memory_while_alive(seed):
    rng = np.random.default_rng(seed)
    lifetimes = []
    for _ in range(60):
        first = int(rng.integers(0, 40))
        lifetimes.append(Lifetime(int(rng.integers(1, 5000)), first, first + int(rng.integers(0, 6))))
    offsets, size = plan_arena(lifetimes)
    assert_valid(lifetimes, offsets, size)
    peak = max(sum(aligned(lifetime.nbytes) for lifetime in lifetimes if lifetime.first <= step <= lifetime.last)
               for step in range(46))
    assert peak <= size < sum(aligned(lifetime.nbytes) for lifetime in lifetimes)
