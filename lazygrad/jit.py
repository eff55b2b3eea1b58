"""`@jit`: capture the kernels a function launches once, then replay them without Python.

    @jit
    def train_step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

The first call runs the function normally (compiling what it needs). The second runs it again while
the engine records every launch: the program and the buffers it touched (realize.Recording). From
the third call on, the recorded launches run again on the same buffers, with the new arguments'
buffers in place of the captured ones: no graph is built, nothing is scheduled or looked up.

What a replay reproduces, and what it checks:
  * Tensor arguments must keep their shape, dtype and device, and other arguments must be equal to
    the captured ones (by `==` for numbers, strings and tuples of them, by identity otherwise);
    a call that differs raises JitError naming the difference.
  * State the function writes with `assign` (parameters, optimizer state, batch-norm statistics) is
    written in place, so every replay reads and updates the same buffers; assigns still pending
    when the function returns are realized with its outputs. A function that instead gives a tensor it
    read a new buffer (`w = w - lr * g` without assign) cannot be replayed: the capture raises.
  * Random numbers (rand, randn, randint, dropout) are drawn anew on each replay from the same
    generator, so a jitted loop draws what the plain loop draws.
  * Returned tensors are new buffers on every call, safe to keep. A returned argument raises.
    (A replay writes into the previous call's output buffer again only when nothing but the replay
    refers to that buffer any more: the caller dropped the tensor and every graph built on it.)
  * Intermediate buffers are the captured ones, reused by every replay; intermediates that nothing
    but the replay sees share buffers where their lifetimes do not overlap, so a replay needs about
    the memory of the eager call's live values. A tensor that the function left holding one (a
    parameter's `.grad`) keeps its own buffer and shows the last replay's value.
  * A replay bumps the version of every buffer it writes again, as an eager step's writes do: a
    value built before the replay from the old contents (`old = w * 1`, not yet realized) raises
    StaleValueError when realized, never silently reading the new contents. The tensors that held
    those buffers when the capture ended (parameters, their state and gradients) stay current.
  * A launch that reads only state the function does not write (a parameter, never an argument)
    into a buffer nothing else writes (a convolution's weight copied into panels, a linear layer's
    transposed weight) is skipped while the versions of what it read are those of its last run:
    assigning the parameter, in a plain step or another replay, makes the next replay compute it again.
    Its last run is the capture's, so the first replay skips it too; a value that earlier plain
    calls kept (derived_values.py) is not computed again by the capture, which records the launch
    with the kept buffer as its output and shares it.
  * Python code in the function does not run on a replay: values computed in Python from
    arguments or globals (`x.numpy()`, `time.time()`) are frozen at the capture. Pass what varies
    as a Tensor argument.
  * A function that ran on a device without kernels (NPY) is called normally every time.
"""
from __future__ import annotations

import functools
import gc
import math
import sys
import time
import weakref
from collections import OrderedDict

from lazygrad import realize as engine
from lazygrad.complex_tensor import ComplexTensor
from lazygrad.devices import get_device, synchronize
from lazygrad.knobs import knobs
from lazygrad.lazy import PENDING_ASSIGNS, LazyBuffer
from lazygrad.multi import MultiLazyBuffer, lazy_nodes
from lazygrad.realize import realize
from lazygrad.stats import stats
from lazygrad.tensor import Tensor
from lazygrad.ops import Ops

_PLAIN_TYPES = (int, float, bool, str, bytes, type(None))


class JitError(RuntimeError):
    """A jitted function was called in a way its capture cannot replay."""


def _signature(args: tuple, kwargs: dict) -> tuple[list[tuple], list[Tensor]]:
    """What must stay the same between calls (one entry per argument) and the Tensor arguments."""
    described, tensors = [], []
    named = enumerate(args) if not kwargs else list(enumerate(args)) + sorted(kwargs.items())
    for name, value in named:  # runs on every call: plain attribute reads, no properties
        if isinstance(value, Tensor):
            node = value.lazydata
            if node.__class__ is LazyBuffer:
                described.append((name, "tensor", (node.shape, node.dtype, node.device)))
            else:  # sharded: its split too, each shard's buffer an argument of the replay
                described.append((name, "tensor", (node.shape, node.dtype, node.device, node.axis, node.bounds)))
            tensors.append(value)
        elif isinstance(value, _PLAIN_TYPES) or (isinstance(value, tuple) and all(isinstance(v, _PLAIN_TYPES) for v in value)):
            described.append((name, "value", value))
        else:
            described.append((name, "object", id(value)))
    return described, tensors


