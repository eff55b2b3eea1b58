"""Values computed from parameters alone, kept between eager calls (nn/parameter_values.py): an
eval-mode batch norm builds its scale and shift once, takes them again while its parameters are
unchanged, computes them anew once one is written, and builds them as before where a gradient,
a jit capture or a pending write needs that."""
import numpy as np
import pytest

import lazygrad.lazy as lazy
import lazygrad.nn as nn
from lazygrad import Tensor, no_grad, stats
from lazygrad.jit import jit

rng = np.random.default_rng(5)
CHANNELS = 4


def batch_norm_layer(device: str = "CPU") -> nn.BatchNorm2d:
    layer = nn.BatchNorm2d(CHANNELS, device=device).eval()
    with no_grad():
        for tensor, low, high in ((layer.weight, 0.5, 2), (layer.bias, -1, 1), (layer.running_mean, -1, 1),
                                  (layer.running_var, 0.5, 2)):
            tensor.assign(Tensor(rng.uniform(low, high, CHANNELS).astype(np.float32), device=device)).realize()
    return layer


def expected(layer: nn.BatchNorm2d, x: np.ndarray) -> np.ndarray:
    channel = (1, CHANNELS, 1, 1)
    mean, var, weight, bias = (t.numpy().astype(np.float64).reshape(channel) for t in
                               (layer.running_mean, layer.running_var, layer.weight, layer.bias))
    return (x - mean) / np.sqrt(var + layer.eps) * weight + bias


def nodes_built(function, monkeypatch) -> int:
    """How many lazy nodes function() creates."""
    created, create = [], lazy.LazyBuffer.create
    monkeypatch.setattr(lazy.LazyBuffer, "create", staticmethod(lambda *args: created.append(1) or create(*args)))
    function()
    monkeypatch.setattr(lazy.LazyBuffer, "create", staticmethod(create))
    return len(created)


def test_an_eval_batch_norm_builds_its_scale_and_shift_once(monkeypatch):
    layer = batch_norm_layer()
    with no_grad():
        x = rng.standard_normal((2, CHANNELS, 3, 3)).astype(np.float32)
        np.testing.assert_allclose(layer(Tensor(x)).numpy(), expected(layer, x), rtol=1e-5, atol=1e-5)
        x = rng.standard_normal((2, CHANNELS, 3, 3)).astype(np.float32)
        data = Tensor(x).realize()
        built = []
        assert nodes_built(lambda: built.append(layer(data)), monkeypatch) <= 4  # input * scale + shift
        np.testing.assert_allclose(built[0].numpy(), expected(layer, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("written", ["running_var", "running_mean", "weight", "bias"])
def test_a_written_parameter_gives_new_values_at_once(written):
    layer = batch_norm_layer()
    x = rng.standard_normal((2, CHANNELS, 3, 3)).astype(np.float32)
    with no_grad():
        layer(Tensor(x)).realize()
        getattr(layer, written).assign(Tensor(rng.uniform(0.5, 2, CHANNELS).astype(np.float32))).realize()
        np.testing.assert_allclose(layer(Tensor(x)).numpy(), expected(layer, x), rtol=1e-5, atol=1e-5)
        layer.load_state_dict({name: Tensor(rng.uniform(0.5, 2, CHANNELS).astype(np.float32))
                               for name in ("weight", "bias", "running_mean", "running_var")}, strict=False)
        np.testing.assert_allclose(layer(Tensor(x)).numpy(), expected(layer, x), rtol=1e-5, atol=1e-5)


def test_a_pending_write_is_read_by_the_next_call():
    layer = batch_norm_layer()
    x = rng.standard_normal((2, CHANNELS, 3, 3)).astype(np.float32)
    with no_grad():
        layer(Tensor(x)).realize()
        layer.running_var.assign(layer.running_var * 4)  # not realized
        result = layer(Tensor(x)).numpy()
    np.testing.assert_allclose(result, expected(layer, x), rtol=1e-5, atol=1e-5)


def test_weights_that_need_gradients_get_them_in_eval_mode():
    layer = batch_norm_layer()
    x = rng.standard_normal((2, CHANNELS, 3, 3)).astype(np.float32)
    with no_grad():
        layer(Tensor(x)).realize()
    for _ in range(2):
        layer.weight.grad = layer.bias.grad = None
        layer(Tensor(x)).sum().backward()
        normalized = (x - layer.running_mean.numpy().reshape(1, CHANNELS, 1, 1)) \
            / np.sqrt(layer.running_var.numpy().reshape(1, CHANNELS, 1, 1) + layer.eps)
        np.testing.assert_allclose(layer.weight.grad.numpy(), normalized.sum((0, 2, 3)), rtol=1e-4)
        np.testing.assert_allclose(layer.bias.grad.numpy(), np.full(CHANNELS, x.size / CHANNELS), rtol=1e-6)


def test_a_jitted_call_computes_the_values_again_when_a_statistic_is_written():
    layer = batch_norm_layer()
    x = Tensor(rng.standard_normal((2, CHANNELS, 3, 3)).astype(np.float32)).realize()
    step = jit(lambda x: layer(x))
    with no_grad():
        layer(x).realize()  # kept by the eager call
        for _ in range(3):
            step(x).realize()
        layer.running_var.assign(layer.running_var * 3).realize()
        stats.reset()
        np.testing.assert_allclose(step(x).numpy(), expected(layer, x.numpy()), rtol=1e-5, atol=1e-5)
        assert stats.kernels == 2  # scale and shift, then the normalization
