"""PyTorch's torch.nn.functional for lazygrad: convolution, pooling, resampling, normalization,
attention, dropout, losses and activations.

Front-end layer, beside tensor.py. Every function composes Tensor methods, so it fuses like any other
expression, runs on every device and is differentiated by the ordinary backward pass: nothing here
has a kernel or a gradient rule of its own. Use it as in PyTorch:

    import lazygrad.nn.functional as F
    y = F.conv2d(x, weight, bias, stride=2, padding=1)

Convolution, pooling, adaptive pooling and interpolate are defined in lazygrad/nn/spatial.py (they
share the windowed view behind conv2d) and exported from here. Deliberate differences from PyTorch
are stated on the function they concern.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.nn.spatial import (
    _check_channel_vector, _is_int, adaptive_avg_pool2d, avg_pool1d, avg_pool2d, byte_dot_channels_last, byte_dot_conv2d,
    conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, interpolate, max_pool1d, max_pool2d,
)
from lazygrad.parameter_values import kept_values
from lazygrad.tensor import Tensor, no_grad
from lazygrad.tensor_methods.helpers import computes_in_float32
from lazygrad.ops import Ops

__all__ = [
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "byte_dot_conv2d",
    "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool2d", "interpolate",
    "linear", "byte_dot_linear", "dropout", "embedding", "layer_norm", "batch_norm", "group_norm", "rms_norm",
    "normalize",
    "cosine_similarity",
    "scaled_dot_product_attention",
    "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "mse_loss", "l1_loss", "smooth_l1_loss",
    "relu", "relu6", "leaky_relu", "elu", "selu", "gelu", "silu", "mish", "softplus", "softsign",
    "hardtanh", "hardsigmoid", "hardswish", "sigmoid", "logsigmoid", "tanh", "softmax", "log_softmax", "pad",
    "one_hot",
]


# ---- linear, dropout, embedding ----------------------------------------------------------------

@computes_in_float32
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """input @ weight.T + bias, with weight (out_features, in_features)."""
    if weight.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D (out_features, in_features), got shape {weight.shape}")
    if input.ndim == 0 or input.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: input of shape {input.shape} does not match weight of shape {weight.shape}: "
                         f"the last dim of input must be in_features={weight.shape[1]}")
    _check_channel_vector("linear", "bias", bias, weight.shape[0])
    out = input @ weight.T
    return out + bias if bias is not None else out


# Rows from which byte_dot_linear takes byte_dot_conv2d's register tile: 1024 x 1024, 2 threads, 64 rows
# 0.38 -> 0.27 ms, 256 rows 0.98 -> 0.47; 16 rows 0.14 against 0.18 (the plain loops' one output at a
# time costs little at so few rows, and a decoder's single token keeps them)
BYTE_DOT_TILE_MIN_ROWS = 32


def byte_dot_linear(input: Tensor, weight: Tensor) -> Tensor:
    """The exact int32 products input @ weight.T of a uint8 input (..., in_features) and an int8
    weight (out_features, in_features): int8 inference's matmul (lazygrad.quantize's Linear shifts its
    int8 input to uint8; ONNX's MatMulInteger and QLinearMatMul take uint8 activations). One dot
    product per output along the inputs, where both operands are uint8 and int8 buffers holding their
    values contiguously (computed values are right, and slow: store a shifted input first with
    `.contiguous()`, a transposed weight with `w.T.contiguous()`, kept between calls). Under
    BYTE_DOT_TILE_MIN_ROWS rows the kernel is plain loops (codegen/opts.py byte_dot_product) that gcc
    compiles to AVX-512 VNNI's dot products, one output at a time (256 x 1024 by 1024 x 1024, one
    thread: 2.7-3.0 ms, against float32's 4.6 ms); from there the rows are a 1x1 convolution's
    positions, channels last, on byte_dot_conv2d's register tile (the weight packed once, a kept
    value; that product on 2 threads 0.98 -> 0.47 ms, a transformer encoder quantized by ONNX Runtime
    9.5 -> 4.8 ms)."""
    if input.dtype != dtypes.uint8 or weight.dtype != dtypes.int8:
        raise TypeError(f"byte_dot_linear: expected a uint8 input and an int8 weight, got {input.dtype.name} and "
                        f"{weight.dtype.name}")
    if weight.ndim != 2 or input.ndim == 0 or input.shape[-1] != weight.shape[1]:
        raise ValueError(f"byte_dot_linear: input of shape {input.shape} does not match weight of shape "
                         f"{weight.shape} (out_features, in_features)")
    rows = math.prod(input.shape[:-1])
    if rows >= BYTE_DOT_TILE_MIN_ROWS and input.shape[-1] % 4 == 0:
        # as a 1x1 convolution of the rows, channels last: byte_dot_conv2d's register tile
        flat = input.reshape(1, rows, 1, input.shape[-1])
        sums = byte_dot_channels_last(flat, weight.reshape(*weight.shape, 1, 1), (1, 1), (1, 1), "byte_dot_linear")
        return sums.reshape(weight.shape[0], rows).T.reshape(*input.shape[:-1], weight.shape[0])
    products = input.unsqueeze(-2).cast(dtypes.int32) * weight.cast(dtypes.int32)
    return products._reduce(Ops.SUM, -1, False, "byte_dot_linear")


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p); identity when not training.
    The mask comes from the host generator behind Tensor.rand (seeded by manual_seed), so it is the
    same on every device. `inplace` is accepted for compatibility; the result is always a new tensor."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0
    keep = Tensor.rand(*input.shape, device=input.device) >= p
    return input * (keep.cast(input.dtype) * (1.0 / (1.0 - p)))


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of weight (num_embeddings, dim) at the integer indices in input: shape input.shape + (dim,).
    The row at padding_idx gets no gradient. One kernel of indexed loads (TAKE), which reads only the
    rows asked for; an index out of range gives a row of zeros rather than an error, and never reads
    outside the table."""
    if input.dtype.is_float or input.dtype.is_bool:
        raise TypeError(f"embedding: indices must be an integer tensor, got {input.dtype.name}")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got shape {weight.shape}")
    rows = weight.shape[0]
    if padding_idx is not None and not -rows <= padding_idx < rows:
        raise ValueError(f"embedding: padding_idx {padding_idx} is out of range for {rows} embeddings")
    out = _rows_at(weight.detach(), input)

    def gradient(grad, out, sources, rule):
        table_grad = _embedding_gradient(grad, input, rows)
        if padding_idx is not None:
            not_padding = Tensor(np.arange(rows) != padding_idx % rows, device=weight.device).reshape(rows, 1)
            table_grad = not_padding.where(table_grad, 0.0)
        return [table_grad]
    return out._with_gradient((weight,), gradient)


