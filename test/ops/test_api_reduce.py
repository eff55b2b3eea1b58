"""argmax/argmin, var/std, logsumexp, any/all, cumulative ops and softmax against numpy formulations of
PyTorch's definitions, on every device; and the kernel counts that make them worth composing.
"""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor, dtypes, stats
from ops_helpers import check, sample, small_sample, tensor

U8, I8, I32, I64 = dtypes.uint8, dtypes.int8, dtypes.int32, dtypes.int64
F32, F64, BOOL = dtypes.float32, dtypes.float64, dtypes.bool
SHAPE3 = (2, 3, 4)


# ---- argmax, argmin ----------------------------------------------------------------------------------

def np_arg(name, array, axis, keepdim):
    """numpy's argmax/argmin return the first extreme and treat NaN as the extreme, as PyTorch does."""
    result = getattr(np, name)(array, axis=axis)
    if keepdim:
        result = np.expand_dims(result, axis) if axis is not None else result.reshape((1,) * array.ndim)
    return np.asarray(result, dtype=np.int64)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", [F32, I32, U8, BOOL], ids=["float32", "int32", "uint8", "bool"])
def test_argmax_argmin_with_ties(name, dtype, device):
    a = small_sample(dtype, shape=SHAPE3, low=-2, high=3)  # many ties: the first one wins
    x = tensor(a, device)
    for axis, keepdim in ((None, False), (1, False), (-1, True), (0, False), (None, True)):
        check(getattr(x, name)(axis, keepdim), np_arg(name, a, axis, keepdim), I64)
    check(getattr(x, name)(dim=2), np_arg(name, a, 2, False), I64)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin_nan_inf_and_non_contiguous(name, device):
    a = sample(F32)  # NaN in row 3; +-inf too
    check(getattr(tensor(a, device), name)(1), np_arg(name, a, 1, False), I64)
    check(getattr(tensor(a, device).T, name)(0), np_arg(name, a.T, 0, False), I64)
    b = small_sample(I8, shape=(4, 6), low=-128, high=128)
    check(getattr(tensor(b, device)[:, ::-2], name)(1), np_arg(name, b[:, ::-2], 1, False), I64)


def test_argmax_of_0d_and_errors(device):
    check(Tensor(3.0, device=device).argmax(), np.array(0), I64)
    check(Tensor(3.0, device=device).argmin(0), np.array(0), I64)
    empty = tensor(np.zeros((0, 3), np.float32), device)
    check(empty.argmax(1), np.zeros((0,), np.int64), I64)
    with pytest.raises(ValueError, match=r"\(0, 3\)"):
        empty.argmax(0)
    with pytest.raises(ValueError):
        empty.argmin()
    with pytest.raises(IndexError, match="range"):
        tensor(np.zeros((2, 3), np.float32), device).argmax(2)


# ---- max(dim), min(dim) -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dtype", [F32, I32, U8, BOOL], ids=["float32", "int32", "uint8", "bool"])
@pytest.mark.parametrize("dim, keepdim", [(0, False), (-1, True), (1, False)])
def test_max_min_with_a_dim_give_values_and_first_indices(name, dtype, dim, keepdim, device):
    a = small_sample(dtype, shape=SHAPE3, low=-2, high=3)  # many ties: the first one's index
    result = getattr(tensor(a, device), name)(dim, keepdim)
    values, indices = result
    assert result.values is values and result.indices is indices
    expected = getattr(np, name)(a, axis=dim, keepdims=keepdim)
    check(values, expected, dtype)
    check(indices, np_arg("arg" + name, a, dim, keepdim), I64)


