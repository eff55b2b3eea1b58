"""Rewrites a quantized model's QDQ form into the operators that run it fast; called by model.py when
a model loads, after the nodes are put in order.

ONNX Runtime's static quantizer (and torch's quantization-aware export) writes a quantized model as
its float graph with QuantizeLinear and DequantizeLinear around each product: a Conv reads
DequantizeLinear(x_q) and DequantizeLinear(w_q) of a uint8 activation and an int8 weight. Run as
written, every product is a float product of dequantized values and every activation takes a trip
through uint8 and back. Two rewrites, the first with the products' sums exact (where the float graph
rounds them), the second giving the same numbers:

- a Conv of a dequantized uint8 activation (one scale) and a dequantized int8 weight (zero point 0,
  one scale or one per output channel, one group, 2-D) becomes `DequantizedConv` on the quantized
  values: the int32 sums of uint8-by-int8 products (ops_conv.integer_convolution, VNNI's dot
  products where the CPU has them) times the two scales, plus the bias; a Gemm or MatMul of such
  an activation and a 2-D such weight (one scale, or one per output column) `DequantizedGemm`
  (ops_nn.integer_matmul's byte dot products);
- a DequantizeLinear of a QuantizeLinear's result with the same scale and zero point becomes
  `FakeQuantize` of the float input: round(x / scale) clamped to the quantized range less the zero
  point, times the scale, the same numbers without the conversions; where that input is already a
  DequantizeLinear's with those parameters (through reshapes and transposes), an Identity.

The DequantizeLinear and QuantizeLinear nodes stay where other nodes read them; what no node reads
is never computed (results are lazy). The rewritten nodes are in the domain FUSED_DOMAIN.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

FUSED_DOMAIN = "lazygrad"
# the zero point's types whose range FakeQuantize clamps to (ops_quantize.INTEGER_RANGES)
INTEGER_TYPES = (TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16)


def fuse_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model, or a copy whose main graph has the rewrites above (the caller's proto is never
    changed)."""
    graph = model.graph
    constants = {tensor.name: tensor for tensor in graph.initializer}
    constants.update({node.output[0]: attribute.t for node in graph.node if node.op_type == "Constant"
                         for attribute in node.attribute if attribute.name == "value"})
    producers = {name: node for node in graph.node for name in node.output}
    products = [_dequantized_product(node, producers, constants) for node in graph.node]
    # a quantized value a product reads is stored anyway: its float readers dequantize it
    read_quantized = {product.input[0] for product in products if product is not None}
    rewritten = [product or _fake_quantize(node, producers, constants, read_quantized)
                 for node, product in zip(graph.node, products)]
    if all(node is None for node in rewritten):
        return model
    fused = onnx.ModelProto()
    fused.CopyFrom(model)
    nodes = [new or old for new, old in zip(rewritten, model.graph.node)]
    del fused.graph.node[:]
    fused.graph.node.extend(nodes)
    if not any(opset.domain == FUSED_DOMAIN for opset in fused.opset_import):
        fused.opset_import.append(onnx.helper.make_opsetid(FUSED_DOMAIN, 1))
    return fused


def _attributes(node: onnx.NodeProto) -> dict:
    return {attribute.name: onnx.helper.get_attribute_value(attribute) for attribute in node.attribute}


def _is_plain(node: onnx.NodeProto | None, op_type: str) -> bool:
    """Whether node is a QuantizeLinear or DequantizeLinear of the default domain, per tensor or per
    axis, to or from the type of its zero point."""
    if node is None or node.op_type != op_type or node.domain not in ("", "ai.onnx"):
        return False
    attributes = _attributes(node)
    return not any(attributes.get(name, 0) for name in ("block_size", "output_dtype", "precision"))


def _dequantize_of(name: str, producers: dict) -> onnx.NodeProto | None:
    node = producers.get(name)
    return node if _is_plain(node, "DequantizeLinear") else None


def _input(node: onnx.NodeProto, index: int) -> str:
    return node.input[index] if index < len(node.input) else ""


def _constant(name: str, constants: dict) -> np.ndarray | None:
    return numpy_helper.to_array(constants[name]) if name in constants else None