def _rows_at(table: Tensor, indices: Tensor) -> Tensor:
    """table's rows at integer indices (a row of zeros outside the table): one kernel of indexed loads."""
    # each output element (..., d) takes column d of the table read along its rows
    columns = table.T.reshape((1,) * indices.ndim + (table.shape[1], table.shape[0]))
    return columns._take(indices.reshape(indices.shape + (1,)), indices.shape + (table.shape[1],))


def _embedding_gradient(grad: Tensor, indices: Tensor, rows: int) -> Tensor:
    """The gradient of a table of `rows` rows read at `indices`: each row the sum of the gradients of
    the tokens that read it. Summed directly, every (row, column) tests every token: rows x tokens x
    width, as much as the output layer's product that a language model's embedding shares (GPT-2:
    50257 rows, 512 tokens, 768 wide, 2 threads: 279 ms a step). With fewer tokens than rows the
    tokens' gradients are summed per distinct index instead, each at its first token (tokens x tokens
    x width), and each row takes the sum of its first token, if any (rows x tokens tests and a copy
    of rows x width values)."""
    tokens, width = indices.reshape(-1), grad.shape[-1]
    count = tokens.shape[0]
    flat = grad.reshape(count, width)
    if count >= rows:
        return _summed_by_slot(flat, tokens, rows)
    positions = Tensor.arange(count, device=grad.device)
    # each token's slot: the first token with its index
    first = (tokens.reshape(count, 1) == tokens.reshape(1, count)).where(positions, count).amin(1)
    per_slot = _summed_by_slot(flat, first, count).pad(((0, 1), (0, 0)))  # a zero row for unread rows
    row_slot = (tokens == Tensor.arange(rows, device=grad.device).reshape(rows, 1)).where(positions, count).amin(1)
    return _rows_at(per_slot, row_slot)


