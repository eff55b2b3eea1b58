"""Creation of Tensors: full, zeros, ones, arange, linspace, eye, rand, randn, randint, the init helpers
(uniform, normal, kaiming_uniform, glorot_uniform) and the *_like forms.

Front-end layer, a mixin of lazygrad.tensor.Tensor. Random numbers are drawn on the host with numpy
(`manual_seed` seeds them), so every device gets the same numbers.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from lazygrad.devices import canonical_device
from lazygrad.dtype import DType, dtypes, scalar_dtype
from lazygrad.lazy import LazyBuffer
from lazygrad.tensor_methods.helpers import _check_scalar_fits, _int_argument, _shape_argument

if TYPE_CHECKING:  # only for annotations: tensor.py imports this module
    from lazygrad.tensor import Tensor

_rng = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Seed the generator behind rand/randn (numbers are drawn on the host: same on every device)."""
    global _rng
    _rng = np.random.default_rng(seed)


def host_generator() -> np.random.Generator:
    """The generator behind rand/randn, as manual_seed last set it."""
    return _rng


def random_tensor(draw, device) -> "Tensor":
    """A tensor of `draw()` (numbers from the global generator). Under a jit capture the buffer is
    recorded with `draw`, so each replay draws new numbers, continuing the same stream."""
    from lazygrad.realize import record_refill
    from lazygrad.tensor import Tensor
    if isinstance(device, (tuple, list)):  # drawn once, then copied: the same numbers on each device
        return random_tensor(draw, device[0]).to(tuple(device))
    result = Tensor(draw(), device=device).realize()
    record_refill(result.lazydata.buffer, draw)
    return result


def _shape_then_values(args: tuple, values: tuple, op: str) -> tuple[tuple[int, ...], tuple]:
    """Split `f(2, 3)` / `f((2, 3), a, b)`: a leading tuple is the shape and what follows it replaces
    `values` in order (so `uniform((2, 3), -1.0, 1.0)` and `uniform(2, 3, low=-1.0, high=1.0)` agree)."""
    if args and isinstance(args[0], (tuple, list)):
        extra = args[1:]
        if len(extra) > len(values):
            raise TypeError(f"{op}: expected at most {len(values)} values after the shape, got {len(extra)}")
        return _shape_argument(args[:1], op), tuple(extra) + tuple(values[len(extra):])
    return _shape_argument(args, op), values


