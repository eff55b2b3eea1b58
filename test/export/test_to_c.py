"""lazygrad.export.to_c end to end: each model is exported, compiled with
`cc -std=c99 -O2 -Wall -Wextra -Werror`, run from a small C harness on inputs other than the
export's examples, and compared with lazygrad's own outputs (atol 1e-5)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import c_harness
import lazygrad
import lazygrad.nn.functional as F
from lazygrad import Tensor, dtypes
from lazygrad.export import to_c
from lazygrad.nn import BatchNorm2d, Conv2d, Linear, ReLU, Sequential

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "extra"))

import train_digits  # noqa: E402

# What an exported object may leave for the linker: math.h's functions (float and double).
MATH_FUNCTIONS = {prefix + suffix for prefix in ("sqrt", "sin", "cos", "exp", "exp2", "log", "log2", "fmod", "fma",
                                                 "rint", "floor", "ceil", "trunc", "round", "fabs", "pow", "tanh")
                  for suffix in ("", "f")}


def export_and_run(function, examples: list[np.ndarray], inputs: list[np.ndarray], directory: Path,
                   name: str = "model", weights: str = "inline"):
    """The export's result and the C harness's outputs for `inputs`."""
    result = to_c(function, examples, str(directory / f"{name}.c"), name=name, weights=weights, quiet=True)
    program = c_harness.build(result, name, directory, weights_file=weights == "file")
    outputs, _ = c_harness.run(program, result, inputs, directory, weights=result.weights_path)
    return result, outputs


def lazygrad_outputs(function, inputs: list[np.ndarray]) -> list[np.ndarray]:
    result = function(*[Tensor(array) for array in inputs])
    return [tensor.numpy() for tensor in (result if isinstance(result, (tuple, list)) else [result])]


def assert_same(outputs: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(outputs) == len(expected)
    for number, (output, wanted) in enumerate(zip(outputs, expected)):
        assert output.shape == wanted.shape and output.dtype == wanted.dtype, number
        np.testing.assert_allclose(output, wanted, atol=1e-5, rtol=0, err_msg=f"output {number}")


def test_the_digits_cnn_runs_in_c_as_in_lazygrad(tmp_path):
    lazygrad.manual_seed(0)
    model = train_digits.build_model(8, device="CPU")
    model.eval()
    rng = np.random.default_rng(1)
    examples = [np.zeros((4, 1, 8, 8), np.float32)]
    inputs = [rng.standard_normal((4, 1, 8, 8)).astype(np.float32)]
    result, outputs = export_and_run(model, examples, inputs, tmp_path)
    expected = lazygrad_outputs(model, inputs)
    assert_same(outputs, expected)
    # with the host's instructions (an FMA where there is one: fused multiply-adds, as in lazygrad)
    native = c_harness.build(result, "model", tmp_path, extra=("-march=native",))
    assert_same(c_harness.run(native, result, inputs, tmp_path)[0], expected)
    parameters = sum(tensor.numel() for tensor in lazygrad.nn.state.get_parameters(model))
    assert result.weight_bytes == 4 * parameters
    assert 0 < result.arena_bytes < result.intermediate_bytes
    header = Path(result.header_path).read_text()
    assert f"#define MODEL_ARENA_BYTES {result.arena_bytes}" in header
    assert f"#define MODEL_WEIGHT_BYTES {result.weight_bytes}" in header
    source = Path(result.source_path).read_text()
    assert "#pragma" not in source and "malloc" not in source and "lazygrad" not in source.split("*/", 1)[1]


def test_the_digits_cnn_in_int8_runs_in_c_with_int8_weights(tmp_path):
    """lazygrad.quantize's model exports like any other: its weights as int8 arrays (a quarter of the
    float bytes, plus a scale per output channel), its products summed in int32 in C too."""
    from lazygrad.quantize import quantize
    lazygrad.manual_seed(0)
    float_model = train_digits.build_model(8, device="CPU")
    float_parameters = sum(tensor.numel() for tensor in lazygrad.nn.state.get_parameters(float_model))
    model = quantize(float_model).eval()
    rng = np.random.default_rng(2)
    examples = [np.zeros((4, 1, 8, 8), np.float32)]
    inputs = [rng.standard_normal((4, 1, 8, 8)).astype(np.float32)]
    result, outputs = export_and_run(model, examples, inputs, tmp_path, name="int8")
    assert_same(outputs, lazygrad_outputs(model, inputs))
    assert result.weight_bytes < 0.3 * 4 * float_parameters
    assert "signed char" in Path(result.source_path).read_text()


def test_an_export_compiles_freestanding_and_needs_only_math_functions(tmp_path):
    lazygrad.manual_seed(0)
    model = train_digits.build_model(8, device="CPU")
    model.eval()

    def classify(images):
        return model(images).softmax(1).sqrt()  # exp and sqrt from math.h besides the network

    result = to_c(classify, np.zeros((2, 1, 8, 8), np.float32), str(tmp_path / "model.c"), quiet=True)
    c_harness.compile_strictly(result.source_path, tmp_path / "model.o", ("-ffreestanding",))
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed: the undefined-symbol check needs it")
    symbols = subprocess.run(["nm", "-u", str(tmp_path / "model.o")], capture_output=True, text=True)
    if symbols.returncode != 0:
        pytest.skip(f"nm is not usable here: {symbols.stderr.strip()}")
    undefined = {line.split()[-1] for line in symbols.stdout.splitlines() if line.strip()}
    assert undefined <= MATH_FUNCTIONS, f"the exported object needs more than math.h: {undefined - MATH_FUNCTIONS}"


@pytest.mark.parametrize("weights", ["inline", "file"])
def test_an_mlp_runs_in_c_with_weights_inline_or_in_a_file(tmp_path, weights):
    lazygrad.manual_seed(2)
    model = Sequential(Linear(20, 48), ReLU(), Linear(48, 48), ReLU(), Linear(48, 32), ReLU(), Linear(32, 5))
    rng = np.random.default_rng(3)
    examples = [rng.standard_normal((3, 20)).astype(np.float32)]
    inputs = [rng.standard_normal((3, 20)).astype(np.float32)]
    result, outputs = export_and_run(model, examples, inputs, tmp_path, name="mlp", weights=weights)
    assert_same(outputs, lazygrad_outputs(model, inputs))
    assert result.input_arguments == [("input", "float", (3, 20))]
    assert result.output_arguments == [("output", "float", (3, 5))]
    # the layers' outputs are never all alive at once: the arena holds fewer bytes than they do
    assert result.arena_bytes < result.intermediate_bytes
    if weights == "file":
        assert Path(result.weights_path).stat().st_size == result.weight_bytes
        assert "static const float mlp_weight0[" not in Path(result.source_path).read_text()


class Residual:
    """conv -> batch norm (eval) -> relu -> conv, plus the input; then a linear layer."""

    def __init__(self):
        self.first = Conv2d(4, 4, 3, padding=1)
        self.norm = BatchNorm2d(4)
        self.second = Conv2d(4, 4, 3, padding=1)
        self.head = Linear(4 * 6 * 6, 3)
        rng = np.random.default_rng(4)
        self.norm.running_mean.assign(Tensor(rng.standard_normal(4).astype(np.float32))).realize()
        self.norm.running_var.assign(Tensor(rng.uniform(0.5, 2, 4).astype(np.float32))).realize()
        self.norm.eval()

    def __call__(self, x: Tensor) -> Tensor:
        hidden = self.second(self.norm(self.first(x)).relu())
        return self.head((hidden + x).relu().flatten(1))


def test_a_residual_model_runs_in_c_and_its_parameter_kernels_are_computed_at_export(tmp_path):
    lazygrad.manual_seed(5)
    model = Residual()
    rng = np.random.default_rng(6)
    examples = [rng.standard_normal((2, 4, 6, 6)).astype(np.float32)]
    inputs = [rng.standard_normal((2, 4, 6, 6)).astype(np.float32)]
    result, outputs = export_and_run(model, examples, inputs, tmp_path, name="residual")
    assert_same(outputs, lazygrad_outputs(model, inputs))
    assert result.folded == 1  # the batch norm's scale and shift, a function of its parameters alone
    # ... stored in place of the four vectors they are computed from
    stored = [model.first.weight, model.first.bias, model.second.weight, model.second.bias, model.head.weight,
              model.head.bias, model.norm.weight, model.norm.bias, model.norm.running_mean, model.norm.running_var]
    assert result.weight_bytes == 4 * sum(tensor.numel() for tensor in stored) - 2 * 4 * 4


def test_many_ops_and_several_inputs_and_outputs_compile_strictly_and_match(tmp_path):
    rng = np.random.default_rng(7)

    def make_inputs():
        return [rng.standard_normal((4, 6)).astype(np.float32), (rng.standard_normal((4, 6)) * 3).astype(np.float32),
                rng.integers(-20, 20, (4, 6)).astype(np.int64), rng.integers(0, 6, (4, 3)).astype(np.int32)]

    def many_ops(a, b, i, index):
        return (a.exp() + b.abs().add(1).log(),
                a.sqrt().where(a > 0, b.sin()),
                a.softmax(1),
                a.amax(1) + b.amin(0).sum(),
                ((i // 3) + (i % 5) * (i << 2) + (i >> 1)).cast(dtypes.float32),
                (a > b).cast(dtypes.float32) + (i == 2).cast(dtypes.float32),
                a.gather(1, index),
                a.pad(((1, 1), (2, 0))).tanh(),
                a.bitcast(dtypes.int32) & 0xff,
                a.cast(dtypes.float64).mul(2).exp(),
                i.amax(0) > 3)

    inputs = make_inputs()
    result, outputs = export_and_run(many_ops, make_inputs(), inputs, tmp_path, name="ops")
    assert_same(outputs, lazygrad_outputs(many_ops, inputs))
    assert [argument[0] for argument in result.input_arguments] == ["input0", "input1", "input2", "input3"]
    assert [argument[1] for argument in result.output_arguments][-3:] == ["int", "double", "bool"]


def onnx_conv_relu_gemm(onnx):
    """Conv(2->4, 3x3, pads 1) -> Relu -> Reshape to (batch, -1) -> Gemm(4*5*5 -> 3), weights from a
    fixed seed. The target shape is computed from Shape: lazygrad.onnx folds that arithmetic on the
    NPY device while the export captures, which must not stop the export."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(8)
    weight = numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32) * 0.3, "weight")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias")
    dense = numpy_helper.from_array(rng.standard_normal((3, 100)).astype(np.float32) * 0.1, "dense")
    dense_bias = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "dense_bias")
    first = numpy_helper.from_array(np.array([0], np.int64), "first")
    rest = numpy_helper.from_array(np.array([-1], np.int64), "rest")
    nodes = [helper.make_node("Conv", ["image", "weight", "bias"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["relu"]),
             helper.make_node("Shape", ["relu"], ["shape"]),
             helper.make_node("Gather", ["shape", "first"], ["batch"], axis=0),
             helper.make_node("Concat", ["batch", "rest"], ["flat_shape"], axis=0),
             helper.make_node("Reshape", ["relu", "flat_shape"], ["flat"]),
             helper.make_node("Gemm", ["flat", "dense", "dense_bias"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, "conv_relu_gemm",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 2, 5, 5])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
                              [weight, bias, dense, dense_bias, first, rest])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_onnx_model_runs_in_c_as_in_lazygrad_onnx(tmp_path):
    onnx = pytest.importorskip("onnx", reason="the ONNX export test needs the onnx package (pip install lazygrad[onnx])")
    from lazygrad.export.__main__ import export_onnx
    from lazygrad.onnx import OnnxModel
    model_path = tmp_path / "conv.onnx"
    onnx.save(onnx_conv_relu_gemm(onnx), str(model_path))
    result = export_onnx(model_path, tmp_path, [(2, 2, 5, 5)], name="conv")
    image = np.random.default_rng(9).standard_normal((2, 2, 5, 5)).astype(np.float32)
    program = c_harness.build(result, "conv", tmp_path)
    outputs, _ = c_harness.run(program, result, [image], tmp_path)
    expected = OnnxModel(str(model_path), device="CPU").run({"image": image})["logits"].numpy()
    assert_same(outputs, [expected])
    assert result.output_arguments == [("output", "float", (2, 3))]


def test_an_exported_function_reads_its_inputs_rather_than_the_examples(tmp_path):
    def affine(x, y):
        return F.relu(x * 2 - y), (x + y).sum(1)

    rng = np.random.default_rng(10)
    examples = [np.ones((3, 4), np.float32), np.ones((3, 4), np.float32)]
    inputs = [rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)]
    _, outputs = export_and_run(affine, examples, inputs, tmp_path, name="affine")
    assert_same(outputs, lazygrad_outputs(affine, inputs))
