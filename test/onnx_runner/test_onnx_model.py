"""OnnxModel's API: loading from path, bytes and protos, input/output descriptions, Tensor inputs,
unsupported-operator reports, malformed models, external data, autograd, and the command line."""
import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from lazygrad import Tensor, dtypes, stats  # noqa: E402
from lazygrad.onnx import OnnxModel, UnsupportedError  # noqa: E402
from lazygrad.onnx.model import FOLD_LIMIT  # noqa: E402
from lazygrad.ops import Ops  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def linear_relu_model(opset: int = 17) -> onnx.ModelProto:
    """y = relu(x @ w + b) with x of shape (batch, 4), w and b as initializers."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])
    w = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(4, 2) / 8, "w")
    b = numpy_helper.from_array(np.array([-1.0, 0.5], np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
             helper.make_node("Add", ["h", "b"], ["z"], name="add"),
             helper.make_node("Relu", ["z"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "linear_relu", [x], [y], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def expected_linear_relu(x: np.ndarray) -> np.ndarray:
    w = np.arange(8, dtype=np.float32).reshape(4, 2) / 8
    return np.maximum(x @ w + np.array([-1.0, 0.5], np.float32), 0)


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "linear_relu.onnx"
    onnx.save(linear_relu_model(), str(path))
    return str(path)


def test_model_loads_from_path_bytes_and_proto_and_gives_the_same_outputs(model_path):
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    with open(model_path, "rb") as file:
        data = file.read()
    for source in (model_path, data, linear_relu_model()):
        outputs = OnnxModel(source, device="NPY")(x=x)
        assert list(outputs) == ["y"]
        assert isinstance(outputs["y"], Tensor)
        np.testing.assert_allclose(outputs["y"].numpy(), expected_linear_relu(x), rtol=1e-6)


def test_inputs_and_outputs_describe_names_dtypes_and_symbolic_shapes():
    model = OnnxModel(linear_relu_model(), device="NPY")
    assert [info.name for info in model.inputs] == ["x"]   # initializers are not inputs
    assert model.inputs[0].dtype == dtypes.float32 and model.inputs[0].shape == ("batch", 4)
    assert model.outputs[0].name == "y" and model.outputs[0].shape == ("batch", 2)
    assert str(model.inputs[0]) == "x: float(batch, 4)"


def test_run_takes_tensors_and_a_dict_and_runs_on_cpu():
    x = Tensor(np.ones((2, 4), np.float32), device="CPU")
    outputs = OnnxModel(linear_relu_model(), device="CPU").run({"x": x})
    assert outputs["y"].device == "CPU"
    np.testing.assert_allclose(outputs["y"].numpy(), expected_linear_relu(np.ones((2, 4), np.float32)), rtol=1e-6)


def test_imported_model_is_differentiable():
    model = OnnxModel(linear_relu_model(), device="NPY")
    x = Tensor(np.ones((2, 4), np.float32), device="NPY", requires_grad=True)
    model(x=x)["y"].sum().backward()
    w = np.arange(8, dtype=np.float32).reshape(4, 2) / 8
    active = (np.ones((2, 4), np.float32) @ w + np.array([-1.0, 0.5], np.float32)) > 0
    np.testing.assert_allclose(x.grad.numpy(), active.astype(np.float32) @ w.T, rtol=1e-6)


def test_shape_computations_on_constants_are_folded_without_running_kernels():
    """Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): the shape is known when the model runs."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])
    initializers = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
                    numpy_helper.from_array(np.array([0], np.int64), "axes"),
                    numpy_helper.from_array(np.array([-1], np.int64), "rest")]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["batch"]),
             helper.make_node("Unsqueeze", ["batch", "axes"], ["batch_1d"]),
             helper.make_node("Concat", ["batch_1d", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "reshape", [x], [y], initializers),
                              opset_imports=[helper.make_opsetid("", 13)])
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    stats.reset()
    result = OnnxModel(model, device="CPU")(x=data)["y"]
    assert stats.kernels == 0
    np.testing.assert_array_equal(result.numpy(), data.reshape(2, 12))


