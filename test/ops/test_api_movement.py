"""roll, repeat, tile, repeat_interleave, cat, stack, split, chunk, unbind, narrow, unflatten, expand_as
and pad modes against numpy, on every device; with the errors PyTorch raises.
"""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor, dtypes, stats
from ops_helpers import check, small_sample, tensor

I32, F32, F64, BOOL = dtypes.int32, dtypes.float32, dtypes.float64, dtypes.bool


def base(shape=(4, 6), dtype=F32):
    return small_sample(dtype, shape=shape)


def test_expand_as_and_unflatten(device):
    a = base((4, 1))
    check(tensor(a, device).expand_as(tensor(base((3, 4, 6)), device)), np.broadcast_to(a, (3, 4, 6)), F32)
    b = base((4, 6))
    check(tensor(b, device).unflatten(1, (2, 3)), b.reshape(4, 2, 3), F32)
    check(tensor(b, device).unflatten(-1, (3, -1)), b.reshape(4, 3, 2), F32)
    check(tensor(b, device).unflatten(0, (2, 2, 1)), b.reshape(2, 2, 1, 6), F32)
    with pytest.raises(ValueError, match=r"\(4, 2\)"):
        tensor(b, device).unflatten(1, (4, 2))
    with pytest.raises(ValueError):
        tensor(b, device).unflatten(1, (-1, -1))


ROLLS = [(2, 1), (-1, 0), (7, -1), ((1, -2), (0, 1)), (3, None), (0, 1), (-25, None)]


@pytest.mark.parametrize("shifts,dims", ROLLS, ids=[str(r) for r in ROLLS])
def test_roll(shifts, dims, device):
    a = base()
    check(tensor(a, device).roll(shifts, dims), np.roll(a, shifts, dims), F32)


def test_roll_non_contiguous_0d_and_errors(device):
    a = base()
    check(tensor(a, device).T[::2].roll(1, 1), np.roll(a.T[::2], 1, 1), F32)
    check(Tensor(1.5, device=device).roll(3), np.array(1.5, np.float32), F32)
    check(tensor(np.zeros((0, 2), np.float32), device).roll(1, 0), np.zeros((0, 2), np.float32), F32)
    with pytest.raises(ValueError, match="same length"):
        tensor(a, device).roll((1, 2), 0)
    with pytest.raises(IndexError, match="range"):
        tensor(a, device).roll(1, 2)


@pytest.mark.parametrize("sizes", [(2, 1), (1, 3), (2, 1, 2), (0, 2)], ids=str)
def test_repeat_and_tile(sizes, device):
    a = base((2, 3))
    check(tensor(a, device).repeat(*sizes), np.tile(a, sizes), F32)
    check(tensor(a, device).tile(sizes), np.tile(a, sizes), F32)


def test_repeat_tile_edge_cases(device):
    a = base((2, 3), I32)
    check(tensor(a, device).tile(2), np.tile(a, 2), I32)  # fewer dims than the tensor: leading ones
    check(tensor(a, device).T.repeat((2, 2)), np.tile(a.T, (2, 2)), I32)
    check(Tensor(2.0, device=device).repeat(3), np.array([2.0, 2.0, 2.0], np.float32), F32)
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        tensor(a, device).repeat(2)
    with pytest.raises(ValueError, match="-1"):
        tensor(a, device).repeat(2, -1)


@pytest.mark.parametrize("repeats,dim", [(2, 0), (3, 1), (2, -1), (2, None), (1, 0), (0, 1)])
def test_repeat_interleave(repeats, dim, device):
    a = base((2, 3))
    check(tensor(a, device).repeat_interleave(repeats, dim), np.repeat(a, repeats, axis=dim), F32)


