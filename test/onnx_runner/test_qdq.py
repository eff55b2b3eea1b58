"""A quantized model's QDQ form (onnx/qdq.py): a Conv between DequantizeLinear nodes runs on the
quantized values, a DequantizeLinear of a QuantizeLinear is one fake quantization, and every form the
rewrite does not cover runs as written. numpy computes each model's numbers as ONNX defines them."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from lazygrad import dtypes  # noqa: E402
from lazygrad.onnx import OnnxModel  # noqa: E402
from lazygrad.schedule.fuse import create_schedule  # noqa: E402

DEVICES = ["CPU", "NPY"]


def quantize(x, scale, zero_point, low, high):
    """QuantizeLinear's numbers in float32: x / scale rounded half to even, plus the zero point, clamped."""
    return np.clip(np.round(np.float32(x) / np.float32(scale)) + zero_point, low, high)


def dequantize(q, scale, zero_point):
    return (np.float32(q) - np.float32(zero_point)) * np.float32(scale)


def qdq_conv_model(w: np.ndarray, w_scale: np.ndarray, bias: np.ndarray, weight_axis: int = 0, group: int = 1,
                   w_zero_point: np.ndarray | None = None, x_zero_type: int = TensorProto.UINT8):
    """y = DQ(Q(relu(Conv(DQ(Q(x)), DQ(w), bias)))) as ONNX Runtime's static quantizer writes it (pads 1),
    and `fake` = DQ(Q(x)) read by nothing else."""
    x_zero = np.array(7, np.uint8) if x_zero_type == TensorProto.UINT8 else np.array(-3, np.int8)
    initializers = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w_scale, "w_scale"),
                    numpy_helper.from_array(bias, "b"),
                    numpy_helper.from_array(np.array(0.03, np.float32), "x_scale"),
                    numpy_helper.from_array(x_zero, "x_zero"),
                    numpy_helper.from_array(np.array(0.05, np.float32), "y_scale"),
                    numpy_helper.from_array(np.array(0, np.uint8), "y_zero")]
    w_inputs = ["w", "w_scale"]
    if w_zero_point is not None:
        initializers.append(numpy_helper.from_array(w_zero_point, "w_zero"))
        w_inputs.append("w_zero")
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"]),
             helper.make_node("DequantizeLinear", w_inputs, ["wd"], axis=weight_axis),
             helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1], group=group),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "y_scale", "y_zero"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "y_scale", "y_zero"], ["y"]),
             helper.make_node("QuantizeLinear", ["x", "y_scale", "y_zero"], ["xq2"]),
             helper.make_node("DequantizeLinear", ["xq2", "y_scale", "y_zero"], ["fake"])]
    graph = helper.make_graph(nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 6, 7])],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("y", "fake")],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), x_zero