def test_a_folded_node_is_folded_once_so_the_jit_replays_the_model():
    """y = x * (a * b) with a and b initializers: the product is folded on NPY in the first run and
    taken from what it folded to in later ones, so a jit capture sees only kernels and replays (a
    model quantized by ONNX Runtime folds its scales so: it ran plainly on every call before)."""
    import lazygrad
    from lazygrad.devices.npy import NPYDevice
    from lazygrad.jit import jit
    initializers = [numpy_helper.from_array(np.array([2.0, 3.0, 4.0], np.float32), "a"),
                    numpy_helper.from_array(np.array([0.5, 0.5, 0.25], np.float32), "b")]
    nodes = [helper.make_node("Mul", ["a", "b"], ["scale"]), helper.make_node("Mul", ["x", "scale"], ["y"])]
    model = OnnxModel(graph_of(nodes, initializers), device="CPU")
    interpreted = []
    original = NPYDevice.run_graph

    def counting(device, outputs):
        interpreted.append(len(outputs))
        return original(device, outputs)
    step = jit(lazygrad.no_grad()(lambda x: model.run({"x": x})["y"]))
    try:
        NPYDevice.run_graph = counting
        for number in range(4):
            x = np.array([1.0, -2.0, float(number)], np.float32)
            np.testing.assert_array_equal(step(Tensor(x)).numpy(), x * np.array([1.0, 1.5, 1.0], np.float32))
    finally:
        NPYDevice.run_graph = original
    assert len(interpreted) == 1 and step.replay is not None and step.not_replayable is None


def test_a_large_result_of_small_constants_stays_lazy_instead_of_being_folded():
    """ConstantOfShape([2**22]) then ReduceSum: a model of a few bytes whose folded intermediate would
    be as large as it asks (2**28 took 20 s and 4 GB)."""
    shape = numpy_helper.from_array(np.array([2 ** 22], np.int64), "shape")
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"], value=one),
             helper.make_node("ReduceSum", ["big"], ["y"], keepdims=0)]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    model = OnnxModel(helper.make_model(helper.make_graph(nodes, "big_constant", [], [y], [shape]),
                                        opset_imports=[helper.make_opsetid("", 13)]), device="CPU")
    result = model()["y"]
    assert max(array.size for _, array in model.constants.values()) <= FOLD_LIMIT
    assert result.numpy() == 2 ** 22


def test_large_results_of_constants_are_folded_when_they_take_no_more_bytes_than_their_inputs(monkeypatch):
    """y = x @ Concat(a, b) with a and b initializers of 64 x 96 (a GRU's gates reordered from
    torch's): the concatenation is folded into one known constant, so the product's kernel reads a
    plain buffer, not a select between two weights at every element. An int8 weight dequantized takes
    four times its bytes as float32: that result stays lazy (read as int8 by the product)."""
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((64, 96)).astype(np.float32) for _ in range(2))
    q = rng.integers(-128, 128, (96, 64), dtype=np.int8)
    initializers = [numpy_helper.from_array(a, "a"), numpy_helper.from_array(b, "b"), numpy_helper.from_array(q, "q"),
                    numpy_helper.from_array(np.array(0.5, np.float32), "scale")]
    nodes = [helper.make_node("Concat", ["a", "b"], ["w"], axis=0), helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("DequantizeLinear", ["q", "scale"], ["v"]), helper.make_node("MatMul", ["h", "v"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 128])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])
    model = OnnxModel(helper.make_model(helper.make_graph(nodes, "folds", [x], [y], initializers),
                                        opset_imports=[helper.make_opsetid("", 17)]), device="CPU")
    data = rng.standard_normal((2, 128)).astype(np.float32)
    for _ in range(2):  # the second run takes the fold of the first
        result = model(x=data)["y"]
        known = [array.shape for tensor, array in model.constants.values() if array.dtype == np.float32]
        assert (128, 96) in known and (96, 64) not in known  # w folded, v not
        np.testing.assert_allclose(result.numpy(), data @ np.concatenate([a, b]) @ (q.astype(np.float32) * 0.5),
                                   rtol=1e-4, atol=1e-2)
    import lazygrad.onnx.model as model_module
    monkeypatch.setattr(model_module, "FOLD_MAX_BYTES", 128 * 96 * 4 - 1)  # w's bytes: beyond, w stays lazy
    model = OnnxModel(model.proto, device="CPU")
    result = model(x=data)["y"]
    assert (128, 96) not in [array.shape for _, array in model.constants.values()]
    np.testing.assert_allclose(result.numpy(), data @ np.concatenate([a, b]) @ (q.astype(np.float32) * 0.5),
                               rtol=1e-4, atol=1e-2)


