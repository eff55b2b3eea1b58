"""Control flow, sequence and optional ONNX operators: If, Loop, Scan, Sequence*, Optional*.

Registered in registry.OPERATORS; model.py calls them. Bodies are subgraphs run by model.py with
the enclosing values in scope. If's condition and Loop's trip count and condition are read as
numbers (realized) so the graph unrolls into plain Tensor ops. Sequences are Python lists of Tensors
and an empty optional is None.
"""
from __future__ import annotations

import numpy as np

from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor


@onnx_op("If")
def if_op(ctx, condition, then_branch, else_branch):
    branch = then_branch if bool(ctx.scalar(condition)) else else_branch
    return tuple(ctx.run_graph(branch, [], ctx.scope))


def stack(tensors: list[Tensor], axis: int = 0) -> Tensor:
    expanded = [t.unsqueeze(axis) for t in tensors]
    return expanded[0] if len(expanded) == 1 else expanded[0].cat(*expanded[1:], dim=axis)


@onnx_op("Loop")
def loop(ctx, trip_count=None, condition=None, *carried, body):
    limit = ctx.scalar(trip_count) if trip_count is not None else None
    keep_going = bool(ctx.scalar(condition)) if condition is not None else True
    carried = list(carried)
    scans: list[list] = []
    iteration = 0
    while keep_going and (limit is None or iteration < limit):
        outputs = ctx.run_graph(body, [ctx.const(np.int64(iteration)), ctx.const(np.bool_(keep_going))] + carried,
                                ctx.scope)
        keep_going = bool(ctx.scalar(outputs[0]))
        carried = list(outputs[1:1 + len(carried)])
        scan_values = outputs[1 + len(carried):]
        scans = scans or [[] for _ in scan_values]
        for collected, value in zip(scans, scan_values):
            collected.append(value)
        iteration += 1
    scan_count = len(ctx.node.output) - len(carried)
    stacked = [stack(values) if values else Tensor.zeros(0, device=ctx.device) for values in scans]
    stacked += [Tensor.zeros(0, device=ctx.device)] * (scan_count - len(stacked))
    return tuple(carried + stacked)


def scan_steps(ctx, body, states: list, sequences: list, input_axes, input_directions) -> tuple[list, list]:
    """Run body once per step of the scanned inputs; returns the final states and each scan output's steps."""
    steps = sequences[0].shape[input_axes[0] % sequences[0].ndim]
    collected: list[list] = []
    for step in range(steps):
        slices = []
        for sequence, axis, direction in zip(sequences, input_axes, input_directions):
            position = steps - 1 - step if direction else step
            slices.append(sequence[(slice(None),) * (axis % sequence.ndim) + (position,)])
        outputs = ctx.run_graph(body, states + slices, ctx.scope)
        states = list(outputs[:len(states)])
        collected = collected or [[] for _ in outputs[len(states):]]
        for values, value in zip(collected, outputs[len(states):]):
            values.append(value)
    return states, collected


@onnx_op("Scan")
def scan(ctx, *inputs, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None, directions=None):
    if ctx.opset < 9:
        return scan_batched(ctx, inputs[0], list(inputs[1:]), body, num_scan_inputs, directions)
    states = list(inputs[:len(inputs) - num_scan_inputs])
    sequences = list(inputs[len(inputs) - num_scan_inputs:])
    states, collected = scan_steps(ctx, body, states, sequences, scan_input_axes or [0] * num_scan_inputs,
                                   scan_input_directions or [0] * num_scan_inputs)
    output_axes = scan_output_axes or [0] * len(collected)
    output_directions = scan_output_directions or [0] * len(collected)
    results = []
    for values, axis, direction in zip(collected, output_axes, output_directions):
        values = values[::-1] if direction else values
        results.append(stack(values, axis % (values[0].ndim + 1)))
    return tuple(states + results)


def scan_batched(ctx, sequence_lens, inputs: list, body, num_scan_inputs: int, directions):
    """Scan before opset 9: every input has a leading batch dim, scanned along dim 1, one batch element at a time."""
    if sequence_lens is not None:
        raise NotImplementedError("Scan (opset 8) with sequence_lens")
    state_count = len(inputs) - num_scan_inputs
    batch = inputs[0].shape[0]
    final_states, outputs = [], []
    for b in range(batch):
        states, collected = scan_steps(ctx, body, [t[b] for t in inputs[:state_count]],
                                       [t[b] for t in inputs[state_count:]], [0] * num_scan_inputs,
                                       directions or [0] * num_scan_inputs)
        final_states.append(states)
        outputs.append([stack(values) for values in collected])
    states = [stack([per_batch[i] for per_batch in final_states]) for i in range(state_count)]
    scanned = [stack([per_batch[i] for per_batch in outputs]) for i in range(len(outputs[0]))]
    return tuple(states + scanned)


# ---- sequences ----------------------------------------------------------------------------------

@onnx_op("SequenceConstruct")
def sequence_construct(ctx, *tensors):
    return list(tensors)


@onnx_op("SequenceEmpty")
def sequence_empty(ctx, dtype=None):
    return []


@onnx_op("SequenceAt")
def sequence_at(ctx, sequence, position):
    return sequence[int(ctx.scalar(position))]


@onnx_op("SequenceInsert")
def sequence_insert(ctx, sequence, tensor, position=None):
    result = list(sequence)
    index = len(result) if position is None else int(ctx.scalar(position))
    result.insert(index if index >= 0 else index + len(result), tensor)
    return result


@onnx_op("SequenceErase")
def sequence_erase(ctx, sequence, position=None):
    result = list(sequence)
    del result[-1 if position is None else int(ctx.scalar(position))]
    return result


@onnx_op("SequenceLength")
def sequence_length(ctx, sequence):
    return ctx.const(np.int64(len(sequence)))


@onnx_op("ConcatFromSequence")
def concat_from_sequence(ctx, sequence, axis, new_axis=0):
    if new_axis:
        return stack(list(sequence), axis if axis >= 0 else axis + sequence[0].ndim + 1)
    return sequence[0].cat(*sequence[1:], dim=axis) if len(sequence) > 1 else sequence[0]


@onnx_op("SplitToSequence")
def split_to_sequence(ctx, x, split=None, axis=0, keepdims=1):
    axis = axis + x.ndim if axis < 0 else axis
    size = x.shape[axis]
    if split is None:
        pieces = [x.shrink(tuple((i, i + 1) if d == axis else None for d in range(x.ndim))) for i in range(size)]
        return [piece.squeeze(axis) for piece in pieces] if not keepdims else pieces
    sizes = ctx.ints(split)
    if split.ndim == 0:
        sizes = [sizes[0]] * (size // sizes[0]) + ([size % sizes[0]] if size % sizes[0] else [])
    pieces, start = [], 0
    for length in sizes:
        pieces.append(x.shrink(tuple((start, start + length) if d == axis else None for d in range(x.ndim))))
        start += length
    return pieces


# ---- optionals ----------------------------------------------------------------------------------

@onnx_op("Optional")
def optional(ctx, value=None, type=None):
    return value


@onnx_op("OptionalHasElement")
def optional_has_element(ctx, value=None):
    return ctx.const(np.bool_(value is not None))


@onnx_op("OptionalGetElement")
def optional_get_element(ctx, value):
    if value is None:
        raise ValueError("OptionalGetElement of an empty optional")
    return value
