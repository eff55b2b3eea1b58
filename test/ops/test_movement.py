"""Movement ops, indexing and matmul against numpy, on every device.

Movement ops are views in lazygrad (the view and index code turns them into index expressions),
so they are tested alone, chained, and followed by elementwise ops and reductions.
"""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor, dtypes
from ops_helpers import ALL_DTYPES, check, ids, small_sample, tensor

I32, F32, F16, F64, I64, BOOL = dtypes.int32, dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int64, dtypes.bool


def base(shape=(2, 3, 4), dtype=np.float32):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape) - 5


def np_pad(a, pairs, value=0):
    """numpy reference of pad with (before, after) pairs that may be negative (crop)."""
    crop = tuple(slice(-lo if lo < 0 else 0, a.shape[d] + hi if hi < 0 else a.shape[d])
                 for d, (lo, hi) in enumerate(pairs))
    return np.pad(a[crop], [(max(lo, 0), max(hi, 0)) for lo, hi in pairs], constant_values=value)


# ---- single movement ops ------------------------------------------------------------------------

MOVES = {
    "reshape-6x4": (lambda t: t.reshape(6, 4), lambda a: a.reshape(6, 4)),
    "reshape-tuple": (lambda t: t.reshape((4, 6)), lambda a: a.reshape(4, 6)),
    "reshape-minus1": (lambda t: t.reshape(-1), lambda a: a.reshape(-1)),
    "reshape-2x-1x2": (lambda t: t.reshape(2, -1, 2), lambda a: a.reshape(2, -1, 2)),
    "reshape-ones": (lambda t: t.reshape(1, 24, 1), lambda a: a.reshape(1, 24, 1)),
    "view": (lambda t: t.view(3, 8), lambda a: a.reshape(3, 8)),
    "permute": (lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    "permute-negative": (lambda t: t.permute((-1, 0, -2)), lambda a: a.transpose(2, 0, 1)),
    "transpose": (lambda t: t.transpose(0, 2), lambda a: a.swapaxes(0, 2)),
    "transpose-default": (lambda t: t.transpose(), lambda a: a.swapaxes(-2, -1)),
    "T": (lambda t: t.T, lambda a: a.T),
    "expand": (lambda t: t[:, :1, :].expand(2, 5, 4), lambda a: np.broadcast_to(a[:, :1, :], (2, 5, 4))),
    "expand-new-dims": (lambda t: t.expand(3, 2, 3, 4), lambda a: np.broadcast_to(a, (3, 2, 3, 4))),
    "expand-minus1": (lambda t: t[:1].expand(4, -1, -1), lambda a: np.broadcast_to(a[:1], (4, 3, 4))),
    "pad-pairs": (lambda t: t.pad(((1, 0), (0, 2), (2, 1))), lambda a: np_pad(a, [(1, 0), (0, 2), (2, 1)])),
    "pad-none": (lambda t: t.pad((None, (1, 1), None)), lambda a: np_pad(a, [(0, 0), (1, 1), (0, 0)])),
    "pad-flat-last-dim": (lambda t: t.pad((1, 2)), lambda a: np_pad(a, [(0, 0), (0, 0), (1, 2)])),
    "pad-flat-two-dims": (lambda t: t.pad((1, 2, 3, 0)), lambda a: np_pad(a, [(0, 0), (3, 0), (1, 2)])),
    "pad-value": (lambda t: t.pad(((0, 1), (1, 0), (0, 0)), value=7.5),
                  lambda a: np_pad(a, [(0, 1), (1, 0), (0, 0)], 7.5)),
    "pad-negative-crop": (lambda t: t.pad(((0, 0), (-1, 1), (1, -2))), lambda a: np_pad(a, [(0, 0), (-1, 1), (1, -2)])),
    "pad-flat-negative": (lambda t: t.pad((-1, -1)), lambda a: a[:, :, 1:-1]),
    "shrink": (lambda t: t.shrink(((0, 2), (1, 3), None)), lambda a: a[0:2, 1:3, :]),
    "shrink-to-empty": (lambda t: t.shrink(((1, 1), None, None)), lambda a: a[1:1]),
    "flip-0": (lambda t: t.flip(0), lambda a: a[::-1]),
    "flip-many": (lambda t: t.flip(0, 2), lambda a: a[::-1, :, ::-1]),
    "flip-tuple-negative": (lambda t: t.flip((-1, -2)), lambda a: a[:, ::-1, ::-1]),
    "squeeze-all": (lambda t: t.reshape(1, 2, 1, 12, 1).squeeze(), lambda a: a.reshape(2, 12)),
    "squeeze-dim": (lambda t: t.reshape(1, 2, 12).squeeze(0), lambda a: a.reshape(2, 12)),
    "squeeze-non-one": (lambda t: t.squeeze(1), lambda a: a),
    "squeeze-negative": (lambda t: t.reshape(2, 12, 1).squeeze(-1), lambda a: a.reshape(2, 12)),
    "unsqueeze-0": (lambda t: t.unsqueeze(0), lambda a: a[None]),
    "unsqueeze-last": (lambda t: t.unsqueeze(-1), lambda a: a[..., None]),
    "unsqueeze-middle": (lambda t: t.unsqueeze(2), lambda a: a[:, :, None]),
    "flatten": (lambda t: t.flatten(), lambda a: a.reshape(-1)),
    "flatten-from-1": (lambda t: t.flatten(1), lambda a: a.reshape(2, 12)),
    "flatten-0-1": (lambda t: t.flatten(0, 1), lambda a: a.reshape(6, 4)),
    "flatten-negative": (lambda t: t.flatten(-2, -1), lambda a: a.reshape(2, 12)),
}


@pytest.mark.parametrize("name", list(MOVES))
def test_movement(name, device):
    fn, ref = MOVES[name]
    a = base()
    check(fn(tensor(a, device)), ref(a), F32)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ids(ALL_DTYPES))
