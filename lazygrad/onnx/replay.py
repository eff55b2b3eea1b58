"""Replays of an OnnxModel's kernels: from the fourth call with inputs of the same shapes, dtypes and
devices, `OnnxModel.run` launches the kernels its third call captured (lazygrad.jit) instead of
walking the graph again. The first call walks the graph and returns lazy Tensors, as a model run
once should; the second walks it too, through the jit, and realizes them.

Part of the front door: model.py's `run` passes every call through `Replays.run`, so every caller
gets the replay without writing a jit. Walking a graph builds thousands of Tensor ops, and for a
small network that Python costs ten times its kernels (MobileNetV2 through ONNX: 24 ms a call,
2.2 ms of them kernels). A call runs the graph plainly, as without this module, when a replay could
not reproduce it:
  * gradients are wanted: an input or an initializer requires grad (a replay builds no graph);
  * an input is a sequence or left out, or an initializer is given as an input;
  * a capture of the caller's own is recording (its jit, lazygrad.export): it must see the kernels;
  * the model reads a value it computed as numbers (an If condition, NonZero's positions, a shape
    computed from data): OnnxModel.concrete records the dependence, and the jit runs such a
    signature plainly from then on;
  * the capture fails (an output that is an input or a folded constant, a sequence output).
The calls after the first return what the jit returns: new realized Tensors on every call. The
captures of the last KEPT_SIGNATURES input signatures are kept, each with its intermediate buffers.
"""
from __future__ import annotations

import weakref

from lazygrad import realize as engine
from lazygrad.jit import JitError, KeptJits, jit
from lazygrad.tensor import Tensor

KEPT_SIGNATURES = 4  # input signatures (shapes, dtypes, devices) whose captures a model keeps
WALKED_ONCE = "walked once"  # a signature called once: its next call starts the jit


class Replays:
    """A model's jit per input signature; `run` calls the model through it. It holds the model only
    weakly, so a model and its captures' buffers go as soon as the caller drops the model."""

    def __init__(self):
        # signature -> WALKED_ONCE, its jit, or None where it runs plainly (a capture that failed)
        self.jits = KeptJits(KEPT_SIGNATURES)

    def run(self, model, values: dict, overridden: bool) -> dict:
        """The model's outputs for its input values (Tensors by name); `overridden`: an initializer
        is given as an input. The first call of a signature walks the graph and returns lazy
        Tensors, which the caller may fuse on; the later ones go through the signature's jit (a
        plain call realizing the outputs, the capture, then replays)."""
        names = [info.name for info in model.inputs]
        tensors = [values[name] for name in names]
        if overridden or not _replayable(model, tensors):
            return model.run_graph(values)
        key = tuple((tensor.shape, tensor.dtype, tensor.device) for tensor in tensors)
        jitted, new = self.jits.use(key, lambda: WALKED_ONCE)
        if new or jitted is None:
            return model.run_graph(values)
        if jitted is WALKED_ONCE:
            jitted = jit(_graph_function(weakref.ref(model), names))
            self.jits.set(key, jitted)
        try:
            outputs = jitted(*tensors)
        except JitError:
            self.jits.set(key, None)
            return model.run_graph(values)
        return dict(zip((info.name for info in model.outputs), outputs))


def _replayable(model, tensors: list) -> bool:
    if engine.recording is not None:
        return False
    for tensor in tensors:
        if not isinstance(tensor, Tensor) or tensor.requires_grad:
            return False
    return not any(tensor.requires_grad for tensor in model.initializers.values())


def _graph_function(model_reference: weakref.ref, names: list[str]):
    """The walk of the graph as a function of the input Tensors in order, returning the outputs."""
    def graph(*tensors: Tensor) -> tuple:
        model = model_reference()
        outputs = model.run_graph(dict(zip(names, tensors)))
        return tuple(outputs[info.name] for info in model.outputs)
    return graph
