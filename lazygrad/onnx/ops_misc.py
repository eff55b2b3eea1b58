"""Less common ONNX operators: BitCast, MaxUnpool, Col2Im, TensorScatter, the preview training optimizers
(Adagrad, Momentum, Adam), TfIdfVectorizer and two ai.onnx.ml operators (Binarizer, ArrayFeatureExtractor).

Registered in registry.OPERATORS; model.py calls them.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.onnx.proto import dtype_of
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor

TRAINING = "ai.onnx.preview.training"


@onnx_op("BitCast")
def bitcast(ctx, x, to):
    target = dtype_of(to)
    if x.dtype.is_bool:
        return x.cast(target)
    return x.bitcast(target)


@onnx_op("MaxUnpool")
def max_unpool(ctx, x, indices, output_shape=None, kernel_shape=None, pads=None, strides=None):
    dims = len(kernel_shape)
    strides = strides or [1] * dims
    pads = pads or [0] * (2 * dims)
    spatial = [(size - 1) * s - pads[i] - pads[i + dims] + k
               for i, (size, s, k) in enumerate(zip(x.shape[2:], strides, kernel_shape))]
    shape = tuple(x.shape[:2]) + tuple(spatial)
    flat = Tensor.zeros(math.prod(shape), dtype=x.dtype, device=ctx.device)
    result = flat.scatter(0, indices.reshape(-1), x.reshape(-1)).reshape(shape)
    if output_shape is None:
        return result
    # indices refer to the inferred shape; a larger requested shape is zeros after it
    requested = ctx.ints(output_shape)
    return result.pad(tuple((0, want - have) for want, have in zip(requested, shape)))


@onnx_op("Col2Im")
def col2im(ctx, x, image_shape, block_shape, dilations=None, pads=None, strides=None):
    image = ctx.ints(image_shape)
    block = ctx.ints(block_shape)
    dims = len(image)
    dilations, strides = dilations or [1] * dims, strides or [1] * dims
    pads = pads or [0] * (2 * dims)
    batch, columns = x.shape[0], x.shape[1]
    channels = columns // math.prod(block)
    padded = [size + pads[i] + pads[i + dims] for i, size in enumerate(image)]
    counts = [(p - (d * (k - 1) + 1)) // s + 1 for p, d, k, s in zip(padded, dilations, block, strides)]
    blocks = x.reshape(batch, channels, *block, *counts)
    result = Tensor.zeros(batch, channels, *padded, dtype=x.dtype, device=ctx.device)
    for offset in itertools.product(*[range(k) for k in block]):
        piece = blocks[(slice(None), slice(None)) + offset]
        spread = []
        for i, (o, count, s, d, size) in enumerate(zip(offset, counts, strides, dilations, padded)):
            start = o * d
            spread.append((start, size - start - ((count - 1) * s + 1)))
        piece = strided_embed(piece, strides, counts)
        result = result + piece.pad(((0, 0), (0, 0)) + tuple(spread))
    return result.shrink((None, None) + tuple((pads[i], pads[i] + image[i]) for i in range(dims)))


def strided_embed(x: Tensor, strides, counts) -> Tensor:
    """Insert stride - 1 zeros between the elements of each spatial dim (count -> (count - 1) * stride + 1)."""
    for axis, (stride, count) in enumerate(zip(strides, counts)):
        if stride == 1:
            continue
        dim = 2 + axis
        shape = list(x.shape)
        x = x.unsqueeze(dim + 1).pad(tuple((0, stride - 1) if d == dim + 1 else (0, 0) for d in range(x.ndim + 1)))
        x = x.reshape(shape[:dim] + [count * stride] + shape[dim + 1:])
        x = x.shrink(tuple((0, (count - 1) * stride + 1) if d == dim else None for d in range(x.ndim)))
    return x


def grouped_inputs(inputs: tuple, per_tensor: int) -> list[tuple]:
    """Split optimizer inputs after R and T (X1..Xn, G1..Gn, V1..Vn, ...) into per-tensor tuples."""
    count = len(inputs) // per_tensor
    return [tuple(inputs[k * count + i] for k in range(per_tensor)) for i in range(count)]


@onnx_op("Adagrad", domain=TRAINING)
def adagrad(ctx, rate, step, *inputs, decay_factor=0.0, epsilon=0.0, norm_coefficient=0.0):
    adjusted = rate / (1 + step.cast(rate.dtype) * decay_factor)
    xs, hs = [], []
    for x, g, h in grouped_inputs(inputs, 3):
        regularized = x * norm_coefficient + g
        h_new = h + regularized * regularized
        xs.append((x - adjusted * regularized / (h_new.sqrt() + epsilon)).cast(x.dtype))
        hs.append(h_new.cast(h.dtype))
    return tuple(xs + hs)


@onnx_op("Momentum", domain=TRAINING)
def momentum(ctx, rate, step, *inputs, alpha, beta, mode, norm_coefficient):
    beta = beta if ctx.scalar(step) > 0 else 1.0
    xs, vs = [], []
    for x, g, v in grouped_inputs(inputs, 3):
        regularized = x * norm_coefficient + g
        v_new = v * alpha + regularized * beta
        update = regularized + v_new * alpha if mode == "nesterov" else v_new
        xs.append((x - rate * update).cast(x.dtype))
        vs.append(v_new.cast(v.dtype))
    return tuple(xs + vs)


@onnx_op("Adam", domain=TRAINING)
def adam(ctx, rate, step, *inputs, alpha=0.9, beta=0.999, epsilon=0.0, norm_coefficient=0.0,
         norm_coefficient_post=0.0):
    t = ctx.scalar(step)
    adjusted = rate * math.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else rate
    xs, vs, hs = [], [], []
    for x, g, v, h in grouped_inputs(inputs, 4):
        regularized = x * norm_coefficient + g
        v_new = v * alpha + regularized * (1 - alpha)
        h_new = h * beta + regularized * regularized * (1 - beta)
        x_new = x - adjusted * (v_new / (h_new.sqrt() + epsilon))
        xs.append((x_new * (1 - norm_coefficient_post)).cast(x.dtype))
        vs.append(v_new.cast(v.dtype))
        hs.append(h_new.cast(h.dtype))
    return tuple(xs + vs + hs)


@onnx_op("TensorScatter")
def tensor_scatter(ctx, cache, update, write_indices=None, axis=-2, mode="linear"):
    """cache with update written along axis from each batch element's write index (wrapping if circular)."""
    axis = axis % cache.ndim
    steps, capacity = update.shape[axis], cache.shape[axis]
    batch = cache.shape[0]
    starts = Tensor.zeros(batch, dtype=dtypes.int64, device=ctx.device) if write_indices is None else \
        write_indices.cast(dtypes.int64)
    position = starts.reshape([batch] + [1] * (cache.ndim - 1)) + \
        Tensor.arange(steps, device=ctx.device).reshape([steps if d == axis else 1 for d in range(cache.ndim)])
    if mode == "circular":
        position = position.remainder(capacity)
    return cache.scatter(axis, position.expand(*update.shape), update)


