"""sort, argsort and topk against numpy's stable sort, on every device: NaN the largest value, ties in
their original order, every dtype, any dim, non-contiguous input, 0-d and empty tensors, and the
values' gradient going back to where each value came from."""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor, dtypes
from ops_helpers import check, small_sample, tensor

F32, F64, I32, U8, BOOL, I64 = dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint8, dtypes.bool, dtypes.int64


def np_order(a, axis, descending):
    """numpy's stable order, descending with ties still in their original order and NaN first."""
    if not descending:
        return np.argsort(a, axis=axis, kind="stable")
    if a.dtype == np.bool_:
        key = ~a
    elif a.dtype.kind == "f":
        key = np.where(np.isnan(a), -np.inf, -a)
        key = np.where(np.isnan(a), np.nan, key)  # NaN sorts last in numpy: keep it, then move it first below
        order = np.argsort(key, axis=axis, kind="stable")
        nan_first = np.argsort(~np.isnan(np.take_along_axis(a, order, axis)), axis=axis, kind="stable")
        return np.take_along_axis(order, nan_first, axis)
    else:
        key = -a.astype(np.int64)
    return np.argsort(key, axis=axis, kind="stable")


def sample_with_ties(dtype, shape=(3, 4, 5), seed=0):
    a = small_sample(dtype, shape=shape, low=-3, high=4, seed=seed)
    if dtype.is_float:
        a = a.copy()
        a.flat[[1, 7, 22]] = [np.nan, np.inf, -np.inf]
        a.flat[9] = -0.0
    return a


def check_sorted(a, dtype, dim, descending, device):
    order = np_order(a, dim, descending)
    values, indices = tensor(a, device).sort(dim, descending=descending)
    check(values, np.take_along_axis(a, order, dim), dtype)
    check(indices, order, I64)
    check(tensor(a, device).argsort(dim, descending), order, I64)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_and_argsort_match_a_stable_sort(dim, device):
    for descending in (False, True):
        check_sorted(sample_with_ties(F32), F32, dim, descending, device)


@pytest.mark.parametrize("dtype", [F64, I32, U8, BOOL], ids=["float64", "int32", "uint8", "bool"])
def test_sort_every_dtype(dtype, device):
    for descending in (False, True):
        check_sorted(sample_with_ties(dtype), dtype, -1, descending, device)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_gives_the_first_k_of_the_order(largest, device):
    a = sample_with_ties(F32)
    for k, dim in ((1, -1), (3, -1), (5, -1), (2, 0)):
        order = np.take(np_order(a, dim, largest), range(k), axis=dim)
        values, indices = tensor(a, device).topk(k, dim=dim, largest=largest)
        check(values, np.take_along_axis(a, order, dim), F32)
        check(indices, order, I64)


def test_sorting_non_contiguous_0d_and_empty(device):
    a = sample_with_ties(F32, shape=(4, 6), seed=3)
    view = a.T[::2]
    check(tensor(a, device).T[::2].sort(1).values, np.sort(view, axis=1, kind="stable"), F32)
    scalar = tensor(np.array(2.5, np.float32), device)
    values, indices = scalar.sort()
    check(values, np.array(2.5, np.float32), F32)
    check(indices, np.array(0), I64)
    check(scalar.topk(1).values, np.array(2.5, np.float32), F32)
    empty = tensor(np.zeros((3, 0), np.float32), device)
    check(empty.sort(1).values, np.zeros((3, 0), np.float32), F32)
    check(empty.argsort(1), np.zeros((3, 0), np.int64), I64)
    check(tensor(a, device).topk(0, dim=0).indices, np.zeros((0, 6), np.int64), I64)


def test_topk_checks_k(device):
    x = tensor(np.zeros((2, 3), np.float32), device)
    with pytest.raises(ValueError, match="k=4 is out of range"):
        x.topk(4)
    with pytest.raises(TypeError, match="k must be an int"):
        x.topk(1.5)


