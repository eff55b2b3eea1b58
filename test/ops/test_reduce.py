"""Reductions (sum, max, min, mean, prod) against numpy, on every device.

PyTorch's rules: sum and prod of bool or integer tensors give int64 (uint64 for uint64); max and min keep the dtype;
mean is for floating point only (TypeError otherwise); the sum of an empty axis is 0 and its
product 1, its mean NaN, and max/min over an empty axis raise ValueError.
"""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad import dtypes
from ops_helpers import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, check, ids, small_sample, tensor

I32, I64, F16, F32, F64, BOOL = dtypes.int32, dtypes.int64, dtypes.float16, dtypes.float32, dtypes.float64, dtypes.bool
SHAPE3 = (2, 3, 4)


def reduce_dtype(name, dtype):
    if name in ("sum", "prod") and not dtype.is_float:
        return dtypes.uint64 if dtype == dtypes.uint64 else I64
    return dtype


def method(t, name):
    """t's reduction `name` as a function giving a Tensor: max(dim) and min(dim) give their values
    (their indices and gradients: test_api_reduce.py)."""
    def call(*args, **kwargs):
        result = getattr(t, name)(*args, **kwargs)
        return result.values if isinstance(result, tuple) else result
    return call


def integer_total(array: np.ndarray):
    """What sum and prod of bool or integers compute in: int64, uint64 for uint64 (int64 cannot hold it)."""
    if array.dtype.kind not in "biu":
        return None
    return np.uint64 if array.dtype == np.uint64 else np.int64


def reference(name, array, axis, keepdim):
    if name == "sum":
        return np.sum(array, axis=axis, keepdims=keepdim, dtype=integer_total(array))
    if name == "prod":
        return np.prod(array, axis=axis, keepdims=keepdim, dtype=integer_total(array))
    if name == "mean":
        with np.errstate(all="ignore"):
            return np.mean(array.astype(np.float64), axis=axis, keepdims=keepdim).astype(array.dtype)
    return getattr(np, name)(array, axis=axis, keepdims=keepdim)


def data_for(name, dtype, shape=SHAPE3, seed=0):
    if name == "prod":  # small factors: no overflow of int8..int64 products, none of float16
        if dtype.is_float:
            rng = np.random.default_rng(seed)
            return rng.choice([-1.0, 1.0, 0.5, 2.0, -0.5, -2.0, 1.25, 0.75], size=shape).astype(dtype.np)
        return small_sample(dtype, shape=shape, low=-2, high=3, seed=seed)
    return small_sample(dtype, shape=shape, low=-9, high=10, seed=seed)


REDUCE_DTYPES = {"sum": ALL_DTYPES, "prod": ALL_DTYPES, "max": ALL_DTYPES, "min": ALL_DTYPES, "mean": FLOAT_DTYPES}
DTYPE_CASES = [(name, dtype) for name, dts in REDUCE_DTYPES.items() for dtype in dts]


def run_reduce(name, t, axis, keepdim):
    return method(t, name)(axis, keepdim) if axis is not None or keepdim else method(t, name)()


@pytest.mark.parametrize("name,dtype", DTYPE_CASES, ids=[f"{n}-{d.name}" for n, d in DTYPE_CASES])
def test_reduce_every_dtype(name, dtype, device):
    a = data_for(name, dtype)
    x = tensor(a, device)
    out = reduce_dtype(name, dtype)
    for axis, keepdim in ((1, False), (1, True)):
        check(run_reduce(name, x, axis, keepdim), reference(name, a, axis, keepdim), out)


AXES = [None, 1, -1, -3, (0, 2), (-1, 0, 1)]
AXIS_DTYPES = {"sum": (I32, F32), "prod": (F32,), "max": (F32,), "min": (I32,), "mean": (F32,)}
AXIS_CASES = [(name, dtype) for name, dts in AXIS_DTYPES.items() for dtype in dts]


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=[str(a) for a in AXES])
@pytest.mark.parametrize("name,dtype", AXIS_CASES, ids=[f"{n}-{d.name}" for n, d in AXIS_CASES])
def test_reduce_axes(name, dtype, axis, keepdim, device):
    a = data_for(name, dtype, seed=1)
    expected = reference(name, a, axis, keepdim)
    check(method(tensor(a, device), name)(axis, keepdim), expected, reduce_dtype(name, dtype))