def reference(x, w, w_scale, bias, x_zero, weight_axis=0, group=1, w_zero=0):
    """The model's y and fake in float64 from the quantized values (every product and sum exact), each
    y rounded to its step as ONNX's QuantizeLinear does."""
    low, high = (0, 255) if x_zero.dtype == np.uint8 else (-128, 127)
    xd = dequantize(quantize(x, 0.03, int(x_zero), low, high), 0.03, int(x_zero)).astype(np.float64)
    scale_shape = (-1, 1, 1, 1) if weight_axis == 0 else (1, -1, 1, 1)
    wd = (w.astype(np.float64) - w_zero) * w_scale.astype(np.float64).reshape(scale_shape)
    padded = np.pad(xd, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # (N, C, H, W, 3, 3)
    per_group = w.shape[0] // group
    c = np.concatenate([np.einsum("nchwij,kcij->nkhw", windows[:, g * (8 // group):(g + 1) * (8 // group)],
                                  wd[g * per_group:(g + 1) * per_group]) for g in range(group)], axis=1)
    r = np.maximum(c + bias.reshape(-1, 1, 1), 0)
    y = np.clip(np.round(r / np.float64(np.float32(0.05))), 0, 255) * np.float64(np.float32(0.05))
    fake = dequantize(quantize(x, 0.05, 0, 0, 255), 0.05, 0)
    return y, fake


def inputs_and_weights(seed: int, out_channels: int = 16, in_channels: int = 8):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 8, 6, 7)).astype(np.float32)
    x[0, 0, 0, :4] = np.float32(0.03) * np.array([0.5, 1.5, -2.5, 100.0], np.float32)  # ties, and past the range
    w = rng.integers(-127, 128, (out_channels, in_channels, 3, 3)).astype(np.int8)
    w_scale = (rng.random(out_channels) * 0.01 + 0.001).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    return x, w, w_scale, bias


def products(tensor) -> list:
    return [item.kernel for item in create_schedule([tensor.lazydata]) if item.kernel is not None
            and item.kernel.reduce_axes]


@pytest.mark.parametrize("device", DEVICES)
def test_a_dequantized_convolution_sums_the_quantized_values(device):
    """Conv(DQ(uint8 x), DQ(int8 w, one scale per output channel), bias) becomes DequantizedConv: the
    exact int32 sums of the uint8-by-int8 products (read as bytes, the CPU's VNNI tile), times both
    scales. The next QuantizeLinear rounds the float32 result, so a value within float32's rounding of
    a step boundary may land one step away from the float64 reference: at most one step, and rarely."""
    x, w, w_scale, bias = inputs_and_weights(0)
    model_proto, x_zero = qdq_conv_model(w, w_scale, bias)
    model = OnnxModel(model_proto, device=device)
    assert model.op_histogram()["DequantizedConv"] == 1 and model.op_histogram()["FakeQuantize"] == 2
    result = model(x=x)
    expected_y, expected_fake = reference(x, w, w_scale, bias, x_zero)
    if device == "CPU":
        assert any(dtypes.uint8 in kernel.buffer_dtypes and dtypes.int8 in kernel.buffer_dtypes
                   for kernel in products(result["y"]))
    steps = np.abs(result["y"].numpy().astype(np.float64) - expected_y) / np.float32(0.05)
    assert steps.max() <= 1.0 + 1e-4 and (steps > 0.5).mean() < 0.01
    np.testing.assert_array_equal(result["fake"].numpy(), expected_fake)


@pytest.mark.parametrize("device", DEVICES)
def test_fake_quantize_is_quantize_then_dequantize_bit_for_bit(device):
    """DQ(Q(x)) with the same scale and zero point (per tensor; per channel along axis 1, int8 and
    uint8) is FakeQuantize: the same float32 numbers, ties to even and values past the range (and past
    2^22 steps, and infinities) included."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 4, 5)) * 4).astype(np.float32)
    scale = np.array([0.5, 0.25, 0.125, 1.0], np.float32)
    x[:, :, 0] = scale.reshape(1, -1) * np.array([0.5, 1.5, 2.5, -0.5], np.float32).reshape(1, -1)  # ties
    x[0, :, 1] = 1000.0
    x[1, :, 1] = -1000.0
    x[2, :, 1:4] = [3e7, -np.inf, np.inf]  # past 2^22 steps, where the rounding's shift is no longer exact
    for zero_type, zero, (low, high) in ((np.int8, [-3, 0, 5, 127], (-128, 127)), (np.uint8, [0, 9, 128, 255], (0, 255))):
        zero = np.array(zero, zero_type)
        nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
                 helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1),
                 helper.make_node("QuantizeLinear", ["x", "t"], ["q1"]),
                 helper.make_node("DequantizeLinear", ["q1", "t"], ["y1"])]
        graph = helper.make_graph(nodes, "fake", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y1")],
                                  [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z"),
                                   numpy_helper.from_array(np.array(0.1, np.float32), "t")])
        model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), device=device)
        assert model.op_histogram()["FakeQuantize"] == 2
        result = model(x=x)
        z = zero.astype(np.float32).reshape(1, -1, 1)
        s = scale.reshape(1, -1, 1)
        np.testing.assert_array_equal(result["y"].numpy(), dequantize(quantize(x, s, z, low, high), s, z))
        np.testing.assert_array_equal(result["y1"].numpy(), dequantize(quantize(x, 0.1, 0, 0, 255), 0.1, 0))


@pytest.mark.parametrize("form", ["grouped", "per input channel", "weight zero point", "int8 activations"])
def test_forms_the_rewrite_does_not_cover_run_as_written(form):
    """A grouped convolution, a weight scale along the input channels (it cannot leave the sums), a
    weight zero point other than 0 and int8 activations keep their Conv of dequantized values."""
    x, w, w_scale, bias = inputs_and_weights(5, in_channels=4 if form == "grouped" else 8)
    options = {"grouped": dict(group=2), "per input channel": dict(weight_axis=1),
               "weight zero point": dict(w_zero_point=np.full(16, 2, np.int8)),
               "int8 activations": dict(x_zero_type=TensorProto.INT8)}[form]
    if form == "per input channel":
        w_scale = w_scale[:8]
    model_proto, x_zero = qdq_conv_model(w, w_scale, bias, **options)
    model = OnnxModel(model_proto, device="CPU")
    assert model.op_histogram()["Conv"] == 1 and "DequantizedConv" not in model.op_histogram()
    result = model(x=x)
    expected_y, _ = reference(x, w, w_scale, bias, x_zero, weight_axis=options.get("weight_axis", 0),
                              group=options.get("group", 1), w_zero=2 if form == "weight zero point" else 0)
    steps = np.abs(result["y"].numpy().astype(np.float64) - expected_y) / np.float32(0.05)
    assert steps.max() <= 1.0 + 1e-4 and (steps > 0.5).mean() < 0.01


def test_a_dequantize_of_another_scale_is_left_alone():
    """A DequantizeLinear reading a QuantizeLinear with another scale is no round trip."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "t"], ["y"])]
    graph = helper.make_graph(nodes, "rescale", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(0.5, np.float32), "s"),
                               numpy_helper.from_array(np.array(2.0, np.float32), "t")])
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))
    assert "FakeQuantize" not in model.op_histogram()
    x = np.array([-1.0, 0.2, 0.25, 0.75, 3.0, 500.0], np.float32)
    np.testing.assert_array_equal(model(x=x)["y"].numpy(), dequantize(quantize(x, 0.5, 0, 0, 255), 2.0, 0))


