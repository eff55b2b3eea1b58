"""Activations and the other composed elementwise functions against float64 numpy formulations of
PyTorch's definitions, on every device; erf against math.erf.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from lazygrad import Tensor, dtypes
from ops_helpers import check, sample, small_sample, tensor

I32, F16, F32, F64, BOOL = dtypes.int32, dtypes.float16, dtypes.float32, dtypes.float64, dtypes.bool
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

erf = np.vectorize(math.erf, otypes=[np.float64])
erfc = np.vectorize(math.erfc, otypes=[np.float64])


def np_softplus(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta)


def np_elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(x))


def np_tanh_gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


# name: (lazygrad, float64 numpy reference of PyTorch's definition)
FUNCTIONS = {
    "expm1": (lambda t: t.expm1(), np.expm1),
    "log1p": (lambda t: t.log1p(), np.log1p),
    "erf": (lambda t: t.erf(), erf),
    "erfc": (lambda t: t.erfc(), erfc),
    "relu6": (lambda t: t.relu6(), lambda x: np.clip(x, 0, 6)),
    "leaky_relu": (lambda t: t.leaky_relu(), lambda x: np.where(x > 0, x, 0.01 * x)),
    "leaky_relu_0.2": (lambda t: t.leaky_relu(0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (lambda t: t.elu(), np_elu),
    "elu_0.5": (lambda t: t.elu(alpha=0.5), lambda x: np_elu(x, 0.5)),
    "selu": (lambda t: t.selu(), lambda x: SELU_SCALE * np_elu(x, SELU_ALPHA)),
    "gelu": (lambda t: t.gelu(), lambda x: 0.5 * x * erfc(-x / math.sqrt(2))),
    "gelu_tanh": (lambda t: t.gelu(approximate="tanh"), np_tanh_gelu),
    "silu": (lambda t: t.silu(), lambda x: x / (1 + np.exp(-x))),
    "mish": (lambda t: t.mish(), lambda x: x * np.tanh(np_softplus(x))),
    "softplus": (lambda t: t.softplus(), np_softplus),
    "softplus_beta": (lambda t: t.softplus(beta=2.0, threshold=5.0), lambda x: np_softplus(x, 2.0, 5.0)),
    "softsign": (lambda t: t.softsign(), lambda x: x / (1 + np.abs(x))),
    "hardswish": (lambda t: t.hardswish(), lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "hardsigmoid": (lambda t: t.hardsigmoid(), lambda x: np.clip(x + 3, 0, 6) / 6),
    "hardtanh": (lambda t: t.hardtanh(), lambda x: np.clip(x, -1, 1)),
    "hardtanh_range": (lambda t: t.hardtanh(-2.5, 0.5), lambda x: np.clip(x, -2.5, 0.5)),
    "sigmoid": (lambda t: t.sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (lambda t: t.tanh(), np.tanh),
    "round": (lambda t: t.round(), np.round),
    "round_decimals": (lambda t: t.round(decimals=1), lambda x: np.round(x, 1)),
    "floor": (lambda t: t.floor(), np.floor),
    "ceil": (lambda t: t.ceil(), np.ceil),
    "trunc": (lambda t: t.trunc(), np.trunc),
    "abs": (lambda t: abs(t), np.abs),
}


def reference(name, array):
    with np.errstate(all="ignore"):
        return FUNCTIONS[name][1](array.astype(np.float64)).astype(array.dtype)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_function_float32_with_specials(name, device):
    # sample() holds -100..100, +-0, NaN and +-inf
    a = sample(F32)
    check(FUNCTIONS[name][0](tensor(a, device)), reference(name, a), F32, transcendental=True, atol=1e-6)


SMALL_AND_WIDE = np.concatenate([np.geomspace(1e-12, 1e-2, 6), np.linspace(0.05, 3, 6)]).astype(np.float32)


@pytest.mark.parametrize("name", ["expm1", "log1p", "erf", "tanh", "sigmoid", "gelu", "mish", "softplus", "silu"])
def test_function_keeps_relative_precision_near_zero(name, device):
    # plain formulas (exp(x) - 1, 2 sigmoid(2x) - 1, ...) lose every digit here; atol=0 makes it count
    a = np.concatenate([SMALL_AND_WIDE, -SMALL_AND_WIDE]).reshape(4, 6)
    check(FUNCTIONS[name][0](tensor(a, device)), reference(name, a), F32, rtol=4e-6, atol=0)


@pytest.mark.parametrize("name", ["expm1", "log1p", "gelu", "gelu_tanh", "elu", "softplus"])
@pytest.mark.parametrize("dtype", [F16, F64], ids=["float16", "float64"])
def test_function_other_float_dtypes(name, dtype, device):
    a = sample(dtype, finite=True)
    rtol = {F16: 1e-2, F64: 1e-9 if name == "gelu" else 1e-12}[dtype]  # float16 exp rounds x / ln 2 first
    check(FUNCTIONS[name][0](tensor(a, device)), reference(name, a), dtype, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("name", ["gelu", "softplus", "round", "mish", "log1p"])
def test_function_0d_empty_and_non_contiguous(name, device):
    function = FUNCTIONS[name][0]
    check(function(tensor(np.array(-0.75, np.float32), device)), reference(name, np.array(-0.75, np.float32)), F32,
          transcendental=True)
    check(function(tensor(np.zeros((0, 3), np.float32), device)), np.zeros((0, 3), np.float32), F32)
    a = small_sample(F32, shape=(4, 6))
    check(function(tensor(a, device).T[::2]), reference(name, a.T[::2]), F32, transcendental=True)


@pytest.mark.parametrize("tracked", [False, True], ids=["no-grad", "requires-grad"])
def test_hardtanh_and_relu6_at_their_bounds_infinities_and_nan(tracked, device):
    # without a gradient to keep, the bounds are tested strictly (one op each): values must not change
    a = np.array([-np.inf, -1.0, -0.0, 0.0, 1e-45, 3.0, 6.0, np.nextafter(6.0, 7.0), 7.0, np.inf, np.nan], np.float32)
    x = Tensor(a, device=device, requires_grad=tracked)
    check(x.relu6(), np.clip(a, 0, 6), F32)
    check(x.hardtanh(-1.0, 1e-45), np.clip(a, -1.0, np.float32(1e-45)), F32)


def test_integer_inputs_give_float32(device):
    a = small_sample(I32, shape=(2, 3))
    for name in ("gelu", "softplus", "elu", "hardsigmoid", "expm1", "erf"):
        check(FUNCTIONS[name][0](tensor(a, device)), reference(name, a.astype(np.float32)), F32, transcendental=True)
    check(tensor(a, device).relu6(), np.clip(a, 0, 6), I32)
    check(tensor(a, device).round(), a, I32)


def test_clamp_matches_numpy_clip_for_every_kind_of_bound(device):
    """Numbers in order take two selects of x, anything else min and then max; the results agree with
    numpy's clip (min then max: reversed bounds give the upper one everywhere), NaN propagating."""
    a = np.array([[-3.0, -1.0, 0.0, 0.5], [1.0, 2.0, np.nan, np.inf]], np.float32)
    x = tensor(a, device)
    check(x.clamp(-1.0, 1.0), np.clip(a, -1.0, 1.0), F32)
    check(x.clip(1.0, -1.0), np.clip(a, 1.0, -1.0), F32)
    check(x.clamp(min=0.0), np.maximum(a, 0.0), F32)
    bounds = tensor(np.array([-2.0, 0.0, 0.25, 3.0], np.float32), device)
    check(x.clamp(bounds, 1.5), np.clip(a, np.array([-2.0, 0.0, 0.25, 3.0], np.float32), 1.5), F32)
    ints = small_sample(I32, shape=(3, 4), low=-5, high=6)
    check(tensor(ints, device).clamp(-2, 3), np.clip(ints, -2, 3), I32)
    check(tensor(ints, device).clamp(-2, 3.5), np.clip(ints.astype(np.float32), -2, 3.5), F32)  # promoted