def _split(described: tuple) -> str:
    """How a sharded argument is split, for an error message (nothing for a plain tensor)."""
    if len(described) == 3:
        return ""
    return " (replicated)" if described[3] is None else f" split along dim {described[3]} as {described[4]}"


def _describe_difference(captured: list[tuple], now: list[tuple]) -> str:
    if len(captured) != len(now) or [entry[:2] for entry in captured] != [entry[:2] for entry in now]:
        return f"the arguments changed: captured {[entry[:2] for entry in captured]}, got {[entry[:2] for entry in now]}"
    for (name, kind, before), (_, _, after) in zip(captured, now):
        if before != after:
            what = "argument" if isinstance(name, int) else "keyword argument"
            if kind == "tensor":
                return (f"{what} {name!r} is a tensor of shape {after[0]}, {after[1].name} on {after[2]}{_split(after)}; "
                        f"the capture had shape {before[0]}, {before[1].name} on {before[2]}{_split(before)}")
            if kind == "value":
                return f"{what} {name!r} is {after!r}; the capture had {before!r}"
            return f"{what} {name!r} is a different object than at the capture"
    return "nothing changed"


def _argument_buffers(inputs: list[Tensor]) -> list:
    """The buffers of the tensor arguments, in order, a sharded one's shard by shard: run() substitutes
    them for the capture's (plain loops: this runs on every replay)."""
    buffers = []
    for tensor in inputs:
        node = tensor.lazydata
        if node.__class__ is LazyBuffer:
            buffers.append(node.buffer)
        else:
            for shard in node.lbs:
                buffers.append(shard.buffer)
    return buffers


def _flatten_outputs(result) -> list[Tensor]:
    if result is None:
        return []
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and all(isinstance(item, Tensor) for item in result):
        return list(result)
    raise JitError(f"jit: a jitted function must return a Tensor, a tuple or list of Tensors, or None; "
                   f"got {type(result).__name__}")


def _rebuild_outputs(template, tensors: list[Tensor]):
    if template is None:
        return None
    if isinstance(template, Tensor):
        return tensors[0]
    return type(template)(tensors)


def _references_of_an_unshared_buffer() -> int:
    """What sys.getrefcount says in _Replay.run for a buffer held by nothing but the replay's list:
    measured in the same way here, rather than assumed, since interpreters differ in what they count."""
    held = [object()]
    buffer = held[0]
    return sys.getrefcount(buffer)


_UNSHARED_REFERENCES = _references_of_an_unshared_buffer()


