"""Optimizer steps replayed (lazygrad/nn/update_replays.py) against the same steps built and scheduled
every time: bit-identical parameters and state through learning-rate changes, gradients that come and
go, a checkpoint loaded mid-training, changed settings, shared gradient buffers and outside writes.

The plain reference is the same optimizer class with its update rule wrapped in a subclass defined
here, which the replays leave alone (a rule that is not lazygrad's may read what a replay cannot see).
"""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor, no_grad, stats
from lazygrad.jit import jit
from lazygrad.nn.optim import LAMB, SGD, Adam, AdamW, CosineAnnealingLR
from lazygrad.nn.state import load_state_dict

OPTIMIZERS = {
    "SGD momentum nesterov": lambda params: SGD(params, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
    "Adam": lambda params: Adam(params, lr=0.01, weight_decay=0.05),
    "AdamW": lambda params: AdamW(params, lr=0.01),
    "LAMB": lambda params: LAMB(params, lr=0.01, weight_decay=0.01),
}


def plain(make):
    """The optimizer `make` builds, with an update rule of a class of this file: never replayed."""
    def build(params):
        optimizer = make(params)
        rule = type(optimizer)
        optimizer.__class__ = type(f"Plain{rule.__name__}", (rule,), {"_updates": lambda self: rule._updates(self)})
        return optimizer
    return build


class Model:
    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.weight = Tensor(rng.standard_normal((6, 5)).astype(np.float32), requires_grad=True)
        self.bias = Tensor(rng.standard_normal(5).astype(np.float32), requires_grad=True)
        self.extra = Tensor(rng.standard_normal(5).astype(np.float32), requires_grad=True)

    def parameters(self) -> list[Tensor]:
        return [self.weight, self.bias, self.extra]

    def loss(self, x: Tensor, use_extra: bool) -> Tensor:
        out = (x @ self.weight + self.bias).tanh()
        if use_extra:
            out = out * self.extra
        return (out * out).mean()


def train(make, steps: int, events=lambda step, model, optimizer: None, seed: int = 0):
    """Parameters and optimizer state after each step, and how many steps built their update;
    `events(step, ...)` runs before each step."""
    model = Model(seed)
    optimizer = make(model.parameters())
    built = []
    rule = optimizer._updates
    optimizer._updates = lambda: built.append(1) or rule()
    rng = np.random.default_rng(1)
    history = []
    for step in range(steps):
        events(step, model, optimizer)
        optimizer.zero_grad()
        x = Tensor(rng.standard_normal((4, 6)).astype(np.float32))
        model.loss(x, use_extra=step % 4 != 2).backward()  # every fourth step leaves `extra` without a gradient
        optimizer.step()
        state = [tensor.numpy().copy() for name, value in vars(optimizer).items() if isinstance(value, list)
                 for tensor in value if isinstance(tensor, Tensor)]
        history.append([p.numpy().copy() for p in model.parameters()] + state)
    return history, len(built)


def assert_same(replayed, expected, most_built: int):
    """The replayed run's values are the plain run's; it built at most `most_built` updates."""
    (replayed, built), (expected, _) = replayed, expected
    assert built <= most_built, f"{built} steps built their update"
    for step, (got, want) in enumerate(zip(replayed, expected, strict=True)):
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_array_equal(a, b, err_msg=f"step {step + 1}, tensor {index}")


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_replayed_steps_are_the_plain_steps(name):
    make = OPTIMIZERS[name]

    def schedule(step, model, optimizer):  # a learning rate that changes every step: read from the device
        if step == 0:
            optimizer.scheduler = CosineAnnealingLR(optimizer, T_max=10)
        else:
            optimizer.scheduler.step()
    # two signatures (with and without `extra`'s gradient), each built twice
    assert_same(train(make, 10, schedule), train(plain(make), 10, schedule), most_built=4)


def test_steps_after_the_second_build_no_update():
    model = Model()
    optimizer = Adam(model.parameters(), lr=0.01)
    built = []
    rule = optimizer._updates
    optimizer._updates = lambda: built.append(1) or rule()
    x = Tensor(np.ones((4, 6), np.float32))
    kernels = []
    for step in range(5):
        optimizer.zero_grad()
        model.loss(x, use_extra=True).backward()
        Tensor.realize(*(p.grad for p in model.parameters()))  # the backward's kernels are not the step's
        stats.reset()
        optimizer.step()
        kernels.append(stats.kernels)
    assert kernels == kernels[:1] * 5, "a replay launches the kernels of a plain step"
    assert len(built) == 2, "the first step runs plainly, the second is captured, the rest replay"


def test_a_checkpoint_loaded_between_steps_is_what_the_next_steps_update():
    def load(step, model, optimizer):
        if step == 5:  # new buffers for the parameters: a new capture, never the old ones written
            load_state_dict(model, {"weight": Model(7).weight.detach(), "bias": Model(7).bias.detach(),
                                    "extra": Model(7).extra.detach()})
    assert_same(train(OPTIMIZERS["Adam"], 9, load), train(plain(OPTIMIZERS["Adam"]), 9, load), most_built=7)


def test_changed_settings_and_outside_writes_between_steps():
    def change(step, model, optimizer):
        if step == 4:
            optimizer.weight_decay = 0.3  # a constant of the update kernels: a new capture
        if step == 6:
            scale(model.weight, 0.5, realize=True)  # written in place: the replay reads it
        if step == 7:
            scale(model.bias, 2.0, realize=False)  # pending when the step starts: a plain step realizes it
    assert_same(train(OPTIMIZERS["Adam"], 10, change), train(plain(OPTIMIZERS["Adam"]), 10, change), most_built=8)


def scale(tensor: Tensor, factor: float, realize: bool) -> None:
    with no_grad():
        tensor.assign(tensor * factor)
    if realize:
        tensor.realize()


def test_gradients_sharing_a_buffer():
    """a + b: both gradients are one lazy node, realized into one buffer."""
    def run(make):
        a = Tensor(np.arange(4, dtype=np.float32), requires_grad=True)
        b = Tensor(np.ones(4, np.float32), requires_grad=True)
        optimizer = make([a, b])
        built = []
        rule = optimizer._updates
        optimizer._updates = lambda: built.append(1) or rule()
        for _ in range(5):
            optimizer.zero_grad()
            ((a + b) * (a + b)).sum().backward()
            optimizer.step()
        assert a.grad.lazydata.buffer is b.grad.lazydata.buffer
        return [[a.numpy(), b.numpy()]], len(built)
    assert_same(run(OPTIMIZERS["Adam"]), run(plain(OPTIMIZERS["Adam"])), most_built=2)


def test_a_jitted_training_step_captures_the_update_itself():
    """Under the caller's jit the update runs plainly while it captures, so its capture holds the kernels."""
    def run(use_jit: bool):
        model = Model()
        optimizer = Adam(model.parameters(), lr=0.01)

        def step(x):
            optimizer.zero_grad()
            loss = model.loss(x, use_extra=True)
            loss.backward()
            optimizer.step()
            return loss
        step = jit(step) if use_jit else step
        rng = np.random.default_rng(3)
        for _ in range(6):
            step(Tensor(rng.standard_normal((4, 6)).astype(np.float32)))
        return [[p.numpy() for p in model.parameters()]], 0
    assert_same(run(True), run(False), most_built=0)


def test_which_parameters_have_a_gradient_is_part_of_the_signature():
    """Two parameters of one shape, each step only one of them used: the same gradient shapes, but a
    replay captured for one must never write the other."""
    def run(make):
        a = Tensor(np.arange(4, dtype=np.float32), requires_grad=True)
        b = Tensor(np.ones(4, np.float32), requires_grad=True)
        optimizer = make([a, b])
        for step in range(8):
            optimizer.zero_grad()
            used = a if step % 2 else b
            (used * used * (step + 1)).sum().backward()
            optimizer.step()
        return [[a.numpy(), b.numpy()]], 0
    assert_same(run(OPTIMIZERS["Adam"]), run(plain(OPTIMIZERS["Adam"])), most_built=8)


def test_signatures_that_churn_stop_being_captured():
    """Each signature seen twice and never again: every second step would be a capture (a scan of
    the heap) that nothing replays, so after a few the optimizer steps plainly for good."""
    def run(make):
        params = [Tensor(np.full(3, index, np.float32), requires_grad=True) for index in range(12)]
        optimizer = make(params)
        for step in range(24):
            optimizer.zero_grad()
            used = params[step // 2]  # p0, p0, p1, p1, ...: each set of gradients twice
            (used * used).sum().backward()
            optimizer.step()
        return optimizer, [[p.numpy() for p in params]]
    optimizer, values = run(OPTIMIZERS["Adam"])
    replays = optimizer._replays
    assert replays.churned and not replays.jits.entries and replays.captures == 8 and replays.replays == 0
    assert_same((values, 0), (run(plain(OPTIMIZERS["Adam"]))[1], 0), most_built=24)
