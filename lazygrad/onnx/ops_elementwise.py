"""Elementwise ONNX operators: arithmetic, comparisons, logic, bit ops, math functions, activations.

Registered in registry.OPERATORS; model.py calls them. ONNX keeps the input dtype where PyTorch
promotes (integer `/`, `sum` of int8), so results are cast back to the input's dtype where needed.
"""
from __future__ import annotations

import math
from functools import reduce


from lazygrad.dtype import dtypes
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor


# ---- arithmetic ---------------------------------------------------------------------------------

@onnx_op("Add", "Sum")
def add(ctx, *operands, **_):
    return reduce(lambda x, y: x + y, operands)


@onnx_op("Sub")
def sub(ctx, x, y, **_):
    return x - y


@onnx_op("Mul")
def mul(ctx, x, y, **_):
    return x * y


def truncating_divide(x: Tensor, y: Tensor) -> Tensor:
    """Integer division rounding toward zero (C's and ONNX's), built from floor division."""
    floored = x // y
    inexact = (x - floored * y) != 0
    signs_differ = (x < 0) != (y < 0)
    return floored + (inexact.logical_and(signs_differ)).cast(floored.dtype)


@onnx_op("Div")
def div(ctx, x, y, **_):
    if x.dtype.is_float:
        return x / y
    return truncating_divide(x, y).cast(x.dtype)


@onnx_op("Mod")
def mod(ctx, x, y, fmod=0):
    remainder = x.remainder(y)
    if not fmod:
        return remainder
    if x.dtype.is_float:
        wrong_sign = (remainder != 0).logical_and((remainder < 0) != (x < 0))
        return wrong_sign.where(remainder - y, remainder)
    return (x - truncating_divide(x, y) * y).cast(x.dtype)


@onnx_op("Pow")
def power(ctx, x, y):
    if not x.dtype.is_float and y.dtype.is_float:
        return x.cast(y.dtype).pow(y).cast(x.dtype)
    if x.dtype.is_float and y.dtype != x.dtype:
        y = y.cast(x.dtype) if y.dtype.is_float else y.cast(dtypes.float64)
    return x.pow(y).cast(x.dtype)


@onnx_op("Max", "Min")
def max_min(ctx, *operands):
    name = ctx.node.op_type
    return reduce(lambda x, y: x.maximum(y) if name == "Max" else x.minimum(y), operands)


@onnx_op("Mean")
def mean(ctx, *operands):
    return reduce(lambda x, y: x + y, operands) / len(operands)


@onnx_op("Neg")
def neg(ctx, x):
    return -x


@onnx_op("Abs")
def absolute(ctx, x):
    return x.abs()


@onnx_op("Sign")
def sign(ctx, x):
    return x.sign().cast(x.dtype)


@onnx_op("Reciprocal")
def reciprocal(ctx, x):
    return x.reciprocal()


def _known_or_tensor(ctx, bound):
    value = ctx.known_scalar(bound)
    return bound if value is None else value


@onnx_op("Clip")
def clip(ctx, x, low=None, high=None, min=None, max=None):
    low = min if low is None and min is not None else low
    high = max if high is None and max is not None else high
    # known bounds (ReLU6's 0 and 6 as initializers) become constants of the kernel: loaded from
    # their buffers, gcc left MobileNetV2's padded ReLU6 kernels unvectorized (3.7 ms against 0.3)
    low, high = (_known_or_tensor(ctx, bound) for bound in (low, high))
    if low is not None and high is not None and not isinstance(low, Tensor) and not isinstance(high, Tensor):
        return x.clamp(low, high)  # two selects on x, not one on the other's result (see Tensor.clamp)
    if low is not None:
        x = x.maximum(low if isinstance(low, Tensor) else x._const_like(low))
    if high is not None:
        x = x.minimum(high if isinstance(high, Tensor) else x._const_like(high))
    return x


# ---- comparisons and logic ---------------------------------------------------------------------

@onnx_op("Equal")
def equal(ctx, x, y):
    return x == y


@onnx_op("Greater")
def greater(ctx, x, y):
    return x > y


@onnx_op("Less")
def less(ctx, x, y):
    return x < y


@onnx_op("GreaterOrEqual")
def greater_equal(ctx, x, y):
    return x >= y


@onnx_op("LessOrEqual")
def less_equal(ctx, x, y):
    return x <= y


