"""ONNX models thousands of nodes deep, built with onnx.helper: a chain of 3,000 Add and Mul nodes
loads, runs with the recursion limit cut to just above the test's own stack, and matches numpy."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from lazygrad.onnx import OnnxModel  # noqa: E402
from recursion_limit import shallow_stack  # noqa: E402


def model_of(nodes, inputs, outputs, initializers, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "deep", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def chain_model(length: int) -> onnx.ModelProto:
    """y = x, then alternately y * 1.001 and y + 0.25, `length` nodes in all."""
    nodes = []
    for index in range(length):
        op, constant = ("Mul", "scale") if index % 2 == 0 else ("Add", "shift")
        nodes.append(helper.make_node(op, ["x" if index == 0 else f"v{index - 1}", constant],
                                      ["y" if index == length - 1 else f"v{index}"]))
    initializers = [numpy_helper.from_array(np.array(1.001, np.float32), "scale"),
                    numpy_helper.from_array(np.array(0.25, np.float32), "shift")]
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], initializers)


@pytest.mark.parametrize("device", ["CPU", "NPY"])
def test_a_chain_of_3000_add_and_mul_nodes_matches_numpy(device):
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    with shallow_stack():
        model = OnnxModel(chain_model(3000), device=device)
        result = model(x=x)["y"].numpy()
    expected = x
    for index in range(3000):
        expected = expected * np.float32(1.001) if index % 2 == 0 else expected + np.float32(0.25)
    np.testing.assert_allclose(result, expected, rtol=1e-5)
