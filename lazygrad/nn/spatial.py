"""Convolution, pooling and resampling of (N, C, *spatial) tensors, for lazygrad.nn.functional.

Front-end layer: the functions compose Tensor methods only and are exported by
`lazygrad.nn.functional` under PyTorch's names (F.conv2d, F.max_pool2d, F.interpolate, ...).

Convolution and pooling read their input through a windowed view (`pool_windows`): the padded
input seen with shape (..., output positions..., kernel offsets...), where element [o, k] is
input[o * stride + k * dilation]. Movement ops never copy, so there is no im2col buffer: conv2d of
realized tensors, bias included, is one kernel whose loads index the input directly, except where a
convolution computes with its output channels last on CPU (`_output_channels_last_product`: its
weight copied into panels first, its epilogue a kernel of its own; a depthwise one,
`_depthwise_channels_last_product`, from a channels-last copy of its input). Resampling
(adaptive pooling, interpolation) applies a host-computed (out, in) matrix along one dim at a time.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from lazygrad.devices import device_kind
from lazygrad.dtype import dtypes
from lazygrad.lazy import LazyBuffer, reads_stored_in, stored_in_order, stored_out_of_order
from lazygrad.multi import first_shard
from lazygrad.parameter_values import kept_copy
from lazygrad.tensor import Tensor, no_grad
from lazygrad.tensor_methods.helpers import computes_in_float32
from lazygrad.tensor_methods.linalg import matmul_in_panels, packs_operands, panel_shape, product_with_panels, right_panels
from lazygrad.ops import Ops


# ---- argument checking -------------------------------------------------------------------------

def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _ints(value, count: int, name: str, argument: str, minimum: int = 0) -> tuple[int, ...]:
    """An int or a sequence of `count` ints (each >= minimum), as a tuple of `count` ints."""
    values = (value,) * count if _is_int(value) else tuple(value) if isinstance(value, (tuple, list)) else None
    if values is None or len(values) != count or not all(_is_int(v) for v in values):
        raise ValueError(f"{name}: {argument} must be an int or a tuple of {count} ints, got {value!r}")
    if any(v < minimum for v in values):
        raise ValueError(f"{name}: {argument} must be at least {minimum}, got {value!r}")
    return tuple(int(v) for v in values)


def _batched(name: str, input: Tensor, spatial_dims: int) -> tuple[Tensor, bool]:
    """(N, C, *spatial) as is, or an unbatched (C, *spatial) with a batch dim of 1 added."""
    if input.ndim == spatial_dims + 2:
        return input, False
    if input.ndim == spatial_dims + 1:
        return input.unsqueeze(0), True
    raise ValueError(f"{name}: expected a {spatial_dims + 1}-D (unbatched) or {spatial_dims + 2}-D (batched) "
                     f"input, got shape {input.shape}")


def _check_channel_vector(name: str, argument: str, tensor: Tensor | None, channels: int) -> None:
    if tensor is not None and tensor.shape != (channels,):
        raise ValueError(f"{name}: {argument} must have shape ({channels},), got {tensor.shape}")


def _interleave(first, second) -> tuple:
    """(a0, b0, a1, b1, ...) from (a0, a1, ...) and (b0, b1, ...)."""
    return tuple(itertools.chain.from_iterable(zip(first, second)))


# ---- windows: the view behind convolution and pooling ------------------------------------------

MAX_FOLD_TERMS = 49  # kernels up to 7x7 take their input gradient from _fold_windows


def pool_windows(x: Tensor, kernel, stride, dilation) -> Tensor:
    """The last len(kernel) dims of x as sliding windows: a view, nothing is copied.

    The result has shape x.shape[:-n] + outputs + kernel, where for each windowed dim
    outputs = (size - dilation * (kernel - 1) - 1) // stride + 1, and element [..., o..., k...] is
    x[..., o * stride + k * dilation, ...]. Callers pad x first and check that outputs >= 1.
    """
    n = len(kernel)
    batch, sizes = x.shape[:-n], x.shape[-n:]
    keep = (None,) * len(batch)
    no_padding = ((0, 0),) * len(batch)
    outputs = [(size - d * (k - 1) - 1) // s + 1 for size, k, s, d in zip(sizes, kernel, stride, dilation)]
    first = len(batch)
    if all(k == 1 and s == 1 for k, s in zip(kernel, stride)):  # each element its own window (a 1x1 convolution)
        return x.reshape(x.shape + (1,) * n)
    if all(k <= s and d == 1 for k, s, d in zip(kernel, stride, dilation)):
        # Windows that do not overlap: cut each dim to outputs*stride (padding never read, or
        # cropping unused tail), split it into (outputs, stride) and keep the first `kernel` columns.
        x = x.pad(no_padding + tuple((0, o * s - size) for o, s, size in zip(outputs, stride, sizes)))
        x = x.reshape(batch + _interleave(outputs, stride))
        x = x.shrink(keep + _interleave([(0, o) for o in outputs], [(0, k) for k in kernel]))
        output_axes = [first + 2 * i for i in range(n)]
        kernel_axes = [first + 2 * i + 1 for i in range(n)]
        return x.permute(tuple(range(first)) + tuple(output_axes) + tuple(kernel_axes))
    if x.requires_grad and Tensor.grad_enabled and math.prod(kernel) <= MAX_FOLD_TERMS:
        with no_grad():
            windows = pool_windows(x.detach(), kernel, stride, dilation)
        return windows._with_gradient((x,), lambda grad, *_: [_fold_windows(grad, sizes, stride, dilation)])
    # Overlapping windows: lay `repeats` copies of each dim end to end (an expand, then a reshape)
    # and read that as rows of length + dilation. Row k starts k*(length + dilation) into the copies,
    # that is at x[k * dilation], so column o*stride of row k is x[o*stride + k*dilation]. The dim is
    # first padded to `length` so every row has o*stride columns; the padding is never read.
    lengths = [max(size, o * s - d) for size, o, s, d in zip(sizes, outputs, stride, dilation)]
    repeats = [-(-k * (length + d) // length) for k, length, d in zip(kernel, lengths, dilation)]  # ceil
    x = x.pad(no_padding + tuple((0, length - size) for length, size in zip(lengths, sizes)))
    x = x.reshape(batch + _interleave((1,) * n, lengths))
    x = x.expand(batch + _interleave(repeats, lengths))
    x = x.reshape(batch + tuple(r * length for r, length in zip(repeats, lengths)))
    x = x.shrink(keep + tuple((0, k * (length + d)) for k, length, d in zip(kernel, lengths, dilation)))
    x = x.reshape(batch + _interleave(kernel, [length + d for length, d in zip(lengths, dilation)]))
    x = x.shrink(keep + _interleave([(0, k) for k in kernel], [(0, o * s) for o, s in zip(outputs, stride)]))
    if any(s > 1 for s in stride):  # split the columns into (outputs, stride) and keep column 0 of each stride
        x = x.reshape(batch + tuple(v for k, o, s in zip(kernel, outputs, stride) for v in (k, o, s)))
        x = x.shrink(keep + tuple(b for k, o in zip(kernel, outputs) for b in ((0, k), (0, o), (0, 1))))
        x = x.reshape(batch + _interleave(kernel, outputs))
    output_axes = [first + 2 * i + 1 for i in range(n)]
    kernel_axes = [first + 2 * i for i in range(n)]
    return x.permute(tuple(range(first)) + tuple(output_axes) + tuple(kernel_axes))


def _fold_windows(grad: Tensor, sizes, stride, dilation) -> Tensor:
    """The gradient of `pool_windows` with respect to x: each window element's gradient added back
    at the position it was read from, x[..., o * stride + k * dilation]. One shifted copy of the
    gradient per kernel offset, summed: plain index math, where differentiating the copies-and-
    reshapes view of `pool_windows` op by op reads through divisions and remainders. With a stride,
    the positions o * stride + r (a phase r of each strided axis) take the offsets whose
    k * dilation leaves remainder r, shifted by its quotient, on a grid `stride` times coarser;
    the phases are then interleaved once. Each offset interleaved with zeros, then summed, read
    every copy through three views with bounds (MobileNetV2's stride-2 depthwise convolutions at
    batch 16, 96 channels of 56x56: 19 ms for the gradient, 2 threads)."""
    n = len(sizes)
    lead = grad.ndim - 2 * n
    outputs, kernel = grad.shape[lead:lead + n], grad.shape[lead + n:]
    coarse = [-(-size // s) for size, s in zip(sizes, stride)]  # each phase's positions
    phases = {}
    for residues in itertools.product(*[range(s) for s in stride]):
        total = None
        for offsets in itertools.product(*[range(k) for k in kernel]):
            if any(k * d % s != r for k, d, s, r in zip(offsets, dilation, stride, residues)):
                continue
            part = grad[(slice(None),) * (lead + n) + offsets]  # batch + outputs
            padding = [(k * d // s, length - k * d // s - o)
                       for o, s, d, k, length in zip(outputs, stride, dilation, offsets, coarse)]
            part = part.pad(((0, 0),) * lead + tuple(padding))
            total = part if total is None else total + part
        if total is None:  # no offset reaches this phase (a kernel narrower than its stride)
            total = Tensor.zeros(grad.shape[:lead] + tuple(coarse), dtype=grad.dtype, device=grad.device)
        phases[residues] = total
    return _interleaved(phases, lead, tuple(stride), tuple(coarse), tuple(sizes))


def _interleaved(phases: dict, lead: int, stride: tuple, coarse: tuple, sizes: tuple) -> Tensor:
    """One grid from its phases (residues per axis -> values on the coarse grid): position
    q * stride + r of each axis from phase r's position q, then cut to `sizes`."""
    axis = len(stride) - 1
    while True:
        s = stride[axis]
        merged = {}
        for residues in {key[:axis] for key in phases}:
            parts = [phases[residues + (r,)] for r in range(s)]
            position = lead + axis + 1
            stacked = parts[0].unsqueeze(position) if s == 1 else Tensor.stack(parts, dim=position)
            shape = stacked.shape[:position - 1] + (coarse[axis] * s,) + stacked.shape[position + 1:]
            merged[residues] = stacked.reshape(shape)
        phases = merged
        if axis == 0:
            break
        axis -= 1
    (whole,) = phases.values()
    return whole.shrink(tuple((0, size) for size in whole.shape[:lead]) + tuple((0, size) for size in sizes))


def _check_windows_fit(name: str, input_shape, padded_sizes, kernel, dilation) -> None:
    for size, k, d in zip(padded_sizes, kernel, dilation):
        if size < d * (k - 1) + 1:
            spans = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
            raise ValueError(f"{name}: input of shape {tuple(input_shape)} (spatial size {tuple(padded_sizes)} "
                             f"after padding) is smaller than the kernel's extent {spans}")


# ---- convolution -------------------------------------------------------------------------------

