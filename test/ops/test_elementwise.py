"""Elementwise ops of the Tensor API against numpy, for every dtype each op admits, on every device.

Expected values follow PyTorch's semantics written with numpy: float-only functions (exp, sqrt, /,
...) turn bool and integer inputs into float32; `//` is floor division and `%` takes the divisor's
sign; integer arithmetic wraps; integer division by zero gives numpy's 0 (PyTorch raises there).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from lazygrad import Tensor, dtypes
from ops_helpers import (ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, NON_BOOL_DTYPES, SHAPE,
                         check, ids, sample, small_sample, tensor)

I8, U8, I16, I32, I64 = dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64
F16, F32, F64, BOOL = dtypes.float16, dtypes.float32, dtypes.float64, dtypes.bool


def float_of(dtype):
    """The dtype PyTorch's float-only ops return for an input of `dtype`."""
    return dtype if dtype.is_float else F32


def scalar_result(dtype, scalar):
    """PyTorch's result dtype of `tensor(dtype) op python_scalar`."""
    if isinstance(scalar, bool):
        return dtype
    if isinstance(scalar, int):
        return I64 if dtype.is_bool else dtype
    return dtype if dtype.is_float else F32


def quiet(fn, *args):
    with np.errstate(all="ignore"):
        return fn(*args)


# ---- float-only unary functions ----------------------------------------------------------------

UNARY_FLOAT = {
    "exp": (lambda t: t.exp(), np.exp),
    "log": (lambda t: t.log(), np.log),
    "exp2": (lambda t: t.exp2(), np.exp2),
    "log2": (lambda t: t.log2(), np.log2),
    "sqrt": (lambda t: t.sqrt(), np.sqrt),
    "rsqrt": (lambda t: t.rsqrt(), lambda x: 1 / np.sqrt(x)),
    "sin": (lambda t: t.sin(), np.sin),
    "cos": (lambda t: t.cos(), np.cos),
    "tanh": (lambda t: t.tanh(), np.tanh),
    "sigmoid": (lambda t: t.sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    "reciprocal": (lambda t: t.reciprocal(), lambda x: 1 / x),
}
PERIODIC = ("sin", "cos")


def unary_input(name, dtype):
    x = sample(dtype)
    if name in PERIODIC and not dtype.is_bool:
        # moderate arguments; accuracy for large ones is tested separately
        limit = 10 if dtype == F16 else 100
        x = np.where(np.isfinite(x.astype(np.float64)), np.clip(x, -limit if not dtype.is_unsigned else 0, limit),
                     x).astype(dtype.np)
    return x


# every op on float dtypes and int32; bool and the other integer dtypes take the same path (cast
# to float32 first), checked with two ops each to keep the number of kernels down
UNARY_FLOAT_CASES = [(name, dtype) for name in UNARY_FLOAT for dtype in FLOAT_DTYPES + (I32,)] + [
    (name, dtype) for name in ("exp", "sqrt") for dtype in (BOOL, U8, I8, I16, I64)]


@pytest.mark.parametrize("name,dtype", UNARY_FLOAT_CASES, ids=[f"{n}-{d.name}" for n, d in UNARY_FLOAT_CASES])
def test_unary_float(name, dtype, device):
    fn, ref = UNARY_FLOAT[name]
    x = unary_input(name, dtype)
    out = float_of(dtype)
    expected = quiet(ref, x.astype(out.np).astype(np.float64))
    check(fn(tensor(x, device)), expected, out, transcendental=True)


@pytest.mark.parametrize("dtype", [F16, F32], ids=ids([F16, F32]))
def test_cos_large_arguments(dtype, device):
    # positional encodings take cos of arguments in the thousands
    limit = 60 if dtype == F16 else 1000
    x = np.linspace(-limit, limit, 24).astype(dtype.np)
    check(tensor(x, device).cos(), np.cos(x.astype(np.float64)), dtype, transcendental=True)
    check(tensor(x, device).sin(), np.sin(x.astype(np.float64)), dtype, transcendental=True)


# ---- unary ops that keep the dtype ---------------------------------------------------------------

UNARY_SAME = {
    "neg": (lambda t: -t, np.negative),
    "neg_method": (lambda t: t.neg(), np.negative),
    "abs": (lambda t: t.abs(), np.abs),
    "relu": (lambda t: t.relu(), lambda x: np.maximum(x, np.zeros((), x.dtype))),
}


@pytest.mark.parametrize("dtype", NON_BOOL_DTYPES, ids=ids(NON_BOOL_DTYPES))
@pytest.mark.parametrize("name", list(UNARY_SAME))
def test_unary_same_dtype(name, dtype, device):
    fn, ref = UNARY_SAME[name]
    x = sample(dtype)
    check(fn(tensor(x, device)), quiet(ref, x), dtype)


# ---- binary arithmetic, tensor with tensor -----------------------------------------------------

def _binary_inputs(name, dtype):
    a, b = sample(dtype), sample(dtype, seed=3)
    if name in ("floordiv", "mod", "truediv") and dtype.is_int and not dtype.is_unsigned:
        a = np.where(a == np.iinfo(dtype.np).min, a + 1, a).astype(dtype.np)  # no MIN // -1 overflow
    if name == "pow":
        if dtype.is_float:
            a = sample(dtype, finite=True)
            b = np.resize(np.array([-2, -1, -0.5, 0.5, 1, 1.5, 2, 3], dtype=dtype.np), a.size).reshape(a.shape)
        else:
            a = small_sample(dtype, low=-3, high=5)
            b = small_sample(dtype, low=0, high=5, seed=2)
    return a, b


def _ref_binary(name, a, b, out):
    a, b = a.astype(out.np), b.astype(out.np)
    if name == "truediv":
        floating = float_of(out).np
        return quiet(np.true_divide, a.astype(floating), b.astype(floating))
    ref = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
           "mod": np.remainder, "pow": np.power}[name]
    return quiet(ref, a, b)


