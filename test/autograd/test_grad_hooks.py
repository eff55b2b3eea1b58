"""Tensor.register_post_accumulate_grad_hook: called once per backward, after the leaf's .grad holds
its whole gradient (as PyTorch's), only for leaves that got one."""
import numpy as np
import pytest

from lazygrad import Tensor


def test_hook_sees_the_whole_gradient_once_per_backward():
    w = Tensor([1.0, 2.0, 3.0]).requires_grad_()
    seen = []
    w.register_post_accumulate_grad_hook(lambda leaf: seen.append(leaf.grad.numpy().copy()))
    ((w * 2).sum() + (w * w).sum()).backward()  # two paths into w: one call, after both are added
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], 2 + 2 * np.array([1.0, 2.0, 3.0]))
    (w * 3).sum().backward()  # accumulates, as .grad does
    assert len(seen) == 2
    np.testing.assert_allclose(seen[1], 5 + 2 * np.array([1.0, 2.0, 3.0]))


def test_hooks_run_in_order_and_only_for_leaves_with_a_gradient():
    a, b = Tensor([1.0]).requires_grad_(), Tensor([2.0]).requires_grad_()
    calls = []
    a.register_post_accumulate_grad_hook(lambda leaf: calls.append("a1"))
    a.register_post_accumulate_grad_hook(lambda leaf: calls.append("a2"))
    b.register_post_accumulate_grad_hook(lambda leaf: calls.append("b"))
    (a * 4).sum().backward()
    assert calls == ["a1", "a2"]


def test_hooks_only_on_leaves_that_require_grad():
    with pytest.raises(RuntimeError, match="only a leaf tensor that requires grad"):
        Tensor([1.0]).register_post_accumulate_grad_hook(print)
    leaf = Tensor([1.0]).requires_grad_()
    with pytest.raises(RuntimeError, match="only a leaf tensor"):
        (leaf * 2).register_post_accumulate_grad_hook(print)
