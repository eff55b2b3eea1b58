"""Quantization ONNX operators: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul, QLinearConv,
and those onnx/qdq.py rewrites a QDQ model's pairs into: FakeQuantize, DequantizedConv, DequantizedGemm.

Registered in registry.OPERATORS; model.py calls them. Scales and zero points are per tensor, per
axis (1-D along `axis`) or per block (`block_size` along `axis`); they are broadcast to the input's
shape here. Rounding is to nearest even, then saturation to the quantized type's range. The
quantized type is the zero point's declared ONNX type (uint8 when there is none).
"""
from __future__ import annotations

from onnx import TensorProto

from lazygrad.dtype import dtypes
from lazygrad.onnx.ops_conv import integer_convolution
from lazygrad.onnx.ops_nn import integer_matmul
from lazygrad.onnx.ops_cast import FLOAT_FORMATS, cast_to
from lazygrad.onnx.proto import dtype_of, elem_type_of_dtype
from lazygrad.onnx.qdq import FUSED_DOMAIN
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor

INTEGER_RANGES = {
    TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127), TensorProto.UINT16: (0, 65535),
    TensorProto.INT16: (-32768, 32767), TensorProto.UINT4: (0, 15), TensorProto.INT4: (-8, 7),
    TensorProto.UINT2: (0, 3), TensorProto.INT2: (-2, 1), TensorProto.INT32: (-2 ** 31, 2 ** 31 - 1),
}


def broadcast_parameter(parameter: Tensor, shape: tuple, axis: int, block_size: int) -> Tensor:
    """A scale or zero point shaped to broadcast against an input of `shape`."""
    if parameter.ndim == 0 or parameter.numel() == 1 and not block_size:
        return parameter.reshape(())
    axis = axis + len(shape) if axis < 0 else axis
    if not block_size:
        return parameter.reshape([-1 if d == axis else 1 for d in range(len(shape))])
    repeated = parameter.repeat_interleave(block_size, dim=axis)
    return repeated.shrink(tuple((0, shape[d]) if d == axis else None for d in range(len(shape))))


def parameter(ctx, value: Tensor, shape: tuple, axis: int, block_size: int):
    """broadcast_parameter's Tensor, or the number of a known one-element constant (an initializer;
    OpContext.number_or_scalar's reason)."""
    number = ctx.known_scalar(value)
    return number if number is not None else broadcast_parameter(value, shape, axis, block_size)


def as_float32(value):
    """A Tensor cast to float32; a number as it is."""
    return value.cast(dtypes.float32) if isinstance(value, Tensor) else value


def quantized_type(ctx, zero_point, output_dtype) -> int:
    if zero_point is not None:
        declared = ctx.declared_type(2)
        return declared if declared is not None else elem_type_of_dtype(zero_point.dtype)
    return output_dtype or TensorProto.UINT8


# 1.5 * 2^23: a float32 below 2^22 in magnitude plus this has no fraction bits left, so the addition
# rounds it to an integer, ties to even, and subtracting it back is exact
ROUNDING_SHIFT = 12582912.0


def rounded_for_range(scaled: Tensor, elem_type: int) -> Tensor:
    """scaled rounded half to even, for a result the caller clamps to elem_type's range. A float32,
    for a range within 2^16 of 0, adds and subtracts ROUNDING_SHIFT: exact below 2^22 in magnitude,
    within 1 of the value beyond, which the clamp takes to the same end. Two additions where round()
    takes about a dozen ops (a quantized ResNet-50's epilogues, three roundings in some)."""
    low, high = INTEGER_RANGES[elem_type]
    if scaled.dtype != dtypes.float32 or high - low > 1 << 16:
        return scaled.round()
    return (scaled + ROUNDING_SHIFT) - ROUNDING_SHIFT


def quantize(x: Tensor, scale: Tensor, zero_point, elem_type: int, saturate: bool = True) -> Tensor:
    scaled = x / scale
    if elem_type in FLOAT_FORMATS:
        if zero_point is not None and elem_type == TensorProto.FLOAT4E2M1:
            scaled = scaled + zero_point
        return cast_to(scaled, elem_type, saturate)
    rounded = rounded_for_range(scaled, elem_type)
    if zero_point is not None:
        rounded = rounded + (zero_point.cast(rounded.dtype) if isinstance(zero_point, Tensor) else zero_point)
    low, high = INTEGER_RANGES[elem_type]
    return rounded.clamp(low, high).cast(dtype_of(elem_type))


@onnx_op("QuantizeLinear")
def quantize_linear(ctx, x, scale, zero_point=None, axis=1, block_size=0, output_dtype=0, saturate=1,
                    precision=0):
    elem_type = quantized_type(ctx, zero_point, output_dtype)
    if precision:
        x, scale = x.cast(dtype_of(precision)), scale.cast(dtype_of(precision))
    elif x.dtype != scale.dtype:
        x = x.cast(scale.dtype)
    scale = parameter(ctx, scale, x.shape, axis, block_size)
    if zero_point is not None:
        zero_point = parameter(ctx, zero_point, x.shape, axis, block_size)
    return quantize(x, scale, zero_point, elem_type, bool(saturate))


@onnx_op("DequantizeLinear")
def dequantize_linear(ctx, x, scale, zero_point=None, axis=1, block_size=0, output_dtype=0):
    result_dtype = dtype_of(output_dtype) if output_dtype else scale.dtype
    shifted = x.cast(dtypes.float32)
    if zero_point is not None and ctx.declared_type(0) not in FLOAT_FORMATS:
        shifted = shifted - as_float32(parameter(ctx, zero_point, x.shape, axis, block_size))
    result = shifted * as_float32(parameter(ctx, scale, x.shape, axis, block_size))
    return result.cast(result_dtype)