@pytest.mark.parametrize("name", ["sum", "max", "mean"])
def test_reduce_dim_keyword(name, device):
    a = data_for(name, F32)
    check(method(tensor(a, device), name)(dim=-2, keepdim=True), reference(name, a, -2, True), F32)


def test_sum_with_dtype_argument(device):
    a = data_for("sum", dtypes.int8)
    check(tensor(a, device).sum(dtype=dtypes.int16), a.sum(dtype=np.int16), dtypes.int16)
    check(tensor(a, device).sum(1, dtype=F64), a.astype(np.float64).sum(1), F64)


# ---- 0-d and size-0 tensors ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean"])
def test_reduce_0d(name, device):
    for dtype in ((F32,) if name == "mean" else (dtypes.int8, F32)):
        a = np.array(-3, dtype=dtype.np)
        out = reduce_dtype(name, dtype)
        for axis in (None, 0, -1):
            for keepdim in (False, True):
                check(run_reduce(name, tensor(a, device), axis, keepdim), a.astype(out.np), out)


@pytest.mark.parametrize("shape,axis", [((0,), None), ((0, 3), 0), ((2, 0, 3), 1), ((2, 0, 3), (0, 1)), ((3, 0), -1)])
def test_sum_prod_mean_over_empty(shape, axis, device):
    for dtype in (F32, BOOL):
        a = np.zeros(shape, dtype=dtype.np)
        x = tensor(a, device)
        check(x.sum(axis), np.sum(a, axis=axis, dtype=np.int64 if not dtype.is_float else None),
              reduce_dtype("sum", dtype))
        if dtype.is_float:
            check(x.prod(axis), np.prod(a, axis=axis), dtype)
            check(x.sum(axis, keepdim=True), np.sum(a, axis=axis, keepdims=True), dtype)
    a = np.zeros(shape, dtype=np.float32)
    with np.errstate(all="ignore"):
        expected = np.mean(a, axis=axis)
    check(tensor(a, device).mean(axis), np.asarray(expected, dtype=np.float32), F32)


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("shape,axis", [((0,), None), ((0,), 0), ((0, 3), 0), ((2, 0, 3), 1), ((2, 0, 3), (0, 1)),
                                        ((0, 3), None), ((3, 0), -1)])
def test_max_min_over_empty_raise(name, shape, axis, device):
    with pytest.raises(ValueError):
        method(tensor(np.zeros(shape, dtype=np.float32), device), name)(axis)


@pytest.mark.parametrize("name", ["max", "min", "sum"])
def test_reduce_size0_tensor_over_nonempty_axis(name, device):
    # shape (0, 3) reduced over axis 1: the result is empty, nothing raises
    a = np.zeros((0, 3), dtype=np.float32)
    check(method(tensor(a, device), name)(1), getattr(np, name)(a, axis=1), F32)
    check(method(tensor(a, device), name)(1, True), getattr(np, name)(a, axis=1, keepdims=True), F32)


# ---- values that matter -------------------------------------------------------------------------

def test_max_min_propagate_nan_and_handle_inf(device):
    a = np.array([[1.0, np.nan, 3.0], [-np.inf, -1.0, np.inf], [-0.5, -2.0, -7.0]], dtype=np.float32)
    for name in ("max", "min"):
        for axis in (None, 0, 1):
            check(method(tensor(a, device), name)(axis), getattr(np, name)(a, axis=axis), F32)
    check(tensor(a, device).sum(1), np.sum(a, axis=1), F32)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=ids(INT_DTYPES))
def test_max_min_at_integer_bounds(dtype, device):
    info = np.iinfo(dtype.np)
    a = np.array([[info.min, 0, info.max], [info.min, info.min, info.min], [info.max, info.max, info.min + 1]],
                 dtype=dtype.np)
    for name in ("max", "min"):
        check(method(tensor(a, device), name)(1), getattr(np, name)(a, axis=1), dtype)
    check(tensor(a, device).sum(0), np.sum(a, axis=0, dtype=integer_total(a)), reduce_dtype("sum", dtype))