BINARY = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "truediv": lambda x, y: x / y,
    "floordiv": lambda x, y: x // y,
    "mod": lambda x, y: x % y,
    "pow": lambda x, y: x ** y,
}
BINARY_DTYPES = {
    "add": ALL_DTYPES, "mul": ALL_DTYPES, "truediv": ALL_DTYPES,
    "sub": NON_BOOL_DTYPES, "floordiv": NON_BOOL_DTYPES, "mod": NON_BOOL_DTYPES, "pow": NON_BOOL_DTYPES,
}
BINARY_CASES = [(name, dtype) for name in BINARY for dtype in BINARY_DTYPES[name]]


@pytest.mark.parametrize("name,dtype", BINARY_CASES, ids=[f"{n}-{d.name}" for n, d in BINARY_CASES])
def test_binary_tensor_tensor(name, dtype, device):
    a, b = _binary_inputs(name, dtype)
    out = float_of(dtype) if name == "truediv" else dtype
    result = BINARY[name](tensor(a, device), tensor(b, device))
    check(result, _ref_binary(name, a, b, out), out)


# ---- binary arithmetic with Python scalars on either side ----------------------------------------

def _scalar_cases():
    """A Python scalar meets every dtype (add, and true division by a float) and every op meets
    scalars of each kind on either side; each case is a distinct kernel to compile."""
    cases = []
    for dtype in ALL_DTYPES:
        cases += [("add", dtype, 3, "right"), ("truediv", dtype, 2.5, "right")]
    for name in BINARY:
        cases += [(name, I8, 3, "right"), (name, I32, 2.5, "right"), (name, F32, 2.5, "right"),
                  (name, F16, 3, "left"), (name, U8, 3, "left")]
        if name in ("add", "mul", "truediv"):
            cases += [(name, BOOL, 3, "right"), (name, BOOL, 2.5, "left")]
        if name in ("floordiv", "mod"):
            cases += [(name, I32, -2, "right"), (name, F32, -2, "right"), (name, I32, 0, "right"),
                      (name, F32, 0, "right")]
    cases += [("truediv", I32, 0, "right"), ("pow", F32, -2, "right"), ("pow", F64, 3, "right"),
              ("sub", I64, -2.5, "left"), ("pow", I64, -2.5, "left"), ("sub", I16, 3, "left")]
    return list(dict.fromkeys(cases))


SCALAR_CASES = _scalar_cases()


@pytest.mark.parametrize("name,dtype,scalar,side", SCALAR_CASES,
                         ids=[f"{n}-{d.name}-{s}-{side}" for n, d, s, side in SCALAR_CASES])
def test_binary_with_python_scalar(name, dtype, scalar, side, device):
    if name == "pow":
        a = sample(dtype, finite=True) if dtype.is_float else small_sample(dtype, low=0 if side == "left" else -3,
                                                                           high=6)
    else:
        a = sample(dtype)
        if dtype.is_int and not dtype.is_unsigned and name in ("floordiv", "mod") and side == "right":
            a = np.where(a == np.iinfo(dtype.np).min, a + 1, a).astype(dtype.np)
    out = scalar_result(dtype, scalar)
    s = np.full(a.shape, scalar, dtype=out.np)
    x = tensor(a, device)
    if side == "right":
        result, expected = BINARY[name](x, scalar), _ref_binary(name, a, s, out)
    else:
        result, expected = BINARY[name](scalar, x), _ref_binary(name, s, a, out)
    check(result, expected, float_of(out) if name == "truediv" else out)


