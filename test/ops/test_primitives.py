"""Every elementwise primitive of the op table against its own numpy reference (`OpDef.ref`), on
every device, for every dtype it admits: the cases come from the table, so a new op is tested
here by being added there. Inputs hold the edges (signed zeros, NaN, infinities, the integer
limits, shifts past the width); `OpDef.ulps` is the only tolerance."""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor, dtypes
from lazygrad.ops import ELEMENTWISE, OPS

FLOATS = [-100.0, -10.0, -3.75, -2.5, -1.0, -0.5, -1e-3, -0.0, 0.0, 1e-3, 0.1, 0.5,
          1.0, 2.0, 2.5, 3.14159, 7.25, 10.0, 100.0, 42.0, np.nan, np.inf, -np.inf, 1e-40]
OTHER_FLOATS = [3.0, -7.0, 0.5, 0.0, -0.0, 2.0, 1e-3, -4.0, 9.0, np.nan, 0.25, -0.5,
                1.0, -1.0, 6.5, 3.14159, np.inf, 10.0, -100.0, 42.0, 1.0, 2.0, -np.inf, 5.0]
DTYPES = [dtypes.float32, dtypes.float64, dtypes.float16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.bool]


def _values(dtype, other: bool) -> np.ndarray:
    if dtype.is_float:
        return np.array(OTHER_FLOATS if other else FLOATS, dtype=dtype.np)
    if dtype.is_bool:
        return np.arange(24) % (3 if other else 2) == 0
    info = np.iinfo(dtype.np)
    edges = [info.min, info.max, info.min + 1, info.max - 1]
    values = np.array([0, 1, 2, 3, 5, 7, 9, 13, 17, 100, 127] + edges + list(range(30, 39)), dtype=np.int64)
    values = values[(values >= info.min) & (values <= info.max)]
    values = np.resize(values, 24)
    if other:
        values = np.roll(values, 7)
        if info.min < 0:
            values[::3] = np.where(values[::3] == info.min, info.max, -values[::3])
    return values.astype(dtype.np)


def _cases():
    for name in sorted(ELEMENTWISE - {"CAST", "BITCAST"}):
        op = OPS[name]
        for dtype in DTYPES:
            if op.float_only and not dtype.is_float:
                continue
            if op.integer_only and dtype.is_float or name in ("SHL", "SHR") and dtype.is_bool:
                continue
            if dtype.is_bool and name not in ("AND", "OR", "XOR", "MAX", "CMPLT", "CMPNE", "WHERE"):
                continue
            yield pytest.param(name, dtype, id=f"{name}-{dtype.name}")


def _arrays(name: str, dtype) -> list[np.ndarray]:
    first, second = _values(dtype, False), _values(dtype, True)
    if name in ("SHL", "SHR"):
        second = (np.arange(24) % (8 * dtype.itemsize + 3)).astype(dtype.np)  # past the width too
    return {1: [first], 2: [first, second], 3: [np.arange(24) % 3 == 0, first, second]}[OPS[name].arity]


@pytest.mark.parametrize("name, dtype", list(_cases()))
def test_every_primitive_matches_its_numpy_reference(device, name, dtype):
    arrays = [array.reshape(4, 6) for array in _arrays(name, dtype)]
    with np.errstate(all="ignore"):
        expected = OPS[name].ref(*arrays)
    tensors = [Tensor(array, device=device) for array in arrays]
    actual = Tensor(tensors[0].lazydata.alu(OPS[name], *[tensor.lazydata for tensor in tensors[1:]])).numpy()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if expected.dtype.kind == "f":
        with np.errstate(invalid="ignore"):  # inf - inf, and the spacing of inf and NaN
            apart = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
            allowed = OPS[name].ulps * np.spacing(np.abs(expected)).astype(np.float64)
        close = (actual == expected) | (np.isnan(actual) & np.isnan(expected)) | (apart <= allowed)
        assert close.all(), f"{name} {dtype.name}: {actual[~close]} where numpy gives {expected[~close]}"
        same_zero = (expected == 0) & ~np.isnan(actual)
        assert (np.signbit(actual[same_zero]) == np.signbit(expected[same_zero])).all(), "a zero's sign differs"
    else:
        np.testing.assert_array_equal(actual, expected)
