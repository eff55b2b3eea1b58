"""GridSample and DeformConv: sampling an input at data-dependent positions.

Registered in registry.OPERATORS; model.py calls it. The grid's normalized coordinates become
input positions; each output then reads 1 (nearest), 2 (linear) or 4 (cubic) taps per spatial dim,
gathered from the flattened input with Tensor.gather and summed with their weights, so the whole
operator is Tensor ops (and differentiable with respect to the input).
"""
from __future__ import annotations

import itertools
import math

from lazygrad.dtype import dtypes
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor

CUBIC_A = -0.75


def reflect(x: Tensor, low: float, high: float) -> Tensor:
    """Fold x back into [low, high] by reflecting at the edges (repeatedly)."""
    span = high - low
    below, above = x < low, x > high
    distance = below.where(low - x, x - high)
    folds = (distance / span).floor()
    rest = distance - folds * span
    even = (folds - (folds / 2).floor() * 2) == 0
    from_below = even.where(low + rest, high - rest)
    from_above = even.where(high - rest, low + rest)
    return below.where(from_below, above.where(from_above, x))


def cubic_weights(t: Tensor) -> list[Tensor]:
    a = CUBIC_A
    return [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
            ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a]


def taps_of(x: Tensor, mode: str) -> list[tuple[Tensor, Tensor]]:
    """(integer position, weight) pairs for one spatial dim."""
    if mode == "nearest":
        return [(x, x._const_like(1.0))]
    base = x.floor()
    t = x - base
    if mode == "linear":
        return [(base, 1 - t), (base + 1, t)]
    return [(base + offset, weight) for offset, weight in zip((-1, 0, 1, 2), cubic_weights(t))]


def tap_index(position: Tensor, size: int, padding_mode: str, low: float, high: float) -> tuple[Tensor, Tensor | None]:
    """The in-range integer index a tap reads, and (for zeros padding) whether it is inside."""
    if padding_mode == "zeros":
        inside = (position >= 0).logical_and(position <= size - 1)
        return position.clamp(0, size - 1), inside
    if padding_mode == "border":
        return position.clamp(0, size - 1), None
    return reflect(position, low, high).trunc().clamp(0, size - 1), None


@onnx_op("GridSample")
def grid_sample(ctx, x, grid, align_corners=0, mode="linear", padding_mode="zeros"):
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    batch, channels, sizes = x.shape[0], x.shape[1], x.shape[2:]
    dims = len(sizes)
    out_shape = grid.shape[1:-1]
    points = math.prod(out_shape)
    grid = grid.cast(dtypes.float32).reshape(batch, points, dims)
    coordinates, bounds = [], []
    for axis, size in enumerate(sizes):
        normalized = grid[:, :, dims - 1 - axis]
        low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        position = (normalized + 1) / 2 * (size - 1) if align_corners else ((normalized + 1) * size - 1) / 2
        if mode == "nearest":
            position = position.round()
        outside = (position < low).logical_or(position > high)
        if padding_mode == "border":
            position = outside.where(position.clamp(0, size - 1), position)
        elif padding_mode == "reflection":
            position = outside.where(reflect(position, low, high), position)
        coordinates.append(position)
        bounds.append((low, high))
    flat_input = x.reshape(batch, channels, math.prod(sizes))
    strides = [math.prod(sizes[axis + 1:]) for axis in range(dims)]
    per_axis = [taps_of(position, mode) for position in coordinates]
    result = None
    for combination in itertools.product(*per_axis):
        flat_index, weight = None, None
        for axis, (position, tap_weight) in enumerate(combination):
            index, inside = tap_index(position, sizes[axis], padding_mode, *bounds[axis])
            if inside is not None:
                tap_weight = inside.where(tap_weight, 0.0)
            term = index.cast(dtypes.int64) * strides[axis]
            flat_index = term if flat_index is None else flat_index + term
            weight = tap_weight if weight is None else weight * tap_weight
        gathered = flat_input.gather(2, flat_index.reshape(batch, 1, points).expand(batch, channels, points))
        contribution = gathered * weight.reshape(batch, 1, points).cast(x.dtype)
        result = contribution if result is None else result + contribution
    return result.reshape(batch, channels, *out_shape).cast(x.dtype)