def test_float_floordiv_matches_python(device):
    # floor division is not floor(a / b) when a / b rounds up to a whole number: 1.0 // 0.1 == 9.0
    a = np.array([1.0, 7.0, -1.0, 0.3, 1.0, 5.0], dtype=np.float64)
    b = np.array([0.1, 0.7, 0.1, 0.1, 0.2, -0.5], dtype=np.float64)
    for dtype in (F32, F64):
        x, y = a.astype(dtype.np), b.astype(dtype.np)
        check(tensor(x, device) // tensor(y, device), np.floor_divide(x, y), dtype)
        check(tensor(x, device) % tensor(y, device), np.remainder(x, y), dtype)


def test_pow_special_values(device):
    # IEEE / C pow, which PyTorch follows: x**0 == 1 for every x, 1**y == 1 for every y, ...
    pairs = [(2, 3), (-2, 3), (-2, 2), (-2, 0.5), (0, 0), (0, 2), (0, -1), (1, np.nan), (np.nan, 0),
             (2.5, -1.5), (10, 0.5), (0.5, 10), (-0.5, -3), (np.inf, 0), (np.inf, -1), (-np.inf, 3),
             (-np.inf, 2), (3, np.inf), (0.5, np.inf), (-1, np.inf), (7.25, 2), (100, -2), (1e-3, 0.5),
             (-3.75, -1), (-np.inf, 2.5), (-np.inf, -0.5), (-np.inf, -3), (-0.0, -1), (-0.0, 3), (-0.0, -2)]
    for dtype in (F32, F64):
        base = np.array([p[0] for p in pairs], dtype=dtype.np)
        exponent = np.array([p[1] for p in pairs], dtype=dtype.np)
        check(tensor(base, device) ** tensor(exponent, device), quiet(np.power, base, exponent), dtype,
              transcendental=True)


def test_integer_pow_stays_integer(device):
    a = small_sample(I32, low=-3, high=5)
    e = small_sample(I32, low=0, high=4, seed=5)
    check(tensor(a, device) ** tensor(e, device), np.power(a, e), I32)
    check(tensor(a, device) ** 9, np.power(a, np.int32(9)), I32)
    check(tensor(a, device) ** 0, np.ones_like(a), I32)
    check(2 ** tensor(e, device), np.power(np.int32(2), e), I32)


def test_integer_negative_pow_raises(device):
    # PyTorch: "Integers to negative integer powers are not allowed."
    with pytest.raises((RuntimeError, ValueError, TypeError)):
        (tensor(np.array([1, 2, 3], dtype=np.int32), device) ** -1).numpy()


# ---- maximum, minimum, where ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ids(ALL_DTYPES))
@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum(name, dtype, device):
    a, b = sample(dtype), sample(dtype, seed=4)
    result = getattr(tensor(a, device), name)(tensor(b, device))
    check(result, getattr(np, name)(a, b), dtype)


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_scalar_and_promotion(name, device):
    a = sample(I32)
    check(getattr(tensor(a, device), name)(2.5), getattr(np, name)(a.astype(np.float32), np.float32(2.5)), F32)
    check(getattr(tensor(a, device), name)(3), getattr(np, name)(a, np.int32(3)), I32)
    h = sample(F16, seed=2)
    check(getattr(tensor(a, device), name)(tensor(h, device)),
          getattr(np, name)(a.astype(np.float16), h), F16)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ids(ALL_DTYPES))
def test_where(dtype, device):
    cond = sample(BOOL)
    a, b = sample(dtype), sample(dtype, seed=5)
    check(tensor(cond, device).where(tensor(a, device), tensor(b, device)), np.where(cond, a, b), dtype)


def test_where_scalars_and_broadcast(device):
    cond = sample(BOOL)
    c = tensor(cond, device)
    a = sample(I32)
    check(c.where(tensor(a, device), 2.5), np.where(cond, a.astype(np.float32), np.float32(2.5)), F32)
    check(c.where(0.5, tensor(a, device)), np.where(cond, np.float32(0.5), a.astype(np.float32)), F32)
    check(c.where(1, 0), np.where(cond, 1, 0).astype(np.int64), I64)
    check(c.where(1.0, 0), np.where(cond, 1.0, 0.0).astype(np.float32), F32)
    check(c.where(True, False), cond.copy(), BOOL)
    h = sample(F16)
    check(c.where(tensor(h, device), 0.5), np.where(cond, h, np.float16(0.5)), F16)
    i8 = sample(I8)
    check(c.where(tensor(i8, device), 3), np.where(cond, i8, np.int8(3)), I8)
    # condition (4, 1), if_true (6,), if_false 0-d
    cond2 = np.array([[True], [False], [True], [False]])
    x = np.arange(6, dtype=np.float32)
    check(tensor(cond2, device).where(tensor(x, device), tensor(np.array(-1.0, dtype=np.float32), device)),
          np.where(cond2, x, np.float32(-1)), F32)


