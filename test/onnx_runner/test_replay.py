"""OnnxModel's replays (lazygrad/onnx/replay.py): from the fourth call with inputs of the same shapes
the captured kernels run without walking the graph, and every call still gives the values numpy
computes, including the calls a replay could not reproduce (data read as numbers, gradients,
sequence outputs, outputs that are inputs, a caller's own jit)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from lazygrad import Tensor, stats  # noqa: E402
from lazygrad.jit import jit  # noqa: E402
from lazygrad.onnx import OnnxModel  # noqa: E402
from lazygrad.onnx.replay import KEPT_SIGNATURES  # noqa: E402

from test_onnx_model import expected_linear_relu, linear_relu_model  # noqa: E402

RNG = np.random.default_rng(0)


def counting_walks(model: OnnxModel) -> list:
    """Counts how often the model walks its graph (one entry per walk)."""
    walks, walk = [], model.run_graph

    def counted(values):
        walks.append(1)
        return walk(values)
    model.run_graph = counted
    return walks


def model_of(nodes, inputs, outputs, initializers=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def floats(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_the_fourth_call_replays_the_kernels_with_the_new_inputs_values():
    model = OnnxModel(linear_relu_model(), device="CPU")
    walks = counting_walks(model)
    kept = []
    for call in range(5):
        x = RNG.standard_normal((3, 4)).astype(np.float32)
        stats.reset()
        y = model(x=x)["y"]
        np.testing.assert_allclose(y.numpy(), expected_linear_relu(x), rtol=1e-6)
        assert stats.kernels > 0  # a replay launches the kernels; it does not return a kept value
        kept.append((x, y))
    assert len(walks) == 3  # the lazy first call, the jit's plain call and its capture
    for x, y in kept:  # each call's outputs are its own buffers
        np.testing.assert_allclose(y.numpy(), expected_linear_relu(x), rtol=1e-6)


def test_each_input_shape_is_captured_and_the_oldest_captures_are_dropped():
    model = OnnxModel(linear_relu_model(), device="CPU")
    walks = counting_walks(model)
    batches = [1, 2, 3, 2, 1, 2, 3, 1, 2, 3, 1, 2, 3]
    for batch in batches:
        x = RNG.standard_normal((batch, 4)).astype(np.float32)
        np.testing.assert_allclose(model(x=x)["y"].numpy(), expected_linear_relu(x), rtol=1e-6)
    assert len(walks) == 9  # three per batch size, the later calls replayed
    for batch in range(4, 5 + KEPT_SIGNATURES):
        model(x=np.ones((batch, 4), np.float32))
    assert len(model.replays.jits.entries) == KEPT_SIGNATURES


def test_a_condition_computed_from_the_input_is_read_on_every_call():
    """If(ReduceSum(x) > 0) then 2x else -x: a replay would repeat the branch of its capture."""
    then_graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["doubled"])], "then", [],
                                   [floats("doubled", [3])])
    else_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["negated"])], "else", [],
                                   [floats("negated", [3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero"], ["positive"]),
             helper.make_node("If", ["positive"], ["y"], then_branch=then_graph, else_branch=else_graph)]
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    model = OnnxModel(model_of(nodes, [floats("x", [3])], [floats("y", [3])], [zero]), device="CPU")
    for call in range(6):
        x = np.array([1, 2, 3], np.float32) * (1 if call % 2 else -1)
        expected = 2 * x if x.sum() > 0 else -x
        np.testing.assert_array_equal(model(x=x)["y"].numpy(), expected)
    assert model.replays.jits.entries[(((3,), model.initializers["zero"].dtype, "CPU"),)].not_replayable


def test_a_shape_the_data_decides_follows_the_data():
    nodes = [helper.make_node("NonZero", ["x"], ["y"])]
    positions = helper.make_tensor_value_info("y", TensorProto.INT64, None)
    model = OnnxModel(model_of(nodes, [floats("x", [6])], [positions]), device="CPU")
    for call in range(5):
        x = (RNG.standard_normal(6) > 0).astype(np.float32)
        np.testing.assert_array_equal(model(x=x)["y"].numpy(), np.stack(np.nonzero(x)))


def test_an_input_that_requires_grad_gets_its_gradient_on_every_call():
    model = OnnxModel(linear_relu_model(), device="CPU")
    w = np.arange(8, dtype=np.float32).reshape(4, 2) / 8
    for call in range(4):
        data = RNG.standard_normal((2, 4)).astype(np.float32)
        x = Tensor(data, device="CPU", requires_grad=True)
        model(x=x)["y"].sum().backward()
        active = (data @ w + np.array([-1.0, 0.5], np.float32)) > 0
        np.testing.assert_allclose(x.grad.numpy(), active.astype(np.float32) @ w.T, rtol=1e-6)


def test_an_output_that_is_an_input_or_a_constant_comes_back_on_every_call():
    nodes = [helper.make_node("Identity", ["x"], ["same"]), helper.make_node("Identity", ["c"], ["constant"])]
    c = numpy_helper.from_array(np.array([7, 8], np.float32), "c")
    model = OnnxModel(model_of(nodes, [floats("x", [2])], [floats("same", [2]), floats("constant", [2])], [c]),
                      device="CPU")
    for call in range(4):
        x = RNG.standard_normal(2).astype(np.float32)
        outputs = model(x=x)
        np.testing.assert_array_equal(outputs["same"].numpy(), x)
        np.testing.assert_array_equal(outputs["constant"].numpy(), [7, 8])


def test_a_sequence_output_comes_back_on_every_call():
    nodes = [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=0)]
    sequence = helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None)
    model = OnnxModel(model_of(nodes, [floats("x", [2, 3])], [sequence]), device="CPU")
    for call in range(4):
        x = RNG.standard_normal((2, 3)).astype(np.float32)
        parts = model(x=x)["parts"]
        assert [part.numpy().tolist() for part in parts] == [row.tolist() for row in np.split(x, 2)]


def test_the_callers_own_jit_captures_the_models_kernels():
    model = OnnxModel(linear_relu_model(), device="CPU")
    walks = counting_walks(model)
    step = jit(lambda x: model(x=x)["y"] * 2)
    for call in range(5):
        x = RNG.standard_normal((3, 4)).astype(np.float32)
        np.testing.assert_allclose(step(Tensor(x, device="CPU")).numpy(), 2 * expected_linear_relu(x), rtol=1e-6)
    assert len(walks) == 2  # the caller's plain call and its capture; its replays walk nothing


def test_a_dropped_model_goes_at_once_with_its_captures():
    """The captures hold the model weakly: dropping the model frees it and their buffers without
    waiting for Python's cycle collector."""
    import gc
    import weakref
    model = OnnxModel(linear_relu_model(), device="CPU")
    for call in range(4):
        model(x=np.ones((3, 4), np.float32))
    gc.disable()
    try:
        reference = weakref.ref(model)
        del model
        assert reference() is None
    finally:
        gc.enable()
