"""lazygrad.quantize: int8 weights per output channel and int8 inputs per tensor, their products
summed in int32, against a numpy formulation of the same scheme on every device; the digits CNN's
accuracy and size; the jit; and integer convolutions, exact against float64."""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

import lazygrad
from lazygrad import Tensor, dtypes, nn
from lazygrad.jit import jit
from lazygrad.nn import functional as F
from lazygrad.quantize import QuantizedConv2d, QuantizedLinear, model_bytes, quantize, quantize_per_channel
from lazygrad.schedule import fuse

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "ops"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "extra"))

from ops_helpers import available_devices, device_params  # noqa: E402

DEVICES = device_params(available_devices())


def reference_weight(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flat = weight.reshape(weight.shape[0], -1).astype(np.float32)
    largest = np.abs(flat).max(1)
    scale = np.where(largest == 0, np.float32(1), largest / np.float32(127)).astype(np.float32)
    quantized = np.clip(np.round(flat / scale[:, None]), -127, 127).astype(np.int8)
    return quantized.reshape(weight.shape), scale


def reference_input(x: np.ndarray, scale=None) -> tuple[np.ndarray, np.float32]:
    if scale is None:
        largest = np.abs(x).max()
        scale = np.float32(1) if largest == 0 else np.float32(largest / np.float32(127))
    return np.clip(np.round(x / scale), -127, 127).astype(np.int8), scale


def test_weights_quantize_per_output_channel_like_numpy():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)
    weight[2] = 0  # a channel of zeros: scale 1, all zeros
    weight[4, 0, 0, 0] = 2.5 * np.abs(weight[4]).max()  # one outlier sets its channel's scale
    quantized, scale = quantize_per_channel(Tensor(weight))
    want_quantized, want_scale = reference_weight(weight)
    assert quantized.dtype == dtypes.int8 and scale.dtype == dtypes.float32
    np.testing.assert_array_equal(quantized.numpy(), want_quantized)
    np.testing.assert_allclose(scale.numpy(), want_scale, rtol=1e-7)
    assert scale.numpy()[2] == 1 and not quantized.numpy()[2].any()
    assert np.abs(quantized.numpy()).max() == 127  # -128 is never used