def test_movement_every_dtype(dtype, device):
    a = small_sample(dtype, shape=(3, 4, 5))
    result = tensor(a, device).permute(2, 0, 1).flip(1)[1:, :, ::2].pad(((0, 1), (1, 0), (0, 0)))
    check(result, np_pad(a.transpose(2, 0, 1)[:, ::-1][1:, :, ::2], [(0, 1), (1, 0), (0, 0)]), dtype)
    check(tensor(a, device).reshape(5, 12).T.expand(2, 12, 5),
          np.broadcast_to(a.reshape(5, 12).T, (2, 12, 5)), dtype)


def test_pad_value_keeps_dtype(device):
    # PyTorch's F.pad(x, pad, value=v) returns x's dtype whatever the type of v
    a = small_sample(I32, shape=(2, 3))
    check(tensor(a, device).pad(((1, 0), (0, 1)), value=-1), np_pad(a, [(1, 0), (0, 1)], -1), I32)
    check(tensor(a, device).pad(((1, 0), (0, 1)), value=2.5), np_pad(a, [(1, 0), (0, 1)], 2), I32)
    b = np.array([[True, False], [False, True]])
    check(tensor(b, device).pad(((1, 1), (0, 0)), value=True), np_pad(b, [(1, 1), (0, 0)], True), BOOL)
    h = small_sample(F16, shape=(2, 3))
    check(tensor(h, device).pad(((0, 1), (0, 0)), value=1.5), np_pad(h, [(0, 1), (0, 0)], 1.5), F16)


def test_movement_of_0d_and_size0(device):
    s = np.array(3.5, dtype=np.float32)
    check(tensor(s, device).reshape(1, 1), s.reshape(1, 1), F32)
    check(tensor(s, device).reshape(()), s, F32)
    check(tensor(s, device).expand(2, 3), np.broadcast_to(s, (2, 3)), F32)
    check(tensor(s, device).unsqueeze(0), s[None], F32)
    check(tensor(s, device).flatten(), s.reshape(1), F32)
    check(tensor(s, device)[None, ..., None], s[None, ..., None], F32)
    e = np.zeros((0, 3), dtype=np.float32)
    check(tensor(e, device).T, e.T, F32)
    check(tensor(e, device).reshape(3, 0, 1), e.reshape(3, 0, 1), F32)
    check(tensor(e, device).pad(((1, 1), (0, 0)), value=2.0), np_pad(e, [(1, 1), (0, 0)], 2.0), F32)
    check(tensor(e, device).reshape(-1, 3), e.reshape(-1, 3), F32)


# ---- __getitem__ ----------------------------------------------------------------------------------