class _Replay:
    """The captured launches with each buffer resolved to a slot; runs them for new arguments."""

    def __init__(self, recording: engine.Recording, inputs: list[Tensor], outputs: list[Tensor]):
        # each argument's buffer (each shard's, in order, for a sharded one) -> its slot in run()'s list
        arguments = _argument_buffers(inputs)
        input_buffers = {id(buffer): index for index, buffer in enumerate(arguments)}
        if len(input_buffers) < len(arguments):
            raise JitError("jit: two tensor arguments share one buffer; pass distinct tensors")
        output_buffers = {}
        for index, tensor in enumerate(outputs):
            if isinstance(tensor.lazydata, MultiLazyBuffer):
                raise JitError(f"jit: output {index} is sharded over {tensor.device}; return it gathered on one "
                               f"device, e.g. `.to({tensor.device[0]!r})`")
            buffer_id = id(tensor.lazydata.buffer)
            if buffer_id in input_buffers:
                raise JitError(f"jit: output {index} is the tensor argument {input_buffers[buffer_id]} "
                               "(an input aliases an output); return a copy, e.g. x.clone()")
            output_buffers.setdefault(buffer_id, index)
        produced = {id(buffer) for launch in recording.launches
                    for buffer, in_place in zip(launch.buffers, launch.in_place) if not in_place}
        for index, tensor in enumerate(outputs):
            if id(tensor.lazydata.buffer) not in produced:
                raise JitError(f"jit: output {index} was not computed by the function (it returns a tensor it "
                               "did not make, or wrote it in place); return a copy, e.g. x.clone()")
        self._check_state_stays(recording, produced, input_buffers)
        # per output: (shape, dtype, device, number of elements) of the buffer each call allocates (a
        # complex output's: its pairs of floats), and whether it is complex
        self.output_allocations = [(tensor.lazydata.shape, tensor.lazydata.dtype, get_device(tensor.device),
                                    math.prod(tensor.lazydata.shape), tensor._complex) for tensor in outputs]
        self.previous_outputs: list = [None] * len(outputs)  # the buffers the last replay returned
        self.refills = recording.refills
        # each launch as (function, its arguments with the captured buffers in place, [(position, 0 for
        # an argument or 1 for an output, number, whether the function takes pointers)] to substitute
        # on every call, its sources when it is derived, (its program, the bytes it moves) for DEBUG=2
        # lines). A program that offers `call_with_pointers` (CPU) gets its buffers' pointers, looked
        # up here once instead of on every replay. The capture's argument buffers are not kept: every
        # call brings its own (an optimizer's update takes every gradient as an argument).
        self.steps: list[tuple[object, list, list[tuple[int, int, int, bool]], list | None, tuple]] = []
        derived = self._derived_launches(recording, input_buffers, output_buffers)
        kept = set(input_buffers) | set(output_buffers) | {id(buffer) for buffer, _ in recording.refills}
        kept |= {id(buffer) for launch in recording.launches if id(launch) in derived
                 for buffer in launch.buffers[:len(launch.in_place)]}
        self.shared_buffers = _share_intermediate_buffers(recording, kept)
        for launch in recording.launches:
            if launch.program is None and not launch.inputs:
                continue  # empty outputs: nothing to compute
            by_pointer = getattr(launch.program, "call_with_pointers", None) is not None
            if by_pointer:
                function, arguments = launch.program.call_with_pointers, [buffer.pointer for buffer in launch.buffers]
            else:
                function, arguments = launch.program or _copy, list(launch.buffers)
            substitutions = []
            for position, buffer in enumerate(launch.buffers):
                if id(buffer) in input_buffers:
                    substitutions.append((position, 0, input_buffers[id(buffer)], by_pointer))
                    arguments[position] = None
                elif id(buffer) in output_buffers:
                    substitutions.append((position, 1, output_buffers[id(buffer)], by_pointer))
            # a launch computed from state alone: [its source buffers, their versions when it last ran,
            # which is in this capture (or, kept by derived_values, for these very versions), the
            # buffers it writes]
            sources = [derived[id(launch)], [buffer.version for buffer in derived[id(launch)]],
                       launch.buffers[:len(launch.in_place)]] if id(launch) in derived else None
            described = (launch.compiled, sum(buffer.nbytes for buffer in launch.buffers))
            self.steps.append((function, arguments, substitutions, sources, described))
        # the captured buffers but the arguments', held so the memory that the pointers above point into stays theirs
        self.captured_buffers = [[buffer for buffer in launch.buffers if id(buffer) not in input_buffers]
                                 for launch in recording.launches]
        self.kernel_count = sum(1 for launch in recording.launches if launch.program is not None and not launch.host)
        self.rewritten = self._rewritten_buffers(recording, output_buffers, derived)

    @staticmethod
    def _derived_launches(recording: engine.Recording, input_buffers: dict[int, int],
                          output_buffers: dict[int, int]) -> dict[int, list]:
        """The launches (by id) that read only buffers the capture does not write, nor receives as
        arguments or refills (parameters: a convolution's weight copied into panels, a transposed
        linear weight), or buffers that such launches alone write (a weight transformed, then copied
        into panels), into buffers no other launch writes; each with the parameters it depends on.
        What they compute changes only when one of those does, and every write bumps a buffer's
        version (lazy.py; replays too): a replay skips such a launch while the versions of its
        parameters are those of its last run."""
        writes: dict[int, int] = {}
        for launch in recording.launches:
            for buffer in launch.buffers[:len(launch.in_place)]:
                writes[id(buffer)] = writes.get(id(buffer), 0) + 1
        changing = set(writes) | set(input_buffers) | {id(buffer) for buffer, _ in recording.refills}
        derived: dict[int, list] = {}
        roots: dict[int, list] = {}  # a buffer written by a derived launch -> the parameters behind it
        for launch in recording.launches:
            targets = launch.buffers[:len(launch.in_place)]
            if launch.program is None or launch.host or not launch.inputs or any(launch.in_place):
                continue
            if any(id(buffer) in changing and id(buffer) not in roots for buffer in launch.inputs):
                continue
            if any(writes[id(buffer)] > 1 or id(buffer) in output_buffers for buffer in targets):
                continue
            sources = {}
            for buffer in launch.inputs:
                for root in roots.get(id(buffer), [buffer]):
                    sources[id(root)] = root
            derived[id(launch)] = list(sources.values())
            for buffer in targets:
                roots[id(buffer)] = derived[id(launch)]
        return derived

    @staticmethod
    def _rewritten_buffers(recording: engine.Recording, output_buffers: dict[int, int],
                           derived: dict[int, list]) -> list[tuple[object, list]]:
        """Every buffer a replay writes again (state written in place, intermediates such as a
        parameter's .grad), with weak references to the tensors holding its current value: a replay
        bumps each buffer's version, so values built earlier from the old contents raise
        StaleValueError, and gives those tensors the new version, as an eager step would. Not the
        buffers of derived launches: a replay bumps those only when it runs the launch (values of
        parameters alone, which an eager graph built before the capture may read, unchanged while
        the replay skips it)."""
        written = {}
        for launch in recording.launches:
            if id(launch) in derived:
                continue
            for buffer in launch.buffers[:len(launch.in_place)]:
                if id(buffer) not in output_buffers:
                    written[id(buffer)] = buffer
        holders: dict[int, list] = {buffer_id: [] for buffer_id in written}  # (tensor, shard index or None)
        for thing in gc.get_objects():
            if issubclass(type(thing), Tensor) and thing.lazydata.realized:  # isinstance would ask proxies for __class__
                sharded = isinstance(thing.lazydata, MultiLazyBuffer)
                for index, node in enumerate(lazy_nodes(thing.lazydata)):
                    if id(node.buffer) in holders and node.buffer is written[id(node.buffer)] \
                            and node.version == node.buffer.version:
                        holders[id(node.buffer)].append((weakref.ref(thing), index if sharded else None))
        return [(buffer, holders[buffer_id]) for buffer_id, buffer in written.items()]

    @staticmethod
    def _check_state_stays(recording: engine.Recording, produced: set[int], input_buffers: dict[int, int]) -> None:
        """Every buffer that existed before the call and that the function read (parameters,
        optimizer state) must still be held by a tensor after it: if its holder was given a new
        buffer instead, a replay would read the old contents forever."""
        gc.collect()
        read = {}
        for launch in recording.launches:
            for buffer in launch.inputs:
                buffer_id = id(buffer)
                if buffer_id not in produced and buffer_id not in input_buffers \
                        and buffer_id not in recording.host_made:
                    read[buffer_id] = buffer
        # one scan of the heap for all of them (a scan per buffer cost ViT-B/16's 129 weights 112 ms)
        held = {id(ref.buffer) for ref in gc.get_referrers(*read.values()) if isinstance(ref, LazyBuffer)}
        for buffer_id, buffer in read.items():
            if buffer_id not in held:
                raise JitError(
                    f"jit: the function read a {buffer.dtype.name}[{buffer.size}] buffer on {buffer.device} that "
                    "no tensor holds after the call: a tensor it read was given a new value in a new buffer "
                    "(e.g. `w = w - lr * g`); write state with `w.assign(...)` so replays update it in place")

    def run(self, inputs: list[Tensor]) -> list[Tensor]:
        """Replay for `inputs` (realized and current); runs for every call, so plain loops only."""
        input_buffers = _argument_buffers(inputs)
        output_buffers = []
        for number, (shape, dtype, device, size, _) in enumerate(self.output_allocations):
            # The previous call's output again when nothing else refers to it (the caller dropped
            # the tensor, and no graph or weak reference holds its buffer): nobody can see it being
            # overwritten, and a loop that drops each result skips an allocation and a free per call.
            buffer = self.previous_outputs[number]
            if buffer is None or sys.getrefcount(buffer) != _UNSHARED_REFERENCES or weakref.getweakrefcount(buffer):
                buffer = self.previous_outputs[number] = device.alloc(dtype, size)
            output_buffers.append(buffer)
        sources = (input_buffers, output_buffers)
        if self.refills:  # the checks of empty lists are cheaper than entering loops over them
            for buffer, draw in self.refills:
                buffer.copyin(draw())
        skipped = 0
        timed = knobs.debug >= 2
        if timed:
            began, device_time = time.perf_counter(), 0.0
        for function, arguments, substitutions, derived, described in self.steps:
            if derived is not None:
                versions = [buffer.version for buffer in derived[0]]
                if versions == derived[1]:
                    skipped += 1
                    if timed:
                        print(f"  {described[0].name:<40} skipped (what it reads is unchanged)", file=sys.stderr)
                    continue
                derived[1] = versions
                for buffer in derived[2]:  # new contents; a skipped launch leaves them as they were
                    buffer.version += 1
            if substitutions:
                arguments = arguments.copy()
                for position, source, number, by_pointer in substitutions:
                    buffer = sources[source][number]
                    arguments[position] = buffer.pointer if by_pointer else buffer
            if timed:
                device_time += _timed(function, arguments, described)
            else:
                function(*arguments)
        if timed:
            print(f"replayed {self.kernel_count - skipped} kernel(s): {device_time * 1e3:.3f} ms in them, "
                  f"{(time.perf_counter() - began) * 1e3:.3f} ms in all", file=sys.stderr)
        if self.rewritten:
            for buffer, holders in self.rewritten:
                buffer.version += 1
                for reference, shard in holders:
                    tensor = reference()
                    if tensor is None:
                        continue
                    node = tensor.lazydata
                    if shard is None:
                        if node.__class__ is LazyBuffer and node.buffer is buffer:
                            tensor.lazydata = LazyBuffer.from_buffer(buffer, node.shape)
                    elif node.__class__ is MultiLazyBuffer and node.lbs[shard].buffer is buffer:
                        shards = list(node.lbs)
                        shards[shard] = LazyBuffer.from_buffer(buffer, shards[shard].shape)
                        tensor.lazydata = MultiLazyBuffer(shards, node.axis, node.bounds)
        stats.kernels += self.kernel_count - skipped
        results = []
        for buffer, (shape, _, _, _, is_complex) in zip(output_buffers, self.output_allocations):
            result = Tensor(LazyBuffer.from_buffer(buffer, shape))
            results.append(ComplexTensor._of_pairs(result) if is_complex else result)
        return results