def test_bool_reductions(device):
    a = np.array([[True, False, True], [False, False, False]])
    check(tensor(a, device).max(1).values, a.max(1), BOOL)
    check(tensor(a, device).min(1).values, a.min(1), BOOL)
    check(tensor(a, device).sum(1), a.sum(1, dtype=np.int64), I64)
    check(tensor(a, device).sum(), np.array(2, dtype=np.int64), I64)


def test_float16_sum_accumulates_precisely(device):
    # PyTorch accumulates float16 sums in float32: 4096 ones sum to 4096, not 2048
    a = np.ones((4096,), dtype=np.float16)
    check(tensor(a, device).sum(), np.array(4096, dtype=np.float16), F16, rtol=0, atol=0)
    check(tensor(a, device).mean(), np.array(1, dtype=np.float16), F16, rtol=0, atol=0)


def test_int8_sum_does_not_overflow(device):
    a = np.full((300,), 100, dtype=np.int8)
    check(tensor(a, device).sum(), np.array(30000, dtype=np.int64), I64)
    check(tensor(a.astype(bool), device).sum(), np.array(300, dtype=np.int64), I64)


def test_mean_of_integers_raises(device):
    for dtype in (BOOL, dtypes.uint8, I32, I64):
        with pytest.raises(TypeError):
            tensor(np.zeros((2, 3), dtype=dtype.np), device).mean()


# ---- non-contiguous inputs and reductions inside bigger graphs ------------------------------------

NONCONTIG = {
    "transposed": (lambda x: x.T, lambda a: a.T),
    "stepped": (lambda x: x[::2, 1:], lambda a: a[::2, 1:]),
    "flipped": (lambda x: x.flip(1), lambda a: a[:, ::-1]),
    "negative-step": (lambda x: x[:, ::-3], lambda a: a[:, ::-3]),
    "permuted-3d": (lambda x: x.reshape(2, 3, 6).permute(2, 0, 1), lambda a: a.reshape(2, 3, 6).transpose(2, 0, 1)),
    "expanded": (lambda x: x[:, None, :].expand(6, 2, 6), lambda a: np.broadcast_to(a[:, None, :], (6, 2, 6))),
}


@pytest.mark.parametrize("view", list(NONCONTIG))
def test_reduce_non_contiguous(view, device):
    fn, ref = NONCONTIG[view]
    for name, axis in (("sum", 0), ("max", -1), ("mean", None)):
        a = data_for(name, F32, shape=(6, 6), seed=2)
        expected = reference(name, np.ascontiguousarray(ref(a)), axis, False)
        check(method(fn(tensor(a, device)), name)(axis), expected, F32)


def test_softmax_like_graph(device):
    a = small_sample(F32, shape=(3, 5), seed=3)
    x = tensor(a, device)
    shifted = x - x.amax(1, keepdim=True)
    e = shifted.exp()
    result = e / e.sum(1, keepdim=True)
    ea = np.exp(a - a.max(1, keepdims=True))
    check(result, ea / ea.sum(1, keepdims=True), F32, transcendental=True)


def test_reduce_results_combined(device):
    a = small_sample(F32, shape=(4, 5), seed=4)
    x = tensor(a, device)
    check(x.sum(0) + x.max(1).values[:, None], a.sum(0) + a.max(1)[:, None], F32)
    check((x * x).sum(1).sqrt() - x.mean(), np.sqrt((a * a).sum(1)) - a.mean(), F32, transcendental=True)
    check(x.sum(1).max(), np.array(a.sum(1).max(), dtype=np.float32), F32)
    check(x.max(0).values.sum(), np.array(a.max(0).sum(), dtype=np.float32), F32)


def test_reduce_of_reduce_with_same_input_used_twice(device):
    a = small_sample(F32, shape=(4, 5), seed=5)
    x = tensor(a, device)
    m = x.mean(1, keepdim=True)
    var = ((x - m) * (x - m)).mean(1)
    check(var, ((a - a.mean(1, keepdims=True)) ** 2).mean(1), F32)


def test_reduce_of_broadcast_constant(device):
    from lazygrad import Tensor
    check(Tensor.ones(3, 4, device=device).sum(1), np.full((3,), 4, dtype=np.float32), F32)
    check(Tensor.full((2, 3), 7, device=device).sum(), np.array(42, dtype=np.int64), I64)
    check(Tensor.full((2, 3), 2.0, device=device).prod(0), np.full((3,), 4.0, dtype=np.float32), F32)


