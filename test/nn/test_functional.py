"""lazygrad.nn.functional against float64 numpy formulations of PyTorch's definitions, on every device.

The references are written from the definitions (a direct loop over output positions and kernel
offsets for convolution and pooling, PyTorch's index arithmetic for interpolation), never from the
implementation's windowed views. Shapes are small and the cases few: each distinct case compiles
kernels of its own on the compiled devices.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import lazygrad.nn.functional as F
from lazygrad import Tensor, dtypes, manual_seed, no_grad, stats
from lazygrad.ops import Ops

rng = np.random.default_rng(0)


def randn(*shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def close(result: Tensor, expected, rtol=1e-4, atol=1e-5) -> None:
    expected = np.asarray(expected)
    assert result.shape == expected.shape, f"shape: got {result.shape}, expected {expected.shape}"
    np.testing.assert_allclose(result.numpy().astype(np.float64), expected, rtol=rtol, atol=atol)


# ---- references ----------------------------------------------------------------------------------

def conv_reference(x, w, b, stride, pads, dilation, groups):
    """out[n, o, p] = b[o] + sum over c, k of x_padded[n, g * C/groups + c, p*stride + k*dilation] * w[o, c, k],
    where g is the group of output channel o."""
    dims = w.ndim - 2
    x = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [tuple(p) for p in pads])
    out_channels, group_channels, kernel = w.shape[0], w.shape[1], w.shape[2:]
    per_group = out_channels // groups
    outs = tuple((x.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(dims))
    out = np.zeros((x.shape[0], out_channels) + outs)
    for position in np.ndindex(*outs):
        for offset in np.ndindex(*kernel):
            source = tuple(p * s + k * d for p, s, k, d in zip(position, stride, offset, dilation))
            column = x[(slice(None), slice(None)) + source]  # (N, C)
            for g in range(groups):
                inputs = column[:, g * group_channels:(g + 1) * group_channels]
                weights = w[(slice(g * per_group, (g + 1) * per_group), slice(None)) + offset].astype(np.float64)
                out[(slice(None), slice(g * per_group, (g + 1) * per_group)) + position] += inputs @ weights.T
    if b is not None:
        out += b.reshape((1, -1) + (1,) * dims)
    return out


def conv_transpose_reference(x, w, b, stride, padding, output_padding, groups, dilation):
    """Every input element scatters x[n, c, i] * w[c, o, k] to output position i*stride + k*dilation - padding."""
    dims = w.ndim - 2
    sizes, kernel = x.shape[2:], w.shape[2:]
    in_per_group, per_group = x.shape[1] // groups, w.shape[1]
    outs = tuple((i - 1) * s - 2 * p + d * (k - 1) + extra + 1
                 for i, s, p, d, k, extra in zip(sizes, stride, padding, dilation, kernel, output_padding))
    full = tuple(max(p + o, (i - 1) * s + d * (k - 1) + 1)
                 for p, o, i, s, d, k in zip(padding, outs, sizes, stride, dilation, kernel))
    out = np.zeros((x.shape[0], per_group * groups) + full)
    for position in np.ndindex(*sizes):
        for offset in np.ndindex(*kernel):
            target = tuple(p * s + k * d for p, s, k, d in zip(position, stride, offset, dilation))
            for g in range(groups):
                inputs = x[(slice(None), slice(g * in_per_group, (g + 1) * in_per_group)) + position].astype(np.float64)
                weights = w[(slice(g * in_per_group, (g + 1) * in_per_group), slice(None)) + offset]
                out[(slice(None), slice(g * per_group, (g + 1) * per_group)) + target] += inputs @ weights
    out = out[(slice(None), slice(None)) + tuple(slice(p, p + o) for p, o in zip(padding, outs))]
    if b is not None:
        out += b.reshape((1, -1) + (1,) * dims)
    return out


def pool_output_size(size, kernel, stride, padding, dilation, ceil_mode):
    """PyTorch's pooling_output_shape."""
    out = (size + 2 * padding - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def max_pool_reference(x, kernel, stride, padding, dilation, ceil_mode):
    sizes = x.shape[2:]
    outs = tuple(pool_output_size(*args, ceil_mode) for args in zip(sizes, kernel, stride, padding, dilation))
    out = np.full(x.shape[:2] + outs, -np.inf)
    for position in np.ndindex(*outs):
        for offset in np.ndindex(*kernel):
            source = tuple(o * s - p + k * d for o, s, p, k, d in zip(position, stride, padding, offset, dilation))
            if all(0 <= i < size for i, size in zip(source, sizes)):
                index = (slice(None), slice(None)) + position
                out[index] = np.maximum(out[index], x[(slice(None), slice(None)) + source])
    return out


def avg_pool_reference(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override=None):
    """PyTorch's avg_pool kernel: the window [start, start + k) is cut at size + padding for the
    divisor, and at the input for the sum (and for the divisor without count_include_pad)."""
    sizes = x.shape[2:]
    outs = tuple(pool_output_size(*args, 1, ceil_mode) for args in zip(sizes, kernel, stride, padding))
    out = np.zeros(x.shape[:2] + outs)
    for position in np.ndindex(*outs):
        starts = [o * s - p for o, s, p in zip(position, stride, padding)]
        ends = [min(start + k, size + p) for start, k, size, p in zip(starts, kernel, sizes, padding)]
        pool_size = math.prod(end - start for start, end in zip(starts, ends))
        starts = [max(start, 0) for start in starts]
        ends = [min(end, size) for end, size in zip(ends, sizes)]
        region = x[(slice(None), slice(None)) + tuple(slice(a, b) for a, b in zip(starts, ends))]
        total = region.astype(np.float64).sum(axis=tuple(range(2, x.ndim)))
        if divisor_override:
            divisor = divisor_override
        elif count_include_pad:
            divisor = pool_size
        else:
            divisor = math.prod(end - start for start, end in zip(starts, ends))
        out[(slice(None), slice(None)) + position] = total / divisor
    return out


def nearest_source(dst, in_size, out_size, scale):
    """PyTorch's nearest_idx, float32 arithmetic included."""
    if out_size == in_size:
        return dst
    if out_size == 2 * in_size:
        return dst >> 1
    ratio = np.float32(1.0 / scale) if scale else np.float32(in_size) / np.float32(out_size)
    return min(int(np.floor(np.float32(dst) * ratio)), in_size - 1)


def linear_source(dst, in_size, out_size, scale, align_corners, float_type=np.float32):
    """PyTorch's area_pixel_compute_source_index and guard_index_and_lambda: (index0, index1, lambda1)."""
    if align_corners:
        ratio = float_type(in_size - 1) / float_type(out_size - 1) if out_size > 1 else float_type(0)
        real = ratio * float_type(dst)
    else:
        ratio = float_type(1.0 / scale) if scale else float_type(in_size) / float_type(out_size)
        real = max(ratio * (float_type(dst) + float_type(0.5)) - float_type(0.5), float_type(0))
    index0 = min(int(np.floor(real)), in_size - 1)
    index1 = index0 + 1 if index0 < in_size - 1 else index0
    weight = min(max(float(real) - index0, 0.0), 1.0)
    return index0, index1, weight


def bilinear_reference(x, out_h, out_w, align_corners, scales=(None, None)):
    out = np.zeros(x.shape[:2] + (out_h, out_w))
    x = x.astype(np.float64)
    for i in range(out_h):
        h0, h1, hl = linear_source(i, x.shape[2], out_h, scales[0], align_corners)
        for j in range(out_w):
            w0, w1, wl = linear_source(j, x.shape[3], out_w, scales[1], align_corners)
            out[:, :, i, j] = ((1 - hl) * ((1 - wl) * x[:, :, h0, w0] + wl * x[:, :, h0, w1])
                               + hl * ((1 - wl) * x[:, :, h1, w0] + wl * x[:, :, h1, w1]))
    return out


def log_softmax_reference(x, axis):
    x = x.astype(np.float64)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def reduce_reference(loss, reduction):
    return {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[reduction](loss)


def cross_entropy_reference(logits, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """PyTorch's cross_entropy: nll of log_softmax (mean divided by the summed weights of the kept
    targets) and, with label smoothing, eps/C times the weighted sum of -log p over classes."""
    class_axis = 0 if logits.ndim == 1 else 1
    classes = logits.shape[class_axis]
    log_probs = np.moveaxis(log_softmax_reference(logits, class_axis), class_axis, -1)
    weight = np.ones(classes) if weight is None else weight.astype(np.float64)
    if target.dtype.kind == "f":
        smoothed = np.moveaxis(target, class_axis, -1) * (1 - label_smoothing) + label_smoothing / classes
        return reduce_reference(-(log_probs * smoothed * weight).sum(-1), reduction)
    rows, targets = log_probs.reshape(-1, classes), target.reshape(-1).astype(np.int64)
    nll, smooth, weights = np.zeros(len(targets)), np.zeros(len(targets)), np.zeros(len(targets))
    for n, (row, t) in enumerate(zip(rows, targets)):
        if t != ignore_index:
            nll[n], weights[n], smooth[n] = -weight[t] * row[t], weight[t], -(weight * row).sum()
    if reduction == "mean":
        nll, smooth = nll.sum() / weights.sum(), smooth.sum() / weights.sum()
    elif reduction == "sum":
        nll, smooth = nll.sum(), smooth.sum()
    else:
        nll, smooth = nll.reshape(target.shape), smooth.reshape(target.shape)
    return (1 - label_smoothing) * nll + label_smoothing / classes * smooth


# ---- convolution ---------------------------------------------------------------------------------

def _same_pads(kernel, dilation):
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return [(t // 2, t - t // 2) for t in totals]


CONV2D_CASES = [
    # input shape, weight shape, stride, padding, dilation, groups, bias
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 0, 1, 1, True),
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 1, 1, 1, False),
    ((1, 4, 9, 8), (6, 2, 3, 2), (2, 3), (1, 2), (2, 1), 2, True),
    ((1, 3, 6, 7), (3, 1, 3, 3), 2, 1, 1, 3, True),       # depthwise, strided
    ((2, 2, 5, 5), (3, 2, 1, 1), 1, 0, 1, 1, True),       # 1x1
    ((1, 2, 8, 7), (2, 2, 2, 2), 2, 0, 1, 1, False),      # windows meet exactly; odd width leaves a tail
    ((1, 2, 9, 9), (2, 2, 2, 2), 3, 0, 1, 1, False),      # stride larger than the kernel
    ((1, 2, 7, 9), (2, 2, 1, 3), (3, 1), 0, 1, 1, False),  # apart in one dim, overlapping in the other
    ((1, 1, 5, 5), (1, 1, 1, 1), 4, 0, 2, 1, False),      # rows longer than the input: padded, never read
    ((1, 2, 6, 6), (4, 2, 3, 3), 1, "same", 2, 1, True),
    ((1, 2, 6, 7), (4, 2, 2, 4), 1, "same", 1, 1, False),  # even kernel: the extra padding goes after
    ((1, 2, 5, 5), (3, 2, 3, 3), 1, "valid", 1, 1, True),
    # 64 channels by 3x3 and whole panels of 16 output channels: output channels last on CPU
    ((2, 64, 7, 6), (32, 64, 3, 3), 1, 1, 1, 1, True),
    ((1, 64, 9, 8), (16, 64, 3, 3), 2, (1, 0), (1, 2), 1, False),
    # 1x1 over at most 256 positions, whole panels of 16 output channels: a matmul in panels on CPU
    ((1, 32, 7, 7), (128, 32, 1, 1), 1, 0, 1, 1, True),
    ((2, 64, 9, 9), (64, 64, 1, 1), 2, 0, 1, 1, False),
    # depthwise over whole vectors of 8 channels: channels last on CPU, from a channels-last copy
    ((2, 16, 9, 8), (16, 1, 3, 3), 1, 1, 1, 16, True),
    ((1, 8, 9, 7), (8, 1, 3, 3), 2, (1, 2), (1, 2), 8, False),
    # 1x1 over more than 256 positions: output channels last
    ((1, 16, 17, 17), (32, 16, 1, 1), 1, 0, 1, 1, True),
    # dilations reaching past the input: the taps reading only padding are dropped (a 1x1 convolution;
    # grouped and strided, the center tap alone, reading rows and columns inside the input: cropped)
    ((1, 3, 5, 6), (4, 3, 3, 3), 1, 6, 6, 1, True),
    ((2, 4, 6, 7), (6, 2, 3, 3), 2, 3, 5, 2, True),
    ((2, 4, 4, 5), (6, 4, 3, 3), 2, 3, 3, 1, False),  # the first row of taps dropped, the padding after kept
    # grouped with 16 and 24 output channels a group: channels last on CPU without gradients, in panels
    ((1, 8, 6, 7), (32, 4, 3, 3), 1, 1, 1, 2, True),
    ((2, 6, 7, 7), (72, 2, 3, 3), 2, 1, (1, 2), 3, False),
    # dilated taps meeting the input at some outputs only: bands of outputs, each with its own taps
    ((1, 4, 12, 13), (8, 4, 3, 3), 1, 6, 6, 1, True),
    ((2, 4, 11, 9), (6, 2, 3, 3), 2, 5, (5, 3), 2, False),
    # 37 output columns (a prime), channels last on CPU: computed as 40, the last 3 read from zeros, cut off
    ((1, 3, 9, 79), (96, 3, 7, 7), 2, 0, 1, 1, True),
    ((1, 3, 6, 5), (4, 3, 3, 2), 1, ((1, 2), (0, 3)), 1, 1, True),  # (before, after) per dim (ONNX's pads)
    ((1, 3, 4, 4), (2, 3, 3, 3), 1, ((0, 8), (8, 0)), 4, 1, False),  # one-sided, past the input: taps dropped
]


@pytest.mark.parametrize("number", range(len(CONV2D_CASES)))
def test_conv2d(number, device):
    x_shape, w_shape, stride, padding, dilation, groups, with_bias = CONV2D_CASES[number]
    # each case draws its own values: from the shared generator they would depend on which tests
    # ran before it in the same worker
    draw = np.random.default_rng(number)
    x, w = draw.standard_normal(x_shape, np.float32), draw.standard_normal(w_shape, np.float32)
    b = draw.standard_normal(w_shape[0], np.float32) if with_bias else None
    stride2 = (stride,) * 2 if isinstance(stride, int) else stride
    dilation2 = (dilation,) * 2 if isinstance(dilation, int) else dilation
    if padding == "same":
        pads = _same_pads(w_shape[2:], dilation2)
    elif padding == "valid":
        pads = [(0, 0)] * 2
    elif isinstance(padding, tuple) and isinstance(padding[0], tuple):
        pads = list(padding)
    else:
        pads = [(p, p) for p in ((padding,) * 2 if isinstance(padding, int) else padding)]
    out = F.conv2d(Tensor(x, device=device), Tensor(w, device=device),
                   Tensor(b, device=device) if with_bias else None, stride, padding, dilation, groups)
    close(out, conv_reference(x, w, b, stride2, pads, dilation2, groups))


def test_conv2d_with_a_weight_beyond_l2(device):
    """2^18 weight elements or more: on CPU each panel of output channels runs over all the output
    rows (codegen/opts.py convolution_panel). Sums of 2304 float32 terms: atol 1e-3 for values ~50."""
    draw = np.random.default_rng(0)
    x, w, b = (draw.standard_normal(shape, np.float32) for shape in ((1, 256, 5, 5), (256, 256, 3, 3), (256,)))
    out = F.conv2d(Tensor(x, device=device), Tensor(w, device=device), Tensor(b, device=device), padding=1)
    close(out, conv_reference(x, w, b, (1, 1), [(1, 1)] * 2, (1, 1), 1), atol=1e-3)


@pytest.mark.parametrize("w_shape, stride, dims", [((32, 64, 3, 3), 2, 2), ((16, 32, 4, 2, 2), 1, 3),
                                                   ((64, 96, 1, 1), 2, 2), ((32, 16, 1, 1), 2, 2)])
def test_a_convolution_computed_output_channels_last_has_the_gradients_of_the_other_layout(w_shape, stride, dims):
    """On CPU, a convolution with wide windows or a strided 1x1 one computes with its output channels
    last (nn/spatial.py `_output_channels_last_product`), and a 1x1 one over few positions as a matmul in
    panels (`_pointwise_product`); NPY keeps them in the middle, whose gradients the
    finite-difference tests check. All give the same values and gradients, in float64."""
    rng = np.random.default_rng(4)
    x_value = rng.standard_normal((2, w_shape[1]) + (5,) * dims)
    w_value, b_value = rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])
    projection = rng.standard_normal((2, w_shape[0]) + tuple((5 + 2 - k) // stride + 1 for k in w_shape[2:]))
    results = {}
    for device in ("CPU", "NPY"):
        x, w, b = (Tensor(value, device=device, requires_grad=True) for value in (x_value, w_value, b_value))
        convolution = F.conv2d if dims == 2 else F.conv3d
        out = convolution(x, w, b, stride=stride, padding=1)
        (out * Tensor(projection, device=device)).sum().backward()
        results[device] = [out.numpy(), x.grad.numpy(), w.grad.numpy(), b.grad.numpy()]
    for cpu, npy in zip(results["CPU"], results["NPY"]):
        np.testing.assert_allclose(cpu, npy, rtol=1e-10, atol=1e-10)
    pads = [(1, 1)] * dims
    np.testing.assert_allclose(results["CPU"][0], conv_reference(x_value, w_value, b_value, (stride,) * dims, pads,
                                                                 (1,) * dims, 1), rtol=1e-10, atol=1e-10)


def test_a_convolution_computed_output_channels_last_without_gradients_is_the_view_of_its_product():
    """Without gradients to record, the channels-last product is returned as its permuted view, with
    none of the views its gradient rule reads built beside it (six nodes a convolution, every call)."""
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((1, 64, 9, 9)).astype(np.float32), rng.standard_normal((32, 64, 3, 3)).astype(np.float32)
    with no_grad():
        out = F.conv2d(Tensor(x, device="CPU"), Tensor(w, device="CPU"), stride=2, padding=1)
    assert out.lazydata.op is Ops.PERMUTE
    close(out, conv_reference(x, w, None, (2, 2), [(1, 1)] * 2, (1, 1), 1), atol=1e-3)


def test_conv2d_unbatched_input(device):
    x, w, b = randn(2, 5, 5), randn(3, 2, 3, 3), randn(3)
    out = F.conv2d(Tensor(x, device=device), Tensor(w, device=device), Tensor(b, device=device), padding=1)
    close(out, conv_reference(x[None], w, b, (1, 1), [(1, 1)] * 2, (1, 1), 1)[0])


@pytest.mark.parametrize("stride, padding, dilation, groups, out_channels", [
    (1, 0, 1, 1, 6), (2, 2, 3, 2, 6), (1, "same", 2, 1, 6),
    (1, 6, 6, 1, 6),    # taps meeting the input at some outputs only: bands of outputs
    (1, 1, 1, 2, 32)])  # 16 output channels a group: channels last on CPU
def test_conv1d(stride, padding, dilation, groups, out_channels, device):
    x, w, b = randn(2, 4, 11), randn(out_channels, 4 // groups, 3), randn(out_channels)
    pads = _same_pads((3,), (dilation,)) if padding == "same" else [(padding, padding)]
    out = F.conv1d(Tensor(x, device=device), Tensor(w, device=device), Tensor(b, device=device),
                   stride, padding, dilation, groups)
    close(out, conv_reference(x, w, b, (stride,), pads, (dilation,), groups))


@pytest.mark.parametrize("stride, padding, dilation", [(1, 1, 1), ((2, 1, 2), (0, 1, 1), (1, 2, 1)),
                                                     (1, (1, 5, 4), (1, 5, 4))])  # taps dropped and bands
def test_conv3d(stride, padding, dilation, device):
    x, w, b = randn(1, 2, 5, 6, 5), randn(3, 2, 2, 3, 2), randn(3)
    stride3 = (stride,) * 3 if isinstance(stride, int) else stride
    padding3 = (padding,) * 3 if isinstance(padding, int) else padding
    dilation3 = (dilation,) * 3 if isinstance(dilation, int) else dilation
    out = F.conv3d(Tensor(x, device=device), Tensor(w, device=device), Tensor(b, device=device),
                   stride, padding, dilation)
    close(out, conv_reference(x, w, b, stride3, [(p, p) for p in padding3], dilation3, 1))


CONV_TRANSPOSE2D_CASES = [
    # input shape, weight shape, stride, padding, output_padding, groups, dilation, bias
    ((2, 3, 4, 5), (3, 2, 3, 3), 1, 0, 0, 1, 1, True),
    ((1, 2, 3, 4), (2, 3, 3, 3), 2, 1, 1, 1, 1, True),
    ((1, 4, 3, 3), (4, 1, 2, 3), (2, 3), (0, 1), (1, 0), 2, 1, False),
    ((1, 2, 4, 3), (2, 2, 3, 2), 1, 2, 0, 1, 2, True),
    ((1, 2, 5, 4), (2, 2, 2, 2), 2, 2, 0, 1, 1, True),   # padding beyond dilation*(k-1) crops the output
    ((1, 2, 3, 3), (2, 2, 2, 2), 3, 0, 2, 1, (1, 2), False),
]


@pytest.mark.parametrize("case", CONV_TRANSPOSE2D_CASES, ids=range(len(CONV_TRANSPOSE2D_CASES)))
def test_conv_transpose2d(case, device):
    x_shape, w_shape, stride, padding, output_padding, groups, dilation, with_bias = case
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    x, w = randn(*x_shape), randn(*w_shape)
    b = randn(w_shape[1] * groups) if with_bias else None
    out = F.conv_transpose2d(Tensor(x, device=device), Tensor(w, device=device),
                             Tensor(b, device=device) if with_bias else None,
                             stride, padding, output_padding, groups, dilation)
    expected = conv_transpose_reference(x, w, b, pair(stride), pair(padding), pair(output_padding), groups,
                                        pair(dilation))
    close(out, expected)


@pytest.mark.parametrize("stride, padding, output_padding, dilation", [(1, 0, 0, 1), (3, 1, 2, 2)])
def test_conv_transpose1d(stride, padding, output_padding, dilation, device):
    x, w, b = randn(2, 3, 5), randn(3, 2, 3), randn(2)
    out = F.conv_transpose1d(Tensor(x, device=device), Tensor(w, device=device), Tensor(b, device=device),
                             stride, padding, output_padding, 1, dilation)
    close(out, conv_transpose_reference(x, w, b, (stride,), (padding,), (output_padding,), 1, (dilation,)))


def test_conv2d_forward_with_bias_is_one_kernel():
    x = Tensor(randn(2, 3, 10, 9)).realize()
    w = Tensor(randn(4, 3, 3, 3)).realize()
    b = Tensor(randn(4)).realize()
    for kwargs in ({"padding": 1}, {"stride": 2, "dilation": 2, "padding": (2, 1)}):
        stats.reset()
        out = F.conv2d(x, w, b, **kwargs).realize()
        assert stats.kernels == 1, kwargs
        assert np.isfinite(out.numpy()).all()


def test_a_dilated_convolution_whose_taps_meet_the_input_at_some_outputs_runs_in_bands():
    """DeepLabV3's dilation of 12 at 20x20: each outer tap meets the input at 8 of the 20 outputs
    along its dim, so the outputs split into bands (nn/spatial.py `_band_split`), each reading only
    the taps that meet it: 9 products of 36% of the multiply-adds of the whole one, stored as one
    value. A dilation of 2 stays one product. With a gradient to record, one product too. Values
    match numpy's."""
    from lazygrad.schedule.fuse import create_schedule
    draw = np.random.default_rng(14)
    x, w = draw.standard_normal((1, 16, 20, 20), np.float32), draw.standard_normal((16, 16, 3, 3), np.float32)
    for dilation, trained, products, terms in ((12, False, 9, True), (2, False, 1, None),
                                               (12, True, 1, None)):
        weight = Tensor(w, requires_grad=trained)
        out = F.conv2d(Tensor(x), weight, padding=dilation, dilation=dilation)
        kernels = [item.kernel for item in create_schedule([out.lazydata]) if item.kernel is not None
                   and item.kernel.reduce_axes]
        assert len(kernels) == products
        if terms is not None:
            multiply_adds = sum(math.prod(kernel.full_shape) for kernel in kernels)
            assert multiply_adds == 20 * 20 * 16 * 16 * 9 * 36 // 100, multiply_adds
            # the bands are stored as one value: what reads it tests no band's bounds
            items = [item for item in create_schedule([out.relu().lazydata]) if item.kernel is not None]
            loads = [node.arg[1] for node in items[-1].kernel.ast.walk() if node.op is Ops.LOAD]
            assert len(loads) == 1 and all(view.mask is None for view in loads[0].views), loads
        close(out, conv_reference(x, w, None, (1, 1), [(dilation, dilation)] * 2, (dilation, dilation), 1), atol=1e-3)
    # undilated on a 3x3 map, its corner taps meet the input at 2 of 3 outputs: one product, not 9 bands
    small = x[:, :, :3, :3].copy()
    out = F.conv2d(Tensor(small), Tensor(w), padding=1)
    assert len([item for item in create_schedule([out.lazydata]) if item.kernel is not None
                and item.kernel.reduce_axes]) == 1
    close(out, conv_reference(small, w, None, (1, 1), [(1, 1)] * 2, (1, 1), 1), atol=1e-3)


def test_a_dilated_convolution_reaching_past_the_input_multiplies_only_the_taps_that_meet_it():
    """DeepLabV3's atrous pyramid at 20x20: 3x3 taps 24 apart, each past the input from every output
    but the center one, which reads the input unpadded (nn/spatial.py `_without_padding_taps`): the
    product sums over the channels alone, one term in nine, with or without a gradient to record;
    at a dilation of 2 every tap meets the input at every output, and all nine stay. Values match
    numpy's convolution."""
    from lazygrad.schedule.fuse import create_schedule
    draw = np.random.default_rng(11)
    x, w = draw.standard_normal((1, 16, 20, 20), np.float32), draw.standard_normal((16, 16, 3, 3), np.float32)
    for dilation, terms, trained in ((24, 16, False), (24, 16, True), (2, 16 * 9, False)):
        out = F.conv2d(Tensor(x), Tensor(w, requires_grad=trained), padding=dilation, dilation=dilation)
        (kernel,) = [item.kernel for item in create_schedule([out.lazydata]) if item.kernel is not None
                     and item.kernel.reduce_axes]
        assert math.prod(kernel.full_shape[axis] for axis in kernel.reduce_axes) == terms, kernel.full_shape
        close(out, conv_reference(x, w, None, (1, 1), [(dilation, dilation)] * 2, (dilation, dilation), 1), atol=1e-3)


# ---- pooling -------------------------------------------------------------------------------------

MAX_POOL2D_CASES = [
    # input shape, kernel, stride, padding, dilation, ceil_mode
    ((2, 3, 8, 8), 2, None, 0, 1, False),
    ((1, 2, 7, 9), 3, 2, 1, 1, False),
    ((1, 2, 7, 9), 3, 2, 1, 1, True),
    ((1, 2, 9, 8), (3, 2), (2, 1), (1, 0), (2, 3), False),
    ((1, 1, 6, 7), 2, 3, 0, 1, True),      # windows apart; ceil mode adds a partial window
    ((3, 5, 5), 3, 1, 1, 1, False),        # unbatched
]


@pytest.mark.parametrize("case", MAX_POOL2D_CASES, ids=range(len(MAX_POOL2D_CASES)))
def test_max_pool2d(case, device):
    shape, kernel, stride, padding, dilation, ceil_mode = case
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    x = randn(*shape)
    batched = x if x.ndim == 4 else x[None]
    expected = max_pool_reference(batched, pair(kernel), pair(stride if stride is not None else kernel),
                                  pair(padding), pair(dilation), ceil_mode)
    out = F.max_pool2d(Tensor(x, device=device), kernel, stride, padding, dilation, ceil_mode)
    close(out, expected if x.ndim == 4 else expected[0], rtol=0, atol=0)


def test_max_pool2d_integer_input(device):
    x = rng.integers(-100, 100, size=(1, 2, 5, 5)).astype(np.int32)
    out = F.max_pool2d(Tensor(x, device=device), 3, 2, padding=1)
    assert out.dtype == dtypes.int32
    np.testing.assert_array_equal(out.numpy(), max_pool_reference(x, (3, 3), (2, 2), (1, 1), (1, 1), False))


@pytest.mark.parametrize("kernel, stride, padding, dilation, ceil_mode", [(2, None, 0, 1, False), (3, 2, 1, 2, True)])
def test_max_pool1d(kernel, stride, padding, dilation, ceil_mode, device):
    x = randn(2, 3, 12)
    expected = max_pool_reference(x, (kernel,), (stride or kernel,), (padding,), (dilation,), ceil_mode)
    out = F.max_pool1d(Tensor(x, device=device), kernel, stride, padding, dilation, ceil_mode)
    close(out, expected, rtol=0, atol=0)


AVG_POOL2D_CASES = [
    # input shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    ((2, 3, 8, 8), 2, None, 0, False, True, None),
    ((1, 2, 7, 9), 3, 2, 1, False, True, None),
    ((1, 2, 7, 9), 3, 2, 1, False, False, None),
    ((1, 2, 7, 8), (3, 2), (2, 3), (1, 1), True, True, None),
    ((1, 2, 7, 8), (3, 2), (2, 3), (1, 1), True, False, None),
    ((1, 2, 6, 6), 3, 3, 0, False, True, 4),
]


@pytest.mark.parametrize("case", AVG_POOL2D_CASES, ids=range(len(AVG_POOL2D_CASES)))
def test_avg_pool2d(case, device):
    shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override = case
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    x = randn(*shape)
    expected = avg_pool_reference(x, pair(kernel), pair(stride if stride is not None else kernel), pair(padding),
                                  ceil_mode, count_include_pad, divisor_override)
    out = F.avg_pool2d(Tensor(x, device=device), kernel, stride, padding, ceil_mode, count_include_pad,
                       divisor_override)
    close(out, expected)


@pytest.mark.parametrize("kernel, stride, padding, ceil_mode, count_include_pad", [(3, 1, 1, False, False),
                                                                                  (2, 3, 1, True, True)])
def test_avg_pool1d(kernel, stride, padding, ceil_mode, count_include_pad, device):
    x = randn(2, 3, 10)
    expected = avg_pool_reference(x, (kernel,), (stride,), (padding,), ceil_mode, count_include_pad)
    close(F.avg_pool1d(Tensor(x, device=device), kernel, stride, padding, ceil_mode, count_include_pad), expected)


def adaptive_avg_pool2d_reference(x, out_h, out_w):
    out = np.zeros(x.shape[:2] + (out_h, out_w))
    height, width = x.shape[2:]
    for i in range(out_h):
        h0, h1 = math.floor(i * height / out_h), math.ceil((i + 1) * height / out_h)
        for j in range(out_w):
            w0, w1 = math.floor(j * width / out_w), math.ceil((j + 1) * width / out_w)
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].astype(np.float64).mean(axis=(2, 3))
    return out


@pytest.mark.parametrize("shape, output_size", [((2, 3, 8, 6), (4, 3)), ((1, 2, 7, 10), (3, 4)),
                                                ((1, 2, 9, 5), (None, 3)), ((2, 6, 6), 1)])
def test_adaptive_avg_pool2d(shape, output_size, device):
    x = randn(*shape)
    batched = x if x.ndim == 4 else x[None]
    sizes = (output_size, output_size) if isinstance(output_size, int) else output_size
    out_h, out_w = (size if out is None else out for size, out in zip(batched.shape[2:], sizes))
    expected = adaptive_avg_pool2d_reference(batched, out_h, out_w)
    close(F.adaptive_avg_pool2d(Tensor(x, device=device), output_size), expected if x.ndim == 4 else expected[0])


# ---- interpolation -------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, size, scale_factor", [((1, 2, 4, 5), None, 2), ((1, 2, 6, 5), (4, 7), None),
                                                       ((1, 1, 5, 4), None, (1.3, 0.75)), ((2, 3, 7), None, 3),
                                                       ((1, 1, 2, 3, 4), (3, 3, 2), None)])
def test_interpolate_nearest(shape, size, scale_factor, device):
    x = randn(*shape)
    dims = x.ndim - 2
    if size is not None:
        outputs, scales = size, (None,) * dims
    else:
        factors = (scale_factor,) * dims if isinstance(scale_factor, (int, float)) else scale_factor
        outputs = tuple(math.floor(s * f) for s, f in zip(shape[2:], factors))
        scales = factors
    sources = [[nearest_source(j, shape[2 + d], outputs[d], scales[d]) for j in range(outputs[d])] for d in range(dims)]
    expected = x[np.ix_(range(shape[0]), range(shape[1]), *sources)]
    out = F.interpolate(Tensor(x, device=device), size=size, scale_factor=scale_factor, mode="nearest")
    close(out, expected, rtol=0, atol=0)


@pytest.mark.parametrize("size, scale_factor, align_corners", [((7, 9), None, False), ((7, 9), None, True),
                                                               (None, 2, False), ((3, 2), None, False),
                                                               (None, (1.7, 0.6), False), ((1, 4), None, True)])
def test_interpolate_bilinear(size, scale_factor, align_corners, device):
    x = randn(2, 3, 4, 5)
    if size is not None:
        out_h, out_w = size
        scales = (None, None)
    else:
        factors = (scale_factor,) * 2 if isinstance(scale_factor, (int, float)) else scale_factor
        out_h, out_w = (math.floor(s * f) for s, f in zip(x.shape[2:], factors))
        scales = factors
    out = F.interpolate(Tensor(x, device=device), size=size, scale_factor=scale_factor, mode="bilinear",
                        align_corners=align_corners)
    close(out, bilinear_reference(x, out_h, out_w, align_corners, scales))


def test_interpolate_linear_and_trilinear(device):
    x = randn(2, 3, 5)
    expected = np.zeros((2, 3, 8))
    for j in range(8):
        i0, i1, weight = linear_source(j, 5, 8, None, False)
        expected[:, :, j] = (1 - weight) * x[:, :, i0] + weight * x[:, :, i1]
    close(F.interpolate(Tensor(x, device=device), size=8, mode="linear"), expected)
    volume = randn(1, 1, 2, 3, 2)
    out = F.interpolate(Tensor(volume, device=device), scale_factor=2, mode="trilinear", align_corners=True)
    expected = np.zeros((1, 1, 4, 6, 4))
    for position in np.ndindex(4, 6, 4):
        sources = [linear_source(p, n, 2 * n, 2.0, True) for p, n in zip(position, (2, 3, 2))]
        for corner in np.ndindex(2, 2, 2):
            index = tuple(source[c] for source, c in zip(sources, corner))
            weight = math.prod(s[2] if c else 1 - s[2] for s, c in zip(sources, corner))
            expected[(0, 0) + position] += weight * volume[(0, 0) + index]
    close(out, expected)


def cubic_weights(t):
    """Keys' cubic convolution weights (A = -0.75) of the taps at offsets -1, 0, 1, 2 for fraction t."""
    a = -0.75
    near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1  # noqa: E731
    far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a  # noqa: E731
    return far(t + 1), near(t), near(1 - t), far(2 - t)


def test_interpolate_bicubic(device):
    """Each output is a weighted sum of a 4 x 4 neighbourhood whose indices clamp at the edges; the source
    position is not clamped to 0 (unlike bilinear)."""
    x = randn(1, 2, 5, 6)
    for size, align_corners in (((7, 4), False), ((3, 9), True)):
        expected = np.zeros((1, 2) + size)
        for oy, ox in np.ndindex(*size):
            taps = []
            for out, n, count in ((oy, size[0], 5), (ox, size[1], 6)):
                if align_corners:
                    source = out * (count - 1) / (n - 1)
                else:
                    source = (out + 0.5) * count / n - 0.5
                base = math.floor(source)
                taps.append([(min(max(base + k, 0), count - 1), w)
                             for k, w in zip((-1, 0, 1, 2), cubic_weights(source - base))])
            for (iy, wy), (ix, wx) in itertools.product(*taps):
                expected[0, :, oy, ox] += wy * wx * x[0, :, iy, ix]
        out = F.interpolate(Tensor(x, device=device), size=size, mode="bicubic", align_corners=align_corners)
        close(out, expected)


def test_interpolate_area_averages_adaptive_windows(device):
    x = randn(2, 3, 7, 5)
    expected = np.zeros((2, 3, 3, 2))
    for oy, ox in np.ndindex(3, 2):
        rows = slice(oy * 7 // 3, -(-(oy + 1) * 7 // 3))
        columns = slice(ox * 5 // 2, -(-(ox + 1) * 5 // 2))
        expected[:, :, oy, ox] = x[:, :, rows, columns].mean(axis=(2, 3))
    close(F.interpolate(Tensor(x, device=device), size=(3, 2), mode="area"), expected)


def test_interpolate_nearest_exact_rounds_to_the_nearest_source(device):
    x = randn(2, 3, 9)
    sources = [min(math.floor((j + 0.5) * 9 / 4), 8) for j in range(4)]
    close(F.interpolate(Tensor(x, device=device), size=4, mode="nearest-exact"), x[:, :, sources], rtol=0, atol=0)
    sources = [min(math.floor((j + 0.5) / 1.5), 8) for j in range(13)]
    close(F.interpolate(Tensor(x, device=device), scale_factor=1.5, mode="nearest-exact"), x[:, :, sources],
          rtol=0, atol=0)


@pytest.mark.parametrize("shape, arguments", [((1, 2, 5, 7), dict(size=(8, 3), mode="bicubic")),
                                              ((1, 2, 5, 7), dict(scale_factor=(0.6, 2.3), mode="bicubic",
                                                                  align_corners=True)),
                                              ((1, 1, 4, 6, 5), dict(size=(2, 4, 3), mode="area")),
                                              ((1, 1, 3, 4, 5), dict(scale_factor=1.5, mode="nearest-exact"))])
def test_interpolate_modes_agree_with_pytorch(shape, arguments):
    torch = pytest.importorskip("torch", reason="torch is not installed: interpolate is not compared with PyTorch")
    x = np.random.default_rng(4).standard_normal(shape)
    expected = torch.nn.functional.interpolate(torch.tensor(x), **arguments).numpy()
    close(F.interpolate(Tensor(x), **arguments), expected, rtol=1e-12, atol=1e-12)


def test_interpolate_nearest_integer_factor_is_a_view():
    x = Tensor(randn(1, 2, 3, 4)).realize()
    stats.reset()
    F.interpolate(x, scale_factor=3).realize()
    assert stats.kernels == 1


# ---- linear, dropout, embedding ------------------------------------------------------------------

@pytest.mark.parametrize("shape, with_bias", [((3, 5), True), ((2, 3, 5), False)])
def test_linear(shape, with_bias, device):
    x, w, b = randn(*shape), randn(4, 5), randn(4)
    out = F.linear(Tensor(x, device=device), Tensor(w, device=device), Tensor(b, device=device) if with_bias else None)
    close(out, x.astype(np.float64) @ w.T + (b if with_bias else 0))


def test_dropout(device):
    x = Tensor(np.ones((40, 50), dtype=np.float32), device=device)
    assert F.dropout(x, 0.4, training=False) is x
    manual_seed(7)
    draws = Tensor.rand(40, 50).numpy()
    manual_seed(7)
    out = F.dropout(x, 0.4).numpy()
    np.testing.assert_allclose(out, np.where(draws >= 0.4, 1 / 0.6, 0.0), rtol=1e-6)
    assert 0.3 < (out == 0).mean() < 0.5
    np.testing.assert_array_equal(F.dropout(x, 1.0).numpy(), np.zeros((40, 50)))
    with pytest.raises(ValueError, match="dropout: probability has to be between 0 and 1, but got 1.5"):
        F.dropout(x, 1.5)


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32, np.uint8])
def test_embedding(index_dtype, device):
    weight = randn(10, 4)
    indices = np.array([[1, 0, 9], [4, 4, 2]], dtype=index_dtype)
    out = F.embedding(Tensor(indices, device=device), Tensor(weight, device=device))
    close(out, weight[indices.astype(np.int64)], rtol=0, atol=0)


@pytest.mark.parametrize("rows", [6, 300], ids=["more tokens than rows", "fewer tokens than rows"])
def test_embedding_gradient_sums_each_rows_tokens(rows, device):
    """Each row's gradient is the sum of the gradients of the tokens that read it (repeated tokens
    added, indices outside the table reading and receiving nothing, the padding row none), whether
    summed over every row directly or, with fewer tokens than rows, per distinct token first. A NaN
    in one token's gradient stays in its own row, as PyTorch's index_add keeps it."""
    indices = np.array([[3, 1, 3, 5], [0, 3, -2, rows + 4], [5, 5, 1, 2]])
    grad = randn(3, 4, 7)
    grad[2, 3, 1] = np.nan  # row 2's token
    weight = Tensor(randn(rows, 7), device=device, requires_grad=True)
    F.embedding(Tensor(indices, device=device), weight, padding_idx=1).backward(Tensor(grad, device=device))
    expected = np.zeros((rows, 7))
    for token, row in np.ndenumerate(indices):
        if 0 <= row < rows and row != 1:
            expected[row] += grad[token]
    np.testing.assert_allclose(weight.grad.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_embedding_gradient_of_a_large_table_tests_each_token_against_each_token_not_each_row():
    """A language model's embedding gradient, few tokens against a large vocabulary: no kernel
    iterates over rows x tokens x width elements (the sum over every row did: GPT-2's 50257 x 512
    x 768, 279 ms of a training step at 2 threads)."""
    from lazygrad.schedule.fuse import create_schedule
    rows, tokens, width = 4096, 64, 32
    indices = np.random.default_rng(3).integers(0, rows, tokens)
    weight = Tensor(randn(rows, width), requires_grad=True)
    grad = randn(tokens, width)
    F.embedding(Tensor(indices), weight).backward(Tensor(grad))
    kernels = [item.kernel for item in create_schedule([weight.grad.lazydata]) if item.kernel is not None]
    assert max(math.prod(kernel.full_shape) for kernel in kernels) < rows * tokens * width // 8
    expected = np.zeros((rows, width))
    np.add.at(expected, indices, grad)
    np.testing.assert_allclose(weight.grad.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_embedding_padding_row_gets_no_gradient():
    weight = Tensor(randn(5, 3), requires_grad=True)
    F.embedding(Tensor([[0, 2, 2], [4, 2, 1]]), weight, padding_idx=2).sum().backward()
    np.testing.assert_array_equal(weight.grad.numpy()[:, 0], [1, 1, 0, 0, 1])


# ---- normalization -------------------------------------------------------------------------------

def normalize_reference(x, axes, eps):
    x = x.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)


@pytest.mark.parametrize("normalized_shape, affine", [(5, False), ((3, 5), True)])
def test_layer_norm(normalized_shape, affine, device):
    x = randn(2, 3, 5) * 3 + 1
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    w, b = randn(*shape), randn(*shape)
    out = F.layer_norm(Tensor(x, device=device), normalized_shape, Tensor(w, device=device) if affine else None,
                       Tensor(b, device=device) if affine else None, eps=1e-3)
    expected = normalize_reference(x, tuple(range(3 - len(shape), 3)), 1e-3)
    close(out, expected * w + b if affine else expected)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4, 5)])
