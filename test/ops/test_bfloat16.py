"""bfloat16 on every device against ml_dtypes' numpy bfloat16 and PyTorch's rules: conversions round
to nearest even, every op computes in float32 and rounds once (a sum or a matmul accumulates in
float32), promotion as PyTorch's, gradients in bfloat16, and the formats that store it."""
import math

import ml_dtypes
import numpy as np
import pytest

from lazygrad import Tensor, dtypes
import lazygrad.nn.functional as F
from lazygrad.dtype import promote_types
from lazygrad.nn.state import safe_load, safe_save

BF16 = ml_dtypes.bfloat16


def bits(array: np.ndarray) -> np.ndarray:
    return np.asarray(array).view(np.uint16)


def random_bf16(shape, seed=0, scale=4.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32).astype(BF16)


def assert_within_one_ulp(actual: np.ndarray, expected: np.ndarray) -> None:
    """bfloat16 values equal or neighbours (the float32 result before rounding may differ in its
    last bit from numpy's, which moves a value at a rounding boundary by one bfloat16 step)."""
    assert actual.dtype == BF16
    a, e = actual.astype(np.float32), expected.astype(np.float32)
    both_nan = np.isnan(a) & np.isnan(e)
    step = np.abs(e) * 2.0 ** -7 + 1e-38
    assert ((np.abs(a - e) <= step) | both_nan).all(), f"{a[np.abs(a - e) > step][:5]} vs {e[np.abs(a - e) > step][:5]}"


def test_converting_float32_rounds_to_nearest_even_and_keeps_specials(device):
    values = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 3.14159, -0.0, 1e-40, -1e-45,
                       3.4e38, -3.4e38, np.inf, -np.inf, 65504.0, 2.0 ** -133], np.float32)
    converted = Tensor(values, device=device).cast(dtypes.bfloat16)
    assert converted.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(bits(converted.numpy()), bits(values.astype(BF16)))
    nan = Tensor(np.array([np.nan, -np.nan], np.float32), device=device).cast(dtypes.bfloat16).numpy()
    assert np.isnan(nan.astype(np.float32)).all()
    back = converted.float().numpy()
    np.testing.assert_array_equal(back, values.astype(BF16).astype(np.float32))  # exact: bfloat16 is float32's top half


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
                                   dtypes.float16, dtypes.float64])
def test_conversions_to_and_from_other_dtypes_go_through_float32(device, dtype):
    values = np.array([0, 1, -3, 100, 257, 2 ** 20 + 1, -(2 ** 40) - 1, 0.5], np.float64)
    if dtype.is_bool:
        source = values != 0
    else:
        low, high = (np.iinfo(dtype.np).min, np.iinfo(dtype.np).max) if dtype.is_int else (-65504, 65504)
        source = np.clip(values, low, high).astype(dtype.np)
    converted = Tensor(source, device=device).cast(dtypes.bfloat16).numpy()
    np.testing.assert_array_equal(bits(converted), bits(source.astype(np.float32).astype(BF16)))
    back = Tensor(converted, device=device).cast(dtype).numpy()
    wide = converted.astype(np.float64)
    # rounding can carry a value past an integer type's range (32767 -> 32768), where a conversion
    # is the device's own (OpenCL saturates, C on x86 wraps): only values in range are compared
    fits = (wide >= np.iinfo(dtype.np).min) & (wide <= np.iinfo(dtype.np).max) if dtype.is_int else np.isfinite(wide)
    np.testing.assert_array_equal(back[fits], converted[fits].astype(np.float32).astype(dtype.np))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum"])
def test_binary_ops_compute_in_float32_and_round_once(device, op):
    x, y = random_bf16((7, 33), 1), random_bf16((7, 33), 2)
    y[y == 0] = BF16(1)
    function = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum}[op]
    result = getattr(Tensor(x, device=device), op)(Tensor(y, device=device)).numpy()
    assert result.dtype == BF16
    # float32's result is correctly rounded, so rounding it again is what PyTorch gives, bit for bit
    np.testing.assert_array_equal(bits(result), bits(function(x.astype(np.float32), y.astype(np.float32)).astype(BF16)))


