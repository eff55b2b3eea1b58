"""Integer Tensor, list and boolean mask indices, gather, take, nonzero, masked_select, scatter, masked_fill,
tril/triu, one_hot and __setitem__ against numpy formulations of PyTorch's semantics, on every device.
"""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor, dtypes, no_grad
from ops_helpers import check, small_sample, tensor

I8, I32, I64, F32, BOOL = dtypes.int8, dtypes.int32, dtypes.int64, dtypes.float32, dtypes.bool

A4 = np.arange(360, dtype=np.float32).reshape(3, 4, 5, 6) - 180
ROWS = np.array([[0, 2], [-1, 1]])   # (2, 2), a negative index counts from the end
COLUMNS = np.array([3, -5])          # (2,), broadcasts against ROWS


def idx(array, device):
    return tensor(np.asarray(array, np.int64), device)


# (name, build from (x, index maker), numpy expectation)
INDEXING = {
    "one": (lambda x, i: x[i(ROWS)], A4[ROWS]),
    "one-later-dim": (lambda x, i: x[:, i(ROWS)], A4[:, ROWS]),
    "adjacent-pair": (lambda x, i: x[:, i(ROWS), i(COLUMNS)], A4[:, ROWS, COLUMNS]),
    "separated-pair": (lambda x, i: x[i(ROWS), :, i(COLUMNS)], A4[ROWS, :, COLUMNS]),  # broadcast dims first
    "with-slices-none-ellipsis": (lambda x, i: x[None, 1, ..., i(COLUMNS), ::-2], A4[None, 1][..., COLUMNS, ::-2]),
    # PyTorch applies an int first: x[0, :, t] is x[0][:, t] (numpy would move t's dims to the front)
    "int-then-separated": (lambda x, i: x[0, :, i(ROWS)], A4[0][:, ROWS]),
    "0d-index": (lambda x, i: x[:, idx(np.array(2), x.device)], A4[:, 2]),
    "three": (lambda x, i: x[i(ROWS), i(COLUMNS) % 3, i([[1], [0]])], A4[ROWS, COLUMNS % 3, [[1], [0]]]),
}


@pytest.mark.parametrize("name", list(INDEXING))
def test_getitem_with_integer_tensors(name, device):
    build, expected = INDEXING[name]
    check(build(tensor(A4, device), lambda a: idx(a, device)), expected, F32)


def test_getitem_tensor_index_dtypes_and_sources(device):
    a = small_sample(I8, shape=(4, 6))
    index = tensor(np.array([3, 0, 3], np.int32), device)
    check(tensor(a, device)[index], a[[3, 0, 3]], I8)
    check(tensor(a, device).T[index], a.T[[3, 0, 3]], I8)  # non-contiguous source
    b = small_sample(BOOL, shape=(4, 6))
    check(tensor(b, device)[:, index], b[:, [3, 0, 3]], BOOL)
    check(tensor(a, device)[tensor(np.zeros((0,), np.int64), device)], a[[]], I8)
    check(tensor(a, device)[tensor(np.array([7, -9]), device)], np.zeros((2, 6), np.int8), I8)  # unchecked: reads 0


def test_getitem_tensor_index_errors(device):
    x = tensor(A4, device)
    with pytest.raises(IndexError, match="float32"):
        x[tensor(np.array([0.0, 1.0], np.float32), device)]
    with pytest.raises(IndexError, match=r"mask of shape \(2,\) does not match"):
        x[tensor(np.array([True, False]), device)]
    with pytest.raises(IndexError, match=r"\(2,\).*\(3,\)"):
        x[idx([0, 1], device), idx([0, 1, 2], device)]


MASK = A4[:, :, 0, 0] > -100  # (3, 4): covers x's first two dims


@pytest.mark.parametrize("name, build, expected", [
    ("list", lambda x: x[[2, 0, -1]], A4[[2, 0, -1]]),
    ("lists-broadcast", lambda x: x[:, [[1], [3]], [0, 4]], A4[:, [[1], [3]], [0, 4]]),
    ("numpy-array", lambda x: x[np.array([1, 1])], A4[np.array([1, 1])]),
    ("bool-list", lambda x: x[:, [True, False, True, True]], A4[:, [True, False, True, True]]),
    ("mask-of-two-dims", lambda x: x[Tensor(MASK, device=x.device)], A4[MASK]),
    ("full-mask", lambda x: x[Tensor(A4 > 0, device=x.device)], A4[A4 > 0]),
    ("mask-after-slice", lambda x: x[1:, Tensor(A4[0, :, :, 0] > 0, device=x.device)], A4[1:, A4[0, :, :, 0] > 0]),
])
def test_getitem_with_lists_arrays_and_boolean_masks(name, build, expected, device):
    check(build(tensor(A4, device)), expected, F32)