def test_batch_norm_training_normalizes_and_updates_running_stats(shape, device):
    x = randn(*shape) * 2 + 0.5
    w, b = randn(3), randn(3)
    running_mean, running_var = randn(3), np.abs(randn(3)) + 0.5
    mean_tensor, var_tensor = Tensor(running_mean, device=device), Tensor(running_var, device=device)
    out = F.batch_norm(Tensor(x, device=device), mean_tensor, var_tensor, Tensor(w, device=device),
                       Tensor(b, device=device), training=True, momentum=0.2, eps=1e-4)
    axes = (0,) + tuple(range(2, x.ndim))
    per_channel = (1, 3) + (1,) * (x.ndim - 2)
    close(out, normalize_reference(x, axes, 1e-4) * w.reshape(per_channel) + b.reshape(per_channel))
    count = x.size // 3
    batch = x.astype(np.float64)
    close(mean_tensor, 0.8 * running_mean + 0.2 * batch.mean(axis=axes))
    close(var_tensor, 0.8 * running_var + 0.2 * batch.var(axis=axes) * count / (count - 1))
    assert mean_tensor.dtype == dtypes.float32 and not mean_tensor.requires_grad


def test_batch_norm_eval_uses_running_stats(device):
    x, w, b = randn(2, 3, 4), randn(3), randn(3)
    running_mean, running_var = randn(3), np.abs(randn(3)) + 0.5
    out = F.batch_norm(Tensor(x, device=device), Tensor(running_mean, device=device),
                       Tensor(running_var, device=device), Tensor(w, device=device), Tensor(b, device=device))
    column = lambda v: v.reshape(1, 3, 1)  # noqa: E731
    expected = (x - column(running_mean)) / np.sqrt(column(running_var) + 1e-5) * column(w) + column(b)
    close(out, expected)


