"""Creation, random numbers, conversions and clone against numpy (PyTorch's definitions), on every device.

Random numbers are drawn on the host with numpy, so one seed gives the same numbers on every device.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from lazygrad import Tensor, dtypes, manual_seed
from ops_helpers import available_devices, check, small_sample, tensor

I32, I64, F16, F32, F64, BOOL = dtypes.int32, dtypes.int64, dtypes.float16, dtypes.float32, dtypes.float64, dtypes.bool


# ---- *_like ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [I32, F32, BOOL], ids=["int32", "float32", "bool"])
def test_like_constructors_take_shape_dtype_and_device(dtype, device):
    x = tensor(small_sample(dtype, shape=(2, 3)), device)
    check(x.zeros_like(), np.zeros((2, 3), dtype.np), dtype)
    check(Tensor.ones_like(x), np.ones((2, 3), dtype.np), dtype)
    check(x.full_like(7), np.full((2, 3), 7, dtype.np), dtype)
    check(x.empty_like(), np.zeros((2, 3), dtype.np), dtype)
    check(x.zeros_like(dtype=F64), np.zeros((2, 3)), F64)
    assert x.ones_like().device == device


def test_full_like_casts_the_value_to_the_dtype(device):
    x = tensor(np.zeros((2,), np.int32), device)
    check(x.full_like(2.7), np.array([2, 2], np.int32), I32)  # truncated, as PyTorch casts


def test_like_constructors_of_0d_and_empty(device):
    check(Tensor(2.5, device=device).ones_like(), np.array(1.0, np.float32), F32)
    check(tensor(np.zeros((0, 3), np.float32), device).zeros_like(), np.zeros((0, 3), np.float32), F32)


def test_rand_like_and_randn_like(device):
    x = tensor(np.zeros((50, 40), np.float32), device)
    values = x.rand_like().numpy()
    assert values.shape == (50, 40) and values.dtype == np.float32
    assert 0 <= values.min() and values.max() < 1 and 0.45 < values.mean() < 0.55
    normal = x.randn_like(dtype=F64).numpy()
    assert normal.dtype == np.float64 and abs(normal.mean()) < 0.1 and 0.9 < normal.std() < 1.1
    with pytest.raises(TypeError, match="int32"):
        tensor(np.zeros(3, np.int32), device).rand_like()


# ---- linspace, eye ---------------------------------------------------------------------------------

def linspace_reference(start, end, steps):
    """PyTorch's linspace: the first half counts up from start, the second half down from end."""
    index = np.arange(steps, dtype=np.float64)
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    return np.where(index < steps / 2, start + index * step, end - (steps - 1 - index) * step)


@pytest.mark.parametrize("start,end,steps", [(0, 1, 5), (-3.5, 2.25, 7), (10, -10, 4), (1, 1, 3), (2, 5, 1), (0, 1, 0)])
def test_linspace(start, end, steps, device):
    result = Tensor.linspace(start, end, steps, device=device)
    check(result, linspace_reference(start, end, steps).astype(np.float32), F32)
    if steps > 1:
        assert result.numpy()[-1] == np.float32(end)  # exact at both ends


def test_linspace_integer_dtype_truncates(device):
    check(Tensor.linspace(0, 10, 4, dtype=I64, device=device), np.array([0, 3, 6, 10]), I64)


def test_linspace_negative_steps_raises():
    with pytest.raises(ValueError, match="-1"):
        Tensor.linspace(0, 1, -1)


@pytest.mark.parametrize("n,m", [(3, None), (2, 4), (4, 2), (1, 1), (0, None), (0, 3)])
def test_eye(n, m, device):
    check(Tensor.eye(n, m, device=device), np.eye(n, m, dtype=np.float32), F32)


def test_eye_dtypes(device):
    check(Tensor.eye(3, dtype=BOOL, device=device), np.eye(3, dtype=bool), BOOL)
    check(Tensor.eye(2, 3, dtype=I32, device=device), np.eye(2, 3, dtype=np.int32), I32)


def test_eye_negative_raises():
    with pytest.raises(ValueError, match="-2"):
        Tensor.eye(-2)


# ---- random --------------------------------------------------------------------------------------