@pytest.mark.parametrize("op", ["exp", "log", "sqrt", "sin", "tanh", "sigmoid", "relu", "neg", "abs"])
def test_unary_ops_compute_in_float32_and_round_once(device, op):
    x = random_bf16((5, 40), 3, scale=2.0)
    if op in ("log", "sqrt"):
        x = np.abs(x) + BF16(0.125)
    reference = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "tanh": np.tanh,
                 "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "relu": lambda v: np.maximum(v, 0), "neg": np.negative,
                 "abs": np.abs}[op]
    result = getattr(Tensor(x, device=device), op)().numpy()
    assert_within_one_ulp(result, reference(x.astype(np.float64)).astype(np.float32).astype(BF16))


def test_comparisons_and_where_are_exact(device):
    x, y = random_bf16((50,), 4), random_bf16((50,), 5)
    tx, ty = Tensor(x, device=device), Tensor(y, device=device)
    np.testing.assert_array_equal((tx < ty).numpy(), x.astype(np.float32) < y.astype(np.float32))
    np.testing.assert_array_equal((tx == tx).numpy(), np.ones(50, bool))
    np.testing.assert_array_equal(bits((tx < ty).where(tx, ty).numpy()), bits(np.where(x < y, x, y)))


def test_promotion_follows_pytorch():
    assert promote_types(dtypes.bfloat16, dtypes.float16) == dtypes.float32
    assert promote_types(dtypes.bfloat16, dtypes.float32) == dtypes.float32
    assert promote_types(dtypes.bfloat16, dtypes.float64) == dtypes.float64
    assert promote_types(dtypes.bfloat16, dtypes.int64) == dtypes.bfloat16
    assert promote_types(dtypes.bfloat16, dtypes.bool) == dtypes.bfloat16
    x = Tensor(np.ones(3, BF16))
    assert (x + 2.5).dtype == dtypes.bfloat16 and (x + 2).dtype == dtypes.bfloat16
    assert (x + Tensor(np.ones(3, np.int32))).dtype == dtypes.bfloat16
    assert (x + Tensor(np.ones(3, np.float16))).dtype == dtypes.float32
    assert (x * Tensor(np.ones(3, np.float32))).dtype == dtypes.float32


def test_a_sum_accumulates_in_float32(device):
    # accumulated in bfloat16, 256 + 1 rounds back to 256 and the sum of 1000 ones would stop there
    ones = Tensor(np.ones(1000, BF16), device=device)
    assert ones.sum().numpy() == 1000 and ones.sum().dtype == dtypes.bfloat16
    x = random_bf16((16, 300), 6)
    np.testing.assert_array_equal(bits(Tensor(x, device=device).sum(1).numpy()),
                                  bits(x.astype(np.float64).sum(1).astype(np.float32).astype(BF16)))
    np.testing.assert_array_equal(bits(Tensor(x, device=device).amax(1).numpy()), bits(x.max(1)))
    assert_within_one_ulp(Tensor(x, device=device).mean(0).numpy(), x.astype(np.float64).mean(0).astype(BF16))


def test_a_matmul_multiplies_exactly_and_accumulates_in_float32(device):
    a, b = random_bf16((24, 96), 7, 1.0), random_bf16((96, 40), 8, 1.0)
    result = (Tensor(a, device=device) @ Tensor(b, device=device)).numpy()
    assert result.dtype == BF16
    assert_within_one_ulp(result, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32).astype(BF16))


def test_gradients_are_bfloat16_and_right(device):
    x = Tensor(random_bf16((4, 8), 9), device=device, requires_grad=True)
    w = Tensor(random_bf16((4, 8), 10), device=device)
    (x * w).sum().backward()
    assert x.grad.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(bits(x.grad.numpy()), bits(w.numpy()))
    y = Tensor(np.array([0.5, -1.0, 2.0], BF16), device=device, requires_grad=True)
    (y * y).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy().astype(np.float32), [1.0, -2.0, 4.0])


