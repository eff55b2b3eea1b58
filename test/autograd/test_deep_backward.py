"""backward() through a chain of 5,000 steps: ordered without recursion (the limit is cut to just
above the test's own stack) and right. The forward values are stored every 100 steps, as a model's
activations are, which keeps the kernels to compile few; the gradient is still one chain through
all 5,000 steps."""
import numpy as np
import pytest

from lazygrad import Tensor
from recursion_limit import shallow_stack

STEPS = 5000
FACTORS = [1.001 if step % 2 else 0.9995 for step in range(STEPS)]  # their product is about 3.49


@pytest.mark.parametrize("device", ["CPU", "NPY"])
def test_backward_through_a_5000_step_chain_gives_the_product_of_its_factors(device):
    start = np.linspace(-1, 1, 16, dtype=np.float32)
    x = Tensor(start, device=device, requires_grad=True)
    with shallow_stack():
        y = x
        for step, factor in enumerate(FACTORS):
            y = y * factor + 0.25
            if step % 100 == 99:
                y = y.contiguous()
        (y * y).sum().backward()
        gradient = x.grad.numpy()
        value = y.numpy()
    expected_value = start.astype(np.float64)
    for factor in FACTORS:
        expected_value = expected_value * factor + 0.25
    np.testing.assert_allclose(value, expected_value, rtol=1e-3)
    np.testing.assert_allclose(gradient, 2 * expected_value * np.prod(FACTORS), rtol=1e-3)
