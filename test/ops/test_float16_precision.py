"""float16 results within a few float16 ulps of the exact value on every device: transcendental
compositions are computed in float32 and rounded once, and sums accumulate in float32 (the NPY
reference included, where numpy alone would round between blocks of a strided sum)."""
import numpy as np

from lazygrad import Tensor

rng = np.random.default_rng(11)


def test_float16_exp_and_log_round_once(device):
    x = (rng.standard_normal(4096) * 2).astype(np.float16)
    exact = np.exp(x.astype(np.float64))
    got = Tensor(x, device=device).exp().numpy().astype(np.float64)
    assert np.max(np.abs(got - exact) / exact) < 1e-3  # numpy's own float16 exp: 4.8e-4
    positive = np.abs(x) + np.float16(0.1)
    got = Tensor(positive, device=device).log().numpy().astype(np.float64)
    assert np.max(np.abs(got - np.log(positive.astype(np.float64)))) < 2e-3


def test_float16_matmul_accumulates_in_float32(device):
    a, b = rng.random((8, 256)).astype(np.float16), rng.random((256, 8)).astype(np.float16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    got = (Tensor(a, device=device) @ Tensor(b, device=device)).numpy().astype(np.float64)
    assert np.max(np.abs(got - exact)) < 0.07  # a float16 accumulator is off by ~0.3 here
