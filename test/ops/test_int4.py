"""int4 and uint4 on every device against ml_dtypes: one value per byte (its low nibble), conversions
that wrap as ml_dtypes' do, arithmetic in int32 wrapped back to 4 bits, promotion, limits."""
import ml_dtypes
import numpy as np
import pytest

from lazygrad import Tensor, dtypes, iinfo
from lazygrad.dtype import promote_types
from lazygrad.nn.state import safe_save

FOUR_BIT = [dtypes.int4, dtypes.uint4]


def nibbles(array) -> np.ndarray:
    return np.asarray(array).view(np.uint8)


def every_value(dtype) -> np.ndarray:
    return np.arange(16, dtype=np.uint8).view(dtype.np)


@pytest.mark.parametrize("dtype", FOUR_BIT, ids=lambda d: d.name)
def test_conversions_wrap_as_ml_dtypes(dtype, device):
    floats = np.array([0, 0.9, -0.9, 1, -1, 7, -8, 8, -9, 15.5, 16, 100.7, -100.7, 1000, 2.0 ** 31, 3e9, -3e9], np.float32)
    ints = np.arange(-40, 41, dtype=np.int32)
    for values in (floats, ints, ints.astype(np.int64), np.array([True, False])):
        converted = Tensor(values, device=device).cast(dtype)
        assert converted.dtype == dtype
        with np.errstate(invalid="ignore"):  # numpy warns about 3e9, which ml_dtypes wraps through int64
            expected = values.astype(dtype.np)
        np.testing.assert_array_equal(nibbles(converted.numpy()), nibbles(expected))
    every = every_value(dtype)
    for target in (dtypes.float32, dtypes.float16, dtypes.int8, dtypes.int64, dtypes.uint8, dtypes.bool, dtypes.bfloat16):
        np.testing.assert_array_equal(Tensor(every, device=device).cast(target).numpy(), every.astype(target.np))
    other = dtypes.uint4 if dtype == dtypes.int4 else dtypes.int4  # numpy casts these two only through int64
    np.testing.assert_array_equal(nibbles(Tensor(every, device=device).cast(other).numpy()),
                                  nibbles(every.astype(np.int64).astype(other.np)))


def wrapped(values: np.ndarray, dtype) -> np.ndarray:
    """Integers wrapped to 4 bits, as ml_dtypes' arithmetic wraps: int4's two's complement, uint4 mod 16."""
    low = values.astype(np.int64) & 15
    return (low ^ 8) - 8 if dtype == dtypes.int4 else low


@pytest.mark.parametrize("dtype", FOUR_BIT, ids=lambda d: d.name)
def test_arithmetic_wraps_to_four_bits(dtype, device):
    a = np.tile(every_value(dtype), 16)
    b = np.repeat(every_value(dtype), 16)  # every pair
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    wide_a, wide_b = a.astype(np.int64), b.astype(np.int64)
    np.testing.assert_array_equal(wrapped(wide_a + wide_b, dtype), (a + b).astype(np.int64))  # the oracle is ml_dtypes'
    for got, expected in ((ta + tb, wide_a + wide_b), (ta - tb, wide_a - wide_b), (ta * tb, wide_a * wide_b),
                          (ta.maximum(tb), np.maximum(wide_a, wide_b)), (-ta, -wide_a), (ta + 3, wide_a + 3),
                          ((ta > tb).where(ta, tb), np.where(wide_a > wide_b, wide_a, wide_b))):
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy().astype(np.int64), wrapped(expected, dtype))
    nonzero = np.nonzero(wide_b != 0)[0]
    picked = Tensor(nonzero, device=device)
    quotient = ta[picked] // tb[picked]
    np.testing.assert_array_equal(quotient.numpy().astype(np.int64), wrapped(wide_a[nonzero] // wide_b[nonzero], dtype))
    np.testing.assert_array_equal((ta < tb).numpy(), wide_a < wide_b)
    assert ta.sum().dtype == dtypes.int64 and ta.sum().item() == int(wide_a.sum())  # as every integer sum
    assert ta.max().item() == int(wide_a.max()) and ta.max().dtype == dtype


def test_promotion_limits_and_scalars():
    assert promote_types(dtypes.int4, dtypes.uint4) == dtypes.int8
    assert promote_types(dtypes.uint4, dtypes.int8) == dtypes.int8
    assert promote_types(dtypes.uint4, dtypes.uint16) == dtypes.uint16
    assert promote_types(dtypes.int4, dtypes.uint8) == dtypes.int16
    assert promote_types(dtypes.int4, dtypes.float16) == dtypes.float16
    assert (iinfo(dtypes.int4).min, iinfo(dtypes.int4).max, iinfo(dtypes.uint4).max) == (-8, 7, 15)
    assert dtypes.uint4.is_unsigned and not dtypes.int4.is_unsigned
    x = Tensor(np.array([1, -2], ml_dtypes.int4))
    assert (x * 2.5).dtype == dtypes.float32 and (x * 2.5).tolist() == [2.5, -5.0]
    with pytest.raises(OverflowError, match="does not fit int4"):
        x + 100


def test_safetensors_refuse_four_bit_integers(tmp_path):
    with pytest.raises(TypeError, match="'w' is int4, which the safetensors format has no code for"):
        safe_save({"w": Tensor(np.zeros(2, ml_dtypes.int4))}, tmp_path / "w.safetensors")


@pytest.mark.parametrize("dtype", FOUR_BIT, ids=lambda d: d.name)
def test_a_matmul_with_four_bit_weights_converts_inside_the_kernel(dtype, device):
    rng = np.random.default_rng(3)
    weights = rng.integers(iinfo(dtype).min, iinfo(dtype).max + 1, (48, 40)).astype(dtype.np)
    activations = rng.standard_normal((8, 48)).astype(np.float32)
    scales = rng.random(40).astype(np.float32)
    result = Tensor(activations, device=device) @ Tensor(weights, device=device) * Tensor(scales, device=device)
    assert result.dtype == dtypes.float32
    expected = activations @ weights.astype(np.float32) * scales
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)
