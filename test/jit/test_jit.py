"""lazygrad.jit: replays give what plain calls give, run no scheduler, and refuse what they cannot replay."""
import gc
import weakref

import numpy as np
import pytest

import lazygrad
from lazygrad import Tensor, nn, stats
from lazygrad.jit import JitError, jit
from lazygrad.lazy import LazyBuffer, StaleValueError
from lazygrad.nn import functional as F
from lazygrad.nn.optim import SGD, Adam
from lazygrad.nn.state import get_parameters
from recursion_limit import shallow_stack

rng = np.random.default_rng(3)


def arrays(count, shape=(4, 5)):
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]


def test_replay_matches_plain_calls_without_scheduling(monkeypatch, compiled_device):
    @jit
    def f(x, y):
        return (x * y + 1).sum(1), x.exp()
    xs, ys = arrays(5), arrays(5)
    for call, (x, y) in enumerate(zip(xs, ys)):
        if call == 2:  # from here on the calls are replays: nothing may be scheduled
            monkeypatch.setattr("lazygrad.realize.create_schedule", lambda *a: pytest.fail("scheduled on a replay"))
            monkeypatch.setattr("lazygrad.realize.memoized_schedule", lambda *a: pytest.fail("scheduled on a replay"))
            stats.reset()
        total, exponential = f(Tensor(x, device=compiled_device), Tensor(y, device=compiled_device))
        np.testing.assert_allclose(total.numpy(), (x * y + 1).sum(1), rtol=1e-5)
        np.testing.assert_allclose(exponential.numpy(), np.exp(x), rtol=1e-5)
    assert stats.kernels == 3 * 2


def test_outputs_of_a_replay_are_fresh():
    @jit
    def f(x):
        return x * 2
    results = [f(Tensor(x)) for x in arrays(4)]
    values = [result.numpy() for result in results]
    assert len({result.lazydata.buffer for result in results}) == 4
    assert not np.array_equal(values[2], values[3])


def test_changed_arguments_raise_and_say_what_changed():
    @jit
    def f(x, scale):
        return x * scale
    for _ in range(3):
        f(Tensor(arrays(1)[0]), 2.0)
    with pytest.raises(JitError, match=r"argument 0 .*shape \(3, 5\).*capture had shape \(4, 5\)"):
        f(Tensor(arrays(1, (3, 5))[0]), 2.0)
    with pytest.raises(JitError, match=r"int32.*float32"):
        f(Tensor(np.zeros((4, 5), np.int32)), 2.0)
    with pytest.raises(JitError, match=r"argument 1 is 3.0; the capture had 2.0"):
        f(Tensor(arrays(1)[0]), 3.0)
    f.reset()
    np.testing.assert_allclose(f(Tensor(np.ones((3, 5), np.float32)), 3.0).numpy(), 3.0)


def test_returning_an_argument_raises():
    @jit
    def f(x):
        return x
    f(Tensor(arrays(1)[0]))
    with pytest.raises(JitError, match="aliases an output"):
        f(Tensor(arrays(1)[0]))


def test_state_given_a_new_buffer_instead_of_assigned_raises():
    weight = Tensor(arrays(1)[0])

    @jit
    def f(x):
        weight.lazydata = (weight - 0.1 * x).realize().lazydata
        return (weight * 1).sum()
    f(Tensor(arrays(1)[0]))
    with pytest.raises(JitError, match="assign"):
        f(Tensor(arrays(1)[0]))


def test_assigned_state_is_updated_by_every_replay(compiled_device):
    counter = Tensor(np.zeros(3, np.float32), device=compiled_device).realize()

    @jit
    def f(x):
        counter.assign(counter + x)
        return counter.sum() * 1
    for _ in range(6):
        total = f(Tensor(np.ones(3, np.float32), device=compiled_device))
    np.testing.assert_array_equal(counter.numpy(), np.full(3, 6.0))
    assert total.item() == 18.0


def test_a_launch_computed_from_state_alone_runs_again_only_when_the_state_changes(compiled_device):
    """A copy of a parameter (here a transposed weight, as nn.Linear reads it) does not change
    between replays: a replay skips it until the parameter is written, then computes it again."""
    weight = Tensor(rng.standard_normal((16, 12)).astype(np.float32), device=compiled_device).realize()

    @jit
    def f(x):
        return x @ weight.T.contiguous() + 1
    x = Tensor(rng.standard_normal((8, 12)).astype(np.float32), device=compiled_device).realize()
    for _ in range(3):
        f(x).realize()
    stats.reset()
    np.testing.assert_allclose(f(x).numpy(), x.numpy() @ weight.numpy().T + 1, rtol=1e-5, atol=1e-5)
    assert stats.kernels == 1  # the matmul; the copy of the weight was skipped
    weight.assign(weight * 2).realize()
    stats.reset()
    np.testing.assert_allclose(f(x).numpy(), x.numpy() @ weight.numpy().T + 1, rtol=1e-5, atol=1e-5)
    assert stats.kernels == 2  # the weight changed: copied again
    stats.reset()
    f(x).realize()
    assert stats.kernels == 1


