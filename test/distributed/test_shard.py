"""Tensor.shard in one process (lazygrad/multi.py): values split over several devices, checked
against numpy on the whole value, gradients against the unsharded tensor's, and data-parallel
training (eager and jitted) against the same training on one device."""
from __future__ import annotations

import contextlib
import io
import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazygrad
import lazygrad.nn.functional as F
from lazygrad import Tensor, dtypes, nn
from lazygrad import jit as jit_module
from lazygrad.jit import JitError, jit
from lazygrad.knobs import Context
from lazygrad.multi import MultiLazyBuffer, split_bounds
from lazygrad.nn import optim

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "ops"))

from ops_helpers import unavailable_reason  # noqa: E402

TWO = ("CPU", "CPU:1")
THREE = ("CPU", "CPU:1", "CPU:2")


def _opencl_pair():
    reason = unavailable_reason("OPENCL")
    return pytest.param(("CPU", "OPENCL"), marks=[pytest.mark.opencl_ops] +
                        ([pytest.mark.skip(reason=f"OPENCL unavailable: {reason}")] if reason else []))


# two CPU instances, three (uneven splits), the NPY reference device beside the CPU, and OPENCL
DEVICE_SETS = [TWO, THREE, ("CPU", "NPY"), _opencl_pair()]


def data(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def shards(tensor: Tensor) -> list[np.ndarray]:
    """Each device's piece, read on its own device."""
    return [Tensor(lb).numpy() for lb in tensor.lazydata.lbs]


# ---- splitting and gathering -------------------------------------------------------------------

@pytest.mark.parametrize("devices", DEVICE_SETS, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_], ids=str)
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_shard_splits_like_array_split_and_gathers_back(devices, dtype, axis):
    a = data((5, 7), dtype)
    x = Tensor(a).shard(devices, axis)
    assert x.device == devices and x.shape == a.shape and x.dtype == dtypes.from_any(dtype)
    expected = [a] * len(devices) if axis is None else np.array_split(a, len(devices), axis=axis)
    for piece, want in zip(shards(x), expected):
        np.testing.assert_array_equal(piece, want)
    np.testing.assert_array_equal(x.numpy(), a)
    for device in devices:
        gathered = x.to(device)
        assert gathered.device == device
        np.testing.assert_array_equal(gathered.numpy(), a)


def test_split_bounds_are_consecutive_and_cover_the_axis():
    assert split_bounds(7, 3) == ((0, 3), (3, 5), (5, 7))
    assert split_bounds(2, 3) == ((0, 1), (1, 2), (2, 2))


def test_zero_dim_empty_and_tiny_tensors_shard():
    scalar = Tensor(3.5).shard(TWO)
    assert scalar.shape == () and scalar.numpy() == 3.5 and (scalar * 2).numpy() == 7.0
    empty = Tensor(np.zeros((0, 3), np.float32)).shard(TWO, 0)
    assert empty.numpy().shape == (0, 3) and empty.sum().numpy() == 0.0
    np.testing.assert_array_equal(empty.sum(0).numpy(), np.zeros(3, np.float32))
    few = Tensor(np.array([1.0, 2.0], np.float32)).shard(THREE, 0)  # one device holds nothing
    assert few.sum().numpy() == 3.0 and few.max().numpy() == 2.0
    np.testing.assert_array_equal((few + 1).numpy(), [2.0, 3.0])


def test_creation_on_several_devices_replicates():
    x = Tensor([[1, 2], [3, 4]], device=TWO)
    assert x.device == TWO and x.lazydata.axis is None
    np.testing.assert_array_equal(x.numpy(), [[1, 2], [3, 4]])
    assert Tensor.zeros(2, 3, device=list(TWO)).device == TWO
    lazygrad.manual_seed(5)
    r = Tensor.rand(4, 3, device=TWO)
    first, second = shards(r)
    np.testing.assert_array_equal(first, second)  # drawn once, copied
    assert Tensor([1.0, 2.0]).to(TWO).device == TWO


# ---- ops on shards ----------------------------------------------------------------------------

