"""Shape and movement ONNX operators: Reshape, Transpose, Slice, Concat, Split, Pad, Tile, constants, ...

Registered in registry.OPERATORS; model.py calls them. Shape-like inputs (a Reshape's shape, Slice's
starts) are read as numbers through `ctx.ints`, which is free for folded constants and the output of
Shape, and realizes the (small) tensor otherwise.
"""
from __future__ import annotations

import math

import numpy as np

from lazygrad.onnx.proto import dtype_of
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor


def normalize_axes(axes, ndim: int) -> list[int]:
    return [axis + ndim if axis < 0 else axis for axis in axes]


@onnx_op("Constant")
def constant(ctx, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None,
             value_string=None, value_strings=None, sparse_value=None):
    if value is not None:
        return ctx.const(value)
    if value_float is not None:
        return ctx.const(np.float32(value_float))
    if value_floats is not None:
        return ctx.const(np.array(value_floats, np.float32))
    if value_int is not None:
        return ctx.const(np.int64(value_int))
    if value_ints is not None:
        return ctx.const(np.array(value_ints, np.int64))
    raise NotImplementedError("Constant: only tensor, float(s) and int(s) values are supported")


@onnx_op("Shape")
def shape(ctx, x, start=0, end=None):
    return ctx.const(np.array(x.shape[slice(start, end)], np.int64))


@onnx_op("Size")
def size(ctx, x):
    return ctx.const(np.int64(x.numel()))


@onnx_op("Reshape")
def reshape(ctx, x, new_shape=None, shape=None, allowzero=0):
    target = ctx.ints(new_shape) if new_shape is not None else list(shape)
    if not allowzero:
        target = [x.shape[index] if dim == 0 else dim for index, dim in enumerate(target)]
    return x.reshape(target)


@onnx_op("Flatten")
def flatten(ctx, x, axis=1):
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@onnx_op("Transpose")
def transpose(ctx, x, perm=None):
    return x.permute(perm if perm is not None else list(range(x.ndim))[::-1])


@onnx_op("Squeeze")
def squeeze(ctx, x, axes_input=None, axes=None):
    axes = ctx.ints(axes_input) if axes_input is not None else axes
    axes = [i for i, size in enumerate(x.shape) if size == 1] if axes is None else normalize_axes(axes, x.ndim)
    return x.reshape([size for i, size in enumerate(x.shape) if i not in axes])


@onnx_op("Unsqueeze")
def unsqueeze(ctx, x, axes_input=None, axes=None):
    axes = ctx.ints(axes_input) if axes_input is not None else axes
    ndim = x.ndim + len(axes)
    axes = set(normalize_axes(axes, ndim))
    sizes = iter(x.shape)
    return x.reshape([1 if i in axes else next(sizes) for i in range(ndim)])


@onnx_op("Expand")
def expand(ctx, x, new_shape):
    target = ctx.ints(new_shape)
    ndim = max(x.ndim, len(target))
    current = (1,) * (ndim - x.ndim) + x.shape
    target = [1] * (ndim - len(target)) + target
    final = [c if t == 1 else t for c, t in zip(current, target)]
    return x.reshape(current).expand(*final)


@onnx_op("Concat")
def concat(ctx, *tensors, axis):
    tensors = [t for t in tensors if t is not None]
    if len(tensors) == 1:
        return tensors[0]
    return tensors[0].cat(*tensors[1:], dim=axis)