def test_a_capture_shares_what_eager_calls_kept_and_its_first_replay_skips_it(compiled_device):
    """The weight's copy that plain calls keep (derived_values) is recorded by the capture as the
    launch that made it, its buffer shared rather than computed again into a second one, and the
    first replay already skips it; a write to the weight still makes a replay copy it again."""
    weight = Tensor(rng.standard_normal((16, 12)).astype(np.float32), device=compiled_device).realize()

    def f(x):
        return x @ weight.T.contiguous() + 1
    x = Tensor(rng.standard_normal((8, 12)).astype(np.float32), device=compiled_device).realize()
    f(x).realize()  # a plain call keeps the copy
    g = jit(f)
    g(x).realize()
    counts = []
    for _ in range(3):  # the capture, the first replay, another
        stats.reset()
        np.testing.assert_allclose(g(x).numpy(), x.numpy() @ weight.numpy().T + 1, rtol=1e-5, atol=1e-5)
        counts.append(stats.kernels)
    assert counts == [1, 1, 1]  # the matmul alone
    weight.assign(weight * 2).realize()
    stats.reset()
    np.testing.assert_allclose(g(x).numpy(), x.numpy() @ weight.numpy().T + 1, rtol=1e-5, atol=1e-5)
    assert stats.kernels == 2


def test_a_batch_norms_per_channel_values_are_computed_once_while_its_statistics_hold(compiled_device):
    """An eval-mode batch norm's scale and shift, stored by the scheduler as values of its
    parameters alone, are skipped by a replay like any launch computed from state alone."""
    from lazygrad.nn import functional as F
    mean, var, weight, bias = (Tensor(rng.uniform(0.5, 2, 4).astype(np.float32), device=compiled_device).realize()
                               for _ in range(4))
    x = Tensor(rng.standard_normal((2, 4, 3, 3)).astype(np.float32), device=compiled_device).realize()
    f = jit(lambda x: F.batch_norm(x, mean, var, weight, bias))
    for _ in range(3):
        f(x).realize()
    stats.reset()
    channel = (1, 4, 1, 1)
    expected = (x.numpy() - mean.numpy().reshape(channel)) / np.sqrt(var.numpy().reshape(channel) + 1e-5) \
        * weight.numpy().reshape(channel) + bias.numpy().reshape(channel)
    np.testing.assert_allclose(f(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    assert stats.kernels == 1  # the normalization; scale and shift were skipped
    var.assign(var * 2).realize()
    stats.reset()
    f(x).realize()
    assert stats.kernels == 2


def test_a_function_indexing_with_a_boolean_mask_runs_plainly_on_every_call(compiled_device):
    """The mask's data decides the result's shape: a replay would repeat the capture's positions."""
    @jit
    def f(x):
        return x[x > 0] * 2
    for values in arrays(4, (6,)):
        np.testing.assert_allclose(f(Tensor(values, device=compiled_device)).numpy(), values[values > 0] * 2)
    assert f.replay is None and "boolean mask index" in f.not_replayable


def test_a_value_built_before_a_replay_from_state_it_rewrites_raises(compiled_device):
    """As after an eager step: the replay's in-place write makes older lazy values stale, while the
    state tensor itself (and one read after the replay) sees the new contents."""
    counter = Tensor(np.zeros(3, np.float32), device=compiled_device).realize()
    step = Tensor(np.ones(3, np.float32), device=compiled_device)

    @jit
    def f(x):
        counter.assign(counter + x)
        return counter.sum() * 1
    for _ in range(3):
        f(step)
    before = counter * 10  # lazy, reads the contents after 3 calls
    f(step)                # a replay
    with pytest.raises(StaleValueError):
        before.numpy()
    np.testing.assert_array_equal(counter.numpy(), np.full(3, 4.0))
    np.testing.assert_array_equal((counter * 10).numpy(), np.full(3, 40.0))


def make_model():
    lazygrad.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 3))


@pytest.mark.parametrize("make_optimizer", [lambda p: SGD(p, lr=0.1, momentum=0.9), lambda p: Adam(p, lr=1e-2)],
                         ids=["sgd_momentum", "adam"])
