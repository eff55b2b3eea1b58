"""DLPack (lazygrad/dlpack.py): tensors shared with numpy and PyTorch without a copy, both ways."""
import gc

import numpy as np
import pytest

import lazygrad
from lazygrad import Tensor, dtypes
from ops_helpers import unavailable_reason

HOST_DTYPES = [dtypes.bool, dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
               dtypes.float16, dtypes.float32, dtypes.float64]


def values_of(dtype, shape, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == dtypes.bool:
        return rng.random(shape) < 0.5
    if dtype.is_float:
        return rng.standard_normal(shape).astype(dtype.np)
    return rng.integers(0, 100, shape).astype(dtype.np)


@pytest.mark.parametrize("dtype", HOST_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4), (5,)], ids=["2x3", "0-d", "empty", "1-d"])
def test_a_computed_tensor_reaches_numpy_by_dlpack_with_its_values_shape_and_dtype(dtype, shape):
    values = values_of(dtype, shape)
    tensor = Tensor(values).logical_not().logical_not() if dtype == dtypes.bool else Tensor(values) + 0  # computed
    shared = np.from_dlpack(tensor)
    assert shared.shape == shape and shared.dtype == dtype.np
    np.testing.assert_array_equal(shared, values)
    assert tensor.__dlpack_device__() == (1, 0)


def test_dlpack_export_shares_memory_and_keeps_the_buffer_alive():
    tensor = (Tensor(np.arange(8, dtype=np.float32)) + 1).realize()
    shared = np.from_dlpack(tensor)
    assert shared.ctypes.data == tensor.lazydata.buffer.pointer  # no copy
    del tensor
    gc.collect()
    # the buffer did not go back to the pool: a new tensor of the same size does not take its memory
    other = (Tensor(np.zeros(8, np.float32)) - 5).realize()
    assert other.lazydata.buffer.pointer != shared.ctypes.data
    np.testing.assert_array_equal(shared, np.arange(8) + 1)


def test_a_view_is_exported_in_its_own_order():
    base = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(np.from_dlpack(base.T), np.arange(6, dtype=np.float32).reshape(2, 3).T)


def test_from_dlpack_wraps_numpy_memory_without_a_copy_and_sees_its_writes():
    source = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor = lazygrad.from_dlpack(source)
    assert tensor.shape == (3, 4) and tensor.dtype == dtypes.float32 and tensor.device == "CPU"
    assert tensor.lazydata.buffer.pointer == source.ctypes.data
    source[0, 0] = 100.0
    np.testing.assert_array_equal((tensor * 2).numpy(), source * 2)


def test_from_dlpack_copies_strided_and_read_only_sources():
    source = np.arange(12).reshape(3, 4).T  # not C-contiguous
    tensor = lazygrad.from_dlpack(source)
    np.testing.assert_array_equal(tensor.numpy(), source)
    frozen = np.arange(4, dtype=np.float64)
    frozen.flags.writeable = False
    tensor = lazygrad.from_dlpack(frozen)
    assert tensor.lazydata.buffer.pointer != frozen.ctypes.data
    np.testing.assert_array_equal(tensor.numpy(), frozen)


def test_a_round_trip_through_dlpack_keeps_gradients_flowing_from_the_new_tensor():
    x = lazygrad.from_dlpack(np.array([1.0, -2.0, 3.0], dtype=np.float32)).requires_grad_()
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -4.0, 6.0])


def test_dlpack_errors_name_the_fix():
    with pytest.raises(BufferError, match="stream must be None"):
        Tensor([1.0]).__dlpack__(stream=1)


def test_complex_memory_is_shared_both_ways():
    source = np.array([1 + 2j, 3 - 4j], np.complex64)
    shared = lazygrad.from_dlpack(source)
    assert shared.dtype == lazygrad.dtypes.complex64
    source[0] = 9j  # a write through numpy is seen by values computed after it
    assert (shared * 1).numpy().tolist() == [9j, 3 - 4j]
    exported = np.from_dlpack(Tensor(np.array([[1j, 2]], np.complex128)))
    assert exported.dtype == np.complex128 and exported.tolist() == [[1j, 2 + 0j]]


def test_device_memory_is_not_shared():
    reason = unavailable_reason("OPENCL")
    if reason is not None:
        pytest.skip(f"the OPENCL device is unavailable: {reason}")
    tensor = Tensor([1.0, 2.0], device="OPENCL")
    with pytest.raises(BufferError, match=r"move it first with .to\('CPU'\)"):
        np.from_dlpack(tensor)


def test_torch_shares_memory_both_ways():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install lazygrad[bench])")
    tensor = (Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)) * 2).realize()
    theirs = torch.from_dlpack(tensor)
    assert theirs.data_ptr() == tensor.lazydata.buffer.pointer
    np.testing.assert_array_equal(theirs.numpy(), np.arange(6).reshape(2, 3) * 2)
    source = torch.arange(5, dtype=torch.int64)
    ours = lazygrad.from_dlpack(source)
    assert ours.lazydata.buffer.pointer == source.data_ptr() and ours.dtype == dtypes.int64
    np.testing.assert_array_equal((ours + 1).numpy(), np.arange(5) + 1)


def test_numpy_reads_a_tensor_whole_through_array(device):
    """np.asarray and np.array take the values in one realize (no element-by-element reads), views
    and dtype requests included; copy=False is refused, as numpy's protocol asks, since lazygrad copies."""
    from lazygrad import stats
    tensor = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    stats.reset()
    np.testing.assert_array_equal(np.asarray(tensor.T * 2), np.arange(12, dtype=np.float32).reshape(3, 4).T * 2)
    assert stats.kernels <= 1
    assert np.array(tensor, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError, match="copy=False is not possible"):
        np.array(tensor, copy=False)
