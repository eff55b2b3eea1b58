"""Graphs thousands of nodes deep: built, scheduled and run with the recursion limit cut to just above
the test's own stack (no walk keeps a frame per node), planned without recomputing a recurrence from
its first step in every step's kernel, and split where one kernel would read too many buffers."""
import numpy as np
import pytest

from lazygrad import Tensor, stats
from lazygrad.graph import to_dot
from lazygrad.schedule.fuse import MAX_KERNEL_BUFFERS, create_schedule
from lazygrad.codegen.kernel import format_ast
from recursion_limit import shallow_stack

CHAIN_STEPS = 5000  # two ops each: 10,000 op nodes


def affine_chain(x, steps: int, contiguous_every: int = 0):
    """x * 1.0001 + 0.5, `steps` times, stored every `contiguous_every` steps; for Tensors and numpy."""
    for step in range(steps):
        x = x * np.float32(1.0001) + np.float32(0.5)
        if contiguous_every and step % contiguous_every == contiguous_every - 1 and isinstance(x, Tensor):
            x = x.contiguous()
    return x


def start_values() -> np.ndarray:
    return np.linspace(-1, 1, 64, dtype=np.float32)


@pytest.mark.parametrize("device", ["CPU", "NPY"])
def test_a_ten_thousand_op_chain_matches_numpy(device):
    stats.reset()
    with shallow_stack():
        result = affine_chain(Tensor(start_values(), device=device), CHAIN_STEPS).numpy()
    np.testing.assert_allclose(result, affine_chain(start_values(), CHAIN_STEPS), rtol=1e-5)
    if device == "CPU":
        assert stats.kernels == 1  # an elementwise chain fuses, however long


@pytest.mark.parametrize("device", ["CPU", "NPY"])
def test_a_ten_thousand_op_chain_stored_every_four_steps_matches_numpy(device):
    stats.reset()
    with shallow_stack():
        result = affine_chain(Tensor(start_values(), device=device), CHAIN_STEPS, contiguous_every=4).numpy()
    np.testing.assert_allclose(result, affine_chain(start_values(), CHAIN_STEPS), rtol=1e-5)
    if device == "CPU":
        assert stats.kernels == CHAIN_STEPS // 4


def test_a_deep_kernel_prints_and_a_deep_graph_draws_without_recursion():
    x = affine_chain(Tensor(start_values()), 1000)
    with shallow_stack():
        (item,) = create_schedule([x.lazydata])
        text = format_ast(item.kernel.ast)
        dot = to_dot([x.lazydata])
        assert repr(item.kernel.ast).startswith("KernelNode(SINK")
    named = [line for line in text.splitlines() if not line.endswith("(see above)")]
    assert len(named) == len(item.kernel.ast.walk())  # each node once, shared ones referred back to
    assert dot.count(" -> ") >= 2000


TENSOR_OPS = {"tanh": lambda v: v.tanh(), "sigmoid": lambda v: v.sigmoid(),
              "row_sum": lambda v: v.sum(axis=1, keepdim=True)}
NUMPY_OPS = {"tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
             "row_sum": lambda v: v.sum(axis=1, keepdims=True)}


def matmul_chain(x, w, layers: int, ops: dict):
    """Each layer a matmul, a tanh and a row sum read back through a broadcast (10,000 nodes at 200)."""
    for _ in range(layers):
        x = ops["tanh"](x @ w)
        x = x - ops["row_sum"](x) * np.float32(0.01)
    return x


def test_a_chain_of_200_matmuls_and_row_sums_plans_three_kernels_a_layer_and_matches_numpy():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 16)).astype(np.float32), (rng.standard_normal((16, 16)) / 4).astype(np.float32)
    with shallow_stack():
        planned = matmul_chain(Tensor(x, device="CPU"), Tensor(w, device="CPU"), 200, TENSOR_OPS)
        assert len(create_schedule([planned.lazydata])) == 3 * 200
        result = matmul_chain(Tensor(x, device="NPY"), Tensor(w, device="NPY"), 200, TENSOR_OPS).numpy()
    np.testing.assert_allclose(result, matmul_chain(x, w, 200, NUMPY_OPS), rtol=1e-4, atol=1e-5)


def recurrence(inputs, weight, state, steps: int, ops: dict):
    """A cell whose state is an elementwise function of the last state: an LSTM's shape."""
    sigmoid, tanh = ops["sigmoid"], ops["tanh"]
    hidden = state
    for step in range(steps):
        gates = inputs[step] @ weight + hidden @ weight
        state = sigmoid(gates) * state + sigmoid(gates * 2) * tanh(gates)
        hidden = sigmoid(gates * 3) * tanh(state)
    return hidden


def test_an_unrolled_recurrence_is_planned_with_kernels_that_do_not_grow_with_the_steps():
    """Each step's state is stored once rather than recomputed from the first step in every later
    step's kernel, which made the kernels, and the time to plan and compile them, grow with the
    square of the steps."""
    rng = np.random.default_rng(1)
    inputs = rng.standard_normal((32, 1, 8)).astype(np.float32)
    weight = (rng.standard_normal((8, 8)) / 3).astype(np.float32)
    state = np.zeros((1, 8), np.float32)

    def largest_kernel(steps):
        hidden = recurrence(Tensor(inputs), Tensor(weight), Tensor(state), steps, TENSOR_OPS)
        return max(len(item.kernel.ast.walk()) for item in create_schedule([hidden.lazydata]))
    assert largest_kernel(32) == largest_kernel(8)
    result = recurrence(Tensor(inputs), Tensor(weight), Tensor(state), 32, TENSOR_OPS).numpy()
    np.testing.assert_allclose(result, recurrence(inputs, weight, state, 32, NUMPY_OPS), rtol=1e-4, atol=1e-5)


def test_a_bias_added_at_every_one_of_300_steps_gets_its_gradient_from_kernels_of_few_buffers():
    """Its gradient sums one value per step; one kernel reading all of them would pass more
    arguments than a device takes (ctypes: 1024, OpenCL: 128 pointers guaranteed)."""
    x = Tensor(np.linspace(-1, 1, 16, dtype=np.float32), requires_grad=True)
    bias = Tensor(np.float32(0.5), requires_grad=True)
    factors = [1.001 if step % 2 else 0.9995 for step in range(300)]
    y = x
    for factor in factors:
        y = y * factor + bias
    y.sum().backward()
    schedule = create_schedule([bias.grad.lazydata])
    assert max(len(item.outputs) + len(item.inputs) for item in schedule) <= MAX_KERNEL_BUFFERS
    after = np.cumprod(np.array(factors[::-1], np.float64))[::-1]  # product of the factors from each step on
    expected = 16 * (after[1:].sum() + 1)  # the bias added at step k is scaled by every later factor
    np.testing.assert_allclose(bias.grad.numpy(), expected, rtol=1e-4)
