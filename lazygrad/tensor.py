"""The user's Tensor: a PyTorch-style API where every method composes the op table's primitives.

Nothing computes until a value is needed (`numpy()`, `item()`, `tolist()`, `realize()`); until then a
Tensor is a handle on a node of the lazy graph. Type promotion follows PyTorch (see dtype.py).
Deliberate differences from PyTorch are listed in docs/tensor.md.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from lazygrad.devices import canonical_device, get_device
from lazygrad.dtype import DType, dtypes, least_float, result_type, scalar_dtype
from lazygrad.lazy import LazyBuffer
from lazygrad.ops import OPS, REDUCE, UNARY, BINARY, TERNARY
from lazygrad.realize import realize

_rng = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Seed the generator behind rand/randn (numbers are drawn on the host: same on every device)."""
    global _rng
    _rng = np.random.default_rng(seed)


def _shape_argument(shape) -> tuple[int, ...]:
    """Accept f(2, 3) and f((2, 3)) alike, as PyTorch does."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    result = tuple(int(size) for size in shape)
    if any(size < 0 for size in result):
        raise ValueError(f"negative dimension in shape {result}")
    return result


def _normalize_axis(axis: int, ndim: int, op: str = "") -> int:
    low, high = (-ndim, ndim - 1) if ndim else (-1, 0)
    if not low <= axis <= high:
        raise IndexError(f"{op + ': ' if op else ''}dimension out of range "
                         f"(expected to be in range of [{low}, {high}], but got {axis})")
    return axis % ndim if ndim else 0


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    ndim = max(len(shape) for shape in shapes)
    padded = [(1,) * (ndim - len(shape)) + tuple(shape) for shape in shapes]
    result = []
    for sizes in zip(*padded):
        sizes_not_one = {size for size in sizes if size != 1}
        if len(sizes_not_one) > 1:
            listed = " and ".join(str(tuple(shape)) for shape in shapes)
            raise ValueError(f"{op}: shapes {listed} cannot be broadcast together")
        result.append(sizes_not_one.pop() if sizes_not_one else 1)
    return tuple(result)


class no_grad:
    """`with no_grad():` builds no backward graph inside the block (also usable as a decorator)."""

    def __enter__(self):
        self.previous = Tensor.grad_enabled
        Tensor.grad_enabled = False

    def __exit__(self, *exc_info):
        Tensor.grad_enabled = self.previous

    def __call__(self, function):
        def wrapper(*args, **kwargs):
            with no_grad():
                return function(*args, **kwargs)
        return wrapper


class Tensor:
    __slots__ = ("lazydata", "requires_grad", "grad", "_ctx")
    __hash__ = object.__hash__  # == builds a comparison, so hashing stays by identity
    grad_enabled = True         # False inside `with no_grad():`

    def __init__(self, data, dtype=None, device: str | None = None, requires_grad: bool = False):
        self.grad: Tensor | None = None
        self._ctx: tuple | None = None  # (op, source tensors, arg) of the primitive that made this tensor
        self.requires_grad = False
        if isinstance(data, LazyBuffer):
            self.lazydata = data if dtype is None else data.cast(dtypes.from_any(dtype))
        else:
            self.lazydata = self._lazy_from_data(data, dtype, canonical_device(device))
        if requires_grad:
            self.requires_grad_(True)

    @staticmethod
    def _lazy_from_data(data, dtype, device: str) -> LazyBuffer:
        dtype = dtypes.from_any(dtype) if dtype is not None else None
        if isinstance(data, Tensor):
            data = data.numpy()
        if isinstance(data, (bool, int, float, np.generic)) and not isinstance(data, np.ndarray):
            dtype = dtype or (dtypes.from_any(data.dtype) if isinstance(data, np.generic) else scalar_dtype(data))
            return LazyBuffer.const(data, dtype, (), device)
        if isinstance(data, np.ndarray):
            array = data
            if dtype is None:
                dtype = dtypes.from_any(array.dtype)
        else:
            array = np.array(data)
            if array.dtype == object:
                raise TypeError(f"cannot build a Tensor from {type(data).__name__}: nested lists must be "
                                "rectangular and hold bools, ints or floats")
            if dtype is None:
                dtype = {"b": dtypes.bool, "f": dtypes.default_float}.get(array.dtype.kind, dtypes.default_int)
                if array.dtype.kind not in "bfiu":
                    raise TypeError(f"cannot build a Tensor from elements of type {array.dtype}")
        array = np.array(array, dtype=dtype.np, order="C")  # a copy; keeps 0-d arrays 0-d
        buffer = get_device(device).alloc(dtype, array.size).copyin(array)
        return LazyBuffer.from_buffer(buffer, array.shape)

    def _apply(self, op: str, *others: "Tensor", arg=None) -> "Tensor":
        """Apply one primitive of the op table, recording it for backward when a source needs grads."""
        kind = OPS[op].kind
        if kind in (UNARY, BINARY, TERNARY):
            lazy = self.lazydata.alu(op, *[other.lazydata for other in others], arg=arg)
        elif kind == REDUCE:
            lazy = self.lazydata.reduce(op, arg)
        elif op == "CONTIGUOUS":
            lazy = self.lazydata.contiguous()
        elif op == "COPY":
            lazy = self.lazydata.copy_to(arg)
        else:
            lazy = getattr(self.lazydata, op.lower())(arg)
        out = Tensor(lazy)
        if Tensor.grad_enabled and (self.requires_grad or any(other.requires_grad for other in others)):
            out.requires_grad = True
            out._ctx = (op, (self,) + others, arg)
        return out

    # ---- autograd -----------------------------------------------------------------------------

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if requires_grad and not self.dtype.is_float:
            raise TypeError(f"only floating point tensors can require gradients, got {self.dtype.name}")
        self.requires_grad = requires_grad
        return self

    def detach(self) -> "Tensor":
        """The same value, cut from the backward graph."""
        return Tensor(self.lazydata)

    def _backward_order(self) -> list["Tensor"]:
        """Tensors with a recorded op, each after everything it was computed from."""
        order, seen = [], set()
        stack = [(self, False)]
        while stack:
            tensor, sources_done = stack.pop()
            if sources_done:
                order.append(tensor)
                continue
            if id(tensor) in seen or tensor._ctx is None:
                continue
            seen.add(id(tensor))
            stack.append((tensor, True))
            stack.extend((source, False) for source in tensor._ctx[1] if source.requires_grad)
        return order

    def backward(self, gradient: "Tensor | None" = None) -> None:
        """Accumulate d(self)/d(leaf) into `.grad` of every leaf that requires grad (lazily)."""
        if not self.requires_grad:
            raise RuntimeError("backward: this tensor does not require grad and has no grad_fn")
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError(f"backward: grad can be implicitly created only for scalar outputs, "
                                   f"got shape {self.shape}; pass gradient=")
            gradient = Tensor.full(self.shape, 1.0, self.dtype, self.device)
        elif gradient.shape != self.shape:
            raise ValueError(f"backward: gradient of shape {gradient.shape} does not match output {self.shape}")
        grads = {id(self): gradient.detach()}
        with no_grad():
            for tensor in reversed(self._backward_order()):
                grad = grads.pop(id(tensor), None)
                if grad is None:
                    continue
                op, sources, arg = tensor._ctx
                rule = OPS[op].grad
                if not callable(rule):
                    raise RuntimeError(f"backward: {op} is not differentiable")
                source_grads = rule(grad, tensor.detach(), [source.detach() for source in sources], arg)
                for source, source_grad in zip(sources, source_grads):
                    if source_grad is None or not source.requires_grad:
                        continue
                    if source._ctx is None:  # a leaf: accumulate, as PyTorch does
                        source.grad = source_grad if source.grad is None else source.grad + source_grad
                    elif id(source) in grads:
                        grads[id(source)] = grads[id(source)] + source_grad
                    else:
                        grads[id(source)] = source_grad

    # ---- properties ---------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self.lazydata.shape

    @property
    def dtype(self) -> DType:
        return self.lazydata.dtype

    @property
    def device(self) -> str:
        return self.lazydata.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[_normalize_axis(dim, self.ndim, "size")]

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        values = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        return f"tensor({values}, dtype={self.dtype.name}, device={self.device})"

    # ---- realizing ----------------------------------------------------------------------------

    def realize(self, *others: "Tensor") -> "Tensor":
        """Compute this tensor (and others, sharing work); returns self so calls chain."""
        realize([tensor.lazydata for tensor in (self,) + others])
        for tensor in (self,) + others:
            node = tensor.lazydata
            if node.op != "BUFFER":  # keep only the buffer, not the graph that made it
                tensor.lazydata = LazyBuffer.from_buffer(node.buffer, node.shape)
        return self

    def numpy(self) -> np.ndarray:
        self.realize()
        return self.lazydata.buffer.array.reshape(self.shape).copy()

    def item(self):
        if self.numel() != 1:
            raise ValueError(f"item(): only a tensor with one element can be converted to a Python scalar, "
                             f"got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def to(self, device: str) -> "Tensor":
        return self._apply("COPY", arg=canonical_device(device))

    def __bool__(self) -> bool:
        return bool(self.item())

    # ---- creation -----------------------------------------------------------------------------

    @staticmethod
    def full(shape, fill_value, dtype=None, device=None) -> "Tensor":
        shape = _shape_argument((shape,) if isinstance(shape, int) else (shape,))
        dtype = dtypes.from_any(dtype) if dtype is not None else scalar_dtype(fill_value)
        return Tensor(LazyBuffer.const(fill_value, dtype, shape, canonical_device(device)))

    @staticmethod
    def zeros(*shape, dtype=None, device=None) -> "Tensor":
        return Tensor.full(_shape_argument(shape), 0.0, dtype or dtypes.default_float, device)

    @staticmethod
    def ones(*shape, dtype=None, device=None) -> "Tensor":
        return Tensor.full(_shape_argument(shape), 1.0, dtype or dtypes.default_float, device)

    @staticmethod
    def empty(*shape, dtype=None, device=None) -> "Tensor":
        return Tensor.zeros(*shape, dtype=dtype, device=device)

    @staticmethod
    def arange(start, stop=None, step=1, dtype=None, device=None) -> "Tensor":
        if stop is None:
            start, stop = 0, start
        if dtype is None:
            is_float = any(isinstance(value, float) for value in (start, stop, step))
            dtype = dtypes.default_float if is_float else dtypes.int64
        return Tensor(np.arange(start, stop, step, dtype=dtypes.from_any(dtype).np), device=device)

    @staticmethod
    def rand(*shape, dtype=None, device=None) -> "Tensor":
        """Uniform on [0, 1)."""
        dtype = dtypes.from_any(dtype or dtypes.default_float)
        return Tensor(_rng.random(_shape_argument(shape), dtype=np.float32).astype(dtype.np), device=device)

    @staticmethod
    def randn(*shape, dtype=None, device=None) -> "Tensor":
        """Standard normal."""
        dtype = dtypes.from_any(dtype or dtypes.default_float)
        return Tensor(_rng.standard_normal(_shape_argument(shape), dtype=np.float32).astype(dtype.np), device=device)

    def _const_like(self, value, dtype: DType | None = None) -> "Tensor":
        return Tensor(LazyBuffer.const(value, dtype or self.dtype, self.shape, self.device))

    # ---- type conversion ----------------------------------------------------------------------

    def cast(self, dtype) -> "Tensor":
        dtype = dtypes.from_any(dtype)
        return self if dtype == self.dtype else self._apply("CAST", arg=dtype)

    def bitcast(self, dtype) -> "Tensor":
        dtype = dtypes.from_any(dtype)
        if dtype.itemsize != self.dtype.itemsize:
            raise TypeError(f"bitcast: {self.dtype.name} and {dtype.name} differ in size")
        return self if dtype == self.dtype else self._apply("BITCAST", arg=dtype)

    def float(self) -> "Tensor":
        return self.cast(dtypes.float32)

    def half(self) -> "Tensor":
        return self.cast(dtypes.float16)

    def double(self) -> "Tensor":
        return self.cast(dtypes.float64)

    def int(self) -> "Tensor":
        return self.cast(dtypes.int32)

    def long(self) -> "Tensor":
        return self.cast(dtypes.int64)

    def bool(self) -> "Tensor":
        return self.cast(dtypes.bool)

    def _to_float(self) -> "Tensor":
        return self.cast(least_float(self.dtype))

    # ---- broadcasting binary ops --------------------------------------------------------------

    def _operands(self, other, op: str, reverse: bool = False) -> tuple["Tensor", "Tensor"]:
        """Both operands promoted to one dtype and broadcast to one shape, PyTorch style."""
        if isinstance(other, Tensor):
            if other.device != self.device:
                raise ValueError(f"{op}: tensors are on different devices, {self.device} and {other.device}; "
                                 f"move one with .to({self.device!r})")
            groups = ([], [], [])
            for tensor in (self, other):
                groups[0 if tensor.ndim else 1].append(tensor.dtype)
            dtype = result_type(*groups)
        elif isinstance(other, (bool, int, float, np.generic)):
            groups = ([self.dtype], [], []) if self.ndim else ([], [self.dtype], [])
            groups[2].append(scalar_dtype(other))
            dtype = result_type(*groups)
            other = Tensor(LazyBuffer.const(other, dtype, (), self.device))
        else:
            raise TypeError(f"{op}: unsupported operand type {type(other).__name__}")
        shape = broadcast_shapes(op, self.shape, other.shape)
        x, y = self.cast(dtype)._broadcast_to(shape), other.cast(dtype)._broadcast_to(shape)
        return (y, x) if reverse else (x, y)

    def _broadcast_to(self, shape: tuple[int, ...]) -> "Tensor":
        if self.shape == shape:
            return self
        padded = self.reshape((1,) * (len(shape) - self.ndim) + self.shape)
        return padded._apply("EXPAND", arg=shape)

    def _binary(self, op: str, other, reverse: bool = False, name: str = "") -> "Tensor":
        x, y = self._operands(other, name or op.lower(), reverse)
        return x._apply(op, y)

    def add(self, other, reverse=False):
        return self._binary("ADD", other, reverse, "add")

    def mul(self, other, reverse=False):
        return self._binary("MUL", other, reverse, "mul")

    def sub(self, other, reverse=False):
        x, y = self._operands(other, "sub", reverse)
        if x.dtype == dtypes.bool:
            raise TypeError("sub: subtracting bool tensors is not supported; use logical_xor or cast first")
        return x._apply("ADD", y._apply("NEG"))

    def div(self, other, reverse=False):
        """True division: integer inputs give the default float dtype."""
        x, y = self._operands(other, "div", reverse)
        x, y = x._to_float(), y._to_float()
        return x._apply("DIV", y)

    def floordiv(self, other, reverse=False):
        """Python's //: the quotient rounded toward negative infinity."""
        x, y = self._operands(other, "floordiv", reverse)
        if x.dtype.is_bool:
            raise TypeError("floordiv: not supported for bool tensors")
        remainder = x._apply("MOD", y)
        off_by_one = (remainder != 0).logical_and((remainder < 0) != (y < 0))
        if not x.dtype.is_float:
            return x._apply("DIV", y) - off_by_one.cast(x.dtype)
        # floor(x / y) computed from the exact remainder, so 2.0 // 0.1 is 19 as in numpy, not 20
        quotient = (x - remainder) / y
        quotient = off_by_one.where(quotient - 1, quotient)
        floored = quotient.floor()
        floored = (quotient - floored > 0.5).where(floored + 1, floored)
        return (y == 0).where(x / y, floored)

    def remainder(self, other, reverse=False):
        """Python's %: the result takes the sign of the divisor."""
        x, y = self._operands(other, "remainder", reverse)
        if x.dtype.is_bool:
            raise TypeError("remainder: not supported for bool tensors")
        remainder = x._apply("MOD", y)
        wrong_sign = (remainder != 0).logical_and((remainder < 0) != (y < 0))
        return wrong_sign.where(remainder + y, remainder)

    def pow(self, exponent, reverse=False):
        """`self ** exponent` with C's pow semantics for floats (1**nan == 1, (-8)**(1/3) is nan)."""
        small_int = isinstance(exponent, int) and not isinstance(exponent, bool) and abs(exponent) <= 8
        if not reverse and small_int and (exponent >= 0 or self.dtype.is_float):
            result = self._const_like(1)
            for _ in range(abs(exponent)):
                result = result * self
            return result.reciprocal() if exponent < 0 else result
        x, y = self._operands(exponent, "pow", reverse)
        if x.dtype.is_bool:
            raise TypeError("pow: not supported for bool tensors")
        if not x.dtype.is_float:
            if isinstance(exponent, int) and not reverse and exponent < 0:
                raise ValueError(f"pow: integers to negative integer powers are not allowed (got {exponent})")
            return x._integer_pow(y)
        result_dtype = x.dtype
        x, y = x.double(), y.double()  # log2/exp2 in double keep float32 results correctly rounded
        magnitude = (y * x.abs().log2()).exp2()
        finite_y = y.abs() != math.inf
        odd_integer = finite_y.logical_and(y.remainder(2) == 1)
        result = (x < 0).logical_and(odd_integer).where(-magnitude, magnitude)
        fractional = finite_y.logical_and(y != y.trunc())
        result = (x < 0).logical_and(fractional).where(math.nan, result)
        result = (x == -1).logical_and(finite_y.logical_not()).where(1.0, result)
        result = (y == 0).logical_or(x == 1).where(1.0, result)
        return result.cast(result_dtype)

    def _integer_pow(self, exponent: "Tensor") -> "Tensor":
        """Integer power by squaring over the exponent's bits; negative exponents give 0 unless the
        base is 1 or -1 (PyTorch's answer for tensors)."""
        result, base = self._const_like(1), self
        for bit in range(self.dtype.itemsize * 8 - 1):
            result = ((exponent & (1 << bit)) != 0).where(result * base, result)
            base = base * base
        negative = exponent < 0
        minus_one_result = (exponent.remainder(2) == 1).where(self._const_like(-1), self._const_like(1))
        special = (self == 1).where(self._const_like(1), (self == -1).where(minus_one_result, self._const_like(0)))
        return negative.where(special, result)

    def maximum(self, other):
        return self._binary("MAX", other, name="maximum")

    def minimum(self, other):
        x, y = self._operands(other, "minimum")
        if x.dtype.is_float:
            return -((-x).maximum(-y))
        return (x < y).where(x, y)

    def __add__(self, other): return self.add(other)
    def __radd__(self, other): return self.add(other, True)
    def __sub__(self, other): return self.sub(other)
    def __rsub__(self, other): return self.sub(other, True)
    def __mul__(self, other): return self.mul(other)
    def __rmul__(self, other): return self.mul(other, True)
    def __truediv__(self, other): return self.div(other)
    def __rtruediv__(self, other): return self.div(other, True)
    def __floordiv__(self, other): return self.floordiv(other)
    def __rfloordiv__(self, other): return self.floordiv(other, True)
    def __mod__(self, other): return self.remainder(other)
    def __rmod__(self, other): return self.remainder(other, True)
    def __pow__(self, other): return self.pow(other)
    def __rpow__(self, other): return self.pow(other, True)
    def __matmul__(self, other): return self.matmul(other)
    def __rmatmul__(self, other): return Tensor(other, device=self.device).matmul(self) \
        if not isinstance(other, Tensor) else other.matmul(self)
    def __neg__(self): return self.neg()

    # ---- comparisons and logic ----------------------------------------------------------------

    def __lt__(self, other): return self._binary("CMPLT", other, name="lt")
    def __gt__(self, other): return self._binary("CMPLT", other, reverse=True, name="gt")
    def __ne__(self, other): return self._binary("CMPNE", other, name="ne")
    def __eq__(self, other): return self._binary("CMPNE", other, name="eq").logical_not()
    def __le__(self, other): return (self < other).logical_or(self == other)
    def __ge__(self, other): return (self > other).logical_or(self == other)

    def _bitwise(self, op: str, other, name: str, reverse: bool = False) -> "Tensor":
        x, y = self._operands(other, name, reverse)
        if x.dtype.is_float:
            raise TypeError(f"{name}: not supported for {x.dtype.name} tensors (bool and integer only)")
        return x._apply(op, y)

    def __and__(self, other): return self._bitwise("AND", other, "bitwise_and")
    def __or__(self, other): return self._bitwise("OR", other, "bitwise_or")
    def __xor__(self, other): return self._bitwise("XOR", other, "bitwise_xor")
    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __lshift__(self, other): return self._bitwise("SHL", other, "bitwise_left_shift")
    def __rshift__(self, other): return self._bitwise("SHR", other, "bitwise_right_shift")
    def __rlshift__(self, other): return self._bitwise("SHL", other, "bitwise_left_shift", reverse=True)
    def __rrshift__(self, other): return self._bitwise("SHR", other, "bitwise_right_shift", reverse=True)

    def __invert__(self) -> "Tensor":
        if self.dtype.is_float:
            raise TypeError(f"bitwise_not: not supported for {self.dtype.name} tensors")
        return self ^ (True if self.dtype.is_bool else -1)

    def logical_not(self) -> "Tensor":
        return self.bool()._apply("XOR", Tensor.full(self.shape, True, dtypes.bool, self.device))

    def logical_and(self, other) -> "Tensor":
        return self.bool()._bitwise("AND", other.bool() if isinstance(other, Tensor) else bool(other), "logical_and")

    def logical_or(self, other) -> "Tensor":
        return self.bool()._bitwise("OR", other.bool() if isinstance(other, Tensor) else bool(other), "logical_or")

    def logical_xor(self, other) -> "Tensor":
        return self.bool()._bitwise("XOR", other.bool() if isinstance(other, Tensor) else bool(other), "logical_xor")

    def where(self, if_true, if_false) -> "Tensor":
        """`self ? if_true : if_false` elementwise (self is the condition), broadcasting all three."""
        condition = self.bool()
        if not isinstance(if_true, Tensor):
            if not isinstance(if_false, Tensor):
                dtype = result_type([], [], [scalar_dtype(if_true), scalar_dtype(if_false)])
                if_true = Tensor(LazyBuffer.const(if_true, dtype, (), self.device))
            else:
                if_true, if_false = if_false._operands(if_true, "where", reverse=True)
        x, y = if_true._operands(if_false, "where")
        shape = broadcast_shapes("where", condition.shape, x.shape)
        condition, x, y = condition._broadcast_to(shape), x._broadcast_to(shape), y._broadcast_to(shape)
        return condition._apply("WHERE", x, y)

    # ---- elementwise functions ----------------------------------------------------------------

    def _unary_float(self, op: str) -> "Tensor":
        return self._to_float()._apply(op)

    def neg(self) -> "Tensor":
        if self.dtype.is_bool:
            raise TypeError("neg: negating a bool tensor is not supported; use logical_not()")
        return self._apply("NEG")

    def exp2(self): return self._unary_float("EXP2")
    def log2(self): return self._unary_float("LOG2")
    def sqrt(self): return self._unary_float("SQRT")
    def sin(self): return self._unary_float("SIN")
    def reciprocal(self): return self._unary_float("RECIP")

    def exp(self): return (self._to_float() * (1 / math.log(2))).exp2()
    def log(self): return self.log2() * math.log(2)
    def rsqrt(self): return self.sqrt().reciprocal()
    def cos(self):
        # cos(x) = sin(pi/2 - x); the subtraction is done in float64 so it does not round x away
        x = self._to_float()
        return (math.pi / 2 - x.double()).sin().cast(x.dtype) if x.dtype != dtypes.float64 else (math.pi / 2 - x).sin()
    def tan(self): return self.sin() / self.cos()
    def sigmoid(self): return (1 + (-self._to_float()).exp()).reciprocal()
    def tanh(self): return 2 * (2 * self._to_float()).sigmoid() - 1
    def relu(self): return self.maximum(0)
    def square(self): return self * self

    def abs(self) -> "Tensor":
        if self.dtype.is_bool or self.dtype.is_unsigned:
            return self
        return (self < 0).where(-self, self)

    def sign(self) -> "Tensor":
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype) if not self.dtype.is_bool else self

    def trunc(self) -> "Tensor":
        if not self.dtype.is_float:
            return self
        return self - self._apply("MOD", self._const_like(1))

    def floor(self) -> "Tensor":
        truncated = self.trunc()
        return (self < truncated).where(truncated - 1, truncated) if self.dtype.is_float else self

    def ceil(self) -> "Tensor":
        truncated = self.trunc()
        return (self > truncated).where(truncated + 1, truncated) if self.dtype.is_float else self

    def clamp(self, min=None, max=None) -> "Tensor":
        if min is None and max is None:
            raise ValueError("clamp: at least one of min and max must be given")
        result = self
        if min is not None:
            result = result.maximum(min)
        if max is not None:
            result = result.minimum(max)
        return result

    clip = clamp

    # ---- reductions ---------------------------------------------------------------------------

    def _reduce_axes(self, axis, op: str) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        normalized = tuple(_normalize_axis(a, self.ndim, op) for a in axes)
        if self.ndim == 0:
            return ()  # a 0-d tensor accepts dim 0 and -1, as in PyTorch, and has nothing to reduce
        if len(set(normalized)) != len(normalized):
            raise ValueError(f"{op}: axis {axis} repeats a dimension")
        return normalized

    def _reduce(self, op: str, axis, keepdim: bool, name: str) -> "Tensor":
        axes = self._reduce_axes(axis, name)
        if self.ndim == 0:
            return self
        reduced = self._apply(op, arg=axes)
        if keepdim:
            return reduced
        return reduced.reshape(tuple(size for a, size in enumerate(self.shape) if a not in axes))

    def sum(self, axis=None, keepdim: bool = False, dtype=None, *, dim=None) -> "Tensor":
        axis = dim if dim is not None else axis
        source = self.cast(dtype) if dtype is not None else (
            self.cast(dtypes.int64) if not self.dtype.is_float else self)
        return source._reduce("SUM", axis, keepdim, "sum")

    def prod(self, axis=None, keepdim: bool = False, dtype=None, *, dim=None) -> "Tensor":
        axis = dim if dim is not None else axis
        source = self.cast(dtype) if dtype is not None else (
            self.cast(dtypes.int64) if not self.dtype.is_float else self)
        return source._reduce("PROD", axis, keepdim, "prod")

    def _check_not_empty(self, axis, name: str) -> None:
        axes = self._reduce_axes(axis, name)
        if any(self.shape[a] == 0 for a in axes) or (axis is None and self.numel() == 0):
            raise ValueError(f"{name}: cannot reduce over an empty dimension of a tensor of shape {self.shape}")

    def max(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        axis = dim if dim is not None else axis
        self._check_not_empty(axis, "max")
        return self._reduce("MAX_REDUCE", axis, keepdim, "max")

    def min(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        axis = dim if dim is not None else axis
        self._check_not_empty(axis, "min")
        if self.dtype.is_float:
            return -((-self).max(axis, keepdim))
        return ~((~self).max(axis, keepdim))  # ~ reverses the order of integers without overflow

    def mean(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        axis = dim if dim is not None else axis
        if not self.dtype.is_float:
            raise TypeError(f"mean: input dtype must be floating point, got {self.dtype.name}")
        axes = self._reduce_axes(axis, "mean")
        count = math.prod(self.shape[a] for a in axes)
        total = self.sum(axis, keepdim)
        return total / count if count else total * float("nan")

    # ---- movement -----------------------------------------------------------------------------

    def reshape(self, *shape) -> "Tensor":
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        shape = tuple(int(size) for size in shape)
        if shape.count(-1) > 1:
            raise ValueError(f"reshape: only one dimension can be -1, got {shape}")
        if -1 in shape:
            known = math.prod(size for size in shape if size != -1)
            if known == 0 or self.numel() % known:
                raise ValueError(f"reshape: cannot reshape tensor of shape {self.shape} ({self.numel()} elements) "
                                 f"into shape {shape}")
            shape = tuple(self.numel() // known if size == -1 else size for size in shape)
        if any(size < 0 for size in shape) or math.prod(shape) != self.numel():
            raise ValueError(f"reshape: cannot reshape tensor of shape {self.shape} ({self.numel()} elements) "
                             f"into shape {shape}")
        return self if shape == self.shape else self._apply("RESHAPE", arg=shape)

    view = reshape

    def permute(self, *order) -> "Tensor":
        order = tuple(order[0]) if len(order) == 1 and isinstance(order[0], (tuple, list)) else tuple(order)
        normalized = tuple(_normalize_axis(axis, self.ndim, "permute") for axis in order)
        if sorted(normalized) != list(range(self.ndim)):
            raise ValueError(f"permute: {order} is not a permutation of the {self.ndim} dims of shape {self.shape}")
        return self._apply("PERMUTE", arg=normalized)

    def transpose(self, dim0: int = -2, dim1: int = -1) -> "Tensor":
        if self.ndim < 2 and dim0 in (-2, 0) and dim1 in (-1, 0):
            return self
        order = list(range(self.ndim))
        first, second = _normalize_axis(dim0, self.ndim, "transpose"), _normalize_axis(dim1, self.ndim, "transpose")
        order[first], order[second] = order[second], order[first]
        return self.permute(order)

    @property
    def T(self) -> "Tensor":
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape) -> "Tensor":
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        if len(shape) < self.ndim:
            raise ValueError(f"expand: shape {shape} has fewer dims than the tensor's shape {self.shape}")
        current = (1,) * (len(shape) - self.ndim) + self.shape
        target = tuple(old if new == -1 else new for old, new in zip(current, shape))
        for old, new in zip(current, target):
            if old != new and old != 1:
                raise ValueError(f"expand: cannot expand shape {self.shape} to {shape}")
        return self._broadcast_to(target)

    def pad(self, padding, value=0.0) -> "Tensor":
        """padding: one (before, after) pair per dim, or PyTorch's flat list starting at the last dim."""
        padding = list(padding)
        if padding and all(isinstance(p, int) for p in padding):
            if len(padding) % 2 or len(padding) // 2 > self.ndim:
                raise ValueError(f"pad: flat padding {padding} needs an even length of at most {2 * self.ndim}")
            pairs = [(padding[i], padding[i + 1]) for i in range(0, len(padding), 2)]
            padding = [(0, 0)] * (self.ndim - len(pairs)) + list(reversed(pairs))
        if len(padding) != self.ndim:
            raise ValueError(f"pad: got {len(padding)} (before, after) pairs for a tensor of shape {self.shape}")
        pairs = [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]
        result = self
        if any(lo < 0 or hi < 0 for lo, hi in pairs):  # negative padding crops
            result = result.shrink(tuple((-min(lo, 0), size + min(hi, 0)) for (lo, hi), size in zip(pairs, self.shape)))
            pairs = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
        padded = result._apply("PAD", arg=tuple(pairs))
        if value == 0:
            return padded
        inside = Tensor.full(result.shape, True, dtypes.bool, self.device)._apply("PAD", arg=tuple(pairs))
        return inside.where(padded, Tensor.full(padded.shape, value, self.dtype, self.device))

    def shrink(self, bounds) -> "Tensor":
        bounds = tuple((0, size) if b is None else (int(b[0]), int(b[1])) for b, size in zip(bounds, self.shape))
        for (start, end), size in zip(bounds, self.shape):
            if not 0 <= start <= end <= size:
                raise ValueError(f"shrink: bounds {bounds} do not fit shape {self.shape}")
        return self._apply("SHRINK", arg=bounds)

    def flip(self, *axis) -> "Tensor":
        axis = tuple(axis[0]) if len(axis) == 1 and isinstance(axis[0], (tuple, list)) else tuple(axis)
        return self._apply("FLIP", arg=tuple(_normalize_axis(a, self.ndim, "flip") for a in axis))

    def contiguous(self) -> "Tensor":
        return self._apply("CONTIGUOUS")

    def squeeze(self, dim=None) -> "Tensor":
        if dim is None:
            return self.reshape(tuple(size for size in self.shape if size != 1))
        dim = _normalize_axis(dim, self.ndim, "squeeze")
        if self.ndim == 0 or self.shape[dim] != 1:
            return self
        return self.reshape(self.shape[:dim] + self.shape[dim + 1:])

    def unsqueeze(self, dim: int) -> "Tensor":
        dim = _normalize_axis(dim, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        if self.ndim == 0:
            return self.reshape(1)
        start, end = _normalize_axis(start_dim, self.ndim, "flatten"), _normalize_axis(end_dim, self.ndim, "flatten")
        return self.reshape(self.shape[:start] + (math.prod(self.shape[start:end + 1]),) + self.shape[end + 1:])

    def _slice_dim(self, dim: int, index: slice) -> "Tensor":
        size = self.shape[dim]
        start, stop, step = index.indices(size)
        count = len(range(start, stop, step))
        if count == 0:
            return self.shrink(tuple((0, 0) if d == dim else None for d in range(self.ndim)))
        first, last = start, start + (count - 1) * step
        low, high = min(first, last), max(first, last)
        result = self.shrink(tuple((low, high + 1) if d == dim else None for d in range(self.ndim)))
        if step < 0:
            result = result.flip(dim)
        stride = abs(step)
        if stride > 1:
            # pad to count*stride, split the dim into (count, stride) and keep column 0
            length = result.shape[dim]
            result = result.pad(tuple((0, count * stride - length) if d == dim else (0, 0) for d in range(self.ndim)))
            split = result.shape[:dim] + (count, stride) + result.shape[dim + 1:]
            result = result.reshape(split).shrink(
                tuple((0, 1) if d == dim + 1 else None for d in range(self.ndim + 1)))
            result = result.reshape(result.shape[:dim + 1] + result.shape[dim + 2:])
        return result

    def __getitem__(self, indices) -> "Tensor":
        """Basic indexing: ints, slices (any step), None and Ellipsis."""
        if not isinstance(indices, tuple):
            indices = (indices,)
        for index in indices:
            if not (index is None or index is Ellipsis or isinstance(index, (int, slice, np.integer))) \
                    or isinstance(index, bool):
                raise TypeError(f"index {index!r}: only ints, slices, None and ... are supported here")
        if sum(index is Ellipsis for index in indices) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        consuming = [index for index in indices if index is not None and index is not Ellipsis]
        if len(consuming) > self.ndim:
            raise IndexError(f"too many indices for tensor of dimension {self.ndim}")
        if Ellipsis in indices:
            at = indices.index(Ellipsis)
            indices = indices[:at] + (slice(None),) * (self.ndim - len(consuming)) + indices[at + 1:]
        else:
            indices = indices + (slice(None),) * (self.ndim - len(consuming))
        result, dim, final_shape = self, 0, []
        for index in indices:
            if index is None:
                final_shape.append(1)
                continue
            size = self.shape[dim]
            if isinstance(index, slice):
                result = result._slice_dim(dim, index)
                final_shape.append(result.shape[dim])
            else:
                position = int(index)
                if not -size <= position < size:
                    raise IndexError(f"index {position} is out of bounds for dimension {dim} with size {size}")
                position %= size
                result = result.shrink(tuple((position, position + 1) if d == dim else None
                                             for d in range(self.ndim)))
            dim += 1
        return result.reshape(tuple(final_shape))

    # ---- linear algebra -----------------------------------------------------------------------

    def matmul(self, other: "Tensor") -> "Tensor":
        if not isinstance(other, Tensor):
            other = Tensor(other, device=self.device)
        x, w = self, other
        if x.ndim == 0 or w.ndim == 0:
            raise ValueError(f"matmul: both arguments need at least 1 dimension, got shapes {x.shape} and {w.shape}")
        x_vector, w_vector = x.ndim == 1, w.ndim == 1
        if x_vector:
            x = x.reshape(1, x.shape[0])
        if w_vector:
            w = w.reshape(w.shape[0], 1)
        if x.shape[-1] != w.shape[-2]:
            raise ValueError(f"matmul: shapes {self.shape} and {other.shape} are not aligned: "
                             f"{x.shape[-1]} (dim {self.ndim - 1}) != {w.shape[-2]} (dim {max(other.ndim - 2, 0)})")
        try:
            broadcast_shapes("matmul", x.shape[:-2], w.shape[:-2])
        except ValueError:
            raise ValueError(f"matmul: the batch dims of shapes {self.shape} and {other.shape} "
                             "cannot be broadcast together") from None
        m, k, n = x.shape[-2], x.shape[-1], w.shape[-1]
        dtype = result_type([x.dtype, w.dtype], [], [])
        left = x.cast(dtype).reshape(x.shape[:-2] + (m, 1, k))
        right = w.cast(dtype).transpose(-1, -2).reshape(w.shape[:-2] + (1, n, k))
        result = (left * right)._reduce("SUM", -1, False, "matmul")
        if x_vector:
            result = result.reshape(result.shape[:-2] + (n,))
        if w_vector:
            result = result.reshape(result.shape[:-1])
        return result

    def dot(self, other: "Tensor") -> "Tensor":
        return self.matmul(other)
