"""Discrete Fourier transforms of Tensors: the array API standard's `fft` extension (`xp.fft`), also
`lazygrad.fft`.

Front-end layer, beside array_api.py. A transform of up to 64 points along an axis is a matmul
with the matrix of its twiddle factors, exp(-+2 pi i jk / n), computed once per size on the host in
float64 (the angle reduced exactly, as the integer jk mod n) and rounded to the data's dtype. A
longer one is split as n = n1 n2 (n1 the largest factor up to sqrt(n)): n2 transforms of n1 points,
a product with twiddle factors, n1 transforms of n2 points (Cooley and Tukey's step, each part split
again), so its work is n (n1 + n2 + ...) rather than n^2, and no matrix has more than 64 rows. So a
transform is as lazy and device-aware as any matmul, fuses with what surrounds it and runs under the
jit. A prime length longer than 64 stays one n x n matmul. The normalizations are the standard's:
"backward" (none forward, 1/n inverse), "ortho" (1/sqrt(n) both ways) and "forward" (1/n forward,
none inverse).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from lazygrad.dtype import COMPLEX_OF, COMPLEX_PARTS, DType, dtypes
from lazygrad.tensor import Tensor

_NORMS = ("backward", "ortho", "forward")


def _complex(x: Tensor, name: str) -> Tensor:
    """x as a complex Tensor: floats become the complex dtype of their precision."""
    if x.dtype.is_complex:
        return x
    if not x.dtype.is_float:
        raise TypeError(f"{name}: expects a floating point or complex array, got {x.dtype.name}")
    return x.cast(COMPLEX_OF[x.dtype if x.dtype in COMPLEX_OF else dtypes.float32])


def _real(x: Tensor, name: str) -> Tensor:
    if not x.dtype.is_float:
        raise TypeError(f"{name}: expects a real floating point array, got {x.dtype.name}")
    return x if x.dtype in COMPLEX_OF else x.cast(dtypes.float32)


def _scale(norm: str, n: int, inverse: bool, name: str) -> float:
    if norm not in _NORMS:
        raise ValueError(f"{name}: norm must be one of {', '.join(_NORMS)}, got {norm!r}")
    if norm == "ortho":
        return 1 / math.sqrt(n)
    return 1 / n if (norm == "forward") != inverse else 1.0


def _check_length(n: int, name: str) -> int:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"{name}: n must be a positive int, got {n!r}")
    return n


def _resized(x: Tensor, n: int, axis: int) -> Tensor:
    """x cut or zero-padded along axis to n entries."""
    size = x.shape[axis]
    if n < size:
        return x.narrow(axis, 0, n)
    if n > size:
        return x.pad(tuple((0, n - size) if a == axis else (0, 0) for a in range(x.ndim)))
    return x


@functools.lru_cache(maxsize=64)
def _twiddles(n: int, rows: int, columns: int, sign: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of sign * 2 pi jk / n for j < rows, k < columns, in float64."""
    angle = (np.arange(rows)[:, None] * np.arange(columns)[None, :]) % n * (sign * 2 * math.pi / n)
    return np.cos(angle), np.sin(angle)


def _matrix(values: np.ndarray, dtype: DType, device) -> Tensor:
    return Tensor(values, dtype=dtype, device=device)


def _along(x: Tensor, axis: int, transform) -> Tensor:
    """transform(x with axis moved last) with its last axis moved back to axis."""
    return transform(x.moveaxis(axis, -1)).moveaxis(-1, axis)


def _axis(x: Tensor, axis: int, name: str) -> int:
    if x.ndim == 0:
        raise ValueError(f"{name}: expects an array of at least one dimension, got a 0-d array")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{name}: axis {axis} is out of range for an array of {x.ndim} dimensions")
    return axis % x.ndim


_ONE_MATMUL = 64  # transforms up to this length are one matmul


def _split_factor(n: int) -> int:
    """The largest factor of n up to sqrt(n), or 1 where n is short or prime."""
    if n <= _ONE_MATMUL:
        return 1
    return next(factor for factor in range(math.isqrt(n), 0, -1) if n % factor == 0)


def _twiddle_matrix(n: int, rows: int, columns: int, sign: int, like: Tensor) -> Tensor:
    cos, sin = _twiddles(n, rows, columns, sign)
    part = COMPLEX_PARTS[like.dtype]
    return _matrix(cos, part, like.device) + _matrix(sin, part, like.device) * 1j


