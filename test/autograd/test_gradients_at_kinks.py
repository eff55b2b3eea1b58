"""Gradients where a function has a kink, a tie or a special case (abs and relu at 0, clamp at its
bounds, maximum on a tie, pow at 0 and 1, ...): PyTorch's values, written out. When torch is
installed, the same table is checked against it, so the expectations stay PyTorch's (2.14: clamp's
minimum-norm subgradients at its bounds, 2.13 passed the whole gradient there).
"""
import math

import numpy as np
import pytest

import lazygrad.nn.functional as lazygrad_functional
from lazygrad import Tensor

DEVICES = ["CPU", "NPY"]
INF, NAN = math.inf, math.nan
SELU_SCALE_ALPHA = 1.0507009873554805 * 1.6732632423543772

# name: (function of (functional module, *inputs), inputs, expected gradient of the sum for each input)
CASES = {
    "abs": (lambda F, x: x.abs(), [[-1.0, -0.0, 0.0, 1.0]], [[-1, 0, 0, 1]]),
    "relu": (lambda F, x: F.relu(x), [[-1.0, 0.0, 1.0]], [[0, 0, 1]]),
    "sign": (lambda F, x: x.sign(), [[-1.0, 0.0, 1.0]], [[0, 0, 0]]),
    "l1_loss": (lambda F, x: F.l1_loss(x, x.detach() * 0 + 1, reduction="sum"), [[0.0, 1.0, 2.0]], [[-1, 0, 1]]),
    "clamp": (lambda F, x: x.clamp(-1, 1), [[-2.0, -1.0, 0.0, 1.0, 2.0]], [[0, 0, 1, 0, 0]]),
    "clamp_min": (lambda F, x: x.clamp(min=-1), [[-2.0, -1.0, 0.0]], [[0, 0, 1]]),
    "clamp_max": (lambda F, x: x.clamp(max=1), [[0.0, 1.0, 2.0]], [[1, 0, 0]]),
    "clamp_min_above_max": (lambda F, x: x.clamp(1, -1), [[-2.0, 0.0, 2.0]], [[0, 0, 0]]),
    "clamp_tensor_bounds": (lambda F, x, low, high: x.clamp(low, high),
                            [[0.0, 1.0, -1.0, 2.0], [0.0] * 4, [1.0] * 4],
                            [[0.5, 0.5, 0, 0], [0.5, 0, 1, 0], [0, 0.5, 0, 1]]),
    "clamp_tensor_min": (lambda F, x, low: x.clamp(min=low), [[-2.0, -1.0, 0.0], [-1.0] * 3],
                         [[0, 0.5, 1], [1, 0.5, 0]]),
    "hardtanh": (lambda F, x: F.hardtanh(x), [[-2.0, -1.0, 0.0, 1.0, 2.0]], [[0, 0, 1, 0, 0]]),
    "relu6": (lambda F, x: F.relu6(x), [[-1.0, 0.0, 3.0, 6.0, 7.0]], [[0, 0, 1, 0, 0]]),
    "hardsigmoid": (lambda F, x: F.hardsigmoid(x), [[-4.0, -3.0, 0.0, 3.0, 4.0]], [[0, 0, 1 / 6, 0, 0]]),
    "hardswish": (lambda F, x: F.hardswish(x), [[-4.0, -3.0, 0.0, 3.0, 4.0]], [[0, 0, 0.5, 1, 1]]),
    "leaky_relu": (lambda F, x: F.leaky_relu(x, 0.1), [[-1.0, 0.0, 1.0]], [[0.1, 0.1, 1]]),
    "elu": (lambda F, x: F.elu(x, 0.5), [[-1.0, 0.0, 1.0]], [[0.5 / math.e, 0.5, 1]]),
    "selu": (lambda F, x: F.selu(x), [[0.0]], [[SELU_SCALE_ALPHA]]),
    "maximum_tie": (lambda F, x, y: x.maximum(y), [[0.0, 1.0, -1.0], [0.0] * 3], [[0.5, 1, 0], [0.5, 0, 1]]),
    "minimum_tie": (lambda F, x, y: x.minimum(y), [[0.0, 1.0, -1.0], [0.0] * 3], [[0.5, 0, 1], [0.5, 1, 0]]),
    "max_ties": (lambda F, x: x.max(), [[1.0, 1.0, 0.0, 1.0]], [[1 / 3, 1 / 3, 0, 1 / 3]]),
    "min_ties": (lambda F, x: x.min(), [[0.0, 1.0, 0.0, 1.0]], [[0.5, 0, 0.5, 0]]),
    "amax_ties": (lambda F, x: x.amax(1) + x.amax((0, 1)), [[[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]],
                  [[[0, 1.5, 1.5], [1 / 3, 1 / 3, 1 / 3]]]),  # the sum counts amax((0, 1)) twice
    "amin_ties": (lambda F, x: x.amin(0), [[[1.0, 0.0], [1.0, 2.0]]], [[[0.5, 1], [0.5, 0]]]),
    # max pooling gives a window's whole gradient to its first maximum (row-major), unlike max()
    "max_pool2d_ties": (lambda F, x: F.max_pool2d(x, 2), [[[[1.0, 1.0, 0.0, 2.0], [1.0, 0.0, 2.0, 2.0]]]],
                        [[[[1, 0, 0, 1], [0, 0, 0, 0]]]]),
    "max_pool2d_overlapping_ties": (lambda F, x: F.max_pool2d(x, 3, stride=1, padding=1), [[[[0.0, 0.0], [0.0, 0.0]]]],
                                    [[[[4, 0], [0, 0]]]]),
    # the gradient of a product is the product of the other elements, also at a zero
    "prod_zeros_along_a_dim": (lambda F, x: x.prod(1), [[[1.0, 0.0, 3.0], [0.0, 0.0, 2.0], [2.0, 3.0, 4.0]]],
                               [[[0, 3, 0], [0, 0, 0], [12, 8, 6]]]),
    "prod_one_zero": (lambda F, x: x.prod(), [[[1.0, 0.0, 3.0], [2.0, 3.0, 4.0]]], [[[0, 72, 0], [0, 0, 0]]]),
    "prod_two_zeros": (lambda F, x: x.prod(), [[0.0, 2.0, 0.0]], [[0, 0, 0]]),
    "cumprod_zero": (lambda F, x: x.cumprod(0), [[2.0, 0.0, 3.0]], [[1, 8, 0]]),
    "pow_tensors": (lambda F, x, y: x ** y, [[0.0, 1.0, 2.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.5, -1.0, 2.5]],
                    [[0, 0, 0, math.inf, -math.inf, 2.5], [0, 0, math.log(2), 0, -math.inf, 0]]),
    "pow_float_exponents": (lambda F, x: x ** 0.5 + x ** 1.5 + x ** 0.0, [[0.0, 1.0]], [[math.inf, 0.5 + 1.5]]),
    "pow_negative_float_exponent": (lambda F, x: x ** -1.0, [[0.0, 1.0]], [[-math.inf, -1]]),
    "pow_int_exponents": (lambda F, x: x ** 0 + x ** 2 + x ** -2, [[0.0, 1.0]], [[-math.inf, 0]]),
    "pow_int_exponents_negative_base": (lambda F, x: x ** 0 + x ** 3 + x ** -1, [[-2.0]], [[12 - 0.25]]),
    "pow_of_a_number": (lambda F, x: 2 ** x + 0 ** x, [[-1.0, 0.0, 1.0]],
                        [[math.log(2) / 2 - math.inf, math.log(2), 2 * math.log(2)]]),
    # the inverse trigonometric and hyperbolic functions, atan2, logaddexp, copysign, logsigmoid
    "atan2": (lambda F, y, x: y.atan2(x),  # 0 at the origin and where x*x + y*y underflows
              [[0.0, 0.0, -0.0, 1.0, INF, 1e-200, 3.0], [0.0, -0.0, -0.0, INF, 1.0, 1e-200, 1e200]],
              [[0, 0, 0, NAN, 0, 0, 0], [0, 0, 0, 0, NAN, 0, 0]]),
    "asin": (lambda F, x: x.asin(), [[1.0, -1.0, 0.0, 2.0]], [[INF, INF, 1, NAN]]),
    "acos": (lambda F, x: x.acos(), [[1.0, -1.0, 0.0, 2.0]], [[-INF, -INF, -1, NAN]]),
    "atan": (lambda F, x: x.atan(), [[0.0, INF, -INF, 1e200]], [[1, 0, 0, 0]]),
    "acosh": (lambda F, x: x.acosh(), [[1.0, 0.5, INF]], [[INF, NAN, 0]]),
    "atanh": (lambda F, x: x.atanh(), [[1.0, -1.0, 0.0, 2.0]], [[INF, INF, 1, -1 / 3]]),
    "asinh": (lambda F, x: x.asinh(), [[0.0, 1e200, INF]], [[1, 0, 0]]),
    "sinh": (lambda F, x: x.sinh(), [[0.0, -INF]], [[1, INF]]),
    "cosh": (lambda F, x: x.cosh(), [[0.0, -INF]], [[0, -INF]]),
    "logaddexp": (lambda F, x, y: x.logaddexp(y),
                  [[-INF, INF, -INF, 1.0, 0.0], [-INF, INF, INF, -INF, 0.0]],
                  [[NAN, NAN, 0, 1, 0.5], [NAN, NAN, 1, 0, 0.5]]),
    "copysign": (lambda F, x, y: x.copysign(y), [[0.0, -0.0, 2.0, -2.0, NAN], [-1.0, 1.0, -0.0, 0.0, -1.0]],
                 [[0, 0, -1, -1, NAN], [0, 0, 0, 0, 0]]),
    "logsigmoid": (lambda F, x: F.logsigmoid(x), [[0.0, -INF, INF, -800.0, 800.0]], [[0.5, 1, 0, 1, 0]]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_at_a_kink_is_pytorchs(name, device):
    function, inputs, expected = CASES[name]
    tensors = [Tensor(np.array(values), device=device, requires_grad=True) for values in inputs]
    function(lazygrad_functional, *tensors).sum().backward()
    for tensor, gradient in zip(tensors, expected):
        np.testing.assert_allclose(tensor.grad.numpy(), gradient, rtol=1e-12)


# PyTorch before 2.14 passed x the whole gradient at clamp's bounds (pytorch/pytorch#184574): its
# values, for checking the table against an older torch (.ci/run installs 2.13, the CPU build).
BEFORE_2_14 = {
    "clamp": [[0, 1, 1, 1, 0]],
    "clamp_min": [[0, 1, 1]],
    "clamp_max": [[1, 1, 0]],
    "clamp_tensor_bounds": [[1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
    "clamp_tensor_min": [[0, 1, 1], [1, 0, 0]],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_expected_gradients_are_pytorchs(name):
    torch = pytest.importorskip("torch", reason="torch is not installed: the table is not compared with PyTorch")
    function, inputs, expected = CASES[name]
    if tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 14):
        expected = BEFORE_2_14.get(name, expected)
    tensors = [torch.tensor(values, dtype=torch.float64, requires_grad=True) for values in inputs]
    function(torch.nn.functional, *tensors).sum().backward()
    for tensor, gradient in zip(tensors, expected):
        # rtol: PyTorch's hardsigmoid gradient is 1/6 rounded to float32, also in float64
        np.testing.assert_allclose(tensor.grad.numpy(), gradient, rtol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_abs_of_negative_zero_is_positive_zero(device):
    result = Tensor(np.array([-0.0, 0.0, -2.0, np.nan]), device=device).abs().numpy()
    np.testing.assert_array_equal(result, [0.0, 0.0, 2.0, np.nan])
    assert not np.signbit(result[:2]).any()


@pytest.mark.parametrize("device", DEVICES)
def test_clamp_under_autograd_computes_the_values_it_computes_without(device):
    """clamp takes other selects where a gradient is wanted (its ties); the values stay numpy's."""
    x = np.array([-np.inf, -2.0, -1.0, 0.5, 1.0, 3.0, np.inf, np.nan])
    for low, high in ((-1.0, 1.0), (np.full(8, -1.0), np.full(8, 1.0)), (np.full(8, -1.0), None), (None, 1.0)):
        def bound(value):
            return Tensor(value, device=device, requires_grad=True) if isinstance(value, np.ndarray) else value
        result = Tensor(x, device=device, requires_grad=True).clamp(bound(low), bound(high))
        expected = np.clip(x, -np.inf if low is None else low, np.inf if high is None else high)
        np.testing.assert_array_equal(result.numpy(), expected)
