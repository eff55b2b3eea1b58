"""Gradients of every differentiable primitive (and common compositions) against central finite
differences in float64, on CPU and NPY."""
import numpy as np
import pytest

from gradcheck import check_gradients
from lazygrad import Tensor, no_grad

DEVICES = ["CPU", "NPY"]


rng = np.random.default_rng(0)


def positive(*shape):
    return rng.uniform(0.5, 2.0, shape)


def signed(*shape):
    values = rng.uniform(-2.0, 2.0, shape)
    return np.where(np.abs(values) < 0.2, 0.7, values)  # away from kinks at 0


CASES = {
    "neg": (lambda x: (-x).sum(), [signed(3, 2)]),
    "reciprocal": (lambda x: x.reciprocal().sum(), [positive(3, 2)]),
    "sqrt": (lambda x: x.sqrt().sum(), [positive(4)]),
    "exp2": (lambda x: x.exp2().sum(), [signed(4)]),
    "log2": (lambda x: x.log2().sum(), [positive(4)]),
    "sin": (lambda x: x.sin().sum(), [signed(4)]),
    "exp_log": (lambda x: (x.exp() + x.log()).sum(), [positive(2, 3)]),
    "add_broadcast": (lambda x, y: (x + y).square().sum(), [signed(2, 3), signed(3)]),
    "mul_broadcast": (lambda x, y: (x * y).sum(), [signed(2, 1, 3), signed(4, 1)]),
    "div": (lambda x, y: (x / y).sum(), [signed(2, 3), positive(2, 3)]),
    "maximum": (lambda x, y: x.maximum(y).sum(), [signed(5), signed(5)]),
    "minimum": (lambda x, y: x.minimum(y).sum(), [signed(5), signed(5)]),
    "where": (lambda x, y: (x > 0).where(x * 2, y * y).sum(), [signed(6), signed(6)]),
    "sum_axis": (lambda x: (x.sum(1) ** 2).sum(), [signed(3, 4)]),
    "max_axis": (lambda x: (x.amax(0) * 3).sum(), [signed(3, 4)]),
    "prod_axis": (lambda x: x.prod(1).sum(), [positive(2, 3)]),
    "mean_keepdim": (lambda x: (x - x.mean(1, keepdim=True)).square().sum(), [signed(3, 4)]),
    "reshape_permute": (lambda x: (x.reshape(3, 4).permute(1, 0) * Tensor(np.arange(12.0).reshape(4, 3), device=x.device)).sum(), [signed(2, 6)]),
    "expand": (lambda x: (x.expand(3, 4) * Tensor(np.arange(12.0).reshape(3, 4), device=x.device)).sum(), [signed(1, 4)]),
    "pad_shrink": (lambda x: (x.pad(((1, 2), (0, 1))).exp()[1:4, 0:3] * 2).sum(), [signed(3, 3)]),
    "flip_slice": (lambda x: (x.flip(0)[::2] * Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=x.device)).sum(), [signed(4, 3)]),
    "getitem": (lambda x: (x[1, ::-1] * x[0]).sum(), [signed(2, 3)]),
    "matmul": (lambda x, w: (x @ w).relu().sum(), [signed(3, 4), signed(4, 2)]),
    "matmul_transposed": (lambda x, w: (x @ w.T).relu().sum(), [signed(9, 4), signed(2, 4)]),  # nn.Linear's
    "matmul_vector": (lambda x, w: (x @ w).square().sum(), [signed(4), signed(4, 3)]),
    "batched_matmul": (lambda x, w: (x @ w).square().sum(), [signed(2, 2, 3), signed(3, 2)]),
    "softmax": (lambda x: ((x - x.amax(1, keepdim=True)).exp() / (x - x.amax(1, keepdim=True)).exp().sum(1, keepdim=True) * Tensor(np.arange(8.0).reshape(2, 4), device=x.device)).sum(), [signed(2, 4)]),
    "sigmoid_tanh": (lambda x: (x.sigmoid() + x.tanh()).sum(), [signed(5)]),
    "pow_float": (lambda x: (x ** 1.5).sum(), [positive(4)]),
    "contiguous": (lambda x: (x.T.contiguous() * Tensor(np.arange(6.0).reshape(3, 2), device=x.device)).sum(), [signed(2, 3)]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name, device):
    function, arrays = CASES[name]
    check_gradients(function, *arrays, device=device)


def test_gradient_through_a_cast_comes_back_in_the_source_dtype():
    x = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    (x.float() * Tensor(np.array([1.0, 2.0, 3.0], dtype=np.float32))).sum().backward()
    assert x.grad.dtype == x.dtype
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0, 3.0])


def test_gradients_accumulate_until_zeroed():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    (x * 3).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0])
    x.grad = None
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


def test_no_grad_builds_no_backward_graph():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    with no_grad():
        y = x * 2
    assert not y.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()


def test_detach_cuts_the_graph():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    (x.detach() * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0])


def test_backward_of_a_non_scalar_needs_a_gradient():
    x = Tensor(np.ones(3), requires_grad=True)
    with pytest.raises(RuntimeError, match="scalar outputs"):
        (x * 2).backward()
    (x * 2).backward(Tensor(np.array([1.0, 0.0, 2.0])))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 0.0, 4.0])


def test_integer_tensors_cannot_require_grad():
    with pytest.raises(TypeError, match="floating point"):
        Tensor([1, 2], requires_grad=True)


def test_backward_stays_lazy_and_fuses():
    from lazygrad import stats
    x = Tensor(np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32), requires_grad=True)
    w = Tensor(np.random.default_rng(2).standard_normal((8, 4)).astype(np.float32), requires_grad=True)
    loss = (x @ w).relu().sum()
    stats.reset()
    loss.backward()  # realizes the loss itself, as PyTorch has it before backward; the gradients stay lazy
    forward_kernels = stats.kernels
    assert 1 <= forward_kernels <= 2
    x.grad.realize(w.grad)
    assert stats.kernels - forward_kernels <= 4


def test_linear_weight_gradient_is_one_matmul_in_the_weights_layout():
    """x @ W.T's gradient for W is g.T @ x, computed in W's layout: no transposed copy after it."""
    from lazygrad import stats
    rng = np.random.default_rng(3)
    x_values, w_values = rng.standard_normal((16, 64)).astype(np.float32), rng.standard_normal((32, 64)).astype(np.float32)
    g_values = rng.standard_normal((16, 32)).astype(np.float32)
    x, w = Tensor(x_values), Tensor(w_values, requires_grad=True)
    ((x @ w.T) * Tensor(g_values)).sum().backward()
    stats.reset()
    w.grad.realize()
    assert stats.kernels == 1
    np.testing.assert_allclose(w.grad.numpy(), g_values.T @ x_values, rtol=1e-4, atol=1e-4)


def test_creation_functions_take_requires_grad():
    for tensor in (Tensor.randn(3, requires_grad=True), Tensor.zeros(2, 2, requires_grad=True),
                   Tensor.uniform(4, low=-1.0, high=1.0, requires_grad=True)):
        assert tensor.requires_grad and tensor.grad is None
        (tensor * 2).sum().backward()
        np.testing.assert_allclose(tensor.grad.numpy(), np.full(tensor.shape, 2.0))
    with pytest.raises(TypeError, match="floating point"):
        Tensor.arange(3, requires_grad=True)
