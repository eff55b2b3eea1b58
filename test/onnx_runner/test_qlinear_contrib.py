"""ONNX Runtime's quantized operators of the com.microsoft domain (onnx/ops_qlinear.py) and the
integer convolutions of its QOperator form, against numpy: dequantize, the float operator, quantize
(half to even, saturated). QGemm's and the convolutions' int32 sums are exact."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from lazygrad import dtypes  # noqa: E402
from lazygrad.onnx import OnnxModel  # noqa: E402
from lazygrad.schedule.fuse import create_schedule  # noqa: E402

ONNX_TYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def dequantize(q, scale, zero_point):
    return (q.astype(np.float32) - np.float32(zero_point)) * np.float32(scale)


def quantize(x, scale, zero_point, dtype):
    info = np.iinfo(dtype)
    return np.clip(np.round(np.float32(x) / np.float32(scale)) + zero_point, info.min, info.max).astype(dtype)


def run(op_type, inputs: dict, constants: dict, output_type=TensorProto.UINT8, device="CPU", **attributes):
    """One com.microsoft node reading graph inputs `inputs` and initializers `constants` (in the order
    given, None for an absent optional input), its output y."""
    names = [name for name in list(inputs) + list(constants)]
    order = attributes.pop("order", names)
    graph = helper.make_graph(
        [helper.make_node(op_type, [name if name is not None else "" for name in order], ["y"],
                          domain="com.microsoft", **attributes)], op_type,
        [helper.make_tensor_value_info(name, ONNX_TYPES.get(value.dtype.type, TensorProto.FLOAT), list(value.shape))
         for name, value in inputs.items()],
        [helper.make_tensor_value_info("y", output_type, None)],
        [numpy_helper.from_array(value, name) for name, value in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return OnnxModel(model, device=device)(**inputs)["y"]


def scales(**values):
    return {name: np.array(value, np.float32) for name, value in values.items()}


@pytest.mark.parametrize("device", ["CPU", "NPY"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_elementwise_and_pooling_operators_are_their_float_ones_between_quantizations(device, dtype):
    rng = np.random.default_rng(0)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, (2, 8, 5, 6)).astype(dtype)
    b = rng.integers(info.min, info.max + 1, (8, 1, 1)).astype(dtype)  # broadcast
    zero = {np.uint8: np.array(3, np.uint8), np.int8: np.array(-2, np.int8)}[dtype]
    a_f, b_f = dequantize(a, 0.05, zero), dequantize(b, 0.02, zero)
    binary = {**scales(a_scale=0.05), "a_zero": zero, **scales(b_scale=0.02), "b_zero": zero,
              **scales(c_scale=0.07), "c_zero": zero}
    out_type = ONNX_TYPES[dtype]
    order = ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "c_scale", "c_zero"]
    for op_type, expected in (("QLinearAdd", a_f + b_f), ("QLinearMul", a_f * b_f)):
        result = run(op_type, {"a": a, "b": b}, binary, out_type, device, order=order)
        if device == "CPU":  # known scales and zero points are numbers in the kernel, not one-byte loads
            assert not any(node.op.name == "LOAD" and node.dtype.itemsize == 1
                           and all(stride == 0 for view in node.arg[1].views for stride in view.strides)
                           for item in create_schedule([result.lazydata]) if item.kernel is not None
                           for node in item.kernel.ast.walk())
        np.testing.assert_array_equal(result.numpy(), quantize(expected, 0.07, int(zero), dtype), err_msg=op_type)
    unary = {**scales(x_scale=0.05), "x_zero": zero, **scales(y_scale=0.004), "y_zero": zero}
    sigmoid = 1 / (1 + np.exp(-a_f.astype(np.float64)))
    leaky = np.where(a_f > 0, a_f, np.float32(0.2) * a_f)
    for op_type, expected, attributes in (("QLinearSigmoid", sigmoid, {}), ("QLinearLeakyRelu", leaky, {"alpha": 0.2})):
        step = 0.004 if op_type == "QLinearSigmoid" else 0.05
        result = run(op_type, {"x": a}, {**unary, **scales(y_scale=step)}, out_type, device, **attributes)
        np.testing.assert_array_equal(result.numpy(), quantize(expected, step, int(zero), dtype), err_msg=op_type)

    def within_a_step(result, expected):  # a mean's sum in another order may land a tie on its other side
        steps = np.abs(result.numpy().astype(np.int64) - quantize(expected, 0.05, int(zero), dtype).astype(np.int64))
        assert steps.max() <= 1 and (steps > 0).mean() < 0.1
    mean = a_f.astype(np.float64).mean((2, 3))
    within_a_step(run("QLinearGlobalAveragePool", {"x": a}, {**unary, **scales(y_scale=0.05)}, out_type, device),
                  mean.reshape(2, 8, 1, 1))
    within_a_step(run("QLinearGlobalAveragePool", {"x": a.transpose(0, 2, 3, 1).copy()},
                      {**unary, **scales(y_scale=0.05)}, out_type, device, channels_last=1), mean.reshape(2, 1, 1, 8))
    pooled = run("QLinearAveragePool", {"x": a}, {**unary, **scales(y_scale=0.05)}, out_type, device,
                 kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    padded = np.pad(a_f.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    counts = np.pad(np.ones(a_f.shape[2:]), 1)
    window = np.lib.stride_tricks.sliding_window_view
    sums = window(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2].sum((-2, -1))
    within_a_step(pooled, sums / window(counts, (3, 3))[::2, ::2].sum((-2, -1)))


@pytest.mark.parametrize("device", ["CPU", "NPY"])
def test_qlinear_softmax_and_concat(device):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (2, 3, 10)).astype(np.uint8)
    x_f = dequantize(x, 0.1, 100)
    constants = {**scales(x_scale=0.1), "x_zero": np.array(100, np.uint8), **scales(y_scale=1 / 256),
                 "y_zero": np.array(0, np.uint8)}
    exponentials = np.exp(x_f - x_f.max(-1, keepdims=True))
    result = run("QLinearSoftmax", {"x": x}, constants, device=device, axis=-1, opset=13)
    np.testing.assert_array_equal(result.numpy(), quantize(exponentials / exponentials.sum(-1, keepdims=True),
                                                           1 / 256, 0, np.uint8))
    flat = x_f.reshape(2, 30)  # before opset 13: the axes from `axis` on, as one
    exponentials = np.exp(flat - flat.max(-1, keepdims=True))
    result = run("QLinearSoftmax", {"x": x}, constants, device=device, axis=1, opset=12)
    np.testing.assert_array_equal(result.numpy(), quantize((exponentials / exponentials.sum(-1, keepdims=True))
                                                           .reshape(2, 3, 10), 1 / 256, 0, np.uint8))
    y = rng.integers(0, 256, (2, 5, 10)).astype(np.uint8)
    concat = {**scales(out_scale=0.2), "out_zero": np.array(7, np.uint8), **scales(x_scale=0.1),
              "x_zero": np.array(100, np.uint8), **scales(z_scale=0.3), "z_zero": np.array(1, np.uint8)}
    result = run("QLinearConcat", {"x": x, "z": y}, concat, device=device, axis=1,
                 order=["out_scale", "out_zero", "x", "x_scale", "x_zero", "z", "z_scale", "z_zero"])
    expected = np.concatenate([x_f, dequantize(y, 0.3, 1)], axis=1)
    np.testing.assert_array_equal(result.numpy(), quantize(expected, 0.2, 7, np.uint8))
    with pytest.raises(RuntimeError, match="triples"):
        run("QLinearConcat", {"x": x}, concat, device=device, axis=1, order=["out_scale", "out_zero", "x", "x_scale"])


@pytest.mark.parametrize("device", ["CPU", "NPY"])
def test_qgemm_sums_the_quantized_values_with_its_int32_bias(device):
    """alpha * a_scale * b_scale[column] * (sum of (a - a_zero)(b - b_zero[column]) + c), quantized, or
    float32 without an output scale; b transposed, its scale and zero point per column or per tensor."""
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (4, 24)).astype(np.uint8)
    b = rng.integers(-127, 128, (10, 24)).astype(np.int8)  # transB: (N, K)
    c = rng.integers(-5000, 5000, (10,)).astype(np.int32)
    for b_zero, b_scale in ((np.zeros(10, np.int8), (rng.random(10) * 0.01 + 0.001).astype(np.float32)),
                            (np.arange(10, dtype=np.int8) - 5, (rng.random(10) * 0.01 + 0.001).astype(np.float32)),
                            (np.array(0, np.int8), np.array(0.004, np.float32))):
        sums = (a.astype(np.int64) - 9) @ (b.astype(np.int64) - b_zero.astype(np.int64).reshape(-1, 1)).T + c
        expected = sums.astype(np.float32) * (np.float32(0.5) * np.float32(0.02) * b_scale)
        constants = {**scales(a_scale=0.02), "a_zero": np.array(9, np.uint8), "b": b, "b_scale": b_scale,
                     "b_zero": b_zero, "c": c}
        floats = run("QGemm", {"a": a}, constants, TensorProto.FLOAT, device, alpha=0.5, transB=1)
        if device == "CPU" and not b_zero.any():  # zero points of 0, one per column too: the byte dot products
            products = [item.kernel for item in create_schedule([floats.lazydata]) if item.kernel is not None
                        and item.kernel.reduce_axes]
            assert any(dtypes.uint8 in kernel.buffer_dtypes and dtypes.int8 in kernel.buffer_dtypes for kernel in products)
        np.testing.assert_allclose(floats.numpy(), expected, rtol=1e-6)
        quantized = run("QGemm", {"a": a}, {**constants, **scales(y_scale=0.3), "y_zero": np.array(128, np.uint8)},
                        TensorProto.UINT8, device, alpha=0.5, transB=1)
        steps = np.abs(quantized.numpy().astype(np.int64) - quantize(expected, 0.3, 128, np.uint8).astype(np.int64))
        assert steps.max() <= 1 and (steps > 0).mean() < 0.05


def _grouped_sums(x, x_zero, w, w_zero, group):
    padded = np.pad(x.astype(np.int64) - x_zero, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    per_group = w.shape[0] // group
    centered = w.astype(np.int64) - w_zero.reshape(-1, 1, 1, 1)
    return np.concatenate([np.einsum("nchwij,kcij->nkhw", windows[:, g * w.shape[1]:(g + 1) * w.shape[1]],
                                     centered[g * per_group:(g + 1) * per_group]) for g in range(group)], axis=1)


@pytest.mark.parametrize("device", ["CPU", "NPY"])
def test_integer_convolutions_of_a_quantized_model_in_qoperator_form(device):
    """ConvInteger with one zero point of 0 per output channel takes the byte dot products (it had
    summed the centered operands in int32); a grouped one (depthwise) sums in float32, exact since
    each sum of its 9 centered byte products is an integer float32 holds. Both exact against numpy."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (2, 16, 7, 6)).astype(np.uint8)
    for group, w_zero in ((1, np.zeros(32, np.int8)), (16, np.zeros(16, np.int8)), (16, np.arange(16, dtype=np.int8))):
        w = rng.integers(-127, 128, (32 if group == 1 else 16, 16 // group, 3, 3)).astype(np.int8)
        graph = helper.make_graph(
            [helper.make_node("ConvInteger", ["x", "w", "x_zero", "w_zero"], ["y"], pads=[1, 1, 1, 1], group=group)],
            "conv", [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x.shape))],
            [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w_zero, "w_zero"),
             numpy_helper.from_array(np.array(131, np.uint8), "x_zero")])
        result = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), device=device)(x=x)["y"]
        if device == "CPU" and group == 1:
            products = [item.kernel for item in create_schedule([result.lazydata]) if item.kernel is not None
                        and item.kernel.reduce_axes]
            assert any(dtypes.uint8 in kernel.buffer_dtypes and dtypes.int8 in kernel.buffer_dtypes for kernel in products)
        assert result.dtype == dtypes.int32
        np.testing.assert_array_equal(result.numpy(), _grouped_sums(x, 131, w, w_zero, group))