def test_jitted_training_equals_the_plain_loop_bit_for_bit(make_optimizer):
    """Forward, backward, dropout and an in-place optimizer step, with a learning rate changed
    between steps: the jitted loop ends with exactly the plain loop's parameters."""
    batches = [(rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 3, 8)) for _ in range(6)]

    def train(use_jit):
        model = make_model()
        model.train()
        optimizer = make_optimizer(get_parameters(model))

        def step(x, y):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            return loss
        step = jit(step) if use_jit else step
        lazygrad.manual_seed(1)
        losses = []
        for index, (x, y) in enumerate(batches):
            losses.append(step(Tensor(x), Tensor(y)).item())
            optimizer.lr = optimizer.lr * 0.9
        return [p.numpy() for p in get_parameters(model)], losses, optimizer.steps
    plain, jitted = train(False), train(True)
    for a, b in zip(plain[0], jitted[0]):
        np.testing.assert_array_equal(a, b)
    assert plain[1] == jitted[1]
    assert plain[2] == jitted[2] == len(batches)


def test_dropout_draws_new_numbers_on_every_replay():
    @jit
    def f(x):
        return F.dropout(x, 0.5, training=True)
    masks = [f(Tensor(np.ones((64,), np.float32))).numpy() != 0 for _ in range(5)]
    assert all(not np.array_equal(masks[i], masks[i + 1]) for i in range(4))


def test_a_device_without_kernels_runs_the_function_each_time():
    @jit
    def f(x):
        return x + 1
    for x in arrays(4):
        np.testing.assert_allclose(f(Tensor(x, device="NPY")).numpy(), x + 1)
    assert f.not_replayable is not None and "NPY" in f.not_replayable


def test_batch_norm_statistics_follow_the_plain_loop():
    """BatchNorm writes its running statistics and counter with assign: replays update them."""
    batches = [rng.standard_normal((8, 3)).astype(np.float32) for _ in range(5)]

    def run(use_jit, momentum):
        norm = nn.BatchNorm1d(3, momentum=momentum)

        def forward(x):
            return norm(x) * 1
        forward = jit(forward) if use_jit else forward
        for x in batches:
            forward(Tensor(x))
        Tensor.realize(norm.running_mean, norm.running_var)
        return norm.running_mean.numpy(), norm.running_var.numpy(), norm.num_batches_tracked.item()
    for momentum in (0.1, None):
        plain, jitted = run(False, momentum), run(True, momentum)
        np.testing.assert_array_equal(plain[0], jitted[0])
        np.testing.assert_array_equal(plain[1], jitted[1])
        assert plain[2] == jitted[2] == len(batches)


def test_a_training_step_whose_batch_norm_reads_a_layer_the_step_updates_replays_the_plain_loop():
    """The second batch norm's running statistics are updated after the optimizer step has written the
    first layer's weights in place: its batch variance must be the one computed in the forward pass
    (F.batch_norm stores it), not computed again from the updated weights."""
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 5, 4)

    def run(use_jit):
        lazygrad.manual_seed(0)
        convs = [nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)]
        norms, head = [nn.BatchNorm2d(8), nn.BatchNorm2d(8)], nn.Linear(8, 5)
        optimizer = SGD(get_parameters([convs, norms, head]), lr=0.1, momentum=0.9)

        def step(images, targets):
            optimizer.zero_grad()
            hidden = norms[0](convs[0](images)).relu()
            hidden = norms[1](convs[1](hidden)).relu() + hidden
            loss = F.cross_entropy(head(hidden.mean((2, 3))), targets)
            loss.backward()
            optimizer.step()
            return loss
        step = jit(step) if use_jit else step
        losses = [step(Tensor(x), Tensor(labels)).item() for _ in range(4)]
        return losses, norms[1].running_var.numpy()
    (plain_losses, plain_var), (jit_losses, jit_var) = run(False), run(True)
    np.testing.assert_allclose(jit_losses, plain_losses, rtol=1e-5)
    np.testing.assert_allclose(jit_var, plain_var, rtol=1e-5)