def test_setitem_with_a_boolean_mask(device):
    x, expected = tensor(A4, device), A4.copy()
    x[Tensor(A4 > 100, device=device)] = 0.5
    expected[A4 > 100] = 0.5
    check(x, expected, F32)
    row_values = np.arange(30, dtype=np.float32).reshape(5, 6)
    x[Tensor(MASK, device=device)] = tensor(row_values, device)  # one (5, 6) value for every True position
    expected[MASK] = row_values
    check(x, expected, F32)


@pytest.mark.parametrize("index", [True, False, (True, 1), (slice(None), False), (Ellipsis, True, None, False),
                                   (0, None, True), (True, False), (None, True, True), (True, 0, True)], ids=str)
def test_getitem_with_a_boolean_scalar_adds_a_dim_of_one_or_none(index, device):
    """As numpy and PyTorch: the bools add one dim between them, in place when they are adjacent."""
    a = small_sample(F32, shape=(2, 3))
    check(tensor(a, device)[index], a[index], F32)
    if index is True or index is False:
        check(tensor(a, device)[tensor(np.array(index), device)], a[index], F32)  # a 0-d bool Tensor
    with pytest.raises(IndexError, match="boolean scalar"):
        tensor(a, device)[True, idx([0], device)]


@pytest.mark.parametrize("name, index, value", [
    ("rows", np.array([2, 0]), 5.0),
    ("repeated-rows-last-wins", np.array([1, 3, 1]), np.arange(18, dtype=np.float32).reshape(3, 6)),
    ("negative", np.array([-1]), np.arange(6, dtype=np.float32)),
    ("list", [0, 2], 1.5),
    ("columns", (slice(None), np.array([5, 0, 5])), np.array([7.0, 8.0, 9.0], np.float32)),
    ("2-d-index", np.array([[0, 1], [3, 3]]), -2.0),
    ("empty", np.zeros(0, np.int64), 3.0),
])
def test_setitem_with_an_integer_tensor_index(name, index, value, device):
    a = small_sample(F32, shape=(4, 6))
    x, expected = tensor(a, device), a.copy()
    expected[index] = value  # numpy: a repeated position takes the last value
    as_tensor = lambda i: idx(i, device) if isinstance(i, np.ndarray) else i  # noqa: E731
    key = tuple(as_tensor(i) for i in index) if isinstance(index, tuple) else as_tensor(index)
    x[key] = tensor(value, device) if isinstance(value, np.ndarray) else value
    check(x, expected, F32)


def test_take_nonzero_and_masked_select(device):
    a = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]], np.float32)
    x = tensor(a, device)
    check(x.take(idx([[0, 5], [-1, 1]], device)), a.reshape(-1)[[[0, 5], [-1, 1]]], F32)
    check(x.nonzero(), np.argwhere(a), I64)
    for got, want in zip(x.nonzero(as_tuple=True), np.nonzero(a)):
        check(got, want, I64)
    check(tensor(np.array(3.0, np.float32), device).nonzero(), np.zeros((1, 0), np.int64), I64)
    check(tensor(np.zeros((2, 0), np.float32), device).nonzero(), np.zeros((0, 2), np.int64), I64)
    mask = np.array([True, False, True])
    check(x.masked_select(tensor(mask, device)), a[np.broadcast_to(mask, a.shape)], F32)
    with pytest.raises(TypeError, match="bool Tensor"):
        x.masked_select(tensor(a, device))


def test_masked_select_and_mask_indexing_differentiate(device):
    a = np.array([[0.5, -1.0, 2.0], [3.0, 0.25, -2.0]])
    x = Tensor(a, device=device, requires_grad=True)
    (x.masked_select(Tensor(a > 0, device=device)) * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.where(a > 0, 2.0, 0.0))
    y = Tensor(a, device=device, requires_grad=True)
    y[Tensor(a < 1, device=device)].sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), (a < 1).astype(np.float64))


# ---- gather, scatter -----------------------------------------------------------------------------------

def np_gather(source, dim, index):
    out = np.empty(index.shape, source.dtype)
    for position in np.ndindex(index.shape):
        at = list(position)
        at[dim] = index[position]
        out[position] = source[tuple(at)]
    return out