@pytest.mark.parametrize("devices", DEVICE_SETS, ids=str)
def test_elementwise_ops_of_differently_split_operands(devices):
    a, b, c = data((6, 4), seed=1), data((6, 4), seed=2), data((4,), seed=3)
    x, y_other_axis, z = Tensor(a).shard(devices, 0), Tensor(b).shard(devices, 1), Tensor(c).shard(devices)
    result = (x * y_other_axis + z).relu() - 2.5
    assert result.lazydata.axis == 0  # the first split operand's split
    np.testing.assert_allclose(result.numpy(), np.maximum(a * b + c, 0) - 2.5, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal((x > y_other_axis).numpy(), a > b)
    np.testing.assert_array_equal((x > 0).where(x, z).numpy(), np.where(a > 0, a, c))
    assert (x.cast(dtypes.int32) + 1).dtype == dtypes.int32


@pytest.mark.parametrize("devices", DEVICE_SETS, ids=str)
@pytest.mark.parametrize("axis", [0, 1])
def test_reduces_over_and_beside_the_split_axis(devices, axis):
    a = data((6, 5), seed=4)
    x = Tensor(a).shard(devices, axis)
    for name in ("sum", "max", "min", "prod", "mean"):
        for dim in (0, 1, None):
            result = getattr(x, name)() if dim is None else getattr(x, name)(dim)
            result = result.values if hasattr(result, "values") else result
            want = getattr(np, name)(a) if dim is None else getattr(np, name)(a, axis=dim)
            np.testing.assert_allclose(result.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=f"{name}({dim})")
            if dim in (axis, None):  # an all-reduce: every device holds the whole result, the same bits
                assert result.lazydata.axis is None
                first, *others = shards(result)
                for other in others:
                    np.testing.assert_array_equal(other, first)
    np.testing.assert_array_equal(x.argmax(axis).numpy(), a.argmax(axis))


@pytest.mark.parametrize("devices", DEVICE_SETS, ids=str)
def test_matmuls_split_along_rows_and_along_the_summed_axis(devices):
    a, w = data((9, 6), seed=5), data((6, 4), seed=6)
    rows = Tensor(a).shard(devices, 0) @ Tensor(w).shard(devices)
    assert rows.lazydata.axis == 0
    np.testing.assert_allclose(rows.numpy(), a @ w, rtol=1e-5, atol=1e-5)
    summed = Tensor(a).shard(devices, 1) @ Tensor(w).shard(devices, 0)  # each device a partial product
    assert summed.lazydata.axis is None
    np.testing.assert_allclose(summed.numpy(), a @ w, rtol=1e-5, atol=1e-5)
    gram = Tensor(a).shard(devices, 0)
    np.testing.assert_allclose((gram.T @ gram).numpy(), a.T @ a, rtol=1e-5, atol=1e-5)


def test_a_gather_by_index_follows_the_index_split():
    table, index = data((10, 3), seed=7), np.array([[9, 0], [3, 3], [1, 8]])
    rows = Tensor(table).shard(TWO)[Tensor(index).shard(TWO, 0)]
    np.testing.assert_array_equal(rows.numpy(), table[index])
    embedded = nn.Embedding(10, 3)
    with lazygrad.no_grad():
        embedded.weight.assign(Tensor(table)).realize()
    embedded.weight.shard_(TWO)
    np.testing.assert_array_equal(embedded(Tensor(index).shard(TWO, 0)).numpy(), table[index])


_MOVES = st.sampled_from(["permute", "flip", "shrink", "pad", "reshape_flat", "reshape_back", "expand"])


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=3), axis=st.integers(0, 2),
       count=st.integers(2, 3), moves=st.lists(_MOVES, min_size=1, max_size=4), seed=st.integers(0, 2**16))
