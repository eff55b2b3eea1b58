"""A realize gives an intermediate buffer back to the device's pool as soon as no later kernel of
its schedule reads it, so a long chain runs in a few buffers instead of one per step, and a value
something still holds is never overwritten."""
import numpy as np
import pytest

import lazygrad
from lazygrad import Tensor
from lazygrad.devices import get_device

ELEMENTS = 1 << 18  # 1 MiB of float32 per step


def chain(x: Tensor, steps: int, held_at: int | None = None):
    """`steps` stored results one after another; also the one after step `held_at`, if asked."""
    held = None
    for step in range(steps):
        x = (x * 1.0009765625 + step).contiguous()
        if step == held_at:
            held = x
    return x, held


def numpy_chain(a: np.ndarray, steps: int) -> list[np.ndarray]:
    values = []
    for step in range(steps):
        a = a * np.float32(1.0009765625) + np.float32(step)
        values.append(a)
    return values


@pytest.fixture
def fresh_blocks(monkeypatch):
    """How many blocks the CPU device takes from the system (not from its pool), and a function that
    empties the pool and zeroes that count."""
    allocator = get_device("CPU").allocator
    original = allocator.new_block
    count = [0]

    def counted(nbytes):
        count[0] += 1
        return original(nbytes)

    def empty_pool():  # every buffer then comes from the system or from this realize
        allocator.pool.clear()
        allocator.pooled_bytes = 0
        count[0] = 0
    monkeypatch.setattr(allocator, "new_block", counted)
    empty_pool()
    return count, empty_pool


@pytest.mark.parametrize("calls", [1, 2], ids=["planned", "memoized schedule"])
def test_a_chain_of_16_stored_steps_runs_in_a_few_buffers(fresh_blocks, calls):
    count, empty_pool = fresh_blocks
    start = np.linspace(-1, 1, ELEMENTS, dtype=np.float32)
    for _ in range(calls):
        x = Tensor(start).realize()
        empty_pool()
        with lazygrad.no_grad():
            result, _ = chain(x, 16)
            result.realize()
    assert count[0] <= 3, f"{count[0]} buffers taken for a chain that needs 2 at a time"
    np.testing.assert_allclose(result.numpy(), numpy_chain(start, 16)[-1], rtol=1e-5)


def test_an_intermediate_someone_holds_keeps_its_value(fresh_blocks):
    start = np.linspace(-1, 1, ELEMENTS, dtype=np.float32)
    with lazygrad.no_grad():
        result, held = chain(Tensor(start), 16, held_at=5)
        result.realize()
    expected = numpy_chain(start, 16)
    np.testing.assert_allclose(result.numpy(), expected[-1], rtol=1e-5)
    np.testing.assert_allclose(held.numpy(), expected[5], rtol=1e-5)


def test_the_host_pool_keeps_a_quarter_of_the_machines_memory_and_at_least_1_gib():
    from lazygrad.devices.buffer import MIN_HOST_POOL_BYTES, HostAllocator, host_pool_limit
    assert host_pool_limit(24 << 30) == 6 << 30
    assert host_pool_limit(2 << 30) == MIN_HOST_POOL_BYTES == 1 << 30
    assert host_pool_limit(0) == MIN_HOST_POOL_BYTES
    assert HostAllocator().pool_limit == host_pool_limit() >= MIN_HOST_POOL_BYTES
    assert HostAllocator(1 << 20).pool_limit == 1 << 20


def test_a_freed_block_larger_than_1_gib_stays_pooled_where_the_limit_allows():
    # the pool keys blocks by size and takes any block within its limit, however large
    from lazygrad.devices.buffer import PooledAllocator
    pool = PooledAllocator(pool_limit=4 << 30)
    pool.free(("a block", 0), nbytes=(1 << 30) + 64)
    assert pool.pooled_bytes == (1 << 30) + 64 and pool.alloc((1 << 30) + 64) == ("a block", 0)