def np_scatter(target, dim, index, src, reduce=None):
    out = target.copy()
    written = np.zeros(target.shape, bool)
    for position in np.ndindex(index.shape):
        at = list(position)
        at[dim] = index[position]
        at = tuple(at)
        value = src[position] if isinstance(src, np.ndarray) else src
        if reduce == "multiply":
            out[at] *= value
        elif reduce == "add" or written[at]:  # repeated indices without reduce add up (documented)
            out[at] += value
        else:
            out[at] = value
        written[at] = True
    return out


GATHER_INDEX = np.array([[[0, 2, 1], [2, 2, 0]], [[1, 0, 0], [0, 1, 2]]])  # (2, 2, 3): values < 3


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_gather(dim, device):
    a = small_sample(F32, shape=(3, 3, 4))
    index = GATHER_INDEX % a.shape[dim]
    check(tensor(a, device).gather(dim, idx(index, device)), np_gather(a, dim, index), F32)


def test_gather_int_non_contiguous_and_errors(device):
    a = small_sample(I32, shape=(4, 6))
    index = np.array([[5, 0], [1, 1], [3, 2]])
    check(tensor(a, device).gather(1, idx(index, device)), np_gather(a, 1, index), I32)
    check(tensor(a, device).T.gather(0, idx(index.T % 6, device)), np_gather(a.T, 0, index.T % 6), I32)
    with pytest.raises(ValueError, match=r"\(3,\)"):
        tensor(a, device).gather(1, idx([3, 1, 2], device))
    with pytest.raises(ValueError, match=r"\(5, 2\)"):
        tensor(a, device).gather(1, idx(np.zeros((5, 2)), device))
    with pytest.raises(TypeError, match="float32"):
        tensor(a, device).gather(1, tensor(np.zeros((2, 2), np.float32), device))
    with pytest.raises(IndexError, match="range"):
        tensor(a, device).gather(2, idx(index, device))


SCATTER_INDEX = np.array([[0, 3, 1], [2, 0, 3]])  # (2, 3) into (4, 5): no repeats along dim 0


@pytest.mark.parametrize("reduce", [None, "add", "multiply"])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter(reduce, dim, device):
    target = small_sample(F32, shape=(4, 5))
    src = small_sample(F32, shape=(3, 4), seed=2)
    index = SCATTER_INDEX if dim == 0 else np.array([[4, 0, 1], [2, 2, 0]])  # dim 1 has a repeat
    expected = np_scatter(target, dim, index, src, reduce)
    check(tensor(target, device).scatter(dim, idx(index, device), tensor(src, device), reduce=reduce), expected, F32)


def test_scatter_scalar_int_and_errors(device):
    target = small_sample(I32, shape=(4, 5))
    check(tensor(target, device).scatter(0, idx(SCATTER_INDEX, device), 7), np_scatter(target, 0, SCATTER_INDEX, 7),
          I32)
    check(tensor(target, device).scatter(1, idx(SCATTER_INDEX, device), 2, reduce="multiply"),
          np_scatter(target, 1, SCATTER_INDEX, 2, "multiply"), I32)
    with pytest.raises(ValueError, match="'max'"):
        tensor(target, device).scatter(0, idx(SCATTER_INDEX, device), 1, reduce="max")
    with pytest.raises(ValueError, match=r"\(1, 1\)"):
        tensor(target, device).scatter(0, idx(SCATTER_INDEX, device), tensor(np.ones((1, 1), np.int32), device))
    with pytest.raises(TypeError):
        tensor(target, device).scatter(0, tensor(np.zeros((2, 3), np.float32), device), 1)


