"""Indexing ONNX operators: Gather, GatherElements, GatherND, the Scatter family, OneHot, Compress, NonZero, Unique.

Registered in registry.OPERATORS; model.py calls them. ONNX indices may be negative (counting from
the end); they are normalized before calling Tensor's gather and scatter, which read 0 for them.
Compress, NonZero and Unique have data-dependent output shapes, so they realize their (mask) input.
"""
from __future__ import annotations

import math

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor


def positive_indices(indices: Tensor, size: int) -> Tensor:
    indices = indices.cast(dtypes.int64)
    return (indices < 0).where(indices + size, indices)


@onnx_op("Gather")
def gather(ctx, x, indices, axis=0):
    axis = axis + x.ndim if axis < 0 else axis
    if ctx.runner.is_known(indices):
        picked = _known_slice(ctx.numpy(indices), x.shape[axis])
        if picked is not None:  # a view of x, as a Python index would be: no indexed load
            return x[(slice(None),) * axis + (picked,)]
    if indices.ndim == 0:
        return x[(slice(None),) * axis + (positive_indices(indices, x.shape[axis]).reshape(1),)].squeeze(axis)
    return x[(slice(None),) * axis + (positive_indices(indices, x.shape[axis]),)]


def _known_slice(indices: np.ndarray, size: int) -> int | slice | None:
    """Known Gather indices as a Python index of the axis: one index (ViT's split of its packed
    query, key and value projection, exported as three Gathers of 0, 1 and 2: a kernel of indexed
    loads each, 0.58 ms a layer, where a view costs nothing), or a run of consecutive ones as a
    slice; None for other index sets, which take the indexed load. Out of range is an error here,
    where the indexed load would read 0."""
    flat = np.where(indices < 0, indices + size, indices).reshape(-1).astype(np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= size):
        raise IndexError(f"Gather: indices {indices.reshape(-1).tolist()[:8]} out of range for an axis of size {size}")
    if indices.ndim == 0:
        return int(flat[0])
    if indices.ndim == 1 and flat.size > 0 and np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
        return slice(int(flat[0]), int(flat[0]) + flat.size)
    return None


@onnx_op("GatherElements")
def gather_elements(ctx, x, indices, axis=0):
    return x.gather(axis, positive_indices(indices, x.shape[axis]))


@onnx_op("GatherND")
def gather_nd(ctx, x, indices, batch_dims=0):
    depth = indices.shape[-1]
    batch_shape = x.shape[:batch_dims]
    batch = math.prod(batch_shape)
    indexed, rest = x.shape[batch_dims:batch_dims + depth], x.shape[batch_dims + depth:]
    flat = None
    for j, size in enumerate(indexed):
        index = positive_indices(indices[..., j], size)
        flat = index if flat is None else flat * size + index
    points = indices.shape[batch_dims:-1]
    flat = flat.reshape(batch, math.prod(points))
    data = x.reshape(batch, math.prod(indexed), math.prod(rest))
    rows = Tensor.arange(batch, device=ctx.device).reshape(batch, 1)
    return data[rows, flat].reshape(*batch_shape, *points, *rest)


def scatter_reduce(x: Tensor, axis: int, indices: Tensor, updates: Tensor, reduction: str) -> Tensor:
    """x with updates written (or combined by reduction) at indices along axis, as ScatterElements."""
    axis = axis + x.ndim if axis < 0 else axis
    indices = positive_indices(indices, x.shape[axis])
    if reduction in ("none", "add", "mul"):
        return x.scatter(axis, indices, updates, reduce={"none": None, "add": "add", "mul": "multiply"}[reduction])
    size = x.shape[axis]
    moved_indices = indices.unsqueeze(-1).transpose(axis, -1)
    moved_updates = updates.unsqueeze(-1).transpose(axis, -1)
    positions = Tensor.arange(size, device=x.device).reshape(
        tuple(size if d == axis else 1 for d in range(x.ndim)) + (1,))
    hit = moved_indices == positions
    padding = tuple((0, 0) if d == axis else (0, s - i) for d, (i, s) in enumerate(zip(indices.shape, x.shape)))
    fill = -math.inf if reduction == "max" else math.inf
    if not x.dtype.is_float:
        info = np.iinfo(x.dtype.np)
        fill = int(info.min if reduction == "max" else info.max)
    chosen = hit.where(moved_updates, Tensor.full((), fill, dtype=x.dtype, device=x.device))
    combined = chosen.amax(-1) if reduction == "max" else chosen.amin(-1)
    written = hit.any(-1).pad(padding)
    combined = combined.pad(padding)
    return written.where(combined.maximum(x) if reduction == "max" else combined.minimum(x), x)