def _windowed_product(x: Tensor, weight: Tensor, stride, dilation, groups: int) -> Tensor:
    """Convolution of an already padded x (N, C, *spatial) with weight (out, C/groups, *kernel).

    The windows are laid out as (N, groups, 1, *outputs, C/groups, *kernel) against the weight as
    (1, groups, out/groups, 1..., C/groups, *kernel): one multiply and one sum over the trailing dims,
    whose result is already in (N, out, *outputs) order, so a bias added after it joins the kernel.
    """
    dims = weight.ndim - 2
    batch = x.shape[0]
    out_channels, group_channels, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
    if _depthwise_channels_last(x.device, groups, weight.shape):
        return _depthwise_channels_last_product(x, weight, stride, dilation)
    windows = pool_windows(x, kernel, stride, dilation)
    outputs = windows.shape[2:2 + dims]
    if _pointwise(x.device, groups, weight.shape, batch * math.prod(outputs)):
        return _pointwise_product(windows, weight)
    if _channels_last(x, groups, weight.shape, strided=any(size > 1 for size in stride), columns=outputs[-1]):
        columns = _tiled_columns(outputs[-1], out_channels * group_channels * math.prod(kernel))
        if columns != outputs[-1]:  # more output columns, read from zeros past the input, cut off after
            needed = (columns - 1) * stride[-1] + dilation[-1] * (kernel[-1] - 1) + 1
            x = x.pad(((0, 0),) * (x.ndim - 1) + ((0, needed - x.shape[-1]),))
            windows = pool_windows(x, kernel, stride, dilation)
        if _reads_channels_last_values(x) or (math.prod(kernel) > 1 and _computed_channels_last(x)):
            stored = _channels_last_padded(x, dims, strided=False)  # (N, *padded, C), a copy
            windows = pool_windows(stored.permute((0, 1 + dims) + tuple(range(1, 1 + dims))), kernel, stride, dilation)
            result = _output_channels_last_product(windows, weight, channels_innermost=True)
        else:
            result = _output_channels_last_product(windows, weight)
        return result if columns == outputs[-1] else result[..., :outputs[-1]]
    if _grouped_channels_last(x, groups, weight):
        return _grouped_channels_last_product(windows, weight, groups)
    if stored_out_of_order(first_shard(x.lazydata)):  # stored channels last: the vector below walks x's columns,
        windows = pool_windows(x.contiguous(), kernel, stride, dilation)  # so read a copy in this order
    windows = windows.reshape((batch, groups, group_channels) + outputs + kernel)
    output_axes, kernel_axes = tuple(range(3, 3 + dims)), tuple(range(3 + dims, 3 + 2 * dims))
    windows = windows.permute((0, 1) + output_axes + (2,) + kernel_axes).unsqueeze(2)
    weight = weight.reshape((1, groups, out_channels // groups) + (1,) * dims + (group_channels,) + kernel)
    # Weight first: in a register tile every fma then takes its operands in the same order (the
    # weight, loaded once per output channel, before the window values), which gcc's SLP
    # vectorizer needs to pack a tile row into one vector fma (with the window first, the first
    # output channel's row stayed scalar). A product of two numbers is the same either way round.
    # summed in the operands' dtype: an integer convolution accumulates in its own integers (int32 for
    # lazygrad.quantize's int8 products), where `sum` would widen them to int64
    summed = (weight * windows)._reduce(Ops.SUM, tuple(range(3 + dims, 4 + 2 * dims)), False, "convolution")
    summed = summed._with_gradient((weight, windows), _windowed_product_gradient)
    return summed.reshape((batch, out_channels) + outputs)


# A 1x1 convolution over at most this many output positions (batch times pixels) is a matmul in panels
# (`_pointwise_product`).
POINTWISE_MAX_POSITIONS = 256
POINTWISE_MIN_WEIGHT = 1 << 12


def _pointwise(device: str, groups: int, weight_shape, positions: int) -> bool:
    """Whether a convolution runs as `_pointwise_product`: on the CPU device, ungrouped, 1x1, with
    whole panels of 16 output channels, a weight of POINTWISE_MIN_WEIGHT elements or more and at most
    POINTWISE_MAX_POSITIONS output positions. AVX2, 2 threads, conv2d + bias + Clip(0, 6), jitted (ms,
    before -> after): MobileNetV2's 1x160x7x7 by 960 0.34 -> 0.20, 320 by 1280 1.49 -> 0.69, 960 by 320
    1.16 -> 0.44, 96x14x14 by 576 0.48 -> 0.44; at 56x56 (3136 positions) it measured slower, 0.51 ->
    0.53, at 112x112 1.19 -> 1.89."""
    out_channels, channels, kernel = weight_shape[0], weight_shape[1], weight_shape[2:]
    return (device_kind(device) == "CPU" and groups == 1 and math.prod(kernel) == 1 and out_channels % CHANNEL_PANEL == 0
            and out_channels * channels >= POINTWISE_MIN_WEIGHT and positions <= POINTWISE_MAX_POSITIONS)


def _pointwise_product(windows: Tensor, weight: Tensor) -> Tensor:
    """A 1x1 convolution of `windows` (N, C, *outputs, 1...) with weight (O, C, 1...) as the matmul
    (N * outputs, C) @ (C, O) in linalg's panels (`matmul_in_panels`: 6 positions by 16 output
    channels with AVX2, 8 by 32 with AVX-512), returned as an (N, O, *outputs) view of its
    (N, *outputs, O) result. With few positions, the other layout's vector, a run of them (7 or 14
    pixels), fills AVX2 vectors poorly; here each tile reads one panel of the weight and broadcasts
    a panel's positions' values."""
    dims = weight.ndim - 2
    batch, channels, outputs = windows.shape[0], windows.shape[1], windows.shape[2:2 + dims]
    out_channels = weight.shape[0]
    spatial = tuple(range(2, 2 + dims))
    rows = windows.reshape((batch, channels) + outputs).permute((0,) + spatial + (1,))
    product = matmul_in_panels(rows.reshape(-1, channels), weight.reshape(out_channels, channels).T)
    return product.reshape((batch,) + outputs + (out_channels,)).permute((0, 1 + dims) + tuple(range(1, 1 + dims)))


# Output channels per weight panel of a convolution computed with its output channels last
# (`_output_channels_last_product`): two AVX2 vectors.
CHANNEL_PANEL = 16


def _channel_panel(out_channels: int) -> int:
    """Output channels per weight panel: CHANNEL_PANEL, or half of it where that does not divide them
    (MobileNetV2's projections to 24 channels, which then read the channels-last depthwise output
    as it is stored: the model jitted, one thread, six alternating runs, median 8.2 -> 8.1 ms against
    those convolutions in the other layout reading a transposed copy)."""
    return CHANNEL_PANEL if out_channels % CHANNEL_PANEL == 0 else CHANNEL_PANEL // 2


# The most zero channels, as a share of a convolution's output channels, that `_panelled_channels`
# pads them with to make whole panels of CHANNEL_PANEL.
PADDED_CHANNELS_SHARE = 1 / 8


def _panelled_channels(out_channels: int) -> tuple[int, int]:
    """(channels computed, channels per panel) for a convolution computed channels last: the output
    channels padded with zero channels to whole panels of CHANNEL_PANEL (each a vector of AVX-512)
    where that adds at most PADDED_CHANNELS_SHARE of them, else `_channel_panel`'s panels.
    SqueezeNet's last convolution, 512 -> 1000 channels at 13x13, 2 threads: 2.8 ms in panels of 8
    (half vectors), 1.5 as 1008 channels in panels of 16 (ONNX Runtime computes 1008 too)."""
    padded = -(-out_channels // CHANNEL_PANEL) * CHANNEL_PANEL
    if padded - out_channels <= out_channels * PADDED_CHANNELS_SHARE:
        return padded, CHANNEL_PANEL
    return out_channels, _channel_panel(out_channels)


# Channels of a depthwise convolution computed channels last come in whole vectors of this many
# (`_depthwise_channels_last`): one AVX2 vector, half an AVX-512 one.
DEPTHWISE_CHANNEL_VECTOR = 8


# Window elements (input channels times kernel positions) from which a convolution computes with
# its output channels last.
CHANNELS_LAST_MIN_WINDOW = 512


# A convolution computed channels last whose output columns no register tile's row count divides,
# TILED_COLUMNS_FROM of them or more, computes extra columns up to a multiple of TILED_COLUMNS where
# each output position takes TILED_COLUMNS_MIN_WORK multiply-adds or more (`_tiled_columns`).
TILED_COLUMNS_FROM = 32
TILED_COLUMNS = 8
TILED_COLUMNS_MIN_WORK = 8192


def _tiled_columns(columns: int, work: int) -> int:
    """The output columns a convolution computed channels last computes, `work` multiply-adds each
    position: its own, or, where none of 4 or more of the register tile's row counts
    (codegen/opts.py MATMUL_ROW_CHOICES, ODD_ROW_CHOICES) divides them, the next multiple of
    TILED_COLUMNS, read from zeros past the input (a prime, 109: the tile was one column by every
    panel of output channels, each panel's weights loaded for one window value). 2 threads:
    SqueezeNet 1.0's first convolution, 3 -> 96 channels 7x7 with stride 2 (14,112 multiply-adds a
    position), 2.7 -> 1.5 ms with the copy of its input that the extra columns read, the model
    6.4 -> 5.5 ms. Inception-v3's 1x1 convolution 64 -> 80 channels at 73x73 (5,120) measured 0.36
    -> 0.32 ms in one run and 0.15 -> 0.21 in another, its first convolution, 3 -> 32 channels 3x3
    (864), as long with the copy: both are left as they are."""
    if columns < TILED_COLUMNS_FROM or work < TILED_COLUMNS_MIN_WORK:
        return columns
    from lazygrad.codegen.opts import MATMUL_ROW_CHOICES, ODD_ROW_CHOICES
    if any(columns % rows == 0 for rows in MATMUL_ROW_CHOICES + ODD_ROW_CHOICES if rows >= 4):
        return columns
    return -(-columns // TILED_COLUMNS) * TILED_COLUMNS


def _channels_last(x: Tensor, groups: int, weight_shape, strided: bool = False, columns: int = 0) -> bool:
    """Whether a convolution runs as `_output_channels_last_product`: on the CPU device, ungrouped,
    with whole panels of output channels (`_panelled_channels`: R(2+1)D's 230, 460 and 921 as 240,
    464 and 928, where they took channels in the middle at a third of the speed, its 128 -> 230
    1x3x3 convolution at 8x28x28 53 -> 8.5 ms; ShuffleNetV2's 58, 116 and 232 as 64, 128 and 240,
    the model 2.5 -> 1.9 ms), and either a 1x1 kernel, a stride, windows of at
    least CHANNELS_LAST_MIN_WINDOW elements, output rows of `columns` that `_in_vectors` does not take
    or an input x (padded) computed channels last (`_computed_channels_last`). Such an input is
    read along its channels as stored, where the other layout copies it across them first: 2
    threads, a 1x1 convolution and ReLU before, ms, channels in the middle -> last: R(2+1)D's
    temporal 3x1x1 convolution, 144 -> 64 channels at 16x56x56, 29.4 -> 17.3; 16 -> 32 channels 3x3
    at 56x56 0.25 -> 0.12, 16 x 16 -> 32 at 28x28 0.97 -> 0.46, 24 -> 32 at 28x28 0.13 -> 0.05, 8 x
    32 -> 64 at 64x64 4.1 -> 3.6; 8 x 16 -> 32 at 64x64 1.10 against 1.17, 32 -> 64 at 56x56 0.42
    against 0.44. An input stored in the usual order keeps this rule (that temporal convolution
    alone: 17.2 ms channels in the middle, 23.8 last).
    A 1x1 convolution (over more positions than `_pointwise_product` takes) computes channels last so
    that a depthwise convolution after it, which computes channels last too
    (`_depthwise_channels_last_product`), copies its input without a transpose: MobileNetV2, one thread,
    AVX-512, its kernels' times summed, 11.5 -> 10.3 ms with both; 12.0 with the depthwise convolutions
    alone channels last. Output channels that 16 does not divide keep the other layout: in panels of 8
    (half an AVX-512 vector) MobileNetV2's 1x1 convolutions to 24 channels at 56x56 took 0.28-0.38 ms,
    0.19-0.29 with channels in the middle, and the model 10.4 ms against 10.1. AVX2, 2 threads, conv2d +
    bias + relu, ms (channels in the middle -> last): 1x512x7x7 by 512x512x3x3 7.5 -> 3.0, 1x256x14x14
    by 256 5.1 -> 3.4, 1x128x28x28 by 128 4.4 -> 3.1, 1x64x56x56 by 64 5.1 -> 4.2, 16x512x7x7 by 512 124
    -> 34, 1x256x14x14 by 512 stride 2 5.9 -> 2.2. Below: 32x16x28x28 by 32 5.7 -> 6.7 (16 channels fill
    a 28 x 8 tile of the other layout well); 1x1 convolutions (MobileNetV2's) measured slower too. The
    GPU dialects choose their tiles otherwise and keep the other layout. A strided convolution computes
    channels last whatever its size: in the other layout its vector of columns is gathered from every
    other input column, where channels last broadcasts one input value at a time (products alone:
    ResNet's 1x1 downsampling 16x64x56x56 by 128 9.7 -> 4.3 ms; its first layer, 3x7x7 at 224x224,
    4.0-5.6 -> 2.7 ms at batch 1, 65 -> 34-40 ms at 16, though the BatchNorm after it then reads across
    channels, 0.5-0.7 -> 1.0-1.1 ms; MobileNetV2's first, 3x3x3 to 32 channels, 0.73-0.91 -> 0.36-0.39
    ms)."""
    out_channels, channels, kernel = weight_shape[0], weight_shape[1], weight_shape[2:]
    computed, width = _panelled_channels(out_channels)
    if device_kind(x.device) != "CPU" or groups != 1 or computed % width or out_channels < CHANNEL_PANEL:
        return False
    return strided or math.prod(kernel) == 1 or channels * math.prod(kernel) >= CHANNELS_LAST_MIN_WINDOW \
        or not _in_vectors(columns) or _computed_channels_last(x)


def _in_vectors(columns: int) -> bool:
    """Whether output rows of `columns` make vectors in the layout with channels in the middle, whose
    register tile runs along them: codegen/opts.py takes the widest run up to 32 that divides them,
    which must be whole vectors of 4 (the narrowest). SqueezeNet's 3x3 convolutions, 16 -> 64
    channels over 55x55 positions, 2 threads, with bias and ReLU: 1.74-1.96 ms as 11 columns by 8
    channels, 0.55 channels last with the copy back to this layout. A 1-D convolution's long rows
    take runs of 30 (1500 or 3000 positions) or 25 (1000), 8 of them a tile filling every AVX-512
    register: 64 -> 64 channels, kernel 5 over 3000 positions, 0.89 -> 0.33 ms channels last;
    128 -> 128, kernel 3 over 1500, 1.13 -> 0.54. Rows of 1024 (runs of 32) keep this layout
    (32 -> 32 channels: 0.050 ms, 0.059 channels last)."""
    run = next(width for width in range(min(columns, 32), 0, -1) if columns % width == 0)
    return run % 4 == 0


def _output_channels_last_product(windows: Tensor, weight: Tensor, channels_innermost: bool = False) -> Tensor:
    """The convolution of `windows` (N, C, *outputs, *kernel) with weight (O, C, *kernel), computed
    in (N, *outputs, O) order and returned as an (N, O, *outputs) view.

    The weight is first copied into panels of CHANNEL_PANEL output channels, (O/P, C, *kernel, P),
    so a register tile of P output channels (the vector, read contiguously from a panel) by a run of
    output columns (each window value broadcast) reads each panel as one stream, and the tile's
    stores are contiguous too, which gcc's SLP vectorizer needs to pack the tile into vector fmas.
    Channels in the middle instead, the columns are the vector: 7 or 14 columns (ResNet's last
    stages) fill vectors poorly, and every output row reads the whole weight again. The copy is
    O*C*kernel elements per call (ResNet-18: 11M, 5 ms at batch 1; a jit replay skips it while the
    weight is unchanged). The reduce runs over the input channels, then the kernel positions, where
    `windows` are a view of x (N, C, *padded) stored that way (a kernel row is then contiguous), and
    with `channels_innermost` over the kernel positions, then the channels, the panels
    (O/P, *kernel, C, P), where they are a view of a channels-last copy (`_channels_last_padded`): each
    step's window value then lies next to the previous one's either way. The gradient is
    `_windowed_product_gradient`'s, of the same product laid out channels in the middle."""
    dims = weight.ndim - 2
    batch, channels, outputs = windows.shape[0], windows.shape[1], windows.shape[2:2 + dims]
    out_channels, kernel = weight.shape[0], weight.shape[2:]
    computed, width = _panelled_channels(out_channels)
    spatial, kernel_axes = tuple(range(2, 2 + dims)), tuple(range(2 + dims, 2 + 2 * dims))
    panels = kept_copy("convolution panels", weight, _channel_panels, (computed, width, channels_innermost))
    with no_grad():
        if channels_innermost:
            right = panels.permute((0, 2 + dims) + tuple(range(1, 2 + dims)))                # (O/P, P, *kernel, C)
            left = windows.permute((0,) + spatial + kernel_axes + (1,))
            left = left.reshape((batch,) + outputs + (1, 1) + kernel + (channels,))
        else:
            right = panels.permute((0, 2 + dims, 1) + tuple(range(2, 2 + dims)))              # (O/P, P, C, *kernel)
            left = windows.permute((0,) + spatial + (1,) + kernel_axes)
            left = left.reshape((batch,) + outputs + (1, 1, channels) + kernel)
        right = right.reshape((1,) * (1 + dims) + right.shape)
        # window values first: gcc's SLP packs the tile's fmas only with their operands in this order
        summed = (left * right)._reduce(Ops.SUM, tuple(range(3 + dims, 4 + 2 * dims)), False, "convolution")  # (N, *outputs, O/P, P)
        result = summed.reshape((batch,) + outputs + (computed,))
        if computed != out_channels:  # without the zero channels that made whole panels
            result = result[..., :out_channels]
        result = result.permute((0, 1 + dims) + tuple(range(1, 1 + dims)))
    if not (Tensor.grad_enabled and (windows.requires_grad or weight.requires_grad)):
        return result
    laid_out_weight = weight.reshape((1, 1, out_channels) + (1,) * dims + (channels,) + kernel)
    laid_out_windows = windows.permute((0,) + spatial + (1,) + kernel_axes).unsqueeze(1).unsqueeze(1)
    grouped = result.reshape((batch, 1, out_channels) + outputs)
    return grouped._with_gradient((laid_out_weight, laid_out_windows), _windowed_product_gradient).reshape(result.shape)


def _grouped_channels_last(x: Tensor, groups: int, weight: Tensor) -> bool:
    """Whether a grouped convolution runs as `_grouped_channels_last_product`: on the CPU device, more
    than one input channel a group (not depthwise), CHANNEL_PANEL or more output channels a group in
    whole half panels, and no gradient to record (its rule is written for the other layout). With
    channels in the middle the tile's vector was a run of a row's columns (14, 7) and its rows a
    group's channels. 2 threads, conv2d + relu jitted, ms, before -> after: RegNetX's 408 channels
    in 17 groups at 14x14 0.35 -> 0.21, 168 in 7 at 28x28 0.38 -> 0.27, 912 in 38 at 7x7 0.35 ->
    0.11; ResNeXt's 512 in 32 groups at 14x14 0.29 -> 0.14, 1024 in 32 at 7x7 0.50 -> 0.12, strided
    512 at 28x28 0.37 -> 0.20, at batch 8 2.5 -> 1.25. 8 channels a group (ResNeXt's 256 in 32 at
    28x28) measured 0.26 -> 0.39 and keep the other layout."""
    group_outputs = weight.shape[0] // groups
    return (device_kind(x.device) == "CPU" and groups > 1 and weight.shape[1] > 1
            and group_outputs >= CHANNEL_PANEL and group_outputs % (CHANNEL_PANEL // 2) == 0
            and not (Tensor.grad_enabled and (x.requires_grad or weight.requires_grad)))


def _grouped_channels_last_product(windows: Tensor, weight: Tensor, groups: int) -> Tensor:
    """A grouped convolution of `windows` (N, C, *outputs, *kernel) with weight (O, C/groups, *kernel)
    computed in (N, *outputs, groups, O/groups) order, each group's output channels in panels as
    `_output_channels_last_product`'s (a register tile of a panel by a run of output columns, each
    window value broadcast), returned as an (N, O, *outputs) view. The weight's panels are kept
    between calls (`kept_copy`)."""
    dims = weight.ndim - 2
    batch, outputs = windows.shape[0], windows.shape[2:2 + dims]
    out_channels, group_channels, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
    group_outputs = out_channels // groups
    width = _channel_panel(group_outputs)
    panels = kept_copy("grouped convolution panels", weight, _grouped_channel_panels, (groups, width))
    with no_grad():
        spatial, kernel_axes = tuple(range(3, 3 + dims)), tuple(range(3 + dims, 3 + 2 * dims))
        left = windows.reshape((batch, groups, group_channels) + outputs + kernel)
        left = left.permute((0,) + spatial + (1, 2) + kernel_axes)                    # (N, *outputs, G, Cg, *kernel)
        left = left.reshape((batch,) + outputs + (groups, 1, 1, group_channels) + kernel)
        right = panels.permute((0, 1, 3 + dims, 2) + tuple(range(3, 3 + dims)))        # (G, Og/P, P, Cg, *kernel)
        right = right.reshape((1,) * (1 + dims) + right.shape)
        summed = (left * right)._reduce(Ops.SUM, tuple(range(4 + dims, 5 + 2 * dims)), False, "convolution")
        result = summed.reshape((batch,) + outputs + (out_channels,))
        return result.permute((0, 1 + dims) + tuple(range(1, 1 + dims)))


def _grouped_channel_panels(weight: Tensor, groups: int, width: int) -> Tensor:
    """weight (O, Cg, *kernel) of `groups` groups copied into panels of `width` output channels per
    group: (G, Og/P, Cg, *kernel, P)."""
    dims = weight.ndim - 2
    group_channels, kernel = weight.shape[1], weight.shape[2:]
    panels = weight.reshape((groups, weight.shape[0] // groups // width, width, group_channels) + kernel)
    return panels.permute((0, 1, 3) + tuple(range(4, 4 + dims)) + (2,)).contiguous()


def _channel_panels(weight: Tensor, computed: int, width: int, channels_innermost: bool) -> Tensor:
    """weight (O, C, *kernel) padded with zero channels to `computed` and copied into panels of
    `width` output channels: (O/P, *kernel, C, P) with `channels_innermost`, else (O/P, C, *kernel, P)."""
    dims = weight.ndim - 2
    out_channels, channels, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
    if computed != out_channels:  # zero channels to whole panels
        weight = weight.pad(((0, computed - out_channels),) + ((0, 0),) * (1 + dims))
    panels = weight.reshape((computed // width, width, channels) + kernel)
    if channels_innermost:
        return panels.permute((0,) + tuple(range(3, 3 + dims)) + (2, 1)).contiguous()
    return panels.permute((0, 2) + tuple(range(3, 3 + dims)) + (1,)).contiguous()


def _reads_channels_last_values(x: Tensor) -> bool:
    """Whether x (N, C, *spatial), not itself read in the order it is stored, is computed from some
    value stored channels last (a convolution's output): a concatenation of Winograd outputs and
    an earlier block's (DenseNet's batch norm and ReLU before each 1x1 convolution), where its
    operands' orders differ, so the elementwise ops compute in x's own order; a zero padding of a
    channels-last ReLU (ResNet's strided 3x3 convolutions, Inception-v3's 1x7 ones)."""
    dims = x.ndim - 2
    to_last = (0,) + tuple(range(2, 2 + dims)) + (1,)
    node = first_shard(x.lazydata)
    return not stored_in_order(node.permute(to_last)) and reads_stored_in(node, to_last)


def _computed_channels_last(x: Tensor) -> bool:
    """Whether x (N, C, *spatial) is a computed value stored channels last, or computed from such
    values (a batch norm's gradient of a channels-last convolution's output)."""
    to_last = (0,) + tuple(range(2, x.ndim)) + (1,)
    node = first_shard(x.lazydata)
    return stored_in_order(node.permute(to_last)) or reads_stored_in(node, to_last)


def _depthwise_channels_last(device: str, groups: int, weight_shape) -> bool:
    """Whether a convolution runs as `_depthwise_channels_last_product`: on the CPU device, one input
    and one output channel per group, in whole vectors of 8 channels."""
    out_channels, group_channels = weight_shape[0], weight_shape[1]
    return (device_kind(device) == "CPU" and group_channels == 1 and out_channels == groups
            and groups % DEPTHWISE_CHANNEL_VECTOR == 0)


def _channels_last_padded(x: Tensor, dims: int, strided: bool) -> Tensor:
    """x (N, C, *padded) with its channels last. For a strided convolution of a zero padding of a
    value stored channels last (a 1x1 convolution's output), the padding is applied to that value as
    a view, which the scheduler keeps (its vectors along the channels are valid all together,
    schedule/fuse.py `worth_storing_padded`); otherwise a channels-last copy. MobileNetV2, one
    thread, in sequence: 96 channels at 112x112, stride 2, copy 0.29 + kernel 0.31 -> 0.25 ms; at
    stride 1 the padded copy is 4x smaller against the output and the tests on every load cost more
    than it (144 channels at 56x56: 0.07 + 0.13 -> 0.32 ms), so those keep it."""
    to_last = (0,) + tuple(range(2, 2 + dims)) + (1,)
    node = x.lazydata
    if strided and isinstance(node, LazyBuffer) and node.op is Ops.PAD and node.buffer is None:
        inner = node.srcs[0].permute(to_last)
        if stored_in_order(inner):
            return Tensor(inner.pad(tuple(node.arg[axis] for axis in to_last)))
    return x.permute(to_last).contiguous()


def _depthwise_channels_last_product(x: Tensor, weight: Tensor, stride, dilation) -> Tensor:
    """A depthwise convolution of the padded x (N, C, *spatial) computed in (N, *outputs, C) order
    from a channels-last copy of x, and returned as an (N, C, *outputs) view.

    Each output channel reads only its own input channel, so with the channels last every load of
    the kernel walks them contiguously: they are the vector (codegen/opts.py
    `channels_vector_tile`), by a run of output columns that reuses each weight vector, read from a
    (*kernel, C) copy of the weight. Channels in the middle, the vector was a run of columns: 28 or
    14 columns fill 16-lane vectors poorly or not at all, and the padded copy of the input read a
    channels-last 1x1 convolution's output across its channels. The copy of x takes the place of the
    padded copy the scheduler stores for the other layout. MobileNetV2, one thread, AVX-512, kernels
    alone (ms, channels in the middle -> last): 192 channels at 28x28 0.21 -> 0.04, 576 at 14x14
    0.055 -> 0.036-0.048, 144 at 56x56 0.13-0.20 -> 0.13; the padded copy of 576 channels at 14x14
    0.17 -> 0.02. The input's gradient is `_windowed_product_gradient`'s, of the same product laid
    out channels in the middle; the weight's reads the copy (`_depthwise_channels_last_weight_gradient`)."""
    dims = weight.ndim - 2
    batch, channels, kernel = x.shape[0], x.shape[1], weight.shape[2:]
    spatial = tuple(range(2, 2 + dims))
    taps = kept_copy("depthwise taps", weight, _channels_last_taps, ())                     # (*kernel, C)
    with no_grad():
        stored = _channels_last_padded(x.detach(), dims, strided=any(size > 1 for size in stride))  # (N, *padded, C)
        channels_first = stored.permute((0, 1 + dims) + tuple(range(1, 1 + dims)))      # a view of the copy
        windows = pool_windows(channels_first, kernel, stride, dilation)                   # (N, C, *outputs, *kernel)
        outputs = windows.shape[2:2 + dims]
        left = windows.permute((0,) + spatial + (1,) + tuple(range(2 + dims, 2 + 2 * dims)))  # (N, *outputs, C, *kernel)
        taps = taps.permute((dims,) + tuple(range(dims)))                                  # (C, *kernel) of a (*kernel, C) copy
        summed = (taps * left)._reduce(Ops.SUM, tuple(range(2 + dims, 2 + 2 * dims)), False, "convolution")  # (N, *outputs, C)
        result = summed.permute((0, 1 + dims) + tuple(range(1, 1 + dims)))
    if not (Tensor.grad_enabled and (x.requires_grad or weight.requires_grad)):
        return result
    laid_out_weight = weight.reshape((1, channels, 1) + (1,) * dims + (1,) + kernel)
    laid_out_windows = pool_windows(x, kernel, stride, dilation).reshape((batch, channels, 1) + outputs + (1,) + kernel)
    grouped = result.reshape((batch, channels, 1) + outputs)

    def gradient(grad, out, sources, rule) -> list:  # (laid_out_weight's, laid_out_windows')
        grad_windows = (grad.reshape(grad.shape + (1,) * (1 + dims)) * laid_out_weight).sum(2, keepdim=True)
        grad_weight = _depthwise_channels_last_weight_gradient(grad, stored, kernel, stride, dilation)
        return [grad_weight.reshape(laid_out_weight.shape), grad_windows]
    return grouped._with_gradient((laid_out_weight, laid_out_windows), gradient).reshape(result.shape)


def _channels_last_taps(weight: Tensor) -> Tensor:
    """A depthwise weight (C, 1, *kernel) copied as (*kernel, C): each tap's weights a vector along
    the channels."""
    dims = weight.ndim - 2
    taps = weight.reshape((weight.shape[0],) + weight.shape[2:])
    return taps.permute(tuple(range(1, 1 + dims)) + (0,)).contiguous()


def _strided_depthwise_input_gradient(grad: Tensor, weight: Tensor, sizes, before, stride, dilation) -> Tensor:
    """x's gradient (N, C, *sizes) of a strided depthwise convolution of x padded by `before` (and
    any amount after), from the output's gradient grad (N, C, *outputs), computed with the channels
    last. Input position i = o * stride + k * dilation - before takes the product of output o and tap
    k, so each tap's products, shifted, fill one phase (i mod stride) of a grid of whole strides:
    one sum of the taps' shifted products over (N, *(positions, stride), C), a reshape of the
    channels-last gradient when the stride divides the size. Through the windows it was their fold,
    phases interleaved across the channels, which the activation's and batch norm's gradients after
    it then read channels first (MobileNetV2's first block of each stride-2 stage)."""
    dims = len(sizes)
    batch, channels, outputs = grad.shape[0], grad.shape[1], grad.shape[2:]
    kernel = weight.shape[2:]
    last = grad.permute((0,) + tuple(range(2, 2 + dims)) + (1,))  # (N, *outputs, C)
    taps = _channels_last_taps(weight)  # each tap's weights a contiguous vector along the channels, as grad's loads
    whole = tuple(-(-size // step) for size, step in zip(sizes, stride))  # whole strides per axis
    total = None
    for tap in itertools.product(*(range(count) for count in kernel)):
        offsets = [k * d - b for k, d, b in zip(tap, dilation, before)]
        term = last * taps[tap]
        # output o lands on whole stride q = o + offset // stride, phase offset % stride
        bounds = [(off // step, count - output - off // step) for off, step, count, output
                  in zip(offsets, stride, whole, outputs)]
        cut = tuple((max(-lo, 0), output - max(-hi, 0)) for (lo, hi), output in zip(bounds, outputs))
        if any(end <= start for start, end in cut):  # the tap reads only x's padding
            continue
        term = term.shrink(((0, batch),) + cut + ((0, channels),))
        term = term.pad(((0, 0),) + tuple((max(lo, 0), max(hi, 0)) for lo, hi in bounds) + ((0, 0),))
        term = term.reshape((batch,) + _interleave(whole, (1,) * dims) + (channels,))
        phases = tuple((off % step, step - 1 - off % step) for off, step in zip(offsets, stride))
        term = term.pad(((0, 0),) + _interleave(((0, 0),) * dims, phases) + ((0, 0),))
        total = term if total is None else total + term
    grid = total.reshape((batch,) + tuple(count * step for count, step in zip(whole, stride)) + (channels,))
    if grid.shape[1:1 + dims] != tuple(sizes):
        grid = grid.shrink(((0, batch),) + tuple((0, size) for size in sizes) + ((0, channels),))
    return grid.permute((0, 1 + dims) + tuple(range(1, 1 + dims)))


def _depthwise_channels_last_weight_gradient(grad: Tensor, stored: Tensor, kernel, stride, dilation) -> Tensor:
    """The weight gradient (C, *kernel) of `_depthwise_channels_last_product` from grad (N, C, 1,
    *outputs) and the forward's channels-last copy of its padded input, `stored` (N, *padded, C),
    kept for it: their product summed over the batch and outputs, (*kernel, C) with the channels
    innermost, so each load is a vector of them; grad is read through a channels-last copy unless it
    is computed channels last already. With an output row innermost (the windows of x as they are)
    28 or 14 columns filled 16 lanes poorly: MobileNetV2's 144 channels at 28x28, batch 16, 2 threads,
    2.5 -> 0.9 ms, its training step's kernels 112.5 -> 107.7 ms; its peak memory stayed 725 MB."""
    dims = len(kernel)
    batch, channels, outputs = grad.shape[0], grad.shape[1], grad.shape[3:]
    windows = pool_windows(stored.permute((0, 1 + dims) + tuple(range(1, 1 + dims))), kernel, stride, dilation)
    windows = windows.permute((0,) + tuple(range(2, 2 + 2 * dims)) + (1,))                   # (N, *outputs, *kernel, C)
    planes = grad.reshape((batch, channels) + outputs)
    spread = planes.permute((0,) + tuple(range(2, 2 + dims)) + (1,))
    if not _computed_channels_last(planes):
        spread = spread.contiguous()
    spread = spread.reshape((batch,) + outputs + (1,) * dims + (channels,))
    summed = (spread * windows).sum(tuple(range(1 + dims)))                                   # (*kernel, C)
    return summed.permute((dims,) + tuple(range(dims)))


def _windowed_product_gradient(grad, out, sources, rule) -> list:
    """Gradients of `_windowed_product`'s sum with respect to the laid-out weight and windows. The
    windows' is the product summed over output channels, as autograd would derive it. The weight's
    is a matmul per group, (out channels) x (batch * outputs) by (batch * outputs) x (channels *
    kernel), of the windows as they are: the matmul packs them into panels, or with few rows reads
    them in place (a contiguous copy first, im2col, cost more than the product: a U-Net's last
    convolution to 3 channels, 3.1 -> 0.9 ms). Derived op by op it is a reduce over batch and
    outputs whose innermost loop is one row of outputs, 8 steps for the digits demo's second
    convolution, which took 4.4 ms of its 7 ms training step. With one output channel per group (a
    depthwise convolution) it is that reduce all the same, the batch and each output axis a loop of
    its own: as a matmul of one row per group its steps were the batch and outputs merged, each
    load's index a division and two remainders (MobileNetV2's 144 channels at 28x28, batch 16,
    2 threads: 13.9 -> 2.3 ms; 32 channels at 112x112 44 -> 3.3 ms)."""
    weight, windows = sources  # (1, G, O/G, 1..., C/G, *kernel) and (N, G, 1, *outputs, C/G, *kernel)
    batch, groups, group_outputs = grad.shape[:3]
    outputs = grad.shape[3:]
    dims = len(outputs)
    spread = grad.reshape(grad.shape + (1,) * (1 + dims))
    grad_windows = (spread * weight).sum(2, keepdim=True)
    if group_outputs == 1:  # a depthwise convolution: a sum over the batch and outputs, each its own loop
        grad_weight = (spread * windows).sum((0,) + tuple(range(3, 3 + dims))).reshape(weight.shape)
        return [grad_weight, grad_windows]
    positions = batch * math.prod(outputs)
    rows = grad.permute((1, 2, 0) + tuple(range(3, 3 + dims))).reshape(groups, group_outputs, positions)
    columns = windows.permute((1, 0) + tuple(range(2, windows.ndim))).reshape(groups, positions, -1)
    grad_weight = (rows @ columns).reshape(weight.shape)
    return [grad_weight, grad_windows]


def _check_conv_weight(name: str, input: Tensor, weight: Tensor, bias, groups, dims: int,
                       transposed: bool) -> None:
    if transposed:
        layout = "(in_channels, out_channels/groups, *kernel)"
    else:
        layout = "(out_channels, in_channels/groups, *kernel)"
    if weight.ndim != dims + 2:
        raise ValueError(f"{name}: weight must be {dims + 2}-D {layout}, got shape {weight.shape}")
    if not _is_int(groups) or groups < 1:
        raise ValueError(f"{name}: groups must be a positive int, got {groups!r}")
    divided = weight.shape[0]
    if divided % groups:
        which = "in_channels" if transposed else "out_channels"
        raise ValueError(f"{name}: {which} {divided} (dim 0 of weight of shape {weight.shape}) is not divisible "
                         f"by groups={groups}")
    expected = weight.shape[0] if transposed else weight.shape[1] * groups
    if input.shape[1] != expected:
        raise ValueError(f"{name}: input of shape {input.shape} has {input.shape[1]} channels, but weight of shape "
                         f"{weight.shape} with groups={groups} expects {expected}")
    out_channels = weight.shape[1] * groups if transposed else weight.shape[0]
    _check_channel_vector(name, "bias", bias, out_channels)
    integers = input.dtype.is_int and weight.dtype.is_int  # exact integer products (int8 models, lazygrad.quantize)
    if not (input.dtype.is_float and weight.dtype.is_float) and not integers:
        raise TypeError(f"{name}: expected floating point (or both integer) input and weight, got "
                        f"{input.dtype.name} and {weight.dtype.name}")


def _conv_padding(name: str, padding, kernel, stride, dilation) -> tuple[tuple[int, int], ...]:
    """(before, after) per spatial dim for an int, a tuple, 'valid', 'same' or a (before, after) pair
    per spatial dim (ONNX's pads)."""
    if isinstance(padding, (tuple, list)) and padding and all(isinstance(pair, (tuple, list)) for pair in padding):
        if len(padding) != len(kernel) or not all(len(pair) == 2 and all(_is_int(v) and v >= 0 for v in pair)
                                                  for pair in padding):
            raise ValueError(f"{name}: padding given as pairs needs one (before, after) pair of ints >= 0 per "
                             f"spatial dim ({len(kernel)}), got {padding!r}")
        return tuple((int(before), int(after)) for before, after in padding)
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * len(kernel)
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError(f"{name}: padding='same' is not supported for strided convolutions "
                                 f"(stride={stride})")
            totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
            return tuple((total // 2, total - total // 2) for total in totals)  # extra one after, as PyTorch
        raise ValueError(f"{name}: padding must be an int, a tuple of ints, 'same', 'valid' or a (before, after) "
                         f"pair per spatial dim, got {padding!r}")
    return tuple((p, p) for p in _ints(padding, len(kernel), name, "padding"))


def _without_padding_taps(weight: Tensor, sizes, pads, stride, dilation) -> tuple[Tensor, tuple[tuple[int, int], ...]]:
    """(weight, pads) without the kernel taps that read only zero padding at every output (they add
    nothing): a dilated convolution whose dilation reaches past the input from every output takes its
    center tap alone. DeepLabV3's atrous pyramid, 960 -> 256 channels 3x3 at 20x20 with dilations 12,
    24 and 36: the last two are 1x1 convolutions (5.7 ms each, 2 threads, and a padded copy of 92x92x960
    values, otherwise). Per spatial dim, tap j reads padded positions j * dilation + o * stride for
    the outputs o, and the input lies at [before, before + size): the taps whose span of positions
    meets it are a range, kept, with the padding cut by the dropped taps' extent (negative: the
    input is cropped)."""
    if not any(before or after for before, after in pads):  # every tap reads the input (a 1x1 convolution)
        return weight, pads
    keep, new_pads = [], []
    for size, k, (before, after), s, d in zip(sizes, weight.shape[2:], pads, stride, dilation):
        outputs = (size + before + after - d * (k - 1) - 1) // s + 1
        span = (outputs - 1) * s
        first = max(0, -((span - before) // d))           # j * d + span >= before
        last = min(k - 1, (before + size - 1) // d)       # j * d <= before + size - 1
        if first > last:  # no tap meets the input (only at stride gaps); leave the convolution whole
            return weight, pads
        keep.append((first, last + 1))
        reach = span + (last - first) * d + 1              # padded positions the kept taps read
        new_pads.append((before - first * d, reach - size - (before - first * d)))
    if all(bounds == (0, k) for bounds, k in zip(keep, weight.shape[2:])):
        return weight, pads
    return weight.shrink(((0, weight.shape[0]), (0, weight.shape[1])) + tuple(keep)), tuple(new_pads)


# A dilated spatial dim of a convolution, of BAND_MIN_OUTPUTS outputs or more, is split into bands of
# outputs (`_band_split`) where the taps that meet the input leave out at least BAND_MIN_SAVING of its
# multiply-adds along that dim (an undilated one on a small map would become kernels of an output or two).
BAND_MIN_SAVING = 0.2
BAND_MIN_OUTPUTS = 8


def _band_split(sizes, kernel, pads, stride, dilation) -> tuple[int, list[tuple[int, int]]] | None:
    """(dim, output bands) to compute a convolution in, band by band, or None. Along each spatial dim
    tap j meets the input for a range of outputs; where those ranges leave out BAND_MIN_SAVING of
    that dim's taps and outputs, the outputs split at their ends, so that every band reads the
    same taps, and each band's convolution drops the others (`_without_padding_taps`). DeepLabV3's
    atrous pyramid at 40x40 (ResNet-50, output stride 8), 2048 -> 256 channels 3x3 with dilations
    12, 24 and 36: 64%, 36% and 16% of its multiply-adds meet the input. The dim that leaves out
    the most is split; the bands' own convolutions split the other."""
    best = None
    for dim, (size, k, (before, after), s, d) in enumerate(zip(sizes, kernel, pads, stride, dilation)):
        outputs = (size + before + after - d * (k - 1) - 1) // s + 1
        if d == 1 or k == 1 or outputs < BAND_MIN_OUTPUTS:
            continue
        ranges = [(max(0, -(-(before - j * d) // s)), min(outputs, (before + size - 1 - j * d) // s + 1))
                  for j in range(k)]
        live = sum(max(0, end - start) for start, end in ranges)
        saving = 1 - live / (k * outputs)
        if saving >= BAND_MIN_SAVING - 1e-9 and (best is None or saving > best[0]):
            cuts = sorted({0, outputs} | {min(max(edge, 0), outputs) for bounds in ranges for edge in bounds})
            best = (saving, dim, [(start, end) for start, end in zip(cuts, cuts[1:]) if end > start])
    return None if best is None or len(best[2]) < 2 else (best[1], best[2])


def _in_bands(name: str, x: Tensor, weight: Tensor, stride, pads, dilation, groups: int, dim: int,
              bands: list[tuple[int, int]]) -> Tensor:
    """The convolution of x (N, C, *spatial) as one convolution per band of outputs along `dim`
    (`_band_split`), each of the input's part its taps read, concatenated. Stored once, in the order
    its bands are (channels last on the CPU): read in place, every element of a consumer tested every
    band's bounds (DeepLabV3's concatenation of its pyramid after it, 4.4 ms)."""
    dims, kernel = x.ndim - 2, weight.shape[2:]
    parts = []
    for start, end in bands:
        before = pads[dim][0] - start * stride[dim]
        after = (end - start - 1) * stride[dim] + (kernel[dim] - 1) * dilation[dim] + 1 - x.shape[2 + dim] - before
        band_pads = pads[:dim] + ((before, after),) + pads[dim + 1:]  # negative where the input is cut
        cropped = x.pad(((0, 0), (0, 0)) + tuple((min(lo, 0), min(hi, 0)) for lo, hi in band_pads))
        parts.append(_convolution(name, dims, cropped, weight, None, stride,
                                  tuple((max(lo, 0), max(hi, 0)) for lo, hi in band_pads), dilation, groups))
    order = (0,) + tuple(range(2, 2 + dims)) + (1,) if _computed_channels_last(parts[0]) else tuple(range(2 + dims))
    return parts[0].cat(*parts[1:], dim=2 + dim).permute(order).contiguous().permute(
        tuple(order.index(axis) for axis in range(2 + dims)))


@computes_in_float32
def _convolution(name: str, dims: int, input, weight, bias, stride, padding, dilation, groups) -> Tensor:
    x, unbatched = _batched(name, input, dims)
    _check_conv_weight(name, x, weight, bias, groups, dims, transposed=False)
    kernel = weight.shape[2:]
    stride = _ints(stride, dims, name, "stride", minimum=1)
    dilation = _ints(dilation, dims, name, "dilation", minimum=1)
    pads = _conv_padding(name, padding, kernel, stride, dilation)
    _check_windows_fit(name, input.shape, tuple(size + lo + hi for size, (lo, hi) in zip(x.shape[2:], pads)), kernel,
                       dilation)
    weight, pads = _without_padding_taps(weight, x.shape[2:], pads, stride, dilation)
    kernel = weight.shape[2:]
    split = None if Tensor.grad_enabled and (x.requires_grad or weight.requires_grad) else \
        _band_split(x.shape[2:], kernel, pads, stride, dilation)
    padded = x.pad(((0, 0), (0, 0)) + pads)  # stored with its zeros when large (schedule/fuse.py)
    if split is not None:
        out = _in_bands(name, x, weight, stride, pads, dilation, groups, *split)
    elif x.requires_grad and Tensor.grad_enabled and math.prod(kernel) > 1 and all(s == 1 for s in stride) \
            and all(before == after for before, after in pads):
        # x's gradient is the transposed convolution of the output's: a convolution of the same
        # size, where op by op it is a product the size of the windows, then their fold
        out = _windowed_product(padded.detach(), weight, stride, dilation, groups)
        out = out._with_gradient((out, x), lambda grad, *_: [grad, _conv_transpose(
            name, dims, grad, weight, None, 1, tuple(before for before, _ in pads), 0, groups, dilation)])
    elif x.requires_grad and Tensor.grad_enabled and any(s > 1 for s in stride) \
            and _depthwise_channels_last(x.device, groups, weight.shape):
        out = _windowed_product(padded.detach(), weight, stride, dilation, groups)
        before = tuple(lo for lo, _ in pads)
        out = out._with_gradient((out, x), lambda grad, *_: [grad, _strided_depthwise_input_gradient(
            grad, weight, x.shape[2:], before, stride, dilation)])
    elif _winograd(padded, weight, stride, dilation, groups):
        out = _winograd_product(padded, weight)
    else:
        out = _windowed_product(padded, weight, stride, dilation, groups)
    if bias is not None:
        out = out + bias.reshape((1, bias.shape[0]) + (1,) * dims)
    return out.squeeze(0) if unbatched else out


# Winograd's F(2x2, 3x3) (Lavin and Gray, 2015): a 3x3 convolution as 16 matmuls over 4x4 input tiles,
# 2.25x fewer multiplies than direct. The input, the weight and each output tile are transformed by
# these constant matrices: V = B^T d B, U = G g G^T, Y = A^T M A.
WINOGRAD_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float32)
WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float32)
WINOGRAD_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float32)
# Where the transforms cost less than the multiplies saved: from WINOGRAD_MIN_CHANNELS input and output
# channels and WINOGRAD_MIN_TILES 4x4 input tiles (all images): with fewer tiles each of the 16 matmuls
# streams its transformed weight (16/9 of the direct one's) for too few columns. From 64 to 95 channels
# the matmuls' reduce is short, and Winograd's gain needs its transformed input (16 planes) within
# WINOGRAD_CACHED_BYTES. AVX-512, conv2d + relu jitted, its weight a parameter, direct -> Winograd ms,
# one thread: batch 1 at 32 channels 112x112 4.48 -> 2.59, 48 at 56x56 2.29 -> 0.94, 64 at 56x56
# 2.17 -> 1.59, 128 at 28x28 2.13 -> 1.39, 256 at 14x14 2.11 -> 1.35, 64 at 14x14 0.136 -> 0.095;
# batch 16 at 128 28x28 34.1 -> 28.6, 256 at 14x14 34.0 -> 30.0, 512 at 7x7 33.4 -> 24.4; 64 at 56x56
# batch 2 4.36 -> 3.37, batch 4 8.96 -> 7.28. Left direct: 512 at 7x7 at batch 1 2.29 -> 3.98, batch 2
# 5.10 -> 5.55, batch 3 (48 tiles) 6.37 -> 6.47; 64 at 56x56 batch 8 17.6 -> 18.0, batch 16 35.9 ->
# 39.6. Two threads alike (batch 1 at 256 14x14 1.04 -> 0.55, 512 7x7 1.11 -> 1.59).
WINOGRAD_MIN_CHANNELS, WINOGRAD_MIN_TILES = 32, 48
# A batch of more than one image computed channels last (a batch norm and ReLU of a convolution's
# output) takes Winograd from this many channels: below, the direct convolution, which reads such an
# input along its channels as stored, measured faster (2 threads, with the 1x1 convolution before
# it, ms, Winograd -> direct: DenseNet's 128 -> 32 at 56x56 batch 8 8.9 -> 6.9, at 14x14 0.48 -> 0.41,
# at 7x7 0.15 -> 0.13, batch 2 at 56x56 1.9 -> 1.75; DenseNet-121 at batch 8 through lazygrad.onnx
# 120-126 -> 116 ms). One image keeps the rule above: DenseNet-121, GoogLeNet and ResNet-50 at batch
# 1 measured 3-5% slower without their Winograd convolutions of 32 to 95 channels.
WINOGRAD_MIN_CHANNELS_OF_CHANNELS_LAST = 96
WINOGRAD_CACHED_BYTES = 16 << 20


def _winograd(padded: Tensor, weight: Tensor, stride, dilation, groups: int) -> bool:
    """Whether a convolution runs as `_winograd_product`: on the CPU device, where nothing requires
    grad (inference, or an input's gradient, a convolution with the flipped weight: `_conv_transpose`
    in backward), ungrouped 3x3 at stride 1 and dilation 1, float32, with at least
    WINOGRAD_MIN_CHANNELS input and output channels and WINOGRAD_MIN_TILES tiles, and from 64 to 95
    channels a transformed input within WINOGRAD_CACHED_BYTES (see the measurements above)."""
    if device_kind(padded.device) != "CPU" or groups != 1 or weight.shape[2:] != (3, 3) or padded.ndim != 4:
        return False
    if stride != (1, 1) or dilation != (1, 1) or padded.dtype != dtypes.float32 or weight.dtype != dtypes.float32:
        return False
    if Tensor.grad_enabled and (padded.requires_grad or weight.requires_grad):
        return False
    channels = min(weight.shape[0], weight.shape[1])
    tiles = padded.shape[0] * ((padded.shape[2] - 1) // 2) * ((padded.shape[3] - 1) // 2)
    if channels < WINOGRAD_MIN_CHANNELS or tiles < WINOGRAD_MIN_TILES:
        return False
    if padded.shape[0] > 1 and channels < WINOGRAD_MIN_CHANNELS_OF_CHANNELS_LAST and _computed_channels_last(padded):
        return False
    return not (64 <= channels < 96 and 16 * weight.shape[1] * tiles * 4 > WINOGRAD_CACHED_BYTES)


_WINOGRAD_MATRICES: dict[str, tuple[Tensor, Tensor, Tensor]] = {}


def _winograd_matrices(device: str) -> tuple[Tensor, Tensor, Tensor]:
    """B^T (x) B^T, G (x) G and A^T (x) A^T (16 inputs by 2 output rows by 2 columns) laid out
    for `_winograd_product`, made once per device: the
    same buffers on every call, so the weight's transform, which reads one of them, is a value derived
    from unchanged buffers that later calls keep."""
    if device not in _WINOGRAD_MATRICES:
        _WINOGRAD_MATRICES[device] = tuple(Tensor(matrix, device=device).realize() for matrix in (
            np.einsum("ia,jb->ijab", WINOGRAD_BT, WINOGRAD_BT).reshape(16, 1, 1, 1, 1, 4, 4),
            np.einsum("ia,jb->ijab", WINOGRAD_G, WINOGRAD_G).reshape(16, 3, 3, 1, 1),
            np.einsum("xi,yj->ijxy", WINOGRAD_AT, WINOGRAD_AT).reshape(16, 1, 1, 2, 1, 2, 1)))
    return _WINOGRAD_MATRICES[device]


def _winograd_product(padded: Tensor, weight: Tensor) -> Tensor:
    """The 3x3 convolution of an already padded x (N, C, H + 2, W + 2) with weight (K, C, 3, 3) by
    Winograd's F(2x2, 3x3), channels last throughout: x is stored (N, H + 2, W + 2, C), its
    overlapping 4x4 tiles (stride 2) transformed into 16 planes (tiles, C) and the weight into 16
    planes (C, K) (each a reduce over a constant 4x4 or 3x3 matrix, vectors along the channels; a
    weight computed in the call, as backward's flipped one, first copied to (3, 3, C, K): read in
    place its transform took 9.7 ms at 512 channels, 1.1 from the copy, which matters where the
    weight changes every step; a stored weight is read in place, so the transform reads only
    unchanged buffers), a
    batched matmul (16, tiles, C) @ (16, C, K), and each 4x4 result tile turned into 2x2 outputs
    (N, H, W, K), stored channels last and read as (N, K, H, W), cropped to H x W. So stored, a bias
    and activation after it join that last kernel (elementwise ops compute in the stored order of
    what they read, lazy.py), and a 1x1 convolution computed channels last reads its input along the
    channels: ResNet-50, kernels alone, 2 threads, 1.63 -> 0.71 ms for the 2x2 outputs of its 16
    Winograd convolutions and what they fed (as 4 planes (2, 2, tiles, K), each output's bias and
    ReLU were a copy into (N, K, H, W)), 2.81 -> 2.52 for the four 128 -> 512 1x1 convolutions at
    28x28 after them; GoogLeNet's kernels 23.5 -> 20.8 ms. Along the channels every kernel's loads
    and stores are contiguous; with the tiles contiguous instead the input's transform read every other
    column, scalar by scalar (ResNet-18 at batch 1, one thread: 0.78 -> 0.26 ms per 64-channel
    56x56 transform). The weight's transform, a function of the weight alone, is kept between calls
    (derived_values.py, and the jit's skipped launches); where the product packs it, a stored
    weight's transform is built in panels at once and those are kept (parameter_values.kept_copy),
    so an eager call neither builds it nor copies it into panels again."""
    batch, channels, height, width = padded.shape[0], padded.shape[1], padded.shape[2] - 2, padded.shape[3] - 2
    out_channels, device = weight.shape[0], padded.device
    rows, columns = -(-height // 2), -(-width // 2)
    tiles = padded.pad(((0, 0), (0, 0), (0, 2 * rows - height), (0, 2 * columns - width)))
    channels_last = tiles.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    windows = pool_windows(channels_last, (4, 4), (2, 2), (1, 1)).permute(0, 2, 3, 1, 4, 5)  # (N, rows, columns, C, 4, 4)
    input_transform, _, output_transform = _winograd_matrices(device)
    v = (windows.unsqueeze(0) * input_transform).sum((5, 6)).reshape(16, batch * rows * columns, channels)
    stored = first_shard(weight.lazydata).realized  # then the transform is a value of stored buffers alone
    if stored and packs_operands(device, batch * rows * columns, channels, out_channels, constant_right="derived"):
        # the transform in panels, as v @ u packs it, kept between eager calls while the weight is unchanged
        panels = kept_copy("winograd panels", weight, _winograd_weight_panels, (panel_shape(device)[1],))
        m = product_with_panels(v, panels, out_channels)
    else:
        m = v @ _winograd_weight(weight)
    m = m.reshape(16, batch, rows, 1, columns, 1, out_channels)
    y = (m * output_transform).sum(0).reshape(batch, 2 * rows, 2 * columns, out_channels)  # stored channels last
    return y.permute(0, 3, 1, 2)[:, :, :height, :width]


def _winograd_weight(weight: Tensor) -> Tensor:
    """Winograd's transform of weight (K, C, 3, 3): (16, C, K)."""
    kernel_last = weight.permute(2, 3, 1, 0)  # (3, 3, C, K): the transform's vectors along K
    if not first_shard(weight.lazydata).realized:
        kernel_last = kernel_last.contiguous()
    return (kernel_last.unsqueeze(0) * _winograd_matrices(weight.device)[1]).sum((1, 2))


def _winograd_weight_panels(weight: Tensor, width: int) -> Tensor:
    return right_panels(_winograd_weight(weight), width)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """1-D convolution (cross-correlation) of input (N, C_in, L) or (C_in, L) with weight
    (C_out, C_in/groups, k); padding is an int, a 1-tuple, 'valid', 'same' or ((before, after),)."""
    return _convolution("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """2-D convolution (cross-correlation) of input (N, C_in, H, W) or (C_in, H, W) with weight
    (C_out, C_in/groups, kH, kW). stride, padding and dilation are ints or pairs; padding may also be
    'valid' or 'same' (stride 1 only; an odd total puts the extra row and column after, as PyTorch),
    or, beyond PyTorch, a (before, after) pair per spatial dim, as in every conv function here.
    With realized input and weight the whole forward, bias included, is one kernel (but see
    `_output_channels_last_product`)."""
    return _convolution("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


# Output channels whose sums one AVX-512 VNNI instruction adds to (16 int32 lanes): byte_dot_conv2d packs
# its weight in blocks of them.
BYTE_DOT_LANES = 16


def byte_dot_conv2d(input: Tensor, weight: Tensor, stride=1, padding=0, dilation=1, padding_value=0) -> Tensor:
    """The exact int32 convolution (cross-correlation) of a uint8 input (N, C, H, W) with an int8
    weight (K, C, kh, kw); `padding` as conv2d's, or (before, after) per spatial dim, of
    `padding_value` (an int, or a uint8 Tensor of one element: a zero point). int8 inference's
    product: lazygrad.quantize shifts its int8 input to uint8, padding with 128; ONNX's ConvInteger
    and QLinearConv take uint8 activations.

    Laid out for a register tile of uint8-by-int8 dot products (codegen/opts.py byte_dot_tile: on
    AVX-512 VNNI, vpdpbusd adds 4 products to each of 16 int32 lanes): the input is stored as it is
    (a quantization computed along its rows, vectors), then padded and stored channels last, its
    channels padded to a multiple of 4 with zeros, and read as windows (N, OH, OW, kh, kw, C/4, 4);
    the weight is packed (K/16, kh, kw, C/4, 16, 4), output channels padded to a multiple of 16, so
    that at each window position 16 output channels' 4 weights are one run of 64 bytes (a value of
    the weight alone: kept between calls, derived_values.py). The sums are stored channels last and
    read back as (N, K, OH, OW). A 3x3 convolution of 64 channels at 56x56, batch 16, one thread:
    8.2 ms (450 GOP/s), float32's 33 ms."""
    name = "byte_dot_conv2d"
    if input.dtype != dtypes.uint8 or weight.dtype != dtypes.int8:
        raise TypeError(f"{name}: expected a uint8 input and an int8 weight, got {input.dtype.name} and "
                        f"{weight.dtype.name}")
    if input.ndim != 4 or weight.ndim != 4 or input.shape[1] != weight.shape[1]:
        raise ValueError(f"{name}: expected input (N, C, H, W) and weight (K, C, kh, kw) with the same C, got "
                         f"{input.shape} and {weight.shape}")
    out_channels, channels, *kernel = weight.shape
    stride, dilation = _ints(stride, 2, name, "stride", minimum=1), _ints(dilation, 2, name, "dilation", minimum=1)
    if isinstance(padding, (list, tuple)) and all(isinstance(pair, (list, tuple)) for pair in padding):
        spatial = tuple((int(before), int(after)) for before, after in padding)  # ONNX's, which may differ
    else:
        spatial = _conv_padding(name, padding, kernel, stride, dilation)
    pads = ((0, 0), (0, 0)) + spatial
    unpadded = not any(before or after for before, after in spatial)
    _check_windows_fit(name, input.shape, tuple(size + before + after for size, (before, after)
                                                 in zip(input.shape[2:], spatial)), kernel, dilation)
    if _computed_channels_last(input):
        # (a quantization of the last convolution's output, computed channels last): stored channels
        # last as it is computed, and read in place where nothing is padded; it had been stored channels
        # first and copied back (1024 channels at 14x14: 0.62 ms, the convolution 0.07)
        stored = input.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
        if unpadded and channels % 4 == 0:
            return byte_dot_channels_last(stored.permute(0, 2, 3, 1), weight, stride, dilation, name)
    else:
        stored = input.contiguous()
    if unpadded:
        padded = stored
    elif isinstance(padding_value, Tensor):  # a value known when the kernel runs
        inside = Tensor.ones(*input.shape, dtype=dtypes.bool, device=input.device).pad(pads)
        padded = inside.where(stored.pad(pads), padding_value.reshape(()).cast(dtypes.uint8))
    else:
        padded = stored.pad(pads, value=padding_value)
    channels_last = padded.pad(((0, 0), (0, -channels % 4), (0, 0), (0, 0))).permute(0, 2, 3, 1).contiguous()
    return byte_dot_channels_last(channels_last, weight, stride, dilation, name)


def byte_dot_channels_last(channels_last: Tensor, weight: Tensor, stride, dilation, name: str) -> Tensor:
    """byte_dot_conv2d's sums over an input stored (N, H, W, C) with C a multiple of 4, padded: the
    register tile of uint8-by-int8 dot products (byte_dot_linear takes it for 32 rows or more)."""
    out_channels, channels, *kernel = weight.shape
    windows = pool_windows(channels_last.permute(0, 3, 1, 2), kernel, stride, dilation)  # (N, C, OH, OW, kh, kw)
    batch, quads, rows, columns = windows.shape[0], windows.shape[1] // 4, windows.shape[2], windows.shape[3]
    windows = windows.reshape(batch, quads, 4, rows, columns, *kernel).permute(0, 3, 4, 5, 6, 1, 2)
    windows = windows.reshape(batch, rows, columns, 1, 1, *kernel, quads, 4)  # against (K/16, 16) output channels
    lanes = BYTE_DOT_LANES
    blocks = -(-out_channels // lanes)
    packed = weight.pad(((0, blocks * lanes - out_channels), (0, -channels % 4), (0, 0), (0, 0)))
    packed = packed.reshape(blocks, lanes, quads, 4, *kernel).permute(0, 4, 5, 2, 1, 3).contiguous()
    weights = packed.permute(0, 4, 1, 2, 3, 5)  # (K/16, 16, kh, kw, C/4, 4)
    products = windows.cast(dtypes.int32) * weights.cast(dtypes.int32)  # (N, OH, OW, K/16, 16, kh, kw, C/4, 4)
    sums = products._reduce(Ops.SUM, (-4, -3, -2, -1), False, name).reshape(batch, rows, columns, blocks * lanes)
    return sums[..., :out_channels].permute(0, 3, 1, 2)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """3-D convolution of input (N, C_in, D, H, W) or (C_in, D, H, W) with weight
    (C_out, C_in/groups, kD, kH, kW)."""
    return _convolution("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(name: str, dims: int, input, weight, bias, stride, padding, output_padding, groups,
                    dilation) -> Tensor:
    """The gradient of a convolution with respect to its input, as ordinary convolutions: at stride 1
    the input padded by dilation*(k-1) - padding on each side, convolved with the flipped kernel whose
    in/out channel dims are swapped per group; strided, one such convolution per phase of the output
    (`_transposed_by_phases`). Its own gradients are written out (the input's a strided convolution,
    the weight's a product with the output gradient's windows)."""
    x, unbatched = _batched(name, input, dims)
    _check_conv_weight(name, x, weight, bias, groups, dims, transposed=True)
    in_channels, per_group, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
    stride = _ints(stride, dims, name, "stride", minimum=1)
    dilation = _ints(dilation, dims, name, "dilation", minimum=1)
    padding = _ints(padding, dims, name, "padding")
    output_padding = _ints(output_padding, dims, name, "output_padding")
    for extra, s, d in zip(output_padding, stride, dilation):
        if extra >= max(s, d):
            raise ValueError(f"{name}: output_padding {output_padding} must be smaller than either stride {stride} "
                             f"or dilation {dilation}")
    batch, sizes = x.shape[0], x.shape[2:]
    outputs = [(size - 1) * s - 2 * p + d * (k - 1) + extra + 1
               for size, s, p, d, k, extra in zip(sizes, stride, padding, dilation, kernel, output_padding)]
    if any(size < 1 for size in outputs):
        raise ValueError(f"{name}: input of shape {input.shape} with weight of shape {weight.shape}, stride {stride} "
                         f"and padding {padding} gives output size {tuple(outputs)}, which is too small")
    source, source_weight = x, weight
    gradients = Tensor.grad_enabled and (x.requires_grad or weight.requires_grad)
    if gradients:  # both written out below, not derived through the zeros spread between x's elements
        x, weight = x.detach(), weight.detach()
    if any(s > 1 for s in stride):
        out = _transposed_by_phases(x, weight, tuple(outputs), stride, padding, dilation, groups)
    else:  # stride 1: the convolution of x padded by dilation * (k - 1) - padding (a convolution's input gradient)
        # stride-1 zeros after every element: (.., size) -> (.., size, 1) -> pad -> (.., size * stride)
        x = x.reshape((batch, in_channels) + _interleave(sizes, (1,) * dims))
        x = x.pad(((0, 0), (0, 0)) + _interleave(((0, 0),) * dims, [(0, s - 1) for s in stride]))
        x = x.reshape((batch, in_channels) + tuple(size * s for size, s in zip(sizes, stride)))
        # the zeros after the last element are dropped again; negative padding crops
        edges = [d * (k - 1) - p for d, k, p in zip(dilation, kernel, padding)]
        x = x.pad(((0, 0), (0, 0)) + tuple((edge, edge + extra - (s - 1))
                                           for edge, extra, s in zip(edges, output_padding, stride)))
        conv_weight = weight.reshape((groups, in_channels // groups, per_group) + kernel).transpose(1, 2)
        conv_weight = conv_weight.reshape((per_group * groups, in_channels // groups) + kernel)
        conv_weight = conv_weight.flip(tuple(range(2, 2 + dims)))
        if _winograd(x, conv_weight, (1,) * dims, dilation, groups):
            # a gradient's (or one in inference), stored (N, C, H, W): channels last, the batch norm
            # gradients and weight-gradient panels after it read it across their loops (ResNet-18's
            # training step at batch 16, 2 threads, kernels 1097 ms direct, 1071 channels last, 1030)
            out = _winograd_product(x, conv_weight).contiguous()
        else:
            out = _windowed_product(x, conv_weight, (1,) * dims, dilation, groups)
    if gradients:
        # the input's gradient is the strided convolution of the output's by the same weight, and the
        # weight's the product of the input with that convolution's windows of the output's gradient;
        # derived through the zeros spread between the input's elements, the first was the windows'
        # product with the weight, kernel x kernel times the spread input, then their fold, and the
        # second read every window of the spread input (a 4x4 stride-2 upsampling of 8 x 64 x 32 x 32,
        # 2 threads: 134 MB of window gradients, 15 + 15 ms, and 134 MB of windows, 11 + 16 ms)
        def rule(grad, out, sources, arg):
            return [_convolution(name, dims, grad, weight, None, stride, padding, dilation, groups),
                    _transposed_weight_gradient(grad, sources[0], kernel, stride, padding, dilation, groups)]
        out = out._with_gradient((source, source_weight), rule)
    if bias is not None:
        out = out + bias.reshape((1, bias.shape[0]) + (1,) * dims)
    return out.squeeze(0) if unbatched else out


def _transposed_by_phases(x: Tensor, weight: Tensor, outputs: tuple, stride, padding, dilation, groups: int) -> Tensor:
    """A strided transposed convolution as one convolution per phase of the output: output position
    q * stride + r of an axis takes the kernel offsets k with k * dilation - r - padding a multiple of
    the stride, which read x at q + (r + padding - k * dilation) / stride, an ordinary convolution of
    x (shifted) by those offsets flipped, at dilation (offset step) * dilation / stride; the phases
    are interleaved once. Spreading x with zeros between its elements, the convolution multiplied
    the zeros too (stride x stride times the products at stride 2 in 2-D; a U-Net's 4x4 upsampling
    of 8 x 64 x 32 x 32, 2 threads: 4.0 + 4.4 ms for the product and the spread input's store)."""
    dims = len(stride)
    batch, in_channels, sizes = x.shape[0], x.shape[1], x.shape[2:]
    per_group, kernel = weight.shape[1], weight.shape[2:]
    # the weight as a convolution's, (out channels, in channels per group, *kernel), not flipped
    conv_weight = weight.reshape((groups, in_channels // groups, per_group) + kernel).transpose(1, 2)
    conv_weight = conv_weight.reshape((per_group * groups, in_channels // groups) + kernel)
    coarse = tuple(-(-size // s) for size, s in zip(outputs, stride))
    phases, reads = {}, {}
    for residues in itertools.product(*[range(s) for s in stride]):
        taps = [[offset for offset in range(k) if (offset * d - r - p) % s == 0]
                for r, s, d, p, k in zip(residues, stride, dilation, padding, kernel)]
        if any(not offsets for offsets in taps):  # no offset reaches this phase
            phases[residues] = Tensor.zeros((batch, per_group * groups) + coarse, dtype=x.dtype, device=x.device)
            continue
        selected, pads, spacings = conv_weight, [], []
        for axis, (offsets, r, s, d, p, size, count) in enumerate(zip(taps, residues, stride, dilation, padding,
                                                                      sizes, coarse)):
            step = offsets[1] - offsets[0] if len(offsets) > 1 else 1
            index = [slice(None)] * selected.ndim
            index[2 + axis] = slice(offsets[0], offsets[-1] + 1, step)
            selected = selected[tuple(index)].flip(2 + axis)
            first = (r + p - offsets[-1] * d) // s  # the smallest shift: the last offset's
            spacing = step * d // s
            needed = (count - 1) + (len(offsets) - 1) * spacing + 1  # x positions the phase reads, from `first`
            pads.append((-first, first + needed - size))
            spacings.append(spacing)
        reads[residues] = (selected, pads, tuple(spacings))
    # one padding of x that covers every phase's, each phase a view of it: the scheduler stores one
    # padded copy, where a padding per phase stored one each, one kernel writing all four of a 2-D
    # stride 2 through bounds tests (a U-Net's 4x4 upsampling of 8 x 64 x 32 x 32: 0.3-0.6 ms)
    if reads:
        widest = [(max(max(pads[axis][0] for _, pads, _ in reads.values()), 0),
                   max(max(pads[axis][1] for _, pads, _ in reads.values()), 0)) for axis in range(dims)]
        padded = x.pad(((0, 0), (0, 0)) + tuple(widest))
    for residues, (selected, pads, spacings) in reads.items():
        shifted = padded.shrink(((0, batch), (0, in_channels)) + tuple(
            (before - low, before + size + high) for (before, _), (low, high), size in zip(widest, pads, sizes)))
        phases[residues] = _windowed_product(shifted, selected, (1,) * dims, spacings, groups)
    return _interleaved(phases, 2, tuple(stride), coarse, tuple(outputs)).contiguous()


def _transposed_weight_gradient(grad: Tensor, x: Tensor, kernel, stride, padding, dilation, groups: int) -> Tensor:
    """The weight gradient of a transposed convolution of x (N, C_in, *sizes) whose output's gradient is
    grad (N, C_out, *outputs): output position i * stride - padding + k * dilation took x at i times the
    weight at k, so the gradient at k sums x at i times grad there, grad's windows (padded by
    `padding`, one window per input position) against x, a matmul per group."""
    dims = len(kernel)
    batch, in_channels, sizes = x.shape[0], x.shape[1], x.shape[2:]
    out_channels = grad.shape[1]
    padded = grad.pad(((0, 0), (0, 0)) + tuple((p, p) for p in padding))
    windows = pool_windows(padded, kernel, stride, dilation)  # (N, C_out, *sizes, *kernel)
    windows = windows.shrink(((0, batch), (0, out_channels)) + tuple((0, size) for size in sizes)
                             + tuple((0, k) for k in kernel))
    positions = batch * math.prod(sizes)
    rows = x.reshape((batch, groups, in_channels // groups) + tuple(sizes))
    rows = rows.permute((1, 2, 0) + tuple(range(3, 3 + dims))).reshape(groups, in_channels // groups, positions)
    columns = windows.reshape((batch, groups, out_channels // groups) + windows.shape[2:])
    columns = columns.permute((1, 0) + tuple(range(3, 3 + dims)) + (2,) + tuple(range(3 + dims, 3 + 2 * dims)))
    columns = columns.reshape(groups, positions, out_channels // groups * math.prod(kernel))
    return (rows @ columns).reshape((in_channels, out_channels // groups) + tuple(kernel))


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed 1-D convolution of input (N, C_in, L) with weight (C_in, C_out/groups, k); output
    length (L - 1)*stride - 2*padding + dilation*(k - 1) + output_padding + 1."""
    return _conv_transpose("conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed 2-D convolution of input (N, C_in, H, W) with weight (C_in, C_out/groups, kH, kW)."""
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


# ---- pooling -----------------------------------------------------------------------------------

def _pool_geometry(name: str, x: Tensor, dims: int, kernel_size, stride, padding, dilation, ceil_mode):
    """kernel, stride, dilation, padding, output sizes, and the (before, after) padding that makes
    the spatial dims end exactly with the last window (more than `padding` after it in ceil_mode,
    less when floor mode leaves a tail unused)."""
    kernel = _ints(kernel_size, dims, name, "kernel_size", minimum=1)
    stride = kernel if stride is None else _ints(stride, dims, name, "stride", minimum=1)
    padding = _ints(padding, dims, name, "padding")
    dilation = _ints(dilation, dims, name, "dilation", minimum=1)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ValueError(f"{name}: padding {padding} must be at most half of kernel_size {kernel}")
    outputs, pads = [], []
    for size, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation):
        span = d * (k - 1) + 1
        count = (size + 2 * p - span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (count - 1) * s >= size + p:  # the last window would start in the padding
            count -= 1
        if count < 1:
            raise ValueError(f"{name}: input of shape {x.shape} is too small for kernel_size {kernel} with "
                             f"padding {padding} and dilation {dilation}")
        outputs.append(count)
        pads.append((p, (count - 1) * s + span - size - p))
    return kernel, stride, dilation, padding, tuple(outputs), tuple(pads)


def _max_pool(name: str, dims: int, input, kernel_size, stride, padding, dilation, ceil_mode,
              return_indices) -> Tensor:
    if return_indices:
        raise NotImplementedError(f"{name}: return_indices=True is not supported")
    x, unbatched = _batched(name, input, dims)
    if x.dtype.is_bool:
        raise TypeError(f"{name}: not supported for bool tensors")
    kernel, stride, dilation, _, _, pads = _pool_geometry(name, x, dims, kernel_size, stride, padding, dilation,
                                                          ceil_mode)
    if Tensor.grad_enabled and x.requires_grad:
        # stored with its padding: its input is then usually a stored relu output (tensor_methods/
        # elementwise.py), whose padded view the scheduler would read through bounds tests (ResNet-18's
        # max pool at batch 16, 2 threads: 3 -> 46 ms)
        padded = x.pad(((0, 0), (0, 0)) + pads, value=lowest_value(x.dtype)).contiguous()
        out = _first_maximum(pool_windows(padded, kernel, stride, dilation), dims)
    else:
        out = reduce_over_windows(x, pads, kernel, stride, dilation, "max")
    return out.squeeze(0) if unbatched else out


def lowest_value(dtype):
    """What padding a max over windows counts as nothing: -inf, or the integer dtype's least."""
    return -math.inf if dtype.is_float else np.iinfo(dtype.np).min


def reduce_over_windows(x: Tensor, pads, kernel, stride, dilation, op: str) -> Tensor:
    """The max (op "max", padding with the dtype's lowest value) or the sum (op "sum", padding with
    zeros) over the windows of x (N, C, *spatial) padded by `pads` ((before, after) per spatial dim;
    a negative after cuts), as a plain reduce (a max shares its gradient among tied maxima): nn's
    max pools in inference, its average pools, and lazygrad.onnx's MaxPool and AveragePool. In
    inference on the CPU device an x read in the order it is stored channels last (a convolution's
    relu: ResNet's stem; DenseNet's transitions) pools channels last (`_channels_last_pool`), so
    the convolutions after it read it along the channels: ResNet-50 through lazygrad.onnx, 2
    threads, kernels alone, its max pool 0.20 -> 0.14 ms, the 1x1 convolution after it 0.23 -> 0.19
    ms; DenseNet-121's first 2x2 average pool 0.34 -> 0.03 ms, its kernels 35.5 -> 32.4 ms, GoogLeNet's
    15.5 -> 14.3, Inception-v3's 67.8 -> 65.9 (their pools of concatenations)."""
    dims = len(kernel)
    fill = lowest_value(x.dtype) if op == "max" else 0
    to_last = (0,) + tuple(range(2, 2 + dims)) + (1,)
    if device_kind(x.device) == "CPU" and not (Tensor.grad_enabled and x.requires_grad) \
            and stored_in_order(first_shard(x.lazydata).permute(to_last)):
        return _channels_last_pool(x.permute(to_last).pad(((0, 0),) + tuple(pads) + ((0, 0),), value=fill),
                                   kernel, stride, dilation, op)
    windows = pool_windows(x.pad(((0, 0), (0, 0)) + tuple(pads), value=fill), kernel, stride, dilation)
    axes = tuple(range(2 + dims, 2 + 2 * dims))
    return windows.max(axes) if op == "max" else windows.sum(axes)


def _first_maximum(windows: Tensor, dims: int) -> Tensor:
    """The maximum of each window (the last `dims` axes) as a choice of one element: the first
    maximum in row-major order, a NaN counting as the largest. Backward then gives a window's whole
    gradient to that element, as PyTorch's max pooling does (a reduce max shares it among ties), and
    reads per window position one gradient and the choice, not the window's values, maximum and
    count of maxima again."""
    axes = tuple(range(windows.ndim - dims, windows.ndim))
    kernel = windows.shape[-dims:]
    values = windows.detach()
    is_max = values == values.max(axes, keepdim=True)
    if values.dtype.is_float:
        is_max = is_max.logical_or(values != values)
    # the largest of (size - position) over the maxima marks the first one (Tensor.argmax's way)
    countdown = Tensor.arange(math.prod(kernel), 0, -1, dtype=dtypes.int32, device=windows.device).reshape(kernel)
    first = is_max.where(countdown, 0).max(axes, keepdim=True)
    return (countdown == first).where(windows, 0).sum(axes)


def _channels_last_pool(padded: Tensor, kernel, stride, dilation, op: str) -> Tensor:
    """The max or sum (`op`) over windows of a padded (N, *spatial, C) value stored channels last (a
    convolution's output, through its batch norm and relu: ResNet-18's stem), computed in
    (N, *outputs, C) order and returned as an (N, C, *outputs) view: the vector is the channels,
    every load contiguous, and the residual sum after it stays channels last with the convolutions
    beside it."""
    dims = len(kernel)
    channels_first = padded.permute((0, 1 + dims) + tuple(range(1, 1 + dims)))
    windows = pool_windows(channels_first, kernel, stride, dilation)                     # (N, C, *outputs, *kernel)
    by_position = windows.permute((0,) + tuple(range(2, 2 + dims)) + (1,) + tuple(range(2 + dims, 2 + 2 * dims)))
    axes = tuple(range(2 + dims, 2 + 2 * dims))
    out = by_position.max(axes) if op == "max" else by_position.sum(axes)                  # (N, *outputs, C)
    return out.permute((0, 1 + dims) + tuple(range(1, 1 + dims)))


def max_pool1d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:
    """Max over windows of (N, C, L) or (C, L); padding counts as -inf. return_indices is not supported.
    The gradient of tied maxima is shared equally (PyTorch gives it all to one of them)."""
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:
    """Max over windows of (N, C, H, W) or (C, H, W); stride defaults to kernel_size, padding counts as
    -inf, ceil_mode lets a last partial window in. return_indices is not supported. The gradient of
    tied maxima is shared equally (PyTorch gives it all to one of them)."""
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _average_divisors(sizes, kernel, stride, padding, outputs, count_include_pad: bool):
    """How many elements each output averages, as PyTorch counts them: padding included or not,
    never the part of a ceil_mode window beyond the padding. A float when all are equal."""
    per_dim = []
    for size, k, s, p, count in zip(sizes, kernel, stride, padding, outputs):
        starts = np.arange(count) * s - p
        ends = np.minimum(starts + k, size + p)
        if count_include_pad:
            per_dim.append(ends - starts)
        else:
            per_dim.append(np.minimum(ends, size) - np.maximum(starts, 0))
    divisors = per_dim[0]
    for counts in per_dim[1:]:
        divisors = np.multiply.outer(divisors, counts)
    return float(divisors.flat[0]) if np.all(divisors == divisors.flat[0]) else divisors


@computes_in_float32
def _avg_pool(name: str, dims: int, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override) -> Tensor:
    x, unbatched = _batched(name, input, dims)
    if not x.dtype.is_float:
        raise TypeError(f"{name}: expected a floating point input, got {x.dtype.name}")
    kernel, stride, _, padding, outputs, pads = _pool_geometry(name, x, dims, kernel_size, stride, padding, 1,
                                                               ceil_mode)
    total = reduce_over_windows(x, pads, kernel, stride, (1,) * dims, "sum")
    if divisor_override is not None:
        if not _is_int(divisor_override) or divisor_override == 0:
            raise ValueError(f"{name}: divisor_override must be a non-zero int, got {divisor_override!r}")
        divisor = float(divisor_override)
    else:
        divisor = _average_divisors(x.shape[2:], kernel, stride, padding, outputs, count_include_pad)
    if isinstance(divisor, np.ndarray):
        divisor = Tensor(divisor.astype(x.dtype.np), device=x.device)
    out = total / divisor
    return out.squeeze(0) if unbatched else out


def avg_pool1d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """Mean over windows of (N, C, L) or (C, L), padding with zeros (counted when count_include_pad)."""
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """Mean over windows of (N, C, H, W) or (C, H, W), padding with zeros (counted in the divisor when
    count_include_pad); divisor_override replaces the divisor."""
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


# ---- resampling along one axis: adaptive pooling and interpolation -----------------------------

def _resample_axis(x: Tensor, axis: int, matrix: np.ndarray) -> Tensor:
    """x with dim `axis` (size in) replaced by matrix @ x along it; matrix (out, in) is a host constant.

    A matrix that picks one element per row is a selection; a selection that is a slice or a repeat
    is a view. Otherwise each output sums where(matrix != 0, x * matrix, 0) over the input dim:
    O(in * out) work per line of x, but exact, since entries outside the mask never touch the value
    (no 0 * inf)."""
    out_size, in_size = matrix.shape
    nonzero = matrix != 0
    is_selection = bool(np.all(nonzero.sum(axis=1) == 1) and np.all(matrix[nonzero] == 1))
    if is_selection:
        sources = matrix.argmax(axis=1)
        picked = _selection_view(x, axis, sources)
        if picked is not None:
            return picked
    trailing = (1,) * (x.ndim - axis - 1)
    values = x.unsqueeze(axis)  # (..., 1, in, ...) against the (out, in) matrix
    if not is_selection:
        values = values * Tensor(matrix.astype(x.dtype.np).reshape((out_size, in_size) + trailing), device=x.device)
    mask = Tensor(nonzero.reshape((out_size, in_size) + trailing), device=x.device)
    return mask.where(values, 0).sum(axis + 1).cast(x.dtype)  # sums of integers come back as int64


def _selection_view(x: Tensor, axis: int, sources: np.ndarray) -> Tensor | None:
    """x[..., sources, ...] along `axis` as a view where the sources are a strided slice or a repeat
    (0, 0, 1, 1, ...: nearest upsampling by an integer factor), else None."""
    count, in_size = len(sources), x.shape[axis]
    step = int(sources[1] - sources[0]) if count > 1 else 1
    if step >= 1 and np.array_equal(sources, sources[0] + step * np.arange(count)):
        start = int(sources[0])
        return x[(slice(None),) * axis + (slice(start, start + step * (count - 1) + 1, step),)]
    factor = count // in_size
    if factor * in_size == count and np.array_equal(sources, np.arange(count) // factor):
        repeated = x.unsqueeze(axis + 1).expand(x.shape[:axis + 1] + (factor,) + x.shape[axis + 1:])
        return repeated.reshape(x.shape[:axis] + (count,) + x.shape[axis + 1:])
    return None


def select_along(x: Tensor, axis: int, sources: np.ndarray) -> Tensor:
    """x[..., sources, ...] along `axis` for indices known on the host (a resize's nearest sources): a
    view where `_selection_view` finds one (its reader then reads x: upsampling costs no kernel of
    its own), else a gather by a constant index Tensor."""
    picked = _selection_view(x, axis, sources)
    if picked is not None:
        return picked
    return x[(slice(None),) * axis + (Tensor(sources.astype(np.int64), device=x.device),)]


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Mean over PyTorch's adaptive windows: output cell i of a dim of size n covers
    [floor(i*n/out), ceil((i+1)*n/out)). None in output_size keeps that dim's size. A dim whose size is
    a multiple of its output is a window view; any other dim is resampled (see `_resample_axis`)."""
    name = "adaptive_avg_pool2d"
    x, unbatched = _batched(name, input, 2)
    if not x.dtype.is_float:
        raise TypeError(f"{name}: expected a floating point input, got {x.dtype.name}")
    if output_size is None or _is_int(output_size):
        output_size = (output_size, output_size)
    if not isinstance(output_size, (tuple, list)) or len(output_size) != 2:
        raise ValueError(f"{name}: output_size must be an int or a pair, got {output_size!r}")
    sizes = x.shape[2:]
    outputs = tuple(size if out is None else out for size, out in zip(sizes, output_size))
    if not all(_is_int(out) and out >= 1 for out in outputs):
        raise ValueError(f"{name}: output_size must be positive ints (or None), got {output_size!r}")
    kernel = tuple(size // out if size % out == 0 else 1 for size, out in zip(sizes, outputs))
    if kernel != (1, 1):
        x = pool_windows(x, kernel, kernel, (1, 1)).mean((4, 5))
    for axis, (size, out) in enumerate(zip(sizes, outputs)):
        if size % out:
            matrix = np.zeros((out, size))
            for cell in range(out):
                start, end = cell * size // out, -(-(cell + 1) * size // out)
                matrix[cell, start:end] = 1.0 / (end - start)
            x = _resample_axis(x, 2 + axis, matrix)
    return x.squeeze(0) if unbatched else x


_LINEAR_MODES = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}  # mode -> its number of spatial dims
_SELECTING_MODES = ("nearest", "nearest-exact", "area")  # any of 1 to 3 spatial dims


def _nearest_matrix(in_size: int, out_size: int, scale: float | None) -> np.ndarray:
    """PyTorch's 'nearest' source index floor(dst * in/out), in float32 as PyTorch computes it."""
    if out_size == in_size:
        sources = np.arange(out_size)
    elif out_size == 2 * in_size:
        sources = np.arange(out_size) // 2
    else:
        ratio = np.float32(1.0 / scale) if scale else np.float32(in_size) / np.float32(out_size)
        sources = np.floor(np.arange(out_size, dtype=np.float32) * ratio).astype(np.int64)
        sources = np.minimum(sources, in_size - 1)
    matrix = np.zeros((out_size, in_size))
    matrix[np.arange(out_size), sources] = 1.0
    return matrix


def _nearest_exact_matrix(in_size: int, out_size: int, scale: float | None) -> np.ndarray:
    """PyTorch's 'nearest-exact' source index floor((dst + 0.5) * in/out), in float32 as PyTorch computes it."""
    ratio = np.float32(1.0 / scale) if scale else np.float32(in_size) / np.float32(out_size)
    sources = np.floor((np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * ratio).astype(np.int64)
    matrix = np.zeros((out_size, in_size))
    matrix[np.arange(out_size), np.minimum(sources, in_size - 1)] = 1.0
    return matrix


def _area_matrix(in_size: int, out_size: int) -> np.ndarray:
    """PyTorch's 'area': the mean over adaptive average pooling's window [floor(i*in/out), ceil((i+1)*in/out))."""
    matrix = np.zeros((out_size, in_size))
    for index in range(out_size):
        start, end = (index * in_size) // out_size, -(-(index + 1) * in_size // out_size)
        matrix[index, start:end] = 1.0 / (end - start)
    return matrix


def _source_positions(in_size: int, out_size: int, scale: float | None, align_corners: bool, float_type) -> np.ndarray:
    """PyTorch's input position of each output of an interpolating mode, in the input's precision:
    corners aligned, or pixel centres mapped (before any clamping, which differs between modes)."""
    if align_corners:
        ratio = float_type(in_size - 1) / float_type(out_size - 1) if out_size > 1 else float_type(0)
        return ratio * np.arange(out_size, dtype=float_type)
    ratio = float_type(1.0 / scale) if scale else float_type(in_size) / float_type(out_size)
    return ratio * (np.arange(out_size, dtype=float_type) + float_type(0.5)) - float_type(0.5)


CUBIC_A = -0.75  # PyTorch's (and OpenCV's) cubic convolution coefficient


def _cubic_matrix(in_size: int, out_size: int, scale: float | None, align_corners: bool, float_type) -> np.ndarray:
    """PyTorch's bicubic weights along one dim: four taps around the source position (not clamped to 0,
    unlike linear), their indices clamped to the input's edges, Keys' cubic with A = -0.75."""
    sources = _source_positions(in_size, out_size, scale, align_corners, float_type)
    floor = np.floor(sources)
    t = (sources - floor).astype(np.float64)

    def near(x):  # |x| <= 1
        return ((CUBIC_A + 2) * x - (CUBIC_A + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((CUBIC_A * x - 5 * CUBIC_A) * x + 8 * CUBIC_A) * x - 4 * CUBIC_A

    matrix = np.zeros((out_size, in_size))
    for offset, weight in zip((-1, 0, 1, 2), (far(t + 1), near(t), near(1 - t), far(2 - t))):
        taps = np.clip(floor.astype(np.int64) + offset, 0, in_size - 1)
        np.add.at(matrix, (np.arange(out_size), taps), weight)
    return matrix


def _linear_matrix(in_size: int, out_size: int, scale: float | None, align_corners: bool, float_type) -> np.ndarray:
    """PyTorch's linear interpolation weights: two neighbours per output, in the input's precision."""
    sources = _source_positions(in_size, out_size, scale, align_corners, float_type)
    if not align_corners:
        sources = np.maximum(sources, float_type(0))
    first = np.minimum(np.floor(sources).astype(np.int64), in_size - 1)
    second = np.minimum(first + 1, in_size - 1)
    weight = np.clip(sources - first, 0, 1).astype(np.float64)
    matrix = np.zeros((out_size, in_size))
    np.add.at(matrix, (np.arange(out_size), first), 1.0 - weight)
    np.add.at(matrix, (np.arange(out_size), second), weight)
    return matrix


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                recompute_scale_factor=None) -> Tensor:
    """Resize the spatial dims of (N, C, *spatial) to `size`, or by `scale_factor` (output size
    floor(size * factor)). Modes: 'nearest', 'nearest-exact' and 'area' (3-D to 5-D input), 'linear'
    (3-D), 'bilinear' and 'bicubic' (4-D), 'trilinear' (5-D), with PyTorch's source-index arithmetic
    and align_corners. Each spatial dim is resampled in turn (see `_resample_axis`): nearest with an
    integer factor is a view."""
    name = "interpolate"
    if mode not in _SELECTING_MODES and mode not in _LINEAR_MODES:
        raise ValueError(f"{name}: mode must be one of {', '.join(map(repr, (*_SELECTING_MODES, *_LINEAR_MODES)))}, "
                         f"got {mode!r}")
    if mode in _SELECTING_MODES:
        if input.ndim not in (3, 4, 5):
            raise ValueError(f"{name}: mode {mode!r} expects a 3-D, 4-D or 5-D input, got shape {input.shape}")
        if align_corners is not None:
            raise ValueError(f"{name}: align_corners can only be set with the interpolating modes "
                             "'linear', 'bilinear', 'bicubic' and 'trilinear'")
        if mode == "area" and not input.dtype.is_float:
            raise TypeError(f"{name}: mode 'area' expects a floating point input, got {input.dtype.name}")
    elif input.ndim != _LINEAR_MODES[mode] + 2:
        raise ValueError(f"{name}: mode {mode!r} expects a {_LINEAR_MODES[mode] + 2}-D input, got shape {input.shape}")
    elif not input.dtype.is_float:
        raise TypeError(f"{name}: mode {mode!r} expects a floating point input, got {input.dtype.name}")
    dims, sizes = input.ndim - 2, input.shape[2:]
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{name}: give exactly one of size and scale_factor")
    if size is not None:
        outputs = _ints(size, dims, name, "size", minimum=1)
        scales = (None,) * dims
    else:
        factors = (scale_factor,) * dims if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        if len(factors) != dims or not all(isinstance(f, (int, float)) and f > 0 for f in factors):
            raise ValueError(f"{name}: scale_factor must be a positive number or {dims} of them, got {scale_factor!r}")
        outputs = tuple(math.floor(float(s) * float(f)) for s, f in zip(sizes, factors))
        scales = (None,) * dims if recompute_scale_factor else tuple(float(f) for f in factors)
        if any(out < 1 for out in outputs):
            raise ValueError(f"{name}: scale_factor {scale_factor} gives output size {outputs} for input of shape "
                             f"{input.shape}")
    float_type = np.float64 if input.dtype == dtypes.float64 else np.float32
    x = input
    for axis, (in_size, out_size, scale) in enumerate(zip(sizes, outputs, scales)):
        if mode == "nearest":
            matrix = _nearest_matrix(in_size, out_size, scale)
        elif mode == "nearest-exact":
            matrix = _nearest_exact_matrix(in_size, out_size, scale)
        elif mode == "area":
            matrix = _area_matrix(in_size, out_size)
        elif mode == "bicubic":
            matrix = _cubic_matrix(in_size, out_size, scale, bool(align_corners), float_type)
        else:
            matrix = _linear_matrix(in_size, out_size, scale, bool(align_corners), float_type)
        x = _resample_axis(x, 2 + axis, matrix)
    return x
