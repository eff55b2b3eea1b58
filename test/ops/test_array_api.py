"""The array API namespace (lazygrad.array_api) against numpy, on every device: each function with
the standard's names and keywords, its dtypes, 0-d and empty arrays, and the edges the standard
names (NaN, -0.0, infinities). The official conformance suite (data-apis/array-api-tests) is not on
the package registry; its local result is in docs/tensor.md."""
from __future__ import annotations

import math

import numpy as np
import pytest

import lazygrad.array_api as xp
from lazygrad import Tensor, dtypes
from ops_helpers import check, small_sample, tensor

F32, F64, I8, I32, I64, U8, BOOL = dtypes.float32, dtypes.float64, dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.bool


def test_a_tensor_gives_the_namespace_and_rejects_other_versions():
    x = Tensor([1.0])
    assert x.__array_namespace__() is xp and x.__array_namespace__(api_version="2023.12") is xp
    with pytest.raises(ValueError, match="2023.12"):
        x.__array_namespace__(api_version="2019.01")
    assert xp.__array_api_version__ == "2023.12"


def test_the_namespace_has_the_standard_dtypes_constants_and_inspection():
    assert (xp.bool, xp.int8, xp.uint8, xp.float32, xp.float64) == (BOOL, I8, U8, F32, F64)
    assert (xp.e, xp.pi, xp.inf, xp.newaxis) == (math.e, math.pi, math.inf, None) and math.isnan(xp.nan)
    info = xp.__array_namespace_info__()
    assert info.default_dtypes()["real floating"] == F32 and info.default_dtypes()["indexing"] == I64
    assert {"CPU", "NPY"} <= set(info.devices()) and info.default_device() in info.devices()
    assert set(info.dtypes(kind="real floating").values()) == {F32, F64}
    assert info.capabilities()["data-dependent shapes"]


# ---- creation ----------------------------------------------------------------------------------

