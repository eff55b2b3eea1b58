"""ONNX Runtime's quantized operators of its own domain (com.microsoft), which its static quantizer
writes in QOperator form (and the ONNX model zoo's int8 models use): QLinearAdd, QLinearMul,
QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearGlobalAveragePool, QLinearAveragePool,
QLinearConcat and QGemm.

Registered in registry.OPERATORS; model.py calls them. Each is its float operator between
dequantized inputs and a quantized output (ops_quantize's, rounding half to even and saturating to
the output zero point's type), as ONNX Runtime defines them; QGemm sums the quantized values in int32
(ops_nn.integer_matmul, the byte dot products for uint8 by int8), its int32 bias included, then
scales. Scales and zero points are per tensor, except QGemm's b, per tensor or per column. ONNX
Runtime computes some with lookup tables or fixed point, so a value within float32's rounding of a
step's boundary may land one step away from its output.
"""
from __future__ import annotations

from lazygrad.dtype import dtypes
from lazygrad.onnx.ops_conv import average_pool
from lazygrad.onnx.ops_nn import integer_matmul
from lazygrad.onnx.ops_quantize import as_float32, quantize
from lazygrad.onnx.ops_reduce import softmax
from lazygrad.onnx.proto import elem_type_of_dtype
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor

MICROSOFT = "com.microsoft"


def _per_tensor(ctx, value: Tensor | None):
    """A per-tensor scale or zero point: its number where known, else a 0-d Tensor."""
    return None if value is None else ctx.number_or_scalar(value)


def _dequantized(ctx, x: Tensor, scale: Tensor, zero_point) -> Tensor:
    shifted = x.cast(dtypes.float32)
    if zero_point is not None:
        shifted = shifted - as_float32(_per_tensor(ctx, zero_point))
    return shifted * as_float32(_per_tensor(ctx, scale))


def _quantized(ctx, value: Tensor, scale: Tensor, zero_point, like: Tensor) -> Tensor:
    """value quantized with a per-tensor scale and zero point, to the zero point's type (else x's)."""
    elem_type = elem_type_of_dtype(zero_point.dtype if zero_point is not None else like.dtype)
    return quantize(value.cast(dtypes.float32), as_float32(_per_tensor(ctx, scale)), _per_tensor(ctx, zero_point),
                    elem_type)


def _binary(function):
    def run(ctx, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
        value = function(_dequantized(ctx, a, a_scale, a_zero_point), _dequantized(ctx, b, b_scale, b_zero_point))
        return _quantized(ctx, value, c_scale, c_zero_point, a)
    return run


def _unary(function):
    def run(ctx, x, x_scale, x_zero_point, y_scale, y_zero_point=None, **attributes):
        return _quantized(ctx, function(_dequantized(ctx, x, x_scale, x_zero_point), **attributes), y_scale,
                          y_zero_point, x)
    return run


onnx_op("QLinearAdd", domain=MICROSOFT)(_binary(lambda a, b: a + b))
onnx_op("QLinearMul", domain=MICROSOFT)(_binary(lambda a, b: a * b))
onnx_op("QLinearSigmoid", domain=MICROSOFT)(_unary(lambda x: x.sigmoid()))
onnx_op("QLinearLeakyRelu", domain=MICROSOFT)(_unary(lambda x, alpha=0.01: x.leaky_relu(alpha)))


def _channels_first(x: Tensor, channels_last: int) -> Tensor:
    return x.permute(0, x.ndim - 1, *range(1, x.ndim - 1)) if channels_last else x


def _channels_back(x: Tensor, channels_last: int) -> Tensor:
    return x.permute(0, *range(2, x.ndim), 1) if channels_last else x


@onnx_op("QLinearSoftmax", domain=MICROSOFT)
def qlinear_softmax(ctx, x, x_scale, x_zero_point, y_scale, y_zero_point=None, axis=-1, opset=13):
    """Softmax along `axis`; before opset 13's semantics (`opset` < 13), over the axes from `axis` on."""
    value = _dequantized(ctx, x, x_scale, x_zero_point)
    axis = axis + x.ndim if axis < 0 else axis
    if opset < 13:
        flat = value.reshape(*value.shape[:axis], -1)
        result = softmax(flat, axis).reshape(value.shape)
    else:
        result = softmax(value, axis)
    return _quantized(ctx, result, y_scale, y_zero_point, x)


@onnx_op("QLinearGlobalAveragePool", domain=MICROSOFT)
def qlinear_global_average_pool(ctx, x, x_scale, x_zero_point, y_scale, y_zero_point=None, channels_last=0):
    value = _channels_first(_dequantized(ctx, x, x_scale, x_zero_point), channels_last)
    pooled = value.mean(tuple(range(2, value.ndim)), keepdim=True)
    return _quantized(ctx, _channels_back(pooled, channels_last), y_scale, y_zero_point, x)


@onnx_op("QLinearAveragePool", domain=MICROSOFT)
def qlinear_average_pool(ctx, x, x_scale, x_zero_point, y_scale, y_zero_point=None, channels_last=0, **attributes):
    value = _channels_first(_dequantized(ctx, x, x_scale, x_zero_point), channels_last)
    pooled = average_pool(ctx, value, **attributes)
    return _quantized(ctx, _channels_back(pooled, channels_last), y_scale, y_zero_point, x)


@onnx_op("QLinearConcat", domain=MICROSOFT)
def qlinear_concat(ctx, y_scale, y_zero_point, *inputs, axis):
    """Inputs come in threes (tensor, scale, zero point); the output is their concatenation requantized."""
    if len(inputs) % 3:
        raise ValueError(f"QLinearConcat: expected (tensor, scale, zero point) triples after Y_scale and "
                         f"Y_zero_point, got {len(inputs)} inputs")
    values = [_dequantized(ctx, *inputs[start:start + 3]) for start in range(0, len(inputs), 3)]
    joined = values[0].cat(*values[1:], dim=axis) if len(values) > 1 else values[0]
    return _quantized(ctx, joined, y_scale, y_zero_point, inputs[0])


@onnx_op("QGemm", domain=MICROSOFT)
def qgemm(ctx, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None, y_zero_point=None,
          alpha=1.0, transA=0, transB=0):
    """alpha * a_scale * b_scale * (the int32 sums of (a - a_zero_point)(b - b_zero_point), plus the int32
    bias c), quantized with y_scale and y_zero_point, or float32 without y_scale. b's scale and zero
    point may be one per column."""
    a = a.T if transA else a
    b = b.T if transB else b
    if b_zero_point is not None and b_zero_point.numel() > 1 and not ctx.known_zeros(b_zero_point):
        # per column and not all 0: centered before the sums (all 0, the byte dot products take it)
        b, b_zero_point = b.cast(dtypes.int32) - b_zero_point.cast(dtypes.int32).reshape(1, -1), None
    sums = integer_matmul(ctx, a, a_zero_point, b, b_zero_point)
    if c is not None:
        sums = sums + c.cast(dtypes.int32)
    scale = a_scale.reshape(()).cast(dtypes.float32) * b_scale.cast(dtypes.float32).reshape(-1) * float(alpha)
    result = sums.cast(dtypes.float32) * scale
    if y_scale is None:
        return result
    zero_type = y_zero_point.dtype if y_zero_point is not None else dtypes.uint8
    return quantize(result, as_float32(_per_tensor(ctx, y_scale)), _per_tensor(ctx, y_zero_point),
                    elem_type_of_dtype(zero_type))

