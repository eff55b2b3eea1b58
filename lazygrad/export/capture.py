"""Runs the function to export as the jit captures it and sorts what it touched; the first step of
lazygrad.export (capture -> arena.py plans the intermediates -> c_source.py writes the files).

The function runs once plainly (compiling its kernels, realizing parameters created lazily), then
once more under `realize.Recording`, which lists every launch: its kernel and its buffers, outputs
first. Each buffer is then one of
  * an input: the buffer of an example input (a pointer argument of the C entry point),
  * an output: the buffer of a returned tensor (a writable pointer argument),
  * a constant: read and never written, realized before the call (parameters, buffers made from
    host data); its values at export time go into the file,
  * an intermediate: written by a launch and not returned (a place in the arena).
A launch that reads only constants, at least one, and writes buffers nothing else writes is a
function of the parameters alone (a convolution's weight copied into panels, a linear layer's
transposed weight, an eval-mode batch norm's scale and shift): its outputs, already computed by
the capture, become constants in its stead when they are no larger than what it reads
(`folded`), so the exported file does not repeat that work on every call.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lazygrad import realize as engine
from lazygrad.codegen.kernel import Kernel
from lazygrad.dtype import STORAGE_WIDE, DType, dtypes
from lazygrad.jit import TinyJit, realize_effects
from lazygrad.tensor import Tensor, no_grad


class ExportError(RuntimeError):
    """A function that lazygrad.export cannot turn into a C file; the message says why and what to do."""


@dataclass
class Step:
    """One kernel launch of the exported function, in order: its buffers are the kernel's
    parameters (outputs first, then inputs)."""
    kernel: Kernel
    buffers: list


@dataclass
class Capture:
    steps: list[Step]
    inputs: list                        # buffers of the example inputs, in argument order
    outputs: list                       # buffers of the returned tensors, in order
    input_shapes: list[tuple[int, ...]]
    output_shapes: list[tuple[int, ...]]
    constants: list                     # in order of first use by a step
    intermediates: list                 # in order of first use by a step
    folded: int = 0                     # launches computed at export time (see the module docstring)
    constant_values: dict[int, np.ndarray] = field(default_factory=dict)  # id(buffer) -> its values


def _as_tensor(value, position: int) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        return Tensor(value, device="CPU")
    raise ExportError(f"export: example input {position} is a {type(value).__name__}; give Tensors or numpy arrays")


def _returned_tensors(result) -> list[Tensor]:
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and result and all(isinstance(item, Tensor) for item in result):
        return list(result)
    raise ExportError(f"export: the function must return a Tensor or a non-empty tuple or list of Tensors; "
                      f"got {type(result).__name__}")


def _device_kind(device: str) -> str:
    return device.split(":")[0]


def _check_exportable_dtype(dtype: DType, what: str) -> None:
    if dtype == dtypes.float16 or dtype in STORAGE_WIDE:
        raise ExportError(f"export: {what} is {dtype.name}, which has no C99 type; export the model in float32 "
                          "(cast its parameters and inputs with .float())")


def record_launches(function, inputs: list[Tensor]) -> tuple[engine.Recording, list[Tensor]]:
    """Runs function(*inputs) plainly, then again under a recording; returns the recording and the
    returned tensors of the recorded call."""
    Tensor.realize(*inputs)
    realize_effects([])  # assigns made before the export belong to no call
    with no_grad():  # a C file computes values only: no layer keeps what a backward pass would need
        realize_effects(_returned_tensors(function(*inputs)))
        engine.recording = recording = engine.Recording()
        try:
            outputs = _returned_tensors(function(*inputs))
            realize_effects(outputs)
        finally:
            engine.recording = None
    return recording, outputs


def capture(function, example_inputs) -> Capture:
    """Traces function on example_inputs (a Tensor or numpy array, or a list or tuple of them) and
    sorts its launches' buffers (see the module docstring); raises ExportError for what a C file
    cannot hold."""
    if isinstance(function, TinyJit):  # its replays launch without the engine: capture what it wraps
        function = function.function
    if isinstance(example_inputs, (Tensor, np.ndarray)):
        example_inputs = [example_inputs]
    inputs = [_as_tensor(value, position) for position, value in enumerate(example_inputs)]
    for position, tensor in enumerate(inputs):
        if _device_kind(tensor.device) != "CPU":
            raise ExportError(f"export: example input {position} is on {tensor.device}; the exported C runs the "
                              "CPU device's kernels: give inputs (and the model's parameters) on CPU")
        _check_exportable_dtype(tensor.dtype, f"example input {position}")
    recording, outputs = record_launches(function, inputs)
    # (A graph that ran on NPY inside the function, an ONNX model's shape arithmetic folded into
    # constants, is no obstacle: its results reach the kernels as buffers made from host data, and
    # a kernel reading an NPY buffer directly is a copy between devices, refused below.)
    if recording.data_dependent is not None:
        raise ExportError(f"export: {recording.data_dependent}, so the function is no fixed list of kernels; "
                          "export a function whose shapes the inputs' shapes decide")
    if recording.refills:
        raise ExportError("export: the function draws random numbers (rand, randn, dropout in training mode, ...), "
                          "which the C file cannot repeat; draw them outside and pass them as inputs, or call "
                          "model.eval() so dropout does nothing")
    return sort_buffers(recording, inputs, outputs)


def sort_buffers(recording: engine.Recording, inputs: list[Tensor], outputs: list[Tensor]) -> Capture:
    """The steps of a recording and its buffers sorted into inputs, outputs, constants and
    intermediates, with launches of constants alone folded (module docstring)."""
    input_buffers = [tensor.lazydata.buffer for tensor in inputs]
    input_ids = {id(buffer) for buffer in input_buffers}
    if len(input_ids) < len(input_buffers):
        raise ExportError("export: two example inputs share one buffer; pass distinct tensors")
    launches = _kernel_launches(recording)
    writes = _count_writes(launches, input_ids)
    output_buffers = _output_buffers(outputs, input_ids, writes)
    output_ids = {id(buffer) for buffer in output_buffers}
    constant_ids = {id(buffer) for launch in launches for buffer in launch.inputs
                    if id(buffer) not in writes and id(buffer) not in input_ids}
    steps, folded = [], 0
    for launch in launches:
        if _computes_from_constants(launch, constant_ids, writes, output_ids):
            constant_ids.update(id(buffer) for buffer in launch.buffers[:len(launch.in_place)])
            folded += 1
        else:
            steps.append(Step(launch.kernel, list(launch.buffers)))
    constants, intermediates, seen = [], [], set(input_ids) | output_ids
    for step in steps:
        for buffer in step.buffers:
            if id(buffer) not in seen:
                seen.add(id(buffer))
                (constants if id(buffer) in constant_ids else intermediates).append(buffer)
    values = {id(buffer): buffer.array[:buffer.size].copy() for buffer in constants}
    return Capture(steps, input_buffers, output_buffers, [tuple(tensor.shape) for tensor in inputs],
                   [tuple(tensor.shape) for tensor in outputs], constants, intermediates, folded, values)


def _kernel_launches(recording: engine.Recording) -> list[engine.Launch]:
    """The launches that run a kernel, each on the CPU device with exportable dtypes."""
    launches = []
    for launch in recording.launches:
        if launch.host:
            raise ExportError(f"export: the function runs the host step {launch.host} (lazygrad.distributed), which a "
                              "C file cannot; export the model alone, without collectives")
        if launch.program is None and launch.inputs:
            raise ExportError("export: the function copies a tensor between devices; keep the model and its inputs "
                              "on the CPU device")
        if launch.program is None:  # outputs of no elements: nothing to run
            continue
        for buffer in launch.buffers:
            if _device_kind(buffer.device) != "CPU":
                raise ExportError(f"export: a kernel runs on {buffer.device}; the exported C runs the CPU device's "
                                  "kernels: move the model and its inputs to CPU")
            _check_exportable_dtype(buffer.dtype, f"a buffer of kernel {launch.kernel.name}")
        launches.append(launch)
    if not launches:
        raise ExportError("export: the function launched no kernels (it returns its inputs or constants as they "
                          "are); there is nothing to export")
    return launches


def _count_writes(launches: list[engine.Launch], input_ids: set[int]) -> dict[int, int]:
    """How many launches write each buffer (by id); refuses a write in place into a buffer that
    existed before the call (an input, a parameter, a running statistic)."""
    writes: dict[int, int] = {}
    for launch in launches:
        for buffer, in_place in zip(launch.buffers, launch.in_place):
            if in_place and id(buffer) not in writes:
                what = "an input" if id(buffer) in input_ids else "state that existed before the call"
                raise ExportError(f"export: the function writes {what} in place (assign, or a batch norm in training "
                                  "mode updating its running statistics); the exported function keeps no state: "
                                  "call model.eval(), or export a function without assign")
            writes[id(buffer)] = writes.get(id(buffer), 0) + 1
    return writes


def _output_buffers(outputs: list[Tensor], input_ids: set[int], writes: dict[int, int]) -> list:
    """The returned tensors' buffers: each computed by the function, and each once."""
    buffers = []
    for position, tensor in enumerate(outputs):
        buffer = tensor.lazydata.buffer
        if id(buffer) in input_ids:
            raise ExportError(f"export: output {position} is an example input returned as it is; return a copy "
                              "(x.clone()) or leave it out")
        if id(buffer) not in writes:
            raise ExportError(f"export: output {position} was not computed by the function (it returns a parameter or "
                              "constant as it is); return a copy (x.clone()) or leave it out")
        if any(buffer is other for other in buffers):
            raise ExportError(f"export: output {position} is the same tensor as an earlier output; return it once")
        buffers.append(buffer)
    return buffers


def _computes_from_constants(launch: engine.Launch, constant_ids: set[int], writes: dict[int, int],
                             output_ids: set[int]) -> bool:
    """Whether a launch is folded: it reads constants only (at least one), writes buffers that no
    other launch writes and that are not returned, and no more bytes than it reads."""
    targets, sources = launch.buffers[:len(launch.in_place)], launch.inputs
    return (bool(sources) and all(id(buffer) in constant_ids for buffer in sources) and not any(launch.in_place)
            and all(writes[id(buffer)] == 1 and id(buffer) not in output_ids for buffer in targets)
            and sum(buffer.nbytes for buffer in targets) <= sum(buffer.nbytes for buffer in sources))