def test_eager_and_jitted_steps_of_one_batch_norm_model_take_turns_as_a_plain_loop():
    """A training loop that alternates a jitted step with an eager one (the same model and optimizer):
    the eager step leaves its batch norm's running statistics pending (an assign reading the
    statistic's own buffer), which the next replay also writes; the replay runs them first, as a
    plain call does. It left them pending, and the next eager step's batch norm read a buffer
    overwritten since (StaleValueError). Parameters and statistics equal eager steps alone."""
    batches = [rng.standard_normal((4, 3, 8, 8)).astype(np.float32) for _ in range(6)]
    labels = Tensor(rng.integers(0, 2, 4))

    def run(alternate):
        lazygrad.manual_seed(1)
        conv, norm, head = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Linear(8, 2)
        optimizer = SGD(get_parameters([conv, norm, head]), lr=0.1, momentum=0.9)

        def step(images, targets):
            optimizer.zero_grad()
            loss = F.cross_entropy(head(norm(conv(images)).relu().mean((2, 3))), targets)
            loss.backward()
            optimizer.step()
            return loss
        jitted = jit(step)
        for number, batch in enumerate(batches):
            (jitted if alternate and number % 2 else step)(Tensor(batch), labels).item()
        return [tensor.numpy() for tensor in (conv.weight, head.weight, norm.running_mean, norm.running_var)]
    for alternating, plain in zip(run(True), run(False)):
        np.testing.assert_allclose(alternating, plain, rtol=1e-5, atol=1e-6)


def test_an_eager_batch_norm_training_loop_plans_its_schedules_once(monkeypatch):
    """An eager training step leaves each batch norm's running statistics pending; the next step's
    optimizer update (replayed through a jit) realizes them together first. In the order they were
    made they are the same graph every step, whose schedule is remembered: held in a set, their order
    followed their addresses, and MobileNetV2's 156 were planned anew every step (16-25 ms of a 250 ms
    step)."""
    from lazygrad.schedule import fuse
    lazygrad.manual_seed(2)
    layers = [nn.Conv2d(3, 8, 3, padding=1)] + [nn.Conv2d(8, 8, 3, padding=1) for _ in range(3)]
    norms = [nn.BatchNorm2d(8) for _ in layers]
    head = nn.Linear(8, 2)
    optimizer = SGD(get_parameters([layers, norms, head]), lr=0.1, momentum=0.9)
    images, labels = rng.standard_normal((4, 3, 8, 8)).astype(np.float32), Tensor(rng.integers(0, 2, 4))

    def step():
        optimizer.zero_grad()
        hidden = Tensor(images)
        for layer, norm in zip(layers, norms):
            hidden = norm(layer(hidden)).relu()
        loss = F.cross_entropy(head(hidden.mean((2, 3))), labels)
        loss.backward()
        optimizer.step()
        return loss.item()
    for _ in range(4):
        step()
    planned = []
    plan = fuse._plan_schedule
    monkeypatch.setattr(fuse, "_plan_schedule", lambda outputs, nodes: planned.append(len(outputs)) or plan(outputs, nodes))
    for _ in range(3):
        step()
    assert planned == []


def test_a_replay_reuses_an_output_buffer_only_when_nothing_refers_to_it(monkeypatch):
    @jit
    def f(x):
        return x * 2
    values = arrays(6)
    inputs = [Tensor(value) for value in values]
    for call in range(3):
        f(inputs[call]).numpy()
    allocations = []
    device = lazygrad.devices.get_device("CPU")
    allocate = device.alloc
    monkeypatch.setattr(device, "alloc", lambda *args: allocations.append(args) or allocate(*args))
    np.testing.assert_array_equal(f(inputs[3]).numpy(), values[3] * 2)  # the last result was dropped
    assert len(allocations) == 0
    kept = f(inputs[4])               # held by the caller: the next call writes elsewhere
    built_on = f(inputs[5]) + 1       # only a graph holds this one's buffer
    third = f(inputs[0])
    assert len(allocations) == 2
    np.testing.assert_array_equal(kept.numpy(), values[4] * 2)
    np.testing.assert_array_equal(built_on.numpy(), values[5] * 2 + 1)
    np.testing.assert_array_equal(third.numpy(), values[0] * 2)


def test_a_replay_realizes_pending_arguments_and_refuses_stale_or_changed_ones():
    @jit
    def f(x):
        return x + 1
    value = arrays(1)[0]
    for _ in range(3):
        f(Tensor(value))
    np.testing.assert_allclose(f(Tensor(value) * 2).numpy(), value * 2 + 1, rtol=1e-6)  # not yet realized
    state = Tensor(value).realize()
    held = Tensor(LazyBuffer.from_buffer(state.lazydata.buffer, state.shape))
    state.assign(Tensor(value * 3)).realize()  # overwrites the buffer `held` was made on
    with pytest.raises(StaleValueError):
        f(held)
    with pytest.raises(JitError, match="shape"):
        f(Tensor(value[:2]))
    with pytest.raises(JitError):
        f(x=Tensor(value))


