"""Gradients of the composed Tensor API (activations, reductions, movement, indexing, einsum, prod and
cumprod through zeros) against central finite differences in float64, on CPU and NPY. Inputs stay away
from kinks and from the points where a composition switches formula (|x| = 0.25, 0.5, 1).
"""
import numpy as np
import pytest

from lazygrad import Tensor, dtypes, no_grad
from gradcheck import check_gradients

DEVICES = ["CPU", "NPY"]
rng = np.random.default_rng(1)


def signed(*shape):
    values = rng.uniform(-2.0, 2.0, shape)
    return np.where(np.abs(np.abs(values) - 0.75) > 0.6, 0.75 * np.sign(values), values)  # |x| in [0.15, 1.35]


def distinct(*shape):
    """Well separated values (no ties for max, argmax-like selections stable under +-eps)."""
    return rng.permutation(np.linspace(-2.0, 2.0, int(np.prod(shape)))).reshape(shape) + 0.01


def positive(*shape):
    return rng.uniform(0.5, 2.0, shape)


def weights(*shape):
    """A fixed float64 tensor to mix outputs with, so every output element gets a different weight."""
    return Tensor(np.arange(1.0, np.prod(shape) + 1).reshape(shape) / 7)


def weighted(result):
    return (result * weights(*result.shape).to(result.device)).sum()


def with_zeros(*positions):
    """A (3, 4) input with zeros at the given positions: rows with none, one and two zeros (a product is
    linear in each element, so its finite differences are exact at a zero too)."""
    values = rng.uniform(0.5, 1.5, (3, 4)) * np.array([1, -1, 1, -1])
    for position in positions:
        values[position] = 0.0
    return values


INDEX = np.array([[2, 0, 1], [1, 1, 3]])  # gather along dim 1 of (2, 4); scatter along dim 1 into (2, 4)