# ---- comparisons -----------------------------------------------------------------------------------

COMPARISONS = {
    "lt": (lambda x, y: x < y, np.less),
    "le": (lambda x, y: x <= y, np.less_equal),
    "gt": (lambda x, y: x > y, np.greater),
    "ge": (lambda x, y: x >= y, np.greater_equal),
    "eq": (lambda x, y: x == y, np.equal),
    "ne": (lambda x, y: x != y, np.not_equal),
}


COMPARISON_CASES = [(name, dtype) for name in COMPARISONS for dtype in (BOOL, U8, I32, F16, F32)] + [
    (name, dtype) for name in ("lt", "eq") for dtype in (I8, I16, I64, F64)]


@pytest.mark.parametrize("name,dtype", COMPARISON_CASES, ids=[f"{n}-{d.name}" for n, d in COMPARISON_CASES])
def test_comparison(name, dtype, device):
    fn, ref = COMPARISONS[name]
    a, b = sample(dtype), sample(dtype, seed=6)
    b[0, :3] = a[0, :3]  # some equal pairs
    check(fn(tensor(a, device), tensor(b, device)), ref(a, b), BOOL)


COMPARE_SCALAR_CASES = [(n, d, s) for n in ("lt", "eq") for d, s in ((I8, 3), (I32, 2.5), (F16, 2.5),
                                                                          (F32, 3), (BOOL, True), (U8, 100))]


@pytest.mark.parametrize("name,dtype,scalar", COMPARE_SCALAR_CASES,
                         ids=[f"{n}-{d.name}-{s}" for n, d, s in COMPARE_SCALAR_CASES])
def test_comparison_with_scalar(name, dtype, scalar, device):
    fn, ref = COMPARISONS[name]
    a = sample(dtype)
    common = scalar_result(dtype, scalar)
    x, s = a.astype(common.np), np.array(scalar, dtype=common.np)
    check(fn(tensor(a, device), scalar), ref(x, s), BOOL)
    if name == "lt" and dtype in (I8, F16, BOOL):
        check(fn(scalar, tensor(a, device)), ref(s, x), BOOL)


def test_comparison_mixed_dtypes(device):
    a, b = sample(U8), sample(I8)
    check(tensor(a, device) < tensor(b, device), a.astype(np.int16) < b.astype(np.int16), BOOL)
    i, f = sample(I32), sample(F32)
    check(tensor(i, device) >= tensor(f, device), i.astype(np.float32) >= f, BOOL)


AT_BOUND_CASES = [(d, c) for d in (F16, F32, F64) for c in (0, -0.0, 0.1, 6, -1.5, "max", "tiny", "-max")] + [(I32, 2.5), (U8, 0.5)]


@pytest.mark.parametrize("dtype,bound", AT_BOUND_CASES, ids=[f"{d.name}-{c}" for d, c in AT_BOUND_CASES])
def test_at_most_and_at_least_a_number_at_and_around_it(dtype, bound, device):
    # x <= c against a number is one comparison with the value past c: it must agree with numpy at c,
    # at its neighbours, at the largest values, infinities and NaN
    common = scalar_result(dtype, bound if not isinstance(bound, str) else 0.5)
    if isinstance(bound, str):
        info = np.finfo(common.np)
        bound = {"max": float(info.max), "tiny": float(info.smallest_subnormal), "-max": -float(info.max)}[bound]
    c = np.array(bound, dtype=common.np)
    if dtype.is_float:
        a = np.array([c, np.nextafter(c, np.inf), np.nextafter(c, -np.inf), np.nan, np.inf, -np.inf, 0.0, -0.0,
                      np.finfo(common.np).max, -np.finfo(common.np).max, 1.0], dtype=common.np)
    else:
        a = sample(dtype)
    x, wide = tensor(a, device), a.astype(common.np)
    check(x <= bound, wide <= c, BOOL)
    check(x >= bound, wide >= c, BOOL)
    check(bound <= x, c <= wide, BOOL)
    check(bound >= x, c >= wide, BOOL)


# ---- logical and bitwise ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ids(ALL_DTYPES))
def test_logical_not(dtype, device):
    a = sample(dtype)
    check(tensor(a, device).logical_not(), np.logical_not(a), BOOL)


LOGICAL_DTYPES = (BOOL, U8, I64, F16, F32)


@pytest.mark.parametrize("dtype", LOGICAL_DTYPES, ids=ids(LOGICAL_DTYPES))
@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
def test_logical_binary(name, dtype, device):
    a, b = sample(dtype), sample(dtype, seed=7)
    check(getattr(tensor(a, device), name)(tensor(b, device)), getattr(np, name)(a, b), BOOL)


