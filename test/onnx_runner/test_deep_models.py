"""ONNX models thousands of nodes deep, built with onnx.helper: a chain of 3,000 Add and Mul nodes and
a bidirectional LSTM over 63 steps (as the LSTM operator and unrolled into MatMul, Sigmoid and Tanh
nodes) load, run with the recursion limit cut to just above the test's own stack, and match numpy."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from lazygrad.onnx import OnnxModel  # noqa: E402
from lazygrad.schedule.fuse import create_schedule  # noqa: E402
from recursion_limit import shallow_stack  # noqa: E402

STEPS, BATCH, FEATURES, HIDDEN = 63, 2, 4, 8


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


def lstm_weights():
    """ONNX LSTM weights for both directions: W (2, 4H, F), R (2, 4H, H), B (2, 8H); gates i, o, f, c."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((2, 4 * HIDDEN, FEATURES)) * 0.4).astype(np.float32)
    r = (rng.standard_normal((2, 4 * HIDDEN, HIDDEN)) * 0.4).astype(np.float32)
    b = (rng.standard_normal((2, 8 * HIDDEN)) * 0.1).astype(np.float32)
    return w, r, b


def lstm_reference(x, w, r, b) -> np.ndarray:
    """Y of shape (steps, 2, batch, hidden), in float64."""
    def sigmoid(v):
        return 1 / (1 + np.exp(-v))
    y = np.zeros((x.shape[0], 2, x.shape[1], HIDDEN))
    for direction in range(2):
        h = c = np.zeros((x.shape[1], HIDDEN))
        steps = range(x.shape[0]) if direction == 0 else reversed(range(x.shape[0]))
        for step in steps:
            gates = x[step] @ w[direction].T + h @ r[direction].T + b[direction, :4 * HIDDEN] + b[direction, 4 * HIDDEN:]
            i, o, f, g = np.split(gates, 4, axis=1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            y[step, direction] = h
    return y


def lstm_operator_model(w, r, b) -> onnx.ModelProto:
    node = helper.make_node("LSTM", ["x", "w", "r", "b"], ["y"], hidden_size=HIDDEN, direction="bidirectional")
    initializers = [numpy_helper.from_array(array, name) for array, name in ((w, "w"), (r, "r"), (b, "b"))]
    return model_of([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [STEPS, BATCH, FEATURES])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [STEPS, 2, BATCH, HIDDEN])],
                    initializers)


def unrolled_lstm_model(w, r, b) -> onnx.ModelProto:
    """The same LSTM as one Gather, MatMul, Split, Sigmoid, Tanh, Mul and Add node per operation and
    step: about 2,000 nodes."""
    arrays = {"zeros": np.zeros((BATCH, HIDDEN), np.float32), "gate_sizes": np.full(4, HIDDEN, np.int64),
              "axis0": np.array([0], np.int64), "axis1": np.array([1], np.int64)}
    nodes = []
    for step in range(STEPS):
        arrays[f"t{step}"] = np.array(step, np.int64)
    for d in range(2):
        arrays[f"wt{d}"], arrays[f"rt{d}"] = w[d].T.copy(), r[d].T.copy()
        arrays[f"bias{d}"] = b[d, :4 * HIDDEN] + b[d, 4 * HIDDEN:]
        h, c = "zeros", "zeros"
        for step in (range(STEPS) if d == 0 else reversed(range(STEPS))):
            def name(label):
                return f"{label}_{d}_{step}"
            nodes += [helper.make_node("Gather", ["x", f"t{step}"], [name("x")], axis=0),
                      helper.make_node("MatMul", [name("x"), f"wt{d}"], [name("xw")]),
                      helper.make_node("MatMul", [h, f"rt{d}"], [name("hr")]),
                      helper.make_node("Add", [name("xw"), name("hr")], [name("sum")]),
                      helper.make_node("Add", [name("sum"), f"bias{d}"], [name("gates")]),
                      helper.make_node("Split", [name("gates"), "gate_sizes"], [name("i"), name("o"), name("f"), name("g")],
                                       axis=1),
                      helper.make_node("Sigmoid", [name("i")], [name("si")]),
                      helper.make_node("Sigmoid", [name("o")], [name("so")]),
                      helper.make_node("Sigmoid", [name("f")], [name("sf")]),
                      helper.make_node("Tanh", [name("g")], [name("tg")]),
                      helper.make_node("Mul", [name("sf"), c], [name("kept")]),
                      helper.make_node("Mul", [name("si"), name("tg")], [name("new")]),
                      helper.make_node("Add", [name("kept"), name("new")], [name("c")]),
                      helper.make_node("Tanh", [name("c")], [name("tc")]),
                      helper.make_node("Mul", [name("so"), name("tc")], [name("h")]),
                      helper.make_node("Unsqueeze", [name("h"), "axis0"], [name("y")])]
            h, c = name("h"), name("c")
        nodes.append(helper.make_node("Concat", [f"y_{d}_{step}" for step in range(STEPS)], [f"y{d}"], axis=0))
        nodes.append(helper.make_node("Unsqueeze", [f"y{d}", "axis1"], [f"y{d}_wide"]))
    nodes.append(helper.make_node("Concat", ["y0_wide", "y1_wide"], ["y"], axis=1))
    initializers = [numpy_helper.from_array(array, name) for name, array in arrays.items()]
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [STEPS, BATCH, FEATURES])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [STEPS, 2, BATCH, HIDDEN])],
                    initializers)


def test_the_lstm_operator_bidirectional_over_63_steps_is_planned_for_cpu_and_matches_numpy_on_npy():
    """Run on NPY: each step reads its input at another offset, so on CPU every step's kernels are
    distinct programs (126 compiles), which the unrolled model below avoids with a Gather."""
    w, r, b = lstm_weights()
    x = np.random.default_rng(2).standard_normal((STEPS, BATCH, FEATURES)).astype(np.float32)
    with shallow_stack():
        planned = OnnxModel(lstm_operator_model(w, r, b), device="CPU")(x=x)["y"]
        assert len(create_schedule([planned.lazydata])) > 4 * STEPS
        result = OnnxModel(lstm_operator_model(w, r, b), device="NPY")(x=x)["y"].numpy()
    np.testing.assert_allclose(result, lstm_reference(x, w, r, b), rtol=1e-4, atol=1e-5)


def test_an_lstm_unrolled_into_2000_nodes_bidirectional_over_63_steps_matches_numpy_on_cpu():
    w, r, b = lstm_weights()
    x = np.random.default_rng(2).standard_normal((STEPS, BATCH, FEATURES)).astype(np.float32)
    with shallow_stack():
        result = OnnxModel(unrolled_lstm_model(w, r, b), device="CPU")(x=x)["y"].numpy()
    np.testing.assert_allclose(result, lstm_reference(x, w, r, b), rtol=1e-4, atol=1e-5)
