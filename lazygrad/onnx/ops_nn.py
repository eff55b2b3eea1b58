"""Linear algebra and normalization ONNX operators: MatMul, Gemm, Einsum, the *Normalization family, LRN.

Registered in registry.OPERATORS; model.py calls them. Normalizations compute in float32 at least
(ONNX's stash_type) and return the input's dtype.
"""
from __future__ import annotations

from lazygrad.dtype import dtypes
from lazygrad.nn import functional as F
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor
from lazygrad.ops import Ops


@onnx_op("MatMul")
def matmul(ctx, x, y):
    if x.dtype == dtypes.float16:  # numpy (ONNX's reference) accumulates half products in float32
        return (x.float() @ y.float()).half()
    return x @ y


def integer_matmul(ctx, x, x_zero_point, y, y_zero_point) -> Tensor:
    """The int32 product of x - x_zero_point with y - y_zero_point (MatMulInteger's, QLinearMatMul's).
    A uint8 x with a 2-D int8 y whose zero point is 0 (ONNX Runtime's quantizers write that) is
    F.byte_dot_linear's, y's columns stored as rows once (a value kept between calls), less
    x_zero_point times each column's sum; any other is a matmul of the centered operands."""
    if x.dtype == dtypes.uint8 and y.dtype == dtypes.int8 and y.ndim == 2 \
            and (x_zero_point is None or x_zero_point.numel() == 1) \
            and ctx.known_zeros(y_zero_point):
        # x stored first, as uint8 (byte_dot_linear's contract): a DynamicQuantizeLinear's result was
        # stored as the int32 the products widen it to, and a quantized transformer's products ran as
        # int32 multiplies at 26-80 GOP/s, not VNNI's dot products (400-700)
        sums = F.byte_dot_linear(x.contiguous(), y.T.contiguous())
        if x_zero_point is None:
            return sums
        # stored: a value of the weight alone, kept between calls (parameter_values.py); fused into
        # the products' epilogue it was summed again at every call, down strided columns (a classifier
        # of 1280 x 1000: 0.16 ms of an 0.2 ms layer)
        column_sums = y.cast(dtypes.int32)._reduce(Ops.SUM, 0, False, "MatMulInteger").contiguous()
        zero = ctx.number_or_scalar(x_zero_point)
        return sums - (zero.cast(dtypes.int32) if isinstance(zero, Tensor) else int(zero)) * column_sums
    x = x.cast(dtypes.int32) - (0 if x_zero_point is None else x_zero_point.cast(dtypes.int32))
    y = y.cast(dtypes.int32) - (0 if y_zero_point is None else y_zero_point.cast(dtypes.int32))
    return (x @ y).cast(dtypes.int32)


@onnx_op("MatMulInteger")
def matmul_integer(ctx, x, y, x_zero_point=None, y_zero_point=None):
    return integer_matmul(ctx, x, x_zero_point, y, y_zero_point)


@onnx_op("Gemm")
def gemm(ctx, a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=0):
    a = a.T if transA else a
    b = b.T if transB else b
    result = a @ b
    if alpha != 1.0:
        result = result * alpha
    if c is not None:
        result = result + (c * beta if beta != 1.0 else c)
    return result.cast(a.dtype)


@onnx_op("Einsum")
def einsum(ctx, *operands, equation):
    return Tensor.einsum(equation.replace(" ", ""), *operands)


def stash(x: Tensor, stash_type: int = 1) -> Tensor:
    """The precision statistics are computed in: float32, or float64 when asked or given."""
    if x.dtype == dtypes.float64 or stash_type == 11:
        return x.cast(dtypes.float64)
    return x.cast(dtypes.float32)


@onnx_op("BatchNormalization")
def batch_normalization(ctx, x, scale, bias, mean, var, epsilon=1e-5, momentum=0.9, training_mode=0, spatial=1,
                        is_test=0, consumed_inputs=None):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training_mode:
        axes = (0,) + tuple(range(2, x.ndim))
        batch_mean = x.mean(axes)
        batch_var = ((x - batch_mean.reshape(shape)) ** 2).mean(axes)
        y = (x - batch_mean.reshape(shape)) / (batch_var.reshape(shape) + epsilon).sqrt()
        y = y * scale.reshape(shape) + bias.reshape(shape)
        running_mean = mean * momentum + batch_mean * (1 - momentum)
        running_var = var * momentum + batch_var * (1 - momentum)
        return y.cast(x.dtype), running_mean.cast(mean.dtype), running_var.cast(var.dtype)
    return F.batch_norm(x, mean, var, scale, bias, eps=epsilon).cast(x.dtype)


