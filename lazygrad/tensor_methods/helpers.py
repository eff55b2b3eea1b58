"""Argument normalization shared by Tensor and its method groups: dims, shapes, broadcast shapes.

Front-end layer, under tensor.py and tensor_methods/*; imports nothing of Tensor.
"""
from __future__ import annotations

from lazygrad.dtype import DType


def _shape_argument(shape) -> tuple[int, ...]:
    """Accept f(2, 3) and f((2, 3)) alike, as PyTorch does."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    result = tuple(int(size) for size in shape)
    if any(size < 0 for size in result):
        raise ValueError(f"negative dimension in shape {result}")
    return result


def _pick_axis(axis, dim, op: str, default=None):
    """PyTorch calls the argument `dim`, tinygrad `axis`: accept either (and `default` for neither)."""
    if axis is not None and dim is not None and axis != dim:
        raise TypeError(f"{op}: got both axis={axis} and dim={dim}; pass one of them")
    if dim is not None:
        return dim
    return default if axis is None else axis


def _zero_of(dtype: DType):
    """A Python zero that keeps `dtype` when it meets a tensor of that dtype."""
    return False if dtype.is_bool else 0


def _normalize_axis(axis: int, ndim: int, op: str = "") -> int:
    low, high = (-ndim, ndim - 1) if ndim else (-1, 0)
    if not low <= axis <= high:
        raise IndexError(f"{op + ': ' if op else ''}dimension out of range "
                         f"(expected to be in range of [{low}, {high}], but got {axis})")
    return axis % ndim if ndim else 0


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    ndim = max(len(shape) for shape in shapes)
    padded = [(1,) * (ndim - len(shape)) + tuple(shape) for shape in shapes]
    result = []
    for sizes in zip(*padded):
        sizes_not_one = {size for size in sizes if size != 1}
        if len(sizes_not_one) > 1:
            listed = " and ".join(str(tuple(shape)) for shape in shapes)
            raise ValueError(f"{op}: shapes {listed} cannot be broadcast together")
        result.append(sizes_not_one.pop() if sizes_not_one else 1)
    return tuple(result)
