"""Complex Tensors (lazygrad/complex_tensor.py) against numpy on every device: making them, moving
data in and out, arithmetic and promotion, the elementwise functions on a grid of ordinary and
special values (signed zeros, infinities, NaN, tiny and huge parts), C99 Annex G's special values
where numpy departs from them, reductions, matmul, movement and indexing, and the clear errors of
what complex Tensors do not have."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from lazygrad import Tensor, dtypes, no_grad
COMPLEX = (np.complex64, np.complex128)
RTOL = {np.complex64: 2e-5, np.complex128: 1e-12}

_VALUES = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, np.inf, -np.inf, np.nan, 1e-8, 3.0, 30.0, -30.0, 1e14, 1e-30, -1e30]
_REAL, _IMAG = np.meshgrid(_VALUES, _VALUES)
GRID = np.array([complex(a, b) for a, b in zip(_REAL.ravel(), _IMAG.ravel())])  # complex(): 1j * inf would make NaNs


def _close(got: np.ndarray, want: np.ndarray, rtol: float) -> np.ndarray:
    """Where got matches want: NaN parts where want has NaN, equal infinities, and elsewhere an error
    within rtol of |want| (normwise, the accuracy complex functions give)."""
    ok = np.ones(got.shape, bool)
    scale = np.abs(want)
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
    for g, w in ((got.real, want.real), (got.imag, want.imag)):
        nan = np.isnan(w)
        inf = np.isinf(w)
        ok &= np.where(nan, np.isnan(g), np.where(inf, g == w, np.abs(g - w) <= rtol * scale))
    return ok


def _signs_agree(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where both parts that are zero in want have want's sign in got."""
    ok = np.ones(got.shape, bool)
    for g, w in ((got.real, want.real), (got.imag, want.imag)):
        ok &= (w != 0) | (np.signbit(g) == np.signbit(w))
    return ok


# numpy's own results differ from Annex G (the array API standard's special cases) at these inputs,
# or a real function has its own documented limit there; each function's entry lists them.
def _huge(z):  # sin, cos, tan of float64 arguments beyond about 1e14 lose accuracy (docs/tensor.md)
    return (np.abs(z.real) > 1e13) | (np.abs(z.imag) > 1e13)


_SKIP = {
    # numpy: expm1(inf + 0j) is inf + NaN j, expm1(-inf + inf j) NaN + NaN j (Annex G: inf + 0j, -1 + 0j)
    # and expm1(-0 + 0j) is -0 + 0j in numpy, the standard's 0 + 0j here
    "expm1": lambda z: ~(np.abs(z.real) < 700) | _huge(z) | (z == 0),
    "log1p": lambda z: np.abs(z) < 1e-6,  # numpy loses the real part of log1p(1e-8 j), 5e-17
    # a sign the standard leaves unspecified
    "asinh": lambda z: np.isnan(z.real) & np.isinf(z.imag),
    "asin": lambda z: np.isnan(z.imag) & np.isinf(z.real),
    "acos": lambda z: np.isinf(z.real) & np.isnan(z.imag),
    "atan": lambda z: np.isinf(z.real) & np.isnan(z.imag),
    "reciprocal": lambda z: z == 0,  # 1 / (0 + 0j): numpy NaN + NaN j, the standard's 1/0 + (0/0)j inf + NaN j
    "sin": _huge, "cos": _huge, "tan": _huge, "sinh": _huge, "cosh": _huge, "tanh": _huge, "exp": _huge,
}
_NUMPY = {"sign": lambda z: np.where(z == 0, 0, z / np.abs(z))}

FUNCTIONS = ["exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh",
             "asin", "acos", "atan", "asinh", "acosh", "atanh", "sign", "square", "reciprocal"]