# ---- shapes big enough for the loop optimizations (multicore, accumulator arrays, tiling) ------------

LARGE_REDUCES = [
    ("sum", F32, (300, 200), 1), ("sum", F32, (300, 200), 0), ("mean", F32, (64, 48), 0),
    ("max", F32, (64, 48), 0), ("min", I32, (64, 48), 0), ("prod", F64, (16, 40), 0),
    ("sum", F32, (6, 16, 10), 1), ("max", F32, (16, 9, 24), (0, 2)), ("sum", dtypes.int8, (128, 300), 0),
    ("sum", F16, (40, 64), 0), ("sum", F32, (512, 96), None),
]


@pytest.mark.parametrize("name,dtype,shape,axis", LARGE_REDUCES,
                         ids=[f"{n}-{d.name}-{'x'.join(map(str, s))}-{a}" for n, d, s, a in LARGE_REDUCES])
def test_reduce_large_and_strided(name, dtype, shape, axis, device):
    if name == "prod":
        a = np.random.default_rng(6).uniform(0.9, 1.1, size=shape).astype(dtype.np)
    else:
        a = small_sample(dtype, shape=shape, low=-4, high=5, seed=6)
    rtol = 1e-2 if dtype == F16 else (1e-5 if dtype == F32 else None)
    check(method(tensor(a, device), name)(axis), reference(name, a, axis, False), reduce_dtype(name, dtype),
          rtol=rtol, atol=1e-4 if dtype == F32 else None)


def test_strided_reduce_of_padded_and_flipped_input(device):
    a = small_sample(F32, shape=(40, 24), seed=7)
    x = tensor(a, device)
    check(x.pad(((3, 1), (2, 6)), value=1.0).sum(0), np.pad(a, ((3, 1), (2, 6)), constant_values=1.0).sum(0), F32,
          atol=1e-4)
    check(x.flip(1).T.amax(1), a[:, ::-1].T.max(1), F32)
    check(x[::3, 1::2].sum(0), a[::3, 1::2].sum(0), F32, atol=1e-4)


def test_a_long_float32_sum_is_accurate(device):
    """2^24 float32 0.1s, the worst case for rounding (every addition rounds the same way): one
    running sum per SIMD lane gave 1,649,062 on CPU and 1,935,089 on OPENCL (exact 1,677,721.6,
    numpy 1,677,721.9). Summed in stages of lazy.ACCUMULATION_LIMIT terms: CPU within 1e-5, OPENCL
    within 1e-4 (its work-items add their 4096 terms one after another, without SIMD lanes), CUDA
    within 1e-5 (a warp's lanes share each sum: opts.py _lane_axis)."""
    exact = float(np.float32(0.1)) * 2 ** 24
    tolerance = 1e-4 if device == "OPENCL" else 1e-5
    total = tensor(np.full(2 ** 24, 0.1, np.float32), device).sum().item()
    assert abs(total - exact) / exact < tolerance
    mean = tensor(np.full(2 ** 24, 0.1, np.float32), device).mean().item()
    assert abs(mean - float(np.float32(0.1))) / 0.1 < tolerance


@pytest.mark.parametrize("shape, axis", [((16, 8, 112, 112), (0, 2, 3)), ((3, 2 ** 20), 1), ((2 ** 17, 8), 0),
                                         ((1000, 1000), None), ((5, 9973), 1)])
def test_long_sums_match_float64_closely(shape, axis, device):
    """Batch-norm statistics, long rows, long columns, everything, and a prime length (which cannot
    be split into stages)."""
    values = np.random.default_rng(1).random(shape, dtype=np.float32)
    expected = values.astype(np.float64).sum(axis=axis)
    np.testing.assert_allclose(tensor(values, device).sum(axis).numpy(), expected, rtol=2e-6)


def test_a_long_float16_sum_accumulates_in_float32_across_stages(device):
    values = np.full(3 * 2 ** 14, 2.0 ** -4, np.float16)  # 3072: every partial sum is exact in float32
    check(tensor(values, device).sum(), np.array(3072, dtype=np.float16), F16, rtol=0, atol=0)