def test_max_min_with_a_dim_keep_nan_and_take_other_spellings(device):
    a = np.array([[1.0, np.nan, 3.0, np.nan], [-np.inf, 2.0, 2.0, -1.0]], dtype=np.float32)
    x = tensor(a, device)
    values, indices = x.max(dim=1)
    check(values, np.array([np.nan, 2.0], np.float32), F32)
    check(indices, np.array([1, 1]), I64)
    check(x.min(1).indices, np.array([1, 0]), I64)  # NaN is the minimum too, as in PyTorch
    check(x.max(axis=1), np.max(a, axis=1), F32)      # tinygrad's keyword: the values alone
    check(x.max((0, 1)), np.max(a, axis=(0, 1)), F32)
    check(x.max(), np.max(a), F32)
    other = np.zeros_like(a)
    check(x.max(tensor(other, device)), np.maximum(a, other), F32)
    check(x.min(tensor(other, device)), np.minimum(a, other), F32)
    scalar_values, scalar_index = tensor(np.array(2.5, np.float32), device).max(0)
    check(scalar_values, np.array(2.5, np.float32), F32)
    check(scalar_index, np.array(0), I64)
    with pytest.raises(ValueError, match="empty"):
        tensor(np.zeros((2, 0), np.float32), device).max(1)


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_with_a_dim_give_a_tie_s_gradient_to_the_index_they_return(name, device):
    """PyTorch's rule (amax and max() share a tie's gradient instead)."""
    a = np.array([[1.0, 3.0, 3.0], [-2.0, -2.0, 0.5]], dtype=np.float64)
    x = Tensor(a, device=device, requires_grad=True)
    values, indices = getattr(x, name)(1)
    (values * Tensor(np.array([2.0, 5.0]), device=device)).sum().backward()
    expected = np.zeros_like(a)
    for row, column in enumerate(indices.numpy()):
        expected[row, column] = (2.0, 5.0)[row]
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    assert list(indices.numpy()) == ([1, 2] if name == "max" else [0, 0])


# ---- var, std -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std_axes_and_corrections(name, device):
    a = small_sample(F32, shape=SHAPE3)
    x = tensor(a, device)
    for axis in (None, 1, (0, 2), -1):
        for correction in (0, 1, 2):
            expected = getattr(np, name)(a.astype(np.float64), axis=axis, ddof=correction).astype(np.float32)
            check(getattr(x, name)(axis, correction=correction), expected, F32, rtol=1e-5, atol=1e-6)
    check(getattr(x, name)(dim=1, keepdim=True), getattr(np, name)(a, axis=1, ddof=1, keepdims=True), F32, rtol=1e-5)
    check(getattr(x, name)(1, False), getattr(np, name)(a, axis=1, ddof=0), F32, rtol=1e-5)  # unbiased=False
    check(getattr(x.permute(2, 0, 1), name)(0), getattr(np, name)(a.transpose(2, 0, 1), axis=0, ddof=1), F32, rtol=1e-5)


def test_var_edge_cases(device):
    with np.errstate(all="ignore"):
        check(Tensor(2.0, device=device).var(), np.array(np.nan, np.float32), F32)  # N=1 with correction 1
        check(tensor(np.ones((3, 1), np.float32), device).var(1), np.full(3, np.nan, np.float32), F32)
        check(tensor(np.array([1.0, 2.0], np.float32), device).var(correction=2), np.array(np.inf, np.float32), F32)
        check(tensor(np.zeros((0, 2), np.float64), device).std(0), np.full(2, np.nan), F64)
    with pytest.raises(TypeError, match="int32"):
        tensor(small_sample(I32), device).var()
    with pytest.raises(ValueError):
        tensor(small_sample(F32), device).var(0, True, correction=0)


# ---- logsumexp, any, all -----------------------------------------------------------------------------

def np_logsumexp(a, axis, keepdim=False):
    a = a.astype(np.float64)
    top = np.max(a, axis=axis, keepdims=True)
    top = np.where(np.isinf(top), 0, top)
    with np.errstate(divide="ignore"):
        result = np.log(np.sum(np.exp(a - top), axis=axis, keepdims=True)) + top
    return result if keepdim else np.squeeze(result, axis=axis)


