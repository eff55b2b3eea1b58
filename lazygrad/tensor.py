"""The user's Tensor: a PyTorch-style API where every method composes the op table's primitives.

Nothing computes until a value is needed (`numpy()`, `item()`, `tolist()`, `realize()`); until then a
Tensor is a handle on a node of the lazy graph. Type promotion follows PyTorch (see dtype.py).
Deliberate differences from PyTorch are listed in docs/tensor.md.
"""
from __future__ import annotations

import math

import numpy as np

from lazygrad.devices import canonical_device, get_device
from lazygrad.dtype import DType, dtypes, least_float, result_type, scalar_dtype
from lazygrad.lazy import LazyBuffer
from lazygrad.ops import OPS, REDUCE, UNARY, BINARY, TERNARY, reduce_identity
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


def _shape_then_values(args: tuple, values: tuple, op: str) -> tuple[tuple[int, ...], tuple]:
    """Split `f(2, 3)` / `f((2, 3), a, b)`: a leading tuple is the shape and what follows it replaces
    `values` in order (so `uniform((2, 3), -1.0, 1.0)` and `uniform(2, 3, low=-1.0, high=1.0)` agree)."""
    if args and isinstance(args[0], (tuple, list)):
        extra = args[1:]
        if len(extra) > len(values):
            raise TypeError(f"{op}: expected at most {len(values)} values after the shape, got {len(extra)}")
        return _shape_argument(args[:1]), tuple(extra) + tuple(values[len(extra):])
    return _shape_argument(args), values