CASES = {
    # elementwise
    "expm1": (lambda x: weighted(x.expm1()), [np.array([-1.3, -0.3, 0.1, 0.4, 0.8, 2.0])]),
    "log1p": (lambda x: weighted(x.log1p()), [np.array([-0.6, -0.1, 0.05, 0.2, 0.7, 3.0])]),
    "erf": (lambda x: weighted(x.erf()), [np.array([-2.5, -0.6, 0.02, 0.5, 1.4, 3.2])]),
    "erfc": (lambda x: weighted(x.erfc()), [np.array([-1.8, -0.3, 0.3, 0.9, 2.2, 4.0])]),
    "gelu": (lambda x: weighted(x.gelu()), [signed(2, 3)]),
    "gelu_tanh": (lambda x: weighted(x.gelu(approximate="tanh")), [signed(2, 3)]),
    "silu_mish": (lambda x: weighted(x.silu() + x.mish()), [signed(2, 3)]),
    "softplus": (lambda x: weighted(x.softplus() + x.softplus(beta=2.0, threshold=1.0)), [signed(2, 3)]),
    "elu_selu": (lambda x: weighted(x.elu(0.7) + x.selu()), [signed(2, 3)]),
    "leaky_relu_softsign": (lambda x: weighted(x.leaky_relu(0.1) + x.softsign()), [signed(2, 3)]),
    "hard_functions": (lambda x: weighted(x.hardswish() + x.hardsigmoid() + x.hardtanh(-0.5, 1.0) + (3 * x).relu6()),
                       [np.array([-3.5, -1.0, -0.2, 0.3, 0.8, 2.5])]),
    "tanh_sigmoid": (lambda x: weighted(x.tanh() + x.sigmoid()), [np.array([-30.0, -1.2, -0.1, 0.3, 4.0, 50.0])]),
    "lerp": (lambda x, y, w: weighted(x.lerp(y, w) + x.lerp(y, 0.8)), [signed(2, 3), signed(2, 3), positive(2, 3) / 2]),
    "abs_clone": (lambda x: weighted(abs(x) + x.clone()), [signed(2, 3)]),
    # reductions
    "var_std": (lambda x: weighted(x.var(1)) + weighted(x.std(0, correction=0)), [signed(2, 3)]),
    "logsumexp": (lambda x: weighted(x.logsumexp(1)) + x.logsumexp(), [signed(2, 3)]),
    "softmax": (lambda x: weighted(x.softmax(1)), [signed(2, 3)]),
    "log_softmax": (lambda x: weighted(x.log_softmax(0)), [signed(2, 3)]),
    "cumsum": (lambda x: weighted(x.cumsum(1) + x.cumsum(0)), [signed(2, 3)]),
    "cumprod": (lambda x: weighted(x.cumprod(1)), [positive(2, 3)]),
    "cummax": (lambda x: weighted(x.cummax(0).values), [distinct(3, 2)]),
    "cummin": (lambda x: weighted(x.cummin(1).values), [distinct(3, 2)]),
    "mode": (lambda x: weighted(x.mode(1).values), [distinct(3, 4)]),
    "scatter_reduce": (lambda x: weighted(x.scatter_reduce(0, Tensor(np.array([[0, 2], [0, 1]]), device=x.device),
                                                           x[:2, :2] * 3, "amax")), [distinct(3, 2)]),
    # movement
    "roll_repeat_tile": (lambda x: weighted(x.roll(1, 1).repeat(2, 1) + x.tile(2, 1) + x.repeat_interleave(2, 0)),
                         [signed(2, 3)]),
    "cat_stack": (lambda x, y: weighted(Tensor.cat([x, y, x], dim=1)) + weighted(Tensor.stack([x, y[:, 1:]])),
                  [signed(3, 2), signed(3, 3)]),
    "split_chunk_unbind": (lambda x: weighted(x.split(1, 1)[1] * x.chunk(2, 1)[0]) + weighted(x.unbind(0)[2]),
                           [signed(3, 2)]),
    "pad_modes": (lambda x: weighted(x.pad((2, 1, 1, 1), mode="reflect") + x.pad((2, 1, 1, 1), mode="circular")
                                     + x.pad((2, 1, 1, 1), mode="replicate")), [signed(3, 3)]),
    # indexing
    "getitem_tensor": (lambda x: weighted(x[Tensor([[2, 0], [2, 1]]).to(x.device), Tensor([1, -1]).to(x.device)]),
                       [signed(3, 3)]),
    "gather": (lambda x: weighted(x.gather(1, Tensor(INDEX).to(x.device))), [signed(2, 4)]),
    "scatter": (lambda x, s: weighted(x.scatter(1, Tensor(INDEX).to(x.device), s)), [signed(2, 4), signed(2, 3)]),
    "scatter_add": (lambda x, s: weighted(x.scatter(1, Tensor(INDEX).to(x.device), s, reduce="add")),
                    [signed(2, 4), signed(2, 3)]),
    "masked_fill_tril_triu": (lambda x: weighted(x.masked_fill(x > 0.5, 0.0) + x.tril(-1) * 2 + x.triu(1)),
                              [signed(2, 3)]),
    # linear algebra
    "einsum_matmul": (lambda x, y: weighted(Tensor.einsum("ij,jk->ik", x, y)), [signed(2, 3), signed(3, 2)]),
    "einsum_trace_diagonal": (lambda x: Tensor.einsum("ii", x) + weighted(Tensor.einsum("ii->i", x)), [signed(3, 3)]),
    "einsum_batch_ellipsis": (lambda x, y: weighted(Tensor.einsum("...ij,...j->...i", x, y)),
                              [signed(2, 2, 3), signed(2, 3)]),
    "outer": (lambda x, y: weighted(x.outer(y)), [signed(3), signed(2)]),
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
def test_setitem_carries_the_gradient_of_the_assigned_value(device):
    def function(value):
        buffer = Tensor(np.arange(12.0).reshape(3, 4) / 10, device=device)
        buffer[1:, ::2] = value * 2
        return weighted(buffer.exp())
    check_gradients(function, signed(2, 2), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_rounding_functions_have_zero_gradient(device):
    x = Tensor(np.array([-1.5, 0.3, 2.7]), device=device, requires_grad=True)
    (x.round() + x.floor() + x.ceil() + x.trunc() + x.sign() + x * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


@pytest.mark.parametrize("device", DEVICES)
def test_saturated_activations_have_finite_gradients(device):
    # exp overflows inside a naive sigmoid, softplus or elu; the unused branch of a where must not
    # turn its zero gradient into NaN
    x = Tensor(np.array([-800.0, -60.0, 60.0, 800.0]), device=device, requires_grad=True)
    (x.sigmoid() + x.tanh() + x.softplus() + x.elu() + x.gelu() + x.gelu(approximate="tanh") + x.silu() + x.mish()
     + x.erf() + x.log1p().minimum(0)).sum().backward()
    assert np.all(np.isfinite(x.grad.numpy())), x.grad.numpy()


def test_comparisons_and_integer_results_do_not_require_grad():
    x = Tensor(np.array([1.0, -2.0]), requires_grad=True)
    assert not (x > 0).requires_grad
    assert not x.argmax().requires_grad
    assert not x.int().requires_grad
    assert (x > 0).where(x, 0.0).requires_grad
    assert x.to(dtypes.float32).requires_grad


def test_assigning_into_a_tensor_that_requires_grad_needs_no_grad():
    x = Tensor(np.zeros(3), requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="requires grad"):
        y[0] = 1.0
    with no_grad():
        y[0] = 1.0
    np.testing.assert_array_equal(y.numpy(), [1.0, 0.0, 0.0])


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "silu"])
def test_a_matmul_under_an_activation_is_not_computed_again_for_its_gradient(activation):
    """The forward pass stores the activation's input (the matmul), which its gradient reads:
    the weight gradient then costs one more matmul, not two. (Here the activation's output is
    what the forward pass stores; were it read by another reduce, the matmul would be stored anyway.)"""
    from lazygrad import stats
    rng = np.random.default_rng(7)
    x = Tensor(rng.standard_normal((8, 512)).astype(np.float32))
    w = Tensor(rng.standard_normal((16, 512)).astype(np.float32) * 0.05, requires_grad=True)
    pre = x @ w.T
    out = pre.gelu(approximate="tanh") if activation == "gelu_tanh" else getattr(pre, activation)()
    out.realize()
    (out * 3).sum().backward()
    matmul_flops = 8 * 16 * 512 * 2
    stats.reset()
    w.grad.realize()
    assert stats.flops < 1.5 * matmul_flops, f"{stats.flops} flops: the forward matmul was computed again"


@pytest.mark.parametrize("transposed", [False, True], ids=["x@w", "x@w.T"])
def test_gradients_of_a_matmul_that_takes_panels_match_their_formulas(transposed):
    """Past linalg's panel thresholds the forward and both gradient matmuls copy their operands into
    panels; the gradients must still be g @ w.T and x.T @ g (computed by numpy in float64)."""
    x, w, g = rng.standard_normal((64, 512)), rng.standard_normal((512, 512)), rng.standard_normal((64, 512))
    x_tensor = Tensor(x, requires_grad=True)
    w_tensor = Tensor(np.ascontiguousarray(w.T) if transposed else w, requires_grad=True)
    out = x_tensor @ (w_tensor.T if transposed else w_tensor)
    (out * Tensor(g)).sum().backward()
    np.testing.assert_allclose(out.numpy(), x @ w, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(x_tensor.grad.numpy(), g @ w.T, rtol=1e-10, atol=1e-10)
    weight_grad = x.T @ g
    np.testing.assert_allclose(w_tensor.grad.numpy(), weight_grad.T if transposed else weight_grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
def test_prod_keeps_its_value_and_its_gradient_away_from_zeros(device):
    values = np.array([[1.5, -2.0, 0.5], [0.0, 3.0, 0.0]])
    x = Tensor(values, device=device, requires_grad=True)
    result = x.prod(1)
    np.testing.assert_array_equal(result.numpy(), [-1.5, 0.0])
    result.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[-1.0, 0.75, -3.0], [0.0, 0.0, 0.0]], rtol=1e-15)


@pytest.mark.parametrize("transposed", [False, True], ids=["x@w", "x@w.mT"])
def test_gradients_of_a_batched_matmul_are_summed_over_its_broadcast_batch_dims(transposed):
    """A batched product's gradients are matmuls (linalg._matmul_gradient), each summed over the batch
    dims its operand was broadcast along: x of (2, 1, 5, 4) by w of (3, 4, 6), and a 2-D x by a
    batched w. Against numpy's formulas in float64."""
    x, w, g = rng.standard_normal((2, 1, 5, 4)), rng.standard_normal((3, 4, 6)), rng.standard_normal((2, 3, 5, 6))
    x_tensor = Tensor(x, requires_grad=True)
    w_tensor = Tensor(np.ascontiguousarray(w.transpose(0, 2, 1)) if transposed else w, requires_grad=True)
    out = x_tensor @ (w_tensor.transpose(-1, -2) if transposed else w_tensor)
    (out * Tensor(g)).sum().backward()
    np.testing.assert_allclose(out.numpy(), x @ w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x_tensor.grad.numpy(), (g @ w.transpose(0, 2, 1)).sum(1, keepdims=True), rtol=1e-12, atol=1e-12)
    weight_grad = (x.transpose(0, 1, 3, 2) @ g).sum(0)
    np.testing.assert_allclose(w_tensor.grad.numpy(), weight_grad.transpose(0, 2, 1) if transposed else weight_grad,
                               rtol=1e-12, atol=1e-12)
    flat, flat_g = rng.standard_normal((5, 4)), rng.standard_normal((3, 5, 6))
    flat_tensor, batched = Tensor(flat, requires_grad=True), Tensor(w, requires_grad=True)
    (flat_tensor @ batched * Tensor(flat_g)).sum().backward()
    np.testing.assert_allclose(flat_tensor.grad.numpy(), (flat_g @ w.transpose(0, 2, 1)).sum(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(batched.grad.numpy(), flat.T @ flat_g, rtol=1e-12, atol=1e-12)
