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
