"""The operator table of lazygrad.onnx: one Python function per ONNX operator, and the context it runs in.

An operator module registers its functions with `@onnx_op("Relu")`. model.py calls each one as
`function(ctx, *inputs, **attributes)`: inputs are Tensors (None for an omitted optional input,
lists of Tensors for sequences), attributes are the node's attributes by their ONNX names, and
`ctx` gives the opset version, the device and concrete values of small inputs (shapes, axes).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from lazygrad.tensor import Tensor
from lazygrad.tensor_methods.creation import host_generator

OPERATORS: dict[tuple[str, str], Callable] = {}
DRAWING_OPERATORS: set[tuple[str, str]] = set()  # their outputs are random draws: never folded into constants
DEFAULT_DOMAINS = ("", "ai.onnx")


def onnx_op(*op_types: str, domain: str = "", draws: bool = False):
    """Register the decorated function as the implementation of the given ONNX operators; `draws`
    marks operators whose outputs are random, which must run on every call, not once as constants."""
    def register(function: Callable) -> Callable:
        for op_type in op_types:
            OPERATORS[(domain, op_type)] = function
            if draws:
                DRAWING_OPERATORS.add((domain, op_type))
        return function
    return register


def find_operator(domain: str, op_type: str) -> Callable | None:
    domain = "" if domain in DEFAULT_DOMAINS else domain
    return OPERATORS.get((domain, op_type))


def draws_random(domain: str, op_type: str) -> bool:
    return ("" if domain in DEFAULT_DOMAINS else domain, op_type) in DRAWING_OPERATORS


class OpContext:
    """What an operator may ask about the node it runs: opset, device, node name, concrete values."""

    def __init__(self, runner, node, opset: int, scope: dict, device: str | None = None):
        self.runner = runner
        self.node = node
        self.opset = opset
        self.device = device or runner.device  # NPY while constant inputs are folded
        self.scope = scope  # the values visible to the node, which subgraph bodies may read

    def generator(self, seed) -> np.random.Generator:
        """The generator a random operator draws from: with an ONNX `seed` attribute, the node's own,
        seeded once when the model first runs it and continuing from call to call (as ONNX Runtime
        does); without, the one behind Tensor.rand (lazygrad.manual_seed)."""
        if seed is None:
            return host_generator()
        generators = self.runner.generators
        key = tuple(self.node.output)  # names every run agrees on (protobuf makes a new node object per access)
        if key not in generators:
            # the attribute is a float (an int in Dropout's oldest opsets): its bits seed the generator
            generators[key] = np.random.default_rng(int(np.float64(seed).view(np.uint64)))
        return generators[key]

    def numpy(self, tensor: Tensor) -> np.ndarray:
        """The value of a (small) input as numpy: folded constants are free, others are realized."""
        return self.runner.concrete(tensor)

    def ints(self, tensor: Tensor | None) -> list[int] | None:
        if tensor is None:
            return None
        return [int(value) for value in self.numpy(tensor).reshape(-1)]

    def scalar(self, tensor: Tensor | None, default=None):
        if tensor is None:
            return default
        return self.numpy(tensor).reshape(-1)[0].item()

    def known_scalar(self, tensor: Tensor | None):
        """The value of a known one-element constant (an initializer, a folded value) as a Python
        number, else None: an operator can then use it as a constant in the kernel instead of a load."""
        if tensor is None or not self.runner.is_known(tensor) or tensor.numel() != 1:
            return None
        return self.numpy(tensor).reshape(-1)[0].item()

    def number_or_scalar(self, tensor: Tensor):
        """A one-element input as the number it is where known (an initializer), else as a 0-d
        Tensor: a number is a constant in the kernels, where a one-byte zero point loaded inside a
        loop kept gcc 12 from vectorizing it (a quantized ResNet-50's residual epilogues, 2.9 ms
        scalar at 56x56; a quantized transformer's quantize-dequantize pairs)."""
        known = self.known_scalar(tensor)
        return tensor.reshape(()) if known is None else known

    def known_zeros(self, tensor: Tensor | None) -> bool:
        """Whether tensor is absent or a known constant of zeros (a zero point per channel, all 0)."""
        return tensor is None or self.runner.is_known(tensor) and not self.numpy(tensor).any()

    def declared_type(self, index: int) -> int | None:
        """The ONNX element type the model declares for the node's index-th input, if it does."""
        if index >= len(self.node.input):
            return None
        return self.runner.declared_types.get(self.node.input[index])

    def const(self, array, dtype=None) -> Tensor:
        """A Tensor on the node's device whose value later operators can read without running it."""
        array = np.asarray(array) if dtype is None else np.asarray(array, dtype=dtype)
        return self.runner.constant(array, self.device)

    def run_graph(self, graph, inputs: list, outer: dict) -> list:
        """Run a subgraph attribute (If, Loop, Scan bodies) with the given inputs and outer scope."""
        return self.runner.run_subgraph(graph, inputs, outer)