@onnx_op("InstanceNormalization")
def instance_normalization(ctx, x, scale, bias, epsilon=1e-5):
    axes = tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = x.mean(axes, keepdim=True)
    var = ((x - mean) ** 2).mean(axes, keepdim=True)
    return ((x - mean) / (var + epsilon).sqrt() * scale.reshape(shape) + bias.reshape(shape)).cast(x.dtype)


@onnx_op("LayerNormalization")
def layer_normalization(ctx, x, scale, bias=None, axis=-1, epsilon=1e-5, stash_type=1):
    axis = axis + x.ndim if axis < 0 else axis
    axes = tuple(range(axis, x.ndim))
    wide = stash(x, stash_type)
    mean = wide.mean(axes, keepdim=True)
    inverse_std = (((wide - mean) ** 2).mean(axes, keepdim=True) + epsilon).rsqrt()
    y = ((wide - mean) * inverse_std).cast(x.dtype) * scale
    if bias is not None:
        y = y + bias
    return y.cast(x.dtype), mean.cast(wide.dtype), inverse_std.cast(wide.dtype)


@onnx_op("RMSNormalization")
def rms_normalization(ctx, x, scale, axis=-1, epsilon=1e-5, stash_type=1):
    axis = axis + x.ndim if axis < 0 else axis
    axes = tuple(range(axis, x.ndim))
    wide = stash(x, stash_type)
    normalized = wide * ((wide * wide).mean(axes, keepdim=True) + epsilon).rsqrt()
    return (normalized.cast(x.dtype) * scale).cast(x.dtype)


@onnx_op("GroupNormalization")
def group_normalization(ctx, x, scale, bias, num_groups, epsilon=1e-5, stash_type=1):
    batch, channels = x.shape[:2]
    wide = stash(x, stash_type)
    grouped = wide.reshape(batch, num_groups, -1)
    mean = grouped.mean(-1, keepdim=True)
    var = ((grouped - mean) ** 2).mean(-1, keepdim=True)
    normalized = ((grouped - mean) / (var + epsilon).sqrt()).reshape(x.shape).cast(x.dtype)
    if scale.shape[0] != channels:
        scale = scale.reshape(-1, 1).expand(num_groups, channels // num_groups).reshape(-1)
        bias = bias.reshape(-1, 1).expand(num_groups, channels // num_groups).reshape(-1)
    shape = (1, channels) + (1,) * (x.ndim - 2)
    return (normalized * scale.reshape(shape) + bias.reshape(shape)).cast(x.dtype)


@onnx_op("LRN")
def lrn(ctx, x, size, alpha=1e-4, beta=0.75, bias=1.0):
    channels = x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    squares = (x * x).pad(((0, 0), (before, after)) + ((0, 0),) * (x.ndim - 2))
    total = None
    for offset in range(size):
        window = squares.shrink((None, (offset, offset + channels)) + (None,) * (x.ndim - 2))
        total = window if total is None else total + window
    return (x / (total * (alpha / size) + bias) ** beta).cast(x.dtype)


@onnx_op("Det")
def determinant(ctx, x):
    """Laplace expansion along the first row: fine for the small matrices ONNX models hold."""
    size = x.shape[-1]
    if size > 6:
        raise NotImplementedError(f"Det of {size}x{size} matrices (at most 6x6 are supported)")
    return laplace_determinant(x, size)


def laplace_determinant(x: Tensor, size: int) -> Tensor:
    if size == 1:
        return x[..., 0, 0]
    total = None
    for column in range(size):
        keep = [c for c in range(size) if c != column]
        minor = x[..., 1:, :][..., keep[0]:keep[0] + 1] if size == 2 else \
            Tensor.cat(*[x[..., 1:, c:c + 1] for c in keep], dim=-1)
        term = x[..., 0, column] * laplace_determinant(minor, size - 1) * (-1 if column % 2 else 1)
        total = term if total is None else total + term
    return total