def test_repeat_interleave_errors(device):
    x = tensor(base((2, 3)), device)
    with pytest.raises(ValueError, match="-1"):
        x.repeat_interleave(-1, 0)
    with pytest.raises(TypeError, match=r"\(2,\)"):
        x.repeat_interleave(Tensor([1, 2], device=device), 0)
    check(x.repeat_interleave(Tensor([2], device=device), 0), np.repeat(base((2, 3)), 2, 0), F32)


# ---- cat, stack ----------------------------------------------------------------------------------------

def test_cat_static_and_method_forms(device):
    a, b, c = base((2, 3)), base((4, 3)) + 10, base((1, 3)) - 10
    x, y, z = (tensor(v, device) for v in (a, b, c))
    expected = np.concatenate([a, b, c], 0)
    check(Tensor.cat([x, y, z]), expected, F32)
    check(Tensor.cat((x, y, z), 0), expected, F32)
    check(x.cat(y, z), expected, F32)
    check(x.cat(y, z, dim=-2), expected, F32)
    check(Tensor.cat([x.T, y.T], dim=1), np.concatenate([a.T, b.T], 1), F32)
    check(Tensor.cat([x.T, y.T], axis=1), np.concatenate([a.T, b.T], 1), F32)
    check(Tensor.cat([x]), a, F32)


def test_cat_is_one_kernel_and_keeps_signed_zeros_and_nan(device):
    a = np.array([[-0.0, np.nan], [np.inf, 1.0]], np.float32)
    x = tensor(a, device).realize()
    stats.reset()
    result = Tensor.cat([x, x * 2, x - 1], dim=1).realize()
    assert stats.kernels == (0 if device == "NPY" else 1)
    expected = np.concatenate([a, a * 2, a - 1], 1)
    check(result, expected, F32)
    assert np.signbit(result.numpy()[0, 0])


def test_cat_promotes_dtypes_and_skips_empty(device):
    i, f = base((2, 3), I32), base((2, 2), F64)
    check(tensor(i, device).cat(tensor(f, device), dim=1), np.concatenate([i, f], 1), F64)
    b = base((1, 3), BOOL)
    check(Tensor.cat([tensor(b, device), tensor(b, device)]), np.concatenate([b, b]), BOOL)
    empty = tensor(np.zeros((0, 3), np.float32), device)
    check(Tensor.cat([empty, tensor(base((2, 3)), device), empty]), base((2, 3)), F32)
    check(Tensor.cat([tensor(np.zeros((0,), np.float32), device), tensor(base((2, 3)), device)]), base((2, 3)), F32)


def test_cat_errors(device):
    x = tensor(base((2, 3)), device)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 4\)"):
        Tensor.cat([x, tensor(base((2, 4)), device)])
    with pytest.raises(ValueError, match="zero-dimensional"):
        Tensor.cat([Tensor(1.0, device=device), Tensor(2.0, device=device)])
    with pytest.raises(ValueError, match="non-empty"):
        Tensor.cat([])
    with pytest.raises(TypeError, match="list"):
        Tensor.cat([x, [1.0, 2.0]])
    with pytest.raises(IndexError, match="range"):
        Tensor.cat([x, x], dim=2)


def test_stack(device):
    a, b = base((2, 3)), base((2, 3)) * 3
    x, y = tensor(a, device), tensor(b, device)
    for dim in (0, 1, 2, -1):
        check(Tensor.stack([x, y], dim=dim), np.stack([a, b], dim), F32)
    check(x.stack(y, y), np.stack([a, b, b]), F32)
    check(Tensor.stack([Tensor(1.0, device=device), Tensor(2.0, device=device)]), np.array([1.0, 2.0], np.float32), F32)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(3, 2\)"):
        Tensor.stack([x, x.T])
    with pytest.raises(IndexError, match="range"):
        Tensor.stack([x, y], dim=3)


# ---- split, chunk, unbind, narrow ---------------------------------------------------------------------