@onnx_op("FakeQuantize", domain=FUSED_DOMAIN)
def fake_quantize(ctx, x, scale, zero_point=None, axis=1):
    """DequantizeLinear(QuantizeLinear(x, scale, zero_point), scale, zero_point) (qdq.py): a float32
    x and scale compute round(x / scale), clamped to the range less the zero point, times the scale,
    the same numbers; others quantize and dequantize as written."""
    elem_type = elem_type_of_dtype(zero_point.dtype) if zero_point is not None else TensorProto.UINT8
    if x.dtype != dtypes.float32 or scale.dtype != dtypes.float32:
        quantized = quantize_linear(ctx, x, scale, zero_point, axis)
        return dequantize_linear(ctx, quantized, scale, zero_point, axis)
    scale = parameter(ctx, scale, x.shape, axis, 0)
    low, high = INTEGER_RANGES[elem_type]
    if zero_point is not None:
        zero_point = as_float32(parameter(ctx, zero_point, x.shape, axis, 0))
        low, high = low - zero_point, high - zero_point
    return rounded_for_range(x / scale, elem_type).clamp(low, high) * scale


@onnx_op("DequantizedConv", domain=FUSED_DOMAIN)
def dequantized_conv(ctx, x, x_scale, x_zero_point, w, w_scale, bias=None, **attributes):
    """Conv(DequantizeLinear(x, x_scale, x_zero_point), DequantizeLinear(w, w_scale), bias) (qdq.py):
    the int32 sums of the quantized values' products, times both scales (w_scale one or one per
    output channel), plus the bias."""
    accumulated = integer_convolution(ctx, x, x_zero_point, w, None, **attributes)
    scale = x_scale.reshape(()).cast(dtypes.float32) * w_scale.cast(dtypes.float32).reshape(-1, *([1] * (x.ndim - 2)))
    result = accumulated.cast(dtypes.float32) * scale
    if bias is not None:
        result = result + bias.cast(dtypes.float32).reshape(-1, *([1] * (x.ndim - 2)))
    return result.cast(x_scale.dtype)


@onnx_op("DequantizedGemm", domain=FUSED_DOMAIN)
def dequantized_gemm(ctx, a, a_scale, a_zero_point, b, b_scale, c=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    """Gemm(DequantizeLinear(a, a_scale, a_zero_point), DequantizeLinear(b, b_scale), c) (qdq.py; a
    MatMul with its defaults): alpha times the int32 sums of the quantized values' products times both
    scales (b_scale one or one per output column), plus beta times c."""
    a = a.T if transA else a
    b = b.T if transB else b
    sums = integer_matmul(ctx, a, a_zero_point, b, None)
    scale = a_scale.reshape(()).cast(dtypes.float32) * b_scale.cast(dtypes.float32).reshape(-1) * float(alpha)
    result = sums.cast(dtypes.float32) * scale
    if c is not None:
        result = result + c.cast(dtypes.float32) * float(beta)
    # stored: the products' kernel computes one output at a time (codegen/opts.py byte_dot_product),
    # and the quantization after it, fused in, ran one element at a time too
    return result.cast(a_scale.dtype).contiguous()


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx, x):
    low, high = x.min().minimum(0), x.max().maximum(0)
    scale = (high - low) / 255
    zero_point = (0 - low / scale).round().clamp(0, 255)
    y = (rounded_for_range(x / scale, TensorProto.UINT8) + zero_point).clamp(0, 255).cast(dtypes.uint8)
    return y, scale.cast(x.dtype), zero_point.cast(dtypes.uint8)


def requantize(ctx, accumulated: Tensor, multiplier: Tensor, zero_point, like: Tensor, declared) -> Tensor:
    """The int32 sums times the multiplier (the input scales over the output's, computed from the
    constants in float64 and rounded once), in float32 as ONNX Runtime computes it: in float64 the
    sums' tile kept no vectors and a QOperator ResNet-50 ran 340 ms. A known zero point is a number."""
    result = accumulated.cast(dtypes.float32) * multiplier.cast(dtypes.float32)
    elem_type = declared if declared is not None else elem_type_of_dtype(zero_point.dtype if zero_point is not None
                                                                           else like.dtype)
    if zero_point is not None:
        result = result + as_float32(ctx.number_or_scalar(zero_point))
    low, high = INTEGER_RANGES[elem_type]
    return rounded_for_range(result, elem_type).clamp(low, high).cast(dtype_of(elem_type))


@onnx_op("QLinearMatMul")
def qlinear_matmul(ctx, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None):
    product = integer_matmul(ctx, a, a_zero_point, b, b_zero_point)  # int32 products and sums, as ONNX specifies
    multiplier = a_scale.cast(dtypes.float64) * b_scale.cast(dtypes.float64) / y_scale.cast(dtypes.float64)
    return requantize(ctx, product, multiplier, y_zero_point, a, ctx.declared_type(7))


@onnx_op("QLinearConv")
def qlinear_conv(ctx, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None, bias=None,
                 **attributes):
    accumulated = integer_convolution(ctx, x, x_zero_point, w, w_zero_point, **attributes)  # exact int32 sums
    if bias is not None:  # already in the accumulator's scale
        accumulated = accumulated + bias.cast(dtypes.int32).reshape((-1,) + (1,) * (x.ndim - 2))
    w_scale = w_scale.cast(dtypes.float64).reshape((1, -1) + (1,) * (x.ndim - 2)) if w_scale.numel() > 1 else \
        w_scale.cast(dtypes.float64)
    multiplier = x_scale.cast(dtypes.float64) * w_scale / y_scale.cast(dtypes.float64)
    return requantize(ctx, accumulated, multiplier, y_zero_point, x, ctx.declared_type(7))