def _fans(shape: tuple[int, ...], op: str) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight of this shape, as torch.nn.init computes them."""
    if len(shape) < 2:
        raise ValueError(f"{op}: fan in and fan out need a shape of at least 2 dims, got {shape}")
    receptive_field = math.prod(shape[2:])
    return shape[1] * receptive_field, shape[0] * receptive_field


def _pick_axis(axis, dim, op: str, default=None):
    """PyTorch calls the argument `dim`, tinygrad `axis`: accept either (and `default` for neither)."""
    if axis is not None and dim is not None and axis != dim:
        raise TypeError(f"{op}: got both axis={axis} and dim={dim}; pass one of them")
    if dim is not None:
        return dim
    return default if axis is None else axis


def _tensor_list_and_dim(first, others: tuple, dim, axis, op: str) -> tuple[list, int]:
    """The tensors and dim of `x.cat(y, z, dim=1)` and of `Tensor.cat([x, y, z], 1)` alike (called through
    the class, the list arrives as `self`)."""
    if isinstance(first, (list, tuple)):
        tensors = list(first)
        if len(others) == 1 and isinstance(others[0], int):
            dim = others[0]
        elif others:
            raise TypeError(f"{op}: expected {op}(tensors, dim), got extra arguments {others}")
    else:
        tensors = [first, *others]
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty list of tensors")
    for number, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: expected Tensors, got {type(t).__name__} at entry {number}")
    return tensors, _pick_axis(axis, dim, op, 0)


def _zero_of(dtype: DType):
    """A Python zero that keeps `dtype` when it meets a tensor of that dtype."""
    return False if dtype.is_bool else 0


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


def _polynomial(x: "Tensor", coefficients) -> "Tensor":
    """coefficients[0] + coefficients[1] * x + ..., by Horner's rule."""
    result = x._const_like(coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        result = result * x + coefficient
    return result


# erf(x) = x * P(x*x) for |x| < 1, and erfc(a) = exp(-a*a) * t * Q(t) with t = 1 / (1 + a/2) for a >= 1.
# Fitted to 40-digit mpmath values (least squares on the relative error, reweighted towards
# minimax): relative error below 4e-11 for erf and 2e-10 for erfc over all x, so float32 results are
# within one ulp, float64 ones are not to full precision. test_api_elementwise.py checks against math.erf.
_ERF_NEAR_ZERO = (1.1283791670580225, -0.37612638434638757, 0.11283781973904389, -0.026865400030071238,
                  0.005220945398481868, -0.0008482828344822093, 0.00011256944292501075, -9.641505816282891e-06)
_ERFC_TAIL = (0.2820947917638943, 0.2820947970984638, 0.24683247590896681, 0.17632519402424715,
              0.08346664500713104, -0.0015146708057485827, -0.0755762448033353, 0.026396593396418543,
              -0.22480799463361842, 0.4329973187524891, -0.3073919253316566, 0.07791581069340037,
              0.0013050703974874034)
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _parse_einsum(equation: str, ndims: list[int]) -> tuple[list[list[str]], list[str]]:
    """Labels of each operand and of the output; "..." becomes one label per dim it covers ("0", "1", ..
    right-aligned across operands, so they broadcast as in numpy)."""
    text = equation.replace(" ", "")
    if text.count("->") > 1:
        raise ValueError(f"einsum: equation {equation!r} has more than one '->'")
    input_text, output_text = text.split("->") if "->" in text else (text, None)
    terms = input_text.split(",")
    if len(terms) != len(ndims):
        raise ValueError(f"einsum: equation {equation!r} has {len(terms)} operand(s) but {len(ndims)} tensor(s) "
                         "were given")

    def letters(term: str, what: str) -> list[str]:
        if term.count("...") > 1 or term.replace("...", "").count("."):
            raise ValueError(f"einsum: {what} {term!r} of {equation!r} has a '.' that is not part of one '...'")
        for char in term.replace("...", ""):
            if not (char.isascii() and char.isalpha()):
                raise ValueError(f"einsum: invalid subscript {char!r} in {equation!r}; use letters a-z, A-Z")
        return list(term.replace("...", ""))

    ellipsis_dims = 0
    for number, (term, ndim) in enumerate(zip(terms, ndims)):
        count = len(letters(term, "operand"))
        if ("..." not in term and count != ndim) or count > ndim:
            raise ValueError(f"einsum: operand {number} has {ndim} dims but subscripts {term!r} in {equation!r}")
        if "..." in term:
            ellipsis_dims = max(ellipsis_dims, ndim - count)

    def expand(term: str, covered: int) -> list[str]:
        if "..." not in term:
            return list(term)
        before, after = term.split("...")
        return list(before) + [str(ellipsis_dims - covered + i) for i in range(covered)] + list(after)

    inputs = [expand(term, ndim - len(letters(term, "operand"))) for term, ndim in zip(terms, ndims)]
    seen = [label for labels in inputs for label in labels]
    if output_text is None:
        once = sorted(label for label in set(seen) if label.isalpha() and seen.count(label) == 1)
        return inputs, [str(i) for i in range(ellipsis_dims)] + once
    output_letters = letters(output_text, "output")
    for label in output_letters:
        if label not in seen:
            raise ValueError(f"einsum: output label {label!r} does not appear in the inputs of {equation!r}")
        if output_letters.count(label) > 1:
            raise ValueError(f"einsum: output label {label!r} appears more than once in {equation!r}")
    if "..." not in output_text and ellipsis_dims and any("..." in term for term in terms):
        raise ValueError(f"einsum: the inputs of {equation!r} have '...' but its output does not")
    return inputs, expand(output_text, ellipsis_dims)


def _einsum_diagonals(operand: "Tensor", labels: list[str], equation: str) -> tuple["Tensor", list[str]]:
    """Take the diagonal over every label repeated within one operand ("ii->i")."""
    while len(set(labels)) < len(labels):
        label = next(label for label in labels if labels.count(label) > 1)
        first = labels.index(label)
        second = labels.index(label, first + 1)
        size = operand.shape[first]
        if operand.shape[second] != size:
            raise ValueError(f"einsum: label {label!r} is repeated in one operand of {equation!r} with sizes "
                             f"{size} and {operand.shape[second]}")
        others = [d for d in range(operand.ndim) if d not in (first, second)]
        moved = operand.permute(others + [first, second])
        outer_shape = moved.shape[:-2]
        # rows of size + 1 over the flattened square: element (i, 0) is (i, i)
        flat = moved.reshape(outer_shape + (size * size,)).pad(((0, 0),) * len(outer_shape) + ((0, size),))
        operand = flat.reshape(outer_shape + (size, size + 1))[..., 0]
        labels = [labels[d] for d in others] + [label]
    return operand, labels


def _align_labels(operand: "Tensor", labels: list[str], order: list[str]) -> "Tensor":
    """operand's dims permuted into `order`, with size-1 dims for the labels it lacks."""
    present = [label for label in order if label in labels]
    moved = operand.permute([labels.index(label) for label in present])
    return moved.reshape(tuple(moved.shape[present.index(label)] if label in labels else 1 for label in order))


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
        # only floating point results carry gradients (comparisons, casts to int, argmax do not), as in PyTorch
        needs_grad = self.requires_grad or any(other.requires_grad for other in others)
        if Tensor.grad_enabled and needs_grad and out.dtype.is_float:
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

    def to(self, *args, device: str | None = None, dtype=None) -> "Tensor":
        """`x.to("NPY")`, `x.to(dtypes.float16)`, `x.to("CPU", dtypes.int32)` or `x.to(other_tensor)`
        (its device and dtype): a string names a device, anything else a dtype."""
        for arg in args:
            if isinstance(arg, Tensor):
                device, dtype = device or arg.device, dtype or arg.dtype
            elif isinstance(arg, str):
                device = arg
            elif arg is not None:
                dtype = arg
        result = self if dtype is None else self.cast(dtype)
        if device is not None:
            result = result._apply("COPY", arg=canonical_device(device))
        return result

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

    @staticmethod
    def linspace(start, end, steps: int, dtype=None, device=None) -> "Tensor":
        """`steps` evenly spaced values from start to end inclusive (PyTorch's rounding: the first half
        counts up from start, the second half down from end)."""
        steps = int(steps)
        if steps < 0:
            raise ValueError(f"linspace: number of steps must be non-negative, got {steps}")
        dtype = dtypes.from_any(dtype or dtypes.default_float)
        index = np.arange(steps, dtype=np.float64)
        step = (end - start) / (steps - 1) if steps > 1 else 0.0
        values = np.where(index < steps / 2, start + index * step, end - (steps - 1 - index) * step)
        return Tensor(values.astype(dtype.np), device=device)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype=None, device=None) -> "Tensor":
        """Ones on the diagonal of an (n, m) matrix, built as a view of one constant (no buffer)."""
        m = n if m is None else m
        if n < 0 or m < 0:
            raise ValueError(f"eye: n and m must be non-negative, got n={n}, m={m}")
        size = max(n, m)
        dtype = dtypes.from_any(dtype or dtypes.default_float)
        # a column of ones padded to rows of size + 1, read back in rows of size: the one moves right by one per row
        ones = Tensor.full((size, 1), 1, dtype, device).pad(((0, 0), (0, size)))
        square = ones.reshape(size * (size + 1))[:size * size].reshape(size, size)
        return square[:n, :m]

    @staticmethod
    def randint(low, high=None, size=None, dtype=None, device=None) -> "Tensor":
        """Integers uniform on [low, high): `randint(low, high, shape)` or `randint(high, shape)`."""
        if size is None and isinstance(high, (tuple, list)):
            low, high, size = 0, low, high
        if high is None or size is None:
            raise TypeError("randint: expected randint(low, high, size) or randint(high, size)")
        if low >= high:
            raise ValueError(f"randint: low ({low}) must be less than high ({high})")
        shape = _shape_argument((size,) if isinstance(size, int) else tuple(size))
        dtype = dtypes.from_any(dtype or dtypes.int64)
        return Tensor(_rng.integers(low, high, size=shape).astype(dtype.np), device=device)

    @staticmethod
    def uniform(*shape, low=0.0, high=1.0, dtype=None, device=None) -> "Tensor":
        """Uniform on [low, high): `uniform(2, 3, low=-1.0, high=1.0)` or `uniform((2, 3), -1.0, 1.0)`."""
        shape, (low, high) = _shape_then_values(shape, (low, high), "uniform")
        dtype = dtypes.from_any(dtype or dtypes.default_float)
        if not dtype.is_float:
            raise TypeError(f"uniform: dtype must be floating point, got {dtype.name}")
        return Tensor.rand(shape, dtype=dtype, device=device) * (high - low) + low

    @staticmethod
    def normal(*shape, mean=0.0, std=1.0, dtype=None, device=None) -> "Tensor":
        """Normal with the given mean and std: `normal(2, 3, mean=1.0)` or `normal((2, 3), 1.0, 0.5)`."""
        shape, (mean, std) = _shape_then_values(shape, (mean, std), "normal")
        if std < 0:
            raise ValueError(f"normal: std must be non-negative, got {std}")
        dtype = dtypes.from_any(dtype or dtypes.default_float)
        if not dtype.is_float:
            raise TypeError(f"normal: dtype must be floating point, got {dtype.name}")
        return Tensor.randn(shape, dtype=dtype, device=device) * std + mean

    @staticmethod
    def kaiming_uniform(*shape, a: float = 0.01, dtype=None, device=None) -> "Tensor":
        """He initialization, as torch.nn.init.kaiming_uniform_ for a leaky ReLU of slope `a` (default 0.01,
        tinygrad's; PyTorch's is 0): uniform on +-sqrt(3) * sqrt(2 / (1 + a**2)) / sqrt(fan_in)."""
        fan_in, _ = _fans(_shape_argument(shape), "kaiming_uniform")
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a * a)) / math.sqrt(max(fan_in, 1))
        return Tensor.uniform(_shape_argument(shape), low=-bound, high=bound, dtype=dtype, device=device)

    @staticmethod
    def glorot_uniform(*shape, dtype=None, device=None) -> "Tensor":
        """Xavier/Glorot initialization (torch.nn.init.xavier_uniform_): uniform on +-sqrt(6 / (fan_in + fan_out))."""
        fan_in, fan_out = _fans(_shape_argument(shape), "glorot_uniform")
        bound = math.sqrt(6.0 / max(fan_in + fan_out, 1))
        return Tensor.uniform(_shape_argument(shape), low=-bound, high=bound, dtype=dtype, device=device)

    # `x.zeros_like()` and `Tensor.zeros_like(x)` both work; dtype and device default to x's

    def full_like(self, fill_value, dtype=None, device=None) -> "Tensor":
        return Tensor.full(self.shape, fill_value, dtype or self.dtype, device or self.device)

    def zeros_like(self, dtype=None, device=None) -> "Tensor":
        return self.full_like(0, dtype, device)

    def ones_like(self, dtype=None, device=None) -> "Tensor":
        return self.full_like(1, dtype, device)

    def empty_like(self, dtype=None, device=None) -> "Tensor":
        return self.zeros_like(dtype, device)

    def rand_like(self, dtype=None, device=None) -> "Tensor":
        dtype = dtypes.from_any(dtype or self.dtype)
        if not dtype.is_float:
            raise TypeError(f"rand_like: dtype must be floating point, got {dtype.name}")
        return Tensor.rand(self.shape, dtype=dtype, device=device or self.device)

    def randn_like(self, dtype=None, device=None) -> "Tensor":
        dtype = dtypes.from_any(dtype or self.dtype)
        if not dtype.is_float:
            raise TypeError(f"randn_like: dtype must be floating point, got {dtype.name}")
        return Tensor.randn(self.shape, dtype=dtype, device=device or self.device)

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
        negative_sign = (x < 0).logical_or((x == 0).logical_and(x.reciprocal() < 0))  # -0.0 counts
        result = negative_sign.logical_and(odd_integer).where(-magnitude, magnitude)
        fractional = finite_y.logical_and(y != y.trunc())
        negative_finite = (x < 0).logical_and(x != -math.inf)
        result = negative_finite.logical_and(fractional).where(math.nan, result)
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

    def sigmoid(self) -> "Tensor":
        # exp(-|x|) never overflows, so large |x| gives 0 or 1 and a finite gradient
        x = self._to_float()
        e = (-x.abs()).exp()
        return (x >= 0).where(1, e) / (1 + e)

    def tanh(self) -> "Tensor":
        # tanh(|x|) = -expm1(-2|x|) / (2 + expm1(-2|x|)): relative precision near 0, no overflow
        x = self._to_float()
        em = (-2 * x.abs()).expm1()
        magnitude = -em / (2 + em)
        return (x < 0).where(-magnitude, magnitude)

    def relu(self): return self.maximum(0)
    def square(self): return self * self
    def __abs__(self): return self.abs()

    def abs(self) -> "Tensor":
        if self.dtype.is_bool or self.dtype.is_unsigned:
            return self
        return (self < 0).where(-self, self)

    def _with_zero_gradient(self, value: "Tensor") -> "Tensor":
        """`value` (computed from self without autograd) joined to self's graph with a zero gradient:
        PyTorch's gradient of sign, floor, ceil, trunc and round."""
        if not (Tensor.grad_enabled and self.requires_grad):
            return value
        return Tensor.full(self.shape, False, dtypes.bool, self.device).where(self, value)

    def sign(self) -> "Tensor":
        if self.dtype.is_bool:
            return self
        with no_grad():
            value = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
        return self._with_zero_gradient(value)

    def trunc(self) -> "Tensor":
        if not self.dtype.is_float:
            return self
        with no_grad():
            whole = self - self._apply("MOD", self._const_like(1))
            whole = self.isinf().where(self, whole)  # fmod(inf, 1) is NaN
        return self._with_zero_gradient(whole)

    def floor(self) -> "Tensor":
        if not self.dtype.is_float:
            return self
        with no_grad():
            truncated = self.trunc()
            value = (self < truncated).where(truncated - 1, truncated)
        return self._with_zero_gradient(value)

    def ceil(self) -> "Tensor":
        if not self.dtype.is_float:
            return self
        with no_grad():
            truncated = self.trunc()
            value = (self > truncated).where(truncated + 1, truncated)
        return self._with_zero_gradient(value)

    def round(self, decimals: int = 0) -> "Tensor":
        """Round half to even, as PyTorch (and numpy) do: 0.5 -> 0, 1.5 -> 2, -2.5 -> -2.
        With `decimals`, rounds x * 10**decimals (or x / 10**-decimals) and scales back, as PyTorch."""
        if not self.dtype.is_float:
            return self
        if decimals > 0:
            return (self * 10.0 ** decimals).round() / 10.0 ** decimals
        if decimals < 0:
            return (self / 10.0 ** -decimals).round() * 10.0 ** -decimals
        with no_grad():
            floor = self.floor()
            fraction = self - floor  # exact in binary floating point
            odd = floor._apply("MOD", floor._const_like(2)) != 0
            up = (fraction > 0.5).logical_or((fraction == 0.5).logical_and(odd))
            value = up.where(floor + 1, floor)
        return self._with_zero_gradient(value)

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

    def isnan(self) -> "Tensor":
        return self != self if self.dtype.is_float else Tensor.full(self.shape, False, dtypes.bool, self.device)

    def isinf(self) -> "Tensor":
        if not self.dtype.is_float:
            return Tensor.full(self.shape, False, dtypes.bool, self.device)
        return self.abs() == math.inf

    def isfinite(self) -> "Tensor":
        if not self.dtype.is_float:
            return Tensor.full(self.shape, True, dtypes.bool, self.device)
        return self.abs() < math.inf  # False for NaN too

    def lerp(self, end, weight) -> "Tensor":
        """self + weight * (end - self), with PyTorch's formula (exact at weight 0 and 1)."""
        start, end = self._operands(end, "lerp")
        if not start.dtype.is_float:
            raise TypeError(f"lerp: inputs must be floating point, got {start.dtype.name}")
        if not isinstance(weight, Tensor):
            diff = end - start
            return start + weight * diff if abs(weight) < 0.5 else end - diff * (1 - weight)
        shape = broadcast_shapes("lerp", start.shape, weight.shape)
        start, end = start._broadcast_to(shape), end._broadcast_to(shape)
        weight = weight.cast(start.dtype)._broadcast_to(shape)
        diff = end - start
        return (weight.abs() < 0.5).where(start + weight * diff, end - diff * (1 - weight))

    def clone(self) -> "Tensor":
        """A copy in new memory (when realized), differentiable like the original."""
        return self._apply("CONTIGUOUS")

    # ---- more accurate compositions: expm1, log1p, erf ----------------------------------------
    # Each uses a short series where the plain formula loses digits and the plain formula elsewhere;
    # the series only ever sees the inputs it is used for, so no branch produces inf or NaN and the
    # gradient through `where` stays finite.

    def expm1(self) -> "Tensor":
        """exp(x) - 1, accurate for small x."""
        x = self._to_float()
        small = x.abs() < 0.5
        near_zero = small.where(x, 0.0)
        terms = {dtypes.float16: 6, dtypes.float32: 9}.get(x.dtype, 15)  # 0.5**n / (n+1)! below the dtype's epsilon
        series = near_zero._const_like(1.0)
        for k in range(terms, 1, -1):  # x * (1 + x/2 * (1 + x/3 * (1 + ...)))
            series = 1 + near_zero * series * (1.0 / k)
        return small.where(near_zero * series, x.exp() - 1)

    def log1p(self) -> "Tensor":
        """log(1 + x), accurate for small x."""
        x = self._to_float()
        small = x.abs() < 0.25
        near_zero = small.where(x, 0.0)
        # log(1 + x) = 2 atanh(s) = 2 (s + s**3/3 + s**5/5 + ...) with s = x / (2 + x), |s| < 1/7
        s = near_zero / (2 + near_zero)
        terms = {dtypes.float16: 3, dtypes.float32: 5}.get(x.dtype, 10)
        series = _polynomial(s * s, [1.0 / (2 * k + 1) for k in range(terms)])
        return small.where(2 * s * series, (1 + x).log())

    def _erf_pieces(self) -> tuple["Tensor", "Tensor", "Tensor", "Tensor"]:
        """In float64: (x, |x| < 1, erf(x) where |x| < 1, erfc(|x|) where |x| >= 1)."""
        x = self.double()
        a = x.abs()
        small = a < 1
        inner = small.where(x, 0.0)
        outer = small.where(1.0, a)
        t = (1 + 0.5 * outer).reciprocal()
        tail = (-(outer * outer)).exp() * t * _polynomial(t, _ERFC_TAIL)
        return x, small, inner * _polynomial(inner * inner, _ERF_NEAR_ZERO), tail

    def erf(self) -> "Tensor":
        """The error function; computed in float64, relative error below 4e-11 (see _ERF_NEAR_ZERO)."""
        x, small, near_zero, tail = self._erf_pieces()
        return small.where(near_zero, (x < 0).where(tail - 1, 1 - tail)).cast(least_float(self.dtype))

    def erfc(self) -> "Tensor":
        """1 - erf(x), with relative precision in the tail (erfc(10) is 2.1e-45, not 0)."""
        x, small, near_zero, tail = self._erf_pieces()
        return small.where(1 - near_zero, (x < 0).where(2 - tail, tail)).cast(least_float(self.dtype))

    # ---- activations --------------------------------------------------------------------------

    def relu6(self) -> "Tensor":
        return self.clamp(0, 6)

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> "Tensor":
        if min_val > max_val:
            raise ValueError(f"hardtanh: min_val ({min_val}) must not be greater than max_val ({max_val})")
        return self.clamp(min_val, max_val)

    def leaky_relu(self, negative_slope: float = 0.01) -> "Tensor":
        x = self._to_float()
        return (x > 0).where(x, x * negative_slope)

    def elu(self, alpha: float = 1.0) -> "Tensor":
        x = self._to_float()
        return (x > 0).where(x, alpha * x.minimum(0).expm1())

    def selu(self) -> "Tensor":
        return _SELU_SCALE * self.elu(_SELU_ALPHA)

    def gelu(self, approximate: str = "none") -> "Tensor":
        """x * Phi(x); approximate='tanh' uses 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))."""
        x = self._to_float()
        if approximate == "none":
            wide = x.double()  # erfc(-x/sqrt 2) needs x/sqrt 2 unrounded in its tail
            return (0.5 * wide * (wide * -math.sqrt(0.5)).erfc()).cast(x.dtype)
        if approximate == "tanh":
            # 0.5 (1 + tanh(u)) == sigmoid(2u)
            return x * (2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).sigmoid()
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")

    def silu(self) -> "Tensor":
        return self * self.sigmoid()

    swish = silu

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> "Tensor":
        """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (as PyTorch)."""
        x = self._to_float()
        scaled = x * beta
        linear = scaled > threshold
        return linear.where(x, linear.where(0.0, scaled).exp().log1p() / beta)

    def mish(self) -> "Tensor":
        return self * self.softplus().tanh()

    def softsign(self) -> "Tensor":
        x = self._to_float()
        return x / (1 + x.abs())

    def hardsigmoid(self) -> "Tensor":
        return (self._to_float() + 3).relu6() / 6

    def hardswish(self) -> "Tensor":
        x = self._to_float()
        return x * (x + 3).relu6() / 6

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

    def var(self, axis=None, unbiased: bool | None = None, keepdim: bool = False, *, correction=None,
            dim=None) -> "Tensor":
        """Sum of squared deviations / (N - correction); correction=1 (Bessel's) by default, as PyTorch."""
        axis = _pick_axis(axis, dim, "var")
        if not self.dtype.is_float:
            raise TypeError(f"var: input dtype must be floating point, got {self.dtype.name}")
        if unbiased is not None and correction is not None:
            raise ValueError("var: pass either unbiased or correction, not both")
        if correction is None:
            correction = 0 if unbiased is False else 1
        axes = self._reduce_axes(axis, "var")
        count = math.prod(self.shape[a] for a in axes)
        centered = self - self.mean(axis, keepdim=True)
        return centered.square().sum(axis, keepdim) / max(count - correction, 0)  # N <= correction: inf or NaN

    def std(self, axis=None, unbiased: bool | None = None, keepdim: bool = False, *, correction=None,
            dim=None) -> "Tensor":
        return self.var(axis, unbiased, keepdim, correction=correction, dim=dim).sqrt()

    def any(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        return self.bool()._reduce("MAX_REDUCE", _pick_axis(axis, dim, "any"), keepdim, "any")

    def all(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        return self.logical_not().any(_pick_axis(axis, dim, "all"), keepdim).logical_not()

    def argmax(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        """Index (int64) of the first maximum; NaN counts as the maximum, as in PyTorch. With no axis,
        the index into the flattened tensor."""
        return self.detach()._first_max_index(_pick_axis(axis, dim, "argmax"), keepdim, "argmax")

    def argmin(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        """Index (int64) of the first minimum; NaN counts as the minimum, as in PyTorch."""
        x = self.detach()
        if x.dtype.is_float:
            reversed_order = -x
        elif x.dtype.is_bool:
            reversed_order = x.logical_not()
        else:
            reversed_order = ~x  # reverses the order of integers without overflow
        return reversed_order._first_max_index(_pick_axis(axis, dim, "argmin"), keepdim, "argmin")

    def _first_max_index(self, axis, keepdim: bool, name: str) -> "Tensor":
        self._check_not_empty(axis, name)
        if axis is None:
            index = self.reshape(-1)._first_max_index(0, False, name)
            return index.reshape((1,) * self.ndim) if keepdim else index
        axis = _normalize_axis(axis, self.ndim, name)
        if self.ndim == 0:
            return Tensor.zeros((), dtype=dtypes.int64, device=self.device)
        size = self.shape[axis]
        is_max = self == self.max(axis, keepdim=True)
        if self.dtype.is_float:
            is_max = is_max.logical_or(self != self)
        # the largest of (size - index) over the maxima is the first maximum
        countdown = Tensor.arange(size, 0, -1, device=self.device).reshape(
            tuple(size if d == axis else 1 for d in range(self.ndim)))
        return size - is_max.where(countdown, 0)._reduce("MAX_REDUCE", axis, keepdim, name)

    def logsumexp(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        """log(sum(exp(x))), shifted by the max so it neither overflows nor underflows."""
        axis = _pick_axis(axis, dim, "logsumexp")
        x = self._to_float()
        axes = x._reduce_axes(axis, "logsumexp")
        if any(x.shape[a] == 0 for a in axes):
            return x.sum(axis, keepdim).log()  # -inf, as in PyTorch
        top = x.detach().max(axis, keepdim=True)  # any shift gives the same value and gradient
        top = top.isinf().where(0.0, top)
        total = (x - top).exp().sum(axis, keepdim=True).log() + top
        return total if keepdim else total.reshape(tuple(s for a, s in enumerate(x.shape) if a not in axes))

    # ---- softmax and cumulative reductions ----------------------------------------------------

    def _shifted_by_max(self, axis, dtype, name: str) -> tuple["Tensor", int]:
        """self minus its max along axis (softmax is unchanged by the shift, and exp cannot overflow)."""
        x = self.cast(dtype) if dtype is not None else self
        if not x.dtype.is_float:
            raise TypeError(f"{name}: input dtype must be floating point, got {x.dtype.name}; pass dtype=")
        axis = _normalize_axis(axis, x.ndim, name)
        if x.numel() == 0:
            return x, axis
        return x - x.detach().max(axis, keepdim=True), axis

    def softmax(self, axis: int | None = None, dtype=None, *, dim=None) -> "Tensor":
        """exp(x) / sum(exp(x)) along axis (default the last, as in tinygrad): 3 kernels."""
        shifted, axis = self._shifted_by_max(_pick_axis(axis, dim, "softmax", -1), dtype, "softmax")
        e = shifted.exp()
        return e / e.sum(axis, keepdim=True)

    def log_softmax(self, axis: int | None = None, dtype=None, *, dim=None) -> "Tensor":
        shifted, axis = self._shifted_by_max(_pick_axis(axis, dim, "log_softmax", -1), dtype, "log_softmax")
        return shifted - shifted.exp().sum(axis, keepdim=True).log()

    def _sliding_windows(self, pad_value) -> "Tensor":
        """(..., n) -> (..., n, n) where row i holds the first i + 1 elements of the last dim, right-aligned
        after n - 1 - i copies of pad_value. A view (pad, expand, reshape, shrink): nothing is copied.

        padded = n - 1 pad values, then x (length L = 2n - 1). n + 1 copies of it, flattened and read
        back in rows of L + 1, start one element later on each row: row i, column j is padded[i + j]."""
        n, batch = self.shape[-1], self.shape[:-1]
        length = 2 * n - 1
        padded = self.pad(((0, 0),) * len(batch) + ((n - 1, 0),), value=pad_value)
        repeated = padded.unsqueeze(-2).expand(batch + (n + 1, length)).reshape(batch + ((n + 1) * length,))
        rows = repeated[..., :n * (length + 1)].reshape(batch + (n, length + 1))
        return rows[..., :n]

    def _cumulative(self, op: str, axis, pad_value, name: str) -> "Tensor":
        """A running reduce along axis: one reduce over a windowed view, so one kernel, no loop."""
        axis = _normalize_axis(axis, self.ndim, name)
        if self.ndim == 0 or self.numel() == 0 or self.shape[axis] == 1:
            return self
        # windows along the last dim, then the output dim back in place before reducing: a permute
        # after the reduce would cost a second kernel
        windows = self.transpose(axis, -1)._sliding_windows(pad_value).transpose(axis, -2)
        return windows._reduce(op, -1, False, name)

    def cumsum(self, axis: int | None = None, dtype=None, *, dim=None) -> "Tensor":
        source = self.cast(dtype) if dtype is not None else (self if self.dtype.is_float else self.cast(dtypes.int64))
        return source._cumulative("SUM", _pick_axis(axis, dim, "cumsum", 0), 0, "cumsum")

    def cumprod(self, axis: int | None = None, dtype=None, *, dim=None) -> "Tensor":
        """Running product. Its gradient divides by the input (the PROD rule), so it is NaN at zeros."""
        source = self.cast(dtype) if dtype is not None else (self if self.dtype.is_float else self.cast(dtypes.int64))
        return source._cumulative("PROD", _pick_axis(axis, dim, "cumprod", 0), 1, "cumprod")

    def cummax(self, axis: int | None = None, *, dim=None) -> "Tensor":
        """Running maximum: the values only (PyTorch also returns their indices); NaN propagates.
        Ties share the gradient, as for max."""
        lowest = np.asarray(reduce_identity("MAX_REDUCE", self.dtype)).item()
        return self._cumulative("MAX_REDUCE", _pick_axis(axis, dim, "cummax", 0), lowest, "cummax")

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

    def pad(self, padding, value=0.0, mode: str = "constant") -> "Tensor":
        """padding: one (before, after) pair per dim, or PyTorch's flat list starting at the last dim.
        mode: "constant" (value), "reflect" (mirror without the edge), "replicate" (repeat the edge),
        "circular" (wrap around). Negative constant padding crops."""
        if mode != "constant":
            return self._pad_with_mode(padding, value, mode)
        pairs = self._padding_pairs(padding)
        value = 0.0 if value is None else value
        result = self
        if any(lo < 0 or hi < 0 for lo, hi in pairs):  # negative padding crops
            result = result.shrink(tuple((-min(lo, 0), size + min(hi, 0)) for (lo, hi), size in zip(pairs, self.shape)))
            pairs = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
        padded = result._apply("PAD", arg=tuple(pairs))
        if value == 0:
            return padded
        inside = Tensor.full(result.shape, True, dtypes.bool, self.device)._apply("PAD", arg=tuple(pairs))
        return inside.where(padded, Tensor.full(padded.shape, value, self.dtype, self.device))

    def _padding_pairs(self, padding) -> list[tuple[int, int]]:
        """One (before, after) pair per dim from either form pad() accepts."""
        padding = list(padding)
        if padding and all(isinstance(p, int) for p in padding):
            if len(padding) % 2 or len(padding) // 2 > self.ndim:
                raise ValueError(f"pad: flat padding {padding} needs an even length of at most {2 * self.ndim}")
            pairs = [(padding[i], padding[i + 1]) for i in range(0, len(padding), 2)]
            padding = [(0, 0)] * (self.ndim - len(pairs)) + list(reversed(pairs))
        if len(padding) != self.ndim:
            raise ValueError(f"pad: got {len(padding)} (before, after) pairs for a tensor of shape {self.shape}")
        return [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]

    def _pad_with_mode(self, padding, value, mode: str) -> "Tensor":
        if mode not in ("reflect", "replicate", "circular"):
            raise ValueError(f"pad: unknown mode {mode!r}; expected 'constant', 'reflect', 'replicate' or 'circular'")
        if value not in (None, 0):
            raise ValueError(f"pad: mode {mode!r} takes no value (got {value})")
        pairs = self._padding_pairs(padding)
        result = self
        for dim, (before, after) in enumerate(pairs):
            if before == 0 and after == 0:
                continue
            size = self.shape[dim]
            limit = {"reflect": size - 1, "replicate": math.inf if size else 0, "circular": size}[mode]
            if min(before, after) < 0 or max(before, after) > limit:
                raise ValueError(f"pad: {mode} padding {(before, after)} of dim {dim} needs values between 0 and "
                                 f"{limit} for shape {self.shape}")
            if mode == "reflect":
                parts = (result.narrow(dim, 1, before).flip(dim), result,
                         result.narrow(dim, size - 1 - after, after).flip(dim))
            elif mode == "replicate":
                edge_shape = lambda count: result.shape[:dim] + (count,) + result.shape[dim + 1:]  # noqa: E731
                parts = (result.narrow(dim, 0, 1).expand(edge_shape(before)), result,
                         result.narrow(dim, size - 1, 1).expand(edge_shape(after)))
            else:
                parts = (result.narrow(dim, size - before, before), result, result.narrow(dim, 0, after))
            result = Tensor.cat(parts, dim=dim)
        return result

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

    def expand_as(self, other: "Tensor") -> "Tensor":
        return self.expand(other.shape)

    def unflatten(self, dim: int, sizes) -> "Tensor":
        dim = _normalize_axis(dim, self.ndim, "unflatten")
        sizes, size = tuple(int(s) for s in sizes), self.shape[dim]
        if sizes.count(-1) > 1:
            raise ValueError(f"unflatten: only one size can be -1, got {sizes}")
        if -1 in sizes:
            known = math.prod(s for s in sizes if s != -1)
            sizes = tuple(size // known if s == -1 and known else s for s in sizes)
        if math.prod(sizes) != size or any(s < 0 for s in sizes):
            raise ValueError(f"unflatten: sizes {sizes} do not multiply to the size {size} of dim {dim} "
                             f"of shape {self.shape}")
        return self.reshape(self.shape[:dim] + sizes + self.shape[dim + 1:])

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        """The `length` elements from `start` along dim (a view)."""
        if self.ndim == 0:
            raise ValueError("narrow: cannot narrow a 0-d tensor")
        dim = _normalize_axis(dim, self.ndim, "narrow")
        size = self.shape[dim]
        start, length = int(start), int(length)
        if not -size <= start <= size:
            raise IndexError(f"narrow: start {start} is out of range for dim {dim} of size {size} "
                             f"(expected to be in range of [{-size}, {size}])")
        start = start + size if start < 0 else start
        if length < 0 or start + length > size:
            raise ValueError(f"narrow: start ({start}) + length ({length}) exceeds dim {dim} of size {size}")
        return self.shrink(tuple((start, start + length) if d == dim else None for d in range(self.ndim)))

    def _tiled(self, dim: int, copies: int) -> "Tensor":
        """`copies` copies of self one after another along dim, as a view (expand, then reshape)."""
        shape = self.shape
        expanded = self.unsqueeze(dim).expand(shape[:dim] + (copies,) + shape[dim:])
        return expanded.reshape(shape[:dim] + (copies * shape[dim],) + shape[dim + 1:])

    def roll(self, shifts, dims=None) -> "Tensor":
        """Shift elements along dims, wrapping around; with no dims, over the flattened tensor."""
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        if dims is None:
            if len(shifts) != 1:
                raise ValueError(f"roll: without dims, shifts must be one int, got {shifts}")
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shifts) != len(dims):
            raise ValueError(f"roll: shifts {shifts} and dims {dims} must have the same length")
        result = self
        for shift, dim in zip(shifts, dims):
            dim = _normalize_axis(dim, self.ndim, "roll")
            size = self.shape[dim] if self.ndim else 1
            if size == 0 or shift % size == 0:
                continue
            result = result._tiled(dim, 2).narrow(dim, size - shift % size, size)
        return result

    def repeat(self, *sizes) -> "Tensor":
        """Tile self `sizes[d]` times along each dim; extra leading sizes add dims (PyTorch's repeat)."""
        sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
        sizes = tuple(int(s) for s in sizes)
        if len(sizes) < self.ndim:
            raise ValueError(f"repeat: got {len(sizes)} repeat sizes {sizes}, fewer than the {self.ndim} dims of "
                             f"shape {self.shape}")
        if any(s < 0 for s in sizes):
            raise ValueError(f"repeat: sizes must be non-negative, got {sizes}")
        shape = (1,) * (len(sizes) - self.ndim) + self.shape
        singles = tuple(size for dim_size in shape for size in (1, dim_size))
        repeated = tuple(size for count, dim_size in zip(sizes, shape) for size in (count, dim_size))
        return self.reshape(singles).expand(repeated).reshape(tuple(c * s for c, s in zip(sizes, shape)))

    def tile(self, *dims) -> "Tensor":
        dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        return self.repeat((1,) * (self.ndim - len(dims)) + tuple(dims))

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> "Tensor":
        """Each element `repeats` times in a row along dim (flattened when dim is None).
        Only an int `repeats`: per-element counts would give a shape that depends on the data."""
        if isinstance(repeats, Tensor):
            if repeats.numel() != 1:
                raise TypeError(f"repeat_interleave: repeats must be an int (per-element repeats of shape "
                                f"{repeats.shape} are not supported)")
            repeats = repeats.item()
        repeats = int(repeats)
        if repeats < 0:
            raise ValueError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
        source = self.flatten() if dim is None else self
        dim = 0 if dim is None else _normalize_axis(dim, self.ndim, "repeat_interleave")
        if source.ndim == 0:
            source = source.reshape(1)
        return source.unsqueeze(dim + 1)._tiled(dim + 1, repeats).reshape(
            source.shape[:dim] + (source.shape[dim] * repeats,) + source.shape[dim + 1:])

    # ---- joining and splitting ----------------------------------------------------------------

    def cat(self, *others, dim: int | None = None, axis: int | None = None) -> "Tensor":
        """Join tensors along dim: `x.cat(y, z, dim=1)` or `Tensor.cat([x, y, z], dim=1)` (torch.cat).
        Each tensor is padded to the full size and placed with `where`: one kernel, any count."""
        tensors, dim = _tensor_list_and_dim(self, others, dim, axis, "cat")
        tensors = [t for t in tensors if t.shape != (0,)] or tensors[:1]  # PyTorch skips legacy empty 1-d tensors
        first = tensors[0]
        if first.ndim == 0:
            raise ValueError("cat: zero-dimensional tensors cannot be concatenated; unsqueeze them or use stack")
        dim = _normalize_axis(dim, first.ndim, "cat")
        for number, t in enumerate(tensors):
            if t.device != first.device:
                raise ValueError(f"cat: tensor {number} is on {t.device}, tensor 0 on {first.device}")
            if t.ndim != first.ndim or any(a != b for d, (a, b) in enumerate(zip(t.shape, first.shape)) if d != dim):
                raise ValueError(f"cat: shapes must match except in dim {dim}: tensor 0 has shape {first.shape}, "
                                 f"tensor {number} has shape {t.shape}")
        dtype = result_type([t.dtype for t in tensors], [], [])
        total = sum(t.shape[dim] for t in tensors)
        result, offset = None, 0
        for t in tensors:
            size = t.shape[dim]
            padding = tuple((offset, total - offset - size) if d == dim else (0, 0) for d in range(first.ndim))
            placed = t.cast(dtype).pad(padding)
            if result is None:
                result = placed
            elif size:
                inside = Tensor.full(t.shape, True, dtypes.bool, t.device).pad(padding)
                result = inside.where(placed, result)
            offset += size
        return result

    def stack(self, *others, dim: int | None = None, axis: int | None = None) -> "Tensor":
        """Join equally shaped tensors along a new dim: `x.stack(y, dim=0)` or `Tensor.stack([x, y])`."""
        tensors, dim = _tensor_list_and_dim(self, others, dim, axis, "stack")
        for number, t in enumerate(tensors):
            if t.shape != tensors[0].shape:
                raise ValueError(f"stack: expects tensors of equal shape, got {tensors[0].shape} at entry 0 and "
                                 f"{t.shape} at entry {number}")
        dim = _normalize_axis(dim, tensors[0].ndim + 1, "stack")
        return Tensor.cat([t.unsqueeze(dim) for t in tensors], dim=dim)

    def split(self, split_size_or_sections, dim: int = 0) -> tuple["Tensor", ...]:
        """Views of consecutive pieces along dim: an int gives pieces of that size (the last may be
        smaller), a list gives the size of each piece."""
        dim = _normalize_axis(dim, self.ndim, "split")
        size = self.shape[dim]
        if isinstance(split_size_or_sections, int):
            piece = split_size_or_sections
            if piece <= 0 and not (piece == 0 and size == 0):
                raise ValueError(f"split: split_size must be positive, got {piece}")
            sizes = [min(piece, size - start) for start in range(0, size, piece)] if size else [0]
        else:
            sizes = [int(s) for s in split_size_or_sections]
            if sum(sizes) != size or any(s < 0 for s in sizes):
                raise ValueError(f"split: sizes {sizes} must be non-negative and add up to the size {size} "
                                 f"of dim {dim}")
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return tuple(self.narrow(dim, start, piece) for start, piece in zip(starts, sizes))

    def chunk(self, chunks: int, dim: int = 0) -> tuple["Tensor", ...]:
        """Split into `chunks` pieces of ceil(size / chunks) (so possibly fewer pieces, as in PyTorch)."""
        if chunks <= 0:
            raise ValueError(f"chunk: chunks must be positive, got {chunks}")
        size = self.shape[_normalize_axis(dim, self.ndim, "chunk")]
        return self.split(max(-(-size // chunks), 1) if size else 0, dim)

    def unbind(self, dim: int = 0) -> tuple["Tensor", ...]:
        dim = _normalize_axis(dim, self.ndim, "unbind")
        return tuple(self[(slice(None),) * dim + (i,)] for i in range(self.shape[dim]))

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

    # ---- indexing -----------------------------------------------------------------------------

    def _normalized_indices(self, indices, op: str) -> tuple:
        """The index as a tuple with one entry per dim of self (plus the Nones), Ellipsis expanded."""
        if not isinstance(indices, tuple):
            indices = (indices,)
        for index in indices:
            if isinstance(index, Tensor):
                if index.dtype.is_bool:
                    raise TypeError(f"{op}: boolean mask indices need data-dependent shapes and are not supported; "
                                    "use where() or masked_fill()")
                continue
            if not (index is None or index is Ellipsis or isinstance(index, (int, slice, np.integer))) \
                    or isinstance(index, bool):
                raise TypeError(f"{op}: index {index!r}: only ints, slices, None, ... and integer Tensors "
                                "are supported here")
        if sum(index is Ellipsis for index in indices) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        consuming = [index for index in indices if index is not None and index is not Ellipsis]
        if len(consuming) > self.ndim:
            raise IndexError(f"too many indices for tensor of dimension {self.ndim}")
        if any(index is Ellipsis for index in indices):  # not `in`: == on a Tensor index compares elements
            at = next(i for i, index in enumerate(indices) if index is Ellipsis)
            return indices[:at] + (slice(None),) * (self.ndim - len(consuming)) + indices[at + 1:]
        return indices + (slice(None),) * (self.ndim - len(consuming))

    def __getitem__(self, indices) -> "Tensor":
        """Indexing as in PyTorch: ints, slices (any step), None, Ellipsis and integer Tensors.

        Integer Tensor indices gather: several broadcast together like numpy's advanced indexing, and
        their broadcast dims replace the indexed dims when those are adjacent, else come first. As in
        PyTorch (not numpy), an int among Tensor indices selects first and so does not count in that
        adjacency. Tensor index values are not bounds-checked (that would need their data): an
        out-of-range value reads 0. Gathering is a one-hot comparison and a sum, so it stays lazy,
        fuses and differentiates.
        """
        indices = self._normalized_indices(indices, "index")
        result, dim, final_shape, gathers = self, 0, [], []
        for index in indices:
            if index is None:
                final_shape.append(1)
                continue
            size = self.shape[dim]
            if isinstance(index, Tensor):
                gathers.append((len(final_shape), index))
                final_shape.append(size)
            elif isinstance(index, slice):
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
        result = result.reshape(tuple(final_shape))
        return result._gather_dims(gathers) if gathers else result

    def _gather_dims(self, gathers: list[tuple[int, "Tensor"]]) -> "Tensor":
        """Advanced indexing of the dims in `gathers` ((dim, integer index tensor) pairs)."""
        positions = [dim for dim, _ in gathers]
        for _, index in gathers:
            if not index.dtype.is_int:
                raise IndexError(f"tensors used as indices must be integer tensors, got {index.dtype.name}")
            if index.device != self.device:
                raise ValueError(f"index: index tensor is on {index.device}, the indexed tensor on {self.device}")
        try:
            index_shape = broadcast_shapes("index", *[index.shape for _, index in gathers])
        except ValueError:
            shapes = ", ".join(str(index.shape) for _, index in gathers)
            raise IndexError(f"shape mismatch: index tensors of shapes {shapes} cannot be broadcast together") from None
        # one flat index into the indexed dims, negative values counting from the end
        flat = None
        for dim, index in gathers:
            size = self.shape[dim]
            index = index.cast(dtypes.int64)
            index = (index < 0).where(index + size, index)
            flat = index if flat is None else flat * size + index
        count = math.prod(self.shape[dim] for dim in positions)
        rest = [d for d in range(self.ndim) if d not in positions]
        adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
        before = [d for d in rest if adjacent and d < positions[0]]
        after = [d for d in rest if d not in before]
        before_shape = tuple(self.shape[d] for d in before)
        after_shape = tuple(self.shape[d] for d in after)
        out_shape = before_shape + index_shape + after_shape
        source = self.permute(before + after + positions).reshape(
            before_shape + (1,) * len(index_shape) + after_shape + (count,))
        flat = flat._broadcast_to(index_shape).reshape(
            (1,) * len(before) + index_shape + (1,) * len(after) + (1,))
        hit = flat == Tensor.arange(count, device=self.device).reshape((1,) * len(out_shape) + (count,))
        return hit.where(source, _zero_of(self.dtype))._reduce("SUM", -1, False, "index")

    def gather(self, dim: int, index: "Tensor") -> "Tensor":
        """out[i][j][k] = self[i][index[i][j][k]][k] for dim=1 (torch.gather); index has self's ndim and
        is no larger than self outside dim. Index values are not bounds-checked: out of range reads 0."""
        dim = _normalize_axis(dim, self.ndim, "gather")
        if not isinstance(index, Tensor) or not index.dtype.is_int:
            raise TypeError(f"gather: index must be an integer Tensor, got "
                            f"{index.dtype.name if isinstance(index, Tensor) else type(index).__name__}")
        if self.ndim == 0:
            return self.reshape(1).gather(0, index.reshape(1)).reshape(index.shape)
        if index.ndim != self.ndim or any(i > s for d, (i, s) in enumerate(zip(index.shape, self.shape)) if d != dim):
            raise ValueError(f"gather: index of shape {index.shape} must have the {self.ndim} dims of the input "
                             f"{self.shape} and be no larger outside dim {dim}")
        size = self.shape[dim]
        source = self.shrink(tuple(None if d == dim else (0, i) for d, i in enumerate(index.shape)))
        # source: index's shape with `size` at dim; move dim last and let index's dim broadcast over it
        source = source.unsqueeze(-1).transpose(dim, -1)  # size 1 at dim, `size` last
        hit = index.unsqueeze(-1) == Tensor.arange(size, device=self.device)
        return hit.where(source, _zero_of(self.dtype))._reduce("SUM", -1, False, "gather")

    def scatter(self, dim: int, index: "Tensor", src, reduce: str | None = None) -> "Tensor":
        """A copy of self with self[index[i][j]][j] = src[i][j] for dim=0 (torch.scatter, not in place);
        reduce="add" or "multiply" combines instead of replacing. src may be a number. With repeated
        indices and no reduce (undefined in PyTorch), the values written to one place are added."""
        if reduce not in (None, "add", "multiply"):
            raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
        dim = _normalize_axis(dim, self.ndim, "scatter")
        if not isinstance(index, Tensor) or not index.dtype.is_int:
            raise TypeError("scatter: index must be an integer Tensor")
        if self.ndim == 0:
            src = src.reshape(1) if isinstance(src, Tensor) else src
            return self.reshape(1).scatter(0, index.reshape(1), src, reduce).reshape(())
        shape = index.shape
        if index.ndim != self.ndim or any(i > s for d, (i, s) in enumerate(zip(shape, self.shape)) if d != dim):
            raise ValueError(f"scatter: index of shape {shape} must have the {self.ndim} dims of the input "
                             f"{self.shape} and be no larger outside dim {dim}")
        if isinstance(src, Tensor):
            if src.ndim != self.ndim or any(i > s for i, s in zip(shape, src.shape)):
                raise ValueError(f"scatter: index of shape {shape} must be no larger than src {src.shape}")
            src = src.shrink(tuple((0, i) for i in shape)).cast(self.dtype)
        else:
            src = Tensor.full(shape, src, self.dtype, self.device)
        size = self.shape[dim]
        # target position p along dim receives src[s] for every s (last, new axis) with index[s] == p
        def spread(t: "Tensor") -> "Tensor":
            moved = t.unsqueeze(-1).transpose(dim, -1)  # (.., 1 at dim, .., k)
            return moved.expand(moved.shape[:dim] + (size,) + moved.shape[dim + 1:])
        positions = Tensor.arange(size, device=self.device).reshape(
            tuple(size if d == dim else 1 for d in range(self.ndim)) + (1,))
        hit, values = spread(index) == positions, spread(src)
        padding = tuple((0, 0) if d == dim else (0, s - i) for d, (i, s) in enumerate(zip(shape, self.shape)))
        if reduce == "multiply":
            factor = hit.where(values, values._const_like(1))._reduce("PROD", -1, False, "scatter")
            return self * factor.pad(padding, value=1)
        total = hit.where(values, _zero_of(self.dtype))._reduce("SUM", -1, False, "scatter").pad(padding)
        if reduce == "add":
            return self + total
        written = hit.any(-1).pad(padding)
        return written.where(total, self)

    def masked_fill(self, mask: "Tensor", value) -> "Tensor":
        """value where mask is True (mask broadcasts to self's shape; value takes self's dtype)."""
        if not isinstance(mask, Tensor) or not mask.dtype.is_bool:
            raise TypeError(f"masked_fill: mask must be a bool Tensor, got "
                            f"{mask.dtype.name if isinstance(mask, Tensor) else type(mask).__name__}")
        if broadcast_shapes("masked_fill", self.shape, mask.shape) != self.shape:
            raise ValueError(f"masked_fill: mask of shape {mask.shape} does not broadcast to the input's {self.shape}")
        if isinstance(value, Tensor):
            if value.ndim:
                raise ValueError(f"masked_fill: value must be a number or a 0-d tensor, got shape {value.shape}")
            value = value.cast(self.dtype)._broadcast_to(self.shape)
        else:
            value = Tensor.full(self.shape, value, self.dtype, self.device)
        return mask.where(value, self)

    def _triangle(self, keep_below: bool, diagonal: int, name: str) -> "Tensor":
        if self.ndim < 2:
            raise ValueError(f"{name}: input must have at least 2 dims, got shape {self.shape}")
        rows, columns = self.shape[-2:]
        offset = Tensor.arange(columns, device=self.device).reshape(1, columns) - \
            Tensor.arange(rows, device=self.device).reshape(rows, 1)  # column - row
        keep = offset <= diagonal if keep_below else offset >= diagonal
        return keep.where(self, _zero_of(self.dtype))

    def tril(self, diagonal: int = 0) -> "Tensor":
        """Zeros above the `diagonal`-th diagonal of the last two dims."""
        return self._triangle(True, diagonal, "tril")

    def triu(self, diagonal: int = 0) -> "Tensor":
        """Zeros below the `diagonal`-th diagonal of the last two dims."""
        return self._triangle(False, diagonal, "triu")

    def one_hot(self, num_classes: int = -1) -> "Tensor":
        """int64 one-hot vectors in a new last dim. num_classes=-1 reads the max (realizes self).
        Values outside [0, num_classes) give a row of zeros (PyTorch raises)."""
        if not self.dtype.is_int:
            raise TypeError(f"one_hot: expects an integer tensor, got {self.dtype.name}")
        if num_classes == -1:
            if self.numel() == 0:
                raise ValueError("one_hot: cannot infer num_classes of an empty tensor; pass num_classes")
            num_classes = int(self.max().item()) + 1
        return (self.unsqueeze(-1) == Tensor.arange(num_classes, device=self.device)).cast(dtypes.int64)

    def _embed_dim(self, dim: int, index, size: int) -> "Tensor":
        """The inverse of indexing dim with `index` (an int or slice) on a dim of `size`: self's values
        where the index selects, zeros elsewhere. Only movement ops."""
        def pad_dim(t: "Tensor", before: int, after: int) -> "Tensor":
            return t.pad(tuple((before, after) if d == dim else (0, 0) for d in range(t.ndim)))
        if not isinstance(index, slice):
            position = int(index) % size
            return pad_dim(self, position, size - position - 1)
        start, stop, step = index.indices(size)
        count = len(range(start, stop, step))
        if count == 0:
            return pad_dim(self, 0, size)
        result, low = self, start
        if step < 0:
            result, low, step = result.flip(dim), start + (count - 1) * step, -step
        if step > 1:  # element k goes to k * step: give each element step - 1 zeros after it
            shape = result.shape
            spread = result.unsqueeze(dim + 1).pad(
                tuple((0, step - 1) if d == dim + 1 else (0, 0) for d in range(result.ndim + 1)))
            result = spread.reshape(shape[:dim] + (count * step,) + shape[dim + 1:])
            result = result.narrow(dim, 0, (count - 1) * step + 1)
        return pad_dim(result, low, size - low - result.shape[dim])

    def __setitem__(self, indices, value) -> None:
        """`x[indices] = value` for basic indexing (ints, slices, None, ...); value broadcasts to x[indices].

        Functional underneath: x's node becomes `where(indexed region, value, old x)`, so it stays lazy
        and fuses. Differences from PyTorch: tensors made by indexing are not views, so `x[0][1] = 5`
        leaves x unchanged (write `x[0, 1] = 5`); and a tensor that requires grad can only be assigned
        to under no_grad (earlier uses of it would otherwise get wrong gradients).
        """
        indices = self._normalized_indices(indices, "setitem")
        if any(isinstance(index, Tensor) for index in indices):
            raise TypeError("setitem: integer Tensor indices are not supported here; use scatter()")
        if Tensor.grad_enabled and self.requires_grad:
            raise RuntimeError("setitem: cannot assign into a tensor that requires grad; do it under "
                               "`with no_grad():` or build the new value with where() or masked_fill()")
        target_shape = self[indices].shape
        if isinstance(value, Tensor):
            if value.device != self.device:
                raise ValueError(f"setitem: value is on {value.device}, the tensor on {self.device}")
            if broadcast_shapes("setitem", value.shape, target_shape) != target_shape:
                raise ValueError(f"setitem: value of shape {value.shape} cannot be broadcast to the indexed "
                                 f"shape {target_shape}")
            value = value.cast(self.dtype)._broadcast_to(target_shape)
        else:
            value = Tensor.full(target_shape, value, self.dtype, self.device)
        # one dim per dim of self: the Nones (size 1) go, each int-indexed dim comes back as size 1
        consuming = [index for index in indices if index is not None]
        per_dim_shape = tuple(1 if not isinstance(index, slice) else len(range(*index.indices(size)))
                              for index, size in zip(consuming, self.shape))
        placed = value.reshape(per_dim_shape)
        inside = Tensor.full(per_dim_shape, True, dtypes.bool, self.device)
        for dim, (index, size) in enumerate(zip(consuming, self.shape)):
            placed, inside = placed._embed_dim(dim, index, size), inside._embed_dim(dim, index, size)
        result = inside.where(placed, Tensor(self.lazydata))
        self.lazydata = result.lazydata
        if result._ctx is not None:
            self._ctx, self.requires_grad = result._ctx, True

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

    def outer(self, other: "Tensor") -> "Tensor":
        if self.ndim != 1 or not isinstance(other, Tensor) or other.ndim != 1:
            raise ValueError(f"outer: expects two 1-d tensors, got shapes {self.shape} and "
                             f"{other.shape if isinstance(other, Tensor) else type(other).__name__}")
        return self.reshape(-1, 1) * other.reshape(1, -1)

    @staticmethod
    def einsum(equation: str, *operands) -> "Tensor":
        """Einstein summation, as torch.einsum: "ij,jk->ik", implicit outputs ("ij,jk" sums j and
        keeps the labels seen once, sorted), "..." for leading dims, repeated labels in one operand
        for diagonals and traces ("ii->i", "ii"). Size-1 dims broadcast. Operands are combined
        left to right, each label summed as soon as no later operand or the output needs it."""
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        for number, operand in enumerate(operands):
            if not isinstance(operand, Tensor):
                raise TypeError(f"einsum: operand {number} is a {type(operand).__name__}, not a Tensor")
        inputs, output = _parse_einsum(equation, [operand.ndim for operand in operands])
        sizes: dict[str, int] = {}
        for number, (labels, operand) in enumerate(zip(inputs, operands)):
            for label, size in zip(labels, operand.shape):
                known = sizes.setdefault(label, size)
                if size != known and 1 not in (size, known):
                    raise ValueError(f"einsum: label {label!r} has size {size} in operand {number} but size "
                                     f"{known} in an earlier one ({equation!r})")
                if known == 1:
                    sizes[label] = size
        terms = [_einsum_diagonals(operand, list(labels), equation) for operand, labels in zip(operands, inputs)]
        result, labels = terms[0]
        for position in range(1, len(terms) + 1):
            later = {label for _, term_labels in terms[position:] for label in term_labels} | set(output)
            if position < len(terms):
                other, other_labels = terms[position]
                combined = labels + [label for label in other_labels if label not in labels]
            else:
                other, combined = None, labels
            kept = [label for label in combined if label in later]
            order = kept + [label for label in combined if label not in later]  # summed labels last
            result = _align_labels(result, labels, order)
            if other is not None:
                result = result * _align_labels(other, other_labels, order)
            if len(kept) < len(order):
                result = result._reduce("SUM", tuple(range(len(kept), len(order))), False, "einsum")
            labels = kept
        return result.permute([labels.index(label) for label in output]) if labels else result