def test_random_views_of_a_split_value_match_numpy(shape, axis, count, moves, seed):
    """Views that keep the split, move it to another axis, cut or flip the shards' ranges, or cut
    across them (then gathered), chained at random, then a sum over the first axis."""
    rng = np.random.default_rng(seed)
    a = data(tuple(shape), seed=seed)
    x = Tensor(a).shard(("CPU", "CPU:1", "CPU:2")[:count], min(axis, len(shape) - 1))
    original = a.shape
    for move in moves:
        if move == "permute":
            order = tuple(rng.permutation(a.ndim))
            a, x = a.transpose(order), x.permute(order)
        elif move == "flip":
            dim = int(rng.integers(a.ndim))
            a, x = np.flip(a, dim), x.flip(dim)
        elif move == "shrink":
            bounds = [tuple(sorted(rng.integers(0, size + 1, 2))) for size in a.shape]
            a = a[tuple(slice(low, high) for low, high in bounds)]
            x = x.shrink(tuple(bounds))
        elif move == "pad":
            padding = [tuple(rng.integers(0, 2, 2)) for _ in a.shape]
            a, x = np.pad(a, padding), x.pad(tuple(padding))
        elif move == "reshape_flat":
            a, x = a.reshape(-1), x.reshape(-1)
        elif move == "reshape_back" and a.size == np.prod(original):
            a, x = a.reshape(original), x.reshape(original)
        elif move == "expand":
            a, x = np.broadcast_to(a[None], (2,) + a.shape), x.unsqueeze(0).expand((2,) + a.shape)
    np.testing.assert_allclose(x.numpy(), a, rtol=1e-6)
    if a.ndim:
        np.testing.assert_allclose(x.sum(0).numpy(), a.sum(0), rtol=1e-5, atol=1e-5)


def test_a_reshape_that_keeps_the_split_moves_no_data():
    x = Tensor(data((4, 6))).shard(TWO, 0)
    flat = x.reshape(4 * 6)
    assert flat.lazydata.axis == 0 and flat.lazydata.bounds == ((0, 12), (12, 24))
    split_rows = Tensor(data((4, 6))).shard(TWO, 1).reshape(4, 2, 3)  # columns 0-2 and 3-5
    assert split_rows.lazydata.axis == 1 and split_rows.lazydata.bounds == ((0, 1), (1, 2))
    crossing = Tensor(data((4, 6))).shard(TWO, 1).reshape(24)  # a column is no range of the flat axis
    assert crossing.lazydata.axis is None


# ---- gradients and training -------------------------------------------------------------------

def test_gradients_through_a_split_match_the_unsharded_ones():
    a, w = data((8, 5), np.float64, seed=8), data((5, 3), np.float64, seed=9)

    def loss(shard: bool):
        x, weight = Tensor(a, requires_grad=True), Tensor(w, requires_grad=True)
        xs, ws = (x.shard(THREE, 0), weight.shard(THREE)) if shard else (x, weight)
        ((xs @ ws).tanh() * (xs @ ws)).sum().backward()
        return x.grad.numpy(), weight.grad.numpy()

    for sharded, plain in zip(loss(True), loss(False)):
        np.testing.assert_allclose(sharded, plain, rtol=1e-12, atol=1e-12)


class SmallNet(nn.Module):
    def __init__(self):
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(4)
        self.head = nn.Linear(4 * 4 * 4, 5)

    def __call__(self, x):
        return self.head(F.max_pool2d(self.norm(self.conv(x)).relu(), 2).flatten(1))


def _train(devices, steps: int, jitted: bool):
    lazygrad.manual_seed(0)
    net = SmallNet()
    if devices:
        for tensor in nn.state.get_state_dict(net).values():
            tensor.shard_(devices)
    optimizer = optim.SGD(nn.state.get_parameters(net), lr=0.1, momentum=0.9)

    def step(x, y):
        if devices:
            x, y = x.shard(devices, 0), y.shard(devices, 0)
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss.to("CPU") if devices else loss

    run = jit(step) if jitted else step
    rng = np.random.default_rng(3)
    losses = [run(Tensor(data((6, 1, 8, 8), seed=10 + i)), Tensor(rng.integers(0, 5, 6))).item() for i in range(steps)]
    return net, losses, run


