"""Helpers shared by the op tests: devices, dtype lists, input data and comparison with numpy.

Expected values are always computed with numpy, following PyTorch's semantics (type promotion,
floor division, remainder with the divisor's sign, ...); the NPY device is tested like any other
device, never used as the oracle here (test_random_graphs.py compares devices with NPY).
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

from lazygrad import Tensor, dtypes
from lazygrad.devices import DeviceUnavailable, get_device
from lazygrad.dtype import DType

ALL_DTYPES = (dtypes.bool, dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
              dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64)
INT_DTYPES = tuple(d for d in ALL_DTYPES if d.is_int)
FLOAT_DTYPES = tuple(d for d in ALL_DTYPES if d.is_float)
SIGNED_INT_DTYPES = tuple(d for d in INT_DTYPES if not d.is_unsigned)
NON_BOOL_DTYPES = INT_DTYPES + FLOAT_DTYPES


# Devices other than CPU and NPY that the op tests also run on, when this machine can run a kernel
# on them (OPENCL through PoCL runs anywhere `pip install .[opencl]` worked; CUDA needs a GPU).
# Each compiled device adds about as much compile time to a cold run as CPU does.
EXTRA_DEVICES: tuple[str, ...] = ("OPENCL", "CUDA")


@functools.lru_cache(maxsize=None)
def unavailable_reason(device: str) -> str | None:
    """Why this machine lacks device (its package, runtime or hardware: `DeviceUnavailable`), or None
    where it has it. A device that is present but fails (a broken driver, a wrong result) is not
    skipped: its tests run and fail, and `test_every_present_device_runs_a_kernel` says why first."""
    try:
        get_device(device)
    except DeviceUnavailable as error:
        return str(error).splitlines()[0]
    return None


def available_devices() -> list[str]:
    """The devices the op tests run on: CPU and NPY always, plus each of EXTRA_DEVICES this machine
    has (the others are named, with the reason, in pytest's header)."""
    return ["CPU", "NPY"] + [name for name in EXTRA_DEVICES if unavailable_reason(name) is None]


# PoCL builds an OpenCL program in about half a second, several times gcc's time for the same kernel:
# with an empty cache the op, nn and jit tests on OPENCL were three quarters of `make test`'s time
# (2,060 of 2,690 test-seconds; the whole run 23.7 min on 2 cores). Their OPENCL cases carry an
# opt-in marker (test/conftest.py): `make test` leaves them out, `.ci/run` runs them with `-m opencl_ops`.
OPT_IN_DEVICE_MARKERS = {"OPENCL": "opencl_ops"}


def device_params(devices) -> list:
    """`devices` as pytest parameters, each device of OPT_IN_DEVICE_MARKERS with its marker."""
    return [pytest.param(device, marks=getattr(pytest.mark, OPT_IN_DEVICE_MARKERS[device]))
            if device in OPT_IN_DEVICE_MARKERS else device for device in devices]


def ids(values) -> list[str]:
    return [v.name if isinstance(v, DType) else str(v) for v in values]


# ---- input data ------------------------------------------------------------------------------

SHAPE = (4, 6)  # 24 elements; one shape for most tests keeps the number of distinct kernels low

_FLOATS = [-100.0, -10.0, -3.75, -2.5, -1.0, -0.5, -1e-3, -0.0, 0.0, 1e-3, 0.1, 0.5,
           1.0, 2.0, 2.5, 3.14159, 7.25, 10.0, 100.0, 42.0, -42.0, np.nan, np.inf, -np.inf]
_FLOATS_FINITE = [-100.0, -10.0, -3.75, -2.5, -1.0, -0.5, -1e-3, -0.25, 0.0, 1e-3, 0.1, 0.5,
                  1.0, 2.0, 2.5, 3.14159, 7.25, 10.0, 100.0, 42.0, -42.0, 0.75, -7.0, 5.5]
_INTS = {
    "uint8": [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 13, 17, 25, 31, 64, 99, 100, 127, 128, 129, 200, 254, 255, 6],
    "int8": [0, 1, -1, 2, -2, 3, -3, 5, -7, 9, -13, 17, -25, 31, -64, 100, -100, 127, -128, 126, -127, 4,
             -6, 8],
    "int16": [0, 1, -1, 2, -2, 3, -3, 5, -7, 9, -13, 300, -300, 1000, -1000, 32767, -32768, 12345,
              -12345, 127, -128, 4, -6, 8],
    "int32": [0, 1, -1, 2, -2, 3, -3, 5, -7, 9, -13, 300, -300, 70000, -70000, 2**31 - 1, -2**31,
              123456789, -123456789, 127, -128, 4, -6, 8],
    "int64": [0, 1, -1, 2, -2, 3, -3, 5, -7, 9, -13, 300, -300, 2**40, -2**40, 2**63 - 1, -2**63,
              1234567890123, -1234567890123, 127, -128, 4, -6, 8],
    "uint16": [0, 1, 2, 3, 4, 5, 7, 8, 9, 13, 255, 256, 300, 1000, 32767, 32768, 32769, 40000, 65534, 65535,
               12345, 127, 128, 6],
    "uint32": [0, 1, 2, 3, 4, 5, 7, 8, 9, 13, 300, 70000, 2**31 - 1, 2**31, 2**31 + 1, 3000000000, 2**32 - 2,
               2**32 - 1, 123456789, 65535, 65536, 127, 128, 6],
    "uint64": [0, 1, 2, 3, 4, 5, 7, 8, 9, 13, 300, 2**40, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2, 2**64 - 1,
               12345678901234567890, 1234567890123, 2**32, 2**32 - 1, 127, 128, 6],
}


def sample(dtype: DType, shape=SHAPE, finite: bool = False, seed: int = 0) -> np.ndarray:
    """Deterministic inputs of `dtype`: negatives, zeros, bounds of integer types, NaN/inf for floats."""
    count = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    if dtype.is_bool:
        values = np.array([True, False, True, True, False, False] * 4)
    elif dtype.is_int:
        values = np.array(_INTS[dtype.name], dtype=dtype.np)
    else:
        source = _FLOATS_FINITE if finite else _FLOATS
        values = np.array(source, dtype=np.float64)
        if dtype == dtypes.float16:  # keep float16 out of overflow for most ops
            values = np.where(np.isfinite(values), np.clip(values, -60, 60), values)
        values = values.astype(dtype.np)
    values = rng.permutation(values) if seed else values
    values = np.resize(values, count)
    return values.reshape(shape).astype(dtype.np)


def small_sample(dtype: DType, shape=SHAPE, low: int = -9, high: int = 10, seed: int = 1) -> np.ndarray:
    """Small values, no overflow anywhere: for ops whose results must not wrap or lose precision."""
    rng = np.random.default_rng(seed)
    if dtype.is_bool:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.is_unsigned:
        low = 0
    values = rng.integers(low, high, size=shape)
    if dtype.is_float:
        values = values + rng.choice([0.0, 0.25, 0.5, 0.75], size=shape)
    return values.astype(dtype.np)


def tensor(array, device: str) -> Tensor:
    """A Tensor holding a copy of `array` (0-d arrays are built as (1,) and reshaped: the
    constructor's own handling of 0-d arrays is tested separately in test_elementwise.py)."""
    array = np.asarray(array)
    if array.ndim == 0:
        return Tensor(array.reshape(1), dtype=dtypes.from_any(array.dtype), device=device).reshape(())
    return Tensor(array, dtype=dtypes.from_any(array.dtype), device=device)


# ---- comparing -------------------------------------------------------------------------------

def default_tolerance(dtype: DType, transcendental: bool = False) -> tuple[float, float]:
    if dtype == dtypes.float16:
        return 1e-2, 1e-3
    if dtype == dtypes.float32:
        return (2e-5 if transcendental else 1e-5), 1e-6
    if dtype == dtypes.float64:
        return 1e-10, 1e-12
    return 0.0, 0.0


def check(result, expected, dtype: DType | None = None, rtol: float | None = None,
          atol: float | None = None, transcendental: bool = False) -> None:
    """`result` (a Tensor) has `expected`'s shape, the given dtype (default: expected's) and values."""
    expected = np.asarray(expected)
    dtype = dtype or dtypes.from_any(expected.dtype)
    assert isinstance(result, Tensor), f"expected a Tensor, got {type(result).__name__}"
    assert result.dtype == dtype, f"dtype: got {result.dtype.name}, expected {dtype.name}"
    assert result.shape == expected.shape, f"shape: got {result.shape}, expected {expected.shape}"
    actual = result.numpy()
    assert actual.dtype == dtype.np, f"numpy() dtype: got {actual.dtype}, expected {dtype.np}"
    assert actual.shape == expected.shape
    if dtype.is_float:
        default_rtol, default_atol = default_tolerance(dtype, transcendental)
        rtol = default_rtol if rtol is None else rtol
        atol = default_atol if atol is None else atol
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(dtype.np).astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(actual, expected.astype(dtype.np))