@pytest.mark.parametrize("device", DEVICES)
def test_a_quantized_linear_is_the_int32_product_of_int8_values_rescaled(device):
    rng = np.random.default_rng(1)
    layer = nn.Linear(24, 10, device=device)
    x = (rng.standard_normal((5, 24)) * 3).astype(np.float32)
    model = quantize(nn.Sequential(layer))
    assert isinstance(model[0], QuantizedLinear) and model[0].weight.dtype == dtypes.int8
    weight_q, weight_scale = reference_weight(layer.weight.numpy())
    x_q, x_scale = reference_input(x)
    accumulated = x_q.astype(np.int32) @ weight_q.astype(np.int32).T
    expected = accumulated.astype(np.float32) * (x_scale * weight_scale) + layer.bias.numpy()
    np.testing.assert_allclose(model(Tensor(x, device=device)).numpy(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel, stride, padding, groups", [(3, 1, 1, 1), (3, 2, 0, 1), (3, 1, 1, 4), (1, 1, 0, 1)])
def test_a_quantized_conv2d_is_the_int32_convolution_of_int8_values_rescaled(device, kernel, stride, padding, groups):
    """Ungrouped ones as uint8-by-int8 dot products of windows over the channels (stored channels
    last), strided, padded or not; a grouped one with its int8 weight dequantized and the input kept
    in float32 (weight-only)."""
    rng = np.random.default_rng(2)
    layer = nn.Conv2d(8, 12, kernel, stride=stride, padding=padding, groups=groups, device=device)
    x = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
    model = quantize(nn.Sequential(layer))
    assert isinstance(model[0], QuantizedConv2d) and model[0].groups == groups
    weight_q, weight_scale = reference_weight(layer.weight.numpy())

    def expected(images):  # the input's scale is its own max |x|: a batch's, or one image's
        if groups > 1:
            dequantized = weight_q.astype(np.float32) * weight_scale.reshape(-1, 1, 1, 1)
            return F.conv2d(Tensor(images.astype(np.float64)), Tensor(dequantized.astype(np.float64)),
                            Tensor(layer.bias.numpy().astype(np.float64)), stride, padding, 1, groups).numpy()
        x_q, x_scale = reference_input(images)
        accumulated = F.conv2d(Tensor(x_q.astype(np.float64)), Tensor(weight_q.astype(np.float64)), None, stride,
                               padding, 1, groups).numpy()  # exact: sums of int8 products stay below 2^53
        return accumulated.astype(np.float32) * (x_scale * weight_scale).reshape(1, -1, 1, 1) \
            + layer.bias.numpy().reshape(1, -1, 1, 1)
    np.testing.assert_allclose(model(Tensor(x, device=device)).numpy(), expected(x), rtol=1e-6, atol=1e-6)
    unbatched = model(Tensor(x[1], device=device))  # (C, H, W) as nn.Conv2d takes it
    np.testing.assert_allclose(unbatched.numpy(), expected(x[1:])[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("channels, out_channels, kernel, stride, padding, dilation", [
    (3, 20, 3, 1, "same", 2),    # channels padded to 4, output channels to 32 (two blocks of 16 lanes)
    (5, 16, (3, 1), 2, 1, 1),    # a rectangular kernel, strided
    (64, 32, 3, 1, 1, 1),        # ResNet-like: whole blocks, no padding of channels
    (16, 16, 1, 2, 0, 1),        # a strided 1x1 (ResNet's downsampling)
])
def test_quantized_convolutions_pad_their_channels_to_the_dot_product_blocks(device, channels, out_channels, kernel,
                                                                              stride, padding, dilation):
    """Ungrouped convolutions run as uint8-by-int8 dot products in blocks of 4 input channels by 16
    output channels (QuantizedConv2d._packed_weight): channel counts that the blocks do not divide
    are padded with zeros, which change no sum."""
    rng = np.random.default_rng(11)
    layer = nn.Conv2d(channels, out_channels, kernel, stride=stride, padding=padding, dilation=dilation, device=device)
    x = rng.standard_normal((2, channels, 11, 9)).astype(np.float32)
    model = quantize(nn.Sequential(layer))
    weight_q, weight_scale = reference_weight(layer.weight.numpy())
    x_q, x_scale = reference_input(x)
    accumulated = F.conv2d(Tensor(x_q.astype(np.float64)), Tensor(weight_q.astype(np.float64)), None, stride, padding,
                           dilation).numpy()
    expected = accumulated.astype(np.float32) * (x_scale * weight_scale).reshape(1, -1, 1, 1) \
        + layer.bias.numpy().reshape(1, -1, 1, 1)
    np.testing.assert_allclose(model(Tensor(x, device=device)).numpy(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_byte_dot_products_are_exact_int32_sums_of_uint8_by_int8(device):
    """F.byte_dot_conv2d (padding per side, of a zero point given as a tensor) and F.byte_dot_linear
    against numpy's int64 sums; other dtypes are refused with the fix."""
    rng = np.random.default_rng(12)
    x = rng.integers(0, 256, (2, 6, 7, 5)).astype(np.uint8)
    w = rng.integers(-127, 128, (18, 6, 3, 2)).astype(np.int8)
    sums = F.byte_dot_conv2d(Tensor(x, device=device), Tensor(w, device=device), stride=(2, 1),
                             padding=((1, 2), (0, 1)), padding_value=Tensor(np.array(200, np.uint8), device=device))
    padded = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 2), (0, 1)), constant_values=200)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 2), axis=(2, 3))[:, :, ::2, :]
    assert sums.dtype == dtypes.int32
    np.testing.assert_array_equal(sums.numpy(), np.einsum("nchwij,kcij->nkhw", windows, w.astype(np.int64)))
    rows, weight = rng.integers(0, 256, (3, 4, 36)).astype(np.uint8), rng.integers(-127, 128, (10, 36)).astype(np.int8)
    dots = F.byte_dot_linear(Tensor(rows, device=device), Tensor(weight, device=device))
    np.testing.assert_array_equal(dots.numpy(), rows.astype(np.int64) @ weight.astype(np.int64).T)
    with pytest.raises(TypeError, match="uint8 input and an int8 weight"):
        F.byte_dot_conv2d(Tensor(x.astype(np.int8)), Tensor(w))
    with pytest.raises(ValueError, match="does not match weight"):
        F.byte_dot_linear(Tensor(rows), Tensor(weight[:, :35]))


def _conv_sums(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    padded = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, w.shape[2:], axis=(2, 3))
    return np.einsum("nchwij,kcij->nkhw", windows, w.astype(np.int64))


def test_a_quantized_activation_computed_channels_last_is_stored_so_and_read_in_place():
    """A byte dot convolution whose input is a quantization of another one's output (computed
    channels last, as a quantized model's next layer reads it) stores that uint8 value channels last
    once, as it is computed, and an unpadded convolution reads it in place: no kernel copies it across
    its channels (it was stored channels first, then copied back). A padded one copies it along its
    rows. Exact against numpy either way; two products added stay two kernels, each with its tile."""
    rng = np.random.default_rng(21)
    x = rng.integers(0, 256, (1, 32, 6, 5)).astype(np.uint8)
    w1, w2, w3 = (rng.integers(-127, 128, shape).astype(np.int8) for shape in
                  ((64, 32, 1, 1), (16, 64, 1, 1), (16, 64, 3, 3)))
    scale = (rng.random(64) * 0.01).astype(np.float32)

    def model(x):
        sums = F.byte_dot_conv2d(x, Tensor(w1))
        quantized = ((sums.cast(dtypes.float32) * Tensor(scale).reshape(-1, 1, 1)).relu().round() + 3) \
            .clamp(0, 255).cast(dtypes.uint8)
        return F.byte_dot_conv2d(quantized, Tensor(w2)) + F.byte_dot_conv2d(quantized, Tensor(w3), padding=1,
                                                                             padding_value=3)
    result = model(Tensor(x))
    kernels = [item.kernel for item in fuse.create_schedule([result.lazydata])
               if item.kernel is not None]
    bytes_copied = [kernel for kernel in kernels if not kernel.reduce_axes and kernel.buffer_dtypes[0] == dtypes.uint8]
    # the quantized value's only copy is the padded one (it was stored channels first, then copied back)
    assert [kernel.full_shape for kernel in bytes_copied if 64 in kernel.full_shape] == [(1, 8, 7, 64)]
    quantized = np.clip(np.round(np.maximum(_conv_sums(x, w1, 0).astype(np.float32) * scale.reshape(-1, 1, 1), 0))
                        + 3, 0, 255).astype(np.int64)
    np.testing.assert_array_equal(result.numpy(), _conv_sums(quantized, w2, 0) +
                                  _conv_sums(np.pad(quantized - 3, ((0, 0), (0, 0), (1, 1), (1, 1))) + 3, w3, 0))


def test_two_byte_dot_products_added_keep_a_kernel_each():
    """Two 1x1 byte dot convolutions of the same shape added (a quantized ResNet's projection and the
    convolution it is added to) are two kernels, each with its tile: chained into one, the second
    product ran scalar (11 GOP/s against 500-1000). Exact against numpy."""
    rng = np.random.default_rng(22)
    a, b = (rng.integers(0, 256, (1, 64, 7, 7)).astype(np.uint8) for _ in range(2))
    w1, w2 = (rng.integers(-127, 128, (128, 64, 1, 1)).astype(np.int8) for _ in range(2))
    result = F.byte_dot_conv2d(Tensor(a), Tensor(w1)).cast(dtypes.float32) * 0.5 + \
        F.byte_dot_conv2d(Tensor(b), Tensor(w2)).cast(dtypes.float32) * 0.25
    kernels = [item.kernel for item in fuse.create_schedule([result.lazydata])
               if item.kernel is not None]
    products = [kernel for kernel in kernels if kernel.reduce_axes]
    assert len(products) == 2
    # what keeps the scheduler from chaining them (schedule/fuse.py _chain_reduces): in a quantized
    # ResNet-50 its first block's two did chain, reading values computed a layer earlier
    assert all(fuse._tiled_product(kernel) and fuse._gets_register_tile(kernel) for kernel in products)
    np.testing.assert_array_equal(result.numpy(), _conv_sums(a, w1, 0) * 0.5 + _conv_sums(b, w2, 0) * 0.25)


def test_an_input_scale_reads_the_stored_activation_not_the_sums_again():
    """A quantized layer's input scale is a max |x| over its whole input, a reduce to one value whose
    loop runs on one thread. Where that input (the last layer's int32 sums rescaled, plus a bias,
    through relu) is also read by the kernel that quantizes it, it is stored once and the max reads it
    (schedule/fuse.py SERIAL_REDUCE); recomputed from the sums there, one element at a time, it took
    0.26 ms of a 0.4 ms digits CNN at batch 200."""
    lazygrad.manual_seed(4)
    model = quantize(nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1))).eval()
    x = Tensor(np.random.default_rng(4).standard_normal((64, 1, 8, 8)).astype(np.float32)).realize()
    with lazygrad.no_grad():
        result = model(x)
    kernels = [item.kernel for item in fuse.create_schedule([result.lazydata]) if item.kernel is not None]
    (second_scale,) = [kernel for kernel in kernels if kernel.full_shape == (64, 16, 8, 8)
                       and len(kernel.reduce_axes) == 4]
    assert dtypes.int32 not in second_scale.buffer_dtypes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, out_features", [((2, 40, 36), 10), ((64, 64), 48), ((40, 30), 20), ((8, 64), 16)])
