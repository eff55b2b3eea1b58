"""tinygrad's names for nn functions, with tinygrad's arguments, against numpy on every device."""
import numpy as np
import pytest

from lazygrad import Tensor

rng = np.random.default_rng(3)


def close(result: Tensor, expected, rtol=1e-5, atol=1e-6) -> None:
    assert result.shape == np.shape(expected)
    np.testing.assert_allclose(result.numpy().astype(np.float64), expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("axis", [-1, (1, 2)])
def test_layernorm(axis, device):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    centered = x.astype(np.float64) - x.mean(axis=axis, keepdims=True)
    expected = centered / np.sqrt((centered ** 2).mean(axis=axis, keepdims=True) + 1e-5)
    close(Tensor(x, device=device).layernorm(axis), expected, rtol=1e-4, atol=1e-5)


def test_batchnorm(device):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    weight, bias, mean = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
    invstd = rng.uniform(0.5, 2.0, 3).astype(np.float32)
    per_channel = lambda v: v.reshape(1, 3, 1, 1).astype(np.float64)  # noqa: E731
    expected = (x - per_channel(mean)) * per_channel(weight) * per_channel(invstd) + per_channel(bias)
    tensors = [Tensor(a, device=device) for a in (weight, bias, mean, invstd)]
    close(Tensor(x, device=device).batchnorm(*tensors), expected, rtol=1e-5, atol=1e-5)
    close(Tensor(x, device=device).batchnorm(None, None, tensors[2], tensors[3]),
          (x - per_channel(mean)) * per_channel(invstd), rtol=1e-5, atol=1e-5)


def test_sparse_categorical_crossentropy_takes_the_last_dim_as_classes(device):
    logits = rng.standard_normal((2, 3, 5)).astype(np.float32)
    labels = np.array([[0, 4, -1], [2, -1, 1]])
    log_probs = logits - np.log(np.exp(logits.astype(np.float64)).sum(-1, keepdims=True))
    kept = labels != -1
    picked = np.take_along_axis(log_probs, np.where(kept, labels, 0)[..., None], -1)[..., 0]
    expected = -(picked * kept).sum() / kept.sum()
    close(Tensor(logits, device=device).sparse_categorical_crossentropy(Tensor(labels, device=device)),
          np.array(expected), rtol=1e-5)


def test_binary_crossentropy_and_its_logits_form(device):
    logits = rng.standard_normal((3, 4))
    targets = rng.random((3, 4))
    probabilities = 1 / (1 + np.exp(-logits))
    expected = -(targets * np.log(probabilities) + (1 - targets) * np.log(1 - probabilities)).mean()
    close(Tensor(probabilities, device=device).binary_crossentropy(Tensor(targets, device=device)),
          np.array(expected), rtol=1e-10)
    close(Tensor(logits, device=device).binary_crossentropy_logits(Tensor(targets, device=device)),
          np.array(expected), rtol=1e-10)


def test_sequential_applies_each_layer_in_turn(device):
    x = rng.standard_normal((2, 3))
    close(Tensor(x, device=device).sequential([lambda t: t * 2, lambda t: t + 1, Tensor.relu]),
          np.maximum(x * 2 + 1, 0))
