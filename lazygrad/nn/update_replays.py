"""Replays of an optimizer's update kernels; front-end layer, under optim.py's `Optimizer.step`.

An eager training step builds its optimizer's update as lazy Tensor ops, a dozen per parameter, and
schedules them, every step; for a small model that Python costs more than all the step's kernels
(the digits CNN's Adam: 45% of an eager step). The update is a function of the gradients alone,
given the optimizer's tensors and settings, so `UpdateReplays.run` passes it through a
`lazygrad.jit` kept per signature: the first step with a signature runs plainly, the second is
captured, and later ones launch the captured kernels on the new gradients' buffers, writing the
parameters and optimizer state in place as the plain step does.

The signature is what the captured kernels depend on: the optimizer's class and settings (betas,
momentum, weight decay: every attribute holding a plain value, except the learning rate, which the
kernels read from the device), the buffer of every tensor it holds (parameters, their state, the
step counters), which parameters have a gradient (its shape, dtype and device) and which gradients
share a buffer. A step runs plainly, as without this module, when a replay could not reproduce it:
  * a tensor the optimizer holds is not a realized buffer at its current version (an assign not
    yet realized);
  * a gradient's buffer is one the optimizer holds (the update would read what it writes);
  * a capture of the caller's own is recording (its jit, lazygrad.export): it must see the kernels;
  * the optimizer's update rule is not this package's (a subclass overriding `_updates`);
  * the capture failed (the engine wrote a parameter into a new buffer instead of in place);
  * signatures churn: after CHURN_CAPTURES captures, if they outnumber the replays, every later
    step runs plainly (a different set of gradients every step or two would otherwise pay for a
    capture, a scan of the heap, again and again).
The captures of the last KEPT_SIGNATURES signatures are kept; a `load_state_dict` into the model
gives its parameters new buffers, hence a new signature.
"""
from __future__ import annotations

import weakref

from lazygrad import realize as engine
from lazygrad.jit import JitError, KeptJits, jit
from lazygrad.multi import lazy_nodes
from lazygrad.ops import Ops
from lazygrad.tensor import Tensor

KEPT_SIGNATURES = 4
# captures after which, if they outnumber the replays, every step runs plainly: signatures that churn
# (a different set of gradients every step or two) would pay a capture (a heap scan, 30-100 ms) each
CHURN_CAPTURES = 8
_PLAIN = (bool, int, float, str, type(None))
_CHANGING = frozenset({"_lr", "_step_scalars", "_replays"})  # read from the device, or rebuilt every step


class UpdateReplays:
    """An optimizer's update jit per signature. Holds the optimizer only weakly (the jits belong to it)."""

    def __init__(self):
        # signature -> its jit, or None where the signature runs plainly (a capture that failed)
        self.jits = KeptJits(KEPT_SIGNATURES)
        self.captures = self.replays = 0
        self.churned = False  # captures outnumbered replays: plain from then on

    def run(self, optimizer, replayable: bool) -> None:
        """Write the updates for the parameters' realized gradients."""
        replayable = replayable and not self.churned and engine.recording is None
        signature = _signature(optimizer) if replayable else None
        if signature is None:
            optimizer._write_updates()
            return
        key, arguments = signature
        jitted, _ = self.jits.use(key, lambda: jit(_update_function(weakref.ref(optimizer))))
        if jitted is None:
            optimizer._write_updates()
            return
        try:
            jitted(*arguments)
        except JitError:  # raised by the capture once the step has run: marked, not run again
            self.jits.set(key, None)
        if jitted.calls == 2:
            self.captures += 1
        elif jitted.replay is not None:
            self.replays += 1
        if self.captures >= CHURN_CAPTURES and self.captures > self.replays:
            self.churned = True
            self.jits.entries.clear()


def _update_function(optimizer_reference: weakref.ref):
    """The update as the jit sees it: a function of the gradients, which it reads through `.grad`;
    its arguments tell the jit which buffers a replay takes from the call."""
    def update(*gradients: Tensor) -> None:
        optimizer_reference()._write_updates()
    return update


def _signature(optimizer) -> tuple[tuple, list[Tensor]] | None:
    """(key, the gradients with distinct buffers) or None where the step must run plainly."""
    held: set[int] = set()  # the buffers of the tensors the optimizer holds
    settings = []
    for name, value in vars(optimizer).items():
        if name in _CHANGING:
            continue
        if isinstance(value, _PLAIN) or (isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value)):
            settings.append((name, value))
            continue
        tensors = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if tensors is None or not all(isinstance(tensor, Tensor) for tensor in tensors):
            settings.append((name, id(value)))  # what else the optimizer holds, by identity
            continue
        buffers = []
        for tensor in tensors:
            for node in lazy_nodes(tensor.lazydata):
                if node.op is not Ops.BUFFER or node.buffer is None or node.version != node.buffer.version:
                    return None
                buffers.append(id(node.buffer))
                held.add(id(node.buffer))
        settings.append((name, tuple(buffers)))
    distinct: dict[int, int] = {}  # a gradient's buffer -> its argument's position
    arguments, layout = [], []
    for position, param in enumerate(optimizer.params):  # which parameters have one, not just how many
        gradient = param.grad
        if gradient is None:
            continue
        nodes = lazy_nodes(gradient.lazydata)
        first = id(nodes[0].buffer)
        if any(id(node.buffer) in held for node in nodes):
            return None
        if first not in distinct:
            distinct[first] = len(arguments)
            arguments.append(gradient)
        node = gradient.lazydata
        layout.append((position, distinct[first], node.shape, node.dtype, gradient.device))
    return (type(optimizer), tuple(settings), tuple(layout)), arguments