def test_split_by_size_and_by_sections(device):
    a = base((4, 7))
    x = tensor(a, device)
    pieces = x.split(3, dim=1)
    assert [p.shape for p in pieces] == [(4, 3), (4, 3), (4, 1)]
    for piece, expected in zip(pieces, np.split(a, [3, 6], axis=1)):
        check(piece, expected, F32)
    pieces = x.split([1, 0, 3], 0)
    assert [p.shape for p in pieces] == [(1, 7), (0, 7), (3, 7)]
    check(pieces[2], a[1:], F32)
    check(x.T.split(4)[1], a.T[4:], F32)
    with pytest.raises(ValueError, match="add up"):
        x.split([1, 2], 0)
    with pytest.raises(ValueError, match="positive"):
        x.split(0, 1)


@pytest.mark.parametrize("size,chunks", [(7, 3), (6, 3), (2, 4), (5, 5)])
def test_chunk_matches_pytorch_piece_sizes(size, chunks, device):
    a = base((size, 2))
    pieces = tensor(a, device).chunk(chunks)
    step = -(-size // chunks)
    expected = [a[start:start + step] for start in range(0, size, step)]
    assert len(pieces) == len(expected)
    for piece, part in zip(pieces, expected):
        check(piece, part, F32)


def test_chunk_unbind_narrow(device):
    a = base((3, 4))
    x = tensor(a, device)
    with pytest.raises(ValueError, match="0"):
        x.chunk(0)
    for dim in (0, 1, -1):
        parts = x.unbind(dim)
        assert len(parts) == a.shape[dim]
        for i, part in enumerate(parts):
            check(part, np.take(a, i, axis=dim), F32)
    check(x.narrow(1, 1, 2), a[:, 1:3], F32)
    check(x.narrow(0, -2, 2), a[1:], F32)
    check(x.narrow(-1, 4, 0), a[:, 4:], F32)
    with pytest.raises(IndexError, match="5"):
        x.narrow(1, 5, 0)
    with pytest.raises(ValueError, match="exceeds"):
        x.narrow(1, 3, 2)
    with pytest.raises(ValueError, match="0-d"):
        Tensor(1.0, device=device).narrow(0, 0, 1)


# ---- pad modes -------------------------------------------------------------------------------------

NUMPY_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}
PADDINGS = [((1, 2), (0, 3)), ((0, 0), (4, 1)), ((3, 0), (2, 2))]


@pytest.mark.parametrize("mode", list(NUMPY_MODES))
@pytest.mark.parametrize("pairs", PADDINGS, ids=[str(p) for p in PADDINGS])
def test_pad_modes(mode, pairs, device):
    a = base((4, 6))
    check(tensor(a, device).pad(pairs, mode=mode), np.pad(a, pairs, mode=NUMPY_MODES[mode]), F32)


def test_pad_modes_flat_form_non_contiguous_and_int(device):
    a = base((2, 3, 5), I32)
    # PyTorch's flat form starts at the last dim: (left, right, top, bottom)
    check(tensor(a, device).pad((2, 1, 1, 2), mode="reflect"),
          np.pad(a, ((0, 0), (1, 2), (2, 1)), mode="reflect"), I32)
    check(tensor(a, device).permute(2, 0, 1).pad((1, 1), mode="circular"),
          np.pad(a.transpose(2, 0, 1), ((0, 0), (0, 0), (1, 1)), mode="wrap"), I32)


def test_pad_mode_errors(device):
    x = tensor(base((2, 3)), device)
    with pytest.raises(ValueError, match="reflect"):
        x.pad((3, 0), mode="reflect")  # reflect needs padding < size
    with pytest.raises(ValueError, match="circular"):
        x.pad((0, 4), mode="circular")
    with pytest.raises(ValueError, match="'mirror'"):
        x.pad((1, 1), mode="mirror")
    with pytest.raises(ValueError, match="value"):
        x.pad((1, 1), value=2.0, mode="replicate")
    with pytest.raises(ValueError):
        x.pad((-1, 1), mode="replicate")
