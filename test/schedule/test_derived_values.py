"""A kernel that reads only buffers realized before its realize (a parameter's reduce, a weight
copied into panels) runs once while they stay unchanged: later realizes take its kept outputs
(lazygrad/derived_values.py). Every way its sources or outputs can change makes it run again."""
import gc
import weakref

import numpy as np
import pytest

from lazygrad import Tensor, no_grad, stats
from lazygrad.jit import jit

RNG = np.random.default_rng(7)
W = RNG.standard_normal((5, 6)).astype(np.float32)
X1, X2 = RNG.standard_normal((2, 6)).astype(np.float32), RNG.standard_normal((2, 6)).astype(np.float32)


def scaled(x: Tensor, w: Tensor) -> Tensor:
    return x * w.sum(0)  # two kernels: the column sums of w (w alone), then the product


def kernels_of(function) -> tuple[int, np.ndarray]:
    stats.reset()
    value = function().numpy()
    return stats.kernels, value


def test_a_value_of_an_unchanged_parameter_is_computed_once():
    w = Tensor(W).realize()
    first, value = kernels_of(lambda: scaled(Tensor(X1), w))
    np.testing.assert_allclose(value, X1 * W.sum(0), rtol=1e-5)
    second, value = kernels_of(lambda: scaled(Tensor(X2), w))
    np.testing.assert_allclose(value, X2 * W.sum(0), rtol=1e-5)
    assert (first, second) == (2, 1)


def test_writing_the_parameter_computes_the_value_again():
    w = Tensor(W).realize()
    scaled(Tensor(X1), w).numpy()
    with no_grad():
        w.assign(W * 3).realize()
    count, value = kernels_of(lambda: scaled(Tensor(X1), w))
    np.testing.assert_allclose(value, X1 * (W * 3).sum(0), rtol=1e-5)
    assert count == 2


def test_another_buffer_with_the_same_contents_is_not_taken_for_the_kept_one():
    w = Tensor(W).realize()
    scaled(Tensor(X1), w).numpy()
    other = Tensor(W * 2).realize()
    count, value = kernels_of(lambda: scaled(Tensor(X1), other))
    np.testing.assert_allclose(value, X1 * (W * 2).sum(0), rtol=1e-5)
    assert count == 2


def test_writing_a_kept_output_in_place_computes_it_again():
    w = Tensor(W).realize()
    sums = w.sum(0).realize()  # the kept buffer itself
    with no_grad():
        sums.assign(np.zeros(6, np.float32)).realize()
    np.testing.assert_allclose(sums.numpy(), 0)
    count, value = kernels_of(lambda: scaled(Tensor(X1), w))
    np.testing.assert_allclose(value, X1 * W.sum(0), rtol=1e-5)
    assert count == 2


def test_what_a_realize_was_asked_for_is_computed_every_time():
    w = Tensor(W).realize()
    counts = [kernels_of(lambda: w.sum(0))[0] for _ in range(3)]
    assert counts == [1, 1, 1]


def test_a_kept_value_goes_when_its_source_does():
    w = Tensor(W).realize()
    sums = w.sum(0)
    (Tensor(X1) * sums).realize()  # the sums: an intermediate of this realize, kept
    node = sums.lazydata
    while node.buffer is None:  # a view of the reduce's result
        node = node.srcs[0]
    kept = weakref.ref(node.buffer)
    del node
    del sums
    gc.collect()
    assert kept() is not None
    del w
    gc.collect()
    assert kept() is None


@pytest.mark.parametrize("kept_before_capture", [False, True])
def test_a_jit_capture_records_the_launches_of_kept_values(kept_before_capture):
    """The jit skips such launches itself while their sources are unchanged, and runs them again
    after a write: the capture must see them even when the eager calls before it took kept values."""
    w = Tensor(W).realize()
    if kept_before_capture:
        scaled(Tensor(X1), w).numpy()
        scaled(Tensor(X1), w).numpy()
    step = jit(lambda x: scaled(x, w))
    for _ in range(3):
        np.testing.assert_allclose(step(Tensor(X1)).numpy(), X1 * W.sum(0), rtol=1e-5)
    with no_grad():
        w.assign(W - 1).realize()
    np.testing.assert_allclose(step(Tensor(X2)).numpy(), X2 * (W - 1).sum(0), rtol=1e-5)