@pytest.mark.parametrize("devices", DEVICE_SETS, ids=str)
def test_data_parallel_training_gives_the_unsharded_parameters(devices):
    """A split batch with replicated parameters: the batch norm's statistics and every weight's
    gradient sum over the split axis, so each step is the one-device step, and every device's copy
    of each parameter stays the same."""
    plain, plain_losses, _ = _train(None, 3, jitted=False)
    sharded, sharded_losses, _ = _train(devices, 3, jitted=False)
    np.testing.assert_allclose(sharded_losses, plain_losses, rtol=1e-5)
    expected = nn.state.get_state_dict(plain)
    for name, tensor in nn.state.get_state_dict(sharded).items():
        assert tensor.device == devices
        first, *others = shards(tensor)
        np.testing.assert_allclose(first, expected[name].numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
        for other in others:
            np.testing.assert_allclose(other, first, rtol=1e-6, atol=1e-7, err_msg=name)


def test_the_jit_captures_a_sharded_training_step():
    plain, plain_losses, _ = _train(None, 5, jitted=True)
    sharded, sharded_losses, run = _train(TWO, 5, jitted=True)
    assert run.replay is not None and run.calls == 5  # the last three calls replayed
    copies = [step for step in run.replay.steps if step[0] is jit_module._copy]
    assert copies  # the batch's split and the gradients' all-reduce, replayed with the kernels
    np.testing.assert_allclose(sharded_losses, plain_losses, rtol=1e-5)
    expected = nn.state.get_state_dict(plain)
    for name, tensor in nn.state.get_state_dict(sharded).items():
        for piece in shards(tensor):
            np.testing.assert_allclose(piece, expected[name].numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_the_jit_takes_sharded_arguments_shard_by_shard():
    """A batch sharded outside the jitted function: each shard's buffer is an argument of the replay;
    a call with another split raises, naming both."""
    w = Tensor(data((6, 3), seed=2)).shard(TWO).realize()
    step = jit(lambda x: (x @ w).relu().sum(0).to("CPU"))
    for number in range(4):
        values = data((8, 6), seed=20 + number)
        np.testing.assert_allclose(step(Tensor(values).shard(TWO, 0)).numpy(),
                                   np.maximum(values @ w.numpy(), 0).sum(0), rtol=1e-5, atol=1e-5)
    assert step.replay is not None and step.calls == 4
    with pytest.raises(JitError, match=r"split along dim 1 .* split along dim 0"):
        step(Tensor(data((8, 6))).shard(TWO, 1))


def test_jit_refuses_sharded_outputs():
    gives_sharded = jit(lambda t: t.shard(TWO, 0) + 1)
    gives_sharded(Tensor(data((4, 2))))  # the first call runs plainly, the second captures
    with pytest.raises(JitError, match=r"output 0 is sharded.*\.to\('CPU'\)"):
        gives_sharded(Tensor(data((4, 2))))


def test_each_shard_kernel_and_copy_shows_its_device_under_debug():
    x = Tensor(data((8, 4))).shard(TWO, 0).realize()
    captured = io.StringIO()
    with Context(DEBUG=2), contextlib.redirect_stderr(captured):
        x.exp().sum().numpy()
    text = captured.getvalue()
    assert "on CPU:1 " in text and "copy CPU:1 -> CPU" in text


def test_assign_writes_every_shard_in_place():
    x = Tensor(np.zeros((4, 3), np.float32)).shard(TWO, 0).realize()
    buffers = [lb.buffer for lb in x.lazydata.lbs]
    x.assign(Tensor(np.arange(12, dtype=np.float32).reshape(4, 3)).shard(TWO)).realize()  # split on arrival
    assert [lb.buffer for lb in x.lazydata.lbs] == buffers
    np.testing.assert_array_equal(x.numpy(), np.arange(12).reshape(4, 3))


def test_errors_name_the_op_and_the_fix():
    x = Tensor(data((4, 3)))
    with pytest.raises(ValueError, match="each once"):
        x.shard(("CPU", "cpu"))
    with pytest.raises(ValueError, match="unknown device"):
        x.shard(("CPU", "TPU"))
    with pytest.raises(TypeError, match="tuple of device names"):
        x.shard("CPU")
    with pytest.raises((ValueError, IndexError), match="shard"):
        x.shard(TWO, 2)
    with pytest.raises(ValueError, match="different devices"):
        x.shard(TWO, 0) + x
    with pytest.raises(RuntimeError, match="shard_: only a leaf"):
        (Tensor(data((4, 3)), requires_grad=True) * 2).shard_(TWO)
    assert isinstance(x.shard(TWO).lazydata, MultiLazyBuffer)