@onnx_op("And")
def logical_and(ctx, x, y):
    return x.logical_and(y)


@onnx_op("Or")
def logical_or(ctx, x, y):
    return x.logical_or(y)


@onnx_op("Xor")
def logical_xor(ctx, x, y):
    return x.logical_xor(y)


@onnx_op("Not")
def logical_not(ctx, x):
    return x.logical_not()


@onnx_op("BitwiseAnd")
def bitwise_and(ctx, x, y):
    return x & y


@onnx_op("BitwiseOr")
def bitwise_or(ctx, x, y):
    return x | y


@onnx_op("BitwiseXor")
def bitwise_xor(ctx, x, y):
    return x ^ y


@onnx_op("BitwiseNot")
def bitwise_not(ctx, x):
    return ~x


@onnx_op("BitShift")
def bit_shift(ctx, x, y, direction):
    return x << y if direction == "LEFT" else x >> y


@onnx_op("Where")
def where(ctx, condition, x, y):
    return condition.where(x, y)


@onnx_op("IsNaN")
def isnan(ctx, x):
    return x.isnan()


@onnx_op("IsInf")
def isinf(ctx, x, detect_negative=1, detect_positive=1):
    result = x._const_like(False, dtypes.bool).expand(*x.shape)
    if detect_negative:
        result = result.logical_or(x == -math.inf)
    if detect_positive:
        result = result.logical_or(x == math.inf)
    return result


# ---- math functions -----------------------------------------------------------------------------

UNARY_FUNCTIONS = {
    "Sqrt": Tensor.sqrt, "Exp": Tensor.exp, "Log": Tensor.log, "Sin": Tensor.sin, "Cos": Tensor.cos,
    "Tan": Tensor.tan, "Tanh": Tensor.tanh, "Sigmoid": Tensor.sigmoid, "Relu": Tensor.relu,
    "Floor": Tensor.floor, "Ceil": Tensor.ceil, "Round": Tensor.round, "Erf": Tensor.erf,
    "Softsign": Tensor.softsign, "Mish": Tensor.mish, "HardSwish": Tensor.hardswish,
    "Atan": Tensor.atan, "Asin": Tensor.asin, "Acos": Tensor.acos, "Sinh": Tensor.sinh, "Cosh": Tensor.cosh,
    "Asinh": Tensor.asinh, "Acosh": Tensor.acosh, "Atanh": Tensor.atanh,
}


@onnx_op(*UNARY_FUNCTIONS)
def unary_function(ctx, x):
    function = UNARY_FUNCTIONS[ctx.node.op_type]
    if x.dtype == dtypes.float16:  # one rounding from float32, as numpy computes half functions
        return function(x.float()).half()
    return function(x)


@onnx_op("Softplus")
def softplus(ctx, x):
    return (x.exp() + 1).log()


# ---- activations with attributes ----------------------------------------------------------------

@onnx_op("LeakyRelu")
def leaky_relu(ctx, x, alpha=0.01):
    return (x < 0).where(x * alpha, x)


@onnx_op("PRelu")
def prelu(ctx, x, slope):
    return (x < 0).where(x * slope, x)


@onnx_op("Elu")
def elu(ctx, x, alpha=1.0):
    return (x < 0).where((x.exp() - 1) * alpha, x)


@onnx_op("Celu")
def celu(ctx, x, alpha=1.0):
    return x.maximum(0) + ((x / alpha).exp() - 1).minimum(0) * alpha


@onnx_op("Selu")
def selu(ctx, x, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    return (x <= 0).where((x.exp() - 1) * alpha, x) * gamma


@onnx_op("ThresholdedRelu")
def thresholded_relu(ctx, x, alpha=1.0):
    return (x > alpha).where(x, 0.0)


@onnx_op("HardSigmoid")
def hard_sigmoid(ctx, x, alpha=0.2, beta=0.5):
    return (x * alpha + beta).clamp(0, 1)


@onnx_op("Shrink")
def shrink(ctx, x, bias=0.0, lambd=0.5):
    shrunk = (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0))
    return shrunk.cast(x.dtype)


@onnx_op("Gelu")
def gelu(ctx, x, approximate="none"):
    return x.gelu(approximate=approximate)


@onnx_op("Swish")
def swish(ctx, x, alpha=1.0):
    return x * (x * alpha).sigmoid()


@onnx_op("Identity")
def identity(ctx, x):
    return x