def graph_of(nodes, initializers=()) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], list(initializers)),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_nodes_stored_out_of_order_run_in_dependency_order():
    """y = If(true) then -relu(x): the If and Neg come before the Relu whose output they read (the
    If inside its branch only); the caller's proto keeps its order."""
    branch = helper.make_graph([helper.make_node("Identity", ["r"], ["b"])], "branch", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])])
    nodes = [helper.make_node("Neg", ["chosen"], ["y"], name="neg"),
             helper.make_node("If", ["condition"], ["chosen"], name="if", then_branch=branch, else_branch=branch),
             helper.make_node("Relu", ["x"], ["r"], name="relu")]
    model = graph_of(nodes, [numpy_helper.from_array(np.array(True), "condition")])
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    np.testing.assert_array_equal(OnnxModel(model, device="NPY")(x=x)["y"].numpy(), -np.maximum(x, 0))
    assert [node.name for node in model.graph.node] == ["neg", "if", "relu"]


def test_an_input_nothing_defines_is_named_with_its_node():
    with pytest.raises(ValueError, match=r"Add \(node 'add'\) in graph 'g' reads 'bias', which no input, "
                                         r"initializer or node of the graph \(or of a graph enclosing it\) defines"):
        OnnxModel(graph_of([helper.make_node("Add", ["x", "bias"], ["y"], name="add")]), device="NPY")
    branch = helper.make_graph([helper.make_node("Neg", ["missing"], ["b"])], "branch", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])])
    inside = graph_of([helper.make_node("If", ["condition"], ["y"], then_branch=branch, else_branch=branch)],
                      [numpy_helper.from_array(np.array(True), "condition")])
    with pytest.raises(ValueError, match=r"Neg \(unnamed node\) in graph 'branch' reads 'missing'"):
        OnnxModel(inside, device="NPY")
    with pytest.raises(ValueError, match="graph 'g' has an output 'y' that no input, initializer or node defines"):
        OnnxModel(graph_of([helper.make_node("Relu", ["x"], ["r"])]), device="NPY")


def test_a_cycle_is_reported_with_the_nodes_on_it():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "b"], ["a"], name="add"),
             helper.make_node("Neg", ["a"], ["b"], name="neg"),
             helper.make_node("Identity", ["a"], ["y"], name="out")]
    with pytest.raises(ValueError, match=r"graph 'g' has a cycle, so no order can run it: Add \(node 'add'\) reads "
                                         r"an output of Neg \(node 'neg'\), which reads an output of Add"):
        OnnxModel(graph_of(nodes), device="NPY")


def test_wrong_or_missing_input_names_are_reported():
    model = OnnxModel(linear_relu_model(), device="NPY")
    with pytest.raises(ValueError, match=r"model inputs are \['x'\]; got unknown \['z'\] and missing \['x'\]"):
        model(z=np.ones((1, 4), np.float32))
    with pytest.raises(TypeError, match="input 'x' must be float"):
        model(x=np.ones((1, 4), np.int64))