def test_logical_mixed_dtypes(device):
    a, b = sample(F32), sample(I8)
    check(tensor(a, device).logical_and(tensor(b, device)), np.logical_and(a, b), BOOL)
    check(tensor(a, device).logical_xor(tensor(b, device)), np.logical_xor(a, b), BOOL)


BITWISE = {
    "and": (lambda x, y: x & y, np.bitwise_and),
    "or": (lambda x, y: x | y, np.bitwise_or),
    "xor": (lambda x, y: x ^ y, np.bitwise_xor),
}
BITWISE_DTYPES = (BOOL,) + INT_DTYPES


@pytest.mark.parametrize("dtype", BITWISE_DTYPES, ids=ids(BITWISE_DTYPES))
@pytest.mark.parametrize("name", list(BITWISE))
def test_bitwise(name, dtype, device):
    fn, ref = BITWISE[name]
    a, b = sample(dtype), sample(dtype, seed=8)
    check(fn(tensor(a, device), tensor(b, device)), ref(a, b), dtype)


@pytest.mark.parametrize("dtype", (BOOL, U8, I8, I32), ids=ids((BOOL, U8, I8, I32)))
@pytest.mark.parametrize("name", list(BITWISE))
def test_bitwise_with_scalar(name, dtype, device):
    fn, ref = BITWISE[name]
    a = sample(dtype)
    scalar = True if dtype.is_bool else 5
    check(fn(tensor(a, device), scalar), ref(a, np.array(scalar, dtype=dtype.np)), dtype)
    if dtype in (BOOL, I32):
        check(fn(scalar, tensor(a, device)), ref(np.array(scalar, dtype=dtype.np), a), dtype)


def test_bitwise_bool_with_int_scalar(device):
    a = sample(BOOL)
    check(tensor(a, device) & 5, np.bitwise_and(a.astype(np.int64), 5), I64)
    check(tensor(a, device) | 2, np.bitwise_or(a.astype(np.int64), 2), I64)


@pytest.mark.parametrize("dtype", BITWISE_DTYPES, ids=ids(BITWISE_DTYPES))
def test_bitwise_not(dtype, device):
    a = sample(dtype)
    check(~tensor(a, device), np.invert(a), dtype)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=ids(INT_DTYPES))
@pytest.mark.parametrize("name", ["lshift", "rshift"])
def test_shift(name, dtype, device):
    a = sample(dtype)
    bits = dtype.itemsize * 8
    amounts = (np.arange(a.size) % bits).reshape(a.shape).astype(dtype.np)
    fn, ref = ((lambda x, y: x << y), np.left_shift) if name == "lshift" else ((lambda x, y: x >> y), np.right_shift)
    check(fn(tensor(a, device), tensor(amounts, device)), ref(a, amounts), dtype)
    if dtype in (U8, I32):
        check(fn(tensor(a, device), 2), ref(a, np.array(2, dtype=dtype.np)), dtype)


@pytest.mark.parametrize("dtype", [I8, I32, I64], ids=ids([I8, I32, I64]))
def test_shift_by_width_or_more(dtype, device):
    # PyTorch and numpy: shifting left by >= the bit width (or a negative amount) gives 0,
    # shifting right gives the sign fill
    bits = dtype.itemsize * 8
    a = np.array([1, -1, 5, -5, 3, -100], dtype=dtype.np)
    amounts = np.array([bits, bits, bits + 3, bits + 3, -1, -1], dtype=dtype.np)
    check(tensor(a, device) << tensor(amounts, device), np.left_shift(a, amounts), dtype)
    check(tensor(a, device) >> tensor(amounts, device), np.right_shift(a, amounts), dtype)


def test_shift_scalar_on_the_left(device):
    amounts = np.array([0, 1, 2, 5], dtype=np.int32)
    check(3 << tensor(amounts, device), np.left_shift(np.int32(3), amounts), I32)
    check(-100 >> tensor(amounts, device), np.right_shift(np.int32(-100), amounts), I32)


# ---- casts --------------------------------------------------------------------------------------------

_TRUNCATABLE = [-100.7, -3.75, -2.5, -1.0, -0.5, -0.0, 0.0, 0.25, 0.5, 0.99, 1.0, 1.5, 2.5, 3.75, 7.25, 10.0,
                99.9, 127.0, -127.9, 42.42, -42.42, 5.5, -5.5, 100.7]


def cast_input(source, target):
    if source.is_float and (target.is_int):
        values = np.array(_TRUNCATABLE, dtype=np.float64)  # in range of every integer type: defined casts
        if target.is_unsigned:
            values = np.abs(values)
        return values.astype(source.np).reshape(SHAPE)
    return sample(source)