def test_logsumexp(device):
    a = small_sample(F32, shape=SHAPE3) * 40  # exp would overflow without the shift
    x = tensor(a, device)
    for axis in (1, -1, (0, 2)):
        check(x.logsumexp(axis), np_logsumexp(a, axis).astype(np.float32), F32, rtol=1e-5)
    check(x.logsumexp(dim=0, keepdim=True), np_logsumexp(a, 0, True).astype(np.float32), F32, rtol=1e-5)
    special = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [-np.inf, 0.0], [1000.0, 1000.0]], np.float32)
    check(tensor(special, device).logsumexp(1), np_logsumexp(special, 1).astype(np.float32), F32)
    check(tensor(small_sample(I32, shape=(2, 3)), device).logsumexp(1),
          np_logsumexp(small_sample(I32, shape=(2, 3)), 1).astype(np.float32), F32, rtol=1e-5)
    check(tensor(np.zeros((2, 0), np.float32), device).logsumexp(1), np.full(2, -np.inf, np.float32), F32)


@pytest.mark.parametrize("dtype", [F32, I32, BOOL], ids=["float32", "int32", "bool"])
def test_any_all(dtype, device):
    a = small_sample(dtype, shape=SHAPE3, low=0, high=3)  # zeros sprinkled in
    a[0, 1] = 1  # a row with no zero
    x = tensor(a, device)
    for name in ("any", "all"):
        for axis, keepdim in ((None, False), (2, False), (1, True), ((0, 2), False)):
            check(getattr(x, name)(axis, keepdim), getattr(np, name)(a, axis=axis, keepdims=keepdim), BOOL)
    check(tensor(np.array([np.nan, 0.0], np.float32), device).all(), np.array(False), BOOL)
    check(tensor(np.array([np.nan, 0.0], np.float32), device).any(), np.array(True), BOOL)
    empty = tensor(np.zeros((0, 2), np.float32), device)
    check(empty.any(0), np.zeros(2, bool), BOOL)
    check(empty.all(0), np.ones(2, bool), BOOL)


# ---- cumulative -------------------------------------------------------------------------------------

CUMULATIVE = {"cumsum": np.cumsum, "cumprod": np.cumprod, "cummax": np.maximum.accumulate,
              "cummin": np.minimum.accumulate}


def cumulative(x: Tensor, name: str, *args, **kwargs) -> Tensor:
    """The running values (cummax and cummin also return indices: test_api_sorting.py)."""
    result = getattr(x, name)(*args, **kwargs)
    return result.values if name in ("cummax", "cummin") else result


def cumulative_dtype(name, dtype):
    return I64 if name in ("cumsum", "cumprod") and not dtype.is_float else dtype


@pytest.mark.parametrize("name", list(CUMULATIVE))
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumulative_along_each_axis(name, axis, device):
    a = np.random.default_rng(4).choice([-1.5, -1.0, 0.5, 1.0, 1.25, 2.0], size=SHAPE3).astype(np.float32)
    check(cumulative(tensor(a, device), name, axis), CUMULATIVE[name](a, axis=axis), F32, rtol=1e-6)


@pytest.mark.parametrize("name", list(CUMULATIVE))
@pytest.mark.parametrize("dtype", [I32, I8, BOOL], ids=["int32", "int8", "bool"])
def test_cumulative_integer_and_bool(name, dtype, device):
    a = small_sample(dtype, shape=(4, 6), low=-3, high=4)
    out = cumulative_dtype(name, dtype)
    check(cumulative(tensor(a, device), name, dim=1), CUMULATIVE[name](a.astype(out.np), axis=1), out)


def test_cumulative_edge_cases(device):
    a = small_sample(F32, shape=(4, 6))
    check(tensor(a, device).T.cumsum(1), np.cumsum(a.T, 1), F32, rtol=1e-6)  # non-contiguous
    check(tensor(a, device)[::2, 1:].cumsum(0), np.cumsum(a[::2, 1:], 0), F32, rtol=1e-6)
    check(tensor(a, device).cumsum(0, dtype=F64), np.cumsum(a.astype(np.float64), 0), F64)
    check(tensor(a[:1], device).cumprod(0), a[:1], F32)
    check(Tensor(2.5, device=device).cumsum(0), np.array(2.5, np.float32), F32)
    check(tensor(np.zeros((0, 3), np.float32), device).cumsum(0), np.zeros((0, 3), np.float32), F32)
    nan = np.array([1.0, np.nan, 3.0, 0.5], np.float32)
    check(tensor(nan, device).cummax(0).values, np.array([1.0, np.nan, np.nan, np.nan], np.float32), F32)
    with pytest.raises(IndexError, match="range"):
        tensor(a, device).cumsum(2)