def test_unsupported_operators_are_all_reported_before_running():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("ImageDecoder", ["r"], ["t"], name="decoder_1"),
             helper.make_node("Frobnicate", ["t"], ["y"], name="frob", domain="com.example")]
    graph = helper.make_graph(nodes, "bad", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.example", 2)])
    with pytest.raises(UnsupportedError) as error:
        OnnxModel(model, device="NPY")
    assert str(error.value) == ("unsupported: ImageDecoder (node 'decoder_1', opset 20); "
                                "com.example.Frobnicate (node 'frob', opset 2)")
    assert len(OnnxModel(model, device="NPY", strict=False).unsupported()) == 2


def test_truncated_and_malformed_models_raise_a_clear_error(model_path):
    with open(model_path, "rb") as file:
        data = file.read()
    for broken in (data[:len(data) // 2], data[:-3], b"not an onnx model at all"):
        with pytest.raises(ValueError, match="not a valid ONNX model"):
            OnnxModel(broken)
    with pytest.raises(FileNotFoundError, match="no ONNX model at"):
        OnnxModel(model_path + ".missing")
    with pytest.raises(TypeError, match="OnnxModel takes a path, bytes or an onnx.ModelProto"):
        OnnxModel(42)


def test_external_data_is_read_next_to_the_model(tmp_path):
    model = linear_relu_model()
    path = str(tmp_path / "external.onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
                    size_threshold=0)
    assert os.path.exists(tmp_path / "weights.bin")
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(OnnxModel(path, device="NPY")(x=x)["y"].numpy(), expected_linear_relu(x), rtol=1e-6)


def external_tensor(location: str, name: str = "secret") -> TensorProto:
    """8 uint8 values kept in the file `location`, relative to the model's folder."""
    tensor = TensorProto(name=name, data_type=TensorProto.UINT8, dims=[8], data_location=TensorProto.EXTERNAL)
    tensor.external_data.add(key="location", value=location)
    return tensor


def model_reading(tensor: TensorProto, where: str) -> onnx.ModelProto:
    """y = the tensor, kept as an initializer, a Constant's attribute, or a Constant inside an If branch."""
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, [8])
    initializers = []
    if where == "initializer":
        nodes, initializers = [helper.make_node("Identity", [tensor.name], ["y"])], [tensor]
    elif where == "Constant":
        nodes = [helper.make_node("Constant", [], ["y"], value=tensor)]
    else:
        branch = helper.make_graph([helper.make_node("Constant", [], ["b"], value=tensor)], "branch", [],
                                   [helper.make_tensor_value_info("b", TensorProto.UINT8, [8])])
        condition = numpy_helper.from_array(np.array(True), "condition")
        nodes = [helper.make_node("If", ["condition"], ["y"], then_branch=branch, else_branch=branch)]
        initializers = [condition]
    return helper.make_model(helper.make_graph(nodes, "reads_external_data", [], [y], initializers),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("where", ["initializer", "Constant", "If branch"])
def test_external_data_inside_the_models_folder_is_read_wherever_the_tensor_is(tmp_path, monkeypatch, where):
    folder = tmp_path / "model"
    (folder / "weights").mkdir(parents=True)
    (folder / "weights" / "data.bin").write_bytes(bytes(range(8)))
    onnx.save(model_reading(external_tensor("weights/../weights/data.bin"), where), str(folder / "model.onnx"))
    monkeypatch.chdir(tmp_path)
    result = OnnxModel(str(folder / "model.onnx"), device="NPY")()["y"].numpy()
    np.testing.assert_array_equal(result, np.arange(8, dtype=np.uint8))


@pytest.mark.parametrize("where", ["initializer", "Constant", "If branch"])
def test_external_data_outside_the_models_folder_is_refused(tmp_path, monkeypatch, where):
    """'..', an absolute path, a symlink to a file or to a folder outside: none may be read."""
    (tmp_path / "credentials.json").write_bytes(b"password")
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "key").write_bytes(b"password")
    folder = tmp_path / "model"
    folder.mkdir()
    os.symlink(tmp_path / "credentials.json", folder / "linked.bin")
    os.symlink(tmp_path / "private", folder / "linked_folder")
    monkeypatch.chdir(folder)
    for location in ("../credentials.json", str(tmp_path / "credentials.json"), "linked.bin", "linked_folder/key"):
        onnx.save(model_reading(external_tensor(location), where), str(folder / "model.onnx"))
        with pytest.raises(ValueError, match=f"tensor 'secret' keeps its data in '{location}', which is not a file "
                                             "inside the model's folder"):
            OnnxModel(str(folder / "model.onnx"), device="NPY")


@pytest.mark.parametrize("where", ["initializer", "Constant", "If branch"])
def test_external_data_of_a_model_given_as_bytes_or_a_proto_is_refused(tmp_path, monkeypatch, where):
    """Such a model has no folder: the working directory's files must not become its outputs."""
    (tmp_path / "credentials.json").write_bytes(b"password")
    monkeypatch.chdir(tmp_path)
    model = model_reading(external_tensor("credentials.json"), where)
    for source in (model, model.SerializeToString()):
        with pytest.raises(ValueError, match="no folder to read that file from; load the model from its path"):
            OnnxModel(source, device="NPY")


def test_attributes_that_became_inputs_work_in_both_opsets():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    old = helper.make_graph([helper.make_node("Squeeze", ["x"], ["y"], axes=[0, 2])], "old", [x], [y])
    axes = numpy_helper.from_array(np.array([0, 2], np.int64), "axes")
    new = helper.make_graph([helper.make_node("Squeeze", ["x", "axes"], ["y"])], "new", [x], [y], [axes])
    data = np.arange(3, dtype=np.float32).reshape(1, 3, 1)
    for graph, opset in ((old, 11), (new, 13)):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        assert OnnxModel(model, device="NPY")(x=data)["y"].numpy().tolist() == [0.0, 1.0, 2.0]


def test_command_line_prints_the_model_and_runs_it(model_path):
    command = [sys.executable, "-m", "lazygrad.onnx", model_path, "--run", "--dim", "batch=3", "--device", "NPY"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "x: float(batch, 4)" in result.stdout and "y: float(batch, 2)" in result.stdout
    assert "1  MatMul" in result.stdout and "unsupported: none" in result.stdout
    assert "ran on NPY" in result.stdout and "y: float32 (3, 2)" in result.stdout


def test_command_line_lists_unsupported_operators_and_reports_broken_files(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"], name="f1", domain="com.example")], "g",
                              [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                      helper.make_opsetid("com.example", 1)]), str(path))
    result = subprocess.run([sys.executable, "-m", "lazygrad.onnx", str(path)], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert "unsupported: com.example.Frobnicate (node 'f1', opset 1)" in result.stdout
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(path.read_bytes()[:20])
    result = subprocess.run([sys.executable, "-m", "lazygrad.onnx", str(broken)], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 1 and "not a valid ONNX model" in result.stderr


def _schedule_of(tensor: Tensor):
    from lazygrad.schedule.fuse import create_schedule
    return [item.kernel for item in create_schedule([tensor.lazydata]) if item.kernel is not None]


def test_a_padded_conv_and_a_gather_get_the_kernels_of_the_same_ops_written_with_nn():
    """Conv pads its input itself, then convolves without padding; Gather indexes. Both reach the
    same kernels as nn's conv2d(padding=1) and embedding: the padded input stored once, an indexed
    load reading only the rows asked for."""
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(0)
    x_value = rng.standard_normal((1, 16, 14, 14)).astype(np.float32)
    w_value = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    table = rng.standard_normal((1000, 8)).astype(np.float32)
    ids = np.array([[3, 999, 0]])
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14]),
              helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
               helper.make_tensor_value_info("rows", TensorProto.FLOAT, None)]
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0)]
    graph = helper.make_graph(nodes, "conv_gather", inputs, outputs,
                              [numpy_helper.from_array(w_value, "w"), numpy_helper.from_array(table, "table")])
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), device="CPU")
    x, ids_tensor = Tensor(x_value), Tensor(ids)
    result = model(x=x, ids=ids_tensor)
    conv = F.conv2d(x, Tensor(w_value), padding=1)
    assert [k.ast for k in _schedule_of(result["y"])] == [k.ast for k in _schedule_of(conv)]
    (lookup,) = _schedule_of(result["rows"])
    assert lookup.full_shape == (1, 3, 8) and lookup.reduce_axes == ()
    np.testing.assert_allclose(result["y"].numpy(), conv.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(result["rows"].numpy(), table[ids])


@pytest.mark.parametrize("index, expected, view", [
    (np.array(1), lambda x: x[:, 1], True), (np.array(-1), lambda x: x[:, 2], True),
    (np.array([1, 2]), lambda x: x[:, 1:3], True), (np.array([2, 0]), lambda x: x[:, [2, 0]], False),
    (np.array([[0, 1]]), lambda x: x[:, [[0, 1]]], False)])
def test_a_gather_of_known_indices_is_a_view_where_they_are_one_index_or_a_run(index, expected, view):
    """ViT's packed query/key/value projection split by Gathers of 0, 1 and 2: with the index known,
    x[:, i] is a view, so y + 1 is one kernel reading x, not a kernel of indexed loads; index sets
    that are no run of one axis still take them."""
    x_value = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    nodes = [helper.make_node("Gather", ["x", "index"], ["picked"], axis=1), helper.make_node("Add", ["picked", "one"], ["y"])]
    graph = helper.make_graph(nodes, "gather", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(index.astype(np.int64), "index"),
                               numpy_helper.from_array(np.array(1, np.float32), "one")])
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), device="CPU")
    y = model(x=Tensor(x_value).realize())["y"]
    kernels = _schedule_of(y)
    takes = [node for kernel in kernels for node in kernel.ast.walk() if node.op is Ops.TAKE]
    assert (len(kernels) == 1 and not takes) == view
    np.testing.assert_array_equal(y.numpy(), expected(x_value) + 1)