# all pairs except among integer types, where a representative set of widening and narrowing
# (and signed <-> unsigned) casts is enough: they are all the same C conversion
_INT_PAIRS = {(U8, I8), (I8, U8), (I16, I8), (I32, I16), (I64, I32), (I8, I64), (U8, I64), (I64, U8), (I32, U8),
              (I16, U8)}
CAST_CASES = [(s, t) for s in ALL_DTYPES for t in ALL_DTYPES
              if s != t and (not (s.is_int and t.is_int) or (s, t) in _INT_PAIRS)]


@pytest.mark.parametrize("source,target", CAST_CASES, ids=[f"{s.name}-to-{t.name}" for s, t in CAST_CASES])
def test_cast(source, target, device):
    a = cast_input(source, target)
    with np.errstate(all="ignore"):
        expected = a.astype(target.np)
    check(tensor(a, device).cast(target), expected, target, rtol=0, atol=0)


CAST_METHODS = {"float": F32, "int": I32, "bool": BOOL, "half": F16, "double": F64, "long": I64}


@pytest.mark.parametrize("method", list(CAST_METHODS))
@pytest.mark.parametrize("source", [I16, F64, BOOL], ids=ids([I16, F64, BOOL]))
def test_cast_methods(method, source, device):
    target = CAST_METHODS[method]
    a = cast_input(source, target)
    with np.errstate(all="ignore"):
        expected = a.astype(target.np)
    check(getattr(tensor(a, device), method)(), expected, target, rtol=0, atol=0)


def test_cast_by_name_and_numpy_dtype(device):
    a = sample(I16)
    check(tensor(a, device).cast("float64"), a.astype(np.float64), F64)
    check(tensor(a, device).cast(np.uint8), a.astype(np.uint8), U8)


# ---- type promotion between tensors --------------------------------------------------------------

PROMOTIONS = [
    ((U8, 1), (I8, 1), I16), ((U8, 1), (I16, 1), I16), ((I8, 1), (I64, 1), I64), ((BOOL, 1), (U8, 1), U8),
    ((BOOL, 1), (F16, 1), F16), ((I32, 1), (F16, 1), F16), ((I64, 1), (F32, 1), F32), ((F16, 1), (F32, 1), F32),
    ((F32, 1), (F64, 1), F64), ((U8, 1), (F16, 1), F16), ((I16, 1), (I32, 1), I32),
    # 0-d tensors only win when their category is higher
    ((I8, 1), (I64, 0), I8), ((I32, 1), (F64, 0), F64), ((F16, 1), (F64, 0), F16), ((BOOL, 1), (I32, 0), I32),
    ((I8, 0), (I16, 0), I16), ((U8, 1), (I8, 0), U8), ((F64, 0), (I32, 1), F64),
]


@pytest.mark.parametrize("left,right,expected_dtype", PROMOTIONS,
                         ids=[f"{a.name}{'' if ra else '0d'}-{b.name}{'' if rb else '0d'}"
                              for (a, ra), (b, rb), _ in PROMOTIONS])
def test_type_promotion(left, right, expected_dtype, device):
    (ldt, lrank), (rdt, rrank) = left, right
    a = small_sample(ldt, shape=SHAPE if lrank else (), low=0, high=6)
    b = small_sample(rdt, shape=SHAPE if rrank else (), low=0, high=6, seed=3)
    x, y = tensor(a, device), tensor(b, device)
    ea, eb = a.astype(expected_dtype.np), b.astype(expected_dtype.np)
    check(x + y, np.add(ea, eb), expected_dtype)


# ---- shapes: 0-d, size 0, broadcasting, non-contiguous operands -------------------------------------