def test_a_dynamically_quantized_matmul_reads_its_input_stored():
    """MatMulInteger of DynamicQuantizeLinear's uint8 (a transformer quantized by ONNX Runtime's
    quantize_dynamic): the quantized input is stored as uint8 before the dot products (it was stored
    as the int32 they widen it to, and the products ran as int32 multiplies at 26-80 GOP/s, now VNNI's
    at 400-700). Exact against numpy."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 16, 64)).astype(np.float32)
    w = rng.integers(-127, 128, (64, 48)).astype(np.int8)
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("DynamicQuantizeLinear", ["r"], ["q", "q_scale", "q_zero"]),
         helper.make_node("MatMulInteger", ["q", "w", "q_zero"], ["y"])], "dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)], [numpy_helper.from_array(w, "w")])
    result = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), device="CPU")(x=x)["y"]
    (product,) = [item.kernel for item in create_schedule([result.lazydata]) if item.kernel is not None
                  and item.kernel.reduce_axes and dtypes.int8 in item.kernel.buffer_dtypes and 16 in item.kernel.full_shape]
    # it reads the uint8 values (VNNI's dot products), not int32 copies of them, nor the floats they round
    assert dtypes.uint8 in product.buffer_dtypes and dtypes.float32 not in product.buffer_dtypes
    # the weight's column sums (for the zero point) are a kernel of the weight alone, kept between calls,
    # not summed again inside every call's epilogue
    kernels = [item.kernel for item in create_schedule([result.lazydata]) if item.kernel is not None]
    assert any(kernel.buffer_dtypes == (dtypes.int32, dtypes.int8) and kernel.reduce_axes for kernel in kernels)
    x = np.maximum(x, 0)
    low, high = min(x.min(), 0), max(x.max(), 0)
    scale = np.float32((high - low) / np.float32(255))
    zero = np.clip(np.round(-low / scale), 0, 255)
    q = np.clip(np.round(x / scale) + zero, 0, 255).astype(np.int64)
    np.testing.assert_array_equal(result.numpy(), (q - int(zero)) @ w.astype(np.int64))