@onnx_op("ScatterElements", "Scatter")
def scatter_elements(ctx, x, indices, updates, axis=0, reduction="none"):
    return scatter_reduce(x, axis, indices, updates, reduction)


@onnx_op("ScatterND")
def scatter_nd(ctx, x, indices, updates, reduction="none"):
    depth = indices.shape[-1]
    indexed, rest = x.shape[:depth], x.shape[depth:]
    flat = None
    for j, size in enumerate(indexed):
        index = positive_indices(indices[..., j], size)
        flat = index if flat is None else flat * size + index
    points = math.prod(indices.shape[:-1])
    width = math.prod(rest)
    data = x.reshape(math.prod(indexed), width)
    flat = flat.reshape(points, 1).expand(points, width)
    result = scatter_reduce(data, 0, flat, updates.reshape(points, width), reduction)
    return result.reshape(x.shape)


@onnx_op("OneHot")
def one_hot(ctx, indices, depth, values, axis=-1):
    classes = int(ctx.scalar(depth))
    indices = indices.cast(dtypes.int64)
    indices = (indices < 0).where(indices + classes, indices)
    axis = axis + indices.ndim + 1 if axis < 0 else axis
    shape = [classes if d == axis else 1 for d in range(indices.ndim + 1)]
    hot = indices.unsqueeze(axis) == Tensor.arange(classes, device=ctx.device).reshape(shape)
    off, on = values[0], values[1]
    return hot.where(on, off)


@onnx_op("Compress")
def compress(ctx, x, condition, axis=None):
    kept = np.nonzero(ctx.numpy(condition))[0]
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = axis + x.ndim if axis < 0 else axis
    kept = kept[kept < x.shape[axis]]
    return x[(slice(None),) * axis + (Tensor(kept.astype(np.int64), device=ctx.device),)]


@onnx_op("NonZero")
def nonzero(ctx, x):
    return ctx.const(np.array(np.nonzero(ctx.numpy(x)), dtype=np.int64).reshape(x.ndim, -1))


@onnx_op("ReverseSequence")
def reverse_sequence(ctx, x, lengths, batch_axis=1, time_axis=0):
    steps = x.shape[time_axis]
    shape = [1] * x.ndim
    shape[time_axis] = steps
    time = Tensor.arange(steps, device=ctx.device).reshape(shape)
    length_shape = [1] * x.ndim
    length_shape[batch_axis] = x.shape[batch_axis]
    length = lengths.cast(dtypes.int64).reshape(length_shape)
    source = (time < length).where(length - 1 - time, time)
    return x.gather(time_axis, source.expand(*x.shape))


@onnx_op("Unique")
def unique(ctx, x, axis=None, sorted=1):
    """The distinct values (or slices along axis): which ones is data-dependent, so x is read as numbers
    to find them; the values themselves are gathered from x with Tensor indexing."""
    values = ctx.numpy(x)
    flat_axis = 0 if axis is None else (axis + x.ndim if axis < 0 else axis)
    source = values.reshape(-1) if axis is None else values
    _, first, inverse, counts = np.unique(source, return_index=True, return_inverse=True, return_counts=True,
                                          axis=None if axis is None else flat_axis)
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        new_position = np.argsort(order, kind="stable")
        first, counts, inverse = first[order], counts[order], new_position[inverse]
    picked = Tensor(first.astype(np.int64), device=ctx.device)
    data = x.reshape(-1) if axis is None else x
    result = data[(slice(None),) * flat_axis + (picked,)]
    return (result, ctx.const(first.astype(np.int64)), ctx.const(inverse.astype(np.int64)),
            ctx.const(counts.astype(np.int64)))