def np_scatter_reduce(target, dim, index, src, reduce, include_self):
    """torch.scatter_reduce in numpy, element by element: each place gathers the src values sent
    to it (and its own unless include_self is False); an integer mean rounds down."""
    gathered = {}
    for position in np.ndindex(index.shape):
        at = list(position)
        at[dim] = index[position]
        gathered.setdefault(tuple(at), []).append(src[position])
    out = target.copy()
    for at, values in gathered.items():
        values = ([target[at]] if include_self else []) + values
        if reduce == "sum":
            out[at] = np.sum(values, dtype=target.dtype)
        elif reduce == "prod":
            out[at] = np.prod(values, dtype=target.dtype)
        elif reduce == "mean":
            total = np.sum(values, dtype=target.dtype)
            out[at] = total / len(values) if target.dtype.kind == "f" else total // len(values)
        else:
            out[at] = (np.max if reduce == "amax" else np.min)(values)  # NaN propagates
    return out


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False], ids=["with_self", "without_self"])
@pytest.mark.parametrize("dtype", [F32, I32], ids=["float32", "int32"])
def test_scatter_reduce(reduce, include_self, dtype, device):
    target = small_sample(dtype, shape=(4, 5), low=-4, high=5)
    src = small_sample(dtype, shape=(3, 4), low=-4, high=5, seed=2)
    if dtype.is_float:
        target, src = target.copy(), src.copy()
        target[3, 1], src[1, 2] = np.nan, np.nan  # one NaN kept, one sent (to place (0, 2) along dim 0)
    for dim, index in ((0, np.array([[0, 3, 0], [2, 0, 0]])), (1, np.array([[4, 0, 4], [2, 2, 0]]))):  # repeats
        expected = np_scatter_reduce(target, dim, index, src, reduce, include_self)
        result = tensor(target, device).scatter_reduce(dim, idx(index, device), tensor(src, device), reduce,
                                                       include_self=include_self)
        check(result, expected, dtype, rtol=1e-6)


def test_scatter_reduce_matches_torch_and_says_what_is_wrong(device):
    target = small_sample(I32, shape=(4,), low=-20, high=20)
    with pytest.raises(ValueError, match="'sum', 'prod', 'mean', 'amax', 'amin'"):
        tensor(target, device).scatter_reduce(0, idx([0], device), tensor(target, device), "max")
    with pytest.raises(TypeError, match="integer Tensor"):
        tensor(target, device).scatter_reduce(0, tensor(np.zeros(2, np.float32), device), tensor(target, device), "sum")
    check(Tensor(np.int32(5), device=device).scatter_reduce(0, idx(0, device), Tensor(np.int32(3), device=device), "amax"),
          np.array(5, np.int32), I32)
    torch = pytest.importorskip("torch")
    index, src = np.array([0, 0, 1, 1, 3]), np.array([-1, -2, 7, 8, 5], np.int32)
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            ours = tensor(target, device).scatter_reduce(0, idx(index, device), tensor(src, device), reduce,
                                                         include_self=include_self)
            theirs = torch.from_numpy(target).scatter_reduce(0, torch.from_numpy(index), torch.from_numpy(src), reduce,
                                                             include_self=include_self)
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=f"{reduce}, include_self={include_self}")


# ---- masked_fill, tril, triu, one_hot -------------------------------------------------------------------

def test_masked_fill(device):
    a = small_sample(F32, shape=(4, 6))
    x = tensor(a, device)
    check(x.masked_fill(x > 1, -1.5), np.where(a > 1, -1.5, a).astype(np.float32), F32)
    row_mask = np.array([True, False, False, True, False, True])
    check(x.masked_fill(tensor(row_mask, device), float("inf")), np.where(row_mask, np.inf, a).astype(np.float32), F32)
    check(x.masked_fill(x < 0, Tensor(2.0, device=device)), np.where(a < 0, 2.0, a).astype(np.float32), F32)
    i = small_sample(I32, shape=(4, 6))
    check(tensor(i, device).masked_fill(tensor(i, device) > 0, 2.9), np.where(i > 0, 2, i).astype(np.int32), I32)
    with pytest.raises(TypeError, match="bool"):
        x.masked_fill(tensor(i, device), 0.0)
    with pytest.raises(ValueError, match=r"\(2, 4, 6\)"):
        x.masked_fill(tensor(np.zeros((2, 4, 6), bool), device), 0.0)
    with pytest.raises(ValueError, match=r"\(2,\)"):
        x.masked_fill(x > 0, Tensor([1.0, 2.0], device=device))


@pytest.mark.parametrize("diagonal", [0, 1, -2, 5])
def test_tril_triu(diagonal, device):
    a = small_sample(F32, shape=(2, 4, 6))
    check(tensor(a, device).tril(diagonal), np.tril(a, diagonal), F32)
    check(tensor(a, device).triu(diagonal), np.triu(a, diagonal), F32)


def test_tril_triu_dtypes_and_errors(device):
    b = small_sample(BOOL, shape=(3, 3))
    check(tensor(b, device).tril(), np.tril(b), BOOL)
    a = small_sample(I32, shape=(4, 6))
    check(tensor(a, device).T.triu(-1), np.triu(a.T, -1), I32)
    with pytest.raises(ValueError, match=r"\(6,\)"):
        tensor(a[0], device).tril()


