"""Recurrent ONNX operators: RNN, GRU and LSTM, unrolled over the sequence into Tensor ops.

Registered in registry.OPERATORS; model.py calls them. Each direction runs its cell once per time
step; gates follow ONNX's orders (GRU: z, r, h; LSTM: i, o, f, c) and its activation names. Steps at
or past a batch element's sequence length keep that element's state and output zeros.
"""
from __future__ import annotations

from lazygrad.dtype import dtypes
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor


def activation(name: str, alpha=None, beta=None):
    functions = {
        "Relu": lambda x: x.relu(), "Tanh": lambda x: x.tanh(), "Sigmoid": lambda x: x.sigmoid(),
        "Affine": lambda x: x * alpha + beta, "LeakyRelu": lambda x: (x < 0).where(x * alpha, x),
        "ThresholdedRelu": lambda x: (x > alpha).where(x, 0.0), "ScaledTanh": lambda x: (x * beta).tanh() * alpha,
        "HardSigmoid": lambda x: (x * alpha + beta).clamp(0, 1),
        "Elu": lambda x: (x < 0).where((x.exp() - 1) * alpha, x),
        "Softsign": lambda x: x / (1 + x.abs()), "Softplus": lambda x: (x.exp() + 1).log(),
    }
    return functions[name]


def activation_list(names, alphas, betas, defaults: list[str], directions: int) -> list:
    names = list(names) if names else defaults * directions
    alphas, betas = list(alphas or []), list(betas or [])
    result = []
    for index, name in enumerate(names):
        result.append(activation(name, alphas[index] if index < len(alphas) else None,
                                 betas[index] if index < len(betas) else None))
    return result


def split_gates(tensor: Tensor, count: int) -> list[Tensor]:
    size = tensor.shape[-1] // count
    return [tensor[..., i * size:(i + 1) * size] for i in range(count)]


def run_recurrence(ctx, x, sequence_lens, initial_states: list[Tensor], step_function, direction: str):
    """Run step_function(x_t, states, direction_index) -> states over time; returns Y and final states."""
    steps, batch = x.shape[0], x.shape[1]
    directions = 2 if direction == "bidirectional" else 1
    lengths = None
    if sequence_lens is not None:
        lengths = sequence_lens.cast(dtypes.int64).reshape(batch, 1)
    outputs, finals = [], []
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        states = [state[d] for state in initial_states]
        per_step = [None] * steps
        for step in (range(steps - 1, -1, -1) if reverse else range(steps)):
            new_states = step_function(x[step], states, d)
            if lengths is not None:
                active = lengths > step
                new_states = [active.where(new, old) for new, old in zip(new_states, states)]
                per_step[step] = active.where(new_states[0], 0.0)
            else:
                per_step[step] = new_states[0]
            states = new_states
        outputs.append(Tensor.stack(*per_step, dim=0))
        finals.append(states)
    y = Tensor.stack(*outputs, dim=1)
    final_states = [Tensor.stack(*[states[i] for states in finals], dim=0) for i in range(len(initial_states))]
    return y, final_states


def prepare(ctx, x, w, initial_states: list, layout: int, hidden: int, count: int):
    if layout:
        x = x.transpose(0, 1)
        initial_states = [None if s is None else s.transpose(0, 1) for s in initial_states]
    directions, batch = w.shape[0], x.shape[1]
    states = [s if s is not None else Tensor.zeros(directions, batch, hidden, dtype=x.dtype, device=ctx.device)
              for s in initial_states]
    return x, states


def finish(y, finals, layout):
    if layout:
        return (y.permute(2, 0, 1, 3),) + tuple(state.transpose(0, 1) for state in finals)
    return (y,) + tuple(finals)


def biases(b, directions: int, width: int, x: Tensor):
    if b is None:
        zeros = Tensor.zeros(directions, width, dtype=x.dtype, device=x.device)
        return zeros, zeros
    return b[:, :width], b[:, width:]


