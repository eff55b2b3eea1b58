"""The schedule memo (schedule/fuse.py): a graph of the same structure as one scheduled before reuses
its schedule without planning, and anything that changes the schedule changes the key.

Each test realizes a first graph, then one that differs in a single respect, and checks both the
values and how many times `_plan_schedule` ran: a key that missed the difference would plan once
and, in the tests where the difference matters, give a wrong value."""
import math

import numpy as np
import pytest

from lazygrad import Tensor
from lazygrad.lazy import LazyBuffer, walk
from lazygrad.schedule import fuse


@pytest.fixture
def plans(monkeypatch):
    """Counts the schedules planned (cache misses), from an empty memo."""
    monkeypatch.setattr(fuse, "_SCHEDULES", {})
    counter = {"plans": 0}
    plan = fuse._plan_schedule

    def counting(outputs, nodes):
        counter["plans"] += 1
        return plan(outputs, nodes)
    monkeypatch.setattr(fuse, "_plan_schedule", counting)
    return counter


def test_a_loop_realizing_the_same_op_plans_once(plans):
    x = Tensor(np.arange(16, dtype=np.float32))
    for step in range(5):
        np.testing.assert_array_equal((x + 1).numpy(), np.arange(16) + 1)
    assert plans["plans"] == 1


def test_a_changed_constant_is_planned_again(plans):
    x = Tensor(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal((x + 1).numpy(), np.arange(4) + 1)
    np.testing.assert_array_equal((x + 2).numpy(), np.arange(4) + 2)
    np.testing.assert_array_equal((x * 0.0).numpy(), np.zeros(4))
    assert math.copysign(1, (x * -0.0).numpy()[1]) == -1  # -0.0 is not 0.0
    assert plans["plans"] == 4


def test_a_changed_shape_or_dtype_is_planned_again(plans):
    values = np.arange(6, dtype=np.float32)
    (Tensor(values) + 1).realize()
    np.testing.assert_array_equal((Tensor(values.reshape(2, 3)) + 1).numpy(), values.reshape(2, 3) + 1)
    np.testing.assert_array_equal((Tensor(values[:4]) + 1).numpy(), values[:4] + 1)
    np.testing.assert_array_equal((Tensor(values.astype(np.int32)) + 1).numpy(), values.astype(np.int32) + 1)
    assert plans["plans"] == 4


def test_a_source_realized_since_is_planned_again(plans):
    x = Tensor(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(((x * 2) + 1).numpy(), np.arange(4) * 2 + 1)
    doubled = (x * 2).realize()  # a graph of its own: the second plan
    np.testing.assert_array_equal((doubled + 1).numpy(), np.arange(4) * 2 + 1)
    assert plans["plans"] == 3


def test_buffers_shared_by_two_nodes_are_part_of_the_key(plans):
    """An assign writes in place only when it reads its target at the element it writes; a node that
    holds the target's buffer under another name must count as the target."""
    start = np.arange(4, dtype=np.float32)
    target, other = Tensor(start.copy()), Tensor(start.copy())
    target.assign(other.flip(0) + 0).realize()  # a distinct buffer: written in place
    np.testing.assert_array_equal(target.numpy(), start[::-1])

    target = Tensor(start.copy())
    alias = Tensor(LazyBuffer.from_buffer(target.lazydata.buffer, target.shape))
    target.assign(alias.flip(0) + 0).realize()  # the same buffer read backwards: not in place
    np.testing.assert_array_equal(target.numpy(), start[::-1])
    assert plans["plans"] == 2


def test_walk_with_structure_walks_in_walks_order():
    x = Tensor(np.ones((3, 4), dtype=np.float32))
    y = Tensor(np.ones(4, dtype=np.float32))
    graphs = [[(x + 1).lazydata], [((x * y).sum(1) + x.amax(1)).exp().lazydata],
              [(x + y).lazydata, (x + y).relu().lazydata, x.lazydata], [(x @ x.T).softmax(1).lazydata]]
    for outputs in graphs:
        nodes, _ = fuse.walk_with_structure(outputs)
        assert nodes == walk(outputs)


def test_a_constant_whose_nodes_were_realized_since_is_planned_again(plans):
    """x + 1 places its broadcast constant as one entry; once a node of it is realized (the RESHAPE
    it shares with the constants of shape (1,)), the graph has a buffer there and is another one."""
    x = Tensor(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal((Tensor(np.arange(4, dtype=np.float32)) + 1).numpy(), np.arange(4) + 1)
    assert plans["plans"] == 1
    pending = x + 1  # the same structure, holding the constant's CONST, RESHAPE and EXPAND
    one = Tensor.full((1,), 1.0).realize()  # realizes the shared RESHAPE: a graph of its own
    assert plans["plans"] == 2
    np.testing.assert_array_equal(pending.numpy(), np.arange(4) + 1)
    assert plans["plans"] == 3
    one.assign(Tensor([5.0])).realize()  # new constants do not read the overwritten buffer
    np.testing.assert_array_equal((x + 1).numpy(), np.arange(4) + 1)


def test_a_cold_realize_walks_the_graph_once(plans, monkeypatch):
    """A graph never scheduled before is walked once (for its structure, which the memo looks up
    and the plan then reuses), not once for the memo, once for copies and once to plan."""
    import lazygrad.lazy as lazy
    import lazygrad.realize as realize
    walks = []
    structure = fuse.walk_with_structure
    plain = lazy.walk
    monkeypatch.setattr(fuse, "walk_with_structure", lambda outputs: walks.append("structure") or structure(outputs))
    monkeypatch.setattr(realize, "walk_with_structure", fuse.walk_with_structure, raising=False)
    monkeypatch.setattr(realize, "walk", lambda outputs: walks.append("walk") or plain(outputs))
    x = Tensor(np.arange(6, dtype=np.float32) / 7).realize()
    np.testing.assert_allclose((x.exp() * 3.25).sum().numpy(), (np.exp(np.arange(6) / 7) * 3.25).sum(), rtol=1e-6)
    assert plans["plans"] == 1 and walks == ["structure"]