def test_a_gather_of_known_indices_out_of_range_is_an_error():
    nodes = [helper.make_node("Gather", ["x", "index"], ["y"], axis=0)]
    model = OnnxModel(graph_of(nodes, [numpy_helper.from_array(np.array(3, np.int64), "index")]), device="CPU")
    with pytest.raises(RuntimeError, match="Gather: indices \\[3\\] out of range for an axis of size 3"):
        model(x=np.zeros(3, np.float32))


def _integer_conv_reference(x: np.ndarray, x_zero_point: int, w: np.ndarray, pads: int, stride: int) -> np.ndarray:
    """sum over each window of (x - x_zero_point) * w, the centered input zero-padded, in int64."""
    centered = np.pad(x.astype(np.int64) - x_zero_point, ((0, 0), (0, 0), (pads, pads), (pads, pads)))
    windows = np.lib.stride_tricks.sliding_window_view(centered, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,kcij->nkhw", windows, w.astype(np.int64))


@pytest.mark.parametrize("device", ["CPU", "NPY"])
def test_quantized_convolutions_of_uint8_by_int8_run_on_the_byte_dot_products(device):
    """ConvInteger and QLinearConv with a uint8 input and an int8 weight of zero point 0 (what ONNX
    Runtime's quantization writes) take F.byte_dot_conv2d: the input padded with its zero point
    (here an input of the model, unknown until it runs), the zero point times each output channel's
    weight sum taken off after. Exact against numpy's int64 sums."""
    rng = np.random.default_rng(1)
    x_value = rng.integers(0, 256, (2, 5, 9, 8)).astype(np.uint8)
    w_value = rng.integers(-127, 128, (20, 5, 3, 3)).astype(np.int8)
    scales = [numpy_helper.from_array(np.array(value, np.float32), name)
              for name, value in (("x_scale", 0.05), ("w_scale", 0.02), ("y_scale", 0.5))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x_value.shape)),
              helper.make_tensor_value_info("x_zero_point", TensorProto.UINT8, [])]
    outputs = [helper.make_tensor_value_info("sums", TensorProto.INT32, None),
               helper.make_tensor_value_info("y", TensorProto.UINT8, None)]
    nodes = [helper.make_node("ConvInteger", ["x", "w", "x_zero_point", "w_zero_point"], ["sums"], pads=[1, 1, 1, 1]),
             helper.make_node("QLinearConv", ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point",
                                              "y_scale", "y_zero_point"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])]
    initializers = [numpy_helper.from_array(w_value, "w"),
                    numpy_helper.from_array(np.array(0, np.int8), "w_zero_point"),
                    numpy_helper.from_array(np.array(128, np.uint8), "y_zero_point")] + scales
    graph = helper.make_graph(nodes, "quantized_conv", inputs, outputs, initializers)
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), device=device)
    result = model(x=x_value, x_zero_point=np.array(131, np.uint8))
    if device == "CPU":  # the product reads the uint8 input and the int8 weight themselves
        products = [kernel for kernel in _schedule_of(result["sums"]) if kernel.reduce_axes]
        assert any(kernel.buffer_dtypes[1:] == (dtypes.uint8, dtypes.int8) for kernel in products)
    np.testing.assert_array_equal(result["sums"].numpy(), _integer_conv_reference(x_value, 131, w_value, 1, 1))
    requantized = _integer_conv_reference(x_value, 131, w_value, 1, 2) * (np.float64(np.float32(0.05)) *
                                                                         np.float64(np.float32(0.02)) / 0.5)
    np.testing.assert_array_equal(result["y"].numpy(), np.clip(np.round(requantized) + 128, 0, 255).astype(np.uint8))