@onnx_op("RNN")
def rnn(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, activation_alpha=None, activation_beta=None,
        activations=None, clip=None, direction="forward", hidden_size=None, layout=0):
    hidden = hidden_size or w.shape[1]
    x, (h0,) = prepare(ctx, x, w, [initial_h], layout, hidden, 1)
    functions = activation_list(activations, activation_alpha, activation_beta, ["Tanh"], w.shape[0])
    w_bias, r_bias = biases(b, w.shape[0], hidden, x)

    def step(x_t, states, d):
        total = x_t @ w[d].T + states[0] @ r[d].T + w_bias[d] + r_bias[d]
        if clip is not None:
            total = total.clamp(-clip, clip)
        return [functions[d](total)]

    y, finals = run_recurrence(ctx, x, sequence_lens, [h0], step, direction)
    return finish(y, finals, layout)


@onnx_op("GRU")
def gru(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, activation_alpha=None, activation_beta=None,
        activations=None, clip=None, direction="forward", hidden_size=None, layout=0, linear_before_reset=0):
    hidden = hidden_size or w.shape[1] // 3
    x, (h0,) = prepare(ctx, x, w, [initial_h], layout, hidden, 3)
    functions = activation_list(activations, activation_alpha, activation_beta, ["Sigmoid", "Tanh"], w.shape[0])
    w_bias, r_bias = biases(b, w.shape[0], 3 * hidden, x)

    def gate_clip(value):
        return value.clamp(-clip, clip) if clip is not None else value

    def step(x_t, states, d):
        f, g = functions[2 * d], functions[2 * d + 1]
        h = states[0]
        xz, xr, xh = split_gates(x_t @ w[d].T + w_bias[d], 3)
        rz, rr, rh = split_gates(r[d].T, 3)
        bz, br, bh = split_gates(r_bias[d], 3)
        z = f(gate_clip(xz + h @ rz + bz))
        reset = f(gate_clip(xr + h @ rr + br))
        if linear_before_reset:
            candidate = g(gate_clip(xh + reset * (h @ rh + bh)))
        else:
            candidate = g(gate_clip(xh + (reset * h) @ rh + bh))
        return [(1 - z) * candidate + z * h]

    y, finals = run_recurrence(ctx, x, sequence_lens, [h0], step, direction)
    return finish(y, finals, layout)


@onnx_op("LSTM")
def lstm(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, activation_alpha=None,
         activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None, input_forget=0,
         layout=0):
    hidden = hidden_size or w.shape[1] // 4
    x, (h0, c0) = prepare(ctx, x, w, [initial_h, initial_c], layout, hidden, 4)
    functions = activation_list(activations, activation_alpha, activation_beta, ["Sigmoid", "Tanh", "Tanh"],
                                w.shape[0])
    w_bias, r_bias = biases(b, w.shape[0], 4 * hidden, x)
    peephole = p if p is not None else Tensor.zeros(w.shape[0], 3 * hidden, dtype=x.dtype, device=ctx.device)

    def gate_clip(value):
        return value.clamp(-clip, clip) if clip is not None else value

    def step(x_t, states, d):
        f, g, h_act = functions[3 * d], functions[3 * d + 1], functions[3 * d + 2]
        h, c = states
        gates = x_t @ w[d].T + h @ r[d].T + w_bias[d] + r_bias[d]
        gi, go, gf, gc = split_gates(gates, 4)
        pi, po, pf = split_gates(peephole[d], 3)
        input_gate = f(gate_clip(gi + pi * c))
        forget_gate = 1 - input_gate if input_forget else f(gate_clip(gf + pf * c))
        cell = forget_gate * c + input_gate * g(gate_clip(gc))
        output_gate = f(gate_clip(go + po * cell))
        return [output_gate * h_act(cell), cell]

    y, finals = run_recurrence(ctx, x, sequence_lens, [h0, c0], step, direction)
    return finish(y, finals, layout)
