"""Graphs thousands of nodes deep: built, scheduled and run with the recursion limit cut to just above
the test's own stack (no walk keeps a frame per node)."""
import numpy as np
import pytest

from lazygrad import Tensor, stats
from lazygrad.graph import to_dot
from lazygrad.schedule.fuse import create_schedule
from lazygrad.schedule.kernel import format_ast
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