def test_group_norm(device):
    x, w, b = randn(2, 6, 3, 2) * 2, randn(6), randn(6)
    out = F.group_norm(Tensor(x, device=device), 3, Tensor(w, device=device), Tensor(b, device=device))
    grouped = normalize_reference(x.reshape(2, 3, -1), (2,), 1e-5).reshape(x.shape)
    close(out, grouped * w.reshape(1, 6, 1, 1) + b.reshape(1, 6, 1, 1))


def test_rms_norm(device):
    x, w = randn(2, 3, 4), randn(4)
    out = F.rms_norm(Tensor(x, device=device), 4, Tensor(w, device=device))
    x64 = x.astype(np.float64)
    eps = np.finfo(np.float32).eps
    close(out, x64 / np.sqrt((x64 ** 2).mean(axis=-1, keepdims=True) + eps) * w)


# ---- attention -----------------------------------------------------------------------------------

def attention_reference(q, k, v, mask=None, scale=None):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float", "causal"])
def test_scaled_dot_product_attention(mask_kind, device):
    q, k, v = randn(2, 3, 4, 5), randn(2, 3, 6, 5), randn(2, 3, 6, 7)
    mask = {"none": None, "bool": rng.random((4, 6)) < 0.7, "float": randn(4, 6),
            "causal": np.tril(np.ones((4, 6), dtype=bool))}[mask_kind]
    if mask is not None and mask.dtype == bool:
        mask[:, 0] = True  # no row fully masked
    scale = 0.3 if mask_kind == "float" else None
    out = F.scaled_dot_product_attention(
        Tensor(q, device=device), Tensor(k, device=device), Tensor(v, device=device),
        attn_mask=Tensor(mask, device=device) if mask is not None and mask_kind != "causal" else None,
        is_causal=mask_kind == "causal", scale=scale)
    close(out, attention_reference(q, k, v, mask, scale))