OPS_FOR_SHAPES = {
    "exp": (lambda x, y: x.exp(), lambda a, b: np.exp(a.astype(np.float64))),
    "add": (lambda x, y: x + y, lambda a, b: a + b),
    "floordiv": (lambda x, y: x // y, lambda a, b: np.floor_divide(a, b)),
    "lt": (lambda x, y: x < y, lambda a, b: a < b),
    "where": (lambda x, y: (x > 0).where(x, y), lambda a, b: np.where(a > 0, a, b)),
    "cast": (lambda x, y: x.cast(dtypes.int16) + y.cast(dtypes.int16),
             lambda a, b: a.astype(np.int16) + b.astype(np.int16)),
}


def _shape_case(case, dtype, seed=0):
    """(x_array, make_x(device), y_array, make_y(device)): operands, some built with movement ops."""
    rng = np.random.default_rng(seed)

    def data(shape):
        values = rng.integers(-9, 10, size=shape)
        values = np.where(values == 0, 1, values)  # no division by zero here
        return values.astype(dtype.np) + (np.asarray(0.5, dtype.np) if dtype.is_float else 0)

    def plain(array):
        return array, lambda device: tensor(array, device)

    if case == "0d-0d":
        return (*plain(data(())), *plain(data(())))
    if case == "0d-nd":
        return (*plain(data(())), *plain(data((3, 4))))
    if case == "nd-0d":
        return (*plain(data((3, 4))), *plain(data(())))
    if case == "size0":
        return (*plain(data((0,))), *plain(data((0,))))
    if case == "size0-broadcast":
        return (*plain(data((2, 0, 3))), *plain(data((3,))))
    if case == "broadcast-3x1-4":
        return (*plain(data((3, 1))), *plain(data((4,))))
    if case == "broadcast-2x1x4-3x1":
        return (*plain(data((2, 1, 4))), *plain(data((3, 1))))
    if case == "transposed":
        base = data((4, 3))
        return base.T, lambda device: tensor(base, device).T, *plain(data((3, 4)))
    if case == "stepped":
        base = data((7, 4))
        return base[::2], lambda device: tensor(base, device)[::2], *plain(data((4, 4)))
    if case == "flipped-and-negative-step":
        base, other = data((3, 4)), data((3, 8))
        return (base[::-1], lambda device: tensor(base, device).flip(0),
                other[:, ::-2], lambda device: tensor(other, device)[:, ::-2])
    if case == "permuted-broadcast":
        base = data((4, 1, 3))
        return base.transpose(2, 0, 1), lambda device: tensor(base, device).permute(2, 0, 1), *plain(data((5,)))
    raise AssertionError(case)


SHAPE_CASES = ["0d-0d", "0d-nd", "size0", "size0-broadcast", "broadcast-3x1-4", "broadcast-2x1x4-3x1",
               "transposed", "stepped", "flipped-and-negative-step", "permuted-broadcast"]


SHAPE_OPS = [("add", I32), ("exp", F32), ("floordiv", I32), ("lt", F32)]


@pytest.mark.parametrize("case", SHAPE_CASES)
@pytest.mark.parametrize("name,dtype", SHAPE_OPS, ids=[f"{n}-{d.name}" for n, d in SHAPE_OPS])
def test_shapes(name, dtype, case, device):
    fn, ref = OPS_FOR_SHAPES[name]
    a, make_x, b, make_y = _shape_case(case, dtype)
    expected = quiet(ref, a, b)
    result = fn(make_x(device), make_y(device))
    out_dtype = {"exp": float_of(dtype), "lt": BOOL, "cast": I16}.get(name, dtype)
    if name == "exp" and dtype == F32:
        expected = expected.astype(np.float32)
    check(result, np.asarray(expected).astype(out_dtype.np), out_dtype, transcendental=True)


@pytest.mark.parametrize("dtype", [I8, F32, F64], ids=ids([I8, F32, F64]))
def test_large_elementwise_runs_on_all_cores(dtype, device):
    # big enough for the multicore outer loop, with a non-contiguous operand and broadcasting
    a = small_sample(dtype, shape=(260, 160), seed=9)
    b = small_sample(dtype, shape=(160, 260), seed=10)
    c = small_sample(dtype, shape=(160,), seed=11)
    result = tensor(a, device) * 3 + tensor(b, device).T - tensor(c, device)
    check(result, a * np.array(3, dtype.np) + b.T - c, dtype)
    check((tensor(a, device) < tensor(c, device)).where(tensor(a, device), tensor(c, device)), np.where(a < c, a, c),
          dtype)


def test_tensor_from_0d_numpy_array(device):
    for value in (np.array(2.5, dtype=np.float32), np.array(-3, dtype=np.int8), np.array(True)):
        t = Tensor(value, device=device)
        assert t.shape == ()
        check(t, value, dtypes.from_any(value.dtype))
    check(Tensor(np.float16(1.5), device=device), np.array(1.5, dtype=np.float16), F16)


def test_python_scalar_tensors(device):
    # Tensor(python scalar) is 0-d with PyTorch's default dtypes
    check(Tensor(2.5, device=device) * Tensor(2, device=device), np.array(5.0, dtype=np.float32), F32)
    check(Tensor(7, device=device) // Tensor(-2, device=device), np.array(-4, dtype=np.int64), I64)
    check(Tensor(True, device=device) + Tensor(True, device=device), np.array(True), BOOL)


def test_same_input_twice_and_reused_subexpressions(device):
    a = sample(F32, finite=True)
    x = tensor(a, device)
    y = x * x
    check(y + y / (y + 1), a * a + (a * a) / (a * a + 1), F32)
    check(x - x, a - a, F32)


def test_elementwise_chain_on_size_one_dims(device):
    a = np.arange(6, dtype=np.float32).reshape(1, 6, 1)
    x = tensor(a, device)
    check((x * 2 + 1).sqrt(), np.sqrt(a * 2 + 1), F32, transcendental=True)


def test_float64_constants_keep_precision(device):
    # a Python float meeting a float64 tensor stays a double (no detour through float32)
    a = np.array([1.0, 2.0, 3.0], dtype=np.float64)
    check(tensor(a, device) + 0.1, a + 0.1, F64, rtol=0, atol=0)
    check(tensor(a, device) * math.pi, a * math.pi, F64, rtol=0, atol=0)


def test_exp2_near_and_past_underflow_matches_numpy(device):
    """Below -150, 2^x rounds to 0 and is given as 0 without computing through subnormals; just
    above, the subnormal results are still exact (a masked softmax's -inf scores land here). The
    expected values are float64 results rounded once to float32: numpy's own float32 exp2 depends on
    the CPU's SIMD path (numpy 2.5 on an AVX-512 machine gives 0 for 2^-149.5, which rounds to 2^-149).
    Zeros and NaN are exact; other values within 2 ulp, CUDA's exp2f bound (2^-126.5: 1 ulp off)."""
    x = np.array([-149.0, -149.5, -149.9, -150.0, -150.1, -160.0, -1e38, -np.inf, np.nan, -126.5, 0.3], np.float32)
    actual = tensor(x, device).exp2().numpy()
    expected = np.exp2(x.astype(np.float64)).astype(np.float32)
    exact = (expected == 0) | np.isnan(expected)
    np.testing.assert_array_equal(actual[exact], expected[exact])
    np.testing.assert_array_max_ulp(actual[~exact], expected[~exact], maxulp=2)


def test_a_masked_choice_between_loads_is_right_on_every_device(device):
    """The backward kernel of a clamped norm, (x / max(||x||, eps)): a load that only a WHERE's choice
    uses, next to other masks. gcc 12's loop vectorizer turned such loads into masked loads and gave
    two of them one mask (lanes 1-3 of each row wrong); renderer/c.py keeps it out of such kernels."""
    rng = np.random.default_rng(5)
    x, y, w = rng.standard_normal((2, 3, 4)), rng.standard_normal((3, 4)), rng.uniform(-1, 1, (2, 3, 1))
    total, grad = (x * x).sum(-1, keepdims=True), rng.standard_normal((2, 3, 1))
    total[1, 2] = 0.0  # one zero norm: its masks pick the other values
    t, g = tensor(total, device), tensor(grad, device)
    norm = (t == 0).where(0.0, t.sqrt())
    slope = (t == 0).where(0.0, (norm >= 1e-8).where(g, 0.0)) / (t.sqrt() * 2)
    result = tensor(w, device) * tensor(y, device) / tensor(np.sqrt(total) + 1, device) + slope * tensor(x, device) * 2
    with np.errstate(divide="ignore", invalid="ignore"):
        expected_slope = np.where(total == 0, 0.0, np.where(np.sqrt(total) >= 1e-8, grad, 0.0)) / (np.sqrt(total) * 2)
    expected = w * y / (np.sqrt(total) + 1) + expected_slope * x * 2
    check(result, expected, F64)


@pytest.mark.parametrize("shape, padding", [((4, 2), ((1, 1), (0, 0))), ((11, 2), ((2, 1), (0, 0))),
                                            ((4, 2, 3), ((1, 1), (0, 0), (0, 0))), ((5, 2, 4), ((0, 3), (0, 0), (0, 0))),
                                            ((4, 17, 2), ((1, 2), (2, 2), (0, 1))),
                                            ((2, 3, 3, 3), ((1, 1), (1, 1), (1, 2), (0, 0)))])
def test_a_padded_read_is_right_on_every_device(shape, padding, device):
    """Rows read through padding (a (6, 2) copy, sums over the last axis of a (6, 2, 3), a (4, 17, 2)
    padded to (7, 21, 3), a (2, 3, 3, 3) to (4, 5, 6, 3)): gcc 12's loop vectorizer, on AVX-512,
    turned the padded read into a masked load with a wrong mask for some rows (zeros where the
    input's values belong); renderer/c.py keeps it out of kernels that read through padding."""
    a = np.arange(1, np.prod(shape) + 1, dtype=np.float32).reshape(shape)
    padded = tensor(a, device).pad(padding)
    expected = np.pad(a, padding)
    check(padded, expected, F32)
    # an op before the padding too: a select of the padded values, which gcc vectorized otherwise
    check((tensor(a, device) * 2 + 1).pad(padding) * 2 + 1, np.pad(a * 2 + 1, padding) * 2 + 1, F32)
    if len(shape) == 3:
        check(padded.sum(-1), expected.sum(-1), F32)
    # two pads in a row, as a sharded tensor's views stack them (test/distributed/test_shard.py)
    first, second = ((padding[0][0], 0),) + padding[1:], ((0, padding[0][1]),) + ((0, 0),) * (len(shape) - 1)
    check(tensor(a, device).pad(first).pad(second), expected, F32)
