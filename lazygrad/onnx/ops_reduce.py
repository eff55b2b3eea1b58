"""Reducing ONNX operators: the Reduce* family, ArgMax/ArgMin, Softmax family, CumSum/CumProd, TopK, norms.

Registered in registry.OPERATORS; model.py calls them. Axes arrive as an attribute before
opset 13 (ReduceSum) or 18 (the others) and as an input after; both are accepted. TopK ranks each
element against all others along the axis (no sort primitive), which suits the small axes ONNX
models sort.
"""
from __future__ import annotations

import math

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor


def reduce_axes(ctx, x: Tensor, axes_input, axes, noop_with_empty_axes) -> tuple[int, ...] | None:
    """The axes to reduce, or None when the reduction is the identity."""
    axes = ctx.ints(axes_input) if axes_input is not None else axes
    if not axes:
        return None if noop_with_empty_axes else tuple(range(x.ndim))
    return tuple(sorted(axis + x.ndim if axis < 0 else axis for axis in axes))


def empty_reduce_value(name: str, dtype):
    if dtype.is_bool:
        return name in ("ReduceMin", "ReduceProd")
    if name in ("ReduceMax", "ReduceLogSum", "ReduceLogSumExp"):
        return -math.inf if dtype.is_float else np.iinfo(dtype.np).min
    if name == "ReduceMin":
        return math.inf if dtype.is_float else np.iinfo(dtype.np).max
    return 1 if name == "ReduceProd" else 0


REDUCERS = {
    "ReduceSum": lambda x, axes: x.sum(axes, keepdim=True),
    "ReduceMean": lambda x, axes: (x if x.dtype.is_float else x.float()).mean(axes, keepdim=True),
    "ReduceMax": lambda x, axes: x.max(axis=axes, keepdim=True),
    "ReduceMin": lambda x, axes: x.min(axis=axes, keepdim=True),
    "ReduceProd": lambda x, axes: x.prod(axes, keepdim=True),
    "ReduceL1": lambda x, axes: x.abs().sum(axes, keepdim=True),
    "ReduceL2": lambda x, axes: (x * x).sum(axes, keepdim=True).sqrt(),
    "ReduceSumSquare": lambda x, axes: (x * x).sum(axes, keepdim=True),
    "ReduceLogSum": lambda x, axes: x.sum(axes, keepdim=True).log(),
    "ReduceLogSumExp": lambda x, axes: x.logsumexp(axes, keepdim=True),
}


@onnx_op(*REDUCERS)
def reduce(ctx, x, axes_input=None, axes=None, keepdims=1, noop_with_empty_axes=0):
    name = ctx.node.op_type
    axes = reduce_axes(ctx, x, axes_input, axes, noop_with_empty_axes)
    if axes is None:
        return x
    if any(x.shape[axis] == 0 for axis in axes):
        shape = tuple(1 if d in axes else size for d, size in enumerate(x.shape))
        result = Tensor.full(shape, empty_reduce_value(name, x.dtype), dtype=x.dtype, device=ctx.device)
    else:
        result = REDUCERS[name](x, axes).cast(x.dtype)
    return result if keepdims else result.reshape([s for d, s in enumerate(result.shape) if d not in axes])


@onnx_op("ArgMax", "ArgMin")
def arg_max_min(ctx, x, axis=0, keepdims=1, select_last_index=0):
    axis = axis + x.ndim if axis < 0 else axis
    source = x.flip(axis) if select_last_index else x
    index = source.argmax(axis, keepdim=True) if ctx.node.op_type == "ArgMax" else source.argmin(axis, keepdim=True)
    if select_last_index:
        index = (x.shape[axis] - 1) - index
    index = index.cast(dtypes.int64)
    return index if keepdims else index.squeeze(axis)


def coerced_2d(function):
    """Before opset 13 the Softmax family works on the input flattened to 2-D at `axis`."""
    def run(ctx, x, axis=None):
        if ctx.opset >= 13:
            return function(x, -1 if axis is None else axis)
        axis = 1 if axis is None else axis
        axis = axis + x.ndim if axis < 0 else axis
        flat = x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
        return function(flat, 1).reshape(x.shape)
    return run


