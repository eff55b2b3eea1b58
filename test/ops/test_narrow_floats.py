"""The 8- and 4-bit floats (float8 e4m3fn, e5m2 and their fnuz variants, e8m0fnu; float4 e2m1fn) on every
device against ml_dtypes: conversions at every rounding boundary of each format, every code
decoded, ops computed in float32 and rounded once, matmuls with float8 and float4 weights, MX
block scales, promotion, and safetensors."""
import json

import numpy as np
import pytest

from lazygrad import Tensor, dtypes, finfo
from lazygrad.dtype import promote_types
from lazygrad.nn.state import safe_load, safe_save

FLOAT8 = [dtypes.float8_e4m3fn, dtypes.float8_e5m2, dtypes.float8_e4m3fnuz, dtypes.float8_e5m2fnuz]
# formats with signed values (e8m0 has none: its negatives are NaN)
SIGNED = FLOAT8 + [dtypes.float4_e2m1fn]
NARROW = SIGNED + [dtypes.float8_e8m0fnu]


def every_code(dtype) -> np.ndarray:
    """Each code of the format once (float4's 16, one per byte), as that dtype."""
    return np.arange(16 if dtype == dtypes.float4_e2m1fn else 256, dtype=np.uint8).view(dtype.np)


def codes(array: np.ndarray) -> np.ndarray:
    return np.asarray(array).view(np.uint8)


def boundary_values(dtype) -> np.ndarray:
    """Every finite value of the format, the midpoints between neighbours (the ties) and the float32
    values just either side of each, past the largest too, both signs, and the specials."""
    finite = every_code(dtype).astype(np.float64)
    finite = np.unique(finite[np.isfinite(finite) & (finite >= 0)])
    largest = finite[-1]
    steps = np.append(finite, [largest + (largest - finite[-2]), 2 * largest, 4 * largest])
    middles = ((steps[:-1] + steps[1:]) / 2).astype(np.float32)
    around = np.concatenate([middles, np.nextafter(middles, np.float32(np.inf)),
                             np.nextafter(middles, np.float32(0)), steps.astype(np.float32)])
    # float32's subnormals too, where e8m0's smallest code lies (2^-127)
    subnormal = np.array([2.0 ** -127, 2.0 ** -128, 1e-39, 8e-39, 1.1e-38, 2.0 ** -126], np.float32)
    subnormal = np.concatenate([subnormal, np.nextafter(subnormal, np.float32(np.inf)), np.nextafter(subnormal, np.float32(0))])
    values = np.concatenate([around, -around, subnormal,
                             np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1e-30, 3e38], np.float32)])
    return values.astype(np.float32)


@pytest.mark.parametrize("dtype", NARROW, ids=lambda d: d.name)
def test_float32_converts_as_ml_dtypes_at_every_rounding_boundary(dtype, device):
    values = boundary_values(dtype)
    converted = Tensor(values, device=device).cast(dtype)
    assert converted.dtype == dtype
    np.testing.assert_array_equal(codes(converted.numpy()), codes(values.astype(dtype.np)))


@pytest.mark.parametrize("dtype", NARROW, ids=lambda d: d.name)
def test_every_code_decodes_to_its_value(dtype, device):
    every = every_code(dtype)
    decoded = Tensor(every, device=device).float().numpy()
    np.testing.assert_array_equal(decoded, every.astype(np.float32))  # NaN where NaN
    np.testing.assert_array_equal(codes(Tensor(every, device=device).numpy()), np.arange(len(every)))


@pytest.mark.parametrize("dtype", NARROW, ids=lambda d: d.name)
def test_ops_compute_in_float32_and_round_once(dtype, device):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(200) * 8).astype(np.float32).astype(dtype.np)
    y = (rng.standard_normal(200) * 8).astype(np.float32).astype(dtype.np)
    tx, ty = Tensor(x, device=device), Tensor(y, device=device)
    wide_x, wide_y = x.astype(np.float32), y.astype(np.float32)
    for result, expected in (((tx * ty), wide_x * wide_y), ((tx + ty), wide_x + wide_y), ((tx - 1.5), wide_x - 1.5)):
        assert result.dtype == dtype
        np.testing.assert_array_equal(codes(result.numpy()), codes(expected.astype(dtype.np)))
    np.testing.assert_array_equal((tx < ty).numpy(), wide_x < wide_y)
    small = Tensor((wide_x / 4).astype(dtype.np), device=device)  # exp and log, one rounding: within a code
    shifted = (np.abs(wide_x) + 1).astype(dtype.np)  # abs() + 1 is an op of its own: rounded to the format
    for result, expected in ((small.exp(), np.exp((wide_x / 4).astype(dtype.np).astype(np.float64))),
                             ((tx.abs() + 1).log(), np.log(shifted.astype(np.float64)))):
        gap = np.abs(codes(result.numpy()).astype(int) - codes(expected.astype(np.float32).astype(dtype.np)).astype(int))
        assert gap.max() <= 1


