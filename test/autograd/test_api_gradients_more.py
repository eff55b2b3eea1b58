"""Gradients of mm, bmm, mT, swapaxes, movedim, reshape_as, diagonal, index_select, amax, amin and of prod
and cumprod through zeros, against central finite differences in float64, on CPU and NPY. (A product
is linear in each element, so its finite differences are exact at a zero too.) PyTorch's values at ties
and zeros are in test_gradients_at_kinks.py.
"""
import numpy as np
import pytest

from lazygrad import Tensor
from gradcheck import check_gradients

DEVICES = ["CPU", "NPY"]
rng = np.random.default_rng(2)


def signed(*shape):
    return rng.uniform(-2.0, 2.0, shape)


def distinct(*shape):
    """Well separated values: no ties for amax and amin, and none made by a step of +-eps."""
    return rng.permutation(np.linspace(-2.0, 2.0, int(np.prod(shape)))).reshape(shape) + 0.01


def with_zeros(*positions):
    """A (3, 4) input with zeros at the given positions: rows with none, one and two zeros."""
    values = rng.uniform(0.5, 1.5, (3, 4)) * np.array([1, -1, 1, -1])
    for position in positions:
        values[position] = 0.0
    return values


def weighted(result):
    """Every output element gets a different weight, so a gradient sent to the wrong place shows."""
    weights = Tensor(np.arange(1.0, result.numel() + 1).reshape(result.shape) / 7).to(result.device)
    return (result * weights).sum()


CASES = {
    "mm": (lambda x, y: weighted(x.mm(y)), [signed(2, 3), signed(3, 4)]),
    "bmm": (lambda x, y: weighted(x.bmm(y.mT)), [signed(2, 2, 3), signed(2, 4, 3)]),
    "mT_swapaxes_movedim": (lambda x: weighted(x.mT.swapaxes(0, 1) + x.movedim((0, 2), (1, 0))
                                               + x.moveaxis(-1, 0).reshape_as(x.movedim(2, 0))), [signed(2, 3, 3)]),
    "diagonal": (lambda x: weighted(x.diagonal()) + weighted(x.diagonal(1, 1, 2).T) + weighted(x.diagonal(-1, 2, 0)),
                 [signed(3, 3, 4)]),
    "index_select": (lambda x: weighted(x.index_select(1, Tensor([2, 0, 2]).to(x.device))
                                        + x.T.index_select(0, Tensor([1, 1, 3]).to(x.device)).T[:3, :3]),
                     [signed(3, 4)]),
    "amax_amin": (lambda x: weighted(x.amax(1)) + weighted(x.amin((0, 2), keepdim=True)) + x.amax(),
                  [distinct(2, 3, 2)]),
    "prod_with_zeros_along_a_dim": (lambda x: weighted(x.prod(1)) + weighted(x.prod(0)),
                                    [with_zeros((1, 2), (2, 0), (2, 3))]),
    "prod_with_one_zero": (lambda x: x.prod() * 3, [with_zeros((1, 1))]),
    "prod_with_two_zeros": (lambda x: x.prod() * 3, [with_zeros((0, 1), (2, 2))]),
    "cumprod_with_zeros": (lambda x: weighted(x.cumprod(1)) + weighted(x.cumprod(0)), [with_zeros((0, 1), (1, 1))]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name, device):
    function, arrays = CASES[name]
    check_gradients(function, *arrays, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_prod_keeps_its_value_and_its_gradient_away_from_zeros(device):
    values = np.array([[1.5, -2.0, 0.5], [0.0, 3.0, 0.0]])
    x = Tensor(values, device=device, requires_grad=True)
    result = x.prod(1)
    np.testing.assert_array_equal(result.numpy(), [-1.5, 0.0])
    result.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[-1.0, 0.75, -3.0], [0.0, 0.0, 0.0]], rtol=1e-15)