def _fans(shape: tuple[int, ...], op: str) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight of this shape, as torch.nn.init computes them."""
    if len(shape) < 2:
        raise ValueError(f"{op}: fan in and fan out need a shape of at least 2 dims, got {shape}")
    receptive_field = math.prod(shape[2:])
    return shape[1] * receptive_field, shape[0] * receptive_field


class CreationMethods:
    """Tensor constructors (static methods) and the *_like forms of an existing tensor."""
    __slots__ = ()

    # ---- creation -----------------------------------------------------------------------------

    @staticmethod
    def full(shape, fill_value, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        from lazygrad.tensor import Tensor
        shape = _shape_argument((shape,), "full")
        dtype = dtypes.from_any(dtype) if dtype is not None else scalar_dtype(fill_value)
        if dtype.is_complex:
            from lazygrad.complex_tensor import ComplexTensor
            return ComplexTensor.full(shape, fill_value, dtype, canonical_device(device)).requires_grad_(requires_grad)
        if isinstance(fill_value, (complex, np.complexfloating)):
            raise TypeError(f"full: a complex fill value needs a complex dtype, not {dtype.name}")
        _check_scalar_fits(fill_value, dtype, "full")
        result = Tensor(LazyBuffer.const(fill_value, dtype, shape, canonical_device(device)))
        return result.requires_grad_(requires_grad)

    @staticmethod
    def zeros(*shape, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        from lazygrad.tensor import Tensor
        result = Tensor.full(_shape_argument(shape, "zeros"), 0.0, dtype or dtypes.default_float, device)
        return result.requires_grad_(requires_grad)

    @staticmethod
    def ones(*shape, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        from lazygrad.tensor import Tensor
        result = Tensor.full(_shape_argument(shape, "ones"), 1.0, dtype or dtypes.default_float, device)
        return result.requires_grad_(requires_grad)

    @staticmethod
    def empty(*shape, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        from lazygrad.tensor import Tensor
        result = Tensor.zeros(_shape_argument(shape, "empty"), dtype=dtype, device=device)
        return result.requires_grad_(requires_grad)

    @staticmethod
    def arange(start, stop=None, step=1, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        from lazygrad.tensor import Tensor
        if stop is None:
            start, stop = 0, start
        if dtype is None:
            is_float = any(isinstance(value, float) for value in (start, stop, step))
            dtype = dtypes.default_float if is_float else dtypes.int64
        result = Tensor(np.arange(start, stop, step, dtype=dtypes.from_any(dtype).np), device=device)
        return result.requires_grad_(requires_grad)

    @staticmethod
    def rand(*shape, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        """Uniform on [0, 1)."""
        dtype, shape = dtypes.from_any(dtype or dtypes.default_float), _shape_argument(shape, "rand")
        result = random_tensor(lambda: _rng.random(shape, dtype=np.float32).astype(dtype.np), device)
        return result.requires_grad_(requires_grad)

    @staticmethod
    def randn(*shape, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        """Standard normal."""
        dtype, shape = dtypes.from_any(dtype or dtypes.default_float), _shape_argument(shape, "randn")
        result = random_tensor(lambda: _rng.standard_normal(shape, dtype=np.float32).astype(dtype.np), device)
        return result.requires_grad_(requires_grad)

    @staticmethod
    def linspace(start, end, steps: int, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        """`steps` evenly spaced values from start to end inclusive (PyTorch's rounding: the first half
        counts up from start, the second half down from end)."""
        from lazygrad.tensor import Tensor
        steps = _int_argument(steps, "linspace", "steps")
        if steps < 0:
            raise ValueError(f"linspace: number of steps must be non-negative, got {steps}")
        dtype = dtypes.from_any(dtype or dtypes.default_float)
        index = np.arange(steps, dtype=np.float64)
        step = (end - start) / (steps - 1) if steps > 1 else 0.0
        values = np.where(index < steps / 2, start + index * step, end - (steps - 1 - index) * step)
        result = Tensor(values.astype(dtype.np), device=device)
        return result.requires_grad_(requires_grad)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        """Ones on the diagonal of an (n, m) matrix, built as a view of one constant (no buffer)."""
        from lazygrad.tensor import Tensor
        n = _int_argument(n, "eye", "n")
        m = n if m is None else _int_argument(m, "eye", "m")
        if n < 0 or m < 0:
            raise ValueError(f"eye: n and m must be non-negative, got n={n}, m={m}")
        size = max(n, m)
        dtype = dtypes.from_any(dtype or dtypes.default_float)
        # a column of ones padded to rows of size + 1, read back in rows of size: the one moves right by one per row
        ones = Tensor.full((size, 1), 1, dtype, device).pad(((0, 0), (0, size)))
        square = ones.reshape(size * (size + 1))[:size * size].reshape(size, size)
        result = square[:n, :m]
        return result.requires_grad_(requires_grad)

    @staticmethod
    def randint(low, high=None, size=None, dtype=None, device=None) -> "Tensor":
        """Integers uniform on [low, high): `randint(low, high, shape)` or `randint(high, shape)`."""
        if size is None and isinstance(high, (tuple, list)):
            low, high, size = 0, low, high
        if high is None or size is None:
            raise TypeError("randint: expected randint(low, high, size) or randint(high, size)")
        low, high = _int_argument(low, "randint", "low"), _int_argument(high, "randint", "high")
        if low >= high:
            raise ValueError(f"randint: low ({low}) must be less than high ({high})")
        shape = _shape_argument((size,), "randint")
        dtype = dtypes.from_any(dtype or dtypes.int64)
        return random_tensor(lambda: _rng.integers(low, high, size=shape).astype(dtype.np), device)

    @staticmethod
    def uniform(*shape, low=0.0, high=1.0, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        """Uniform on [low, high): `uniform(2, 3, low=-1.0, high=1.0)` or `uniform((2, 3), -1.0, 1.0)`."""
        from lazygrad.tensor import Tensor
        shape, (low, high) = _shape_then_values(shape, (low, high), "uniform")
        dtype = dtypes.from_any(dtype or dtypes.default_float)
        if not dtype.is_float:
            raise TypeError(f"uniform: dtype must be floating point, got {dtype.name}")
        result = Tensor.rand(shape, dtype=dtype, device=device) * (high - low) + low
        return result.requires_grad_(requires_grad)

    @staticmethod
    def normal(*shape, mean=0.0, std=1.0, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        """Normal with the given mean and std: `normal(2, 3, mean=1.0)` or `normal((2, 3), 1.0, 0.5)`."""
        from lazygrad.tensor import Tensor
        shape, (mean, std) = _shape_then_values(shape, (mean, std), "normal")
        if std < 0:
            raise ValueError(f"normal: std must be non-negative, got {std}")
        dtype = dtypes.from_any(dtype or dtypes.default_float)
        if not dtype.is_float:
            raise TypeError(f"normal: dtype must be floating point, got {dtype.name}")
        result = Tensor.randn(shape, dtype=dtype, device=device) * std + mean
        return result.requires_grad_(requires_grad)

    @staticmethod
    def kaiming_uniform(*shape, a: float = 0.01, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        """He initialization, as torch.nn.init.kaiming_uniform_ for a leaky ReLU of slope `a` (default 0.01,
        tinygrad's; PyTorch's is 0): uniform on +-sqrt(3) * sqrt(2 / (1 + a**2)) / sqrt(fan_in)."""
        from lazygrad.tensor import Tensor
        shape = _shape_argument(shape, "kaiming_uniform")
        fan_in, _ = _fans(shape, "kaiming_uniform")
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a * a)) / math.sqrt(max(fan_in, 1))
        result = Tensor.uniform(shape, low=-bound, high=bound, dtype=dtype, device=device)
        return result.requires_grad_(requires_grad)

    @staticmethod
    def glorot_uniform(*shape, dtype=None, device=None, requires_grad: bool = False) -> "Tensor":
        """Xavier/Glorot initialization (torch.nn.init.xavier_uniform_): uniform on +-sqrt(6 / (fan_in + fan_out))."""
        from lazygrad.tensor import Tensor
        shape = _shape_argument(shape, "glorot_uniform")
        fan_in, fan_out = _fans(shape, "glorot_uniform")
        bound = math.sqrt(6.0 / max(fan_in + fan_out, 1))
        result = Tensor.uniform(shape, low=-bound, high=bound, dtype=dtype, device=device)
        return result.requires_grad_(requires_grad)

    # `x.zeros_like()` and `Tensor.zeros_like(x)` both work; dtype and device default to x's

    def full_like(self, fill_value, dtype=None, device=None) -> "Tensor":
        from lazygrad.tensor import Tensor
        return Tensor.full(self.shape, fill_value, dtype or self.dtype, device or self.device)

    def zeros_like(self, dtype=None, device=None) -> "Tensor":
        return self.full_like(0, dtype, device)

    def ones_like(self, dtype=None, device=None) -> "Tensor":
        return self.full_like(1, dtype, device)

    def empty_like(self, dtype=None, device=None) -> "Tensor":
        return self.zeros_like(dtype, device)

    def rand_like(self, dtype=None, device=None) -> "Tensor":
        from lazygrad.tensor import Tensor
        dtype = dtypes.from_any(dtype or self.dtype)
        if not dtype.is_float:
            raise TypeError(f"rand_like: dtype must be floating point, got {dtype.name}")
        return Tensor.rand(self.shape, dtype=dtype, device=device or self.device)

    def randn_like(self, dtype=None, device=None) -> "Tensor":
        from lazygrad.tensor import Tensor
        dtype = dtypes.from_any(dtype or self.dtype)
        if not dtype.is_float:
            raise TypeError(f"randn_like: dtype must be floating point, got {dtype.name}")
        return Tensor.randn(self.shape, dtype=dtype, device=device or self.device)

    def _filled(self, shape: tuple[int, ...], value, function: str) -> "Tensor":
        """A fill of `value` in self's dtype and on its device, checked to fit, with `function` named in errors."""
        from lazygrad.tensor import Tensor
        _check_scalar_fits(value, self.dtype, function)
        return Tensor.full(shape, value, self.dtype, self.device)

    def _const_like(self, value, dtype: DType | None = None) -> "Tensor":
        from lazygrad.tensor import Tensor
        return Tensor(LazyBuffer.const(value, dtype or self.dtype, self.shape, self.device))