@pytest.mark.parametrize("dtype", SIGNED, ids=lambda d: d.name)
def test_a_matmul_with_float8_weights(dtype, device):
    rng = np.random.default_rng(1)
    activations = rng.standard_normal((16, 64)).astype(np.float32)
    weights = (rng.standard_normal((64, 24)) * 0.5).astype(np.float32).astype(dtype.np)
    mixed = Tensor(activations, device=device) @ Tensor(weights, device=device)  # float32: promotion
    assert mixed.dtype == dtypes.float32
    np.testing.assert_allclose(mixed.numpy(), activations @ weights.astype(np.float32), rtol=1e-5, atol=1e-5)
    both = Tensor(activations.astype(dtype.np), device=device) @ Tensor(weights, device=device)
    exact = activations.astype(dtype.np).astype(np.float64) @ weights.astype(np.float64)
    assert both.dtype == dtype  # accumulated in float32, rounded once: at most a code from the exact sum's
    difference = np.abs(codes(both.numpy()).astype(int) - codes(exact.astype(np.float32).astype(dtype.np)).astype(int))
    assert difference.max() <= 1


def test_mx_block_scales(device):
    """An MX-style tensor: float4 values times an e8m0 scale per block of 32, computed in float32."""
    rng = np.random.default_rng(2)
    values = (rng.standard_normal((4, 64)) * 3).astype(np.float32).astype(dtypes.float4_e2m1fn.np)
    scales = (2.0 ** rng.integers(-4, 5, (4, 2, 1))).astype(np.float32).astype(dtypes.float8_e8m0fnu.np)
    blocks = Tensor(values, device=device).float().reshape(4, 2, 32) * Tensor(scales, device=device).float()
    expected = values.astype(np.float32).reshape(4, 2, 32) * scales.astype(np.float32)
    np.testing.assert_array_equal(blocks.numpy(), expected)


def test_promotion_and_limits():
    assert promote_types(dtypes.float8_e4m3fn, dtypes.float8_e5m2) == dtypes.float32
    assert promote_types(dtypes.float8_e4m3fn, dtypes.float16) == dtypes.float16
    assert promote_types(dtypes.float8_e5m2, dtypes.bfloat16) == dtypes.bfloat16
    assert promote_types(dtypes.float8_e4m3fn, dtypes.int32) == dtypes.float8_e4m3fn
    assert (finfo(dtypes.float8_e4m3fn).max, finfo(dtypes.float8_e5m2).max) == (448.0, 57344.0)
    assert finfo(dtypes.float8_e4m3fn).eps == 0.125
    assert (finfo(dtypes.float4_e2m1fn).max, finfo(dtypes.float8_e8m0fnu).max) == (6.0, 2.0 ** 127)
    assert promote_types(dtypes.float4_e2m1fn, dtypes.float8_e8m0fnu) == dtypes.float32


@pytest.mark.parametrize("dtype", FLOAT8 + [dtypes.float8_e8m0fnu], ids=lambda d: d.name)
def test_safetensors_keep_the_codes(dtype, tmp_path):
    every = every_code(dtype)
    safe_save({"w": Tensor(every)}, tmp_path / "w.safetensors")
    loaded = safe_load(tmp_path / "w.safetensors")["w"]
    assert loaded.dtype == dtype
    np.testing.assert_array_equal(codes(loaded.numpy()), np.arange(256))
    # the safetensors package writes the same entry for this array (its loader has no numpy float8s)
    safetensors = pytest.importorskip("safetensors.numpy")
    ours, theirs = (tmp_path / "w.safetensors").read_bytes(), safetensors.save({"w": every})
    header = [json.loads(data[8:8 + int.from_bytes(data[:8], "little")])["w"] for data in (ours, theirs)]
    assert header[0] == header[1] and ours[-256:] == theirs[-256:]


@pytest.mark.parametrize("count", [16, 7, 0])
def test_safetensors_pack_float4_two_to_a_byte(count, tmp_path):
    values = every_code(dtypes.float4_e2m1fn)[np.arange(count) % 16]
    safe_save({"w": Tensor(values)}, tmp_path / "w.safetensors")
    data = (tmp_path / "w.safetensors").read_bytes()
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])["w"]
    assert header["dtype"] == "F4" and header["shape"] == [count]
    begin, end = header["data_offsets"]
    raw = np.frombuffer(data, np.uint8)[8 + int.from_bytes(data[:8], "little"):][begin:end]
    assert len(raw) == (count + 1) // 2 and all(raw[i // 2] >> 4 * (i % 2) & 15 == codes(values)[i] for i in range(count))
    for mmap in (False, True):
        loaded = safe_load(tmp_path / "w.safetensors", mmap=mmap)["w"]
        assert loaded.dtype == dtypes.float4_e2m1fn
        np.testing.assert_array_equal(codes(loaded.numpy()), codes(values))
