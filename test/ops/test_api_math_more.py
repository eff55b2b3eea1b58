"""Inverse trigonometric and hyperbolic functions, atan2, logaddexp, copysign, logsigmoid, the named
comparisons and floor_divide against float64 numpy, on every device; their gradients against finite
differences (PyTorch's values at the edges are in test/autograd/test_gradients_at_kinks.py).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import lazygrad.nn.functional as lazygrad_functional
from gradcheck import check_gradients
from lazygrad import Tensor, dtypes
from ops_helpers import check, sample, small_sample, tensor

I32, F16, F32, F64, BOOL = dtypes.int32, dtypes.float16, dtypes.float32, dtypes.float64, dtypes.bool
INF, NAN = math.inf, math.nan


def np_logsigmoid(x):
    return -np.logaddexp(0, -x)


# name: (lazygrad, float64 numpy reference)
FUNCTIONS = {
    "atan": (lambda t: t.atan(), np.arctan),
    "asin": (lambda t: t.asin(), np.arcsin),
    "acos": (lambda t: t.acos(), np.arccos),
    "sinh": (lambda t: t.sinh(), np.sinh),
    "cosh": (lambda t: t.cosh(), np.cosh),
    "asinh": (lambda t: t.asinh(), np.arcsinh),
    "acosh": (lambda t: t.acosh(), np.arccosh),
    "atanh": (lambda t: t.atanh(), np.arctanh),
    "logsigmoid": (lambda t: t.logsigmoid(), np_logsigmoid),
}
ODD = ["atan", "asin", "sinh", "asinh", "atanh"]

# the domains' edges and just inside and outside them, besides sample()'s -100..100, +-0, NaN and +-inf
EDGES = np.array([1.0, -1.0, 1 - 2 ** -24, -(1 - 2 ** -24), 1 + 2 ** -23, -(1 + 2 ** -23), 0.999, 1.001,
                  1e-30, -1e-30, 1e-8, -1e-8, 0.4142135, 2.4142137, 88.0, -88.0, 89.5, -89.5, 1e19, -1e19,
                  3e38, -3e38, 0.0, -0.0])


def reference(name, array):
    with np.errstate(all="ignore"):
        return FUNCTIONS[name][1](array.astype(np.float64)).astype(array.dtype)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_function_float32_with_specials(name, device):
    a = np.concatenate([sample(F32).ravel(), EDGES.astype(np.float32)]).reshape(6, 8)
    # logsigmoid is computed in float32, the others in float64 and rounded once; logsigmoid(-100) is subnormal
    rtol, atol = (2e-6, 1e-37) if name == "logsigmoid" else (1.2e-7, 0)
    check(FUNCTIONS[name][0](tensor(a, device)), reference(name, a), F32, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_function_float64(name, device):
    a = np.concatenate([sample(F64).ravel(), EDGES, [1e300, -1e300, 700.0, -710.0, 1 - 2 ** -53, 1 + 2 ** -52]])
    # exp(x) rounds x * log2(e) first, which costs sinh, cosh and logsigmoid a few ulps
    rtol = 4e-14 if name in ("sinh", "cosh", "logsigmoid") else 4e-15
    check(FUNCTIONS[name][0](tensor(a, device)), reference(name, a), F64, rtol=rtol, atol=1e-300)


def test_odd_functions_keep_the_sign_of_zero(device):
    zeros = np.array([0.0, -0.0], np.float32)
    for name in ODD:
        result = FUNCTIONS[name][0](tensor(zeros, device)).numpy()
        np.testing.assert_array_equal(np.signbit(result), [False, True], err_msg=name)


SMALL = np.concatenate([np.geomspace(1e-30, 1e-2, 8), -np.geomspace(1e-30, 1e-2, 8)])


@pytest.mark.parametrize("name", ODD)
def test_function_keeps_relative_precision_near_zero(name, device):
    for dtype, rtol in ((F32, 1.2e-7), (F64, 1e-15)):
        a = SMALL.astype(dtype.np)
        check(FUNCTIONS[name][0](tensor(a, device)), reference(name, a), dtype, rtol=rtol, atol=0)


def test_float16_is_rounded_once(device):
    a = np.array([0.0, 0.5, -0.75, 0.999, -1.0, 2.0, 10.0, 1.5], np.float16)
    for name in FUNCTIONS:
        check(FUNCTIONS[name][0](tensor(a, device)), reference(name, a), F16, rtol=1e-3, atol=1e-3)


def test_integer_inputs_give_float32(device):
    a = small_sample(I32, shape=(2, 3))
    for name in FUNCTIONS:
        check(FUNCTIONS[name][0](tensor(a, device)), reference(name, a.astype(np.float32)), F32, rtol=2e-6, atol=0)
    b = small_sample(I32, shape=(2, 3), seed=2)
    check(tensor(a, device).atan2(tensor(b, device)), np.arctan2(a, b).astype(np.float32), F32, rtol=1.2e-7, atol=0)
    check(tensor(a, device).copysign(-1.0), -np.abs(a).astype(np.float32), F32)
    check(tensor(a, device).logaddexp(tensor(a, device)), np.logaddexp(a, a).astype(np.float32), F32)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_function_0d_and_empty(name, device):
    function = FUNCTIONS[name][0]
    scalar = np.array(0.5, np.float32)
    check(function(tensor(scalar, device)), reference(name, scalar), F32, rtol=2e-6, atol=0)
    check(function(tensor(np.zeros((0, 3), np.float32), device)), np.zeros((0, 3), np.float32), F32)


# ---- binary functions -----------------------------------------------------------------------------------

SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -1e-30, INF, -INF, NAN])
Y_GRID, X_GRID = np.meshgrid(SPECIALS, SPECIALS, indexing="ij")  # every pair of specials


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_atan2_quadrants_signed_zeros_and_infinities(dtype, device):
    y, x = Y_GRID.astype(dtype.np), X_GRID.astype(dtype.np)
    expected = np.arctan2(y, x)
    result = tensor(y, device).atan2(tensor(x, device))
    check(result, expected, dtype, rtol=1.2e-7 if dtype == F32 else 4e-16, atol=0)
    numbers = ~np.isnan(expected)  # a NaN's sign means nothing
    np.testing.assert_array_equal(np.signbit(result.numpy()[numbers]), np.signbit(expected[numbers]))


def test_atan2_random_points_broadcasting_and_numbers(device):
    rng = np.random.default_rng(0)
    y, x = rng.standard_normal((4, 6)) * 10, rng.standard_normal(6)
    check(tensor(y, device).atan2(tensor(x, device)), np.arctan2(y, x), F64, rtol=4e-16, atol=0)
    check(tensor(y, device).atan2(-2.0), np.arctan2(y, -2.0), F64, rtol=4e-16, atol=0)
    y32, x32 = y.astype(np.float32), x.astype(np.float16)
    check(tensor(y32, device).atan2(tensor(x32, device)), np.arctan2(y32, x32.astype(np.float32)), F32,
          rtol=1.2e-7, atol=0)


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_logaddexp(dtype, device):
    y, x = Y_GRID.astype(dtype.np), X_GRID.astype(dtype.np)
    with np.errstate(invalid="ignore"):
        expected = np.logaddexp(x.astype(np.float64), y.astype(np.float64)).astype(dtype.np)
    rtol = 2.4e-7 if dtype == F32 else 1e-15
    check(tensor(x, device).logaddexp(tensor(y, device)), expected, dtype, rtol=rtol, atol=0)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 6)) * 30, rng.standard_normal(6) * 30
    a, b = np.concatenate([a, [[1000.0] * 6, [-1000.0] * 6]]), np.array([1000.0, -1000, 0, 1e-8, -50, 90])
    rtol = 2e-6 if dtype == F32 else 1e-14  # float32 exp rounds x * log2(e) to float32
    check(tensor(a.astype(dtype.np), device).logaddexp(tensor(b.astype(dtype.np), device)),
          np.logaddexp(a, b).astype(dtype.np), dtype, rtol=rtol, atol=rtol * 1e-6)
    check(tensor(a.astype(dtype.np), device).logaddexp(0.5), np.logaddexp(a, 0.5).astype(dtype.np), dtype,
          rtol=rtol, atol=rtol * 1e-6)


@pytest.mark.parametrize("dtype", [F16, F32, F64], ids=["float16", "float32", "float64"])
def test_copysign_is_exact_for_signed_zeros_and_nans(dtype, device):
    x, y = X_GRID.astype(dtype.np), Y_GRID.astype(dtype.np)
    y = np.concatenate([y, -y])  # -NaN too
    x = np.concatenate([x, x])
    expected = np.copysign(x, y)
    result = tensor(x, device).copysign(tensor(y, device))
    assert result.dtype == dtype
    result = result.numpy()
    kept = np.ones(expected.shape, bool)
    if device == "CUDA":
        # PTX leaves a NaN's sign unspecified after neg and after a float -> half conversion (CUDA
        # keeps float16 in float registers): NaN results, and float16 NaN signs, carry no sign there
        kept = ~np.isnan(expected) & ~(np.isnan(y) & (dtype == F16))
    np.testing.assert_array_equal(result[kept], expected[kept])  # NaN where NaN, else equal values
    np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
    np.testing.assert_array_equal(np.signbit(result[kept]), np.signbit(expected[kept]))
    check(tensor(x, device).copysign(-0.0), np.copysign(x, -0.0), dtype, rtol=0, atol=0)


def test_logsigmoid_of_nn_functional_is_the_method(device):
    a = sample(F32)
    check(lazygrad_functional.logsigmoid(tensor(a, device)), reference("logsigmoid", a), F32, rtol=2e-6, atol=1e-37)


# ---- comparisons and floor_divide -----------------------------------------------------------------------

COMPARISONS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}


@pytest.mark.parametrize("name", list(COMPARISONS))
def test_named_comparisons_are_the_operators(name, device):
    a, b = sample(F32), sample(F32, seed=3)
    check(getattr(tensor(a, device), name)(tensor(b, device)), COMPARISONS[name](a, b), BOOL)
    check(getattr(tensor(a, device), name)(2.5), COMPARISONS[name](a, np.float32(2.5)), BOOL)
    i = small_sample(I32)
    check(getattr(tensor(i, device), name)(tensor(i[0], device)), COMPARISONS[name](i, i[0]), BOOL)
    check(getattr(tensor(i, device), name)(3), COMPARISONS[name](i, 3), BOOL)


def test_floor_divide_is_floordiv(device):
    i, j = small_sample(I32), small_sample(I32, seed=2, low=1)
    check(tensor(i, device).floor_divide(tensor(j, device)), i // j, I32)
    a = small_sample(F32)
    check(tensor(a, device).floor_divide(-0.75), a // np.float32(-0.75), F32)


# ---- gradients -----------------------------------------------------------------------------------------

rng = np.random.default_rng(0)
INSIDE_UNIT = rng.uniform(-0.9, 0.9, 4)
WIDE = np.array([-3.0, -0.4, 0.7, 2.5])

# name: (scalar function of float64 tensors, inputs inside the domain)
GRADIENT_CASES = {
    "atan": (lambda x: x.atan().sum(), [WIDE]),
    "asin": (lambda x: x.asin().sum(), [INSIDE_UNIT]),
    "acos": (lambda x: x.acos().sum(), [INSIDE_UNIT]),
    "atan2": (lambda y, x: (y.atan2(x) * Tensor([1.0, 2.0, 3.0, 4.0], device=x.device)).sum(),
              [WIDE, np.array([0.5, -1.5, -2.0, 0.3])]),
    "sinh": (lambda x: x.sinh().sum(), [WIDE]),
    "cosh": (lambda x: x.cosh().sum(), [WIDE]),
    "asinh": (lambda x: x.asinh().sum(), [WIDE]),
    "acosh": (lambda x: x.acosh().sum(), [np.array([1.1, 1.5, 3.0, 20.0])]),
    "atanh": (lambda x: x.atanh().sum(), [INSIDE_UNIT]),
    "logaddexp": (lambda x, y: x.logaddexp(y).sum(), [WIDE, np.array([0.5, -0.4, 3.0, -1.0])]),
    "copysign": (lambda x, y: (x.copysign(y) * Tensor([1.0, 2.0, 3.0, 4.0], device=x.device)).sum(),
                 [WIDE, np.array([0.5, -1.0, -3.0, 2.0])]),
    "logsigmoid": (lambda x: x.logsigmoid().sum(), [WIDE]),
    "chained": (lambda x: x.tanh().atanh().asin().sinh().sum(), [INSIDE_UNIT * 0.5]),
}


@pytest.mark.parametrize("name", sorted(GRADIENT_CASES))
def test_gradient_matches_finite_differences(name, device):
    function, inputs = GRADIENT_CASES[name]
    check_gradients(function, *inputs, device=device)


