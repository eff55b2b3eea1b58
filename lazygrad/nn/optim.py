"""Optimizers (SGD, Adam, AdamW, LAMB) and learning-rate schedules; front-end layer.

    optimizer = Adam(get_parameters(model), lr=1e-3)
    scheduler = CosineAnnealingLR(optimizer, T_max=epochs)
    for x, y in batches:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()            # one realize for the gradients, every update and optimizer state
    scheduler.step()                # once per epoch: sets optimizer.lr

How a step runs. `step()` builds every parameter's new value (and new optimizer state) as lazy
expressions and `assign`s them, then realizes the gradients and all assignments in one
`Tensor.realize(...)`. The engine writes each new value into the parameter's (or state's) own buffer
after every kernel that reads the old contents has run, so a step allocates nothing for its results.
Gradients are realized as their own outputs (as PyTorch's backward writes `.grad`): an update then
reads a gradient instead of recomputing it in each of its kernels, and `param.grad` stays readable
after the step.

What changes from step to step lives on the device, so that a replayed jit step (lazygrad.jit), which
runs no Python, still does the right thing: a small float64 buffer per device holds the learning
rate and the number of completed steps; each step adds one to the count in place, and values
derived from it (Adam's bias corrections) are computed once per step into a small buffer that the
update kernels read. Setting `optimizer.lr` (a scheduler does) writes the rate into that buffer.
Hyperparameters fixed for the optimizer's life (betas, momentum, weight decay) are constants.
"""
from __future__ import annotations

import math

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.nn.update_replays import UpdateReplays
from lazygrad.tensor import Tensor, no_grad


def _power(base: float, exponent: Tensor) -> Tensor:
    """base ** exponent for a constant base in (0, 1) (a beta; 0 gives 0): two ops, where Tensor.pow
    handles every sign and special value."""
    return (exponent * math.log2(base)).exp2() if base > 0 else exponent * 0


def _moments(betas: tuple[float, float], exp_avg: Tensor, exp_avg_sq: Tensor, gradient: Tensor) -> tuple[Tensor, Tensor]:
    """Adam's running averages of the gradient and its square, one step on (Adam and LAMB)."""
    beta1, beta2 = betas
    return beta1 * exp_avg + (1 - beta1) * gradient, beta2 * exp_avg_sq + (1 - beta2) * gradient * gradient


class Optimizer:
    """Holds the parameters; subclasses define `_updates`, which returns each parameter's new value."""

    def __init__(self, params, lr: float):
        params = list(params)
        unique, seen = [], set()
        for param in params:
            if not isinstance(param, Tensor):
                raise TypeError(f"{type(self).__name__}: parameters must be Tensors, got {type(param).__name__}")
            if not param.requires_grad:
                raise ValueError(f"{type(self).__name__}: a parameter of shape {param.shape} does not require grad; "
                                 "create it with requires_grad=True or pass get_parameters(model)")
            if id(param) not in seen:
                seen.add(id(param))
                unique.append(param)
        if not unique:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        if lr < 0:
            raise ValueError(f"{type(self).__name__}: invalid learning rate {lr}")
        self.params: list[Tensor] = unique
        self._lr = float(lr)
        # device -> float64 [learning rate, completed steps], written in place
        self._counters: dict[str, Tensor] = {param.device: self._new_counters(param.device) for param in unique}
        self._step_scalars: dict[str, list[Tensor]] = {}  # device -> this step's scalars
        self._replays = UpdateReplays()

    def _new_counters(self, device: str) -> Tensor:
        return Tensor(np.array([self._lr, 0.0]), dtype=dtypes.float64, device=device).realize()

    @property
    def lr(self) -> float:
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        self._lr = float(value)
        for counters in self._counters.values():
            counters.assign(counters * Tensor(np.array([0.0, 1.0]), device=counters.device)
                            + Tensor(np.array([self._lr, 0.0]), device=counters.device)).realize()

    @property
    def steps(self) -> int:
        """Completed steps (read from the device, so replayed jit steps count too)."""
        counters = next(iter(self._counters.values()))
        return int(counters.numpy()[1])

    def zero_grad(self) -> None:
        """Forget the gradients (PyTorch's set_to_none=True)."""
        for param in self.params:
            param.grad = None

    def _state(self, param: Tensor) -> Tensor:
        """A zero-filled state tensor shaped like param (a real buffer, so step 1 runs the same kernels
        as every later step, and updates can be written into it)."""
        return Tensor(np.zeros(param.shape, dtype=param.dtype.np), device=param.device)

    def _step_values(self, lr: Tensor, steps: Tensor) -> list[Tensor]:
        """The scalars that change from step to step, in the order `_updates` reads them, from the
        learning rate and the number of completed steps (0-d float64 tensors)."""
        return [lr]

    def _scalars(self, param: Tensor) -> list[Tensor]:
        """This step's changing scalars as 0-d views of one small buffer computed once per device."""
        if param.device not in self._step_scalars:
            counters = self._counters[param.device]
            packed = Tensor.stack(self._step_values(counters[0], counters[1])).contiguous()
            self._step_scalars[param.device] = [packed[index] for index in range(packed.shape[0])]
        return self._step_scalars[param.device]

    def _updates(self) -> list[tuple[Tensor, Tensor, list[tuple[Tensor, Tensor]]]]:
        """[(parameter, its new value, [(state tensor, its new value), ...])] for the parameters that
        have a gradient."""
        raise NotImplementedError(f"{type(self).__name__} must define _updates()")

    def step(self) -> None:
        """Update every parameter that has a gradient: all updates realize together, in place. The
        gradients are realized first; from the third step of the same parameters, gradient shapes
        and settings on, the update kernels the second step launched run again on the new gradients
        instead of being built and scheduled (update_replays.py)."""
        with no_grad():
            gradients = [param.grad for param in self.params if param.grad is not None]
            if gradients:
                Tensor.realize(*gradients)
            self._replays.run(self, _update_rule_is_ours(self))

    def _write_updates(self) -> None:
        """Build every update (and the step count's) as assigns and realize them together."""
        self._step_scalars = {}
        with no_grad():
            written = []
            for param, new_value, states in self._updates():
                written.append(param.assign(new_value))
                written.extend(state.assign(new_state) for state, new_state in states)
            for counters in self._counters.values():
                written.append(counters.assign(counters + Tensor(np.array([0.0, 1.0]), device=counters.device)))
            Tensor.realize(*written)