def _summed_by_slot(values: Tensor, slots: Tensor, count: int) -> Tensor:
    """(count, width): row s the sum of the rows of values whose slot is s (none outside [0, count))."""
    hit = slots.reshape(-1, 1, 1) == Tensor.arange(count, device=values.device).reshape(1, count, 1)
    return hit.where(values.reshape(values.shape[0], 1, values.shape[1]), 0.0).sum(0)


# ---- normalization -----------------------------------------------------------------------------

def _normalize(x: Tensor, axes: tuple[int, ...], eps: float) -> Tensor:
    """(x - mean) / sqrt(biased variance + eps) over axes, its gradient written out."""
    with no_grad():
        centered = x - x.mean(axes, keepdim=True)
        variance = (centered * centered).mean(axes, keepdim=True)
        inverse = (variance + eps).rsqrt()
    return _with_normalization_gradient(centered * inverse, x, inverse, axes)


def _with_normalization_gradient(normalized: Tensor, x: Tensor, inverse: Tensor, axes: tuple[int, ...]) -> Tensor:
    """`normalized`, x normalized over axes (times `inverse`, 1 / sqrt(variance + eps)), with its
    gradient written out: inverse * (g - mean(g) - normalized * mean(g * normalized)). Derived op by op
    through the mean, the centering and the variance it was 40 ops and 4 kernels (a batch norm's);
    27 and 2 now (the batch norms of MobileNetV2's eager training step: its backward graph 28.3-28.9
    -> 24.2-24.7 ms to build, 72 kernels fewer)."""
    return normalized._with_gradient((x,), lambda grad, out, sources, rule: [
        inverse * (grad - grad.mean(axes, keepdim=True) - out * (grad * out).mean(axes, keepdim=True))])


def _normalized_shape(name: str, input: Tensor, normalized_shape) -> tuple[int, ...]:
    shape = (normalized_shape,) if _is_int(normalized_shape) else tuple(normalized_shape)
    if len(shape) > input.ndim or input.shape[input.ndim - len(shape):] != shape:
        raise ValueError(f"{name}: normalized_shape {shape} does not match the last dims of input of shape "
                         f"{input.shape}")
    return shape