def hardmax(x: Tensor, axis: int) -> Tensor:
    axis = axis + x.ndim if axis < 0 else axis
    index = x.argmax(axis, keepdim=True)
    positions = Tensor.arange(x.shape[axis], device=x.device).reshape([-1 if d == axis else 1 for d in range(x.ndim)])
    return (index == positions).cast(x.dtype)


def softmax(x: Tensor, axis: int) -> Tensor:
    if x.dtype != dtypes.float16:
        return x.softmax(axis)
    # as numpy computes it for half: exp rounded once from float32, sums accumulated in float32
    exponentials = (x - x.max(axis=axis, keepdim=True)).float().exp().half()
    return exponentials / exponentials.float().sum(axis, keepdim=True).half()


def log_softmax(x: Tensor, axis: int) -> Tensor:
    return x.float().log_softmax(axis).half() if x.dtype == dtypes.float16 else x.log_softmax(axis)


onnx_op("Softmax")(coerced_2d(softmax))
onnx_op("LogSoftmax")(coerced_2d(log_softmax))
onnx_op("Hardmax")(coerced_2d(hardmax))


def cumulative(x: Tensor, axis: int, exclusive: int, reverse: int, product: bool) -> Tensor:
    if reverse:
        x = x.flip(axis)
    result = x.cumprod(axis) if product else x.cumsum(axis)
    if exclusive:
        identity = 1 if product else 0
        pairs = [(1, 0) if d == axis else (0, 0) for d in range(x.ndim)]
        result = result.shrink(tuple((0, x.shape[d] - 1) if d == axis else None for d in range(x.ndim)))
        result = result.pad(pairs, value=identity)
    if reverse:
        result = result.flip(axis)
    return result.cast(x.dtype)


@onnx_op("CumSum", "CumProd")
def cumsum(ctx, x, axis_input, exclusive=0, reverse=0):
    axis = int(ctx.scalar(axis_input))
    axis = axis + x.ndim if axis < 0 else axis
    return cumulative(x, axis, exclusive, reverse, ctx.node.op_type == "CumProd")


def rank_along(x: Tensor, axis: int, largest: bool) -> Tensor:
    """Each element's position in a stable sort along axis (descending when largest), axis moved last."""
    size = x.shape[axis]
    this = x.transpose(axis, -1).unsqueeze(-1)
    other = x.transpose(axis, -1).unsqueeze(-2)
    index = Tensor.arange(size, device=x.device)
    before = index.reshape(1, size) < index.reshape(size, 1)   # [i, j]: j comes before i
    beats = (other > this) if largest else (other < this)
    ties = (other == this).logical_and(before)
    return beats.logical_or(ties).cast(dtypes.int64).sum(-1)   # (..., n) with the axis last


@onnx_op("TopK")
def top_k(ctx, x, k_input=None, axis=-1, largest=1, sorted=1, k=None):
    count = int(ctx.scalar(k_input)) if k_input is not None else k
    axis = axis + x.ndim if axis < 0 else axis
    rank = rank_along(x, axis, bool(largest))                 # axis moved last
    moved = x.transpose(axis, -1)
    size = x.shape[axis]
    slots = Tensor.arange(count, device=ctx.device)
    chosen = rank.unsqueeze(-2) == slots.reshape(count, 1)     # (..., k, n)
    values = chosen.where(moved.unsqueeze(-2), moved._const_like(0)).sum(-1).cast(x.dtype)
    positions = Tensor.arange(size, device=ctx.device)
    indices = chosen.where(positions, 0).sum(-1).cast(dtypes.int64)
    return values.transpose(axis, -1), indices.transpose(axis, -1)


@onnx_op("LpNormalization")
def lp_normalization(ctx, x, axis=-1, p=2):
    norm = x.abs().sum(axis, keepdim=True) if p == 1 else (x * x).sum(axis, keepdim=True).sqrt()
    return (norm == 0).where(0, x / norm).cast(x.dtype)


@onnx_op("MeanVarianceNormalization")
def mean_variance_normalization(ctx, x, axes=(0, 2, 3)):
    axes = tuple(axes)
    mean = x.mean(axes, keepdim=True)
    variance = ((x - mean) * (x - mean)).mean(axes, keepdim=True)
    return (x - mean) / (variance.sqrt() + 1e-9)
