"""Tensor.assign: values written into an existing buffer, on every device, against numpy.

The engine writes in place only when it is safe; these tests check the values in every case, that
the write really lands in the old buffer where it should, and that a value built from the old
contents either runs before the write or raises StaleValueError, never returns the new contents.
"""
import numpy as np
import pytest

from lazygrad import Tensor, dtypes, stats
from lazygrad.lazy import StaleValueError

rng = np.random.default_rng(7)


def realized(array, device):
    return Tensor(array, device=device).realize()


def test_assign_writes_into_the_old_buffer(device):
    start = rng.standard_normal((5, 6)).astype(np.float32)
    x = realized(start, device)
    buffer = x.lazydata.buffer
    stats.reset()
    x.assign(x * 2 + 1).realize()
    np.testing.assert_allclose(x.numpy(), start * 2 + 1, rtol=1e-6)
    assert x.lazydata.buffer is buffer
    if device != "NPY":
        assert stats.kernels == 1


def test_assign_broadcasts_and_casts(device):
    x = realized(np.zeros((3, 4), np.float32), device)
    x.assign(Tensor(np.arange(4, dtype=np.int32), device=device)).realize()
    np.testing.assert_array_equal(x.numpy(), np.broadcast_to(np.arange(4, dtype=np.float32), (3, 4)))
    x.assign(2.5).realize()
    np.testing.assert_array_equal(x.numpy(), np.full((3, 4), 2.5, np.float32))
    assert x.dtype == dtypes.float32


def test_assign_of_a_transposed_read_is_not_done_in_place(device):
    start = rng.standard_normal((7, 7)).astype(np.float32)
    x = realized(start, device)
    x.assign(x.T + 0).realize()  # each element reads another's old value: a new buffer is written
    np.testing.assert_array_equal(x.numpy(), start.T)


def test_assign_reading_a_reduce_of_itself(device):
    start = rng.standard_normal(33).astype(np.float32)
    x = realized(start, device)
    x.assign(x - x.max()).realize()
    np.testing.assert_allclose(x.numpy(), start - start.max(), rtol=1e-6)


def test_swap_by_two_assigns_realized_together(device):
    a_start, b_start = rng.standard_normal(9).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    a, b = realized(a_start, device), realized(b_start, device)
    old_a = a.detach()
    a.assign(b + 0)
    b.assign(old_a + 0)
    Tensor.realize(a, b)
    np.testing.assert_array_equal(a.numpy(), b_start)
    np.testing.assert_array_equal(b.numpy(), a_start)


def test_readers_of_the_old_value_realized_with_the_assign_see_the_old_value(device):
    start = rng.standard_normal(16).astype(np.float32)
    x = realized(start, device)
    doubled = x * 2
    total = x.sum()
    x.assign(x + 1)
    Tensor.realize(x, doubled, total)
    np.testing.assert_allclose(doubled.numpy(), start * 2, rtol=1e-6)
    np.testing.assert_allclose(total.numpy(), start.sum(), rtol=1e-5)
    np.testing.assert_allclose(x.numpy(), start + 1, rtol=1e-6)


def test_a_lazy_value_of_the_old_contents_realized_later_raises(device):
    x = realized(np.ones(8, np.float32), device)
    doubled = x * 2
    alias = x.detach()
    x.assign(x + 1).realize()
    with pytest.raises(StaleValueError, match=r"float32\[8\].*overwritten in place"):
        doubled.numpy()
    with pytest.raises(StaleValueError):
        alias.numpy()
    np.testing.assert_array_equal((x * 2).numpy(), np.full(8, 4, np.float32))  # built after: fine


def test_assign_into_a_lazy_tensor_gives_the_value(device):
    x = Tensor(np.arange(6, dtype=np.float32), device=device) + 1  # not realized: no buffer to reuse
    x.assign(x * 3).realize()
    np.testing.assert_array_equal(x.numpy(), (np.arange(6) + 1) * 3)


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3)])
def test_assign_zero_dim_and_empty(device, shape):
    x = realized(np.ones(shape, np.float32), device)
    x.assign(x * 5).realize()
    np.testing.assert_array_equal(x.numpy(), np.full(shape, 5, np.float32))