# ---- losses --------------------------------------------------------------------------------------

CROSS_ENTROPY_CASES = [
    # logits shape, target dtype, weighted, ignore_index, reduction, label_smoothing
    ((5, 4), np.int64, False, -100, "mean", 0.0),
    ((5, 4), np.int32, True, 2, "mean", 0.0),
    ((5, 4), np.uint8, True, 1, "mean", 0.2),
    ((2, 4, 3), np.int64, False, 0, "none", 0.1),
    ((2, 4, 3), np.int16, True, -100, "sum", 0.3),
    ((4,), np.int64, False, -100, "mean", 0.1),
]


@pytest.mark.parametrize("case", CROSS_ENTROPY_CASES, ids=range(len(CROSS_ENTROPY_CASES)))
def test_cross_entropy_class_indices(case, device):
    shape, target_dtype, weighted, ignore_index, reduction, label_smoothing = case
    logits = randn(*shape) * 3
    target_shape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    target = rng.integers(0, shape[1 if len(shape) > 1 else 0], size=target_shape).astype(target_dtype)
    if ignore_index == -100 and target.ndim and target_dtype != np.uint8:
        target.flat[1] = -100
    weight = np.abs(randn(shape[1 if len(shape) > 1 else 0])) + 0.1 if weighted else None
    out = F.cross_entropy(Tensor(logits, device=device), Tensor(target, device=device),
                          Tensor(weight, device=device) if weighted else None, ignore_index, reduction,
                          label_smoothing)
    close(out, cross_entropy_reference(logits, target, weight, ignore_index, reduction, label_smoothing))