INDEXES = {
    "int": (1,), "negative-int": (-1,), "two-ints": (0, 2), "three-ints": (1, -1, 0), "int-then-slice": (1, slice(1, 3)),
    "slice-all-then-int": (slice(None), 1), "ellipsis-int": (Ellipsis, 1), "none": (None,),
    "none-middle-slice": (slice(None), None, slice(1, 3)), "step-2": (slice(None, None, 2),),
    "step-minus-1": (slice(None, None, -1),), "steps-mixed": (slice(1, None, 2), slice(None, None, -2)),
    "ellipsis-step-3": (Ellipsis, slice(None, None, 3)), "negative-bounds": (slice(-2, None), slice(None, -1)),
    "past-the-end": (slice(2, 100),), "empty-slice": (slice(3, 1),), "int-ellipsis-none": (1, Ellipsis, None),
    "none-ellipsis-negative": (None, Ellipsis, -1), "negative-step-bounds": (slice(None), slice(-1, -4, -1)),
    "negative-step-from-middle": (slice(2, None, -2), slice(None, 0, -1)), "zero-length": (slice(None, 0),),
    "step-larger-than-dim": (slice(None), slice(None, None, 7)), "ellipsis-only": (Ellipsis,),
    "all-kinds": (slice(None, None, -1), None, Ellipsis, slice(4, 0, -3)),
}


@pytest.mark.parametrize("name", list(INDEXES))
def test_getitem(name, device):
    index = INDEXES[name]
    a = base((4, 5, 6))
    key = index if len(index) != 1 else index[0]
    check(tensor(a, device)[key], a[key], F32)


def test_getitem_numpy_integers_and_0d(device):
    a = base((4, 5))
    check(tensor(a, device)[np.int64(2), np.int32(-1)], a[2, -1], F32)
    check(tensor(a, device)[1][2], a[1][2], F32)
    check(tensor(a, device)[..., None][2, 3], a[..., None][2, 3], F32)


def test_single_elements_of_padded_tensor(device):
    # an int index turns the padded view into a 0-d (or lower-rank) one: the padding must stay
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    padded = np_pad(a, [(2, 1)])
    for i in (0, 1, 2, -1):
        check(tensor(a, device).pad(((2, 1),))[i], padded[i], F32)
    check(tensor(a, device).pad(((2, 1),), value=5.0)[1], np.array(5.0, dtype=np.float32), F32)
    b = base((2, 3))
    pb = np_pad(b, [(1, 0), (0, 2)], -1.0)
    y = tensor(b, device).pad(((1, 0), (0, 2)), value=-1.0)
    for index in ((0, 1), (2, 4), (1, 1)):
        check(y[index], pb[index], F32)


def test_getitem_of_non_contiguous(device):
    a = base((4, 6))
    x = tensor(a, device)
    check(x.T[1:, ::2], a.T[1:, ::2], F32)
    check(x.flip(1)[::-3, 2], a[:, ::-1][::-3, 2], F32)
    check(x[::2][::-1], a[::2][::-1], F32)
    check(x[1:3][:, ::-2][::-1, 1:], a[1:3][:, ::-2][::-1, 1:], F32)


# ---- chains of movement ops feeding elementwise ops and reductions --------------------------------

def test_pad_reshape_permute_sum(device):
    a = base((2, 3, 4))
    x = tensor(a, device)
    result = x.pad(((0, 0), (1, 0), (0, 2))).reshape(2, 4, 3, 2).permute(3, 1, 0, 2).sum(1)
    expected = np_pad(a, [(0, 0), (1, 0), (0, 2)]).reshape(2, 4, 3, 2).transpose(3, 1, 0, 2).sum(1)
    check(result, expected, F32)


def test_permute_then_reshape_then_elementwise(device):
    a = base((2, 3, 4))
    x = tensor(a, device)
    result = x.permute(2, 0, 1).reshape(4, 6) * 2 + x.reshape(4, 6)
    check(result, a.transpose(2, 0, 1).reshape(4, 6) * 2 + a.reshape(4, 6), F32)


def test_expand_then_reshape(device):
    a = base((3, 1))
    x = tensor(a, device)
    check(x.expand(3, 4).reshape(2, 6), np.broadcast_to(a, (3, 4)).reshape(2, 6), F32)
    check(x.expand(3, 4).T.reshape(-1), np.broadcast_to(a, (3, 4)).T.reshape(-1), F32)
    check(x.expand(3, 4).reshape(12).sum(), np.broadcast_to(a, (3, 4)).sum(), F32)