@onnx_op("Split")
def split(ctx, x, split_input=None, axis=0, split=None, num_outputs=None):
    axis = axis + x.ndim if axis < 0 else axis
    sizes = ctx.ints(split_input) if split_input is not None else split
    if sizes is None:
        count = num_outputs or len(ctx.node.output)
        chunk = -(-x.shape[axis] // count)
        sizes = [min(chunk, x.shape[axis] - chunk * i) for i in range(count)]
    outputs, start = [], 0
    for size in sizes:
        outputs.append(x.shrink(tuple((start, start + size) if d == axis else None for d in range(x.ndim))))
        start += size
    return tuple(outputs)


def slice_bounds(start: int, end: int, step: int, size: int) -> slice:
    """A Python slice with ONNX's clamping of starts and ends (which differs for negative steps)."""
    if start < 0:
        start += size
    if end < 0:
        end += size
    if step > 0:
        start, end = min(max(start, 0), size), min(max(end, 0), size)
        return slice(start, end, step)
    start, end = min(max(start, -1), size - 1), min(max(end, -1), size - 1)
    return slice(start, None if end < 0 else end, step) if start >= 0 else slice(0, 0, 1)


@onnx_op("Slice")
def slice_op(ctx, x, starts_input=None, ends_input=None, axes_input=None, steps_input=None,
             starts=None, ends=None, axes=None):
    if starts_input is not None:
        starts, ends = ctx.ints(starts_input), ctx.ints(ends_input)
        axes, steps = ctx.ints(axes_input), ctx.ints(steps_input)
    else:
        steps = None
    axes = normalize_axes(axes, x.ndim) if axes is not None else list(range(len(starts)))
    steps = steps or [1] * len(starts)
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        index[axis] = slice_bounds(start, end, step, x.shape[axis])
    return x[tuple(index)]


@onnx_op("Tile")
def tile(ctx, x, repeats):
    return x.repeat(*ctx.ints(repeats)) if x.ndim else x


def pad_wrap(x: Tensor, pairs: list[tuple[int, int]]) -> Tensor:
    """Pad each dim with copies of the other end of x (ONNX's "wrap" mode): tile, then cut the window."""
    for axis, (before, after) in enumerate(pairs):
        size = x.shape[axis]
        if before or after:
            copies = 1 + -(-before // size) + -(-after // size)
            tiled = x.repeat(*[copies if d == axis else 1 for d in range(x.ndim)])
            offset = -(-before // size) * size - before
            x = tiled.shrink(tuple((offset, offset + before + size + after) if d == axis else None
                                   for d in range(x.ndim)))
    return x


@onnx_op("Pad")
def pad(ctx, x, pads_input=None, constant_value=None, axes_input=None, mode="constant", pads=None, value=0.0):
    pads = ctx.ints(pads_input) if pads_input is not None else pads
    value = ctx.scalar(constant_value, value)
    axes = normalize_axes(ctx.ints(axes_input), x.ndim) if axes_input is not None else list(range(x.ndim))
    pairs = [(0, 0)] * x.ndim
    for i, axis in enumerate(axes):
        pairs[axis] = (pads[i], pads[i + len(axes)])
    negative = [(max(-before, 0), x.shape[axis] - max(-after, 0)) for axis, (before, after) in enumerate(pairs)]
    x = x.shrink(tuple(negative))
    pairs = [(max(before, 0), max(after, 0)) for before, after in pairs]
    if mode == "wrap":
        return pad_wrap(x, pairs)
    if mode == "edge":
        mode = "replicate"
    if mode == "constant":
        return x.pad(pairs, value=value)
    return x.pad(pairs, mode=mode)


@onnx_op("ConstantOfShape")
def constant_of_shape(ctx, shape_input, value=None):
    fill = np.zeros(1, np.float32) if value is None else value.reshape(-1)
    return Tensor.full(tuple(ctx.ints(shape_input)), fill[0].item(), dtype=fill.dtype, device=ctx.device)


@onnx_op("Range")
def range_op(ctx, start, limit, delta):
    first, last, step = ctx.scalar(start), ctx.scalar(limit), ctx.scalar(delta)
    count = max(math.ceil((last - first) / step), 0)
    return (Tensor.arange(count, device=ctx.device) * step + first).cast(start.dtype) if count else \
        Tensor.zeros(0, dtype=start.dtype, device=ctx.device)


@onnx_op("EyeLike")
def eye_like(ctx, x, dtype=None, k=0):
    rows, columns = x.shape
    offset = Tensor.arange(columns, device=ctx.device).reshape(1, columns) - \
        Tensor.arange(rows, device=ctx.device).reshape(rows, 1)
    return (offset == k).cast(dtype_of(dtype) if dtype is not None else x.dtype)


@onnx_op("Trilu")
def trilu(ctx, x, k_input=None, upper=1):
    k = ctx.scalar(k_input, 0)
    return x.triu(k) if upper else x.tril(k)


@onnx_op("DepthToSpace")
def depth_to_space(ctx, x, blocksize, mode="DCR"):
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        x = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        x = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return x.reshape(n, c // (b * b), h * b, w * b)


@onnx_op("SpaceToDepth")
def space_to_depth(ctx, x, blocksize, mode="DCR"):
    n, c, h, w = x.shape
    b = blocksize
    x = x.reshape(n, c, h // b, b, w // b, b)
    x = x.permute(0, 3, 5, 1, 2, 4) if mode == "DCR" else x.permute(0, 1, 3, 5, 2, 4)
    return x.reshape(n, c * b * b, h // b, w // b)