def test_one_hot(device):
    labels = np.array([[0, 3], [2, 1], [3, 3]])
    check(idx(labels, device).one_hot(), np.eye(4, dtype=np.int64)[labels], I64)
    check(idx(labels, device).one_hot(6), np.eye(6, dtype=np.int64)[labels], I64)
    check(idx([5, -1], device).one_hot(3), np.zeros((2, 3), np.int64), I64)  # out of range: zeros
    with pytest.raises(TypeError, match="float32"):
        tensor(np.zeros(2, np.float32), device).one_hot(2)


# ---- __setitem__ ---------------------------------------------------------------------------------

SETITEMS = [(1,), (slice(1, 3), slice(None, None, -2)), (Ellipsis, 2), (slice(None, None, 3), -1),
            (None, 2, slice(4, 0, -3)), (slice(5, 1),), (-1, slice(None), None)]


@pytest.mark.parametrize("index", SETITEMS, ids=[str(i) for i in SETITEMS])
def test_setitem_with_a_number_and_with_a_tensor(index, device):
    a = small_sample(F32, shape=(4, 6))
    x = tensor(a, device)
    x[index] = 100.0
    expected = a.copy()
    expected[index] = 100.0
    check(x, expected, F32)
    region_shape = a[index].shape
    values = np.arange(np.prod(region_shape), dtype=np.float32).reshape(region_shape) * -1
    y = tensor(a, device)
    y[index] = tensor(values, device)
    expected = a.copy()
    expected[index] = values
    check(y, expected, F32)


def test_setitem_broadcasts_casts_and_chains(device):
    a = small_sample(I32, shape=(4, 6))
    x = tensor(a, device)
    x[1:, ::2] = tensor(np.array([7, 8, 9], np.int64), device)  # broadcast along rows, int64 -> int32
    x[0] = 2.9  # truncated to the tensor's dtype
    x[x.shape[0] - 1, 0] = -1
    expected = a.copy()
    expected[1:, ::2] = [7, 8, 9]
    expected[0] = 2
    expected[3, 0] = -1
    check(x, expected, I32)
    check(x.sum(), expected.sum(), I64)  # the new value is what later ops read


def test_setitem_errors(device):
    x = tensor(small_sample(F32, shape=(4, 6)), device)
    with pytest.raises(ValueError, match=r"\(4,\)"):
        x[0] = tensor(np.zeros(4, np.float32), device)
    with pytest.raises(IndexError):
        x[4] = 1.0
    with pytest.raises(TypeError, match="scatter"):
        x[idx([0, 1], device), 2] = 1.0
    with pytest.raises(TypeError, match="scatter"):
        x[idx([0, 1], device), idx([1, 2], device)] = 1.0
    w = Tensor(np.zeros(3, np.float32), device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="no_grad"):
        w[0] = 1.0
    with no_grad():
        w[0] = 1.0
    assert w.requires_grad
    check(w.detach(), np.array([1.0, 0.0, 0.0], np.float32), F32)


BASIC_INDICES = [
    (1, slice(None), -2), (slice(1, 3), 0, slice(None, None, -1)), (Ellipsis, slice(-3, None)),
    (None, -1, Ellipsis, slice(5, 1, -2)), (slice(2, 2), slice(None)), (slice(None, None, 2), 3, None, slice(4, 0, -3)),
    (slice(-100, 100), slice(3, 1)), (0, 0, 0, 0), (slice(None),) * 4, (slice(1, None, 4), Ellipsis, 2, None),
]


@pytest.mark.parametrize("index", BASIC_INDICES, ids=repr)
def test_getitem_with_ints_slices_none_and_ellipsis_matches_numpy(index, device):
    check(tensor(A4, device)[index], A4[index], F32)


def test_ints_and_unit_step_slices_are_one_shrink_and_a_full_index_records_nothing():
    from lazygrad.lazy import walk
    from lazygrad.ops import Ops
    x = Tensor(A4)
    nodes = walk([x[1, :, 2:4, -1].lazydata])
    assert sum(node.op is Ops.SHRINK for node in nodes) == 1
    assert x[:, :] is x and x[...] is x
    assert x.shrink(((0, 3), None, (0, 5), (0, 6))) is x
    assert x.pad(((0, 0),) * 4) is x and x.pad((0, 0), value=7.0) is x
