"""What lazygrad.export refuses, each with an ExportError that names the problem and the fix, and
how the capture sorts buffers (lazygrad/export/capture.py)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import lazygrad
from lazygrad import Tensor
from lazygrad.export import ExportError, to_c
from lazygrad.export.capture import capture
from lazygrad.nn import BatchNorm2d, Dropout, Linear, Sequential

X = np.arange(12, dtype=np.float32).reshape(3, 4) - 5


def export(function, tmp_path, examples=(X,), **options):
    return to_c(function, list(examples), str(tmp_path / "model.c"), quiet=True, **options)


def test_a_function_that_launches_nothing_is_refused(tmp_path):
    with pytest.raises(ExportError, match="launched no kernels"):
        export(lambda x: x, tmp_path)


def test_an_input_returned_as_it_is_is_refused(tmp_path):
    with pytest.raises(ExportError, match=r"output 1 is an example input returned as it is; return a copy"):
        export(lambda x: (x * 2, x), tmp_path)


def test_a_parameter_returned_as_it_is_is_refused(tmp_path):
    weight = Tensor(np.ones((3, 4), np.float32)).realize()
    with pytest.raises(ExportError, match=r"output 1 was not computed by the function"):
        export(lambda x: (x * 2, weight), tmp_path)


def test_inputs_on_another_device_are_refused(tmp_path):
    with pytest.raises(ExportError, match=r"example input 0 is on NPY.*on CPU"):
        export(lambda x: x * 2, tmp_path, [Tensor(X, device="NPY")])


def test_a_model_on_another_device_is_refused(tmp_path):
    weight = Tensor(np.ones((3, 4), np.float32), device="NPY").realize()
    with pytest.raises(ExportError, match="between devices"):
        export(lambda x: x * weight.to("CPU"), tmp_path)


def test_random_numbers_drawn_inside_the_function_are_refused(tmp_path):
    with pytest.raises(ExportError, match=r"draws random numbers.*pass them as inputs"):
        export(lambda x: x + Tensor.rand(3, 4), tmp_path)


def test_dropout_draws_random_numbers_in_training_mode_and_none_in_eval_mode(tmp_path):
    lazygrad.manual_seed(0)
    model = Sequential(Linear(4, 2), Dropout(0.5))
    with pytest.raises(ExportError, match=r"draws random numbers.*model.eval\(\)"):
        export(model, tmp_path)
    model.eval()
    assert export(model, tmp_path).launches == 1


def test_state_written_in_place_is_refused(tmp_path):
    norm = BatchNorm2d(2)  # training mode: updates its running statistics with assign
    with pytest.raises(ExportError, match=r"writes state that existed before the call in place.*model.eval\(\)"):
        export(lambda x: norm(x), tmp_path, [np.ones((2, 2, 3, 3), np.float32)])


def test_an_input_written_in_place_is_refused(tmp_path):
    def increment(x):
        x.assign(x + 1)
        return x * 2
    with pytest.raises(ExportError, match="writes an input in place"):
        export(increment, tmp_path)


def test_a_shape_decided_by_data_is_refused(tmp_path):
    with pytest.raises(ExportError, match=r"boolean mask index has a shape that its data decides"):
        export(lambda x: x[x > 0] * 2, tmp_path)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_16_bit_floats_are_refused(tmp_path, dtype):
    with pytest.raises(ExportError, match=rf"{np.dtype(dtype).name}, which has no C99 type.*float32"):
        export(lambda x: x * 2, tmp_path, [X.astype(dtype)])


def test_a_function_returning_no_tensor_is_refused(tmp_path):
    with pytest.raises(ExportError, match="must return a Tensor"):
        export(lambda x: 3, tmp_path)


def test_names_that_are_no_c_identifiers_and_unknown_weight_modes_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not a C identifier"):
        export(lambda x: x * 2, tmp_path, name="2model")
    with pytest.raises(ValueError, match="weights must be 'inline' or 'file'"):
        export(lambda x: x * 2, tmp_path, weights="blob")


def test_buffers_are_sorted_into_inputs_outputs_constants_and_intermediates():
    weight = Tensor(np.full((4, 5), 0.5, np.float32)).realize()

    def two_layers(x):
        hidden = (x @ weight).relu().contiguous()
        return hidden.sum(1).exp() + hidden.amax(1)

    captured = capture(two_layers, X)
    assert [buffer.size for buffer in captured.inputs] == [12]
    assert [buffer.size for buffer in captured.outputs] == [3]
    assert weight.lazydata.buffer in captured.constants
    np.testing.assert_array_equal(captured.constant_values[id(weight.lazydata.buffer)], weight.numpy().reshape(-1))
    assert all(buffer not in captured.constants for buffer in captured.inputs + captured.outputs)
    written = {id(buffer) for step in captured.steps for buffer in step.buffers[:step.kernel.output_count]}
    assert {id(buffer) for buffer in captured.intermediates} <= written
    assert captured.input_shapes == [(3, 4)] and captured.output_shapes == [(3,)]


def test_a_jitted_function_is_captured_as_the_function_it_wraps(tmp_path):
    from lazygrad.jit import jit
    doubled = jit(lambda x: (x * 2).relu())
    for _ in range(3):  # captured and replayed: replays launch no kernels through the engine
        doubled(Tensor(X))
    result = export(doubled, tmp_path)
    assert result.launches == 1
