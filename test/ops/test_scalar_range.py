"""A Python (or numpy) scalar that meets a tensor, or fills one, must fit the dtype it becomes:
`int8_tensor.clamp(-1000, 1000)` once gave -24 and `Tensor([1]) + 2**70` a bare OverflowError from
inside. Now each raises OverflowError naming the function, the value and the dtype."""
import math

import numpy as np
import pytest

from lazygrad import Tensor, dtypes


def int8():
    return Tensor(np.array([1, -5], dtype=np.int8))


def uint8():
    return Tensor(np.array([0, 200], dtype=np.uint8))


# name: (the call, the function the message names, the value as written there, the dtype)
DOES_NOT_FIT = {
    "add": (lambda: int8() + 1000, "add", "1000", "int8"),
    "add_numpy_scalar": (lambda: int8() + np.int64(1000), "add", "np.int64(1000)", "int8"),
    "rsub": (lambda: 1000 - int8(), "sub", "1000", "int8"),
    "mul": (lambda: int8() * -129, "mul", "-129", "int8"),
    "add_negative_to_uint8": (lambda: uint8() + -1, "add", "-1", "uint8"),
    "add_to_int32": (lambda: Tensor(np.array([1], np.int32)) + 2**40, "add", "1099511627776", "int32"),
    "add_beyond_int64": (lambda: Tensor([1]) + 2**70, "add", "1180591620717411303424", "int64"),
    "add_just_beyond_int64": (lambda: Tensor([1]) + 2**63, "add", "9223372036854775808", "int64"),
    "clamp": (lambda: int8().clamp(-1000, 1000), "clamp", "-1000", "int8"),
    "clamp_max": (lambda: int8().clamp(max=1000), "clamp", "1000", "int8"),
    "maximum": (lambda: int8().maximum(1000), "maximum", "1000", "int8"),
    "minimum": (lambda: int8().minimum(-1000), "minimum", "-1000", "int8"),
    "where": (lambda: (int8() > 0).where(int8(), 1000), "where", "1000", "int8"),
    "where_two_numbers": (lambda: (int8() > 0).where(2**70, 0), "where", "1180591620717411303424", "int64"),
    "lt": (lambda: int8() < 1000, "lt", "1000", "int8"),
    "eq": (lambda: uint8() == -1, "eq", "-1", "uint8"),
    "bitwise_and": (lambda: int8() & 1000, "bitwise_and", "1000", "int8"),
    "shift": (lambda: int8() << 1000, "bitwise_left_shift", "1000", "int8"),
    "floordiv": (lambda: int8() // 1000, "floordiv", "1000", "int8"),
    "remainder": (lambda: int8() % 1000, "remainder", "1000", "int8"),
    "pow": (lambda: int8() ** 1000, "pow", "1000", "int8"),
    "full": (lambda: Tensor.full((2,), 1000, dtype=dtypes.int8), "full", "1000", "int8"),
    "full_float": (lambda: Tensor.full((2,), 1000.0, dtype=dtypes.int8), "full", "1000.0", "int8"),
    "full_nan": (lambda: Tensor.full((2,), math.nan, dtype=dtypes.int32), "full", "nan", "int32"),
    "full_inf": (lambda: Tensor.full((2,), math.inf, dtype=dtypes.int64), "full", "inf", "int64"),
    "full_default_dtype": (lambda: Tensor.full((2,), 2**70), "full", "1180591620717411303424", "int64"),
    "full_like": (lambda: int8().full_like(1000), "full", "1000", "int8"),
    "masked_fill": (lambda: int8().masked_fill(int8() > 0, 1000), "masked_fill", "1000", "int8"),
    "pad": (lambda: int8().pad((1, 1), value=1000), "pad", "1000", "int8"),
    "scatter": (lambda: int8().scatter(0, Tensor([0]), 1000), "scatter", "1000", "int8"),
    "tensor_scalar": (lambda: Tensor(1000, dtype=dtypes.int8), "Tensor", "1000", "int8"),
    "tensor_scalar_default_dtype": (lambda: Tensor(2**70), "Tensor", "1180591620717411303424", "int64"),
    "tensor_list": (lambda: Tensor([1, 1000], dtype=dtypes.int8), "Tensor", "1000", "int8"),
    "tensor_list_of_floats": (lambda: Tensor([2.5, -300.0], dtype=dtypes.uint8), "Tensor", "-300.0", "uint8"),
    "assign": (lambda: int8().assign(1000), "assign", "1000", "int8"),
}


@pytest.mark.parametrize("name", list(DOES_NOT_FIT))
def test_a_scalar_that_does_not_fit_its_dtype_raises_overflow_error(name):
    call, function, value, dtype = DOES_NOT_FIT[name]
    with pytest.raises(OverflowError) as excinfo:
        call()
    text = str(excinfo.value)
    assert text.startswith(f"{function}: {value} does not fit {dtype} ("), text
    assert "use a wider dtype" in text, text


def test_setitem_names_itself():
    x = int8()
    with pytest.raises(OverflowError, match=r"setitem: 1000 does not fit int8 \(-128 to 127\)"):
        x[0] = 1000


def test_an_int_beyond_float64_raises_for_a_float_tensor():
    with pytest.raises(OverflowError, match="add: an int of 1101 bits is too large for any float dtype"):
        Tensor([1.0], dtype=dtypes.float64) + 2**1100


def test_scalars_that_fit_still_work(device):
    x = Tensor(np.array([0, -1], dtype=np.int8), device=device)
    np.testing.assert_array_equal((x + 127).numpy(), np.array([127, 126], np.int8))
    np.testing.assert_array_equal((x + -128).numpy(), np.array([-128, 127], np.int8))  # the sum wraps, as in numpy
    np.testing.assert_array_equal(x.clamp(-128, 127).numpy(), [0, -1])
    u = Tensor(np.array([0, 200], dtype=np.uint8), device=device)
    np.testing.assert_array_equal((u + 255).numpy(), np.array([255, 199], np.uint8))
    np.testing.assert_array_equal((u - 1).numpy(), np.array([255, 199], np.uint8))  # subtracting 1 fits uint8
    np.testing.assert_array_equal((~u).numpy(), ~np.array([0, 200], np.uint8))
    np.testing.assert_array_equal(Tensor.full((2,), 2.5, dtype=dtypes.int8, device=device).numpy(), [2, 2])


def test_a_scalar_meets_a_float_in_a_float_dtype(device):
    x = Tensor(np.array([1, -5], dtype=np.int8), device=device)
    result = x / 1000  # true division: x becomes float32 before it meets 1000
    assert result.dtype == dtypes.float32
    np.testing.assert_allclose(result.numpy(), np.array([0.001, -0.005], np.float32))
    np.testing.assert_allclose((1000 / x).numpy(), np.array([1000, -200], np.float32))
    np.testing.assert_array_equal((x + 1000.0).numpy(), np.array([1001, 995], np.float32))
    big = Tensor(np.array([1.0], np.float32), device=device) + 2**70
    np.testing.assert_array_equal(big.numpy(), np.array([2.0**70], np.float32))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_a_float_too_large_for_a_float_dtype_becomes_inf(device):
    half = Tensor(np.array([1.0], np.float16), device=device)
    assert (half + 70000).numpy()[0] == np.inf
    assert Tensor.full((1,), 1e300, dtype=dtypes.float32, device=device).numpy()[0] == np.inf