def test_byte_dot_linear_of_many_rows_takes_the_convolutions_register_tile(device, shape, out_features):
    """32 rows or more, with in_features a multiple of 4: the rows as a 1x1 byte dot convolution's
    positions, channels last, on its register tile (the product in 4-byte steps, 16 output channels a
    vector); fewer rows, or in_features not a multiple of 4, plain loops. Exact against numpy either way."""
    rng = np.random.default_rng(23)
    rows = rng.integers(0, 256, shape).astype(np.uint8)
    weight = rng.integers(-127, 128, (out_features, shape[-1])).astype(np.int8)
    result = F.byte_dot_linear(Tensor(rows, device=device), Tensor(weight, device=device))
    tiled = math.prod(shape[:-1]) >= 32 and shape[-1] % 4 == 0
    if device == "CPU":
        (product,) = [item.kernel for item in fuse.create_schedule([result.lazydata]) if item.kernel is not None
                      and item.kernel.reduce_axes]
        assert (product.full_shape[-1] == 4 and len(product.reduce_axes) >= 2) == tiled
    np.testing.assert_array_equal(result.numpy(), rows.astype(np.int64) @ weight.astype(np.int64).T)


def test_calibration_fixes_each_input_scale_and_larger_inputs_saturate():
    rng = np.random.default_rng(3)
    layer = nn.Linear(4, 3)
    samples = [rng.uniform(-2, 2, (8, 4)).astype(np.float32) for _ in range(3)]
    model = quantize(nn.Sequential(layer), calibration=samples)
    largest = max(np.abs(sample).max() for sample in samples)
    np.testing.assert_allclose(model[0].input_scale.numpy(), largest / 127, rtol=1e-6)
    x = np.array([[100.0, -100.0, 1.0, 0.0]], np.float32)  # beyond the calibrated range
    weight_q, weight_scale = reference_weight(layer.weight.numpy())
    x_q, _ = reference_input(x, np.float32(largest / 127))
    assert x_q[0, 0] == 127 and x_q[0, 1] == -127
    expected = (x_q.astype(np.int32) @ weight_q.astype(np.int32).T) * (np.float32(largest / 127) * weight_scale) \
        + layer.bias.numpy()
    np.testing.assert_allclose(model(Tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_the_digits_cnn_in_int8_keeps_its_accuracy_in_a_quarter_of_the_bytes():
    """The demo's training (8 epochs, a few seconds), then its test accuracy in float32 and in int8."""
    import train_digits
    from lazygrad.nn.state import get_state_dict, load_state_dict
    data = train_digits.load_digits_dataset(0)
    weights = {name: tensor.numpy() for name, tensor in get_state_dict(
        train_digits.train(data, progress=False, log=lambda line: None).model).items()}

    def trained():
        model = train_digits.build_model(8)
        load_state_dict(model, {name: Tensor(array) for name, array in weights.items()})
        return model
    float_model = trained()
    float_accuracy = train_digits.evaluate(float_model, data.test_images, data.test_labels)
    for calibration in (None, [data.train_images[:200], data.train_images[200:400]]):
        int8_model = quantize(trained(), calibration=calibration)
        accuracy = train_digits.evaluate(int8_model, data.test_images, data.test_labels)
        assert accuracy >= float_accuracy - 0.01, (calibration is None, accuracy, float_accuracy)
        assert model_bytes(int8_model) < 0.3 * model_bytes(float_model)


def test_a_quantized_model_replays_under_the_jit():
    lazygrad.manual_seed(4)
    model = quantize(nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 3)))
    step = jit(lazygrad.no_grad()(lambda x: model(x)))
    rng = np.random.default_rng(5)
    for _ in range(4):
        x = rng.standard_normal((2, 1, 6, 6)).astype(np.float32)
        np.testing.assert_allclose(step(Tensor(x)).numpy(), model(Tensor(x)).numpy(), rtol=1e-6, atol=1e-6)
    assert step.replay is not None