def test_asarray_copies_only_where_asked_or_needed(device):
    x = tensor(np.arange(6, dtype=np.float32), device)
    assert xp.asarray(x) is x and xp.asarray(x, copy=False) is x
    copied = xp.asarray(x, copy=True)
    assert copied is not x
    check(copied, np.arange(6, dtype=np.float32))
    check(xp.asarray(x, dtype=I32), np.arange(6, dtype=np.int32))
    with pytest.raises(ValueError, match="copy=False"):
        xp.asarray(x, dtype=I32, copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        xp.asarray([1, 2], copy=False)
    check(xp.asarray([[1, 2], [3, 4]], device=device), np.array([[1, 2], [3, 4]]))
    assert xp.asarray(2.5).dtype == F32 and xp.asarray(True).dtype == BOOL and xp.asarray(3).dtype == I64


def test_creation_functions_match_numpy(device):
    check(xp.arange(2, 11, 3, device=device), np.arange(2, 11, 3))
    check(xp.zeros((2, 0, 3), device=device), np.zeros((2, 0, 3), np.float32))
    check(xp.ones((), dtype=I8, device=device), np.ones((), np.int8))
    check(xp.full((2, 3), -1.5, device=device), np.full((2, 3), -1.5, np.float32))
    assert xp.empty((3,), device=device).shape == (3,)
    like = tensor(small_sample(I32, (2, 3)), device)
    check(xp.zeros_like(like), np.zeros((2, 3), np.int32))
    check(xp.ones_like(like, dtype=F64), np.ones((2, 3)))
    check(xp.full_like(like, 7), np.full((2, 3), 7, np.int32))
    assert xp.empty_like(like).shape == (2, 3) and xp.empty_like(like).device == device
    for rows, cols, k in ((3, None, 0), (2, 4, 1), (4, 2, -2), (3, 3, 5)):
        check(xp.eye(rows, cols, k=k, device=device), np.eye(rows, cols, k=k, dtype=np.float32))
    check(xp.linspace(0, 1, 5, device=device), np.linspace(0, 1, 5, dtype=np.float32), rtol=1e-6, atol=1e-7)
    check(xp.linspace(0, 1, 4, endpoint=False, device=device), np.linspace(0, 1, 4, endpoint=False, dtype=np.float32),
          rtol=1e-6, atol=1e-7)
    values = small_sample(F32, (3, 4))
    check(xp.tril(tensor(values, device), k=-1), np.tril(values, -1))
    check(xp.triu(tensor(values, device), k=1), np.triu(values, 1))


@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid_matches_numpy(device, indexing):
    a, b, c = np.arange(3), np.arange(4) * 10, np.arange(2) * 100
    grids = xp.meshgrid(*(tensor(v, device) for v in (a, b, c)), indexing=indexing)
    for grid, expected in zip(grids, np.meshgrid(a, b, c, indexing=indexing)):
        check(grid, expected)


# ---- data types ------------------------------------------------------------------------------------

def test_astype_result_type_can_cast_and_isdtype():
    x = Tensor(np.array([1.7, -2.2], np.float32))
    check(xp.astype(x, I32), np.array([1, -2], np.int32))
    assert xp.astype(x, F32, copy=False) is x and xp.astype(x, F32) is not x
    assert xp.result_type(I8, U8) == dtypes.int16 and xp.result_type(F32, F64) == F64
    assert xp.result_type(Tensor(np.ones(2, np.int8)), 1) == I8 and xp.result_type(F32, 1.5) == F32
    assert xp.can_cast(I8, I64) and not xp.can_cast(I64, I8) and not xp.can_cast(F32, I32)
    assert not xp.can_cast(BOOL, I8) and xp.can_cast(U8, dtypes.int16) and not xp.can_cast(F64, F32)
    assert xp.isdtype(I8, "signed integer") and xp.isdtype(U8, "unsigned integer") and xp.isdtype(U8, "integral")
    assert xp.isdtype(F32, ("bool", "real floating")) and not xp.isdtype(BOOL, "numeric") and xp.isdtype(F64, F64)
    with pytest.raises(ValueError, match="unknown kind"):
        xp.isdtype(F32, "floating")
    assert xp.finfo(F32).eps == np.finfo(np.float32).eps and xp.iinfo(Tensor(np.ones(1, np.int16))).max == 32767


# ---- element-wise --------------------------------------------------------------------------------

@pytest.mark.parametrize("name, reference", [
    ("abs", np.abs), ("negative", np.negative), ("positive", np.positive), ("square", np.square),
    ("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc), ("round", np.round), ("sign", np.sign),
    ("exp", np.exp), ("expm1", np.expm1), ("log", np.log), ("log1p", np.log1p), ("log2", np.log2),
    ("log10", np.log10), ("sqrt", np.sqrt), ("sin", np.sin), ("cos", np.cos), ("tan", np.tan),
    ("tanh", np.tanh), ("sinh", np.sinh), ("cosh", np.cosh), ("asinh", np.arcsinh), ("atan", np.arctan),
    ("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite), ("signbit", np.signbit),
    ("reciprocal", np.reciprocal), ("conj", np.conj), ("real", np.real)])
def test_unary_functions_match_numpy(device, name, reference):
    values = np.array([-2.5, -1.0, -0.0, 0.0, 0.5, 1.5, 2.5, 3.0, np.nan, np.inf, -np.inf, 100.0], np.float32)
    with np.errstate(all="ignore"):
        expected = reference(values)
    check(getattr(xp, name)(tensor(values, device)), expected, rtol=2e-6, atol=1e-6)


def test_signbit_sees_negative_zero(device):
    result = xp.signbit(tensor(np.array([-0.0, 0.0, -1.0, 1.0, -np.inf], np.float32), device)).numpy()
    assert result.tolist() == [True, False, True, False, True]
    check(xp.signbit(tensor(np.array([-3, 0, 4], np.int32), device)), np.array([True, False, False]))


@pytest.mark.parametrize("name, reference", [
    ("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply), ("divide", np.divide),
    ("maximum", np.maximum), ("minimum", np.minimum), ("pow", np.power), ("atan2", np.arctan2),
    ("copysign", np.copysign), ("logaddexp", np.logaddexp), ("hypot", np.hypot),
    ("equal", np.equal), ("not_equal", np.not_equal), ("less", np.less), ("less_equal", np.less_equal),
    ("greater", np.greater), ("greater_equal", np.greater_equal)])
def test_binary_float_functions_match_numpy_with_broadcasting(device, name, reference):
    a = np.array([[-2.0, -0.5, 0.0, 1.5, 3.0, np.inf]], np.float32)
    b = np.array([[1.0], [-2.0], [0.5], [np.nan]], np.float32)
    with np.errstate(all="ignore"):
        expected = reference(a, b)
    check(getattr(xp, name)(tensor(a, device), tensor(b, device)), expected, rtol=2e-6, atol=1e-6)


def test_hypot_neither_overflows_nor_underflows(device):
    a = np.array([3e30, 3e-30, 0.0, np.inf, np.nan], np.float32)
    b = np.array([4e30, 4e-30, 0.0, np.nan, np.inf], np.float32)
    check(xp.hypot(tensor(a, device), tensor(b, device)), np.hypot(a, b), rtol=1e-6)


@pytest.mark.parametrize("name, reference", [
    ("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or), ("bitwise_xor", np.bitwise_xor),
    ("floor_divide", np.floor_divide), ("remainder", np.remainder)])
def test_binary_integer_functions_match_numpy(device, name, reference):
    a, b = np.array([-7, -1, 0, 5, 12, 127], np.int8), np.array([3, 2, -4, 5, -5, 1], np.int8)
    check(getattr(xp, name)(tensor(a, device), tensor(b, device)), reference(a, b))


def test_shifts_invert_and_logical_functions(device):
    a, shift = np.array([1, -8, 100, 7], np.int32), np.array([0, 1, 3, 31], np.int32)
    check(xp.bitwise_left_shift(tensor(a, device), tensor(shift, device)), np.left_shift(a, shift))
    check(xp.bitwise_right_shift(tensor(a, device), tensor(shift, device)), np.right_shift(a, shift))
    check(xp.bitwise_invert(tensor(a, device)), np.invert(a))
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    for name in ("logical_and", "logical_or", "logical_xor"):
        check(getattr(xp, name)(tensor(p, device), tensor(q, device)), getattr(np, name)(p, q))
    check(xp.logical_not(tensor(p, device)), ~p)


def test_a_python_scalar_takes_the_arrays_dtype(device):
    x = tensor(np.array([1, 2, 3], np.int8), device)
    result = xp.subtract(10, x)
    assert result.dtype == I8
    check(result, np.array([9, 8, 7], np.int8))
    check(xp.multiply(x, 2), np.array([2, 4, 6], np.int8))


def test_clip_with_either_bound_or_none(device):
    values = np.array([-3.0, -0.5, 0.0, 2.0, np.nan], np.float32)
    x = tensor(values, device)
    check(xp.clip(x, min=-1.0), np.clip(values, -1.0, None))
    check(xp.clip(x, max=1.0), np.clip(values, None, 1.0))
    check(xp.clip(x, -1.0, 1.0), np.clip(values, -1.0, 1.0))
    assert xp.clip(x) is x


# ---- indexing, linear algebra --------------------------------------------------------------------

def test_take_and_linear_algebra_match_numpy(device):
    a, b = small_sample(F32, (2, 3, 4)), small_sample(F32, (3, 4, 5), seed=2)
    check(xp.take(tensor(a, device), tensor(np.array([2, 0, 2]), device), axis=1), np.take(a, [2, 0, 2], axis=1))
    check(xp.take(tensor(np.arange(5.0), device), tensor(np.array([4, 1]), device)), np.array([4.0, 1.0]))
    with pytest.raises(ValueError, match="axis is required"):
        xp.take(tensor(a, device), tensor(np.array([0]), device))
    check(xp.tensordot(tensor(a, device), tensor(b, device)), np.tensordot(a, b), rtol=1e-5, atol=1e-5)
    check(xp.tensordot(tensor(a, device), tensor(b, device), axes=([1], [0])), np.tensordot(a, b, axes=([1], [0])),
          rtol=1e-5, atol=1e-5)
    check(xp.tensordot(tensor(a, device), tensor(b, device), axes=0), np.tensordot(a, b, axes=0), rtol=1e-5, atol=1e-5)
    m = small_sample(F32, (2, 4, 3), seed=3)
    check(xp.matmul(tensor(a, device), tensor(m, device)), a @ m, rtol=1e-5, atol=1e-5)
    check(xp.matrix_transpose(tensor(a, device)), np.swapaxes(a, -1, -2))
    check(xp.vecdot(tensor(a, device), tensor(a[0, 0], device)), (a * a[0, 0]).sum(-1), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="at least 2 dims"):
        xp.matrix_transpose(tensor(np.ones(3, np.float32), device))


# ---- manipulation --------------------------------------------------------------------------------

def test_manipulation_functions_match_numpy(device):
    a = small_sample(I32, (2, 3, 4))
    x = tensor(a, device)
    check(xp.concat([x, x], axis=1), np.concatenate([a, a], axis=1))
    check(xp.concat([x, tensor(a[0], device)], axis=None), np.concatenate([a.ravel(), a[0].ravel()]))
    check(xp.stack([x, x], axis=-1), np.stack([a, a], axis=-1))
    check(xp.expand_dims(x, axis=-1), np.expand_dims(a, -1))
    with pytest.raises(IndexError, match="out of range"):
        xp.expand_dims(x, axis=5)
    check(xp.flip(x), np.flip(a))
    check(xp.flip(x, axis=(0, 2)), np.flip(a, (0, 2)))
    check(xp.moveaxis(x, 0, -1), np.moveaxis(a, 0, -1))
    check(xp.permute_dims(x, (2, 0, 1)), np.transpose(a, (2, 0, 1)))
    check(xp.reshape(x, (4, -1)), a.reshape(4, -1))
    check(xp.roll(x, 2), np.roll(a, 2))
    check(xp.roll(x, (1, -1), axis=(0, 2)), np.roll(a, (1, -1), axis=(0, 2)))
    check(xp.squeeze(tensor(a[:1, :, :1], device), axis=(0, 2)), a[0, :, 0])
    with pytest.raises(ValueError, match="not of size 1"):
        xp.squeeze(x, axis=1)
    check(xp.tile(x, (2, 1)), np.tile(a, (2, 1)))
    check(xp.tile(tensor(a[0, 0], device), (2, 1, 2)), np.tile(a[0, 0], (2, 1, 2)))
    check(xp.repeat(x, 2, axis=1), np.repeat(a, 2, axis=1))
    check(xp.repeat(x, 3), np.repeat(a, 3))
    check(xp.repeat(x, tensor(np.array([0, 2, 1]), device), axis=1), np.repeat(a, [0, 2, 1], axis=1))
    for part, expected in zip(xp.unstack(x, axis=1), [a[:, i] for i in range(3)]):
        check(part, expected)
    shapes = [r.shape for r in xp.broadcast_arrays(tensor(a[:, :1], device), tensor(a[0], device))]
    assert shapes == [(2, 3, 4), (2, 3, 4)]
    check(xp.broadcast_to(tensor(a[0, 0], device), (2, 4)), np.broadcast_to(a[0, 0], (2, 4)))


# ---- searching, sorting, sets --------------------------------------------------------------------

def test_searching_functions_match_numpy(device):
    a = np.array([[3.0, -1.0, 7.0, 7.0], [0.0, 0.0, -2.0, 5.0]], np.float32)
    x = tensor(a, device)
    check(xp.argmax(x, axis=1), np.argmax(a, axis=1))
    check(xp.argmin(x, axis=0, keepdims=True), np.argmin(a, axis=0)[None])
    check(xp.argmax(x), np.argmax(a))
    check(xp.count_nonzero(x), np.count_nonzero(a))
    check(xp.count_nonzero(x, axis=1, keepdims=True), np.count_nonzero(a, axis=1, keepdims=True))
    for found, expected in zip(xp.nonzero(x), np.nonzero(a)):
        check(found, expected)
    with pytest.raises(ValueError, match="0-d"):
        xp.nonzero(tensor(np.float32(1.0), device))
    check(xp.where(x > 0, x, tensor(np.float32(-9.0), device)), np.where(a > 0, a, -9.0))


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_matches_numpy_with_ties_and_nan(device, side):
    table = np.array([-1.0, 2.0, 2.0, 2.0, 5.0, np.nan], np.float32)
    values = np.array([[2.0, -3.0], [9.0, np.nan], [5.0, -1.0]], np.float32)
    check(xp.searchsorted(tensor(table, device), tensor(values, device), side=side),
          np.searchsorted(table, values, side=side))
    order = np.array([3, 0, 5, 1, 4, 2])
    shuffled = np.empty_like(table)
    shuffled[order] = table
    check(xp.searchsorted(tensor(shuffled, device), tensor(values, device), side=side, sorter=tensor(order, device)),
          np.searchsorted(shuffled, values, side=side, sorter=order))


def test_sort_and_argsort_are_stable_both_ways(device):
    a = np.array([[3, 1, 3, 2, 1], [0, -5, 4, 4, 9]], np.int32)
    check(xp.sort(tensor(a, device)), np.sort(a, kind="stable"))
    check(xp.argsort(tensor(a, device), axis=1), np.argsort(a, axis=1, kind="stable"))
    check(xp.sort(tensor(a, device), axis=0, descending=True), -np.sort(-a, axis=0, kind="stable"))
    # descending keeps equal values in their order: 3 at 0 before 3 at 2
    check(xp.argsort(tensor(a, device), descending=True), np.array([[0, 2, 3, 1, 4], [4, 2, 3, 0, 1]]))


def test_unique_functions_match_numpy_with_each_nan_its_own_value(device):
    a = np.array([[3.0, np.nan, 1.0], [3.0, np.nan, -0.5]], np.float32)
    values, indices, inverse, counts = np.unique(a.ravel(), return_index=True, return_inverse=True, return_counts=True,
                                                 equal_nan=False)
    result = xp.unique_all(tensor(a, device))
    check(result.values, values)
    check(result.indices, indices)
    check(result.inverse_indices, inverse.reshape(a.shape))
    check(result.counts, counts)
    assert result.values.device == device and xp.unique_counts(tensor(a, device)).counts.numpy().tolist() == [1, 1, 2, 1, 1]
    check(xp.unique_inverse(tensor(a, device)).inverse_indices, inverse.reshape(a.shape))
    check(xp.unique_values(tensor(np.array([2, 2, 0], np.int8), device)), np.array([0, 2], np.int8))
    check(xp.unique_values(tensor(np.zeros(0, np.float32), device)), np.zeros(0, np.float32))


# ---- statistics and utilities ----------------------------------------------------------------

@pytest.mark.parametrize("axis", [None, 1, (0, 2), -1])
def test_statistical_functions_match_numpy(device, axis):
    a = small_sample(F32, (2, 3, 4))
    x = tensor(a, device)
    for name, reference in (("max", np.max), ("min", np.min), ("mean", np.mean), ("sum", np.sum), ("prod", np.prod)):
        for keepdims in (False, True):
            check(getattr(xp, name)(x, axis=axis, keepdims=keepdims), reference(a, axis=axis, keepdims=keepdims),
                  rtol=1e-5, atol=1e-5)
    for name, reference in (("std", np.std), ("var", np.var)):
        for correction in (0.0, 1.0):
            check(getattr(xp, name)(x, axis=axis, correction=correction), reference(a, axis=axis, ddof=correction),
                  rtol=1e-5, atol=1e-5)
    check(xp.all(x > -100, axis=axis), np.all(a > -100, axis=axis))
    check(xp.any(x > 8, axis=axis, keepdims=True), np.any(a > 8, axis=axis, keepdims=True))


def test_integer_sums_widen_to_the_default_integer_and_keep_a_given_dtype(device):
    a = np.array([100, 100, 100], np.int8)
    assert xp.sum(tensor(a, device)).dtype == I64
    check(xp.sum(tensor(a, device)), np.int64(300))
    check(xp.sum(tensor(a, device), dtype=F64), np.float64(300))
    check(xp.prod(tensor(a, device), dtype=I64), np.int64(1000000))


def test_cumulative_sum_with_and_without_its_initial_zero(device):
    a = small_sample(I32, (2, 3))
    check(xp.cumulative_sum(tensor(a, device), axis=1), np.cumsum(a, axis=1))
    check(xp.cumulative_sum(tensor(a, device), axis=0, include_initial=True),
          np.concatenate([np.zeros((1, 3), np.int64), np.cumsum(a, axis=0)]))
    check(xp.cumulative_sum(tensor(a[0], device), dtype=F64), np.cumsum(a[0]).astype(np.float64))
    with pytest.raises(ValueError, match="axis is required"):
        xp.cumulative_sum(tensor(a, device))


def test_zero_d_and_empty_arrays(device):
    scalar = tensor(np.float32(2.5), device)
    check(xp.sum(scalar), np.float32(2.5))
    check(xp.exp(scalar), np.exp(np.float32(2.5)), rtol=1e-6)
    empty = tensor(np.zeros((0, 3), np.float32), device)
    check(xp.sum(empty, axis=0), np.zeros(3, np.float32))
    check(xp.max(tensor(np.zeros((2, 0), np.float32), device), axis=0), np.zeros(0, np.float32))
    check(xp.concat([empty, empty]), np.zeros((0, 3), np.float32))
    check(xp.sort(empty, axis=0), np.zeros((0, 3), np.float32))


def test_the_python_conversions_the_standard_asks_of_arrays():
    assert int(Tensor([7])) == 7 and float(Tensor(2.5)) == 2.5 and bool(Tensor([True]))
    assert list(range(Tensor(3, dtype=I32))) == [0, 1, 2] and +Tensor([1.0]) is not None
    with pytest.raises(TypeError, match="integer tensor"):
        range(Tensor(3.0))
    moved = Tensor([1.0, 2.0]).to_device("NPY")
    assert moved.device == "NPY" and moved.numpy().tolist() == [1.0, 2.0]


def test_the_linalg_extension_matches_numpy(device):
    a = small_sample(F32, (4, 3))
    x = tensor(a, device)
    check(xp.linalg.cross(x, tensor(a[::-1].copy(), device)), np.cross(a, a[::-1]))
    check(xp.linalg.cross(tensor(a.T.copy(), device), tensor(a[0][:, None], device), axis=0), np.cross(a.T, a[0][:, None], axis=0))
    with pytest.raises(ValueError, match="size 3"):
        xp.linalg.cross(tensor(a.T.copy(), device), tensor(a.T.copy(), device))
    for ord in (2, 1, 0, 3, np.inf, -np.inf):
        check(xp.linalg.vector_norm(x, axis=1, ord=ord), np.linalg.norm(a, ord=ord, axis=1), rtol=1e-5, atol=1e-6)
    check(xp.linalg.vector_norm(x, keepdims=True), np.linalg.norm(a.ravel()).reshape(1, 1), rtol=1e-5)
    square = small_sample(F32, (2, 3, 3), seed=4)
    check(xp.linalg.trace(tensor(square, device), offset=1), np.trace(square, offset=1, axis1=-2, axis2=-1))
    check(xp.linalg.diagonal(tensor(square, device), offset=-1), np.diagonal(square, offset=-1, axis1=-2, axis2=-1))
    check(xp.linalg.outer(tensor(a[0], device), tensor(a[1], device)), np.outer(a[0], a[1]))
    assert xp.linalg.matmul is xp.matmul and xp.linalg.vecdot is xp.vecdot


SCIKIT_LEARN_FIT = """
import numpy as np, sklearn
import sklearn.base
from sklearn.decomposition import PCA
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler, StandardScaler
import lazygrad.array_api as xp
from lazygrad import Tensor
values = np.random.default_rng(0).standard_normal((40, 3)).astype(np.float32) * 5 + 1
with sklearn.config_context(array_api_dispatch=True):
    for estimator in (StandardScaler(), MinMaxScaler(), MaxAbsScaler()):
        scaled = estimator.fit_transform(xp.asarray(values))
        assert isinstance(scaled, Tensor), type(scaled)
        expected = type(estimator)().fit_transform(values)
        np.testing.assert_allclose(scaled.numpy(), expected, rtol=1e-5, atol=1e-5)
    labels = (values[:, 0] > 1).astype(np.int64)
    for estimator, arguments in ((PCA(n_components=2, svd_solver="full"), (values,)),
                                 (LinearDiscriminantAnalysis(), (values, labels))):
        projected = estimator.fit(*[xp.asarray(a) for a in arguments]).transform(xp.asarray(values))
        assert isinstance(projected, Tensor), type(projected)
        expected = sklearn.base.clone(estimator).fit(*arguments).transform(values)
        np.testing.assert_allclose(np.abs(projected.numpy()), np.abs(expected), rtol=1e-3, atol=1e-3)  # signs may flip
print("fitted")
"""


def test_scikit_learn_estimators_fit_on_lazygrad_arrays():
    """scikit-learn's array API dispatch finds lazygrad's namespace (through array-api-compat) and
    fits its scalers, PCA and linear discriminant analysis on Tensors, giving Tensors with numpy's results. A process of its own: scipy
    reads SCIPY_ARRAY_API when it is first imported."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    for package in ("sklearn", "array_api_compat"):
        pytest.importorskip(package, reason=f"{package} is not installed (pip install lazygrad[test] installs it)")
    repository = str(Path(__file__).resolve().parents[2])
    environment = {**os.environ, "SCIPY_ARRAY_API": "1", "PYTHONPATH": repository}
    result = subprocess.run([sys.executable, "-c", SCIKIT_LEARN_FIT], capture_output=True, text=True, env=environment,
                            timeout=300)
    assert result.returncode == 0 and "fitted" in result.stdout, result.stderr[-3000:]


def test_the_linalg_factorizations_match_numpy(device):
    rng = np.random.default_rng(11)
    a = rng.standard_normal((2, 4, 4)).astype(np.float32)
    spd = a @ np.swapaxes(a, -1, -2) + 4 * np.eye(4, dtype=np.float32)
    x, s = tensor(a, device), tensor(spd, device)
    check(xp.linalg.inv(x), np.linalg.inv(a), rtol=1e-3, atol=1e-4)
    check(xp.linalg.det(x), np.linalg.det(a), rtol=1e-4, atol=1e-5)
    sign, logabsdet = xp.linalg.slogdet(x)
    check(sign, np.linalg.slogdet(a)[0])
    check(logabsdet, np.linalg.slogdet(a)[1], rtol=1e-4, atol=1e-5)
    check(xp.linalg.cholesky(s), np.linalg.cholesky(spd), rtol=1e-5, atol=1e-5)
    check(xp.linalg.cholesky(s, upper=True), np.swapaxes(np.linalg.cholesky(spd), -1, -2), rtol=1e-5, atol=1e-5)
    vector = rng.standard_normal(4).astype(np.float32)
    check(xp.linalg.solve(x, tensor(vector, device)), np.linalg.solve(a, vector[:, None])[..., 0], rtol=1e-3, atol=1e-4)
    check(xp.linalg.solve(x, x), np.broadcast_to(np.eye(4, dtype=np.float32), a.shape), rtol=1e-4, atol=1e-4)
    q, r = xp.linalg.qr(x)
    check(xp.matmul(q, r), a, rtol=1e-4, atol=1e-5)
    u, values, vh = xp.linalg.svd(x, full_matrices=False)
    check(values, np.linalg.svd(a, compute_uv=False), rtol=1e-5, atol=1e-5)
    check(xp.matmul(u * xp.expand_dims(values, axis=-2), vh), a, rtol=1e-4, atol=1e-4)
    check(xp.linalg.svdvals(x), np.linalg.svd(a, compute_uv=False), rtol=1e-5, atol=1e-5)
    eigenvalues, eigenvectors = xp.linalg.eigh(s)
    check(eigenvalues, np.linalg.eigvalsh(spd), rtol=1e-4, atol=1e-4)
    check(xp.matmul(s, eigenvectors), (eigenvectors * xp.expand_dims(eigenvalues, axis=-2)).numpy(), rtol=1e-4, atol=1e-3)
    check(xp.linalg.eigvalsh(s), np.linalg.eigvalsh(spd), rtol=1e-4, atol=1e-4)
    check(xp.linalg.pinv(x), np.linalg.pinv(a), rtol=1e-3, atol=1e-3)
    low_rank = np.stack([np.outer(vector, vector), a[0]]).astype(np.float32)
    check(xp.linalg.matrix_rank(tensor(low_rank, device)), np.linalg.matrix_rank(low_rank))
    for power in (0, 1, 3, -2):
        check(xp.linalg.matrix_power(x, power), np.linalg.matrix_power(a, power), rtol=1e-3, atol=1e-3)
    for order in ("fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
        check(xp.linalg.matrix_norm(x, ord=order), np.linalg.norm(a, ord=order, axis=(-2, -1)), rtol=1e-4, atol=1e-5)
    assert xp.linalg.matrix_norm(x, keepdims=True).shape == (2, 1, 1)
    single = tensor(a[0], device)  # one matrix: 0-d results
    check(xp.linalg.det(single), np.linalg.det(a[0]), rtol=1e-4, atol=1e-5)
    assert xp.linalg.slogdet(single).sign.shape == ()


def test_a_host_factorization_without_a_gradient_refuses_an_input_that_wants_one():
    from lazygrad import no_grad
    x = Tensor(np.eye(3, dtype=np.float32) * 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="no gradient"):
        xp.linalg.matrix_rank(x)
    with no_grad():
        check(xp.linalg.pinv(x), (np.eye(3) / 2).astype(np.float32))
    wide = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(RuntimeError, match="as many columns in Q as in A"):
        xp.linalg.qr(wide)
    with pytest.raises(RuntimeError, match="as many columns in Q as in A"):
        xp.linalg.qr(Tensor(np.ones((3, 2), np.float32), requires_grad=True), mode="complete")
    with no_grad():
        assert xp.linalg.qr(wide).R.shape == (2, 3)
    with pytest.raises(TypeError, match="floating-point"):
        xp.linalg.det(Tensor(np.eye(2, dtype=np.int32)))


def test_svd_qr_and_pinv_have_gradients(device):
    """Against float64 finite differences, tall, wide and batched: pinv; svd's S, and its U and Vh
    through functions their signs do not change (U S Vh, squares); qr's Q and R (tall and square)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from gradcheck import check_gradients
    rng = np.random.default_rng(3)
    for shape in ((4, 3), (3, 4), (2, 3, 3)):
        a = rng.standard_normal(shape)
        k = min(shape[-2:])
        weights = xp.asarray(rng.standard_normal(shape), device=device)
        transposed = xp.asarray(rng.standard_normal(shape[:-2] + shape[::-1][:2]), device=device)
        check_gradients(lambda x: (xp.linalg.pinv(x) * transposed).sum(), a, device=device)
        for full in (False, True):
            def of_svd(x):
                u, s, vh = xp.linalg.svd(x, full_matrices=full)
                u, vh = u[..., :, :k], vh[..., :k, :]
                rebuilt = ((u * s[..., None, :]) @ vh * weights).sum()
                return rebuilt + (s * s).sum() + (u[..., :1, :] ** 2).sum() * 3 + (vh[..., :, :1] ** 2).sum() * 5
            check_gradients(of_svd, a, device=device)
        if shape[-2] >= shape[-1]:
            r_weights = xp.asarray(rng.standard_normal(shape[:-2] + (k, k)), device=device)
            check_gradients(lambda x: (xp.linalg.qr(x).Q * weights).sum() + (xp.linalg.qr(x).R * r_weights).sum(),
                            a, device=device)


def test_svd_qr_and_pinv_gradients_are_pytorchs():
    torch = pytest.importorskip("torch", reason="torch is not installed (the bench extra)")
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 5, 3))
    w_q, w_r, w_p = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 3, 3)), rng.standard_normal((2, 3, 5))
    cases = [
        (lambda x: (xp.linalg.qr(x).Q * Tensor(w_q)).sum() + (xp.linalg.qr(x).R * Tensor(w_r)).sum(),
         lambda t: (torch.linalg.qr(t).Q * torch.tensor(w_q)).sum() + (torch.linalg.qr(t).R * torch.tensor(w_r)).sum()),
        (lambda x: (xp.linalg.pinv(x) * Tensor(w_p)).sum(), lambda t: (torch.linalg.pinv(t) * torch.tensor(w_p)).sum()),
        (lambda x: (xp.linalg.svd(x, full_matrices=False).U ** 2 * Tensor(w_q)).sum() + xp.linalg.svd(x, full_matrices=False).S.sum(),
         lambda t: (torch.linalg.svd(t, full_matrices=False).U ** 2 * torch.tensor(w_q)).sum() + torch.linalg.svd(t, full_matrices=False).S.sum()),
    ]
    for ours, theirs in cases:
        x = Tensor(a, requires_grad=True)
        ours(x).backward()
        t = torch.tensor(a, requires_grad=True)
        theirs(t).backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_inv_det_slogdet_and_solve_have_gradients(device):
    """Against float64 finite differences: inv, det, slogdet's logabsdet and solve (a stack of
    right-hand sides and one vector), batched."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from gradcheck import check_gradients
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 3)) + 3 * np.eye(3)
    b, v = rng.standard_normal((2, 3, 2)), rng.standard_normal(3)
    weights = xp.asarray(np.arange(18.0).reshape(2, 3, 3), device=device)
    check_gradients(lambda x: (xp.linalg.inv(x) * weights).sum(), a, device=device)
    check_gradients(lambda x: (xp.linalg.det(x) * xp.asarray(np.array([1.0, -2.0]), device=device)).sum(), a,
                    device=device)
    check_gradients(lambda x: xp.linalg.slogdet(x).logabsdet.sum(), a, device=device)
    check_gradients(lambda x, y: (xp.linalg.solve(x, y) ** 2).sum(), a, b, device=device)
    check_gradients(lambda x, y: (xp.linalg.solve(x, y) ** 2).sum(), a[0], v, device=device)


def test_cholesky_and_eigh_have_gradients(device):
    """Against float64 finite differences of functions of a symmetrized input (both take A as
    symmetric, as PyTorch does): cholesky's lower and upper factors, eigvalsh, and eigh's eigenvalues
    and eigenvectors (squared, so their signs do not matter)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from gradcheck import check_gradients
    a = np.random.default_rng(1).standard_normal((2, 3, 3))
    weights = xp.asarray(np.arange(18.0).reshape(2, 3, 3), device=device)

    def symmetric(x):
        return (x + x.mT) * 0.5

    def positive_definite(x):
        return symmetric(x) + xp.asarray(3 * np.eye(3), device=device)
    check_gradients(lambda x: (xp.linalg.cholesky(positive_definite(x)) * weights).sum(), a, device=device)
    check_gradients(lambda x: (xp.linalg.cholesky(positive_definite(x), upper=True) * weights).sum(), a, device=device)
    check_gradients(lambda x: (xp.linalg.eigvalsh(symmetric(x)) * xp.asarray(np.array([1.0, 2.0, 3.0]),
                                                                               device=device)).sum(), a, device=device)
    check_gradients(lambda x: ((xp.linalg.eigh(symmetric(x)).eigenvectors ** 2) * weights).sum()
                    + xp.linalg.eigh(symmetric(x)).eigenvalues.sum(), a, device=device)


def test_svdvals_has_a_gradient(device):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from gradcheck import check_gradients
    for shape in ((2, 3, 4), (4, 3)):  # wide and tall
        a = np.random.default_rng(2).standard_normal(shape)
        scale = xp.asarray(np.array([1.0, -2.0, 0.5]), device=device)
        check_gradients(lambda x: (xp.linalg.svdvals(x) * scale).sum(), a, device=device)


def test_complex_dtypes_in_the_namespace(device):
    assert xp.asarray(0j).dtype == xp.complex64 and xp.asarray(np.complex128(1j)).dtype == xp.complex128
    assert xp.__array_namespace_info__().default_dtypes()["complex floating"] == xp.complex64
    assert xp.isdtype(xp.complex128, "complex floating") and not xp.isdtype(xp.complex64, "real floating")
    assert xp.result_type(xp.float64, 1j) == xp.complex128 and xp.result_type(xp.complex64, xp.float64) == xp.complex128
    assert xp.can_cast(xp.float32, xp.complex64) and not xp.can_cast(xp.complex64, xp.float64)
    assert not xp.can_cast(xp.uint64, xp.int8)  # no dtype holds both
    assert xp.finfo(xp.complex64).dtype == xp.float32 and xp.finfo(xp.complex128).eps == np.finfo(np.float64).eps
    z = np.array([[1 + 1j, 2], [0.5j, 3 - 1j]], np.complex128)
    a = xp.asarray(z, device=device)
    with pytest.raises(TypeError, match="astype: casting a complex128 array to float64 is not permitted"):
        xp.astype(a, xp.float64)
    np.testing.assert_allclose(xp.real(a).numpy(), z.real)
    np.testing.assert_allclose(xp.imag(a).numpy(), z.imag)
    np.testing.assert_allclose(xp.vecdot(a, a).numpy(), np.vecdot(z, z), rtol=1e-12)  # conjugates x1
    np.testing.assert_allclose(xp.linspace(0, 1 + 2j, 5, device=device).numpy(), np.linspace(0, 1 + 2j, 5), rtol=1e-6)
    np.testing.assert_allclose(xp.linalg.inv(a).numpy(), np.linalg.inv(z), rtol=1e-12)
    np.testing.assert_allclose(xp.linalg.matrix_norm(a).numpy(), np.linalg.norm(z), rtol=1e-12)
    values = xp.linalg.svdvals(a)
    assert values.dtype == xp.float64  # real singular values of a complex matrix
    np.testing.assert_allclose(values.numpy(), np.linalg.svd(z, compute_uv=False), rtol=1e-12)
    np.testing.assert_allclose(xp.sign(a).numpy(), z / np.abs(z), rtol=1e-12)


def test_eye_with_a_diagonal_past_the_matrix(device):
    assert not xp.eye(3, 2, k=2 ** 63 - 1, device=device).numpy().any()
    assert not xp.eye(2, k=-(2 ** 63), device=device).numpy().any()


def test_vecdot_does_not_broadcast_its_axis_and_keeps_the_dtype():
    with pytest.raises(ValueError, match="sizes along axis -1 differ"):
        xp.vecdot(xp.asarray([1.0]), xp.asarray([1.0, 2.0]))
    assert xp.vecdot(xp.asarray([1, 2], dtype=xp.uint8), xp.asarray([3, 4], dtype=xp.uint8)).dtype == xp.uint8
