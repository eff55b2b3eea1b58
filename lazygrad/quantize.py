"""int8 inference: a trained model's Linear and Conv2d layers with int8 weights and inputs, their
products accumulated in int32.

    model = lazygrad.quantize.quantize(model)                     # inputs quantized per call
    model = lazygrad.quantize.quantize(model, calibration=batches)  # input scales fixed from samples

Post-training quantization, a tool beside lazygrad.export: `quantize` replaces each nn.Linear and
nn.Conv2d of a model, in place, by a QuantizedLinear or QuantizedConv2d:

- its weight per output channel, symmetric: scale_c = max |w_c| / 127, w_q = round(w / scale_c),
  stored as int8 (a quarter of the float32 bytes);
- its input per tensor, symmetric, to int8 as well: from each call's own max |x| (dynamic), or from
  the largest max |x| seen over `calibration` batches run through the float model (static; inputs
  beyond it saturate at +-127);
- the product on the int8 values widened to int32, exact, then dequantized (in the product's
  kernel; a convolution's in the next one): y = acc * (x_scale * w_scale_c) + bias, in float32. A
  Linear's is a dot product per output of the input shifted to uint8 with the weight's rows, which
  gcc compiles to AVX-512 VNNI's dot products; an ungrouped convolution's is the dot products of the
  shifted input's windows, channels last, with a weight packed for a register tile of VNNI
  instructions (codegen/opts.py byte_dot_tile): both faster than float32 (a 3x3 convolution
  0.3-0.4x its time). A grouped (depthwise) convolution keeps its input in float32 and multiplies
  it by its dequantized weight (weight-only).

Everything stays Tensor ops, so a quantized model runs under the jit and exports to C
(lazygrad.export) like any other. Rounding is to nearest, ties to even (numpy's, PyTorch's).
"""
from __future__ import annotations

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.nn import functional as F
from lazygrad.nn.layers import Conv2d, Linear
from lazygrad.nn.module import Module
from lazygrad.nn.state import get_state_dict, named_children
from lazygrad.tensor import Tensor, no_grad
from lazygrad.ops import Ops

INT8_LIMIT = 127  # symmetric: -128 is never used, so negating a quantized value stays in range


def quantize_per_channel(weight: Tensor) -> tuple[Tensor, Tensor]:
    """(int8 weight, float32 scale per output channel): weight ~ weight_q * scale along dim 0. A
    channel of zeros gets scale 1 (its values quantize to 0 whatever the scale)."""
    flat = weight.float().reshape(weight.shape[0], -1)
    largest = flat.abs().max(axis=1)
    scale = (largest == 0).where(1.0, largest / INT8_LIMIT)
    quantized = (flat / scale.reshape(-1, 1)).round().clip(-INT8_LIMIT, INT8_LIMIT).cast(dtypes.int8)
    return quantized.reshape(weight.shape).realize(), scale.realize()


