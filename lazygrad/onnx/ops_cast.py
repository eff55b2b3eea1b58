"""Cast and CastLike, including the element types lazygrad carries in a wider dtype.

Registered in registry.OPERATORS; model.py calls them. float8 and float4 values are rounded here to
their format by ONNX's rules (nearest, ties to even; clamped when saturating), then stored in the
native float8 dtype (e4m3fn, e5m2) or carried in float32 (the others); float8e8m0 rounds up to a
power of two.
"""
from __future__ import annotations

import math

from onnx import TensorProto

from lazygrad.dtype import dtypes
from lazygrad.onnx.proto import dtype_of
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor

# carried float formats: (mantissa bits, smallest normal exponent, largest finite value)
FLOAT_FORMATS = {
    TensorProto.FLOAT8E4M3FN: (3, -6, 448.0),
    TensorProto.FLOAT8E4M3FNUZ: (3, -7, 240.0), TensorProto.FLOAT8E5M2: (2, -14, 57344.0),
    TensorProto.FLOAT8E5M2FNUZ: (2, -15, 57344.0), TensorProto.FLOAT4E2M1: (1, 0, 6.0),
}


def round_to_format(x: Tensor, elem_type: int, saturate: bool) -> Tensor:
    """x (float32) rounded to the nearest value of a narrow float format, ties to even."""
    mantissa_bits, min_exponent, largest = FLOAT_FORMATS[elem_type]
    x = x.cast(dtypes.float32)
    if saturate:
        x = x.clamp(-largest, largest)
    magnitude = x.abs()
    exponent = magnitude.log2().floor()
    exponent = (exponent.exp2() > magnitude).where(exponent - 1, exponent)
    exponent = exponent.maximum(min_exponent)
    quantum = (exponent - mantissa_bits).exp2()
    rounded = (x / quantum).round() * quantum
    if saturate:
        rounded = rounded.clamp(-largest, largest)
    return (magnitude == math.inf).where(x, rounded)


def round_to_power_of_two(x: Tensor, saturate: bool) -> Tensor:
    """FLOAT8E8M0 (exponent-only) with round_mode "up": the next power of two at or above |x|."""
    bits = x.cast(dtypes.float32).bitcast(dtypes.int32)
    exponent = (bits >> 23) & 0xFF
    special = exponent == 0xFF
    round_up = ((bits & 0x7FFFFF) != 0).logical_and(special.logical_not())
    exponent = exponent + round_up.cast(dtypes.int32)
    exponent = exponent.minimum(254) if saturate else exponent
    power = (exponent << 23).bitcast(dtypes.float32)
    smallest = Tensor.full(x.shape, 1 << 22, dtype=dtypes.int32, device=x.device).bitcast(dtypes.float32)
    power = (exponent == 0).where(smallest, power)
    return (special.logical_or(exponent == 0xFF)).where(math.nan, power)


def cast_to(x: Tensor, elem_type: int, saturate: bool = True) -> Tensor:
    dtype = dtype_of(elem_type)
    if elem_type == TensorProto.FLOAT8E8M0:
        return round_to_power_of_two(x, saturate)
    if elem_type in FLOAT_FORMATS:  # ONNX's rounding and saturation, then exact in a native float8
        return round_to_format(x, elem_type, saturate).cast(dtype)
    if x.dtype == dtype:
        return x
    if x.dtype.is_float and not dtype.is_float and not dtype.is_bool:
        x = x.trunc()
    return x.cast(dtype)


@onnx_op("Cast")
def cast(ctx, x, to, saturate=1, round_mode="up"):
    return cast_to(x, to, bool(saturate))


@onnx_op("CastLike")
def cast_like(ctx, x, like, saturate=1, round_mode="up"):
    elem_type = ctx.declared_type(1)
    if elem_type is not None:
        return cast_to(x, elem_type, bool(saturate))
    return x.cast(like.dtype)