def sample_bilinear(x: Tensor, y_position: Tensor, x_position: Tensor) -> Tensor:
    """x (N, C, H, W) sampled at absolute positions of shape (N, *points), zeros outside: (N, C, *points)."""
    batch, channels, height, width = x.shape
    points_shape = y_position.shape[1:]
    points = math.prod(points_shape)
    flat_input = x.reshape(batch, channels, height * width)
    result = None
    for (row, row_weight), (column, column_weight) in itertools.product(taps_of(y_position, "linear"),
                                                                        taps_of(x_position, "linear")):
        row_index, row_inside = tap_index(row, height, "zeros", 0.0, height - 1.0)
        column_index, column_inside = tap_index(column, width, "zeros", 0.0, width - 1.0)
        weight = row_inside.logical_and(column_inside).where(row_weight * column_weight, 0.0)
        flat_index = (row_index * width + column_index).cast(dtypes.int64).reshape(batch, 1, points)
        gathered = flat_input.gather(2, flat_index.expand(batch, channels, points))
        contribution = gathered * weight.reshape(batch, 1, points).cast(x.dtype)
        result = contribution if result is None else result + contribution
    return result.reshape(batch, channels, *points_shape)


@onnx_op("DeformConv")
def deform_conv(ctx, x, w, offset, bias=None, mask=None, dilations=None, group=1, kernel_shape=None,
                offset_group=1, pads=None, strides=None):
    if x.ndim != 4:
        raise NotImplementedError(f"DeformConv with {x.ndim - 2} spatial dims (2 are supported)")
    batch, channels = x.shape[:2]
    out_channels, group_channels, kh, kw = w.shape
    out_h, out_w = offset.shape[2:]
    dilations, strides, pads = dilations or [1, 1], strides or [1, 1], pads or [0, 0, 0, 0]
    offset = offset.reshape(batch, offset_group, kh, kw, 2, out_h, out_w)
    mask = Tensor.ones(batch, offset_group, kh, kw, out_h, out_w, dtype=x.dtype, device=ctx.device) \
        if mask is None else mask.reshape(batch, offset_group, kh, kw, out_h, out_w)
    rows = (Tensor.arange(kh, device=ctx.device) * dilations[0]).reshape(kh, 1, 1, 1) + \
        (Tensor.arange(out_h, device=ctx.device) * strides[0] - pads[0]).reshape(1, 1, out_h, 1)
    columns = (Tensor.arange(kw, device=ctx.device) * dilations[1]).reshape(1, kw, 1, 1) + \
        (Tensor.arange(out_w, device=ctx.device) * strides[1] - pads[1]).reshape(1, 1, 1, out_w)
    per_offset_group = channels // offset_group
    sampled = []
    for g in range(offset_group):
        y_position = rows.float() + offset[:, g, :, :, 0].float()
        x_position = columns.float() + offset[:, g, :, :, 1].float()
        part = sample_bilinear(x[:, g * per_offset_group:(g + 1) * per_offset_group], y_position, x_position)
        sampled.append(part * mask[:, g].unsqueeze(1))
    columns_data = sampled[0].cat(*sampled[1:], dim=1) if len(sampled) > 1 else sampled[0]
    taps = group_channels * kh * kw
    columns_data = columns_data.reshape(batch, group, 1, taps, out_h * out_w)
    weights = w.reshape(1, group, out_channels // group, taps, 1)
    result = (columns_data * weights).sum(3).reshape(batch, out_channels, out_h, out_w)
    if bias is not None:
        result = result + bias.reshape(1, -1, 1, 1)
    return result.cast(x.dtype)