def test_erf_matches_math_erf_to_float32_precision(device):
    x = np.concatenate([np.linspace(-6, 6, 961), np.geomspace(1e-30, 6, 60), -np.geomspace(1e-30, 6, 60),
                        [0.0, -0.0, np.inf, -np.inf, np.nan]])
    for dtype, rtol in ((F32, 1.2e-7), (F64, 5e-11)):
        values = x.astype(dtype.np)
        exact = np.array([math.erf(v) if not np.isnan(v) else np.nan for v in values.astype(np.float64)])
        check(tensor(values, device).erf(), exact.astype(dtype.np), dtype, rtol=rtol, atol=0)


def test_float32_gelu_is_within_a_few_ulp_of_the_exact_value(device):
    """float32 gelu runs in float32 (float64 was 3-4x slower): at most 7 (1 + x*x/2) ulp from the
    exact x Phi(x), the x*x/2 from exp's argument in the tail; PyTorch's 1 + erf form loses every
    digit there (x = -5: 10%)."""
    x = np.concatenate([np.linspace(-8, 8, 4001), np.geomspace(1e-30, 8, 100), -np.geomspace(1e-30, 8, 100)])
    values = x.astype(np.float32)
    wide = values.astype(np.float64)
    exact = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in wide])
    got = tensor(values, device).gelu().numpy().astype(np.float64)
    ulps = np.abs(got - exact) / np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert np.all(ulps <= 7 * (1 + wide * wide / 2)), f"{ulps.max():.1f} ulp at x = {values[np.argmax(ulps)]}"


