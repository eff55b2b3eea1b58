"""ONNX's random operators (lazygrad/onnx/ops_random.py) by the statistics of their draws: no two
implementations draw the same numbers, so values are checked against the distribution they come
from (bounds of 5 standard deviations: a false failure about once in 3.5 million checks), and
seeds by reproducibility."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import lazygrad  # noqa: E402
from lazygrad.jit import jit  # noqa: E402
from lazygrad.onnx import OnnxModel  # noqa: E402

DEVICES = ["CPU", "NPY"]


def single_node_model(op: str, inputs: list, outputs: list, initializers=(), **attributes) -> onnx.ModelProto:
    """A model of one node; inputs and outputs as (name, elem_type, shape)."""
    node = helper.make_node(op, [name for name, _, _ in inputs if name] if inputs else [],
                            [name for name, _, _ in outputs], **attributes)
    initializer_names = {tensor.name for tensor in initializers}
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(*value) for value in inputs
                                           if value[0] not in initializer_names],
                              [helper.make_tensor_value_info(*value) for value in outputs], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def assert_mean_within(draws: np.ndarray, mean: float, deviation: float) -> None:
    bound = 5 * deviation / np.sqrt(draws.size)
    assert abs(draws.astype(np.float64).mean() - mean) <= bound, f"mean {draws.mean()}, expected {mean} +- {bound}"


def assert_frequency(hits: np.ndarray, probability: float) -> None:
    count, expected = hits.sum(), hits.size * probability
    bound = 5 * np.sqrt(hits.size * probability * (1 - probability))
    assert abs(count - expected) <= bound, f"{count} of {hits.size}, expected {expected} +- {bound}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_type", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16])
def test_random_normal_has_the_asked_mean_scale_shape_and_dtype(device, elem_type):
    model = OnnxModel(single_node_model("RandomNormal", [], [("y", elem_type, [200, 100])], dtype=elem_type,
                                        mean=3.0, scale=2.0, shape=[200, 100]), device=device)
    y = model.run_numpy({})["y"]
    assert y.shape == (200, 100) and y.dtype == onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    assert_mean_within(y, 3.0, 2.0)
    assert abs(y.astype(np.float64).std() - 2.0) < 0.05 * 2.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_type", [TensorProto.FLOAT, TensorProto.FLOAT16])
def test_random_uniform_stays_in_low_high(device, elem_type):
    model = OnnxModel(single_node_model("RandomUniform", [], [("y", elem_type, [20000])], dtype=elem_type,
                                        low=-2.0, high=3.0, shape=[20000]), device=device)
    y = model.run_numpy({})["y"]
    assert y.dtype == onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    assert y.min() >= -2.0 and y.max() < 3.0  # float16 rounds some draws up to 3: those move below it
    assert_mean_within(y, 0.5, 5 / np.sqrt(12))
    assert abs(np.histogram(y, bins=5, range=(-2, 3))[0] - 4000).max() < 5 * np.sqrt(20000 * 0.2 * 0.8)


@pytest.mark.parametrize("device", DEVICES)
def test_like_forms_take_the_input_shape_and_dtype_unless_told(device):
    x = np.zeros((30, 40), np.float64)
    normal = OnnxModel(single_node_model("RandomNormalLike", [("x", TensorProto.DOUBLE, [30, 40])],
                                         [("y", TensorProto.DOUBLE, [30, 40])], mean=-1.0), device=device)
    y = normal.run_numpy({"x": x})["y"]
    assert y.shape == (30, 40) and y.dtype == np.float64
    assert_mean_within(y, -1.0, 1.0)
    uniform = OnnxModel(single_node_model("RandomUniformLike", [("x", TensorProto.DOUBLE, [30, 40])],
                                          [("y", TensorProto.FLOAT, [30, 40])], dtype=TensorProto.FLOAT,
                                          low=10.0, high=11.0), device=device)
    y = uniform.run_numpy({"x": x})["y"]
    assert y.dtype == np.float32 and 10.0 <= y.min() and y.max() < 11.0


@pytest.mark.parametrize("device", DEVICES)
def test_bernoulli_draws_ones_with_each_elements_probability(device):
    probabilities = np.repeat(np.array([0.0, 0.25, 0.5, 1.0], np.float32), 4000)
    model = OnnxModel(single_node_model("Bernoulli", [("p", TensorProto.FLOAT, [16000])],
                                        [("y", TensorProto.INT32, [16000])], dtype=TensorProto.INT32), device=device)
    y = model.run_numpy({"p": probabilities})["y"]
    assert y.dtype == np.int32 and np.isin(y, (0, 1)).all()
    assert (y[probabilities == 0] == 0).all() and (y[probabilities == 1] == 1).all()
    for probability in (0.25, 0.5):
        assert_frequency(y[probabilities == probability] == 1, probability)


@pytest.mark.parametrize("device", DEVICES)
def test_multinomial_draws_classes_with_softmax_probabilities(device):
    probabilities = np.array([[1, 2, 3], [6, 0, 0]], np.float64)
    probabilities /= probabilities.sum(1, keepdims=True)
    logits = np.log(np.maximum(probabilities, 1e-300)).astype(np.float32)
    model = OnnxModel(single_node_model("Multinomial", [("logits", TensorProto.FLOAT, [2, 3])],
                                        [("y", TensorProto.INT64, [2, 5000])], dtype=TensorProto.INT64,
                                        sample_size=5000), device=device)
    y = model.run_numpy({"logits": logits})["y"]
    assert y.shape == (2, 5000) and y.dtype == np.int64 and ((0 <= y) & (y < 3)).all()
    for row in range(2):
        for label in range(3):
            assert_frequency(y[row] == label, probabilities[row, label])


@pytest.mark.parametrize("device", DEVICES)
def test_training_dropout_keeps_one_minus_ratio_and_scales_what_it_keeps(device):
    x = np.random.default_rng(0).standard_normal((100, 100)).astype(np.float32)
    model = OnnxModel(single_node_model("Dropout", [("x", TensorProto.FLOAT, [100, 100]), ("r", TensorProto.FLOAT, []),
                                                    ("t", TensorProto.BOOL, [])],
                                        [("y", TensorProto.FLOAT, [100, 100]), ("mask", TensorProto.BOOL, [100, 100])]),
                      device=device)
    for ratio in (0.3, 0.9):
        outputs = model.run_numpy({"x": x, "r": np.array(ratio, np.float32), "t": np.array(True)})
        kept = outputs["mask"]
        assert kept.dtype == np.bool_
        np.testing.assert_allclose(outputs["y"], np.where(kept, x / (1 - ratio), 0), rtol=1e-6)
        assert_frequency(kept, 1 - ratio)
    outputs = model.run_numpy({"x": x, "r": np.array(1.0, np.float32), "t": np.array(True)})
    assert not outputs["mask"].any() and (outputs["y"] == 0).all()
    outputs = model.run_numpy({"x": x, "r": np.array(0.5, np.float32), "t": np.array(False)})  # inference
    assert outputs["mask"].all() and (outputs["y"] == x).all()
    with pytest.raises(RuntimeError, match=r"Dropout: ratio must be in \[0, 1\], got 1.5"):
        model.run_numpy({"x": x, "r": np.array(1.5, np.float32), "t": np.array(True)})


def uniform_model(seed=None, constant_input: bool = False) -> onnx.ModelProto:
    attributes = {} if seed is None else {"seed": seed}
    if constant_input:
        x = numpy_helper.from_array(np.zeros(64, np.float32), "x")
        return single_node_model("RandomUniformLike", [("x", TensorProto.FLOAT, [64])],
                                 [("y", TensorProto.FLOAT, [64])], initializers=[x], **attributes)
    return single_node_model("RandomUniform", [], [("y", TensorProto.FLOAT, [64])], shape=[64], **attributes)


def test_a_seed_repeats_the_draws_of_a_fresh_model_and_each_run_draws_anew():
    first, second = OnnxModel(uniform_model(seed=5.0), device="NPY"), OnnxModel(uniform_model(seed=5.0), device="NPY")
    runs = [first.run_numpy({})["y"] for _ in range(2)]
    assert not np.array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(second.run_numpy({})["y"], runs[0])
    other_seed = OnnxModel(uniform_model(seed=6.0), device="NPY").run_numpy({})["y"]
    assert not np.array_equal(other_seed, runs[0])


def test_without_a_seed_draws_follow_lazygrads_manual_seed():
    lazygrad.manual_seed(11)
    first = OnnxModel(uniform_model(), device="NPY").run_numpy({})["y"]
    lazygrad.manual_seed(11)
    np.testing.assert_array_equal(OnnxModel(uniform_model(), device="NPY").run_numpy({})["y"], first)


def test_a_random_node_of_constant_inputs_is_not_folded_into_a_constant():
    model = OnnxModel(uniform_model(constant_input=True), device="NPY")
    assert not np.array_equal(model.run_numpy({})["y"], model.run_numpy({})["y"])


@pytest.mark.parametrize("device", DEVICES)
def test_a_jit_replay_draws_new_numbers(device):
    model = OnnxModel(uniform_model(seed=1.0), device=device)
    step = jit(lambda: model.run({})["y"] * 1)
    draws = [step().numpy() for _ in range(4)]  # capture, then replays
    assert len({values.tobytes() for values in draws}) == 4
    assert all(((0 <= values) & (values < 1)).all() for values in draws)


def test_random_operators_refuse_integer_dtypes():
    model = single_node_model("RandomNormal", [], [("y", TensorProto.INT32, [4])], dtype=TensorProto.INT32, shape=[4])
    with pytest.raises(RuntimeError, match="RandomNormal: dtype must be a floating point type, got int32"):
        OnnxModel(model, device="NPY").run({})