@pytest.mark.parametrize("device", ["CPU", "NPY"])
def test_quantized_matmuls_of_uint8_by_int8_run_on_the_byte_dot_products(device):
    """MatMulInteger and QLinearMatMul with a uint8 input and a 2-D int8 weight of zero point 0 take
    F.byte_dot_linear (the weight's columns stored as rows), the input's zero point times each
    column's sum taken off after. Exact against numpy's int64 sums."""
    rng = np.random.default_rng(2)
    x_value = rng.integers(0, 256, (2, 3, 40)).astype(np.uint8)
    w_value = rng.integers(-127, 128, (40, 24)).astype(np.int8)
    inputs = [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x_value.shape)),
              helper.make_tensor_value_info("x_zero_point", TensorProto.UINT8, [])]
    outputs = [helper.make_tensor_value_info("sums", TensorProto.INT32, None),
               helper.make_tensor_value_info("y", TensorProto.UINT8, None)]
    nodes = [helper.make_node("MatMulInteger", ["x", "w", "x_zero_point", "w_zero_point"], ["sums"]),
             helper.make_node("QLinearMatMul", ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point",
                                                "y_scale", "y_zero_point"], ["y"])]
    initializers = [numpy_helper.from_array(w_value, "w"),
                    numpy_helper.from_array(np.array(0, np.int8), "w_zero_point"),
                    numpy_helper.from_array(np.array(128, np.uint8), "y_zero_point")] + \
        [numpy_helper.from_array(np.array(value, np.float32), name)
         for name, value in (("x_scale", 0.05), ("w_scale", 0.02), ("y_scale", 0.5))]
    graph = helper.make_graph(nodes, "quantized_matmul", inputs, outputs, initializers)
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), device=device)
    result = model(x=x_value, x_zero_point=np.array(117, np.uint8))
    if device == "CPU":
        products = [kernel for kernel in _schedule_of(result["sums"]) if kernel.reduce_axes]
        assert any(kernel.buffer_dtypes[1:3] == (dtypes.uint8, dtypes.int8) for kernel in products)
    expected = (x_value.astype(np.int64) - 117) @ w_value.astype(np.int64)
    np.testing.assert_array_equal(result["sums"].numpy(), expected)
    requantized = expected * (np.float64(np.float32(0.05)) * np.float64(np.float32(0.02)) / 0.5)
    np.testing.assert_array_equal(result["y"].numpy(), np.clip(np.round(requantized) + 128, 0, 255).astype(np.uint8))