@onnx_op("Binarizer", domain="ai.onnx.ml")
def binarizer(ctx, x, threshold=0.0):
    return (x > threshold).cast(x.dtype)


@onnx_op("ArrayFeatureExtractor", domain="ai.onnx.ml")
def array_feature_extractor(ctx, x, indices):
    picked = x[..., indices.reshape(-1).cast(dtypes.int64)]
    return picked.reshape(1, -1) if x.ndim == 1 else picked


def pool_ngrams(pool: list[int], ngram_counts: list[int], ngram_indexes: list[int]) -> list[tuple[tuple, int]]:
    """The vocabulary of TfIdfVectorizer as (n-gram tokens, output column) pairs."""
    grams, starts = [], list(ngram_counts) + [len(pool)]
    for length, (start, end) in enumerate(zip(starts, starts[1:]), start=1):
        for offset in range(start, end, length):
            grams.append(tuple(pool[offset:offset + length]))
    return list(zip(grams, ngram_indexes))


def count_ngram(rows: Tensor, gram: tuple, max_skip_count: int) -> Tensor:
    """Occurrences of gram in each row, with every gap between its tokens from 0 to max_skip_count."""
    width = rows.shape[1]
    total = None
    for skip in range(1, (max_skip_count + 1 if len(gram) > 1 else 1) + 1):
        starts = width - (len(gram) - 1) * skip
        if starts <= 0:
            break
        matched = None
        for position, token in enumerate(gram):
            window = rows[:, position * skip:position * skip + starts] == token
            matched = window if matched is None else matched.logical_and(window)
        count = matched.cast(dtypes.int64).sum(1)
        total = count if total is None else total + count
    return total if total is not None else Tensor.zeros(rows.shape[0], dtype=dtypes.int64, device=rows.device)


@onnx_op("TfIdfVectorizer")
def tfidf_vectorizer(ctx, x, max_gram_length, max_skip_count, min_gram_length, mode, ngram_counts, ngram_indexes,
                     pool_int64s=None, pool_strings=None, weights=None):
    if pool_int64s is None:
        raise NotImplementedError("TfIdfVectorizer with a pool of strings")
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    vocabulary = [(gram, column) for gram, column in pool_ngrams(pool_int64s, ngram_counts, ngram_indexes)
                  if min_gram_length <= len(gram) <= max_gram_length]
    columns = max(ngram_indexes) + 1
    counts = [Tensor.zeros(rows.shape[0], dtype=dtypes.int64, device=ctx.device) for _ in range(columns)]
    for gram, column in vocabulary:
        counts[column] = counts[column] + count_ngram(rows, gram, max_skip_count)
    frequencies = Tensor.stack(*counts, dim=1).cast(dtypes.float32)
    scale = Tensor(np.array(weights, np.float32), device=ctx.device) if weights else None
    if mode == "IDF":
        frequencies = (frequencies > 0).cast(dtypes.float32) * (1.0 if scale is None else scale)
    elif mode == "TFIDF" and scale is not None:
        frequencies = frequencies * scale
    return frequencies.reshape(-1) if x.ndim == 1 else frequencies