@computes_in_float32
def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing dims given by normalized_shape, then scale by weight and shift by bias
    (both of shape normalized_shape)."""
    shape = _normalized_shape("layer_norm", input, normalized_shape)
    for argument, tensor in (("weight", weight), ("bias", bias)):
        if tensor is not None and tensor.shape != shape:
            raise ValueError(f"layer_norm: {argument} must have shape {shape}, got {tensor.shape}")
    out = _normalize(input, tuple(range(input.ndim - len(shape), input.ndim)), eps)
    if weight is not None:
        out = out * weight
    return out + bias if bias is not None else out


@computes_in_float32
def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: "float | Tensor" = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalize each channel (dim 1) of (N, C, *) by the batch statistics when training, else by
    running_mean and running_var; then scale by weight and shift by bias, each of shape (C,).

    When training, running_mean and running_var (if given) are updated in place, as in PyTorch:
    new = (1 - momentum) * old + momentum * batch value (the unbiased variance for running_var);
    momentum may be a 0-d Tensor. The update is a lazy `assign` (no grad), computed when the tensor
    is next realized or read. Realize the running statistics along with the optimizer step
    (`Tensor.realize(...)`), or each unrealized step keeps its batch alive.
    """
    name = "batch_norm"
    if input.ndim < 2:
        raise ValueError(f"{name}: expected an input of shape (N, C, *), got {input.shape}")
    channels = input.shape[1]
    for argument, tensor in (("running_mean", running_mean), ("running_var", running_var),
                             ("weight", weight), ("bias", bias)):
        _check_channel_vector(name, argument, tensor, channels)
    axes = (0,) + tuple(range(2, input.ndim))
    per_channel = (1, channels) + (1,) * (input.ndim - 2)
    if training:
        count = math.prod(input.shape[axis] for axis in axes)
        if count <= 1:
            raise ValueError(f"{name}: expected more than 1 value per channel when training, got input of shape "
                             f"{input.shape}")
        # stored (contiguous), as the reduces they are: the running statistics' update below is
        # realized later, maybe after an optimizer step has written the layers that computed input
        with no_grad():
            mean = input.mean(axes, keepdim=True).contiguous()
            centered = input - mean
            variance = (centered * centered).mean(axes, keepdim=True).contiguous()
            inverse = (variance + eps).rsqrt()
        out = _with_normalization_gradient(centered * inverse, input, inverse, axes)
        with no_grad():
            for running, batch_value in ((running_mean, mean), (running_var, variance * (count / (count - 1)))):
                if running is not None:
                    running.assign(running.detach() * (1 - momentum) + batch_value.detach().reshape(channels) * momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError(f"{name}: running_mean and running_var are required when training=False")
        # input * scale + shift, both per channel and computed from parameters alone, as PyTorch's
        # CPU kernel does: the scheduler stores such values once (schedule/fuse.py), so each element
        # costs one multiply and one add. shift is written from the parameters, not from scale, so
        # the two are one kernel reading parameters only, which a jit replay skips; an eager call
        # takes them as kept while the parameters are unchanged (parameter_values.py).
        def scale_and_shift() -> tuple[Tensor, Tensor]:
            inverse_deviation = (running_var.reshape(per_channel) + eps).rsqrt()
            mean = running_mean.reshape(per_channel)
            if weight is not None:
                scale, mean = inverse_deviation * weight.reshape(per_channel), mean * weight.reshape(per_channel)
            else:
                scale = inverse_deviation
            shift = -mean * inverse_deviation
            return scale, shift + bias.reshape(per_channel) if bias is not None else shift
        scale, shift = kept_values("batch_norm", scale_and_shift, (running_mean, running_var, weight, bias),
                                   (eps, per_channel))
        return input * scale + shift
    if weight is not None:
        out = out * weight.reshape(per_channel)
    return out + bias.reshape(per_channel) if bias is not None else out


@computes_in_float32
def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Split the channels of (N, C, *) into num_groups groups of consecutive channels and normalize each
    group over its channels and spatial dims; then per-channel weight and bias of shape (C,)."""
    name = "group_norm"
    if input.ndim < 2:
        raise ValueError(f"{name}: expected an input of shape (N, C, *), got {input.shape}")
    channels = input.shape[1]
    if not _is_int(num_groups) or num_groups < 1 or channels % num_groups:
        raise ValueError(f"{name}: num_groups={num_groups!r} must divide the {channels} channels of input of shape "
                         f"{input.shape}")
    _check_channel_vector(name, "weight", weight, channels)
    _check_channel_vector(name, "bias", bias, channels)
    grouped = input.reshape(input.shape[0], num_groups, math.prod(input.shape[1:]) // num_groups)
    out = _normalize(grouped, (2,), eps).reshape(input.shape)
    per_channel = (1, channels) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    return out + bias.reshape(per_channel) if bias is not None else out


@computes_in_float32
def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """input / sqrt(mean(input**2) + eps) over the trailing normalized_shape dims, times weight. eps
    defaults to the machine epsilon of the input's dtype, as in PyTorch."""
    shape = _normalized_shape("rms_norm", input, normalized_shape)
    if weight is not None and weight.shape != shape:
        raise ValueError(f"rms_norm: weight must have shape {shape}, got {weight.shape}")
    if eps is None:
        eps = float(np.finfo(input.dtype.np).eps) if input.dtype.is_float else float(np.finfo(np.float32).eps)
    axes = tuple(range(input.ndim - len(shape), input.ndim))
    out = input * ((input * input).mean(axes, keepdim=True) + eps).rsqrt()
    return out * weight if weight is not None else out


@computes_in_float32
def normalize(input: Tensor, p: float = 2.0, dim=1, eps: float = 1e-12) -> Tensor:
    """input divided by its p-norm over dim (an int or a tuple), the norm held at eps or more, as
    PyTorch's. p is a positive number or math.inf."""
    norm = _vector_norm(input, p, dim, "normalize")
    return input / (norm >= eps).where(norm, eps)


@computes_in_float32
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """The cosine of the angle between x1 and x2 (broadcast together) along dim: the sum over dim of
    x1 / max(||x1||, eps) times x2 / max(||x2||, eps), as PyTorch computes it. Where a norm is below
    eps its gradient is 0 here; PyTorch clamps the norm in place, without autograd, so its gradient
    there still has the norm's term."""
    x1, x2 = x1._operands(x2, "cosine_similarity")
    units = [x / (norm >= eps).where(norm, eps)
             for x, norm in ((x, _vector_norm(x, 2.0, dim, "cosine_similarity")) for x in (x1._to_float(), x2._to_float()))]
    return (units[0] * units[1]).sum(dim)


def _vector_norm(x: Tensor, p: float, dim, name: str) -> Tensor:
    """The p-norm of x over dim, the reduced dims kept. Its gradient is 0 where the norm is 0, as
    PyTorch's: the root's infinite slope at 0 is on a branch that a WHERE masks."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not p > 0:
        raise ValueError(f"{name}: p must be a positive number or math.inf, got {p!r}")
    x = x._to_float()
    if p == math.inf:
        return x.abs().max(axis=dim, keepdim=True)
    if p == 1:
        return x.abs().sum(dim, keepdim=True)
    total = (x * x if p == 2 else x.abs() ** p).sum(dim, keepdim=True)
    zero = total == 0
    safe = zero.where(1.0, total)
    return zero.where(0.0, safe.sqrt() if p == 2 else safe ** (1 / p))


# ---- attention ---------------------------------------------------------------------------------

@computes_in_float32
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None) -> Tensor:
    """softmax(query @ key.T * scale + mask) @ value for query (..., L, E), key (..., S, E) and value
    (..., S, Ev). A bool attn_mask keeps the positions where it is True; a float one is added.
    is_causal masks key positions after the query's (top-left aligned when L != S). scale defaults
    to 1/sqrt(E). dropout_p drops attention weights (always, as PyTorch's function does)."""
    name = "scaled_dot_product_attention"
    for argument, tensor in (("query", query), ("key", key), ("value", value)):
        if tensor.ndim < 2:
            raise ValueError(f"{name}: {argument} must have at least 2 dims (..., sequence, embedding), got shape "
                             f"{tensor.shape}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"{name}: query of shape {query.shape} and key of shape {key.shape} differ in embedding "
                         "size (last dim)")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"{name}: key of shape {key.shape} and value of shape {value.shape} differ in sequence "
                         "length (dim -2)")
    if is_causal and attn_mask is not None:
        raise ValueError(f"{name}: give either attn_mask or is_causal=True, not both")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        target, source = query.shape[-2], key.shape[-2]
        attn_mask = Tensor(np.tril(np.ones((target, source), dtype=bool)), device=query.device)
    if attn_mask is not None:
        scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype.is_bool else scores + attn_mask
    weights = scores.softmax(-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return weights @ value


# ---- losses ------------------------------------------------------------------------------------

def _check_reduction(name: str, reduction: str) -> None:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def _class_weights(name: str, weight: Tensor | None, classes: int, class_dim: int, ndim: int) -> Tensor | None:
    """weight (C,) shaped to broadcast along the class dim."""
    if weight is None:
        return None
    _check_channel_vector(name, "weight", weight, classes)
    return weight.reshape(tuple(classes if axis == class_dim else 1 for axis in range(ndim)))


def _nll(name: str, log_probs: Tensor, target: Tensor, weight, ignore_index: int, reduction: str,
         label_smoothing: float = 0.0) -> Tensor:
    """Negative log-likelihood of class-index targets, with PyTorch's weighting and ignore_index; with
    label smoothing, plus label_smoothing/C times the (weighted) sum of -log_probs over classes."""
    if target.dtype.is_float or target.dtype.is_bool:
        raise TypeError(f"{name}: class-index target must be an integer tensor, got {target.dtype.name}")
    if log_probs.ndim == 0:
        raise ValueError(f"{name}: input must have a class dim, got a 0-d tensor")
    class_dim = 0 if log_probs.ndim == 1 else 1
    classes = log_probs.shape[class_dim]
    expected = log_probs.shape[:class_dim] + log_probs.shape[class_dim + 1:]
    if target.shape != expected:
        raise ValueError(f"{name}: target of shape {target.shape} does not match input of shape {log_probs.shape} "
                         f"(expected target shape {expected})")
    class_weight = _class_weights(name, weight, classes, class_dim, log_probs.ndim)
    target = target.cast(dtypes.int64).unsqueeze(class_dim)
    class_numbers = Tensor.arange(classes, device=log_probs.device)
    class_numbers = class_numbers.reshape(tuple(classes if axis == class_dim else 1 for axis in range(log_probs.ndim)))
    hit = target == class_numbers                  # one-hot over the class dim
    kept = (target != ignore_index).squeeze(class_dim)
    picked = hit.where(log_probs, 0).sum(class_dim)  # log-probability of the target class
    if class_weight is None:
        sample_weight = kept.cast(log_probs.dtype)
    else:
        sample_weight = kept.where(hit.where(class_weight.cast(log_probs.dtype), 0).sum(class_dim), 0)
    loss = kept.where(-picked * sample_weight, 0)
    smooth = None
    if label_smoothing > 0.0:
        weighted = log_probs if class_weight is None else log_probs * class_weight
        smooth = kept.where(-weighted.sum(class_dim), 0)
    if reduction == "mean":
        total_weight = sample_weight.sum()
        loss = loss.sum() / total_weight
        smooth = smooth.sum() / total_weight if smooth is not None else None
    elif reduction == "sum":
        loss = loss.sum()
        smooth = smooth.sum() if smooth is not None else None
    if smooth is None:
        return loss
    return loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)


@computes_in_float32
def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """-input[n, target[n]] * weight[target[n]] for log-probabilities input (N, C, *) or (C,) and
    integer targets (N, *) or (); 'mean' divides by the summed weights of the non-ignored targets.
    A target outside [0, C) other than ignore_index contributes 0 rather than raising."""
    _check_reduction("nll_loss", reduction)
    return _nll("nll_loss", input, target, weight, ignore_index, reduction)


@computes_in_float32
def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits input (N, C, *) or (C,), with the log-softmax taken over the class dim.

    target is either class indices (an integer tensor of shape (N, *) or (); handled as nll_loss, with
    ignore_index and weight) or class probabilities (a float tensor shaped like input; 'mean' then
    divides by the number of samples). label_smoothing mixes the target with the uniform distribution.
    """
    name = "cross_entropy"
    _check_reduction(name, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{name}: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    if input.ndim == 0:
        raise ValueError(f"{name}: input must have a class dim, got a 0-d tensor")
    if not input.dtype.is_float:
        raise TypeError(f"{name}: input must be floating point logits, got {input.dtype.name}")
    class_dim = 0 if input.ndim == 1 else 1
    log_probs = input.log_softmax(class_dim)  # shifted by the max: stable for large logits
    if not target.dtype.is_float:
        return _nll(name, log_probs, target, weight, ignore_index, reduction, label_smoothing)
    if target.shape != input.shape:
        raise ValueError(f"{name}: probability target of shape {target.shape} must have the shape of input "
                         f"{input.shape}")
    classes = input.shape[class_dim]
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    class_weight = _class_weights(name, weight, classes, class_dim, input.ndim)
    terms = log_probs * target if class_weight is None else log_probs * target * class_weight
    return _reduce(-terms.sum(class_dim), reduction)


def _check_same_shape(name: str, input: Tensor, target: Tensor) -> None:
    if target.shape != input.shape:
        raise ValueError(f"{name}: target of shape {target.shape} must have the same shape as input {input.shape}")


@computes_in_float32
def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         reduction: str = "mean") -> Tensor:
    """-weight * (target * log(input) + (1 - target) * log(1 - input)) for probabilities input; each log
    is clamped at -100 as in PyTorch, so input 0 or 1 gives a finite loss."""
    name = "binary_cross_entropy"
    _check_reduction(name, reduction)
    _check_same_shape(name, input, target)
    loss = -(target * input.log().maximum(-100.0) + (1 - target) * (1 - input).log().maximum(-100.0))
    return _reduce(loss * weight if weight is not None else loss, reduction)


@computes_in_float32
def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """binary_cross_entropy(sigmoid(input), target) computed stably from the logits:
    (1 - target) * x + (1 + (pos_weight - 1) * target) * log(1 + exp(-x)), where
    log(1 + exp(-x)) = max(-x, 0) + log(1 + exp(-|x|)) never overflows."""
    name = "binary_cross_entropy_with_logits"
    _check_reduction(name, reduction)
    _check_same_shape(name, input, target)
    # -|x| as min(x, -x): at x == 0 its gradient (0) then agrees with max(-x, 0)'s shared tie
    softplus_of_negative = (-input).maximum(0) + (1 + input.minimum(-input).exp()).log()
    if pos_weight is not None:
        softplus_of_negative = softplus_of_negative * (1 + (pos_weight - 1) * target)
    loss = (1 - target) * input + softplus_of_negative
    return _reduce(loss * weight if weight is not None else loss, reduction)


def _difference(name: str, input: Tensor, target: Tensor) -> Tensor:
    """input - target. Different shapes broadcast with a warning, as in PyTorch (rarely what was meant)."""
    if input.shape != target.shape:
        warnings.warn(f"{name}: target of shape {target.shape} differs from input of shape {input.shape}; they "
                      "are broadcast together, which is likely not what was meant", stacklevel=3)
    return input - target


@computes_in_float32
def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """(input - target)**2."""
    _check_reduction("mse_loss", reduction)
    difference = _difference("mse_loss", input, target)
    return _reduce(difference * difference, reduction)


@computes_in_float32
def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """|input - target|."""
    _check_reduction("l1_loss", reduction)
    return _reduce(_difference("l1_loss", input, target).abs(), reduction)


@computes_in_float32
def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 * d**2 / beta where |d| < beta, else |d| - 0.5 * beta, for d = input - target (l1 for beta 0)."""
    _check_reduction("smooth_l1_loss", reduction)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    distance = _difference("smooth_l1_loss", input, target).abs()
    if beta == 0:
        return _reduce(distance, reduction)
    loss = (distance < beta).where(distance * distance * (0.5 / beta), distance - 0.5 * beta)
    return _reduce(loss, reduction)


# ---- activations, softmax, padding, one-hot: the Tensor methods under PyTorch's functional names ---
# `inplace` is accepted where PyTorch has it, for compatibility; the result is always a new tensor.

def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.relu()


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return input.relu6()


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return input.leaky_relu(negative_slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return input.elu(alpha)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.selu()


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    return input.gelu(approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.silu()


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    return input.mish()


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return input.softplus(beta, threshold)


def softsign(input: Tensor) -> Tensor:
    return input.softsign()


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    return input.hardtanh(min_val, max_val)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return input.hardsigmoid()


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return input.hardswish()


def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def logsigmoid(input: Tensor) -> Tensor:
    return input.logsigmoid()


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


def _softmax_dim(name: str, input: Tensor, dim: int | None) -> int:
    """PyTorch's implicit softmax dim when none is given (dim 0 for 0-D, 1-D and 3-D input, else 1),
    with its deprecation warning; Tensor.softmax instead defaults to the last dim."""
    if dim is not None:
        return dim
    warnings.warn(f"{name}: implicit dimension choice is deprecated; pass dim", stacklevel=3)
    return 0 if input.ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    return input.softmax(_softmax_dim("softmax", input, dim), dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    return input.log_softmax(_softmax_dim("log_softmax", input, dim), dtype=dtype)


def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """PyTorch's flat padding list, starting at the last dim; modes constant, reflect, replicate, circular."""
    return input.pad(pad, value=value, mode=mode)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    return tensor.one_hot(num_classes)
