"""uint16, uint32 and uint64 beyond the op suite (which runs every op on them against numpy):
promotion, sums that stay unsigned, the largest values, and the formats that store them."""
import numpy as np
import pytest

from lazygrad import Tensor, dtypes, iinfo
from lazygrad.dtype import promote_types
from lazygrad.nn.state import safe_load, safe_save

UNSIGNED = [dtypes.uint16, dtypes.uint32, dtypes.uint64]


def test_promotion_takes_the_smallest_type_that_holds_both():
    assert promote_types(dtypes.uint16, dtypes.int8) == dtypes.int32
    assert promote_types(dtypes.uint32, dtypes.int32) == dtypes.int64
    assert promote_types(dtypes.uint8, dtypes.uint64) == dtypes.uint64
    assert promote_types(dtypes.uint32, dtypes.float16) == dtypes.float16  # the float wins, as in PyTorch
    with pytest.raises(TypeError, match="no integer dtype holds both uint64 and int64; cast one of them first"):
        promote_types(dtypes.uint64, dtypes.int64)
    x = Tensor(np.array([1, 2], np.uint32))
    assert (x + 3).dtype == dtypes.uint32 and (x * 2.5).dtype == dtypes.float32
    with pytest.raises(TypeError, match="no integer dtype holds both uint64 and int8"):
        Tensor(np.array([1], np.uint64)) + Tensor(np.array([1], np.int8))


@pytest.mark.parametrize("dtype", UNSIGNED, ids=lambda d: d.name)
def test_the_largest_values_survive_ops_and_casts(dtype, device):
    top = iinfo(dtype).max
    a = np.array([top, top - 1, 0, 1], dtype.np)
    x = Tensor(a, device=device)
    np.testing.assert_array_equal((x // Tensor(np.array([top, 1, top, top], dtype.np), device=device)).numpy(),
                                  [1, top - 1, 0, 0])
    np.testing.assert_array_equal((x + 1).numpy(), a + dtype.np.type(1))  # wraps, as numpy's
    np.testing.assert_array_equal(x.max().numpy(), top)
    np.testing.assert_array_equal((x > Tensor(np.array([0, top, 1, 0], dtype.np), device=device)).numpy(),
                                  [True, False, False, True])
    np.testing.assert_array_equal(x.cast(dtypes.float64).numpy(), a.astype(np.float64))


def test_a_uint64_sum_stays_uint64_and_wraps_as_numpys(device):
    a = np.array([2 ** 64 - 1, 2, 2 ** 63], np.uint64)
    total = Tensor(a, device=device).sum()
    assert total.dtype == dtypes.uint64
    np.testing.assert_array_equal(total.numpy(), a.sum())
    assert Tensor(np.array([65535, 65535], np.uint16), device=device).sum().dtype == dtypes.int64


@pytest.mark.parametrize("dtype", UNSIGNED, ids=lambda d: d.name)
def test_safetensors_keep_them(dtype, tmp_path):
    a = np.array([0, 1, iinfo(dtype).max], dtype.np)
    safe_save({"a": Tensor(a)}, tmp_path / "u.safetensors")
    loaded = safe_load(tmp_path / "u.safetensors")["a"]
    assert loaded.dtype == dtype
    np.testing.assert_array_equal(loaded.numpy(), a)