def test_cumsum_of_64x64_is_one_kernel(device):
    a = small_sample(F32, shape=(64, 64))
    x = tensor(a, device).realize()
    for axis in (0, 1):
        stats.reset()
        result = x.cumsum(axis).realize()
        assert stats.kernels == (0 if device == "NPY" else 1)
        np.testing.assert_allclose(result.numpy(), np.cumsum(a, axis), rtol=1e-5, atol=1e-4)


# ---- softmax, log_softmax ------------------------------------------------------------------------------

def np_softmax(a, axis):
    a = a.astype(np.float64)
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_log_softmax(a, axis):
    a = a.astype(np.float64)
    shifted = a - a.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_axes_and_large_values(name, device):
    reference = np_softmax if name == "softmax" else np_log_softmax
    a = small_sample(F32, shape=SHAPE3) * 100  # exp(900) overflows unless shifted
    x = tensor(a, device)
    for axis in (-1, 0, 1):
        check(getattr(x, name)(axis), reference(a, axis).astype(np.float32), F32, rtol=1e-5, atol=1e-6)
    check(getattr(x, name)(dim=1), reference(a, 1).astype(np.float32), F32, rtol=1e-5, atol=1e-6)
    check(getattr(x.permute(2, 1, 0), name)(0), reference(a.transpose(2, 1, 0), 0).astype(np.float32), F32,
          rtol=1e-5, atol=1e-6)
    check(getattr(x, name)(-1, dtype=F64), reference(a, -1), F64)


def test_softmax_edge_cases(device):
    masked = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, 2.0]], np.float32)
    check(tensor(masked, device).softmax(1), np_softmax(masked, 1).astype(np.float32), F32)
    with np.errstate(all="ignore"):
        check(tensor(masked, device).log_softmax(1), np_log_softmax(masked, 1).astype(np.float32), F32)
    check(Tensor(3.0, device=device).softmax(0), np.array(1.0, np.float32), F32)
    check(tensor(np.zeros((0, 4), np.float32), device).softmax(1), np.zeros((0, 4), np.float32), F32)
    check(tensor(np.zeros((2, 0), np.float32), device).log_softmax(1), np.zeros((2, 0), np.float32), F32)
    with pytest.raises(TypeError, match="int32"):
        tensor(small_sample(I32), device).softmax(0)
    check(tensor(small_sample(I32), device).softmax(0, dtype=F32), np_softmax(small_sample(I32), 0).astype(np.float32),
          F32, rtol=1e-5)


def test_softmax_weights_below_the_smallest_normal_are_zero(device):
    # a mask of -100 (Swin's shifted windows): numpy's weights 3.7e-44 are subnormal, each operation
    # on them a microcode assist on x86; softmax gives 0 there, and numpy's value everywhere else
    scores = np.array([[0.0, -100.0, -86.0, -87.5, -1.0], [-100.0, -100.0, 0.0, -90.0, np.nan]], np.float32)
    expected = np_softmax(scores, 1).astype(np.float32)
    with np.errstate(under="ignore"):
        subnormal = (expected != 0) & (np.abs(expected) < np.finfo(np.float32).tiny)
    assert subnormal[0, 1] and subnormal[0, 3] and not subnormal[0, 2]
    result = tensor(scores, device).softmax(1)
    check(result, np.where(subnormal, 0.0, expected).astype(np.float32), F32)
    assert np.all(result.numpy()[subnormal] == 0)
    # float64's smallest normal is 2.2e-308: -100 keeps its weight there
    check(tensor(scores[:1], device).softmax(1, dtype=F64), np_softmax(scores[:1].astype(np.float64), 1), F64)


@pytest.mark.parametrize("name,limit", [("softmax", 2), ("log_softmax", 2), ("logsumexp", 2)])
def test_softmax_family_kernel_counts(name, limit):
    a = np.random.default_rng(5).standard_normal((32, 48)).astype(np.float32)
    x = Tensor(a).realize()
    stats.reset()
    getattr(x, name)(1).realize()
    assert stats.kernels <= limit
