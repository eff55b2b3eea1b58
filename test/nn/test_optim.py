"""Optimizers' first steps against numpy references of their update rules (PyTorch's definitions),
kernels per step, and learning-rate schedules against their closed forms.

The update rules run on NPY in float64 (exact comparisons, nothing to compile); the kernel counts
need the compiled CPU device, where the counters see each kernel.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from lazygrad import Tensor, dtypes, stats
from lazygrad.nn.optim import (LAMB, SGD, Adam, AdamW, CosineAnnealingLR, LinearLR, OneCycleLR, StepLR)

rng = np.random.default_rng(0)
STEPS = 3


def loss_gradient(values: np.ndarray, target: np.ndarray) -> np.ndarray:
    """d/dw of sum(w * w * target) / 2 + sum(w), the loss the tests minimize."""
    return values * target + 1


def run_lazygrad(make_optimizer, initial: list[np.ndarray], targets: list[np.ndarray], device: str = "NPY"):
    """The parameter values after each of STEPS optimizer steps."""
    params = [Tensor(array, device=device, requires_grad=True) for array in initial]
    optimizer = make_optimizer(params)
    history = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = sum(((p * p * Tensor(t, device=device)).sum() / 2 + p.sum() for p, t in zip(params, targets)),
                   Tensor(0.0, dtype=dtypes.float64, device=device))
        loss.backward()
        optimizer.step()
        history.append([p.numpy() for p in params])
    return history


def run_numpy(update, state_names: list[str], initial: list[np.ndarray], targets: list[np.ndarray]):
    """The same steps with `update(t, value, grad, state) -> value`, state a dict per parameter."""
    values = [array.copy() for array in initial]
    states = [{name: np.zeros_like(array) for name in state_names} for array in initial]
    history = []
    for t in range(1, STEPS + 1):
        values = [update(t, value, loss_gradient(value, target), state)
                  for value, target, state in zip(values, targets, states)]
        history.append([value.copy() for value in values])
    return history


def sgd_reference(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    def update(t, value, grad, state):
        grad = grad + weight_decay * value
        if momentum:
            state["buffer"] = grad.copy() if t == 1 else momentum * state["buffer"] + (1 - dampening) * grad
            grad = grad + momentum * state["buffer"] if nesterov else state["buffer"]
        return value - lr * grad
    return update


def adam_reference(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    def update(t, value, grad, state):
        if decoupled:
            value = value * (1 - lr * weight_decay)
        else:
            grad = grad + weight_decay * value
        state["m"] = betas[0] * state["m"] + (1 - betas[0]) * grad
        state["v"] = betas[1] * state["v"] + (1 - betas[1]) * grad * grad
        m_hat = state["m"] / (1 - betas[0] ** t)
        v_hat = state["v"] / (1 - betas[1] ** t)
        return value - lr * m_hat / (np.sqrt(v_hat) + eps)
    return update


def lamb_reference(lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
    def update(t, value, grad, state):
        state["m"] = betas[0] * state["m"] + (1 - betas[0]) * grad
        state["v"] = betas[1] * state["v"] + (1 - betas[1]) * grad * grad
        direction = (state["m"] / (1 - betas[0] ** t)) / (np.sqrt(state["v"] / (1 - betas[1] ** t)) + eps)
        direction = direction + weight_decay * value
        weight_norm, direction_norm = np.linalg.norm(value), np.linalg.norm(direction)
        ratio = weight_norm / direction_norm if weight_norm > 0 and direction_norm > 0 else 1.0
        return value - lr * ratio * direction
    return update


CASES = {
    "sgd": (lambda p: SGD(p, lr=0.1), sgd_reference(0.1), []),
    "sgd_momentum_dampening": (lambda p: SGD(p, lr=0.1, momentum=0.9, dampening=0.3),
                               sgd_reference(0.1, momentum=0.9, dampening=0.3), ["buffer"]),
    "sgd_nesterov_weight_decay": (lambda p: SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
                                  sgd_reference(0.05, momentum=0.8, weight_decay=0.1, nesterov=True), ["buffer"]),
    "adam": (lambda p: Adam(p, lr=0.01), adam_reference(0.01), ["m", "v"]),
    "adam_weight_decay": (lambda p: Adam(p, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1),
                          adam_reference(0.01, betas=(0.8, 0.99), weight_decay=0.1), ["m", "v"]),
    "adamw": (lambda p: AdamW(p, lr=0.01, weight_decay=0.1),
              adam_reference(0.01, weight_decay=0.1, decoupled=True), ["m", "v"]),
    "lamb": (lambda p: LAMB(p, lr=0.01, weight_decay=0.01), lamb_reference(0.01, weight_decay=0.01), ["m", "v"]),
}


@pytest.mark.parametrize("name", CASES)
def test_first_steps_match_the_update_rule(name):
    make_optimizer, update, state_names = CASES[name]
    initial = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    targets = [rng.uniform(0.5, 2, (3, 4)), rng.uniform(0.5, 2, 5)]
    got = run_lazygrad(make_optimizer, initial, targets)
    expected = run_numpy(update, state_names, initial, targets)
    for step, (got_values, expected_values) in enumerate(zip(got, expected), start=1):
        for index, (value, reference) in enumerate(zip(got_values, expected_values)):
            np.testing.assert_allclose(value, reference, rtol=1e-10, atol=1e-12,
                                       err_msg=f"step {step}, parameter {index}")


def test_a_step_leaves_realized_detached_parameters_that_still_require_grad():
    weight = Tensor(rng.standard_normal((2, 3)), device="NPY", requires_grad=True)
    optimizer = Adam([weight])
    (weight * weight).sum().backward()
    optimizer.step()
    assert weight.requires_grad and weight._ctx is None and weight.lazydata.realized
    assert weight.grad is not None
    optimizer.zero_grad()
    assert weight.grad is None


def test_parameters_without_a_gradient_are_left_alone():
    used = Tensor([1.0, 2.0], device="NPY", requires_grad=True)
    unused = Tensor([3.0], device="NPY", requires_grad=True)
    optimizer = SGD([used, unused], lr=0.5)
    used.sum().backward()
    optimizer.step()
    assert used.tolist() == [0.5, 1.5] and unused.tolist() == [3.0]


def test_optimizer_argument_errors():
    with pytest.raises(ValueError, match="does not require grad"):
        SGD([Tensor([1.0])])
    with pytest.raises(ValueError, match="empty parameter list"):
        Adam([])
    with pytest.raises(ValueError, match="nesterov"):
        SGD([Tensor([1.0], requires_grad=True)], nesterov=True)


# ---- kernels per step ----------------------------------------------------------------------------

KERNELS_PER_PARAMETER = {
    "SGD": (lambda p: SGD(p, lr=0.1), 1),                      # p - lr * g
    "SGD momentum": (lambda p: SGD(p, lr=0.1, momentum=0.9), 1),  # the momentum buffer and the parameter
    "Adam": (lambda p: Adam(p), 1),                            # m, v and the parameter
    "AdamW": (lambda p: AdamW(p), 1),
    # the two norms and the trust ratio they give (worth storing: fuse.py), then m, v and the parameter
    "LAMB": (lambda p: LAMB(p), 2),
}


@pytest.mark.parametrize("name", KERNELS_PER_PARAMETER)
def test_kernels_per_step_and_no_compiles_after_the_first_step(name):
    """A parameter's update and its state's are one kernel with several outputs (LAMB's two norms
    are reduces of their own), written into the tensors' own buffers; the step adds two kernels in
    all (this step's scalars, the step counter). The learning rate and bias corrections are read from a buffer, so a changing
    learning rate never compiles anything new."""
    make_optimizer, per_parameter = KERNELS_PER_PARAMETER[name]
    weight = Tensor(rng.standard_normal((8, 4)).astype(np.float32), requires_grad=True)
    bias = Tensor(rng.standard_normal(8).astype(np.float32), requires_grad=True)
    optimizer = make_optimizer([weight, bias])
    for step in range(3):
        optimizer.zero_grad()
        # not (weight * weight).sum(): LAMB's norm of the weight is that very kernel, which the step
        # would then take from the backward's realize (lazygrad/derived_values.py)
        ((weight * weight * 0.5).sum() + (bias * 3).sum()).backward()
        Tensor.realize(weight.grad, bias.grad)  # the backward kernels are not the optimizer's
        optimizer.lr *= 0.5
        buffers = [weight.lazydata.buffer, bias.lazydata.buffer]
        stats.reset()
        optimizer.step()
        assert stats.kernels == 2 + 2 * per_parameter, f"step {step + 1}"
        assert [weight.lazydata.buffer, bias.lazydata.buffer] == buffers, "the update was not written in place"
        if step > 0:
            assert stats.compiles == 0 and stats.cache_hits == 0, f"step {step + 1} compiled {stats}"


# ---- learning-rate schedules ---------------------------------------------------------------------

def schedule(make_scheduler, steps: int, lr: float = 1.0) -> list[float]:
    optimizer = SGD([Tensor([0.0], requires_grad=True)], lr=lr)
    scheduler = make_scheduler(optimizer)
    rates = [optimizer.lr]
    for _ in range(steps):
        scheduler.step()
        rates.append(optimizer.lr)
    assert scheduler.get_last_lr() == [optimizer.lr]
    return rates


def test_step_lr_multiplies_by_gamma_every_step_size_steps():
    assert schedule(lambda o: StepLR(o, step_size=2, gamma=0.5), 5) == [1, 1, 0.5, 0.5, 0.25, 0.25]


def test_cosine_annealing_follows_half_a_cosine_to_eta_min():
    rates = schedule(lambda o: CosineAnnealingLR(o, T_max=4, eta_min=0.1), 4)
    expected = [0.1 + 0.9 * (1 + math.cos(math.pi * t / 4)) / 2 for t in range(5)]
    np.testing.assert_allclose(rates, expected, rtol=1e-12)
    assert rates[-1] == pytest.approx(0.1)


def test_linear_warmup_ramps_the_factor_then_holds():
    rates = schedule(lambda o: LinearLR(o, start_factor=0.25, total_iters=4), 6, lr=2.0)
    np.testing.assert_allclose(rates, [0.5, 0.875, 1.25, 1.625, 2.0, 2.0, 2.0])


def test_one_cycle_warms_up_to_max_lr_then_anneals_to_the_minimum():
    rates = schedule(lambda o: OneCycleLR(o, max_lr=1.0, total_steps=10, pct_start=0.3), 9)
    assert rates[0] == pytest.approx(1.0 / 25)               # max_lr / div_factor
    assert max(rates) == pytest.approx(1.0) and rates.index(max(rates)) == 2  # step pct_start * total - 1
    assert rates[-1] == pytest.approx(1.0 / 25 / 1e4)        # initial / final_div_factor
    assert all(a <= b for a, b in zip(rates[:3], rates[1:3])) and all(a >= b for a, b in zip(rates[2:], rates[3:]))
    linear = schedule(lambda o: OneCycleLR(o, max_lr=1.0, total_steps=5, pct_start=0.5, anneal_strategy="linear",
                                           div_factor=10, final_div_factor=1), 4)
    np.testing.assert_allclose(linear, [0.1, 0.7, 0.82, 0.46, 0.1])  # the peak falls between steps 1 and 2
    with pytest.raises(ValueError, match="more than total_steps"):
        schedule(lambda o: OneCycleLR(o, max_lr=1.0, total_steps=3), 4)


def test_the_loss_read_after_an_in_place_step_is_this_steps_loss():
    """The usual loop reads the loss after optimizer.step(); backward realized it, so it is the loss
    of the parameters before the step, as in PyTorch."""
    start = rng.standard_normal(5).astype(np.float32)
    weight = Tensor(start, requires_grad=True)
    optimizer = SGD([weight], lr=0.1)
    loss = (weight * weight).sum()
    loss.backward()
    optimizer.step()
    np.testing.assert_allclose(loss.item(), (start * start).sum(), rtol=1e-6)
    np.testing.assert_allclose(weight.grad.numpy(), 2 * start, rtol=1e-6)
    np.testing.assert_allclose(weight.numpy(), start - 0.1 * 2 * start, rtol=1e-6)