def test_a_bfloat16_model_trains(device):
    """A linear regression in bfloat16 parameters fits as float32 does, to bfloat16's precision."""
    from lazygrad.nn import Linear
    from lazygrad.nn.optim import SGD
    rng = np.random.default_rng(11)
    inputs = rng.standard_normal((64, 3)).astype(np.float32)
    targets = inputs @ np.array([[1.5], [-2.0], [0.5]], np.float32) + 0.25
    layer = Linear(3, 1)
    layer.weight = Tensor(layer.weight.numpy(), device=device).cast(dtypes.bfloat16).realize().requires_grad_()
    layer.bias = Tensor(layer.bias.numpy(), device=device).cast(dtypes.bfloat16).realize().requires_grad_()
    optimizer = SGD([layer.weight, layer.bias], lr=0.1)
    x = Tensor(inputs, device=device).cast(dtypes.bfloat16)
    y = Tensor(targets, device=device).cast(dtypes.bfloat16)
    for _ in range(60):
        optimizer.zero_grad()
        loss = ((layer(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
    assert layer.weight.dtype == dtypes.bfloat16 and loss.dtype == dtypes.bfloat16
    np.testing.assert_allclose(layer.weight.float().numpy(), [[1.5, -2.0, 0.5]], atol=0.05)
    assert float(loss.float().item()) < 0.01


def test_numpy_and_safetensors_keep_the_bits(device, tmp_path):
    x = random_bf16((3, 5), 12)
    tensor = Tensor(x, device=device)
    assert tensor.dtype == dtypes.bfloat16 and tensor.numpy().dtype == BF16
    np.testing.assert_array_equal(bits(tensor.numpy()), bits(x))
    path = tmp_path / "weights.safetensors"
    safe_save({"w": tensor}, path)
    loaded = safe_load(path, device=device)["w"]
    assert loaded.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(bits(loaded.numpy()), bits(x))


def test_finfo_matches_pytorch():
    from lazygrad import finfo
    info = finfo(dtypes.bfloat16)
    assert (info.bits, info.eps, info.max, info.tiny) == (16, 2.0 ** -7, float(ml_dtypes.finfo(BF16).max), 2.0 ** -126)
    assert math.isclose(info.resolution, 0.01)


COMPOSITES = {
    "pow": lambda x: x ** 2.5, "rsqrt": lambda x: x.abs().rsqrt(), "tan": lambda x: (x / 8).tan(),
    "erf": lambda x: x.erf(), "elu": lambda x: x.elu(), "selu": lambda x: x.selu(), "mish": lambda x: x.mish(),
    "logsigmoid": lambda x: x.logsigmoid(), "softsign": lambda x: x.softsign(),
    "hardswish": lambda x: x.hardswish(), "gelu": lambda x: x.gelu(), "softplus": lambda x: x.softplus(),
    "softmax": lambda x: x.softmax(-1), "log_softmax": lambda x: x.log_softmax(-1), "var": lambda x: x.var(-1),
    "layer_norm": lambda x: x.layer_norm((x.shape[-1],)), "normalize": lambda x: F.normalize(x, dim=-1),
    "mse_loss": lambda x: F.mse_loss(x, x.flip(-1)), "floordiv": lambda x: x // 0.75,
}


@pytest.mark.parametrize("name", COMPOSITES)
def test_composite_functions_round_once_as_pytorchs_kernels(name, device):
    """Functions PyTorch runs as one kernel give float32's result rounded once, whatever primitives
    lazygrad composes them of (each would round its own result)."""
    x = random_bf16((6, 32), 13, scale=1.5)
    function = COMPOSITES[name]
    result = function(Tensor(x, device=device))
    expected = function(Tensor(x.astype(np.float32), device=device)).numpy()
    assert result.dtype == dtypes.bfloat16
    assert_within_one_ulp(result.numpy(), expected.astype(BF16))  # the same float32 kernels, up to fma contraction