@pytest.mark.parametrize("weighted, reduction, label_smoothing", [(False, "mean", 0.0), (True, "none", 0.25)])
def test_cross_entropy_probability_targets(weighted, reduction, label_smoothing, device):
    logits = randn(3, 5, 2)
    target = rng.random((3, 5, 2)).astype(np.float32)
    target /= target.sum(axis=1, keepdims=True)
    weight = np.abs(randn(5)) + 0.1 if weighted else None
    out = F.cross_entropy(Tensor(logits, device=device), Tensor(target, device=device),
                          Tensor(weight, device=device) if weighted else None, reduction=reduction,
                          label_smoothing=label_smoothing)
    close(out, cross_entropy_reference(logits, target, weight, reduction=reduction, label_smoothing=label_smoothing))


def test_cross_entropy_is_stable_for_large_logits(device):
    logits = np.array([[1000.0, 0.0, -1000.0], [0.0, 2000.0, 1.0]], dtype=np.float32)
    out = F.cross_entropy(Tensor(logits, device=device), Tensor(np.array([0, 2]), device=device), reduction="none")
    close(out, [0.0, 1999.0], rtol=1e-6)


def test_nll_loss(device):
    log_probs = log_softmax_reference(randn(6, 3), 1).astype(np.float32)
    target = np.array([0, 2, 1, 1, 0, 2])
    weight = np.array([0.5, 2.0, 1.0], dtype=np.float32)
    out = F.nll_loss(Tensor(log_probs, device=device), Tensor(target, device=device), Tensor(weight, device=device),
                     ignore_index=1)
    kept = target != 1
    picked = -log_probs[np.arange(6), target] * weight[target]
    close(out, picked[kept].sum() / weight[target][kept].sum())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy(reduction, device):
    probabilities = rng.uniform(0.02, 0.98, size=(3, 4)).astype(np.float32)
    probabilities[0, :2] = [0.0, 1.0]  # each log clamped at -100
    target = rng.random((3, 4)).astype(np.float32)
    weight = rng.random((4,)).astype(np.float32)
    p = probabilities.astype(np.float64)
    with np.errstate(divide="ignore"):
        loss = -(target * np.maximum(np.log(p), -100) + (1 - target) * np.maximum(np.log(1 - p), -100)) * weight
    out = F.binary_cross_entropy(Tensor(probabilities, device=device), Tensor(target, device=device),
                                 Tensor(weight, device=device), reduction)
    close(out, reduce_reference(loss, reduction))


