"""The discrete Fourier transforms (lazygrad/fft.py, also the array API's xp.fft) against numpy's, on
every device: each transform, each normalization, lengths cut and padded, odd and even sizes, the
frequencies and shifts, and their argument errors."""
from __future__ import annotations

import numpy as np
import pytest

import lazygrad.array_api as xp
from lazygrad import Tensor, dtypes, fft

NORMS = ("backward", "ortho", "forward")
RNG = np.random.default_rng(7)
SIGNAL = RNG.standard_normal((3, 8)) + 1j * RNG.standard_normal((3, 8))
REAL = RNG.standard_normal((3, 8))


def _cases(norm):
    """(lazygrad transform, numpy transform, input): the input complex or real as each needs."""
    return [
        (lambda x: fft.fft(x, norm=norm), lambda x: np.fft.fft(x, norm=norm), SIGNAL),
        (lambda x: fft.ifft(x, n=5, axis=0, norm=norm), lambda x: np.fft.ifft(x, n=5, axis=0, norm=norm), SIGNAL),
        (lambda x: fft.fft(x, n=12, norm=norm), lambda x: np.fft.fft(x, n=12, norm=norm), SIGNAL),
        (lambda x: fft.rfft(x, n=11, norm=norm), lambda x: np.fft.rfft(x, n=11, norm=norm), REAL),
        (lambda x: fft.irfft(x, norm=norm), lambda x: np.fft.irfft(x, norm=norm), SIGNAL),
        (lambda x: fft.irfft(x, n=7, axis=0, norm=norm), lambda x: np.fft.irfft(x, n=7, axis=0, norm=norm), SIGNAL),
        (lambda x: fft.hfft(x, norm=norm), lambda x: np.fft.hfft(x, norm=norm), SIGNAL),
        (lambda x: fft.ihfft(x, norm=norm), lambda x: np.fft.ihfft(x, norm=norm), REAL),
        (lambda x: fft.fftn(x, s=(4, 6), axes=(0, 1), norm=norm),
         lambda x: np.fft.fftn(x, s=(4, 6), axes=(0, 1), norm=norm), SIGNAL),
        (lambda x: fft.ifftn(x, norm=norm), lambda x: np.fft.ifftn(x, norm=norm), SIGNAL),
        (lambda x: fft.rfftn(x, norm=norm), lambda x: np.fft.rfftn(x, norm=norm), REAL),
        (lambda x: fft.irfftn(x, norm=norm), lambda x: np.fft.irfftn(x, norm=norm), SIGNAL),
        (lambda x: fft.irfftn(x, s=(3, 9), axes=(0, 1), norm=norm),
         lambda x: np.fft.irfftn(x, s=(3, 9), axes=(0, 1), norm=norm), SIGNAL),
    ]


@pytest.mark.parametrize("norm", NORMS)
def test_transforms_match_numpy(norm, device):
    for ours, numpys, data in _cases(norm):
        want = numpys(data)  # numpy in double precision
        for single, rtol in ((False, 1e-12), (True, 2e-5)):
            x = data.astype({"c": np.complex64, "f": np.float32}[data.dtype.kind]) if single else data
            got = ours(Tensor(x, device=device)).numpy()
            assert got.dtype == ({"c": np.complex64, "f": np.float32}[want.dtype.kind] if single else want.dtype)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())


def test_frequencies_and_shifts(device):
    np.testing.assert_allclose(fft.fftfreq(7, d=0.5, device=device).numpy(), np.fft.fftfreq(7, d=0.5), rtol=1e-7)
    np.testing.assert_allclose(fft.rfftfreq(8, dtype=dtypes.float64, device=device).numpy(), np.fft.rfftfreq(8))
    x = Tensor(SIGNAL, device=device)
    np.testing.assert_array_equal(fft.fftshift(x).numpy(), np.fft.fftshift(SIGNAL))
    np.testing.assert_array_equal(fft.ifftshift(x, axes=1).numpy(), np.fft.ifftshift(SIGNAL, axes=1))
    assert xp.fft.fft is fft.fft  # the array API's extension is the same module


def test_argument_errors_name_the_fix():
    x = Tensor(SIGNAL)
    with pytest.raises(ValueError, match="norm must be one of backward, ortho, forward"):
        fft.fft(x, norm="both")
    with pytest.raises(ValueError, match="n must be a positive int"):
        fft.fft(x, n=0)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        fft.ifft(x, axis=2)
    with pytest.raises(TypeError, match="rfft: expects a real floating point array, got complex128"):
        fft.rfft(x)
    with pytest.raises(TypeError, match="fft: expects a floating point or complex array, got int64"):
        fft.fft(Tensor([1, 2]))
    with pytest.raises(ValueError, match="0-d"):
        fft.fft(Tensor(1.0))


@pytest.mark.parametrize("n", [96, 99, 130, 1000, 4096, 67])
def test_long_transforms_split_and_match_numpy(n, device):
    """Past 64 points a transform is split as n1 x n2 (recursively: 1000 is 25 x 40, 4096 64 x 64);
    a prime length (67) stays one matmul."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal((2, n)) + 1j * rng.standard_normal((2, n))
    r = rng.standard_normal((2, n))
    for ours, want, rtol in [(fft.fft(Tensor(x, device=device)), np.fft.fft(x), 1e-13),
                             (fft.ifft(Tensor(x.astype(np.complex64), device=device), norm="ortho"),
                              np.fft.ifft(x, norm="ortho"), 1e-5),
                             (fft.rfft(Tensor(r, device=device)), np.fft.rfft(r), 1e-13),
                             (fft.irfft(Tensor(x[:, : n // 2 + 1], device=device), n=n), np.fft.irfft(x[:, : n // 2 + 1], n=n),
                              1e-13)]:
        np.testing.assert_allclose(ours.numpy(), want, rtol=0, atol=rtol * np.abs(want).max())