def _output_channel_axis(node: onnx.NodeProto, weight_dims) -> int | None:
    """The weight's axis of output channels (the axis a per-channel scale may lie along and still
    leave the sums) for the products rewritten: a one-group 2-D Conv's (K, C, kh, kw) weight, a
    MatMul's or Gemm's 2-D one ((K, N), or (N, K) under transB); None for any other node."""
    attributes = _attributes(node)
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Conv":
        return 0 if attributes.get("group", 1) == 1 and len(weight_dims) == 4 else None
    if node.op_type == "Gemm":
        return (0 if attributes.get("transB", 0) else 1) if len(weight_dims) == 2 else None
    if node.op_type == "MatMul":
        return 1 if len(weight_dims) == 2 else None
    return None


def _dequantized_product(node: onnx.NodeProto, producers: dict, constants: dict) -> onnx.NodeProto | None:
    """A Conv, Gemm or MatMul of a dequantized uint8 activation and a dequantized int8 weight, as
    DequantizedConv or DequantizedGemm (a MatMul as a Gemm), or None."""
    if node.op_type not in ("Conv", "Gemm", "MatMul"):
        return None
    activation, weight = (_dequantize_of(_input(node, index), producers) for index in (0, 1))
    if activation is None or weight is None or weight.input[0] not in constants:
        return None
    w = constants[weight.input[0]]
    axis = _output_channel_axis(node, w.dims)
    if w.data_type != TensorProto.INT8 or axis is None:
        return None
    activation_scale, activation_zero = _constant(activation.input[1], constants), _input(activation, 2)
    if activation_scale is None or activation_scale.size != 1:
        return None
    if activation_zero and constants.get(activation_zero, TensorProto()).data_type != TensorProto.UINT8:
        return None  # its type is uint8 only when the zero point says so (or there is none)
    weight_scale, weight_zero = _constant(weight.input[1], constants), _input(weight, 2)
    scale_axis = _attributes(weight).get("axis", 1) % len(w.dims)
    if weight_scale is None or weight_scale.size != 1 and not (scale_axis == axis and weight_scale.size == w.dims[axis]):
        return None  # a scale that varies along what the products sum cannot be taken out of the sums
    if weight_zero and not (weight_zero in constants and not _constant(weight_zero, constants).any()):
        return None
    inputs = [activation.input[0], activation.input[1], activation_zero, weight.input[0], weight.input[1],
              _input(node, 2)]
    op_type = "DequantizedConv" if node.op_type == "Conv" else "DequantizedGemm"
    return onnx.helper.make_node(op_type, inputs, list(node.output), name=node.name, domain=FUSED_DOMAIN,
                                 **_attributes(node))


def _fake_quantize(node: onnx.NodeProto, producers: dict, constants: dict, read_quantized: set) -> onnx.NodeProto | None:
    if not _is_plain(node, "DequantizeLinear") or node.input[0] in read_quantized:
        return None
    quantize = producers.get(node.input[0])
    if not _is_plain(quantize, "QuantizeLinear"):
        return None
    q_attributes = _attributes(quantize)
    if q_attributes.get("axis", 1) != _attributes(node).get("axis", 1):
        return None
    scale, zero = _input(quantize, 1), _input(quantize, 2)
    if scale != _input(node, 1) or zero != _input(node, 2):
        return None
    if zero and constants.get(zero, TensorProto()).data_type not in INTEGER_TYPES:
        return None  # a float8 or 4-bit quantization, or a zero point computed in the graph
    if _on_the_grid(quantize.input[0], scale, zero, producers, constants):
        return onnx.helper.make_node("Identity", [quantize.input[0]], list(node.output), name=node.name)
    return onnx.helper.make_node("FakeQuantize", [quantize.input[0], scale, zero], list(node.output),
                                 name=node.name, domain=FUSED_DOMAIN, axis=q_attributes.get("axis", 1))


# Operators that move or reshape values without changing any
VALUE_PRESERVING = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity")


def _on_the_grid(name: str, scale: str, zero: str, producers: dict, constants: dict) -> bool:
    """Whether the value `name` is, through value-preserving operators only, a DequantizeLinear's with
    the same one-element scale and zero point: each of its values is already an integer in range
    times the scale, which quantizing and dequantizing again gives back exactly. ONNX Runtime's QDQ
    form puts a pair around every Reshape and Transpose: a transformer's attention heads went through
    four such round trips, ten divisions an element."""
    value = _constant(scale, constants)
    if value is None or value.size != 1:
        return False
    node = producers.get(name)
    while node is not None and node.op_type in VALUE_PRESERVING and node.domain in ("", "ai.onnx"):
        node = producers.get(node.input[0])
    return _is_plain(node, "DequantizeLinear") and _input(node, 1) == scale and _input(node, 2) == zero
