"""ONNX's random operators: RandomNormal, RandomUniform and their *Like forms, Bernoulli, Multinomial
and Dropout (in training mode it draws its mask).

Registered in registry.OPERATORS with `draws=True`, so model.py never folds them into constants.
The numbers are drawn on the host (`OpContext.generator`: the node's own generator when it has a
`seed` attribute, else lazygrad's, which lazygrad.manual_seed sets), the same on every device, and
under lazygrad.jit each replay draws new ones (`random_tensor` records the draw). No two
implementations draw the same numbers, so ONNX's reference outputs cannot be matched value for
value; test/onnx_runner checks the draws by what they must satisfy and by their statistics.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from lazygrad.dtype import DType, dtypes
from lazygrad.onnx.proto import dtype_of
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor
from lazygrad.tensor_methods.creation import random_tensor


def _float_dtype(op: str, elem_type: int | None, default: DType) -> DType:
    dtype = default if elem_type is None else dtype_of(elem_type)
    if not dtype.is_float:
        raise TypeError(f"{op}: dtype must be a floating point type, got {dtype.name}")
    return dtype


def _uniform(ctx, shape: tuple, dtype: DType, low: float, high: float, seed) -> Tensor:
    """Uniform on [low, high) in `dtype`: drawn in float64, and a value that rounds up to `high` in a
    narrower dtype is moved to the largest one below it."""
    generator = ctx.generator(seed)

    def draw() -> np.ndarray:
        values = generator.uniform(low, high, shape).astype(dtype.np)
        if high > low:
            values[values >= high] = np.nextafter(dtype.np.type(high), dtype.np.type(low))
        return values
    return random_tensor(draw, ctx.device)


def _normal(ctx, shape: tuple, dtype: DType, mean: float, scale: float, seed) -> Tensor:
    generator = ctx.generator(seed)
    return random_tensor(lambda: (generator.normal(mean, scale, shape)).astype(dtype.np), ctx.device)


@onnx_op("RandomNormal", draws=True)
def random_normal(ctx, shape, dtype=TensorProto.FLOAT, mean=0.0, scale=1.0, seed=None):
    return _normal(ctx, tuple(shape), _float_dtype("RandomNormal", dtype, dtypes.float32), mean, scale, seed)


@onnx_op("RandomUniform", draws=True)
def random_uniform(ctx, shape, dtype=TensorProto.FLOAT, low=0.0, high=1.0, seed=None):
    return _uniform(ctx, tuple(shape), _float_dtype("RandomUniform", dtype, dtypes.float32), low, high, seed)


@onnx_op("RandomNormalLike", draws=True)
def random_normal_like(ctx, x, dtype=None, mean=0.0, scale=1.0, seed=None):
    return _normal(ctx, x.shape, _float_dtype("RandomNormalLike", dtype, x.dtype), mean, scale, seed)


@onnx_op("RandomUniformLike", draws=True)
def random_uniform_like(ctx, x, dtype=None, low=0.0, high=1.0, seed=None):
    return _uniform(ctx, x.shape, _float_dtype("RandomUniformLike", dtype, x.dtype), low, high, seed)


@onnx_op("Bernoulli", draws=True)
def bernoulli(ctx, p, dtype=None, seed=None):
    """1 with probability p (each element of the input), else 0."""
    if not p.dtype.is_float:
        raise TypeError(f"Bernoulli: the probabilities must be floating point, got {p.dtype.name}")
    draws = _uniform(ctx, p.shape, dtypes.float64, 0.0, 1.0, seed)  # below 1, so p = 1 always gives 1
    return (draws < p).cast(p.dtype if dtype is None else dtype_of(dtype))


@onnx_op("Multinomial", draws=True)
def multinomial(ctx, logits, dtype=TensorProto.INT32, sample_size=1, seed=None):
    """`sample_size` class indices per row of unnormalized log-probabilities (batch, classes), drawn
    by the Gumbel-max trick: the index of the largest logit plus -log(-log(u)) noise is a draw from
    softmax(logits), one independent noise per sample."""
    if logits.ndim != 2:
        raise ValueError(f"Multinomial: expected logits of shape (batch, classes), got {logits.shape}")
    out_dtype = dtype_of(dtype)
    if out_dtype not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"Multinomial: dtype must be int32 or int64, got {out_dtype.name}")
    batch, classes = logits.shape
    generator = ctx.generator(seed)
    # uniform on (0, 1): the smallest positive double instead of 0, whose log would be -inf
    uniform = random_tensor(lambda: np.maximum(generator.random((batch, sample_size, classes)), np.finfo(np.float64).tiny),
                            ctx.device)
    gumbel = -(-uniform.log()).log()
    return (logits.cast(dtypes.float64).unsqueeze(1) + gumbel).argmax(-1).cast(out_dtype)


@onnx_op("Dropout", draws=True)
def dropout(ctx, x, ratio=None, training_mode=None, seed=None, is_test=None):
    """Identity outside training. In training each element is kept with probability 1 - ratio and
    scaled by 1 / (1 - ratio); the optional second output is the mask of kept elements. A ratio of 1
    keeps nothing (zeros, an all-False mask)."""
    rate = ctx.scalar(ratio, 0.5) if isinstance(ratio, Tensor) or ratio is None else ratio
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"Dropout: ratio must be in [0, 1], got {rate}")
    with_mask = len(ctx.node.output) > 1 and ctx.node.output[1] != ""
    if not ctx.scalar(training_mode, False) or rate == 0:
        mask = Tensor.full(x.shape, True, dtype=dtypes.bool, device=ctx.device)
        return (x, mask) if with_mask else x
    keep = _uniform(ctx, x.shape, dtypes.float32, 0.0, 1.0, seed) >= rate
    scale = 0.0 if rate == 1 else 1.0 / (1.0 - rate)
    output = keep.where(x * scale, 0).cast(x.dtype)
    return (output, keep) if with_mask else output
