"""mm, bmm, mT, swapaxes, movedim/moveaxis, reshape_as, view_as, amax, amin, unfold, diagonal, index_select,
finfo and iinfo against numpy (torch for finfo and iinfo when installed), on every device; with the errors
PyTorch raises.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazygrad
from lazygrad import Tensor, dtypes
from ops_helpers import check, sample, small_sample, tensor

I32, I64, F32, F64, BOOL = dtypes.int32, dtypes.int64, dtypes.float32, dtypes.float64, dtypes.bool


def base(shape=(4, 6), dtype=F32):
    return small_sample(dtype, shape=shape)


# ---- mm, bmm, mT --------------------------------------------------------------------------------

def test_mm(device):
    a, b = base((3, 4)), base((4, 5))
    check(tensor(a, device).mm(tensor(b, device)), a @ b, F32)
    check(tensor(a.T, device).T.mm(tensor(b, device)), a @ b, F32)  # a transposed view
    check(tensor(a, device).mm(tensor(np.zeros((4, 0), np.float32), device)), np.zeros((3, 0), np.float32), F32)
    ints = base((3, 4), I32)
    check(tensor(ints, device).mm(tensor(base((4, 2), I32), device)), ints @ base((4, 2), I32), I32)


def test_mm_errors(device):
    x = tensor(base((3, 4)), device)
    with pytest.raises(ValueError, match=r"mm: .*\(2, 3, 4\)"):
        tensor(base((2, 3, 4)), device).mm(tensor(base((4, 2)), device))
    with pytest.raises(ValueError, match=r"mm: .*\(4,\)"):
        x.mm(tensor(base((4,)), device))
    with pytest.raises(ValueError, match=r"mm: shapes \(3, 4\) and \(3, 4\) are not aligned"):
        x.mm(x)
    with pytest.raises(TypeError, match="mm: expected a Tensor"):
        x.mm(np.ones((4, 2)))


def test_bmm(device):
    a, b = base((2, 3, 4)), base((2, 4, 5))
    check(tensor(a, device).bmm(tensor(b, device)), a @ b, F32)
    check(tensor(b, device).mT.bmm(tensor(a, device).mT), b.transpose(0, 2, 1) @ a.transpose(0, 2, 1), F32)
    empty = np.zeros((0, 3, 4), np.float32)
    check(tensor(empty, device).bmm(tensor(np.zeros((0, 4, 2), np.float32), device)), np.zeros((0, 3, 2), np.float32),
          F32)


def test_bmm_errors(device):
    with pytest.raises(ValueError, match=r"bmm: batch sizes differ: shapes \(2, 3, 4\) and \(3, 4, 2\)"):
        tensor(base((2, 3, 4)), device).bmm(tensor(base((3, 4, 2)), device))
    with pytest.raises(ValueError, match=r"bmm: .*3-d.*\(3, 4\)"):
        tensor(base((3, 4)), device).bmm(tensor(base((4, 2)), device))
    with pytest.raises(ValueError, match="bmm: .*not aligned"):
        tensor(base((2, 3, 4)), device).bmm(tensor(base((2, 3, 4)), device))


def test_mT(device):
    a = base((2, 3, 4))
    check(tensor(a, device).mT, a.swapaxes(-1, -2), F32)
    check(tensor(a[0], device).mT, a[0].T, F32)
    check(tensor(a, device)[:, 1:].mT, a[:, 1:].swapaxes(-1, -2), F32)
    with pytest.raises(ValueError, match=r"mT: .*\(4,\)"):
        tensor(a[0, 0], device).mT
    with pytest.raises(ValueError, match=r"mT: .*\(\)"):
        Tensor(1.0, device=device).mT


# ---- swapaxes, movedim, reshape_as, view_as ------------------------------------------------------

def test_swapaxes_and_swapdims(device):
    a = base((2, 3, 4), I32)
    check(tensor(a, device).swapaxes(0, 2), a.swapaxes(0, 2), I32)
    check(tensor(a, device).swapaxes(-1, 1), a.swapaxes(-1, 1), I32)
    check(tensor(a, device).swapdims(0, -1), a.swapaxes(0, -1), I32)
    check(tensor(a, device)[:, ::2].swapaxes(0, 1), a[:, ::2].swapaxes(0, 1), I32)
    with pytest.raises(IndexError, match=r"transpose: dimension out of range .*\[-3, 2\]"):
        tensor(a, device).swapaxes(0, 3)


MOVES = [(0, 2), (-1, 0), ((0, 1), (2, 0)), ([2, 0], [0, 1]), ((), ()), ((0, 1, 2), (2, 1, 0)), (1, -3)]


@pytest.mark.parametrize("source,destination", MOVES, ids=[str(m) for m in MOVES])
def test_movedim(source, destination, device):
    a = base((2, 3, 4))
    check(tensor(a, device).movedim(source, destination), np.moveaxis(a, source, destination), F32)
    check(tensor(a, device).moveaxis(source, destination), np.moveaxis(a, source, destination), F32)


def test_movedim_non_contiguous_0d_and_errors(device):
    a = base((2, 3, 4))
    check(tensor(a, device).permute(2, 0, 1).movedim(0, -1), np.moveaxis(a.transpose(2, 0, 1), 0, -1), F32)
    check(Tensor(2.0, device=device).movedim(0, -1), np.array(2.0, np.float32), F32)
    check(tensor(np.zeros((0, 3), np.float32), device).movedim(0, 1), np.zeros((3, 0), np.float32), F32)
    x = tensor(a, device)
    with pytest.raises(ValueError, match=r"movedim: source \[0, 0\] repeats"):
        x.movedim((0, 0), (1, 2))
    with pytest.raises(ValueError, match=r"movedim: destination \[1, 1\] repeats"):
        x.movedim((0, 2), (1, -2))
    with pytest.raises(ValueError, match="movedim: source .* must name as many dims"):
        x.moveaxis((0, 1), 2)
    with pytest.raises(IndexError, match="movedim: dimension out of range"):
        x.movedim(3, 0)
    with pytest.raises(TypeError, match="movedim: source must be an int"):
        x.movedim(0.0, 1)


def test_reshape_as_and_view_as(device):
    a = base((4, 6))
    shape_of = tensor(np.zeros((3, 2, 4), np.float32), device)
    check(tensor(a, device).reshape_as(shape_of), a.reshape(3, 2, 4), F32)
    check(tensor(a, device).view_as(shape_of), a.reshape(3, 2, 4), F32)
    check(tensor(a, device).T.reshape_as(shape_of), a.T.reshape(3, 2, 4), F32)
    check(tensor(a[:1, :1], device).view_as(Tensor(0, device=device)), a[0, 0], F32)
    check(tensor(np.zeros((0, 2), np.float32), device).view_as(tensor(np.zeros((2, 0)), device)),
          np.zeros((2, 0), np.float32), F32)
    with pytest.raises(ValueError, match=r"view_as: cannot reshape tensor of shape \(4, 6\).* \(5,\)"):
        tensor(a, device).view_as(tensor(np.zeros(5), device))
    with pytest.raises(TypeError, match="reshape_as: expected a Tensor"):
        tensor(a, device).reshape_as((6, 4))


# ---- amax, amin -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, I32, dtypes.uint8, BOOL], ids=["float32", "int32", "uint8", "bool"])
def test_amax_amin(dtype, device):
    a = sample(dtype, shape=(2, 3, 4), finite=True)
    x = tensor(a, device)
    for dim, keepdim in ((None, False), (1, False), (-1, True), ((0, 2), False), ((), False), ([2, 0], True)):
        numpy_axis = None if dim in ((), None) else tuple(dim) if isinstance(dim, list) else dim
        check(x.amax(dim, keepdim), np.amax(a, axis=numpy_axis, keepdims=keepdim), dtype)
        check(x.amin(dim=dim, keepdim=keepdim), np.amin(a, axis=numpy_axis, keepdims=keepdim), dtype)


def test_amax_amin_nan_non_contiguous_0d_and_errors(device):
    a = sample(F32, shape=(4, 6))  # holds NaN and infinities: NaN wins, as in PyTorch
    check(tensor(a, device).amax(1), np.amax(a, 1), F32)
    check(tensor(a, device).amin(0), np.amin(a, 0), F32)
    b = base((4, 6))
    check(tensor(b, device).T[::2].amax(-1), b.T[::2].max(-1), F32)
    check(Tensor(3.5, device=device).amax(0), np.array(3.5, np.float32), F32)
    check(tensor(np.zeros((0, 3), np.float32), device).amin(1), np.zeros(0, np.float32), F32)
    with pytest.raises(ValueError, match=r"amax: cannot reduce over an empty dimension .* \(0, 3\)"):
        tensor(np.zeros((0, 3), np.float32), device).amax(0)
    with pytest.raises(ValueError, match="amin: cannot reduce over an empty dimension"):
        tensor(np.zeros((0, 3), np.float32), device).amin()
    with pytest.raises(IndexError, match="amax: dimension out of range"):
        tensor(b, device).amax(2)
    with pytest.raises(ValueError, match="amin: axis .* repeats"):
        tensor(b, device).amin((1, -1))


# ---- diagonal -------------------------------------------------------------------------------------

DIAGONALS = [(0, 0, 1), (1, 0, 1), (-1, 0, 1), (2, 1, 2), (-2, 2, 0), (1, -1, -3), (5, 0, 2), (-4, 1, 2), (0, 2, 1)]


@pytest.mark.parametrize("offset,dim1,dim2", DIAGONALS, ids=[str(d) for d in DIAGONALS])
def test_diagonal(offset, dim1, dim2, device):
    a = base((2, 3, 4), I32)
    check(tensor(a, device).diagonal(offset, dim1, dim2), np.diagonal(a, offset, dim1, dim2), I32)


def np_unfold(a, dim, size, step):
    """torch.Tensor.unfold in numpy: the windows of dim, each a new last dim."""
    windows = np.lib.stride_tricks.sliding_window_view(a, size, axis=dim)  # window count at dim, size last
    return np.take(windows, range(0, a.shape[dim] - size + 1, step), axis=dim)


@pytest.mark.parametrize("dim, size, step", [(1, 3, 2), (1, 7, 1), (0, 1, 1), (-1, 2, 1), (1, 2, 5)])
def test_unfold(dim, size, step, device):
    a = base((2, 7, 3))
    check(tensor(a, device).unfold(dim, size, step), np_unfold(a, dim, size, step), F32)


def test_unfold_views_gradient_0d_and_errors(device):
    a = base((5, 4))
    check(tensor(a, device).T[::-1].unfold(1, 2, 2), np_unfold(a.T[::-1], 1, 2, 2), F32)
    check(tensor(np.array(2.5, np.float32), device).unfold(0, 1, 1), np.array([2.5], np.float32), F32)
    check(tensor(a, device).unfold(0, 0, 2), np.zeros((3, 4, 0), np.float32), F32)
    x = Tensor(a.astype(np.float64), device=device, requires_grad=True)
    x.unfold(0, 3, 1).sum().backward()  # the middle rows are in three windows, the ends in fewer
    np.testing.assert_array_equal(x.grad.numpy(), np.repeat([[1.0], [2.0], [3.0], [2.0], [1.0]], 4, axis=1))
    with pytest.raises(ValueError, match="unfold: size 6 does not fit dim 0"):
        tensor(a, device).unfold(0, 6, 1)
    with pytest.raises(ValueError, match="step must be positive"):
        tensor(a, device).unfold(0, 2, 0)


def test_diagonal_defaults_non_contiguous_empty_and_errors(device):
    a = base((4, 6))
    check(tensor(a, device).diagonal(), np.diagonal(a), F32)
    check(tensor(a, device).diagonal(offset=-2), np.diagonal(a, -2), F32)
    check(tensor(a, device).T[1:, ::2].diagonal(1), np.diagonal(a.T[1:, ::2], 1), F32)
    check(tensor(np.zeros((0, 3), np.float32), device).diagonal(), np.zeros(0, np.float32), F32)
    check(tensor(base((2, 3, 2)), device).diagonal(0, 0, 2), np.diagonal(base((2, 3, 2)), 0, 0, 2), F32)
    with pytest.raises(ValueError, match=r"diagonal: needs at least 2 dims, got shape \(6,\)"):
        tensor(a[0], device).diagonal()
    with pytest.raises(ValueError, match="diagonal: dim1 and dim2 must differ"):
        tensor(a, device).diagonal(0, 1, -1)
    with pytest.raises(IndexError, match="diagonal: dimension out of range"):
        tensor(a, device).diagonal(0, 0, 2)
    with pytest.raises(TypeError, match="diagonal: offset must be an int"):
        tensor(a, device).diagonal(1.0)


# ---- index_select ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, -1, -3])
def test_index_select(dim, device):
    a = base((3, 4, 5), I32)
    index = np.array([2, 0, 2, 1])
    check(tensor(a, device).index_select(dim, tensor(index, device)), np.take(a, index, axis=dim), I32)


def test_index_select_index_kinds_non_contiguous_0d_and_empty(device):
    a = base((4, 6))
    x = tensor(a, device)
    check(x.index_select(1, tensor(np.array([5, 1], np.int32), device)), a[:, [5, 1]], F32)
    check(x.index_select(0, tensor(np.array(2), device)), a[[2]], F32)  # a 0-d index keeps the dim
    check(x.index_select(1, tensor(np.zeros(0, np.int64), device)), a[:, :0], F32)
    check(x.index_select(1, tensor(np.array([-1]), device)), a[:, [-1]], F32)  # negative counts from the end
    check(x.T[::2].index_select(1, tensor(np.array([3, 0]), device)), a.T[::2][:, [3, 0]], F32)
    check(Tensor(2.5, device=device).index_select(0, tensor(np.array([0]), device)), np.array(2.5, np.float32), F32)
    check(tensor(np.zeros((0, 3), np.float32), device).index_select(1, tensor(np.array([2]), device)),
          np.zeros((0, 1), np.float32), F32)


def test_index_select_errors(device):
    x = tensor(base((4, 6)), device)
    with pytest.raises(ValueError, match=r"index_select: index must be 1-d .* \(1, 2\)"):
        x.index_select(0, tensor(np.array([[0, 1]]), device))
    with pytest.raises(TypeError, match="index_select: index must be an integer Tensor, got float32"):
        x.index_select(0, tensor(np.array([0.0], np.float32), device))
    with pytest.raises(TypeError, match="index_select: index must be an integer Tensor, got list"):
        x.index_select(0, [0, 1])
    with pytest.raises(IndexError, match="index_select: dimension out of range"):
        x.index_select(2, tensor(np.array([0]), device))
    with pytest.raises(ValueError, match="index_select: a 0-d tensor takes one index"):
        Tensor(1.0, device=device).index_select(0, tensor(np.array([0, 0]), device))


# ---- finfo, iinfo (no device involved) ------------------------------------------------------------

FINFO_FIELDS = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype")


@pytest.mark.parametrize("dtype", [dtypes.float16, F32, F64], ids=["float16", "float32", "float64"])
def test_finfo(dtype):
    info = lazygrad.finfo(dtype)
    limits = np.finfo(dtype.np)
    assert (info.bits, info.eps, info.max, info.min) == (limits.bits, limits.eps, limits.max, limits.min)
    assert info.tiny == info.smallest_normal == limits.smallest_normal
    assert info.dtype == dtype.name
    assert lazygrad.finfo(dtype.name).eps == info.eps
    torch = pytest.importorskip("torch")
    expected = torch.finfo(getattr(torch, dtype.name))
    assert {f: getattr(info, f) for f in FINFO_FIELDS} == {f: getattr(expected, f) for f in FINFO_FIELDS}


@pytest.mark.parametrize("dtype", [dtypes.uint8, dtypes.int8, dtypes.int16, I32, I64], ids=lambda d: d.name)
def test_iinfo(dtype):
    info = lazygrad.iinfo(dtype)
    limits = np.iinfo(dtype.np)
    assert (info.bits, info.max, info.min, info.dtype) == (limits.bits, limits.max, limits.min, dtype.name)
    torch = pytest.importorskip("torch")
    expected = torch.iinfo(getattr(torch, dtype.name))
    assert (info.bits, info.max, info.min, info.dtype) == (expected.bits, expected.max, expected.min, expected.dtype)


def test_finfo_default_and_wrong_kinds_of_dtype():
    assert lazygrad.finfo().dtype == "float32"
    assert "eps=" in repr(lazygrad.finfo()) and "max=127" in repr(lazygrad.iinfo(dtypes.int8))
    with pytest.raises(TypeError, match="finfo: expects a floating point dtype, got int32; use lazygrad.iinfo"):
        lazygrad.finfo(I32)
    with pytest.raises(TypeError, match="iinfo: expects an integer dtype, got float16; use lazygrad.finfo"):
        lazygrad.iinfo(dtypes.float16)
    with pytest.raises(TypeError, match="iinfo: expects an integer dtype, got bool"):
        lazygrad.iinfo(BOOL)
    with pytest.raises(TypeError, match="finfo: expects a floating point dtype, got bool"):
        lazygrad.finfo(BOOL)