def test_assign_errors_name_shapes_devices_and_autograd():
    x = realized(np.zeros((2, 3), np.float32), "CPU")
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
        x.assign(Tensor(np.zeros(4, np.float32)))
    with pytest.raises(ValueError, match="NPY.*CPU"):
        x.assign(Tensor(np.zeros((2, 3), np.float32), device="NPY"))
    leaf = Tensor(np.zeros(3, np.float32), requires_grad=True)
    with pytest.raises(RuntimeError, match="no_grad"):
        leaf.assign(leaf + 1)


def _guarded_stores(schedule_of):
    """How many stores of the kernels realizing `schedule_of` (a tensor) are guarded."""
    from lazygrad.schedule.fuse import create_schedule
    items = create_schedule([schedule_of.lazydata])
    return sum(len(store.srcs) == 2 for item in items if item.kernel is not None for store in item.kernel.stores)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8, np.bool_])
def test_a_row_written_at_a_position_held_in_a_tensor(device, dtype):
    # a KV cache's update: only the selected row changes, every dtype, positions at both ends
    start = rng.integers(0, 2, (2, 7, 5)).astype(dtype) if dtype is np.bool_ else \
        (rng.standard_normal((2, 7, 5)) * 20).astype(dtype)
    cache = realized(start, device)
    buffer = cache.lazydata.buffer
    expected = start.copy()
    for position in (0, 6, 3):
        row = rng.integers(0, 2, (2, 1, 5)).astype(dtype) if dtype is np.bool_ else \
            (rng.standard_normal((2, 1, 5)) * 20).astype(dtype)
        here = (Tensor.arange(7, device=device) == Tensor([position], device=device)).reshape(1, 7, 1)
        update = here.where(Tensor(row, device=device), cache)
        if device != "NPY":
            assert _guarded_stores(Tensor(cache.lazydata.assign(update.lazydata))) == 1
        cache.assign(update).realize()
        expected[:, position] = row[:, 0]
        np.testing.assert_array_equal(cache.numpy(), expected)
        assert cache.lazydata.buffer is buffer


def test_a_select_over_itself_with_a_guard_that_varies_per_element(device):
    start = rng.standard_normal((4, 9)).astype(np.float32)
    x = realized(start, device)
    x.assign((x > 0).where(x * 3, x)).realize()  # the guard reads the buffer it guards
    np.testing.assert_allclose(x.numpy(), np.where(start > 0, start * 3, start), rtol=1e-6)
    x.assign((x < 0).where(x, 0.5)).realize()  # the old value where the guard holds: a plain store
    np.testing.assert_allclose(x.numpy(), np.where(start < 0, start, 0.5), rtol=1e-6)


def test_a_select_over_itself_written_out_of_place_keeps_every_element(device):
    start = rng.standard_normal(12).astype(np.float32)
    x = realized(start, device)
    total = x.sum()  # read with the write, in the same schedule
    mask = Tensor(np.arange(12) % 3 == 0, device=device)
    x.assign(mask.where(-x.flip(0), x))  # reads other elements: never in place
    Tensor.realize(x, total)
    np.testing.assert_allclose(x.numpy(), np.where(np.arange(12) % 3 == 0, -start[::-1], start), rtol=1e-6)
    np.testing.assert_allclose(total.numpy(), start.sum(), rtol=1e-5)


def test_a_mask_assigned_through_setitem_under_no_grad(device):
    from lazygrad import no_grad
    start = rng.standard_normal((3, 4)).astype(np.float32)
    x = realized(start, device)
    with no_grad():
        x[Tensor(start > 0.5, device=device)] = 7.0
    x.realize()
    np.testing.assert_array_equal(x.numpy(), np.where(start > 0.5, np.float32(7), start))
