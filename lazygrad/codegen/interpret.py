"""Runs a loop program with numpy: a check of codegen that needs no compiler.

A loop program (renderer/loop_program.py) is what every renderer prints; running it here, with each
op computed by its numpy reference from the op table, checks what linearize decided (loop nests,
index expressions and validities, upcast, unrolled and vector copies, accumulators, BLOCK's partial
results, a GROUP's fold, indexed loads) apart from any dialect's syntax or compiler. The tests
(test/codegen/test_interpret.py) compare its results with the NPY device's.

Every iteration of the loops that produce outputs (global, LOCAL and GROUP work-items, and
accumulator arrays' inner loops) runs at once, as numpy arrays over those loops; the reduce loops,
whose accumulators carry from one step to the next, run one step at a time in Python, as does a
BLOCK loop. A value of several lanes has them as a last axis. Slow, and meant for small kernels.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.ops import OpDef, Ops, reduce_identity
from lazygrad.renderer.loop_program import (
    Accumulate,
    Broadcast,
    ByteDot,
    Const,
    Element,
    Fma,
    InRange,
    Lane,
    Load,
    LoopProgram,
    Masked,
    Op,
    Valid,
    Var,
    Vector,
    VectorLoad,
)


def run_program(program: LoopProgram, buffers: list[np.ndarray]) -> None:
    """Runs `program` on flat numpy arrays, one per parameter in order (outputs first), writing its
    outputs in place."""
    if len(buffers) != len(program.params):
        raise ValueError(f"run_program: {program.name} takes {len(program.params)} buffers, got {len(buffers)}")
    _Interpreter(program, buffers).run()


class _Interpreter:
    def __init__(self, program: LoopProgram, buffers: list[np.ndarray]):
        self.program = program
        self.buffers = {name: buffer for (name, _, _), buffer in zip(program.params, buffers)}
        self.accumulators = {accumulator.name for stage in program.stages for accumulator in stage.accumulators}
        # the loops every iteration of which runs at once, each an axis of the arrays
        self.parallel = program.global_loops + program.local_loops + program.inner_loops
        self.shape = tuple(loop.size for loop in self.parallel)
        self.env: dict[str, object] = {}
        for axis, loop in enumerate(self.parallel):
            self.env[loop.var] = np.arange(loop.size).reshape([-1 if other == axis else 1 for other in range(len(self.shape))])

    def run(self) -> None:
        program, block = self.program, self.program.block_loop
        with np.errstate(all="ignore"):
            for step in range(block.size if block else 1):
                if block:
                    self.env[block.var] = step
                for stage in program.stages:
                    self.run_stage(stage, step)
                if block and step < block.size - 1:  # the partial results, for the next block to start from
                    for store in program.partial_stores:
                        self.store(store, 1)
                    continue
                for store in program.raw_stores:
                    self.store(store, 1)
                self.execute(program.outer)
                for store in program.stores:
                    self.store(store, store.width)

    def run_stage(self, stage, block_step: int) -> None:
        program = self.program
        for number, accumulator in enumerate(stage.accumulators):
            dtype = np.float32 if accumulator.dtype == dtypes.float16 else accumulator.dtype.np  # as every dialect
            value = np.asarray(reduce_identity(accumulator.op, accumulator.dtype)).astype(dtype)
            if block_step > 0 and number < len(program.partial_stores):  # the earlier blocks' result
                partial = program.partial_stores[number]
                value = self.evaluate(Element(partial.param, partial.index)).astype(dtype)
            lanes = (accumulator.width,) if accumulator.width > 1 else ()
            self.env[accumulator.name] = np.broadcast_to(value, self.shape + lanes).copy()
        for position in itertools.product(*(range(loop.size) for loop in program.reduce_loops)):
            self.env.update((loop.var, value) for loop, value in zip(program.reduce_loops, position))
            self.execute(stage.inner)
        self.execute(stage.combine)
        if program.group_lane is not None:
            self.fold_lanes(stage)
        for accumulator in stage.accumulators:
            if accumulator.dtype == dtypes.float16:
                self.env[accumulator.name] = self.env[accumulator.name].astype(np.float16)

    def fold_lanes(self, stage) -> None:
        """A GROUP's fold: each output's lanes, in order, into one result every lane then holds."""
        axis = self.parallel.index(self.program.group_lane)
        for accumulator in stage.results:
            lanes = self.env[accumulator.name]
            total = np.take(lanes, [0], axis=axis)
            for lane in range(1, lanes.shape[axis]):
                total = _accumulate(accumulator.op, total, np.take(lanes, [lane], axis=axis))
            self.env[accumulator.name] = np.broadcast_to(total, lanes.shape).copy()

    def execute(self, statements) -> None:
        for statement in statements:
            value = self.evaluate(statement.expr)
            name = statement.target.name if isinstance(statement.target, Var) else statement.target.array
            if not statement.declare:  # an accumulator (an array of them is one value per inner position)
                value = np.asarray(value).astype(self.env[name].dtype)
            self.env[name] = value

    def store(self, store, width: int) -> None:
        index = np.asarray(store.index.evaluate(self.env))
        value = np.asarray(self.evaluate(store.value))
        lanes = (width,) if width > 1 else ()
        if width > 1:
            index = index[..., None] + np.arange(width)
        buffer = self.buffers[store.param]
        index = np.broadcast_to(index, self.shape + lanes).ravel()
        value = np.broadcast_to(value, self.shape + lanes).ravel()
        if store.guard is not None:  # only where the guard holds (scalar programs: no lanes)
            kept = np.broadcast_to(np.asarray(self.evaluate(store.guard)), self.shape).ravel()
            index, value = index[kept], value[kept]
        buffer[index] = value.astype(buffer.dtype)

    def gather(self, param: str, index, valid=True):
        """param[index] where valid, else 0."""
        buffer = self.buffers[param]
        if valid is True:
            return buffer[index]
        return np.where(valid, buffer[np.where(valid, index, 0)], np.zeros((), buffer.dtype))

    def evaluate(self, expr):
        kind, env = type(expr), self.env
        if kind is Var:
            return env[expr.name]
        if kind is Element:
            if expr.array in self.accumulators:  # inner loops are array axes: the element is the value
                return env[expr.array]
            return self.gather(expr.array, expr.index.evaluate(env))
        if kind is Const:
            return np.array(expr.value).astype(expr.dtype.np)
        if kind is Load:
            valid = expr.valid if isinstance(expr.valid, bool) else expr.valid.evaluate(env)
            return self.gather(expr.param, np.asarray(expr.index.evaluate(env)), valid)
        if kind is VectorLoad:
            return self.gather(expr.param, np.asarray(expr.index.evaluate(env))[..., None] + np.arange(expr.width))
        if kind is Masked:
            valid = expr.valid if isinstance(expr.valid, bool) else expr.valid.evaluate(env)
            valid = np.asarray(valid)[..., None] if expr.width > 1 else valid
            value = expr.value
            if type(value) is VectorLoad:  # C's `valid ? load : 0` reads nothing where invalid (maybe past the end)
                index = np.asarray(value.index.evaluate(env))[..., None] + np.arange(value.width)
                return self.gather(value.param, index, valid)
            return np.where(valid, self.evaluate(value), np.zeros((), expr.dtype.np))
        if kind is Valid:
            return np.asarray(expr.condition.evaluate(env))
        if kind is Op:
            return _op(expr.op, expr.dtype, [self.evaluate(operand) for operand in expr.operands])
        if kind is Vector:
            lanes = np.broadcast_arrays(*[np.asarray(self.evaluate(lane)) for lane in expr.lanes])
            return np.stack(lanes, axis=-1).astype(expr.dtype.np)
        if kind is Lane:
            return self.evaluate(expr.value)[..., expr.lane]
        if kind is Broadcast:
            value = np.asarray(self.evaluate(expr.value))
            return np.broadcast_to(value[..., None], value.shape + (expr.width,))
        if kind is Accumulate:
            accumulator = np.asarray(self.evaluate(expr.accumulator))
            return _accumulate(expr.op, accumulator, self.evaluate(expr.value))
        if kind is Fma:
            left, right, accumulator = (np.asarray(self.evaluate(value)) for value in (expr.left, expr.right, expr.accumulator))
            exact = left.astype(np.float64) * right.astype(np.float64)  # exact for float32 operands
            return (exact + accumulator).astype(accumulator.dtype)
        if kind is ByteDot:
            return self.byte_dot(expr)
        if kind is InRange:
            value = self.evaluate(expr.value)
            return (value >= 0) & (value < expr.size)
        raise TypeError(f"run_program: no meaning for {expr!r}")

    def byte_dot(self, expr: ByteDot):
        """Per lane, the 4 uint8 from `activations` times that lane's 4 int8 from `weights`, added."""
        activations = np.asarray(expr.activations.index.evaluate(self.env))[..., None] + np.arange(4)
        weights = np.asarray(expr.weights.index.evaluate(self.env))[..., None, None] + np.arange(expr.width * 4).reshape(expr.width, 4)
        left = self.buffers[expr.activations.array].view(np.uint8)[activations].astype(np.int32)
        right = self.buffers[expr.weights.array].view(np.int8)[weights].astype(np.int32)
        return self.evaluate(expr.accumulator) + (left[..., None, :] * right).sum(-1, dtype=np.int32)


