"""Convolution and pooling ONNX operators: Conv, ConvTranspose, ConvInteger, MaxPool, AveragePool, LpPool,
and the global pools.

Registered in registry.OPERATORS; model.py calls them. ONNX pads may differ before and after a dim
(and auto_pad chooses them), so the input is padded here and lazygrad's conv1d/2d/3d run unpadded.
Pools reduce the padded input's windows (nn.spatial.pool_windows, the view the nn pools read), so
a pool is a reduce kernel of its own that gets the same loop choices as F.max_pool2d.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.nn import functional as F
from lazygrad.nn.spatial import lowest_value, pool_windows, reduce_over_windows
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor
from lazygrad.ops import Ops

CONVOLUTIONS = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def spatial_padding(sizes, kernel, strides, dilations, pads, auto_pad: str, ceil_mode: int = 0):
    """(before, after) padding per spatial dim and the output sizes, from ONNX's pads or auto_pad."""
    dims = len(sizes)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        outputs = [-(-size // s) for size, s in zip(sizes, strides)]
        totals = [max((o - 1) * s + span - size, 0) for o, s, span, size in zip(outputs, strides, spans, sizes)]
        small = [total // 2 for total in totals]
        large = [total - half for total, half in zip(totals, small)]
        pairs = list(zip(small, large)) if auto_pad == "SAME_UPPER" else list(zip(large, small))
        return pairs, outputs
    pads = list(pads) if pads and auto_pad != "VALID" else [0] * (2 * dims)
    pairs = [(pads[i], pads[i + dims]) for i in range(dims)]
    outputs = []
    for size, (before, after), span, s in zip(sizes, pairs, spans, strides):
        room = size + before + after - span
        count = (-(-room // s) if ceil_mode else room // s) + 1
        if ceil_mode and (count - 1) * s >= size + before:
            count -= 1
        outputs.append(count)
    return pairs, outputs


def padded_input(x: Tensor, pairs, outputs, kernel, strides, dilations, value) -> Tensor:
    """x padded so every window of the output fits (ceil_mode may need more than the pads)."""
    full = []
    for size, (before, after), o, k, s, d in zip(x.shape[2:], pairs, outputs, kernel, strides, dilations):
        needed = (o - 1) * s + (k - 1) * d + 1
        full.append((before, max(after, needed - size - before)))
    return x.pad(((0, 0), (0, 0)) + tuple(full), value=value)


def exact_pads(x: Tensor, pairs, outputs, kernel, strides, dilations) -> list[tuple[int, int]]:
    """(before, after) per spatial dim that pad x to just the windows of the output (after cut
    where the pads reach beyond the last window, grown where ceil_mode needs more)."""
    return [(before, (o - 1) * s + (k - 1) * d + 1 - size - before)
            for size, (before, _), o, k, s, d in zip(x.shape[2:], pairs, outputs, kernel, strides, dilations)]


def windows(x: Tensor, outputs, kernel, strides, dilations) -> Tensor:
    """The padded input's windows as a view of shape x.shape[:2] + outputs + kernel: element
    [n, c, o..., k...] is x[n, c, o * stride + k * dilation]. Pads beyond the last window are cut."""
    view = pool_windows(x, kernel, strides, dilations)
    return view[(slice(None), slice(None)) + tuple(slice(0, o) for o in outputs)]


def window_axes(x: Tensor) -> tuple[int, ...]:
    """The kernel dims of `windows(x, ...)`, the ones a pool reduces."""
    dims = x.ndim - 2
    return tuple(range(2 + dims, 2 + 2 * dims))


def window_slices(x: Tensor, outputs, kernel, strides, dilations):
    """One view per kernel offset: element [n, c, o...] is x[n, c, o * stride + offset * dilation]."""
    for offset in itertools.product(*[range(k) for k in kernel]):
        index = [slice(None), slice(None)]
        for o, k, s, d in zip(outputs, offset, strides, dilations):
            start = k * d
            index.append(slice(start, start + (o - 1) * s + 1, s))
        yield x[tuple(index)]


def pool_geometry(x: Tensor, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode):
    dims = len(kernel_shape)
    strides = strides or [1] * dims
    dilations = dilations or [1] * dims
    pairs, outputs = spatial_padding(x.shape[2:], kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return strides, dilations, pairs, outputs


@onnx_op("MaxPool")
def max_pool(ctx, x, kernel_shape, strides=None, dilations=None, pads=None, auto_pad="NOTSET", ceil_mode=0,
             storage_order=0):
    strides, dilations, pairs, outputs = pool_geometry(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    result = reduce_over_windows(x, exact_pads(x, pairs, outputs, kernel_shape, strides, dilations), kernel_shape,
                                 strides, dilations, "max")
    if len(ctx.node.output) < 2:
        return result
    return result, max_pool_indices(x, result, kernel_shape, strides, dilations, pairs, outputs, storage_order)


def max_pool_indices(x, result, kernel, strides, dilations, pairs, outputs, storage_order):
    """The flat index (in the unpadded input) of each window's first maximum."""
    dims = x.ndim - 2
    flat = Tensor.arange(math.prod(x.shape), device=x.device)
    if storage_order:
        spatial = tuple(range(2 + dims - 1, 1, -1))
        flat = flat.reshape(x.shape[:2] + tuple(x.shape[d] for d in spatial)).permute((0, 1) + spatial)
    else:
        flat = flat.reshape(x.shape)
    lowest = lowest_value(x.dtype)
    padded = padded_input(x, pairs, outputs, kernel, strides, dilations, lowest)
    padded_index = padded_input(flat, pairs, outputs, kernel, strides, dilations, -1)
    best = None
    for window, index in zip(window_slices(padded, outputs, kernel, strides, dilations),
                             window_slices(padded_index, outputs, kernel, strides, dilations)):
        found = (window == result).logical_and(index >= 0)
        best = found.where(index, -1) if best is None else (best < 0).logical_and(found).where(index, best)
    return best.cast(dtypes.int64)


@onnx_op("AveragePool")
def average_pool(ctx, x, kernel_shape, strides=None, dilations=None, pads=None, auto_pad="NOTSET", ceil_mode=0,
                 count_include_pad=0):
    strides, dilations, pairs, outputs = pool_geometry(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    total = reduce_over_windows(x, exact_pads(x, pairs, outputs, kernel_shape, strides, dilations), kernel_shape,
                                strides, dilations, "sum")
    counts = window_counts(x.shape[2:], pairs, outputs, kernel_shape, strides, dilations, count_include_pad)
    if np.all(counts == counts.flat[0]):
        return total / float(counts.flat[0])
    return total / Tensor(counts.astype(x.dtype.np), device=x.device)


def window_counts(sizes, pairs, outputs, kernel, strides, dilations, include_pad) -> np.ndarray:
    """How many elements each window averages: those inside the input, or inside the pads too with
    include_pad (never the part a ceil_mode window reaches beyond the pads). A window's count is the
    product of its counts per dim."""
    counts = np.ones((), dtype=np.int64)
    for size, (before, after), o, k, s, d in zip(sizes, pairs, outputs, kernel, strides, dilations):
        low, high = (-before, size + after) if include_pad else (0, size)
        positions = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d - before
        counts = np.multiply.outer(counts, ((positions >= low) & (positions < high)).sum(1))
    return counts


@onnx_op("LpPool")
def lp_pool(ctx, x, kernel_shape, strides=None, dilations=None, pads=None, auto_pad="NOTSET", ceil_mode=0, p=2):
    strides, dilations, pairs, outputs = pool_geometry(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    padded = padded_input(x.abs() ** p, pairs, outputs, kernel_shape, strides, dilations, 0.0)
    return windows(padded, outputs, kernel_shape, strides, dilations).sum(window_axes(x)) ** (1.0 / p)


@onnx_op("GlobalAveragePool")
def global_average_pool(ctx, x):
    return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@onnx_op("GlobalMaxPool")
def global_max_pool(ctx, x):
    return x.max(tuple(range(2, x.ndim)), keepdim=True)


@onnx_op("GlobalLpPool")
def global_lp_pool(ctx, x, p=2):
    return (x.abs() ** p).sum(tuple(range(2, x.ndim)), keepdim=True) ** (1.0 / p)


def convolution(x: Tensor, w: Tensor, bias, strides, dilations, pairs, group: int) -> Tensor:
    dims = x.ndim - 2
    if dims not in CONVOLUTIONS:
        raise NotImplementedError(f"Conv with {dims} spatial dims (1 to 3 are supported)")
    if any(before < 0 or after < 0 for before, after in pairs):  # negative pads crop the input first
        x = x.pad(((0, 0), (0, 0)) + tuple((min(before, 0), min(after, 0)) for before, after in pairs))
        pairs = [(max(before, 0), max(after, 0)) for before, after in pairs]
    # the padding passed, not applied here: the convolution drops taps that read only padding
    padding = tuple(tuple(pair) for pair in pairs)
    if x.dtype == dtypes.float16:  # accumulate in float32, as numpy does for half products
        result = CONVOLUTIONS[dims](x.float(), w.float(), None if bias is None else bias.float(),
                                    stride=tuple(strides), padding=padding, dilation=tuple(dilations), groups=group)
        return result.half()
    return CONVOLUTIONS[dims](x, w, bias, stride=tuple(strides), padding=padding, dilation=tuple(dilations),
                              groups=group)


@onnx_op("Conv")
def conv(ctx, x, w, bias=None, kernel_shape=None, strides=None, dilations=None, pads=None, auto_pad="NOTSET",
         group=1):
    kernel = w.shape[2:]
    dims = len(kernel)
    strides, dilations = strides or [1] * dims, dilations or [1] * dims
    pairs, _ = spatial_padding(x.shape[2:], kernel, strides, dilations, pads, auto_pad)
    return convolution(x, w, bias, strides, dilations, pairs, group)


def integer_convolution(ctx, x, x_zero_point, w, w_zero_point, kernel_shape=None, strides=None, dilations=None,
                        pads=None, auto_pad="NOTSET", group=1) -> Tensor:
    """The int32 convolution of x - x_zero_point with w - w_zero_point (ConvInteger's, QLinearConv's).
    A uint8 x with an int8 w whose zero points are 0, one or one per output channel (ONNX Runtime's
    dynamic and static quantization) is F.byte_dot_conv2d's product, the input padded with its zero
    point, less x_zero_point times each output channel's weight sum; a grouped one of few terms a sum
    sums the centered bytes in float32, exactly; any other is an integer convolution of the centered
    operands."""
    if x.dtype == dtypes.uint8 and w.dtype == dtypes.int8 and w.ndim == 4 and group == 1 \
            and (x_zero_point is None or x_zero_point.numel() == 1) \
            and ctx.known_zeros(w_zero_point):
        strides, dilations = strides or [1, 1], dilations or [1, 1]
        pairs, _ = spatial_padding(x.shape[2:], w.shape[2:], strides, dilations, pads, auto_pad)
        if x_zero_point is None:
            return F.byte_dot_conv2d(x, w, strides, pairs, dilations)
        zero = ctx.number_or_scalar(x_zero_point)
        sums = F.byte_dot_conv2d(x, w, strides, pairs, dilations, padding_value=zero)
        weight_sums = w.cast(dtypes.int32)._reduce(Ops.SUM, (1, 2, 3), False, "ConvInteger").reshape(-1, 1, 1)
        return sums - (zero.cast(dtypes.int32) if isinstance(zero, Tensor) else int(zero)) * weight_sums
    bytes_ = (dtypes.uint8, dtypes.int8)
    if group > 1 and x.dtype in bytes_ and w.dtype in bytes_ and math.prod(w.shape[1:]) * 255 * 255 < 1 << 24:
        # a grouped convolution of few terms a sum (a depthwise one's 9): every partial sum of centered
        # bytes is an integer float32 holds exactly, so the float convolution (direct: Winograd takes
        # one group only) is exact, on its tiles: MobileNetV2 quantized by ONNX Runtime (QOperator)
        # 4.8 -> 2.4 ms, its depthwise layers int32 convolutions before
        zero = 0 if x_zero_point is None else ctx.number_or_scalar(x_zero_point)
        x = x.cast(dtypes.float32) - (zero.cast(dtypes.float32) if isinstance(zero, Tensor) else zero)
        shift = 0 if ctx.known_zeros(w_zero_point) else \
            w_zero_point.cast(dtypes.float32).reshape(-1, *([1] * (w.ndim - 1)))
        centered = conv(ctx, x, w.cast(dtypes.float32) - shift, None, kernel_shape, strides, dilations, pads,
                        auto_pad, group)
        return centered.cast(dtypes.int32)
    x = x.cast(dtypes.int32) - (0 if x_zero_point is None else x_zero_point.cast(dtypes.int32))
    shift = 0 if w_zero_point is None else w_zero_point.cast(dtypes.int32).reshape(-1, *([1] * (w.ndim - 1)))
    w = w.cast(dtypes.int32) - shift
    # stored centered first (the weight's a value kept between calls): computed inside the convolution's
    # tile, the subtraction kept it scalar (ResNet-18 quantized by ONNX Runtime, one thread: 430 ms)
    return conv(ctx, x.contiguous(), w.contiguous(), None, kernel_shape, strides, dilations, pads, auto_pad, group)


@onnx_op("ConvInteger")
def conv_integer(ctx, x, w, x_zero_point=None, w_zero_point=None, **attributes):
    return integer_convolution(ctx, x, x_zero_point, w, w_zero_point, **attributes)


@onnx_op("ConvTranspose")
def conv_transpose(ctx, x, w, bias=None, kernel_shape=None, strides=None, dilations=None, pads=None,
                   auto_pad="NOTSET", group=1, output_padding=None, output_shape=None):
    kernel = w.shape[2:]
    dims = len(kernel)
    strides, dilations = strides or [1] * dims, dilations or [1] * dims
    output_padding = output_padding or [0] * dims
    sizes = x.shape[2:]
    full = [(size - 1) * s + (k - 1) * d + 1 + extra
            for size, s, k, d, extra in zip(sizes, strides, kernel, dilations, output_padding)]
    if output_shape is not None:
        totals = [f - o for f, o in zip(full, output_shape[-dims:])]
        upper = auto_pad == "SAME_UPPER"
        pairs = [(t // 2, t - t // 2) if upper else (t - t // 2, t // 2) for t in totals]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        totals = [f - size * s for f, size, s in zip(full, sizes, strides)]
        pairs = [(t // 2, t - t // 2) if auto_pad == "SAME_UPPER" else (t - t // 2, t // 2) for t in totals]
    else:
        pads = pads or [0] * (2 * dims)
        pairs = [(pads[i], pads[i + dims]) for i in range(dims)]
    # the input spread out by stride (zeros between elements), padded by the kernel's span, then a plain
    # convolution with the flipped kernel whose in/out channels are swapped per group
    batch, channels = x.shape[:2]
    spread = x.reshape(batch, channels, *[v for size in sizes for v in (size, 1)])
    spread = spread.pad(((0, 0), (0, 0)) + tuple(p for s in strides for p in ((0, 0), (0, s - 1))))
    spread = spread.reshape(batch, channels, *[size * s for size, s in zip(sizes, strides)])
    edges = [(d * (k - 1) - before, d * (k - 1) - after + extra - (s - 1))
             for d, k, (before, after), extra, s in zip(dilations, kernel, pairs, output_padding, strides)]
    spread = spread.pad(((0, 0), (0, 0)) + tuple((max(a, 0), max(b, 0)) for a, b in edges))
    spread = spread.shrink((None, None) + tuple((max(-a, 0), spread.shape[2 + i] - max(-b, 0))
                                                for i, (a, b) in enumerate(edges)))
    per_group = w.shape[1]
    weight = w.reshape(group, channels // group, per_group, *kernel).transpose(1, 2)
    weight = weight.reshape(group * per_group, channels // group, *kernel).flip(tuple(range(2, 2 + dims)))
    return convolution(spread, weight, bias, [1] * dims, dilations, [(0, 0)] * dims, group)