def test_a_quantized_residual_block_keeps_each_product_in_its_own_kernel():
    """A bottleneck (1x1, 3x3, 1x1) after a max pool and the projection added to it, all DequantizedConv: each
    stays a kernel of its own with its tile (chained into one kernel, a quantized ResNet-50's first
    block took 25 ms in that kernel instead of 0.3). Within a step of numpy's float64 numbers."""
    rng = np.random.default_rng(7)
    weights = {name: rng.integers(-127, 128, shape).astype(np.int8)
               for name, shape in (("w1", (16, 32, 1, 1)), ("w3", (16, 16, 3, 3)), ("w2", (64, 16, 1, 1)), ("wp", (64, 32, 1, 1)))}
    scales = {name: (rng.random(w.shape[0]) * 0.004 + 0.001).astype(np.float32) for name, w in weights.items()}
    initializers = [numpy_helper.from_array(np.array(0, np.uint8), "zero")]
    initializers += [numpy_helper.from_array(np.array(step, np.float32), f"s{index}")
                     for index, step in enumerate((0.02, 0.03, 0.05, 0.04, 0.06, 0.035))]
    for name, w in weights.items():
        initializers += [numpy_helper.from_array(w, name), numpy_helper.from_array(scales[name], name + "_scale")]
    nodes = []

    def qdq(value, scale, out):
        nodes.extend([helper.make_node("QuantizeLinear", [value, scale, "zero"], [out + "_q"]),
                      helper.make_node("DequantizeLinear", [out + "_q", scale, "zero"], [out])])

    def conv(value, weight, out, pads=0):
        nodes.extend([helper.make_node("DequantizeLinear", [weight, weight + "_scale"], [weight + "_d"], axis=0),
                      helper.make_node("Conv", [value, weight + "_d"], [out], pads=[pads] * 4)])
    qdq("x", "s0", "x0")
    nodes.append(helper.make_node("MaxPool", ["x0"], ["pooled"], kernel_shape=[2, 2], strides=[2, 2]))
    qdq("pooled", "s0", "xd")
    conv("xd", "w1", "c1")
    nodes.append(helper.make_node("Relu", ["c1"], ["r1"]))
    qdq("r1", "s1", "r1d")
    conv("r1d", "w3", "c3", pads=1)
    nodes.append(helper.make_node("Relu", ["c3"], ["r3"]))
    qdq("r3", "s5", "r3d")
    conv("r3d", "w2", "c2")
    conv("xd", "wp", "cp")
    qdq("c2", "s2", "c2d")
    qdq("cp", "s3", "cpd")
    nodes += [helper.make_node("Add", ["c2d", "cpd"], ["sum"]), helper.make_node("Relu", ["sum"], ["r"])]
    qdq("r", "s4", "y")
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), device="CPU")
    assert model.op_histogram()["DequantizedConv"] == 4
    x = np.abs(rng.standard_normal((1, 32, 28, 28))).astype(np.float32)
    y = model(x=x)["y"]
    kernels = [item.kernel for item in create_schedule([y.lazydata]) if item.kernel is not None]
    assert all(sum(node.is_reduce for node in kernel.ast.walk()) <= 1 for kernel in kernels)

    def float_conv(value, name):
        w = weights[name].astype(np.float64) * scales[name].astype(np.float64).reshape(-1, 1, 1, 1)
        pad = w.shape[2] // 2
        windows = np.lib.stride_tricks.sliding_window_view(np.pad(value, ((0, 0), (0, 0), (pad, pad), (pad, pad))),
                                                           w.shape[2:], axis=(2, 3))
        return np.einsum("nchwij,kcij->nkhw", windows, w)

    def fake(value, step):  # in float32, as the graph's QuantizeLinear and DequantizeLinear compute
        return np.clip(np.round(np.float32(value) / np.float32(step)), 0, 255) * np.float32(step)
    xd = fake(x, 0.02).reshape(1, 32, 14, 2, 14, 2).max(axis=(3, 5))
    r1d = fake(np.maximum(float_conv(xd, "w1"), 0), 0.03)
    r3d = fake(np.maximum(float_conv(r1d, "w3"), 0), 0.035)
    total = fake(float_conv(r3d, "w2"), 0.05) + fake(float_conv(xd, "wp"), 0.04)  # a float32 Add, ties and all
    steps = np.abs(y.numpy() - fake(np.maximum(total, 0), 0.06)) / np.float32(0.06)
    assert steps.max() <= 1.0 + 1e-4 and (steps > 0.5).mean() < 0.01