def _op(op: OpDef, dtype, operands: list):
    """An op of the table by its numpy reference, in the program's dtype."""
    if op.converts:
        return op.ref(np.asarray(operands[0]), dtype)
    result = op.ref(*(np.asarray(operand) for operand in operands))
    return np.asarray(result).astype(dtype.np, copy=False)


def _accumulate(op: OpDef, accumulator, value):
    """A reduce's step (ops/table.py's templates): a max keeps a NaN it meets."""
    value = np.asarray(value).astype(accumulator.dtype)
    if op is Ops.SUM:
        return accumulator + value
    if op is Ops.PROD:
        return accumulator * value
    if accumulator.dtype == np.bool_:
        return accumulator | value
    if accumulator.dtype.kind == "f":
        return np.where((value > accumulator) | (value != value), value, accumulator)
    return np.maximum(accumulator, value)


def run_kernel_programs(items, program_for, arrays: dict[int, np.ndarray]) -> None:
    """Runs a schedule's kernels (schedule/fuse.py ScheduleItems) through their loop programs:
    `program_for(kernel)` makes each one; `arrays` holds a flat numpy array per realized node (by
    id), and gets one for each output."""
    for item in items:
        if item.kernel is None or any(item.in_place):
            raise ValueError("run_kernel_programs: copies and in-place writes are the engine's (realize.py)")
        outputs = [np.zeros(math.prod(node.shape), dtype.np) for node, dtype in
                   zip(item.outputs, item.kernel.buffer_dtypes)]
        inputs = [arrays[id(node)] if id(node) in arrays else node.buffer.numpy().reshape(-1) for node in item.inputs]
        run_program(program_for(item.kernel), outputs + inputs)
        arrays.update((id(node), output) for node, output in zip(item.outputs, outputs))