def test_randint_range_dtype_and_forms(device):
    values = Tensor.randint(-3, 5, (40, 50), device=device)
    assert values.dtype == I64 and values.shape == (40, 50)
    array = values.numpy()
    assert array.min() == -3 and array.max() == 4
    high_only = Tensor.randint(4, (100,), device=device).numpy()
    assert high_only.min() == 0 and high_only.max() == 3
    assert Tensor.randint(0, 10, (3,), dtype=I32, device=device).dtype == I32


def test_randint_bad_arguments():
    with pytest.raises(ValueError, match="5"):
        Tensor.randint(5, 5, (2,))
    with pytest.raises(TypeError):
        Tensor.randint(5)


def test_uniform_and_normal(device):
    manual_seed(3)
    u = Tensor.uniform((100, 50), -2.0, 3.0, device=device).numpy()
    assert u.dtype == np.float32 and -2 <= u.min() and u.max() < 3 and abs(u.mean() - 0.5) < 0.1
    assert Tensor.uniform(2, 3, low=1.0, high=2.0, device=device).numpy().min() >= 1
    n = Tensor.normal((100, 50), 5.0, 0.5, device=device).numpy()
    assert abs(n.mean() - 5) < 0.05 and abs(n.std() - 0.5) < 0.05
    assert Tensor.normal(3, mean=1.0, dtype=F64, device=device).dtype == F64


def test_uniform_and_normal_bad_arguments():
    with pytest.raises(ValueError, match="-1"):
        Tensor.normal((2,), 0.0, -1.0)
    with pytest.raises(TypeError, match="int32"):
        Tensor.uniform(2, dtype=I32)
    with pytest.raises(TypeError):
        Tensor.uniform((2,), 0.0, 1.0, 2.0)


def test_initializers_use_pytorch_fans(device):
    manual_seed(0)
    shape = (64, 32, 3, 3)  # fan_in 288, fan_out 576
    kaiming = Tensor.kaiming_uniform(*shape, a=0.0, device=device).numpy()
    bound = math.sqrt(3) * math.sqrt(2) / math.sqrt(32 * 9)
    assert np.abs(kaiming).max() <= bound and np.abs(kaiming).max() > 0.95 * bound
    glorot = Tensor.glorot_uniform(shape, device=device).numpy()
    bound = math.sqrt(6 / (32 * 9 + 64 * 9))
    assert np.abs(glorot).max() <= bound and np.abs(glorot).max() > 0.95 * bound
    with pytest.raises(ValueError, match=r"\(5,\)"):
        Tensor.kaiming_uniform(5)


def test_same_seed_same_numbers_on_every_device():
    results = []
    for device in available_devices():
        manual_seed(42)
        results.append([Tensor.rand(3, 4, device=device).numpy(), Tensor.randint(0, 100, (5,), device=device).numpy(),
                        Tensor.normal((4,), 1.0, 2.0, device=device).numpy()])
    for other in results[1:]:
        for first, second in zip(results[0], other):
            np.testing.assert_array_equal(first, second)


# ---- conversions and clone --------------------------------------------------------------------------

def test_to_dtype_device_and_both(device):
    other = "NPY" if device != "NPY" else "CPU"
    x = tensor(np.array([1.5, -2.25, 3.0], np.float32), device)
    check(x.to(F16), np.array([1.5, -2.25, 3.0], np.float16), F16)
    check(x.to(dtype=I32), np.array([1, -2, 3], np.int32), I32)
    moved = x.to(other)
    assert moved.device == other
    check(moved, np.array([1.5, -2.25, 3.0], np.float32), F32)
    both = x.to(other, F64)
    assert both.device == other and both.dtype == F64
    like = x.to(tensor(np.zeros(1, np.int64), other))
    assert like.device == other and like.dtype == I64
    assert x.to(np.complex64).numpy().tolist() == [1.5 + 0j, -2.25 + 0j, 3 + 0j]
    with pytest.raises(TypeError, match="valid dtypes"):
        x.to(np.str_)


def test_clone_is_a_copy_with_the_same_values(device):
    a = small_sample(F32, shape=(4, 6))
    x = tensor(a, device)
    copy = x.T.clone()
    check(copy, a.T, F32)
    x[0, 0] = 100.0
    check(copy, a.T, F32)