@pytest.mark.parametrize("device", DEVICES)
def test_a_dequantized_gemm_and_matmul_sum_the_quantized_values(device):
    """Gemm (transB, one weight scale per output column, a bias) and MatMul (weight (K, N), one scale
    per column) between DequantizeLinear nodes become DequantizedGemm: the byte dot products of the
    uint8 activation and the int8 weight, times both scales. Known zero points and scales are numbers
    in the kernels: no kernel loads a one-byte zero point (one in a loop kept gcc from vectorizing it).
    Within a step of numpy's float64 numbers."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((6, 40)).astype(np.float32)
    w_gemm = rng.integers(-127, 128, (24, 40)).astype(np.int8)
    w_matmul = rng.integers(-127, 128, (24, 16)).astype(np.int8)
    s_gemm = (rng.random(24) * 0.01 + 0.001).astype(np.float32)
    s_matmul = (rng.random(16) * 0.01 + 0.001).astype(np.float32)
    bias = rng.standard_normal(24).astype(np.float32)
    initializers = [numpy_helper.from_array(value, name) for name, value in (
        ("wg", w_gemm), ("sg", s_gemm), ("wm", w_matmul), ("sm", s_matmul), ("bias", bias),
        ("s0", np.array(0.02, np.float32)), ("s1", np.array(0.05, np.float32)), ("s2", np.array(0.03, np.float32)),
        ("z0", np.array(128, np.uint8)), ("z1", np.array(3, np.uint8)), ("z2", np.array(0, np.uint8)))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s0", "z0"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wg", "sg"], ["wgd"], axis=0),
             helper.make_node("Gemm", ["xd", "wgd", "bias"], ["g"], transB=1),
             helper.make_node("QuantizeLinear", ["g", "s1", "z1"], ["gq"]),
             helper.make_node("DequantizeLinear", ["gq", "s1", "z1"], ["gd"]),
             helper.make_node("DequantizeLinear", ["wm", "sm"], ["wmd"], axis=1),
             helper.make_node("MatMul", ["gd", "wmd"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "s2", "z2"], ["mq"]),
             helper.make_node("DequantizeLinear", ["mq", "s2", "z2"], ["y"])]
    graph = helper.make_graph(nodes, "qdq_gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), device=device)
    assert model.op_histogram()["DequantizedGemm"] == 2 and "Gemm" not in model.op_histogram()
    y = model(x=x)["y"]
    if device == "CPU":
        kernels = [item.kernel for item in create_schedule([y.lazydata]) if item.kernel is not None]
        assert sum(dtypes.uint8 in kernel.buffer_dtypes and dtypes.int8 in kernel.buffer_dtypes
                   for kernel in kernels if kernel.reduce_axes) == 2
        assert not any(node.op.name == "LOAD" and node.dtype == dtypes.uint8
                       and all(stride == 0 for view in node.arg[1].views for stride in view.strides)
                       for kernel in kernels for node in kernel.ast.walk())

    def fake(value, step, zero):
        return (np.clip(np.round(np.float32(value) / np.float32(step)) + zero, 0, 255) - zero) * np.float32(step)
    xd = fake(x, 0.02, 128).astype(np.float64)
    g = xd @ (w_gemm.astype(np.float64) * s_gemm.reshape(-1, 1)).T + bias
    gd = fake(g, 0.05, 3).astype(np.float64)
    expected = fake(gd @ (w_matmul.astype(np.float64) * s_matmul.reshape(1, -1)), 0.03, 0)
    steps = np.abs(y.numpy() - expected) / np.float32(0.03)
    assert steps.max() <= 1.0 + 1e-4 and (steps > 0.5).mean() < 0.02


def test_a_round_trip_of_values_already_on_its_grid_is_an_identity():
    """ONNX Runtime's QDQ form quantizes and dequantizes again around each Reshape and Transpose with
    the same parameters: those values are already integers in range times the scale, so the pair
    gives them back exactly and becomes an Identity; another scale keeps its FakeQuantize."""
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((2, 6, 4)) * 3).astype(np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"]),
             helper.make_node("DequantizeLinear", ["q0", "s", "z"], ["d0"]),
             helper.make_node("Reshape", ["d0", "shape"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s", "z"], ["d1"]),
             helper.make_node("Transpose", ["d1"], ["t"], perm=[0, 2, 1]),
             helper.make_node("QuantizeLinear", ["t", "s", "z"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["y"]),
             helper.make_node("QuantizeLinear", ["t", "s2", "z"], ["q3"]),
             helper.make_node("DequantizeLinear", ["q3", "s2", "z"], ["y2"])]
    initializers = [numpy_helper.from_array(np.array(0.07, np.float32), "s"),
                    numpy_helper.from_array(np.array(0.05, np.float32), "s2"),
                    numpy_helper.from_array(np.array(120, np.uint8), "z"),
                    numpy_helper.from_array(np.array([2, 4, 6], np.int64), "shape")]
    graph = helper.make_graph(nodes, "grid", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("y", "y2")],
                              initializers)
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))
    assert model.op_histogram()["Identity"] == 2 and model.op_histogram()["FakeQuantize"] == 2
    result = model(x=x)
    on_grid = dequantize(quantize(x, 0.07, 120, 0, 255), 0.07, 120).reshape(2, 4, 6).transpose(0, 2, 1)
    np.testing.assert_array_equal(result["y"].numpy(), on_grid)
    np.testing.assert_array_equal(result["y2"].numpy(), dequantize(quantize(on_grid, 0.05, 120, 0, 255), 0.05, 120))
    # and as written: quantizing the grid's values again gives them back exactly
    np.testing.assert_array_equal(dequantize(quantize(on_grid, 0.07, 120, 0, 255), 0.07, 120), on_grid)