def test_layers_in_lists_and_nested_modules_are_replaced_and_others_kept():
    class Net(nn.Module):
        def __init__(self):
            self.blocks = [nn.Linear(4, 4), nn.ReLU()]
            self.head = nn.Sequential(nn.Linear(4, 2), nn.Sigmoid())
            self.norm = nn.LayerNorm(4)

        def forward(self, x):
            return self.head(self.blocks[1](self.blocks[0](self.norm(x))))
    net = quantize(Net())
    assert isinstance(net.blocks[0], QuantizedLinear) and isinstance(net.head[0], QuantizedLinear)
    assert isinstance(net.norm, nn.LayerNorm) and net(Tensor(np.ones((1, 4), np.float32))).shape == (1, 2)


def test_quantize_errors_name_the_fix():
    with pytest.raises(TypeError, match="nn.Sequential\\(layer\\)"):
        quantize(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no nn.Linear or nn.Conv2d"):
        quantize(nn.Sequential(nn.ReLU()))


@pytest.mark.parametrize("device", DEVICES)
def test_integer_convolutions_are_exact_and_stay_in_their_dtype(device):
    """conv2d of two integer tensors sums exact integer products in that dtype (PyTorch refuses
    integers): int8 values widened to int32, as ONNX's ConvInteger runs operands other than uint8 by int8."""
    rng = np.random.default_rng(6)
    for shape, kernel, arguments in (((2, 3, 7, 7), (4, 3, 3, 3), dict(padding=1)),
                                     ((1, 16, 9, 9), (8, 16, 1, 1), dict(stride=2)),
                                     ((2, 6, 5, 5), (6, 1, 3, 3), dict(padding=1, groups=6))):
        x = rng.integers(-127, 128, shape).astype(np.int8)
        w = rng.integers(-127, 128, kernel).astype(np.int8)
        out = Tensor(x, device=device).cast(dtypes.int32).conv2d(Tensor(w, device=device).cast(dtypes.int32), **arguments)
        assert out.dtype == dtypes.int32
        expected = F.conv2d(Tensor(x.astype(np.float64)), Tensor(w.astype(np.float64)), **arguments).numpy()
        np.testing.assert_array_equal(out.numpy(), expected.astype(np.int32))
    with pytest.raises(TypeError, match="both integer"):
        Tensor(np.ones((1, 1, 3, 3), np.int32)).conv2d(Tensor(np.ones((1, 1, 1, 1), np.float32)))