def test_a_function_of_ten_thousand_ops_is_captured_and_replayed():
    """Capture and replay walk no graph recursively (the limit is cut to just above the test's stack)."""
    @jit
    def deep(x):
        for _ in range(5000):
            x = x * np.float32(1.0001) + np.float32(0.5)
        return x
    with shallow_stack():
        for call in range(4):
            start = np.linspace(-1, 1, 64, dtype=np.float32) * (call + 1)
            result = deep(Tensor(start)).numpy()
            expected = start
            for _ in range(5000):
                expected = expected * np.float32(1.0001) + np.float32(0.5)
            np.testing.assert_allclose(result, expected, rtol=1e-5)
    assert deep.replay is not None


CHAIN_ATOL = 1e-5


def chain_of_stored_steps(x, steps=12, kept=None):
    for step in range(steps):
        x = (x * 1.25 + step).contiguous()
        if kept is not None and step == 3:
            kept.append(x)
    return x


def numpy_chain_of_stored_steps(a, steps=12):
    """Each step rounded twice, as numpy computes it; a GPU compiler fuses a step into one FMA, which
    differs by about an ulp of x * 1.25: compare with an absolute tolerance too (CHAIN_ATOL)."""
    values = []
    for step in range(steps):
        a = a * np.float32(1.25) + np.float32(step)
        values.append(a)
    return values


def test_a_replay_runs_intermediates_whose_lifetimes_do_not_overlap_in_shared_buffers(compiled_device):
    f = jit(chain_of_stored_steps)
    inputs = arrays(5, (64, 64))
    for x in inputs:
        result = f(Tensor(x, device=compiled_device))
        np.testing.assert_allclose(result.numpy(), numpy_chain_of_stored_steps(x)[-1], rtol=1e-5, atol=CHAIN_ATOL)
    buffers = {id(buffer) for launch_buffers in f.replay.captured_buffers for buffer in launch_buffers}
    assert len(buffers) <= 3  # the output and two intermediates taking turns (no argument: each call brings its own)
    assert f.replay.shared_buffers >= 8


def test_a_replay_keeps_no_argument_buffer_of_its_capture(compiled_device):
    """An optimizer's update takes every gradient as an argument: a replay holding the capture's
    would hold a second copy of them."""
    f = jit(lambda x: (x * 2).sum(0))
    captured = None
    for call, x in enumerate(arrays(4, (64, 64))):
        argument = Tensor(x, device=compiled_device)
        np.testing.assert_allclose(f(argument).numpy(), (x * 2).sum(0), rtol=1e-5)
        if call == 1:
            captured = weakref.ref(argument.lazydata.buffer)
        del argument
    gc.collect()
    assert f.replay is not None and captured() is None


def test_an_intermediate_the_function_leaves_held_keeps_its_own_buffer(compiled_device):
    kept = []
    f = jit(lambda x: chain_of_stored_steps(x, kept=kept))
    inputs = arrays(4, (64, 64))
    for x in inputs:
        result = f(Tensor(x, device=compiled_device))
    expected = numpy_chain_of_stored_steps(inputs[-1])
    np.testing.assert_allclose(result.numpy(), expected[-1], rtol=1e-5, atol=CHAIN_ATOL)
    np.testing.assert_allclose(kept[-1].numpy(), expected[3], rtol=1e-5, atol=CHAIN_ATOL)  # the capture's tensor shows the last replay


def test_a_replay_under_debug_2_times_each_launch(capsys):
    """DEBUG=2 prints a line per kernel of a replay, as for a realize: its name, global size, time,
    GFLOP/s and GB/s; a launch the replay skips says so; then the replay's totals."""
    w = Tensor(np.arange(64 * 32, dtype=np.float32).reshape(64, 32) / 1000).realize()
    step = jit(lambda x: (x @ w.T.contiguous()).relu().sum(1))  # w's copy: a launch replays skip
    x = Tensor(np.ones((16, 32), np.float32)).realize()
    for _ in range(3):
        step(x).realize()
    capsys.readouterr()
    with lazygrad.Context(DEBUG=2):
        value = step(x).numpy()
    lines = capsys.readouterr().err.splitlines()
    expected = np.maximum(np.ones((16, 32)) @ (np.arange(64 * 32).reshape(64, 32) / 1000).T, 0).sum(1)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    timed = [line for line in lines if " GFLOP/s " in line and line.rstrip().endswith("GB/s")]
    skipped = [line for line in lines if "skipped (what it reads is unchanged)" in line]
    assert len(timed) + len(skipped) == len(lines) - 1 and len(skipped) == 1 and timed
    assert lines[-1].startswith(f"replayed {len(timed)} kernel(s): ")