@pytest.mark.parametrize("with_weights", [False, True])
def test_binary_cross_entropy_with_logits(with_weights, device):
    logits = np.concatenate([randn(3, 4) * 4, np.array([[80.0, -80.0, 0.0, 30.0]], dtype=np.float32)])
    target = rng.random((4, 4)).astype(np.float32)
    weight, pos_weight = rng.random((4,)).astype(np.float32), rng.uniform(0.5, 3, (4,)).astype(np.float32)
    x = logits.astype(np.float64)
    log_sigmoid = -np.logaddexp(0, -x)            # log(sigmoid(x))
    log_one_minus = -np.logaddexp(0, x)           # log(1 - sigmoid(x))
    loss = -((pos_weight if with_weights else 1) * target * log_sigmoid + (1 - target) * log_one_minus)
    loss = loss * (weight if with_weights else 1)
    out = F.binary_cross_entropy_with_logits(
        Tensor(logits, device=device), Tensor(target, device=device),
        Tensor(weight, device=device) if with_weights else None,
        pos_weight=Tensor(pos_weight, device=device) if with_weights else None)
    close(out, loss.mean())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses(reduction, device):
    x, y = randn(3, 5), randn(3, 5)
    tx, ty = Tensor(x, device=device), Tensor(y, device=device)
    d = x.astype(np.float64) - y
    close(F.mse_loss(tx, ty, reduction), reduce_reference(d * d, reduction))
    close(F.l1_loss(tx, ty, reduction), reduce_reference(np.abs(d), reduction))
    smooth = np.where(np.abs(d) < 0.7, 0.5 * d * d / 0.7, np.abs(d) - 0.35)
    close(F.smooth_l1_loss(tx, ty, reduction, beta=0.7), reduce_reference(smooth, reduction))
    close(F.smooth_l1_loss(tx, ty, reduction, beta=0.0), reduce_reference(np.abs(d), reduction))