def _transform_last(x: Tensor, sign: int) -> Tensor:
    """The unnormalized transform of a complex x along its last axis: X[k] = sum_j x[j] w^(jk), w =
    exp(sign 2 pi i / n). Split as n = n1 n2, j = n2 j1 + j2 and k = k1 + n1 k2:
    X[k1 + n1 k2] = sum_j2 w_n^(j2 k1) (sum_j1 x[n2 j1 + j2] w_n1^(j1 k1)) w_n2^(j2 k2)."""
    n = x.shape[-1]
    n1 = _split_factor(n)
    if n1 == 1:
        return x.matmul(_twiddle_matrix(n, n, n, sign, x))
    n2 = n // n1
    batch = x.shape[:-1]
    inner = _transform_last(x.reshape(*batch, n1, n2).transpose(-1, -2), sign)  # [j2, k1]
    turned = inner * _twiddle_matrix(n, n2, n1, sign, x)  # w_n^(j2 k1)
    outer = _transform_last(turned.transpose(-1, -2), sign)  # [k1, k2]
    return outer.transpose(-1, -2).reshape(*batch, n)  # k = k1 + n1 k2 is the flat index of [k2, k1]


def _dft(x: Tensor, n: int | None, axis: int, norm: str, inverse: bool, name: str) -> Tensor:
    x = _complex(x, name)
    axis = _axis(x, axis, name)
    n = _check_length(x.shape[axis] if n is None else n, name)
    x = _resized(x, n, axis)
    return _along(x, axis, lambda last: _transform_last(last, 1 if inverse else -1)) * _scale(norm, n, inverse, name)


def fft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    return _dft(x, n, axis, norm, False, "fft")


def ifft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    return _dft(x, n, axis, norm, True, "ifft")


def rfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The n // 2 + 1 non-negative frequencies of a real signal's transform: two real matmuls."""
    x = _real(x, "rfft")
    axis = _axis(x, axis, "rfft")
    n = _check_length(x.shape[axis] if n is None else n, "rfft")
    x = _resized(x, n, axis)
    scale = _scale(norm, n, False, "rfft")
    if _split_factor(n) > 1:  # a long one: the complex transform, split, and its first half
        return fft(x, axis=axis, norm=norm).narrow(axis, 0, n // 2 + 1)
    cos, sin = _twiddles(n, n, n // 2 + 1, -1)
    re = _along(x, axis, lambda last: last.matmul(_matrix(cos, x.dtype, x.device))) * scale
    im = _along(x, axis, lambda last: last.matmul(_matrix(sin, x.dtype, x.device))) * scale
    return re + im * 1j


def irfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The real signal of n samples (2 (m - 1) by default) whose transform's non-negative
    frequencies are x's m entries (the rest their conjugates): two real matmuls. The imaginary parts
    of the zero and the Nyquist frequency's entries are ignored, as numpy ignores them."""
    x = _complex(x, "irfft")
    axis = _axis(x, axis, "irfft")
    n = _check_length(2 * (x.shape[axis] - 1) if n is None else n, "irfft")
    half = n // 2 + 1
    x = _resized(x, half, axis)
    if _split_factor(n) > 1:  # a long one: the whole spectrum (the rest the conjugates), split, its real part
        rest = x.narrow(axis, 1, n - half).flip(axis).conj()
        return ifft(x.cat(rest, dim=axis), axis=axis, norm=norm).real
    cos, sin = _twiddles(n, half, n, 1)
    weight = np.full((half, 1), 2.0)
    weight[0] = 1.0
    if n % 2 == 0:
        weight[-1] = 1.0  # the Nyquist frequency appears once
    part = COMPLEX_PARTS[x.dtype]
    scale = _scale(norm, n, True, "irfft")
    re = _along(x.real, axis, lambda last: last.matmul(_matrix(cos * weight, part, x.device)))
    im = _along(x.imag, axis, lambda last: last.matmul(_matrix(-sin * weight, part, x.device)))
    return (re + im) * scale


_SWAPPED = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def hfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The real transform of a signal with Hermitian symmetry, given its first half: irfft of its
    conjugate, scaled as a forward transform."""
    if norm not in _NORMS:
        raise ValueError(f"hfft: norm must be one of {', '.join(_NORMS)}, got {norm!r}")
    return irfft(_complex(x, "hfft").conj(), n=n, axis=axis, norm=_SWAPPED[norm])


def ihfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    if norm not in _NORMS:
        raise ValueError(f"ihfft: norm must be one of {', '.join(_NORMS)}, got {norm!r}")
    return rfft(x, n=n, axis=axis, norm=_SWAPPED[norm]).conj()


def _sizes_and_axes(x: Tensor, s, axes, name: str) -> tuple[list[int], list[int]]:
    """The standard's defaults: every axis, or the last len(s); each axis's own size."""
    if axes is None:
        axes = list(range(x.ndim)) if s is None else list(range(x.ndim - len(s), x.ndim))
    axes = [_axis(x, a, name) for a in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"{name}: axes {axes} repeat an axis")
    if s is None:
        s = [x.shape[a] for a in axes]
    if len(s) != len(axes):
        raise ValueError(f"{name}: s and axes must have the same length, got {len(s)} and {len(axes)}")
    return [x.shape[a] if size == -1 else size for size, a in zip(s, axes)], axes


def fftn(x: Tensor, /, *, s=None, axes=None, norm: str = "backward") -> Tensor:
    sizes, axes = _sizes_and_axes(x, s, axes, "fftn")
    for size, axis in zip(sizes, axes):
        x = fft(x, n=size, axis=axis, norm=norm)
    return _complex(x, "fftn")


def ifftn(x: Tensor, /, *, s=None, axes=None, norm: str = "backward") -> Tensor:
    sizes, axes = _sizes_and_axes(x, s, axes, "ifftn")
    for size, axis in zip(sizes, axes):
        x = ifft(x, n=size, axis=axis, norm=norm)
    return _complex(x, "ifftn")


def rfftn(x: Tensor, /, *, s=None, axes=None, norm: str = "backward") -> Tensor:
    """rfft along the last of axes, then fft along the others."""
    sizes, axes = _sizes_and_axes(x, s, axes, "rfftn")
    if not axes:
        return _complex(_real(x, "rfftn"), "rfftn")
    x = rfft(x, n=sizes[-1], axis=axes[-1], norm=norm)
    for size, axis in zip(sizes[:-1], axes[:-1]):
        x = fft(x, n=size, axis=axis, norm=norm)
    return x


def irfftn(x: Tensor, /, *, s=None, axes=None, norm: str = "backward") -> Tensor:
    """ifft along all but the last of axes, then irfft along the last (its size 2 (m - 1) by default)."""
    if axes is None and s is None:
        axes = list(range(x.ndim))
    if s is None:
        axes = [_axis(x, a, "irfftn") for a in axes]
        s = [x.shape[a] for a in axes[:-1]] + [2 * (x.shape[axes[-1]] - 1)] if axes else []
    sizes, axes = _sizes_and_axes(x, s, axes, "irfftn")
    if not axes:
        return _complex(x, "irfftn").real
    for size, axis in zip(sizes[:-1], axes[:-1]):
        x = ifft(x, n=size, axis=axis, norm=norm)
    return irfft(x, n=sizes[-1], axis=axes[-1], norm=norm)


def fftfreq(n: int, /, *, d: float = 1.0, dtype: DType | None = None, device: str | None = None) -> Tensor:
    """The sample frequencies of an n-point transform: 0, 1, ..., then the negative ones, over d n."""
    n = _check_length(n, "fftfreq")
    indices = np.concatenate([np.arange((n - 1) // 2 + 1), np.arange(-(n // 2), 0)])
    return Tensor(indices / (d * n), dtype=dtype or dtypes.default_float, device=device)


def rfftfreq(n: int, /, *, d: float = 1.0, dtype: DType | None = None, device: str | None = None) -> Tensor:
    n = _check_length(n, "rfftfreq")
    return Tensor(np.arange(n // 2 + 1) / (d * n), dtype=dtype or dtypes.default_float, device=device)


def _shifted(x: Tensor, axes, sign: int) -> Tensor:
    axes = list(range(x.ndim)) if axes is None else [axes] if isinstance(axes, int) else list(axes)
    if not axes:
        return x
    return x.roll(tuple(sign * (x.shape[a] // 2) for a in axes), tuple(axes))


def fftshift(x: Tensor, /, *, axes=None) -> Tensor:
    """The zero frequency moved to the middle of each axis."""
    return _shifted(x, axes, 1)


def ifftshift(x: Tensor, /, *, axes=None) -> Tensor:
    return _shifted(x, axes, -1)


__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft", "fftfreq",
           "rfftfreq", "fftshift", "ifftshift"]
