"""Values computed from parameters alone, kept between eager calls (lazygrad/parameter_values.py):
an eval-mode batch norm builds its scale and shift once, and a matmul or a convolution its weight's
copy into panels; each takes them again while its parameters are unchanged, computes them anew
once one is written, and builds them as before where a gradient, a jit capture or a pending write
needs that. Building never runs a kernel: the call's own realize computes what is kept."""
import numpy as np
import pytest

import lazygrad.lazy as lazy
import lazygrad.nn as nn
import lazygrad.parameter_values as parameter_values
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


def test_building_an_eval_batch_norm_runs_no_kernel():
    layer = batch_norm_layer()
    x = Tensor(rng.standard_normal((2, CHANNELS, 3, 3)).astype(np.float32)).realize()
    with no_grad():
        stats.reset()
        out = layer(x)
        assert stats.kernels == 0
        np.testing.assert_allclose(out.numpy(), expected(layer, x.numpy()), rtol=1e-5, atol=1e-5)


def conv_layer(in_channels: int, out_channels: int, kernel: int, groups: int = 1, stride: int = 1) -> nn.Conv2d:
    layer = nn.Conv2d(in_channels, out_channels, kernel, stride, kernel // 2, groups=groups, bias=False).eval()
    with no_grad():
        layer.weight.assign(Tensor(rng.standard_normal(layer.weight.shape).astype(np.float32))).realize()
    return layer


def numpy_conv(x: np.ndarray, weight: np.ndarray, groups: int, stride: int) -> np.ndarray:
    """Cross-correlation padded by half the kernel, in float64."""
    kernel = weight.shape[-1]
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0)) + ((kernel // 2, kernel // 2),) * 2)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kernel, kernel), axis=(2, 3))[:, :, ::stride, ::stride]
    per_group, out_per_group = x.shape[1] // groups, weight.shape[0] // groups
    return np.concatenate([np.einsum("nchwij,ocij->nohw", windows[:, g * per_group:(g + 1) * per_group],
                                     weight[g * out_per_group:(g + 1) * out_per_group].astype(np.float64))
                           for g in range(groups)], axis=1)


# (input shape, layer): the convolution routes that copy their weight first (nn/spatial.py)
CONVOLUTIONS = {
    "1x1 computed channels last": ((1, 32, 56, 56), lambda: conv_layer(32, 64, 1)),
    "1x1 over few positions, a matmul in panels": ((1, 160, 7, 7), lambda: conv_layer(160, 960, 1)),
    "3x3 strided, computed channels last": ((1, 64, 28, 28), lambda: conv_layer(64, 128, 3, stride=2)),
    "depthwise 3x3": ((1, 32, 28, 28), lambda: conv_layer(32, 32, 3, groups=32)),
    "3x3 by Winograd, its transform in panels": ((1, 128, 28, 28), lambda: conv_layer(128, 128, 3)),
}


@pytest.mark.parametrize("case", CONVOLUTIONS)
def test_a_convolution_copies_its_weight_into_its_layout_once(case, monkeypatch):
    shape, make = CONVOLUTIONS[case]
    layer = make()
    x = Tensor(rng.standard_normal(shape).astype(np.float32)).realize()
    with no_grad():
        first, second = [], []
        first_nodes = nodes_built(lambda: first.append(layer(x)), monkeypatch)
        np.testing.assert_allclose(first[0].numpy(), numpy_conv(x.numpy(), layer.weight.numpy(), layer.groups, layer.stride[0]),
                                   rtol=1e-4, atol=1e-4)
        second_nodes = nodes_built(lambda: second.append(layer(x)), monkeypatch)
        assert second_nodes <= first_nodes - 3  # the weight's reshape, permute and copy at least
        stats.reset()
        np.testing.assert_allclose(second[0].numpy(), first[0].numpy(), rtol=0, atol=0)
        launched = stats.kernels
        layer.weight.assign(layer.weight * -0.5).realize()  # a write: the copy is made again
        stats.reset()
        np.testing.assert_allclose(layer(x).numpy(), numpy_conv(x.numpy(), layer.weight.numpy(), layer.groups, layer.stride[0]),
                                   rtol=1e-4, atol=1e-4)
        assert stats.kernels > launched


def test_a_1x1_convolution_builds_one_view_of_its_input_for_its_windows(monkeypatch):
    """A 1x1 convolution's windows are its input reshaped (pool_windows), not padded, split, cut and
    permuted; and a product over whole panels takes no slice: an eager call builds 13 nodes."""
    layer = conv_layer(32, 64, 1)
    x = Tensor(rng.standard_normal((1, 32, 56, 56)).astype(np.float32)).realize()
    with no_grad():
        layer(x).realize()
        built = []
        assert nodes_built(lambda: built.append(layer(x)), monkeypatch) <= 13
        np.testing.assert_allclose(built[0].numpy(), numpy_conv(x.numpy(), layer.weight.numpy(), 1, 1), rtol=1e-4, atol=1e-4)


def test_a_weight_and_its_transpose_keep_their_own_panels(monkeypatch):
    """x @ W and x @ W.T copy one buffer into different panels: each is kept under its own view."""
    weight = Tensor(rng.standard_normal((512, 512)).astype(np.float32)).realize()
    x = Tensor(rng.standard_normal((64, 512)).astype(np.float32)).realize()
    expected_plain, expected_transposed = x.numpy() @ weight.numpy(), x.numpy() @ weight.numpy().T
    with no_grad():
        built = {}
        for call in range(2):
            for view, expected_product in (("plain", expected_plain), ("transposed", expected_transposed)):
                product = []
                built[view, call] = nodes_built(
                    lambda: product.append(x @ (weight if view == "plain" else weight.T)), monkeypatch)
                np.testing.assert_allclose(product[0].numpy(), expected_product, rtol=1e-4, atol=1e-3)
        for view in ("plain", "transposed"):
            assert built[view, 1] <= built[view, 0] - 3


def test_a_linear_layer_that_needs_gradients_copies_its_weight_each_call(monkeypatch):
    layer = nn.Linear(512, 256)
    x = Tensor(rng.standard_normal((64, 512)).astype(np.float32)).realize()
    built = [nodes_built(lambda: layer(x).realize(), monkeypatch) for _ in range(2)]
    assert built[0] == built[1]
    layer(x).sum().backward()
    np.testing.assert_allclose(layer.weight.grad.numpy(), np.broadcast_to(x.numpy().sum(0), (256, 512)), rtol=1e-4)


def test_kept_values_past_their_byte_limit_are_let_go(monkeypatch):
    monkeypatch.setattr(parameter_values, "KEPT_BYTES", 512 * 512 * 4)  # one weight's panels
    weights = [Tensor(rng.standard_normal((512, 512)).astype(np.float32)).realize() for _ in range(3)]
    x = Tensor(rng.standard_normal((64, 512)).astype(np.float32)).realize()
    with no_grad():
        for _ in range(2):
            for weight in weights:
                np.testing.assert_allclose((x @ weight.T).numpy(), x.numpy() @ weight.numpy().T, rtol=1e-4, atol=1e-3)
                assert parameter_values._kept_bytes[0] <= 512 * 512 * 4


def test_a_value_kept_unrealized_is_not_handed_to_a_jit_capture():
    """A kept value built by an eager call that was never realized is the node a capture would
    build too (hash-consed): the capture computes it in a buffer of its own, which its replays
    reuse for other values, so it must not stay kept for later eager calls."""
    layer = batch_norm_layer()
    x = Tensor(rng.standard_normal((2, CHANNELS, 3, 3)).astype(np.float32)).realize()
    other = Tensor(rng.standard_normal((2, CHANNELS, 3, 3)).astype(np.float32)).realize()
    step = jit(lambda x: (layer(x) * 2 + 1).sum((2, 3)))
    with no_grad():
        pending = layer(x)  # kept values built, not realized
        for data in (x, other, x, other):
            step(data).realize()
        np.testing.assert_allclose(layer(other).numpy(), expected(layer, other.numpy()), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(pending.numpy(), expected(layer, x.numpy()), rtol=1e-5, atol=1e-5)