@pytest.mark.parametrize("dtype", COMPLEX, ids=["complex64", "complex128"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions_match_numpy(name, dtype, device):
    z = GRID.astype(dtype)
    if dtype is np.complex64:  # float32 overflows at 3e38: keep the huge parts in range of the function
        z = z[np.abs(z) < 1e10] if name in ("square", "reciprocal") else z
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = _NUMPY.get(name, getattr(np, name))(z)
    got = getattr(Tensor(z, device=device), name)().numpy()
    assert got.dtype == want.dtype
    keep = ~_SKIP.get(name, lambda z: np.zeros(z.shape, bool))(z)
    if dtype is np.complex64:  # numpy computes some complex64 functions in float32 with less care
        keep &= np.abs(z) < 1e6
    ok = _close(got, want, RTOL[dtype] * (1e3 if dtype is np.complex128 and name in ("tan", "tanh") else 1))
    if name not in ("sign", "square", "reciprocal"):
        ok &= _signs_agree(got, want)
    bad = keep & ~ok
    assert not bad.any(), f"{name}: " + ", ".join(f"{z[i]} -> {got[i]}, numpy {want[i]}" for i in np.flatnonzero(bad)[:5])


# Annex G's values where numpy's differ (see _SKIP), written out from the standard's text
ANNEX_G = [
    ("expm1", complex(np.inf, 0.0), complex(np.inf, 0.0)),
    ("expm1", complex(np.nan, 0.0), complex(np.nan, 0.0)),
    ("expm1", complex(-np.inf, 1.0), complex(-1.0, 0.0)),
    ("expm1", complex(np.inf, np.inf), complex(np.inf, np.nan)),
    ("expm1", complex(-0.0, 0.0), complex(0.0, 0.0)),
    ("tanh", complex(np.inf, 2.0), complex(1.0, 0.0)),  # Annex G would give sin(4)'s sign, the standard +0
    ("exp", complex(np.inf, 0.0), complex(np.inf, 0.0)),
    ("exp", complex(-np.inf, np.inf), complex(0.0, 0.0)),
    ("log1p", complex(-1.0, 0.0), complex(-np.inf, 0.0)),
    ("log", complex(-0.0, 0.0), complex(-np.inf, np.pi)),
    ("sqrt", complex(-np.inf, 1.0), complex(0.0, np.inf)),
    ("sqrt", complex(1.0, np.inf), complex(np.inf, np.inf)),
    ("cosh", complex(0.0, np.inf), complex(np.nan, 0.0)),
    ("sinh", complex(0.0, np.inf), complex(0.0, np.nan)),
    ("tanh", complex(np.inf, 1.0), complex(1.0, 0.0)),
    ("tanh", complex(0.0, np.nan), complex(0.0, np.nan)),
    ("atanh", complex(1.0, 0.0), complex(np.inf, 0.0)),
    ("atanh", complex(np.inf, 1.0), complex(0.0, np.pi / 2)),
    ("acosh", complex(0.0, np.nan), complex(np.nan, np.pi / 2)),
    ("acosh", complex(-np.inf, 1.0), complex(np.inf, np.pi)),
    ("asinh", complex(np.inf, np.inf), complex(np.inf, np.pi / 4)),
    ("acos", complex(-np.inf, np.inf), complex(3 * np.pi / 4, -np.inf)),
    ("abs", complex(np.nan, np.inf), np.inf),
    ("sign", complex(0.0, -0.0), complex(0.0, 0.0)),
]


@pytest.mark.parametrize("name,value,expected", ANNEX_G, ids=[f"{n}({v})" for n, v, _ in ANNEX_G])
def test_annex_g_special_values(name, value, expected):
    for dtype in COMPLEX:
        got = complex(getattr(Tensor(np.array([value], dtype)), name)().numpy()[0])
        want = complex(np.array([expected], dtype)[0])  # rounded as the dtype holds it
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            assert (np.isnan(g) and np.isnan(w)) or (g == w and (w != 0 or np.signbit(g) == np.signbit(w))), \
                f"{name}({value}) = {got}, Annex G: {expected}"


def _pair(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("dtype", COMPLEX, ids=["complex64", "complex128"])
def test_arithmetic_broadcasting_and_scalars(dtype, device):
    x, y = _pair((3, 4), dtype, 1), _pair((4,), dtype, 2)
    a, b = Tensor(x, device=device), Tensor(y, device=device)
    rtol = 1e-5 if dtype is np.complex64 else 1e-12
    for got, want in [(a + b, x + y), (a - b, x - y), (a * b, x * y), (a / b, x / y), (-a, -x),
                      (a * 2.5, x * dtype(2.5)), (1j - a, dtype(1j) - x), (a / (1 + 2j), x / dtype(1 + 2j)),
                      (a ** 2, x ** 2), (a ** b, x ** y), (2 ** a, dtype(2) ** x), (a.conj(), np.conj(x)),
                      (a @ b, x @ y), (a.T @ a, x.T @ x), (a.abs(), np.abs(x)), (a.angle(), np.angle(x)),
                      (a.real, x.real), (a.imag, x.imag)]:
        assert got.dtype.name == want.dtype.name
        np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=rtol)
    assert ((a == a).numpy().all(), (a != a).numpy().any()) == (True, False)
    np.testing.assert_array_equal((a == b).numpy(), x == y)


def test_division_by_zero_and_huge_parts():
    x = np.array([1 + 1j, 0j, 1e300 + 1e300j, 1e-300 + 1e300j], np.complex128)
    y = np.array([0j, 0j, 1e300 + 1e300j, 1e300 - 1e-300j], np.complex128)
    got = (Tensor(x) / Tensor(y)).numpy()
    np.testing.assert_allclose(got[2:], x[2:] / y[2:], rtol=1e-15)  # no overflow in c^2 + d^2
    assert np.isinf(got[0].real) and np.isnan(got[1].real)


def test_promotion_follows_pytorch():
    f32, f64, c64, c128 = (Tensor(np.ones(2, d)) for d in (np.float32, np.float64, np.complex64, np.complex128))
    i32 = Tensor(np.ones(2, np.int32))
    assert (f32 + c64).dtype == dtypes.complex64 and (f64 + c64).dtype == dtypes.complex128
    assert (i32 * c64).dtype == dtypes.complex64 and (c64 + c128).dtype == dtypes.complex128
    assert (f32 + 1j).dtype == dtypes.complex64 and (f64 + 1j).dtype == dtypes.complex128
    assert (c64 + 2.5).dtype == dtypes.complex64 and (c64 * Tensor(2.0, dtype=dtypes.float64)).dtype == dtypes.complex64
    assert Tensor([1 + 2j]).dtype == dtypes.complex64 and Tensor(np.complex128(1j)).dtype == dtypes.complex128
    assert Tensor([1.0, 2.0], dtype=dtypes.complex128).numpy().tolist() == [1 + 0j, 2 + 0j]
    assert Tensor.full((2,), 1 - 1j).dtype == dtypes.complex64


def test_reductions(device):
    x = _pair((3, 4, 5), np.complex128, 3)
    a = Tensor(x, device=device)
    for axis in (None, 0, 2, (0, 2)):
        np.testing.assert_allclose(a.sum(axis).numpy(), x.sum(axis), rtol=1e-12)
        np.testing.assert_allclose(a.mean(axis).numpy(), x.mean(axis), rtol=1e-12)
        np.testing.assert_allclose(a.prod(axis).numpy(), x.prod(axis), rtol=1e-12)
    empty = Tensor(np.zeros((0, 3), np.complex64), device=device)
    assert empty.sum(0).numpy().tolist() == [0j] * 3 and empty.prod(0).numpy().tolist() == [1 + 0j] * 3
    assert Tensor(np.complex64(2 + 1j)).sum().item() == 2 + 1j  # 0-d


def test_movement_indexing_and_select(device):
    x = _pair((4, 6), np.complex64, 4)
    a = Tensor(x, device=device)
    cases = [(a.reshape(3, 8), x.reshape(3, 8)), (a.permute(1, 0), x.T), (a.flip(0), x[::-1]),
             (a[1:3, ::2], x[1:3, ::2]), (a[:, 2], x[:, 2]), (a[a.real > 0], x[x.real > 0]),
             (a.pad(((1, 0), (0, 2))), np.pad(x, ((1, 0), (0, 2)))), (a.cat(a, dim=1), np.concatenate([x, x], 1)),
             (Tensor.stack([a, a]), np.stack([x, x])), (a.expand(2, 4, 6), np.broadcast_to(x, (2, 4, 6))),
             (a.roll(1, 0), np.roll(x, 1, 0)), (a.tril(), np.tril(x)), (a.repeat(2, 1), np.tile(x, (2, 1))),
             (a.take(Tensor([0, 5, 7], device=device)), x.ravel()[[0, 5, 7]]),
             ((a.real > 0).where(a, 0), np.where(x.real > 0, x, 0)), ((a.real > 0).where(1j, a), np.where(x.real > 0, 1j, x)),
             (a.cumsum(1), np.cumsum(x, 1)), (a.round(), np.round(x)), (a.contiguous().to("NPY"), x)]
    for got, want in cases:
        np.testing.assert_allclose(got.numpy(), want.astype(np.complex64), rtol=1e-6)
    assert a.bool().numpy().all() and not Tensor(np.zeros(2, np.complex64)).bool().numpy().any()
    assert [list(t.shape) for t in a.split(2)] == [[2, 6], [2, 6]]


def test_casts():
    z = Tensor(np.array([1.5 - 2j, 0j], np.complex64))
    assert z.cast(dtypes.complex128).numpy().dtype == np.complex128
    assert z.cast(dtypes.float32).numpy().tolist() == [1.5, 0.0]  # the real part, as PyTorch and numpy
    assert z.cast(dtypes.bool).numpy().tolist() == [True, False]
    assert Tensor([1, 2]).cast(dtypes.complex64).numpy().tolist() == [1 + 0j, 2 + 0j]
    assert complex(Tensor(np.complex64(3 - 4j))) == 3 - 4j and Tensor(np.complex64(3 - 4j)).abs().item() == 5.0


def test_what_complex_tensors_do_not_have_raises_clearly():
    z = Tensor(np.array([1 + 1j, 2 - 1j], np.complex64))
    with pytest.raises(TypeError, match="clamp: not supported for complex64"):
        z.clamp(0, 1)
    with pytest.raises(TypeError, match="relu: not supported for complex64"):
        z.relu()
    with pytest.raises(TypeError, match="comparing by size.*complex64"):
        _ = z < z
    with pytest.raises(TypeError, match="carry no gradients"):
        z.requires_grad_()
    with pytest.raises(TypeError, match="carry no gradients"):
        Tensor([1.0, 2.0], requires_grad=True) * 1j
    with no_grad():  # without a gradient wanted, a real tensor that requires one may become complex
        assert (Tensor([1.0], requires_grad=True) * 1j).numpy().tolist() == [1j]
    with pytest.raises(TypeError, match="complex dtype"):
        Tensor([1 + 1j], dtype=dtypes.float32)
    with pytest.raises(TypeError, match="has no float value"):
        float(Tensor(np.complex64(1j)))
    with pytest.raises(TypeError, match="imaginary part"):
        _ = Tensor([1.0]).imag


def test_the_jit_takes_and_returns_complex_tensors(device):
    from lazygrad import fft
    from lazygrad.jit import jit
    step = jit(lambda z, x: ((z * z + 1j).conj(), fft.rfft(x)))
    for call in range(4):  # the first two calls capture, the others replay
        z = np.array([1 + 1j, 2 - 1j], np.complex64) * (call + 1)
        x = np.arange(8.0, dtype=np.float32) * call
        squared, spectrum = step(Tensor(z, device=device), Tensor(x, device=device))
        assert squared.dtype == dtypes.complex64 and squared.shape == (2,) and spectrum.shape == (5,)
        np.testing.assert_allclose(squared.numpy(), np.conj(z * z + 1j), rtol=1e-6)
        np.testing.assert_allclose((spectrum * 2).numpy(), np.fft.rfft(x) * 2, rtol=1e-5, atol=1e-4)
