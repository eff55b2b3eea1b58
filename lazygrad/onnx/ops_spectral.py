"""Spectral ONNX operators: DFT and STFT as matrix products with cosine and sine tables, and MelWeightMatrix.

Registered in registry.OPERATORS; model.py calls them. Complex values are a trailing dim of 2
(real, imaginary), as in ONNX. The tables depend only on the sizes and are built on the host; the
signal stays on the device, so a DFT is two matrix products per part.
"""
from __future__ import annotations

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.onnx.proto import dtype_of
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor


def fourier_tables(length: int, bins: int, inverse: bool, dtype, device) -> tuple[Tensor, Tensor]:
    """(length, bins) cosine and sine tables of the angles 2 pi n k / length."""
    angles = 2 * np.pi * np.outer(np.arange(length), np.arange(bins)) / length
    cosine, sine = np.cos(angles), np.sin(angles)
    if inverse:
        cosine, sine = cosine / length, sine / length
    return Tensor(cosine.astype(dtype.np), device=device), Tensor(sine.astype(dtype.np), device=device)


def fourier_last_axis(real: Tensor, imaginary: Tensor | None, bins: int, inverse: bool) -> Tensor:
    """The DFT along the last axis of a (real, imaginary) pair; returns (..., bins, 2)."""
    compute = real.dtype if real.dtype == dtypes.float64 else dtypes.float32
    real = real.cast(compute)
    cosine, sine = fourier_tables(real.shape[-1], bins, inverse, compute, real.device)
    sign = 1 if inverse else -1
    out_real = real @ cosine
    out_imaginary = (real @ sine) * sign
    if imaginary is not None:
        imaginary = imaginary.cast(compute)
        out_real = out_real - (imaginary @ sine) * sign
        out_imaginary = out_imaginary + imaginary @ cosine
    return Tensor.stack(out_real, out_imaginary, dim=-1)


def fit_length(x: Tensor, axis: int, length: int) -> Tensor:
    """x zero-padded or truncated to `length` along axis."""
    size = x.shape[axis]
    if length > size:
        return x.pad(tuple((0, length - size) if d == axis else (0, 0) for d in range(x.ndim)))
    return x.shrink(tuple((0, length) if d == axis else None for d in range(x.ndim)))


@onnx_op("DFT")
def dft(ctx, x, dft_length=None, axis_input=None, axis=None, inverse=0, onesided=0):
    if axis_input is not None:
        axis = int(ctx.scalar(axis_input))
    elif axis is None:
        axis = 1 if ctx.opset < 20 else -2
    axis = axis + x.ndim if axis < 0 else axis
    if dft_length is not None:
        x = fit_length(x, axis, int(ctx.scalar(dft_length)))
    moved = x.transpose(axis, -2)
    real = moved[..., 0]
    imaginary = moved[..., 1] if x.shape[-1] == 2 else None
    if inverse and onesided:
        return inverse_onesided(real, imaginary).transpose(axis, -2).cast(x.dtype)
    length = x.shape[axis]
    bins = length // 2 + 1 if onesided else length
    result = fourier_last_axis(real, imaginary, bins, bool(inverse))
    return result.transpose(axis, -2).cast(x.dtype)


def inverse_onesided(real: Tensor, imaginary: Tensor | None) -> Tensor:
    """The real signal (..., n, 1) of a one-sided spectrum of n // 2 + 1 bins (Hermitian symmetry)."""
    bins = real.shape[-1]
    length = 2 * (bins - 1)
    mirrored = real[..., 1:length - bins + 1].flip(-1)
    real = real.cat(mirrored, dim=-1)
    if imaginary is not None:
        imaginary = imaginary.cat(-imaginary[..., 1:length - bins + 1].flip(-1), dim=-1)
    return fourier_last_axis(real, imaginary, length, True)[..., 0:1]


@onnx_op("STFT")
def stft(ctx, signal, frame_step, window=None, frame_length=None, onesided=1):
    step = int(ctx.scalar(frame_step))
    length = int(ctx.scalar(frame_length)) if frame_length is not None else window.shape[0]
    frames = (signal.shape[1] - length) // step + 1
    pieces = [signal[:, f * step:f * step + length] for f in range(frames)]
    framed = Tensor.stack(*pieces, dim=1)                   # (batch, frames, length, 1 or 2)
    if window is not None:
        framed = framed * window.cast(framed.dtype).reshape(1, 1, length, 1)
    bins = length // 2 + 1 if onesided else length
    imaginary = framed[..., 1] if signal.shape[-1] == 2 else None
    return fourier_last_axis(framed[..., 0], imaginary, bins, False).cast(signal.dtype)


def mel_bin_edges(mel_bins: int, dft_length: int, sample_rate: float, low_hertz: float, high_hertz: float):
    """The spectrogram bins where each triangular mel filter starts, peaks and ends (ONNX's formula)."""
    low_mel = 2595 * np.log1p(low_hertz / 700) / np.log(10)
    high_mel = 2595 * np.log1p(high_hertz / 700) / np.log(10)
    points = np.arange(mel_bins + 2) * ((high_mel - low_mel) / (mel_bins + 2)) + low_mel
    hertz = 700 * np.expm1(points / 2595 * np.log(10))
    return (((dft_length + 1) * hertz) // sample_rate).astype(np.int64)


@onnx_op("MelWeightMatrix")
def mel_weight_matrix(ctx, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz,
                      output_datatype=1):
    mel_bins, length = int(ctx.scalar(num_mel_bins)), int(ctx.scalar(dft_length))
    edges = mel_bin_edges(mel_bins, length, ctx.scalar(sample_rate), ctx.scalar(lower_edge_hertz),
                          ctx.scalar(upper_edge_hertz))
    left, center, right = (Tensor(edges[i:i + mel_bins].astype(np.float64).reshape(1, -1), device=ctx.device)
                           for i in range(3))
    bins = Tensor.arange(length // 2 + 1, device=ctx.device).reshape(-1, 1).cast(dtypes.float64)
    rising = (bins >= left).logical_and(bins <= center)
    falling = (bins >= center).logical_and(bins < right)
    rise = (bins - left) / (center - left).maximum(1)
    fall = (right - bins) / (right - center).maximum(1)
    weights = falling.where(fall, rising.where((center == left).where(1.0, rise), 0.0))
    return weights.cast(dtype_of(output_datatype))