@pytest.mark.parametrize("op, nn_pool", [("MaxPool", "max_pool2d"), ("AveragePool", "avg_pool2d")])
def test_a_pool_gets_the_kernels_of_the_same_pool_written_with_nn(op, nn_pool):
    """MaxPool and AveragePool reduce the padded input's windows, as nn's pools do: one reduce kernel
    after the padded input, not a chain of nine shifted elementwise reads fused into the producer."""
    from lazygrad.nn import functional as F
    x_value = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                            **({"count_include_pad": 1} if op == "AveragePool" else {}))
    graph = helper.make_graph([node], "pool", inputs, outputs)
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), device="CPU")
    x = Tensor(x_value).relu()
    result = model(x=x)["y"]
    expected = getattr(F, nn_pool)(x, 3, stride=2, padding=1)
    kernels = _schedule_of(result)
    assert [len(k.reduce_axes) for k in kernels if k.reduce_axes] == [2]
    assert len(kernels) == len(_schedule_of(expected))
    np.testing.assert_allclose(result.numpy(), expected.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode, transform", [("nearest", "asymmetric"), ("nearest", "half_pixel")])
def test_a_nearest_upsampling_by_an_integer_factor_is_a_view_its_reader_reads(mode, transform):
    """A Resize by 2 in nearest mode (a detector's or a U-Net's upsampling) repeats each input: a view,
    so the concatenation after it is one kernel reading the input, as the same ops written with nn
    are; it was a gather kernel per axis (0.35 ms for 128 x 80 x 80 in a detector)."""
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(2)
    x_value, skip_value = rng.standard_normal((1, 8, 10, 12)).astype(np.float32), rng.standard_normal((1, 4, 20, 24)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 12]),
              helper.make_tensor_value_info("skip", TensorProto.FLOAT, [1, 4, 20, 24])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["up"], mode=mode, coordinate_transformation_mode=transform),
             helper.make_node("Concat", ["up", "skip"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "upsample", inputs, outputs, [scales])
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), device="CPU")
    x, skip = Tensor(x_value), Tensor(skip_value)
    result = model(x=x, skip=skip)["y"]
    assert len(_schedule_of(result)) == len(_schedule_of(F.interpolate(x, scale_factor=2).cat(skip, dim=1))) == 1
    expected = np.concatenate([x_value.repeat(2, axis=2).repeat(2, axis=3), skip_value], axis=1)
    np.testing.assert_array_equal(result.numpy(), expected)


def test_clip_bounds_given_as_initializers_are_constants_of_the_kernel():
    """ReLU6 exported as Clip(x, 0, 6) with initializer bounds: the bounds are numbers in the kernel,
    not buffers it loads (with loads, gcc left MobileNetV2's padded ReLU6 kernels scalar)."""
    x_value = np.linspace(-3, 9, 24, dtype=np.float32).reshape(2, 12)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 12])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    bounds = [numpy_helper.from_array(np.array(0, np.float32), "low"), numpy_helper.from_array(np.array(6, np.float32), "high")]
    graph = helper.make_graph([helper.make_node("Clip", ["x", "low", "high"], ["y"])], "clip", inputs, outputs, bounds)
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), device="CPU")
    result = model(x=Tensor(x_value))["y"]
    (kernel,) = _schedule_of(result)
    assert len(kernel.buffer_dtypes) == 2  # the output and x
    np.testing.assert_array_equal(result.numpy(), np.clip(x_value, 0, 6))