def _timed(function, arguments: list, described: tuple) -> float:
    """Runs one step of a replay, prints its DEBUG=2 line when it is a kernel, and returns its time."""
    compiled, moved = described
    start = time.perf_counter()
    function(*arguments)
    if compiled is not None:
        synchronize(compiled.device)  # a CUDA launch returns before its kernel has run
    elapsed = time.perf_counter() - start
    if compiled is not None:
        engine.print_launch(compiled.name, compiled, elapsed, moved)
    return elapsed


def _reference_counts(candidates: dict[int, object]) -> dict[int, int]:
    return {key: sys.getrefcount(buffer) for key, buffer in candidates.items()}


def _references_beside_one_list() -> int:
    """What _reference_counts says, beyond the lists holding it, for an object that nothing but one
    list and the candidates dict holds: measured rather than assumed, as interpreters differ."""
    held = [object()]
    return _reference_counts({0: held[0]})[0] - 1


_REFERENCES_BESIDE_LAUNCHES = _references_beside_one_list()


def _share_intermediate_buffers(recording: engine.Recording, kept: set[int]) -> int:
    """Makes intermediates whose lifetimes do not overlap share buffers in the recorded launches, so
    a replay touches about as much memory as the eager call's live values (BERT's encoder: 163 MB
    in all instead of 488; the capture itself held every intermediate). An intermediate is a buffer
    that a kernel writes first (not in place), that nothing but the recording refers to when the
    capture ends (no tensor holds it: not an output, a parameter's .grad or state), that no copy
    touches, and whose id is not in `kept` (arguments, outputs, refilled buffers, targets of
    skippable launches). Once its last launch i has run, a buffer is free for the outputs of launch
    i + 1 on, of its device and dtype, taking the smallest free buffer that is big enough (a kernel
    writes and reads only its own elements). Returns the number of buffers no longer used."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    appearances: dict[int, int] = {}
    candidates: dict[int, object] = {}
    copied: set[int] = set()
    for index, launch in enumerate(recording.launches):
        for position, buffer in enumerate(launch.buffers):
            key = id(buffer)
            if launch.program is None:
                copied.add(key)
            if key not in first:
                first[key] = index
                if position < len(launch.in_place) and not launch.in_place[position] and key not in kept \
                        and buffer.size:
                    candidates[key] = buffer
            last[key] = index
            appearances[key] = appearances.get(key, 0) + 1
    del buffer
    counts = _reference_counts(candidates)
    unshared = {key: buffer for key, buffer in candidates.items()
                if key not in copied and counts[key] == appearances[key] + _REFERENCES_BESIDE_LAUNCHES}
    by_first: dict[int, list[int]] = {}
    for key in unshared:
        by_first.setdefault(first[key], []).append(key)
    free: dict[tuple, list] = {}      # (device, dtype) -> buffers whose last launch has run
    ending: dict[int, list] = {}      # launch index -> (kind, buffer) free after it
    replacement: dict[int, object] = {}
    for index in range(len(recording.launches)):
        for key in by_first.get(index, ()):
            buffer = unshared[key]
            kind = (buffer.device, buffer.dtype)
            fitting = [candidate for candidate in free.get(kind, ()) if candidate.size >= buffer.size]
            if fitting:
                shared = min(fitting, key=lambda candidate: candidate.size)
                free[kind].remove(shared)
                replacement[key] = shared
            else:
                shared = buffer
            ending.setdefault(last[key], []).append((kind, shared))
        for kind, shared in ending.pop(index, ()):
            free.setdefault(kind, []).append(shared)
    for launch in recording.launches:
        buffers = launch.buffers
        for position in range(len(buffers)):
            shared = replacement.get(id(buffers[position]))
            if shared is not None:
                buffers[position] = shared
    return len(replacement)


def _copy(destination, source) -> None:
    destination.copyin(source.array)


class TinyJit:
    """The jitted function (see the module docstring); `reset()` forgets the capture."""

    def __init__(self, function):
        self.function = function
        functools.update_wrapper(self, function)
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.signature: list[tuple] | None = None
        self.replay: _Replay | None = None
        self.output_template = None
        self.not_replayable: str | None = None  # why every call runs the function, if it does

    def __get__(self, instance, owner=None):
        return self if instance is None else functools.partial(self.__call__, instance)

    def __call__(self, *args, **kwargs):
        if PENDING_ASSIGNS and self.replay is not None:
            # assigns made before this call (a batch norm's running statistics in an eager step) run
            # before the replay writes the buffers they read, as they would before a plain call's
            realize_effects([])
        if self.replay is not None and not kwargs and self._replays_as_captured(args):
            self.calls += 1
            return _rebuild_outputs(self.output_template, self.replay.run(args))
        signature, inputs = _signature(args, kwargs)
        if self.signature is not None and signature != self.signature:
            raise JitError(f"jit: {self.function.__name__} was captured for other arguments: "
                           f"{_describe_difference(self.signature, signature)}; call reset() to capture again")
        self.signature = signature
        self.calls += 1
        if self.replay is not None:
            return _rebuild_outputs(self.output_template, self.replay.run(self._realized(inputs)))
        if self.calls == 1 or self.not_replayable is not None:
            return self._run_plainly(args, kwargs)
        return self._capture(args, kwargs, inputs)

    def _replays_as_captured(self, args: tuple) -> bool:
        """The replay's fast check, one loop instead of building the call's signature: every argument
        is a tensor in the captured position with the captured shape, dtype and device, holding a
        current buffer. False sends the call down the general path, which compares every argument,
        realizes pending ones and says what differs."""
        signature = self.signature
        if len(args) != len(signature):
            return False
        for position, (value, (name, kind, captured)) in enumerate(zip(args, signature)):
            if name != position or kind != "tensor" or not isinstance(value, Tensor):
                return False
            node = value.lazydata
            if node.__class__ is not LazyBuffer or node.op is not Ops.BUFFER or node.buffer is None or node.buffer.version != node.version:
                return False
            if node.shape != captured[0] or node.dtype is not captured[1] or node.device != captured[2]:
                return False
        return True

    @staticmethod
    def _realized(inputs: list[Tensor]) -> list[Tensor]:
        pending = []
        for tensor in inputs:
            if any(node.buffer is None or node.op is not Ops.BUFFER for node in lazy_nodes(tensor.lazydata)):
                pending.append(tensor)
        if pending:
            Tensor.realize(*pending)
        for tensor in inputs:
            for node in lazy_nodes(tensor.lazydata):
                if node.buffer.version != node.version:
                    node.check_current()  # raises StaleValueError
        return inputs

    def _run_plainly(self, args, kwargs):
        result = self.function(*args, **kwargs)
        realize_effects(_flatten_outputs(result))
        return result

    def _capture(self, args, kwargs, inputs: list[Tensor]):
        self._realized(inputs)
        realize_effects([])  # assigns made before this call belong to no replay
        engine.recording = recording = engine.Recording()
        try:
            result = self.function(*args, **kwargs)
            outputs = _flatten_outputs(result)
            realize_effects(outputs)
        finally:
            engine.recording = None
        if recording.not_replayable is not None:
            self.not_replayable = recording.not_replayable
            return result
        self.replay = _Replay(recording, inputs, outputs)
        self.output_template = result
        return result


def realize_effects(outputs: list[Tensor]) -> None:
    """Realize the outputs and every pending assign: a function's assigns are its side effects, so
    they run in the call that made them (and, captured, in every replay). lazygrad.export's capture
    calls it too."""
    realize([node for node in PENDING_ASSIGNS.values() if not node.realized]
            + [node for tensor in outputs for node in lazy_nodes(tensor.lazydata)])
    PENDING_ASSIGNS.clear()
    if outputs:
        Tensor.realize(*outputs)


def jit(function):
    """Decorate a function of Tensors for capture and replay (see lazygrad.jit's docstring)."""
    return TinyJit(function)


class KeptJits:
    """What a caller keeps per call signature (a model's input shapes, an optimizer's tensors and
    settings): usually the signature's jit, or None where the signature runs plainly; the `kept`
    signatures used last, each with its capture's buffers (lazygrad.onnx's replays, nn's update
    replays)."""

    def __init__(self, kept: int):
        self.kept = kept
        self.entries: OrderedDict[tuple, object] = OrderedDict()

    def use(self, key: tuple, make) -> tuple[object, bool]:
        """(the entry of `key`, whether it is new: made by `make()`), now the most recently used."""
        if key in self.entries:
            self.entries.move_to_end(key)
            return self.entries[key], False
        entry = self.entries[key] = make()
        if len(self.entries) > self.kept:
            self.entries.popitem(last=False)
        return entry, True

    def set(self, key: tuple, entry) -> None:
        self.entries[key] = entry