def test_flip_shrink_pad_then_add(device):
    a = base((4, 5))
    b = base((5, 4)) * 0.5
    x, y = tensor(a, device), tensor(b, device)
    result = x.flip(0)[1:, 1:-1].pad(((0, 1), (1, 1))) + y.T.flip(1)
    expected = np_pad(a[::-1][1:, 1:-1], [(0, 1), (1, 1)]) + b.T[:, ::-1]
    check(result, expected, F32)


def test_reshape_after_shrink_is_not_contiguous(device):
    a = base((4, 6))
    x = tensor(a, device)
    check(x[:, 1:5].reshape(8, 2), a[:, 1:5].reshape(8, 2), F32)
    check(x[:, 1:5].reshape(2, 2, 4).permute(2, 1, 0).reshape(4, 4), a[:, 1:5].reshape(2, 2, 4).transpose(2, 1, 0)
          .reshape(4, 4), F32)
    check(x[::2].reshape(-1).flip(0).reshape(3, 4), a[::2].reshape(-1)[::-1].reshape(3, 4), F32)


def test_pad_then_reshape_splits_padded_dim(device):
    a = base((3, 5))
    x = tensor(a, device)
    check(x.pad(((0, 0), (0, 1))).reshape(3, 3, 2).sum(2), np_pad(a, [(0, 0), (0, 1)]).reshape(3, 3, 2).sum(2), F32)
    check(x.pad(((1, 0), (2, 1))).reshape(-1)[3:-2].reshape(3, 9),
          np_pad(a, [(1, 0), (2, 1)]).reshape(-1)[3:-2].reshape(3, 9), F32)


def test_windowed_view_like_conv(device):
    # sliding windows built from pad + expand + reshape + shrink, as pooling and conv do
    a = base((1, 6))
    x = tensor(a, device)
    windows = x.expand(3, 6).reshape(18)[:15].reshape(3, 5)[:, :3]  # rows start at 0, 5, 10 -> offsets
    full = np.broadcast_to(a, (3, 6)).reshape(18)[:15].reshape(3, 5)[:, :3]
    check(windows, full, F32)
    check(windows.amax(1), full.max(1), F32)


def test_movement_then_reduce_then_movement(device):
    a = base((3, 4, 5))
    x = tensor(a, device)
    result = x.permute(1, 2, 0)[:, ::-1].sum(-1).T.reshape(2, 10).amax(0)
    expected = a.transpose(1, 2, 0)[:, ::-1].sum(-1).T.reshape(2, 10).max(0)
    check(result, expected, F32)


def test_contiguous(device):
    a = base((3, 4))
    x = tensor(a, device)
    c = x.T.contiguous()
    check(c, a.T, F32)
    check(c.reshape(2, 6), a.T.reshape(2, 6), F32)
    check((x.flip(0).contiguous() * 2)[1:], (a[::-1] * 2)[1:], F32)
    check(x.pad(((1, 0), (0, 0))).contiguous().sum(0), np_pad(a, [(1, 0), (0, 0)]).sum(0), F32)


def test_same_buffer_through_different_views(device):
    a = base((4, 4))
    x = tensor(a, device)
    check(x + x.T + x.flip(0) + x[:, ::-1], a + a.T + a[::-1] + a[:, ::-1], F32)
    check(x[1:] * x[:-1], a[1:] * a[:-1], F32)


# ---- matmul -----------------------------------------------------------------------------------------