def _update_rule_is_ours(optimizer: Optimizer) -> bool:
    """Whether the methods that build an update are this module's: a subclass's own rule may read
    what the replay's signature does not see."""
    cls = type(optimizer)
    return all(getattr(cls, name).__module__ == __name__
               for name in ("_updates", "_step_values", "_scalars", "_write_updates"))


class SGD(Optimizer):
    """PyTorch's SGD: g = grad + weight_decay * p; with momentum, b = momentum * b + (1 - dampening) * g
    (b = g on the first step) and g = g + momentum * b (nesterov) or g = b; then p = p - lr * g."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, lr)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov momentum requires a momentum and zero dampening")
        self.momentum, self.dampening, self.weight_decay, self.nesterov = momentum, dampening, weight_decay, nesterov
        self.momentum_buffers = [self._state(p) for p in self.params] if momentum else []

    def _step_values(self, lr, steps):
        # the first step takes b = g: the same formula with dampening 0 and b = 0
        return [lr, 1.0 - (steps > 0).cast(steps.dtype) * self.dampening]

    def _updates(self):
        updates = []
        for index, param in enumerate(self.params):
            if param.grad is None:
                continue
            lr, gradient_share = self._scalars(param)
            gradient = param.grad.detach()
            if self.weight_decay:
                gradient = gradient + self.weight_decay * param.detach()
            states = []
            if self.momentum:
                buffer = self.momentum * self.momentum_buffers[index] + gradient_share * gradient
                states.append((self.momentum_buffers[index], buffer))
                gradient = gradient + self.momentum * buffer if self.nesterov else buffer
            updates.append((param, param.detach() - lr * gradient, states))
        return updates


class Adam(Optimizer):
    """PyTorch's Adam (amsgrad not supported): g = grad + weight_decay * p, m = b1 m + (1 - b1) g,
    v = b2 v + (1 - b2) g^2, p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)."""
    decoupled_weight_decay = False

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False):
        super().__init__(params, lr)
        if amsgrad:
            raise NotImplementedError(f"{type(self).__name__}: amsgrad=True is not supported")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"{type(self).__name__}: betas must be in [0, 1), got {betas}")
        self.betas, self.eps, self.weight_decay = tuple(betas), eps, weight_decay
        self.exp_avgs = [self._state(p) for p in self.params]
        self.exp_avg_sqs = [self._state(p) for p in self.params]

    def _step_values(self, lr, steps):
        beta1, beta2 = self.betas
        return [lr, lr / (1 - _power(beta1, steps + 1)), (1 - _power(beta2, steps + 1)).rsqrt()]

    def _updates(self):
        updates = []
        for index, param in enumerate(self.params):
            if param.grad is None:
                continue
            lr, step_size, inverse_root_correction = self._scalars(param)
            gradient, value = param.grad.detach(), param.detach()
            if self.weight_decay and self.decoupled_weight_decay:
                value = value * (1 - lr * self.weight_decay)
            elif self.weight_decay:
                gradient = gradient + self.weight_decay * value
            exp_avg, exp_avg_sq = _moments(self.betas, self.exp_avgs[index], self.exp_avg_sqs[index], gradient)
            denominator = exp_avg_sq.sqrt() * inverse_root_correction + self.eps
            new_value = value - step_size * exp_avg / denominator
            updates.append((param, new_value, [(self.exp_avgs[index], exp_avg), (self.exp_avg_sqs[index], exp_avg_sq)]))
        return updates


class AdamW(Adam):
    """Adam with decoupled weight decay (PyTorch's AdamW): p = p * (1 - lr * weight_decay) before the
    Adam update, the gradient untouched. weight_decay defaults to 0.01."""
    decoupled_weight_decay = True

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, amsgrad: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)


class LAMB(Optimizer):
    """LAMB (You et al., 2019), as tinygrad computes it: Adam's bias-corrected direction
    u = m_hat / (sqrt(v_hat) + eps) + weight_decay * p, scaled per parameter by the trust ratio
    r = ||p|| / ||u|| (1 when either norm is 0): p = p - lr * r * u. adam=True skips the trust ratio."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, adam: bool = False):
        super().__init__(params, lr)
        self.betas, self.eps, self.weight_decay, self.adam = tuple(betas), eps, weight_decay, adam
        self.exp_avgs = [self._state(p) for p in self.params]
        self.exp_avg_sqs = [self._state(p) for p in self.params]

    def _step_values(self, lr, steps):
        beta1, beta2 = self.betas
        return [lr, 1 / (1 - _power(beta1, steps + 1)), 1 / (1 - _power(beta2, steps + 1))]

    def _updates(self):
        updates = []
        for index, param in enumerate(self.params):
            if param.grad is None:
                continue
            lr, inverse_correction1, inverse_correction2 = self._scalars(param)
            gradient, value = param.grad.detach(), param.detach()
            exp_avg, exp_avg_sq = _moments(self.betas, self.exp_avgs[index], self.exp_avg_sqs[index], gradient)
            direction = (exp_avg * inverse_correction1) / ((exp_avg_sq * inverse_correction2).sqrt() + self.eps)
            if self.weight_decay:
                direction = direction + self.weight_decay * value
            if self.adam:
                new_value = value - lr * direction
            else:
                weight_norm = (value * value).sum().sqrt()
                direction_norm = (direction * direction).sum().sqrt()
                ratio = (weight_norm > 0).where((direction_norm > 0).where(weight_norm / direction_norm, 1.0), 1.0)
                new_value = value - lr * ratio * direction
            updates.append((param, new_value, [(self.exp_avgs[index], exp_avg), (self.exp_avg_sqs[index], exp_avg_sq)]))
        return updates


# ---- learning-rate schedules ---------------------------------------------------------------------

class LRScheduler:
    """Sets optimizer.lr from the number of `step()` calls so far (last_epoch), as PyTorch's schedulers
    do; the learning rate the optimizer had when the scheduler was made is the base. Making the
    scheduler sets the rate for step 0."""

    def __init__(self, optimizer: Optimizer):
        self.optimizer = optimizer
        self.base_lr = optimizer.lr
        self.last_epoch = 0
        optimizer.lr = self.get_lr()

    def get_lr(self) -> float:
        raise NotImplementedError(f"{type(self).__name__} must define get_lr()")

    def step(self) -> None:
        self.last_epoch += 1
        self.optimizer.lr = self.get_lr()

    def get_last_lr(self) -> list[float]:
        return [self.optimizer.lr]


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (last_epoch // step_size)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def get_lr(self) -> float:
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * last_epoch / T_max)) / 2 (PyTorch's closed form)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer)

    def get_lr(self) -> float:
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2


class LinearLR(LRScheduler):
    """Linear warmup (PyTorch's LinearLR): the factor on base_lr goes from start_factor to end_factor
    over total_iters steps, then stays at end_factor."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1], got "
                             f"{start_factor} and {end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer)

    def get_lr(self) -> float:
        progress = min(self.last_epoch, self.total_iters) / self.total_iters if self.total_iters else 1.0
        return self.base_lr * (self.start_factor + (self.end_factor - self.start_factor) * progress)


class OneCycleLR(LRScheduler):
    """PyTorch's OneCycleLR (learning rate only, momentum is not cycled): from max_lr / div_factor up to
    max_lr over the first pct_start of total_steps, then down to max_lr / (div_factor * final_div_factor),
    along a cosine ('cos') or a straight line ('linear'). Call step() after every batch."""

    def __init__(self, optimizer: Optimizer, max_lr: float, total_steps: int, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False):
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        if three_phase:
            raise NotImplementedError("OneCycleLR: three_phase=True is not supported")
        self.max_lr, self.total_steps, self.anneal_strategy = max_lr, total_steps, anneal_strategy
        self.initial_lr = max_lr / div_factor
        self.min_lr = self.initial_lr / final_div_factor
        self.warmup_end = float(pct_start * total_steps) - 1
        super().__init__(optimizer)

    def _anneal(self, start: float, end: float, fraction: float) -> float:
        if self.anneal_strategy == "linear":
            return start + (end - start) * fraction
        return end + (start - end) / 2 * (math.cos(math.pi * fraction) + 1)

    def get_lr(self) -> float:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: stepped {step} times, more than total_steps={self.total_steps}")
        if step <= self.warmup_end:
            return self._anneal(self.initial_lr, self.max_lr, step / self.warmup_end if self.warmup_end else 1.0)
        span = self.total_steps - 1 - self.warmup_end
        return self._anneal(self.max_lr, self.min_lr, (step - self.warmup_end) / span if span else 1.0)
