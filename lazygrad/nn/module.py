"""Module, the base of every layer, and the containers Sequential, ModuleList and Identity; front-end layer.

A Module holds tensors as plain attributes: nothing registers them, `lazygrad.nn.state` finds them by
walking attributes, lists and dicts. `train()`/`eval()` set `training` on the module and everything
below it; `state_dict()`/`load_state_dict()` and `parameters()` delegate to `lazygrad.nn.state`.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.nn.state import named_children, get_parameters, get_state_dict, load_state_dict
from lazygrad.tensor import Tensor


def _parameter(array: np.ndarray, dtype=None, device=None) -> Tensor:
    """A trainable tensor holding a copy of array (a realized buffer, never a lazy constant, so the
    optimizer's first step compiles the same kernels as every later step)."""
    return Tensor(np.asarray(array), dtype=dtype or dtypes.default_float, device=device, requires_grad=True)


def _uniform(shape: tuple[int, ...], bound: float, dtype=None, device=None) -> Tensor:
    """A parameter drawn uniformly from [-bound, bound) with the generator seeded by manual_seed."""
    unit = Tensor.rand(*shape).numpy().astype(np.float64)
    return _parameter((unit * 2 - 1) * bound, dtype, device)


def _repeated(value, count: int) -> tuple[int, ...]:
    """An int as a tuple of count copies of it; a tuple or list as a tuple."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * count


class Module:
    """Base class of layers: `model(x)` calls `forward(x)`; `train()`/`eval()` set `training` on this
    module and every module inside it (attributes, lists, tuples and dicts are searched)."""
    training: bool = True

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def modules(self) -> list["Module"]:
        """This module and every module inside it, each once, parents before children."""
        found, seen = [], set()

        def visit(obj) -> None:
            if id(obj) in seen:
                return
            seen.add(id(obj))
            if isinstance(obj, Module):
                found.append(obj)
            for _, child in named_children(obj):
                if isinstance(child, (Module, list, tuple, dict)):
                    visit(child)

        visit(self)
        return found

    def train(self, mode: bool = True) -> "Module":
        for module in self.modules():
            module.training = mode
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def parameters(self) -> list[Tensor]:
        return get_parameters(self)

    def state_dict(self) -> dict[str, Tensor]:
        return get_state_dict(self)

    def load_state_dict(self, state: dict[str, Tensor], strict: bool = True):
        return load_state_dict(self, state, strict)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        children = [(name, child) for name, child in named_children(self) if isinstance(child, Module)]
        if not children:
            return f"{type(self).__name__}({self.extra_repr()})"
        lines = [f"  ({name}): " + repr(child).replace("\n", "\n  ") for name, child in children]
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"


class Sequential(Module):
    """Layers applied in order. Children are named "0", "1", ... (or by an OrderedDict's keys), so
    parameter names match PyTorch's (`0.weight`)."""

    def __init__(self, *layers):
        if len(layers) == 1 and isinstance(layers[0], (dict, OrderedDict)):
            named = list(layers[0].items())
        else:
            named = [(str(index), layer) for index, layer in enumerate(layers)]
        for name, layer in named:
            setattr(self, name, layer)
        self._names = [name for name, _ in named]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Sequential(*[getattr(self, name) for name in self._names[index]])
        return getattr(self, self._names[index])

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self):
        return (getattr(self, name) for name in self._names)

    def forward(self, x):
        for layer in self:
            x = layer(x)
        return x


class ModuleList(Module):
    """A list of modules named "0", "1", ... as in PyTorch (a plain Python list attribute works too)."""

    def __init__(self, modules=()):
        self._names: list[str] = []
        for module in modules:
            self.append(module)

    def append(self, module) -> "ModuleList":
        name = str(len(self._names))
        setattr(self, name, module)
        self._names.append(name)
        return self

    def __getitem__(self, index):
        return getattr(self, self._names[index])

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self):
        return (getattr(self, name) for name in self._names)


class Identity(Module):
    def __init__(self, *args, **kwargs):
        pass

    def forward(self, x):
        return x