def test_mismatched_regression_shapes_broadcast_with_a_warning():
    with pytest.warns(UserWarning, match=r"mse_loss: target of shape \(3, 1\) differs from input of shape \(3, 5\)"):
        out = F.mse_loss(Tensor(np.zeros((3, 5), np.float32)), Tensor(np.ones((3, 1), np.float32)))
    assert out.item() == 1.0


# ---- activations ---------------------------------------------------------------------------------

def _erf(values):
    return np.vectorize(math.erf)(values)


ACTIVATIONS = {
    # name: (call, float64 formula of PyTorch's definition)
    "relu": (F.relu, lambda x: np.maximum(x, 0)),
    "relu6": (F.relu6, lambda x: np.clip(x, 0, 6)),
    "leaky_relu": (lambda t: F.leaky_relu(t, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (lambda t: F.elu(t, 0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    "selu": (F.selu, lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x))),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "gelu_tanh": (lambda t: F.gelu(t, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    "silu": (F.silu, lambda x: x / (1 + np.exp(-x))),
    "mish": (F.mish, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    "softplus": (lambda t: F.softplus(t, beta=2.0, threshold=3.0),
                 lambda x: np.where(2 * x > 3, x, np.log1p(np.exp(2 * x)) / 2)),
    "softsign": (F.softsign, lambda x: x / (1 + np.abs(x))),
    "hardtanh": (lambda t: F.hardtanh(t, -0.5, 1.5), lambda x: np.clip(x, -0.5, 1.5)),
    "hardsigmoid": (F.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "sigmoid": (F.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (F.tanh, np.tanh),
    "softmax": (lambda t: F.softmax(t, dim=0), lambda x: np.exp(x) / np.exp(x).sum(axis=0, keepdims=True)),
    "log_softmax": (lambda t: F.log_softmax(t, dim=1), lambda x: log_softmax_reference(x, 1)),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations_match_pytorch_definitions(name, device):
    call, formula = ACTIVATIONS[name]
    x = randn(4, 5) * 3
    close(call(Tensor(x, device=device)), formula(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_softmax_without_dim_takes_pytorchs_implicit_dim():
    x = randn(2, 3)
    with pytest.warns(UserWarning, match="softmax: implicit dimension choice is deprecated"):
        out = F.softmax(Tensor(x))
    close(out, np.exp(x) / np.exp(x).sum(axis=1, keepdims=True))


def test_pad_and_one_hot(device):
    x = randn(2, 3, 4)
    tx = Tensor(x, device=device)
    close(F.pad(tx, (1, 2)), np.pad(x, [(0, 0), (0, 0), (1, 2)]), rtol=0, atol=0)
    expected = np.pad(x, [(0, 0), (2, 1), (1, 0)], constant_values=-3.0)
    close(F.pad(tx, (1, 0, 2, 1), value=-3.0), expected, rtol=0, atol=0)
    close(F.pad(tx, (2, 1), mode="reflect"), np.pad(x, [(0, 0), (0, 0), (2, 1)], mode="reflect"), rtol=0, atol=0)
    close(F.pad(tx, (1, 2), mode="replicate"), np.pad(x, [(0, 0), (0, 0), (1, 2)], mode="edge"), rtol=0, atol=0)
    close(F.pad(tx, (1, 2), mode="circular"), np.pad(x, [(0, 0), (0, 0), (1, 2)], mode="wrap"), rtol=0, atol=0)
    labels = np.array([[0, 3], [2, 1]])
    out = F.one_hot(Tensor(labels, device=device), 4)
    assert out.dtype == dtypes.int64
    np.testing.assert_array_equal(out.numpy(), np.eye(4, dtype=np.int64)[labels])


# ---- errors --------------------------------------------------------------------------------------

def _t(*shape, dtype=np.float32):
    return Tensor(np.zeros(shape, dtype=dtype))


ERRORS = [
    (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 2, 3, 3)), ValueError,
     r"conv2d: input of shape \(1, 3, 8, 8\) has 3 channels, but weight of shape \(4, 2, 3, 3\) with groups=1 "
     r"expects 2"),
    (lambda: F.conv2d(_t(1, 4, 8, 8), _t(3, 2, 3, 3), groups=2), ValueError,
     r"conv2d: out_channels 3 \(dim 0 of weight of shape \(3, 2, 3, 3\)\) is not divisible by groups=2"),
    (lambda: F.conv2d(_t(3, 8, 8, 8, 1), _t(4, 3, 3, 3)), ValueError,
     r"conv2d: expected a 3-D \(unbatched\) or 4-D \(batched\) input, got shape \(3, 8, 8, 8, 1\)"),
    (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3)), ValueError, r"conv2d: weight must be 4-D .* got shape \(4, 3, 3\)"),
    (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3, 3), _t(3)), ValueError,
     r"conv2d: bias must have shape \(4,\), got \(3,\)"),
    (lambda: F.conv2d(_t(1, 3, 2, 8), _t(4, 3, 3, 3)), ValueError,
     r"conv2d: input of shape \(1, 3, 2, 8\) \(spatial size \(2, 8\) after padding\) is smaller than the kernel's "
     r"extent \(3, 3\)"),
    (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3, 3), stride=2, padding="same"), ValueError,
     r"conv2d: padding='same' is not supported for strided convolutions"),
    (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3, 3), padding="full"), ValueError,
     r"conv2d: padding must be an int, a tuple of ints, 'same', 'valid' or a \(before, after\) pair per spatial "
     r"dim, got 'full'"),
    (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3, 3), padding=((1, 2), (0, -1))), ValueError,
     r"conv2d: padding given as pairs needs one \(before, after\) pair of ints >= 0 per spatial dim \(2\), got "
     r"\(\(1, 2\), \(0, -1\)\)"),
    (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3, 3), padding=((1, 2),)), ValueError,
     r"conv2d: padding given as pairs needs one \(before, after\) pair"),
    (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3, 3), stride=(1, 2, 3)), ValueError,
     r"conv2d: stride must be an int or a tuple of 2 ints, got \(1, 2, 3\)"),
    (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3, 3), dilation=0), ValueError, r"conv2d: dilation must be at least 1"),
    (lambda: F.conv2d(_t(1, 3, 8, 8, dtype=np.int32), _t(4, 3, 3, 3)), TypeError,
     r"conv2d: expected floating point \(or both integer\) input and weight, got int32 and float32"),
    (lambda: F.conv1d(_t(2, 3, 8), _t(4, 2, 3)), ValueError, r"conv1d: input of shape \(2, 3, 8\) has 3 channels"),
    (lambda: F.conv_transpose2d(_t(1, 3, 4, 4), _t(2, 3, 3, 3)), ValueError,
     r"conv_transpose2d: input of shape \(1, 3, 4, 4\) has 3 channels, but weight of shape \(2, 3, 3, 3\) with "
     r"groups=1 expects 2"),
    (lambda: F.conv_transpose2d(_t(1, 2, 4, 4), _t(2, 3, 3, 3), stride=2, output_padding=2), ValueError,
     r"conv_transpose2d: output_padding \(2, 2\) must be smaller than either stride \(2, 2\) or dilation \(1, 1\)"),
    (lambda: F.max_pool2d(_t(1, 1, 4, 4), 2, padding=2), ValueError,
     r"max_pool2d: padding \(2, 2\) must be at most half of kernel_size \(2, 2\)"),
    (lambda: F.max_pool2d(_t(1, 1, 2, 2), 3), ValueError, r"max_pool2d: input of shape \(1, 1, 2, 2\) is too small"),
    (lambda: F.max_pool2d(_t(1, 1, 4, 4), 2, return_indices=True), NotImplementedError,
     r"max_pool2d: return_indices=True is not supported"),
    (lambda: F.avg_pool2d(_t(1, 1, 4, 4, dtype=np.int32), 2), TypeError,
     r"avg_pool2d: expected a floating point input, got int32"),
    (lambda: F.avg_pool1d(_t(4, 4), (2, 2)), ValueError,
     r"avg_pool1d: kernel_size must be an int or a tuple of 1 ints"),
    (lambda: F.interpolate(_t(1, 1, 4, 4), scale_factor=2, mode="cubic"), ValueError,
     r"interpolate: mode must be one of 'nearest', 'nearest-exact', 'area', 'linear', 'bilinear', 'bicubic', "
     r"'trilinear', got 'cubic'"),
    (lambda: F.interpolate(_t(1, 4, 4), size=8, mode="bilinear"), ValueError,
     r"interpolate: mode 'bilinear' expects a 4-D input, got shape \(1, 4, 4\)"),
    (lambda: F.interpolate(_t(1, 4, 4), size=8, mode="bicubic"), ValueError,
     r"interpolate: mode 'bicubic' expects a 4-D input, got shape \(1, 4, 4\)"),
    (lambda: F.interpolate(_t(1, 1, 4, dtype=np.int32), size=2, mode="area"), TypeError,
     r"interpolate: mode 'area' expects a floating point input, got int32"),
    (lambda: F.interpolate(_t(1, 1, 4, 4)), ValueError, r"interpolate: give exactly one of size and scale_factor"),
    (lambda: F.interpolate(_t(1, 1, 4, 4), size=8, align_corners=True), ValueError,
     r"interpolate: align_corners can only be set with the interpolating modes"),
    (lambda: F.linear(_t(3, 5), _t(4, 6)), ValueError,
     r"linear: input of shape \(3, 5\) does not match weight of shape \(4, 6\): the last dim of input must be "
     r"in_features=6"),
    (lambda: F.layer_norm(_t(2, 3, 5), (3, 4)), ValueError,
     r"layer_norm: normalized_shape \(3, 4\) does not match the last dims of input of shape \(2, 3, 5\)"),
    (lambda: F.batch_norm(_t(1, 3), None, None, training=True), ValueError,
     r"batch_norm: expected more than 1 value per channel when training, got input of shape \(1, 3\)"),
    (lambda: F.batch_norm(_t(4, 3), _t(2), _t(3)), ValueError,
     r"batch_norm: running_mean must have shape \(3,\), got \(2,\)"),
    (lambda: F.group_norm(_t(2, 6, 4), 4), ValueError,
     r"group_norm: num_groups=4 must divide the 6 channels of input of shape \(2, 6, 4\)"),
    (lambda: F.scaled_dot_product_attention(_t(2, 4, 5), _t(2, 6, 3), _t(2, 6, 5)), ValueError,
     r"scaled_dot_product_attention: query of shape \(2, 4, 5\) and key of shape \(2, 6, 3\) differ in embedding size"),
    (lambda: F.scaled_dot_product_attention(_t(2, 4, 5), _t(2, 6, 5), _t(2, 7, 5)), ValueError,
     r"scaled_dot_product_attention: key of shape \(2, 6, 5\) and value of shape \(2, 7, 5\) differ in sequence "
     r"length"),
    (lambda: F.cross_entropy(_t(4, 3), _t(3, dtype=np.int64)), ValueError,
     r"cross_entropy: target of shape \(3,\) does not match input of shape \(4, 3\) \(expected target shape \(4,\)\)"),
    (lambda: F.cross_entropy(_t(4, 3), _t(4, 2)), ValueError,
     r"cross_entropy: probability target of shape \(4, 2\) must have the shape of input \(4, 3\)"),
    (lambda: F.cross_entropy(_t(4, 3), _t(4, dtype=np.int64), reduction="avg"), ValueError,
     r"cross_entropy: reduction must be 'mean', 'sum' or 'none', got 'avg'"),
    (lambda: F.cross_entropy(_t(4, 3), _t(4, dtype=np.int64), weight=_t(4)), ValueError,
     r"cross_entropy: weight must have shape \(3,\), got \(4,\)"),
    (lambda: F.cross_entropy(_t(4, 3), _t(4, dtype=bool)), TypeError,
     r"cross_entropy: class-index target must be an integer tensor, got bool"),
    (lambda: F.binary_cross_entropy(_t(4, 3), _t(4, 1)), ValueError,
     r"binary_cross_entropy: target of shape \(4, 1\) must have the same shape as input \(4, 3\)"),
    (lambda: F.binary_cross_entropy_with_logits(_t(4), _t(3)), ValueError,
     r"binary_cross_entropy_with_logits: target of shape \(3,\) must have the same shape as input \(4,\)"),
    (lambda: F.cross_entropy(_t(4, 3, dtype=np.int32), _t(4, dtype=np.int64)), TypeError,
     r"cross_entropy: input must be floating point logits, got int32"),
    (lambda: F.embedding(_t(3), _t(5, 2)), TypeError, r"embedding: indices must be an integer tensor, got float32"),
]