def test_erfc_keeps_its_tail(device):
    x = np.array([-3.0, 0.5, 1.0, 2.0, 5.0, 9.0, 10.0, 26.0], dtype=np.float64)
    exact = np.array([math.erfc(v) for v in x])
    check(tensor(x, device).erfc(), exact, F64, rtol=5e-10, atol=0)
    check(tensor(x.astype(np.float32), device).erfc(), exact.astype(np.float32), F32, rtol=2e-7, atol=0)


def test_gelu_bad_approximate_raises(device):
    with pytest.raises(ValueError, match="'fast'"):
        tensor(np.zeros(2, np.float32), device).gelu(approximate="fast")
    with pytest.raises(ValueError, match="2.0"):
        tensor(np.zeros(2, np.float32), device).hardtanh(2.0, 1.0)


def test_round_is_half_to_even(device):
    a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 1e30, 2.0 ** 23 + 1, -3.5, 3.5, 4.5], np.float32)
    check(tensor(a, device).round(), np.round(a), F32)
    check(tensor(a.astype(np.float64), device).round(decimals=-1), np.round(a.astype(np.float64), -1), F64)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("name", ["round", "trunc", "floor", "ceil"])
def test_rounding_at_the_edges_keeps_signed_zeros_and_specials(name, dtype, device):
    """Ties, values just below a tie, the last fractional values before 2^mantissa (where the
    rounding switches to leaving x as it is), huge values, infinities and NaN, and the sign of every
    zero result, against numpy."""
    mantissa = {np.float16: 10, np.float32: 23, np.float64: 52}[dtype]
    edge = 2.0 ** (mantissa - 1)
    values = [0.5, 1.5, 2.5, -0.5, -2.5, -0.3, 0.3, -0.0, 0.0, 2.7, -2.7, np.nextafter(dtype(0.5), dtype(0)),
              edge - 0.5, -(edge - 0.5), edge + 1, 2.0 ** mantissa, np.inf, -np.inf, np.nan, 6e4]
    a = np.array(values, dtype)
    result = getattr(tensor(a, device), name)().numpy()
    expected = getattr(np, name)(a)
    np.testing.assert_array_equal(result, expected)
    np.testing.assert_array_equal(np.signbit(result), np.signbit(expected))


def test_rounding_runs_as_additions_not_the_c_library():
    """round and trunc use the hardware's rounding (x + 2^23 - 2^23), not fmod, which C libraries
    compute one element at a time: an int8 quantization's rounding took 45 ns an element so."""
    from lazygrad.renderer.c import CRenderer
    from lazygrad.codegen.linearize import linearize
    from lazygrad.schedule.fuse import create_schedule
    x = Tensor(np.ones(64, np.float32))
    for result in (x.round(), x.trunc(), x.floor()):
        (item,) = create_schedule([result.lazydata])
        source = CRenderer().render_program(linearize(item.kernel, CRenderer()))
        body = source[source.index("void "):]  # past the declarations of the C functions kernels may call
        assert "fmod" not in body


# ---- predicates --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["isnan", "isinf", "isfinite"])
def test_predicates(name, device):
    a = sample(F32)
    check(getattr(tensor(a, device), name)(), getattr(np, name)(a), BOOL)
    i = small_sample(I32, shape=(2, 3))
    check(getattr(tensor(i, device), name)(), getattr(np, name)(i), BOOL)


# ---- lerp ---------------------------------------------------------------------------------------

def np_lerp(start, end, weight):
    """PyTorch's formula: start + w (end - start) for |w| < 0.5, else end - (end - start)(1 - w)."""
    diff = end - start
    return np.where(np.abs(weight) < 0.5, start + weight * diff, end - diff * (1 - weight))


def test_lerp(device):
    start, end = small_sample(F32, seed=1), small_sample(F32, seed=2)
    weight = np.random.default_rng(3).uniform(-0.5, 1.5, size=(4, 6)).astype(np.float32)
    for w in (0.0, 0.25, 0.75, 1.0):
        check(tensor(start, device).lerp(tensor(end, device), w), np_lerp(start, end, np.float32(w)), F32)
    check(tensor(start, device).lerp(tensor(end, device), tensor(weight, device)), np_lerp(start, end, weight), F32)
    # broadcasting start (6,) against end (4, 6) and a (4, 1) weight
    check(tensor(start[0], device).lerp(tensor(end, device), tensor(weight[:, :1], device)),
          np_lerp(start[0], end, weight[:, :1]), F32)
    with pytest.raises(TypeError, match="int32"):
        tensor(small_sample(I32), device).lerp(tensor(small_sample(I32), device), 0.5)
