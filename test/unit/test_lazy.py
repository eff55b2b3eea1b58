"""The lazy graph: nothing runs before a value is needed, nodes are shared, old graphs are freed."""
import gc
import weakref

import numpy as np
import pytest

from lazygrad import Tensor, stats
from lazygrad.lazy import LazyBuffer
from lazygrad.ops import Ops


def test_building_ops_runs_nothing():
    x = Tensor(np.ones((4, 4), dtype=np.float32))
    stats.reset()
    y = ((x * 2 + 1).exp().sum(0) @ x).relu()
    assert stats.kernels == 0 and not y.lazydata.realized
    y.numpy()
    assert stats.kernels > 0


def test_identical_ops_on_identical_sources_are_one_node():
    x = Tensor(np.ones(3, dtype=np.float32))
    assert (x * 2 + 1).lazydata is (x * 2 + 1).lazydata
    assert (x * 2).lazydata is not (x * 3).lazydata


def test_permutes_of_a_permute_are_one_permute_or_none():
    x = Tensor(np.zeros((2, 3, 4), np.float32))
    assert x.T.T.lazydata is x.lazydata
    twice = x.permute(1, 2, 0).permute(1, 2, 0)
    assert twice.lazydata.op is Ops.PERMUTE and twice.lazydata.srcs[0] is x.lazydata and twice.shape == (4, 2, 3)


def test_a_realized_tensor_keeps_its_buffer_and_drops_its_graph():
    x = Tensor(np.ones(3, dtype=np.float32))
    intermediate = x * 2
    watcher = weakref.ref(intermediate.lazydata)
    y = intermediate + 1
    del intermediate
    y.realize()
    gc.collect()
    assert watcher() is None
    assert y.lazydata.op is Ops.BUFFER and y.lazydata.srcs == ()
    np.testing.assert_array_equal(y.numpy(), [3, 3, 3])


def test_realize_returns_the_tensor_so_calls_chain():
    x = Tensor([1.0, 2.0])
    assert x.realize() is x
    assert (x + 1).realize().tolist() == [2.0, 3.0]


def test_constants_take_no_memory_until_used():
    full = Tensor.full((1000, 1000), 3.0)
    assert full.lazydata.op is Ops.EXPAND
    node = full.lazydata
    while node.srcs:
        node = node.srcs[0]
    assert node.op is Ops.CONST and node.shape == ()


def test_movement_ops_are_nodes_not_copies():
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    stats.reset()
    view = x.T.reshape(6)[::2].flip(0)
    assert stats.kernels == 0
    assert isinstance(view.lazydata, LazyBuffer) and view.lazydata.op in (Ops.FLIP, Ops.RESHAPE, Ops.SHRINK)
    np.testing.assert_array_equal(view.numpy(), np.arange(6).reshape(2, 3).T.reshape(6)[::2][::-1])


def test_a_node_takes_its_entry_of_the_sharing_table_with_it():
    """Dead nodes leave no entries behind to outlive them (the garbage collector would see the table
    grow), whether their count reaches zero or a collection of a cycle frees them; a live node's
    entry stays, so the same op on the same sources is still that node."""
    import lazygrad.lazy as lazy
    x = Tensor(np.ones(4, dtype=np.float32)).realize()
    kept = x * 5
    (((x + 1) * 2).exp() - x).sum()  # its constants 1 and 2 are kept (lazy._CONSTANTS), with their entries
    before = len(lazy._CONSED)
    for _ in range(50):
        (((x + 1) * 2).exp() - x).sum()
    assert len(lazy._CONSED) == before

    class Holder:  # a cycle: freed by the collector, which clears weak references before finalizers run
        pass
    holder = Holder()
    (x * 3).exp()  # the constant 3, kept
    before = len(lazy._CONSED)
    holder.itself, holder.value = holder, (x * 3).exp().sqrt()
    assert len(lazy._CONSED) > before
    del holder
    gc.collect()
    assert len(lazy._CONSED) == before
    assert (x * 5).lazydata is kept.lazydata


def test_a_node_costs_the_garbage_collector_four_objects():
    """What lives as long as a lazy node and the collector tracks: the node, its sources, its sharing
    key and that key's weak reference; the description inside the key (argument, dtype, shape,
    device) is one tuple shared by equal nodes, so an eager step's graph costs fewer collections."""
    import lazygrad
    x = Tensor(np.ones((4, 4), dtype=np.float32)).realize()
    with lazygrad.no_grad():
        y = x * 1.5 + x  # the constant's nodes, shared by every step of the loop, made before counting
        gc.collect()
        before = len(gc.get_objects())
        for _ in range(500):
            y = y * 1.5 + x
        gc.collect()
        per_node = (len(gc.get_objects()) - before) / 1000
    assert per_node <= 4.01, per_node


def test_an_unhashable_argument_names_the_op():
    from lazygrad.dtype import dtypes
    with pytest.raises(TypeError, match="RESHAPE: argument .* must be hashable"):
        LazyBuffer.create(Ops.RESHAPE, (), [1, 2], dtypes.float32, (1, 2), "CPU")


def test_a_node_whose_construction_failed_goes_quietly(monkeypatch):
    """A node's __del__ runs even when its __init__ raised: it must not raise in turn (which Python
    would print as an ignored exception)."""
    import sys
    from lazygrad.dtype import dtypes
    raised = []
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    try:
        LazyBuffer("ADD", (), None, dtypes.float32, (1,), "CPU")  # an op's name, not its OpDef
    except AssertionError:
        pass
    gc.collect()
    assert raised == []
