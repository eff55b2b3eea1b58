"""Argument normalization shared by Tensor and its method groups: sizes, dims, scalars, broadcast shapes.

Front-end layer, under tensor.py and tensor_methods/*; imports nothing of Tensor. Every size, dim
and count a method takes goes through `_int_argument`, so none is truncated from a float (PyTorch's
rule: `reshape(6.5)` is an error, not `reshape(6)`). Every Python scalar that meets a tensor or
fills one goes through `_check_scalar_fits`, so none wraps around (`int8_tensor + 1000` is an
error, not `int8_tensor + -24`).
"""
from __future__ import annotations

import functools
import math
import operator

import numpy as np

from lazygrad.dtype import STORAGE_FLOATS, DType, dtypes, iinfo

_INT_RANGES = {dtype: (iinfo(dtype).min, iinfo(dtype).max) for dtype in dtypes.all() if dtype.is_int}


def _int_argument(value, function: str, argument: str) -> int:
    """`value` as an int: ints, numpy integers and anything else with `__index__`; bools, floats and
    strings raise TypeError, as in PyTorch."""
    if not isinstance(value, (bool, np.bool_)):
        try:
            return operator.index(value)
        except TypeError:
            pass
    fix = ""
    if isinstance(value, (float, np.floating)):
        fix = "; convert it with int(), or divide with // instead of /"
    elif isinstance(value, (tuple, list)):
        fix = "; pass the ints one by one, f(2, 3), or as one tuple, f((2, 3)), not both"
    raise TypeError(f"{function}: {argument} must be an int, got {value!r} ({type(value).__name__}){fix}")


def _shape_argument(shape: tuple, function: str, argument: str = "size", minus_one: str = "") -> tuple[int, ...]:
    """The sizes of f(2, 3), f((2, 3)) or f([2, 3]) (a torch.Size too) as a tuple of ints: none
    negative, except -1 where the function gives it a meaning, described by `minus_one`."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    for size in shape:  # the common case first: plain ints, none negative (every reshape a model builds)
        if type(size) is not int or size < 0:
            break
    else:
        return tuple(shape)
    sizes = tuple(_int_argument(size, function, f"{argument}[{index}]") for index, size in enumerate(shape))
    for index, size in enumerate(sizes):
        if size < 0 and not (size == -1 and minus_one):
            allowed = f"0 or more, or -1 {minus_one}" if minus_one else "0 or more"
            raise ValueError(f"{function}: {argument} {sizes} has the negative size {size} at index {index}; "
                             f"sizes must be {allowed}")
    return sizes


def _check_scalar_fits(value, dtype: DType, function: str) -> None:
    """OverflowError unless `dtype`, the dtype a Python or numpy scalar takes in `function`, holds it:
    an integer dtype a value in its range (a float's whole part, as a C cast and PyTorch's fills take
    it), a float dtype any int float64 can round (a float too large for the dtype becomes inf, as in
    IEEE arithmetic)."""
    int_range = _INT_RANGES.get(dtype)
    if int_range is None:  # a float or bool dtype: only an int near 2**1024 or beyond has no float
        if isinstance(value, int) and dtype.is_float and value.bit_length() > 1000:
            try:
                float(value)
            except OverflowError:
                raise OverflowError(f"{function}: an int of {value.bit_length()} bits is too large for any "
                                    f"float dtype (float64 reaches about 2**1024)") from None
        return
    low, high = int_range
    whole = value
    if isinstance(value, (float, np.floating)):
        whole = math.trunc(value) if math.isfinite(value) else None
    if whole is None or not low <= whole <= high:
        wider = "a float dtype" if dtype.itemsize == 8 else "int64 or a float dtype"
        raise OverflowError(f"{function}: {value!r} does not fit {dtype.name} ({low} to {high}); "
                            f"use a wider dtype ({wider}), casting the tensor first")


def _check_values_fit(array: np.ndarray, dtype: DType, function: str) -> None:
    """`_check_scalar_fits` for every element of an array made from Python numbers."""
    if not dtype.is_int or array.dtype.kind not in "iuf":
        return
    low, high = _INT_RANGES[dtype]
    whole = np.trunc(array) if array.dtype.kind == "f" else array
    outside = ~((whole >= low) & (whole <= high))  # NaN is outside too
    if outside.any():
        _check_scalar_fits(array[outside].flat[0].item(), dtype, function)


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
    axis = _int_argument(axis, op or "dim", "dim")
    low, high = (-ndim, ndim - 1) if ndim else (-1, 0)
    if not low <= axis <= high:
        raise IndexError(f"{op + ': ' if op else ''}dimension out of range "
                         f"(expected to be in range of [{low}, {high}], but got {axis})")
    return axis % ndim if ndim else 0


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    first = shapes[0]
    for shape in shapes:  # a loop, not all(generator): this runs for every binary op built
        if shape != first:
            break
    else:
        return tuple(first)
    if len(shapes) == 2 and len(first) == len(shapes[1]):  # x * w.reshape(1, C, 1, 1): every binary op
        result = []
        for a, b in zip(first, shapes[1]):
            if a != b and a != 1 and b != 1:
                break
            result.append(a if b == 1 else b)
        else:
            return tuple(result)
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


def _extreme_value(dtype, largest: bool):
    """The largest (or smallest) value of a dtype: what a max (min) of nothing leaves unchanged."""
    if dtype.is_bool:
        return largest
    if dtype.is_float:
        return math.inf if largest else -math.inf
    info = iinfo(dtype)
    return info.max if largest else info.min


def _is_stored_float_tensor(value) -> bool:
    return hasattr(value, "lazydata") and value.dtype in STORAGE_FLOATS


def computes_in_float32(function):
    """For a function PyTorch runs as one kernel and lazygrad composes of several primitives (an
    activation, a normalization, softmax, a mean, a matmul, a convolution, a loss): tensor arguments
    of a storage float (bfloat16, the float8s) are computed in float32 through the whole function
    and its float32 results rounded to that dtype once, as PyTorch's kernel does. Each primitive on
    them rounds once by itself (Tensor._apply), which inside such a function would round its
    intermediates: a matmul's products, a sigmoid's exponential."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        for value in args:  # the usual case, no storage float, first and cheaply: this runs for every call
            if _is_stored_float_tensor(value):
                break
        else:
            if not kwargs or not any(map(_is_stored_float_tensor, kwargs.values())):
                return function(*args, **kwargs)
        floats = [value.dtype for value in (*args, *kwargs.values())
                  if hasattr(value, "lazydata") and value.dtype.is_float]
        stored = next(dtype for dtype in floats if dtype in STORAGE_FLOATS)
        if any(dtype not in STORAGE_FLOATS for dtype in floats):
            return function(*args, **kwargs)  # a wider float beside it: promotion makes the result's dtype

        def wide(value):
            return value.cast(dtypes.float32) if _is_stored_float_tensor(value) else value

        def narrow(value):
            if isinstance(value, tuple):
                return type(value)(*map(narrow, value)) if hasattr(value, "_fields") else tuple(map(narrow, value))
            is_float32 = getattr(value, "dtype", None) is dtypes.float32 and hasattr(value, "lazydata")
            return value.cast(stored) if is_float32 else value
        return narrow(function(*map(wide, args), **{name: wide(value) for name, value in kwargs.items()}))
    return wrapper