@pytest.mark.parametrize("name", ["sort", "topk"])
def test_the_sorted_values_gradient_goes_back_to_their_elements(name, device):
    a = np.array([[0.5, -1.0, 0.5, 2.0], [3.0, 3.0, -2.0, 1.0]])
    x = Tensor(a, device=device, requires_grad=True)
    values, indices = x.sort(1, descending=True) if name == "sort" else x.topk(2, dim=1)
    weights = np.arange(1.0, 1.0 + values.shape[1])
    (values * Tensor(weights, device=device)).sum().backward()
    expected = np.zeros_like(a)
    for row in range(2):
        expected[row, indices.numpy()[row]] = weights
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def np_lower_median(a, axis):
    """PyTorch's median along axis: the lower middle of the stable order, or the first NaN."""
    order = np.argsort(a, axis=axis, kind="stable")
    n = a.shape[axis]
    nans = np.isnan(a).sum(axis=axis, keepdims=True) if a.dtype.kind == "f" else np.zeros_like(np.take(a, [0], axis))
    rank = np.where(nans > 0, n - nans, (n - 1) // 2).astype(np.int64)
    index = np.take_along_axis(order, rank, axis)
    return np.take_along_axis(a, index, axis), index


@pytest.mark.parametrize("dtype", [F32, I32], ids=["float32", "int32"])
def test_median_and_kthvalue(dtype, device):
    a = sample_with_ties(dtype, shape=(4, 6), seed=5)  # float32: a NaN in row 0, infinities in row 1
    for dim, keepdim in ((1, False), (0, True)):
        values, indices = tensor(a, device).median(dim, keepdim)
        expected_values, expected_indices = np_lower_median(a, dim)
        check(values, expected_values if keepdim else expected_values.squeeze(dim), dtype)
        check(indices, expected_indices if keepdim else expected_indices.squeeze(dim), I64)
    flat = np.sort(a.reshape(-1), kind="stable")
    expected = flat[-np.isnan(flat).sum()] if np.isnan(flat).any() else flat[(flat.size - 1) // 2]
    check(tensor(a, device).median(), np.array(expected, dtype.np), dtype)
    order = np.argsort(a, axis=1, kind="stable")
    values, indices = tensor(a, device).kthvalue(3, 1)
    check(values, np.take_along_axis(a, order[:, 2:3], 1)[:, 0], dtype)
    check(indices, order[:, 2], I64)
    with pytest.raises(ValueError, match="k must be an int from 1 to 6"):
        tensor(a, device).kthvalue(7, 1)


# ---- cummax, cummin, mode -------------------------------------------------------------------------------

def np_running_extreme(a, axis, largest):
    """PyTorch's cummax (cummin) in numpy: the running extreme along axis, NaN propagating, and the
    index of the last element so far equal to it (of the latest NaN once there is one)."""
    def nan(value):
        return a.dtype.kind == "f" and np.isnan(value)
    moved = np.moveaxis(a, axis, -1)
    values, indices = np.empty_like(moved), np.zeros(moved.shape, np.int64)
    for row in np.ndindex(moved.shape[:-1]):
        best, at = moved[row][0], 0
        for i, value in enumerate(moved[row]):
            if nan(value) or (not nan(best) and (value >= best if largest else value <= best)):
                best, at = value, i
            values[row + (i,)], indices[row + (i,)] = best, at
    return np.moveaxis(values, -1, axis), np.moveaxis(indices, -1, axis)


@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("dtype", [F32, I32, U8, BOOL], ids=["float32", "int32", "uint8", "bool"])
def test_cummax_and_cummin_return_values_and_the_index_of_the_last_equal_element(name, dtype, device):
    a = sample_with_ties(dtype, shape=(3, 4, 5), seed=7)  # float32: a NaN, infinities, -0.0
    for dim in (0, 2, -2):
        values, indices = getattr(tensor(a, device), name)(dim)
        expected_values, expected_indices = np_running_extreme(a, dim, name == "cummax")
        check(values, expected_values, dtype)
        check(indices, expected_indices, I64)
    values, indices = getattr(tensor(a, device).transpose(0, 2), name)(dim=1)  # non-contiguous
    expected_values, expected_indices = np_running_extreme(a.transpose(2, 1, 0), 1, name == "cummax")
    check(values, expected_values, dtype)
    check(indices, expected_indices, I64)


def test_cummax_edge_cases_and_gradient(device):
    check(Tensor(2.5, device=device).cummax(0).indices, np.array(0, np.int64), I64)
    check(Tensor(2.5, device=device).cummin(0).values, np.array(2.5, np.float32), F32)
    empty = tensor(np.zeros((0, 3), np.float32), device)
    assert empty.cummax(0).values.shape == (0, 3) and empty.cummin(1).indices.shape == (0, 3)
    with pytest.raises(IndexError, match="range"):
        tensor(np.zeros((2, 3), np.float32), device).cummin(2)
    # the values' gradient goes to the element each index names (PyTorch), ties included
    a = np.array([[1.0, 3.0, 3.0, 2.0], [4.0, -1.0, 4.0, 5.0]])
    x = Tensor(a, device=device, requires_grad=True)
    values, indices = x.cummax(1)
    weights = np.array([1.0, 10.0, 100.0, 1000.0])
    (values * Tensor(weights, device=device)).sum().backward()
    expected = np.zeros_like(a)
    for row in range(2):
        np.add.at(expected[row], indices.numpy()[row], weights)
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    np.testing.assert_array_equal(indices.numpy(), [[0, 1, 2, 2], [0, 0, 2, 3]])


def np_mode(a, axis):
    """PyTorch's mode in numpy: the most frequent value along axis, of several the smallest (NaN
    largest, NaNs equal to each other), and the index of its last occurrence."""
    moved = np.moveaxis(a, axis, -1)
    values, indices = np.empty(moved.shape[:-1], a.dtype), np.zeros(moved.shape[:-1], np.int64)
    for row in np.ndindex(moved.shape[:-1]):
        line = list(moved[row])
        def same(u, v):
            return u == v or (a.dtype.kind == "f" and np.isnan(u) and np.isnan(v))
        counts = [sum(same(u, v) for v in line) for u in line]
        most = [i for i, count in enumerate(counts) if count == max(counts)]
        key = lambda i: (1, 0) if a.dtype.kind == "f" and np.isnan(line[i]) else (0, line[i])  # noqa: E731
        smallest = min(key(i) for i in most)
        at = max(i for i in most if key(i) == smallest)
        values[row], indices[row] = line[at], at
    return values, indices


@pytest.mark.parametrize("dtype", [F32, I32, BOOL], ids=["float32", "int32", "bool"])
def test_mode(dtype, device):
    a = small_sample(dtype, shape=(4, 7), low=-2, high=3, seed=11)
    if dtype.is_float:
        a = a.copy()
        a[0, [1, 4]] = np.nan  # two NaNs: as frequent as the other values there, and larger
    for dim, keepdim in ((1, False), (0, True), (-1, True)):
        values, indices = tensor(a, device).mode(dim, keepdim)
        expected_values, expected_indices = np_mode(a, dim)
        if keepdim:
            expected_values, expected_indices = np.expand_dims(expected_values, dim), np.expand_dims(expected_indices, dim)
        check(values, expected_values, dtype)
        check(indices, expected_indices, I64)
    values, indices = Tensor(3.0, device=device).mode()
    check(values, np.array(3.0, np.float32), F32)
    check(indices, np.array(0, np.int64), I64)
    with pytest.raises(ValueError, match="empty"):
        tensor(np.zeros((2, 0), np.float32), device).mode(1)


def test_mode_gradient_goes_to_the_last_occurrence(device):
    x = Tensor(np.array([3.0, 1.0, 3.0, 1.0, 2.0]), device=device, requires_grad=True)
    values, indices = x.mode()
    values.backward()
    assert indices.item() == 3
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0, 1.0, 0.0])


@pytest.mark.parametrize("name", ["cummax", "cummin", "mode"])
def test_running_extremes_and_mode_match_torch(name):
    torch = pytest.importorskip("torch")
    a = sample_with_ties(F32, shape=(3, 9), seed=3)
    ours = getattr(Tensor(a), name)(1)
    theirs = getattr(torch.from_numpy(a), name)(1)
    np.testing.assert_array_equal(ours.values.numpy(), theirs.values.numpy())
    if name != "mode" or not np.isnan(a).any():  # PyTorch's mode with NaNs is not documented
        np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy())