def quantize_tensor(x: Tensor, scale: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(int8 x, its float32 scale): symmetric per tensor, the scale from x's own max |x| unless given."""
    x = x.float()
    if scale is None:
        largest = x.abs().max()
        scale = (largest == 0).where(1.0, largest / INT8_LIMIT)
    return (x / scale).round().clip(-INT8_LIMIT, INT8_LIMIT).cast(dtypes.int8), scale


def _shift_offset(weight_rows: Tensor) -> Tensor:
    """128 times each output's weight sum (over all but the first axis): what shifting the input to
    uint8 adds to its dot products."""
    return (weight_rows.cast(dtypes.int32).reshape(weight_rows.shape[0], -1)._reduce(Ops.SUM, -1, False, "quantize")
            * 128).realize()


def _shifted(quantized: Tensor) -> Tensor:
    """int8 values shifted to uint8 (x_q + 128): the operand VNNI's dot products take unsigned."""
    return (quantized.cast(dtypes.int16) + 128).cast(dtypes.uint8)


class _Quantized(Module):
    """What QuantizedLinear and QuantizedConv2d share: the int8 weight and its scales, the input
    scale (None: per call), and the observing mode `quantize` calibrates in."""

    integer = True  # products of int8 inputs and weights; False: the weight dequantized, float32 products

    def __init__(self, layer: Module):
        self.weight, self.weight_scale = quantize_per_channel(layer.weight.detach())
        self.bias = None if layer.bias is None else layer.bias.detach().float()
        self.input_scale: Tensor | None = None
        self._float_weight = layer.weight.detach()  # only while calibrating; dropped by `_finish_calibration`
        self._observed = 0.0

    def _product(self, x: Tensor, weight: Tensor) -> Tensor:
        """The layer's product of an input and a weight (float while calibrating, int32 after)."""
        raise NotImplementedError(f"{type(self).__name__}: a quantized layer defines its product")

    def forward(self, x: Tensor) -> Tensor:
        if self._float_weight is not None:  # calibrating: the float layer, noting the largest input
            self._observed = max(self._observed, float(x.abs().max().item()))
            product = self._product(x, self._float_weight)
            return product if self.bias is None else product + self._bias_shaped(product)
        if not self.integer:  # int8 weights, float32 products (see QuantizedConv2d)
            dequantized = self.weight.float() * self.weight_scale.reshape((-1,) + (1,) * (self.weight.ndim - 1))
            product = self._product(x, dequantized)  # the weight's value is kept between calls
            return product if self.bias is None else product + self._bias_shaped(product)
        quantized, scale = quantize_tensor(x, self.input_scale)
        accumulated = self._integer_product(quantized)
        rescale = (scale * self.weight_scale).reshape(self._channel_shape(accumulated))
        out = accumulated.cast(dtypes.float32) * rescale
        return out if self.bias is None else out + self._bias_shaped(out)

    def _integer_product(self, quantized: Tensor) -> Tensor:
        """The int32 product of the int8 input and weight."""
        raise NotImplementedError(f"{type(self).__name__}: a quantized layer defines its integer product")

    def _channel_shape(self, out: Tensor) -> tuple[int, ...]:
        """The shape a per-output-channel vector takes to broadcast against the layer's output."""
        raise NotImplementedError(f"{type(self).__name__}: a quantized layer defines its channel shape")

    def _bias_shaped(self, out: Tensor) -> Tensor:
        return self.bias.reshape(self._channel_shape(out))

    def _finish_calibration(self, dynamic: bool) -> None:
        if not dynamic:
            observed = self._observed if self._observed > 0 else float(INT8_LIMIT)
            self.input_scale = Tensor(np.float32(observed / INT8_LIMIT))
        self._float_weight = None


class QuantizedLinear(_Quantized):
    """nn.Linear with an int8 weight (out_features, in_features): y = (x_q @ w_q.T) in int32, rescaled."""

    def __init__(self, layer: Linear):
        super().__init__(layer)
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.weight_offset = _shift_offset(self.weight)

    def _product(self, x: Tensor, weight: Tensor) -> Tensor:
        return x @ weight.T

    def forward(self, x: Tensor) -> Tensor:
        out = super().forward(x)
        if self._float_weight is not None:
            return out
        # stored: the product's kernel computes one output at a time (gcc vectorizes each dot product
        # inside it), so an expensive op after it, fused there, would run one output at a time too;
        # in a kernel of its own it runs on vectors (GPT-2's c_fc and GELU, 32 tokens: the product's
        # kernel 4.2 -> 1.0 ms)
        return out.contiguous()

    def _integer_product(self, quantized: Tensor) -> Tensor:
        # stored first: inlined, the shift would hide the uint8 load byte_dot_linear's kernel needs
        return F.byte_dot_linear(_shifted(quantized).contiguous(), self.weight) - self.weight_offset

    def _channel_shape(self, out: Tensor) -> tuple[int, ...]:
        return (self.out_features,)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


class QuantizedConv2d(_Quantized):
    """nn.Conv2d with an int8 weight. Ungrouped: the convolution of the int8 input and weight in
    int32, rescaled per output channel, as byte dot products of each window with the weight, both
    channels last (`_windowed_dot_products`). Grouped (a depthwise convolution): the int8 weight
    dequantized once and a float32 convolution, since its few products per output cannot repay
    quantizing the input (MobileNetV2, one thread: its depthwise layers in int32 made the model 2.2x
    slower than float32)."""

    def __init__(self, layer: Conv2d):
        super().__init__(layer)
        self.kernel_size, self.stride, self.dilation = layer.kernel_size, layer.stride, layer.dilation
        self.padding, self.groups, self.out_channels = layer.padding, layer.groups, layer.out_channels
        self.integer = self.groups == 1
        if self.integer:
            self.weight_offset = _shift_offset(self.weight)

    def _product(self, x: Tensor, weight: Tensor) -> Tensor:
        return F.conv2d(x, weight, None, self.stride, self.padding, self.dilation, self.groups)

    def _integer_product(self, quantized: Tensor) -> Tensor:
        batched = quantized if quantized.ndim == 4 else quantized.unsqueeze(0)
        out = self._windowed_dot_products(batched)
        return out if quantized.ndim == 4 else out.squeeze(0)

    def _windowed_dot_products(self, quantized: Tensor) -> Tensor:
        """(N, K, OH, OW) int32: F.byte_dot_conv2d of the input shifted to uint8, padded with 128
        (x_q = 0), less what the shift added."""
        shifted = _shifted(quantized)
        sums = F.byte_dot_conv2d(shifted, self.weight, self.stride, self.padding, self.dilation, padding_value=128)
        return sums - self.weight_offset.reshape(-1, 1, 1)

    def _channel_shape(self, out: Tensor) -> tuple[int, ...]:
        return (self.out_channels, 1, 1) if out.ndim == 3 else (1, self.out_channels, 1, 1)

    def extra_repr(self) -> str:
        return f"out_channels={self.out_channels}, stride={self.stride}, padding={self.padding}, int8"


_QUANTIZED = {Linear: QuantizedLinear, Conv2d: QuantizedConv2d}


def _replace_layers(root) -> list[_Quantized]:
    """Every Linear and Conv2d reachable from root replaced where its parent holds it; the new layers."""
    replaced, seen, stack = [], set(), [root]
    while stack:
        parent = stack.pop()
        if id(parent) in seen:
            continue
        seen.add(id(parent))
        for name, child in named_children(parent):
            quantized_type = _QUANTIZED.get(type(child))
            if quantized_type is None:
                if isinstance(child, (Module, list, tuple, dict)):
                    stack.append(child)
                continue
            layer = quantized_type(child)
            if isinstance(parent, list):
                parent[int(name)] = layer
            elif isinstance(parent, dict):
                parent[name] = layer
            elif isinstance(parent, tuple):
                raise TypeError(f"quantize: a {type(child).__name__} held in a tuple cannot be replaced; hold "
                                "layers in a list, a dict, nn.Sequential or an attribute")
            else:
                setattr(parent, name, layer)
            replaced.append(layer)
    return replaced


def quantize(model: Module, calibration=None) -> Module:
    """Replace model's Linear and Conv2d layers by int8 ones, in place; returns model. With
    `calibration` (an iterable of input batches, as model(batch) takes them) each layer's input
    scale is fixed from the largest |value| it saw over them, else computed on every call."""
    if isinstance(model, (Linear, Conv2d)):
        raise TypeError("quantize: pass a model that holds the layer (nn.Sequential(layer)), so the layer can be "
                        "replaced in it")
    layers = _replace_layers(model)
    if not layers:
        raise ValueError("quantize: the model has no nn.Linear or nn.Conv2d layer to quantize")
    if calibration is not None:
        with no_grad():
            for batch in calibration:
                model(batch if isinstance(batch, Tensor) else Tensor(batch))
    for layer in layers:
        layer._finish_calibration(dynamic=calibration is None)
    return model


def model_bytes(model) -> int:
    """Bytes of every tensor the model holds (weights, scales, buffers)."""
    return sum(tensor.numel() * tensor.dtype.itemsize for tensor in get_state_dict(model).values())