MATMUL_SHAPES = [((4,), (4,)), ((4,), (4, 3)), ((3, 4), (4,)), ((3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                 ((2, 3, 4), (4,)), ((4,), (2, 4, 3)), ((1, 4), (4, 1))]


@pytest.mark.parametrize("left,right", MATMUL_SHAPES, ids=[f"{l}@{r}" for l, r in MATMUL_SHAPES])
@pytest.mark.parametrize("dtype", [I32, F32], ids=ids([I32, F32]))
def test_matmul(left, right, dtype, device):
    a = small_sample(dtype, shape=left, low=-4, high=5, seed=1)
    b = small_sample(dtype, shape=right, low=-4, high=5, seed=2)
    check(tensor(a, device) @ tensor(b, device), np.matmul(a, b), dtype)


@pytest.mark.parametrize("dtype", [dtypes.int8, I64, F16, F64], ids=ids([dtypes.int8, I64, F16, F64]))
def test_matmul_other_dtypes(dtype, device):
    a = small_sample(dtype, shape=(3, 4), low=-4, high=5, seed=3)
    b = small_sample(dtype, shape=(4, 2), low=-4, high=5, seed=4)
    check(tensor(a, device) @ tensor(b, device), np.matmul(a, b), dtype)


def test_matmul_transposed_and_sliced_operands(device):
    a = small_sample(F32, shape=(4, 3), seed=5)
    b = small_sample(F32, shape=(5, 4), seed=6)
    x, y = tensor(a, device), tensor(b, device)
    check(x.T @ y.T, a.T @ b.T, F32)
    check(y @ x[:, ::-1], b @ a[:, ::-1], F32)
    check(x[::2].T @ y.T[::2], a[::2].T @ b.T[::2], F32)
    check(x.dot(x.T @ x), a @ (a.T @ a), F32)


TILED_MATMULS = [((16, 24), (24, 12), F32), ((9, 33), (33, 7), F32), ((4, 16, 8), (8, 10), F32),
                 ((8, 8), (8, 8), I32), ((64, 32), (32, 48), F32), ((24, 16), (16, 40), F64)]


@pytest.mark.parametrize("left,right,dtype", TILED_MATMULS, ids=[f"{l}@{r}-{d.name}" for l, r, d in TILED_MATMULS])
def test_matmul_shapes_that_tile(left, right, dtype, device):
    # row counts divisible by 8/4/2 take the register-and-cache tiled loop nest
    a = small_sample(dtype, shape=left, low=-4, high=5, seed=11)
    b = small_sample(dtype, shape=right, low=-4, high=5, seed=12)
    check(tensor(a, device) @ tensor(b, device), np.matmul(a, b), dtype, atol=1e-4 if dtype == F32 else None)
    if len(left) == 2 and dtype == F32:
        check(tensor(b, device).T @ tensor(a, device).T, b.T @ a.T, dtype, atol=1e-4)


# Shapes past linalg's panel thresholds on the CPU device (at least 64 rows; a right operand of at
# least 2^17 elements, n a multiple of 16): both operands are copied into panels first, the rows
# padded to whole panels of 6 and cut off again (64, 67, 130 rows; 2 x 65 rows of a batch that joins
# them against a 2-D right operand); on the other devices the same products read them in place.
PANEL_MATMULS = [((64, 512), (512, 512), F32), ((2, 65, 256), (256, 1024), F32), ((3, 64, 512), (3, 512, 528), F16),
                 ((130, 512), (512, 512), I32), ((67, 384), (384, 384), F32)]


@pytest.mark.parametrize("left,right,dtype", PANEL_MATMULS, ids=[f"{l}@{r}-{d.name}" for l, r, d in PANEL_MATMULS])
def test_matmul_shapes_that_take_panels(left, right, dtype, device):
    a = small_sample(dtype, shape=left, low=-4, high=5, seed=13)
    b = small_sample(dtype, shape=right, low=-4, high=5, seed=14)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64)) if dtype.is_float else np.matmul(a, b)
    tolerance = {"rtol": 1e-3} if dtype == F16 else {}  # one rounding of the float32 sum to half
    check(tensor(a, device) @ tensor(b, device), expected, dtype, **tolerance)
    if dtype == F32 and len(right) == 2:  # a transposed right operand (nn.Linear) takes panels too
        check(tensor(a, device) @ tensor(np.ascontiguousarray(b.T), device).T, expected, dtype, **tolerance)


def test_matmul_then_bias_relu(device):
    a = small_sample(F32, shape=(3, 4), seed=7)
    w = small_sample(F32, shape=(4, 5), seed=8)
    bias = small_sample(F32, shape=(5,), seed=9)
    check((tensor(a, device) @ tensor(w, device) + tensor(bias, device)).relu(), np.maximum(a @ w + bias, 0), F32)


def test_matmul_with_empty_inner_dim(device):
    a = np.zeros((3, 0), dtype=np.float32)
    b = np.zeros((0, 2), dtype=np.float32)
    check(tensor(a, device) @ tensor(b, device), np.zeros((3, 2), dtype=np.float32), F32)


def test_rmatmul_with_numpy_left_operand(device):
    b = small_sample(F32, shape=(4, 2), seed=10)
    lhs = [[1.0, 2.0, 3.0, 4.0]]
    check(lhs @ tensor(b, device), np.array(lhs, dtype=np.float32) @ b, F32)
    check(Tensor(lhs, device=device) @ tensor(b, device), np.array(lhs, dtype=np.float32) @ b, F32)