@pytest.mark.parametrize("build, error, message", ERRORS, ids=range(len(ERRORS)))
def test_bad_arguments_raise_with_the_function_and_the_shapes(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_functions_are_also_tensor_methods():
    rng = np.random.default_rng(3)
    x = Tensor(rng.standard_normal((2, 3, 6, 6)).astype(np.float32))
    w = Tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    np.testing.assert_array_equal(x.conv2d(w, padding=1).numpy(), F.conv2d(x, w, padding=1).numpy())
    np.testing.assert_array_equal(x.max_pool2d(2).numpy(), F.max_pool2d(x, 2).numpy())
    logits = Tensor(rng.standard_normal((4, 5)).astype(np.float32))
    target = Tensor(np.array([0, 4, 2, 1]))
    np.testing.assert_array_equal(logits.cross_entropy(target).numpy(), F.cross_entropy(logits, target).numpy())


# ---- normalize, cosine_similarity ----------------------------------------------------------------------

def norm_reference(x, p, dim):
    x = np.abs(x.astype(np.float64))
    return x.max(axis=dim, keepdims=True) if p == math.inf else (x ** p).sum(axis=dim, keepdims=True) ** (1 / p)


@pytest.mark.parametrize("p, dim", [(2.0, 1), (1, -1), (3, (0, 2)), (math.inf, 1), (0.5, 2)])
def test_normalize(p, dim, device):
    x = randn(2, 3, 4)
    x[0, :, 0] = 0.0  # a zero vector along dim 1: divided by eps, stays 0
    close(F.normalize(Tensor(x, device=device), p=p, dim=dim), x / np.maximum(norm_reference(x, p, dim), 1e-12))


def test_cosine_similarity_broadcasts_and_holds_small_norms_at_eps(device):
    a, b = randn(2, 3, 5), randn(3, 5)
    b[1] = 1e-10  # its norm is below eps: divided by eps
    a[0, 2] = 0.0
    norms_a = np.maximum(norm_reference(a, 2, -1), 1e-8)
    norms_b = np.maximum(norm_reference(b, 2, -1), 1e-8)
    expected = ((a / norms_a) * (b / norms_b)).sum(-1)
    close(F.cosine_similarity(Tensor(a, device=device), Tensor(b, device=device), dim=-1), expected)
    ints = np.array([[1, 2, 2], [0, 3, 4]])
    result = F.cosine_similarity(Tensor(ints, device=device), Tensor(ints[::-1].copy(), device=device), dim=1)
    assert result.dtype == dtypes.float32
    close(result, np.array([14 / 15, 14 / 15]))


def test_normalize_and_cosine_similarity_gradients_at_a_zero_vector_are_pytorchs():
    """The norm of a zero vector has gradient 0 (not inf * 0): normalize's gradient there is 1 / eps,
    cosine_similarity's is the other unit vector over eps (values from PyTorch 2.13, float64)."""
    x = Tensor(np.array([[0.0, 0.0], [3.0, -4.0]]), requires_grad=True)
    F.normalize(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[1e12, 1e12], [0.224, 0.168]], rtol=1e-12)
    a = Tensor(np.array([[0.0, 0.0, 0.0]]), requires_grad=True)
    b = Tensor(np.array([[1.0, 1.0, 1.0]]), requires_grad=True)
    F.cosine_similarity(a, b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [[5.773502691896258e7] * 3], rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), [[0.0, 0.0, 0.0]])


def test_normalize_refuses_a_non_positive_p():
    with pytest.raises(ValueError, match="normalize: p must be a positive number"):
        F.normalize(Tensor(np.ones((2, 2), np.float32)), p=0)
