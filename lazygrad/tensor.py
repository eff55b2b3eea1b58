"""The user's Tensor: a PyTorch-style API where every method composes the op table's primitives.

Nothing computes until a value is needed (`numpy()`, `item()`, `tolist()`, `realize()`); until then a
Tensor is a handle on a node of the lazy graph. Type promotion follows PyTorch (see dtype.py).
Deliberate differences from PyTorch are listed in docs/tensor.md.

This module is the core: construction from data, properties, realizing, `_apply` (the one door to the
op table), autograd, dtype promotion and broadcasting, and the Python operators. The methods themselves
are grouped by concept in lazygrad/tensor_methods/ (creation, elementwise, math_functions, reduce,
movement, indexing, linalg, nn), one mixin class each, which Tensor inherits.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from lazygrad.devices import canonical_device, get_device
from lazygrad.dtype import (COMPLEX_OF, COMPLEX_PARTS, STORAGE_FLOATS, STORAGE_WIDE, DType, dtypes, least_float,
                            result_type, scalar_dtype)
from lazygrad.lazy import LazyBuffer
from lazygrad.multi import MultiLazyBuffer
from lazygrad.ops import GATHER, OpDef, Ops, REDUCE
from lazygrad.realize import realize, record_host_buffer
from lazygrad.tensor_methods.creation import CreationMethods, manual_seed  # noqa: F401 (lazygrad.manual_seed)
from lazygrad.tensor_methods.elementwise import ElementwiseMethods
from lazygrad.tensor_methods.helpers import _check_scalar_fits, _check_values_fit, _normalize_axis, broadcast_shapes
from lazygrad.tensor_methods.indexing import IndexingMethods
from lazygrad.tensor_methods.linalg import LinalgMethods
from lazygrad.tensor_methods.math_functions import MathFunctionMethods
from lazygrad.tensor_methods.movement import MovementMethods
from lazygrad.tensor_methods.nn import NNMethods
from lazygrad.tensor_methods.reduce import ReduceMethods
from lazygrad.tensor_methods.sorting import SortingMethods

_SCALAR_RESULT_TYPES: dict[tuple, DType] = {}  # (tensor dtype, has dims, scalar's type) -> result dtype


def _scalar_result_type(dtype: DType, has_dims: bool, scalar) -> DType:
    """PyTorch's result dtype of a tensor and a Python or numpy scalar, remembered: `x + 1` asks it
    for every op built, and it depends only on these three (the scalar's dtype follows its type)."""
    key = (dtype, has_dims, type(scalar))
    result = _SCALAR_RESULT_TYPES.get(key)
    if result is None:
        groups = ([dtype], [], []) if has_dims else ([], [dtype], [])
        groups[2].append(scalar_dtype(scalar))
        result = _SCALAR_RESULT_TYPES[key] = result_type(*groups)
    return result


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


# id(leaf) -> (weak reference to it, its post-accumulate-grad hooks); see
# Tensor.register_post_accumulate_grad_hook
_GRAD_HOOKS: dict[int, tuple[weakref.ref, list]] = {}
_new_tensor = object.__new__


def _wrapped(lazy) -> "Tensor":
    """Tensor(lazy) without __init__'s checks, for a node the engine built: this runs for every op."""
    out = _new_tensor(Tensor)
    out.lazydata, out.grad, out._ctx, out.requires_grad = lazy, None, None, False
    return out


class Tensor(CreationMethods, ElementwiseMethods, MathFunctionMethods, ReduceMethods, SortingMethods,
             MovementMethods, IndexingMethods, LinalgMethods, NNMethods):
    __slots__ = ("lazydata", "requires_grad", "grad", "_ctx", "_parts", "__weakref__")  # _parts: ComplexTensor's
    __hash__ = object.__hash__  # == builds a comparison, so hashing stays by identity
    grad_enabled = True         # False inside `with no_grad():`
    _complex = False            # True on ComplexTensor (complex_tensor.py), a subclass with this layout

    def __init__(self, data, dtype=None, device: str | None = None, requires_grad: bool = False):
        self.grad: Tensor | None = None
        self._ctx: tuple | None = None  # (op, source tensors, arg) of the primitive that made this tensor
        self.requires_grad = False
        if isinstance(data, (LazyBuffer, MultiLazyBuffer)):
            self.lazydata = data if dtype is None else data.cast(dtypes.from_any(dtype))
        else:
            self.lazydata = self._lazy_from_data(data, dtype, canonical_device(device))
        if requires_grad:
            self.requires_grad_(True)

    def _lazy_from_data(self, data, dtype, device) -> LazyBuffer | MultiLazyBuffer:
        if isinstance(device, tuple):  # the same values on each device
            return MultiLazyBuffer([self._lazy_from_data(data, dtype, each) for each in device], None, None)
        dtype = dtypes.from_any(dtype) if dtype is not None else None
        if isinstance(data, Tensor):
            data = data.numpy()
        if isinstance(data, (complex, np.complexfloating)) or (dtype is not None and dtype.is_complex):
            return self._complex_pairs(data, dtype, device)
        if isinstance(data, (bool, int, float, np.generic)) and not isinstance(data, np.ndarray):
            dtype = dtype or (dtypes.from_any(data.dtype) if isinstance(data, np.generic) else scalar_dtype(data))
            _check_scalar_fits(data, dtype, "Tensor")
            return LazyBuffer.const(data, dtype, (), device)
        if isinstance(data, np.ndarray):
            array = data
            if array.dtype.kind == "c":
                return self._complex_pairs(array, dtype, device)
            if dtype is None:
                dtype = dtypes.from_any(array.dtype)
        else:
            array = np.array(data)
            if array.dtype == object:
                raise TypeError(f"cannot build a Tensor from {type(data).__name__}: nested lists must be "
                                "rectangular and hold bools, ints (of at most 64 bits), floats or complex numbers")
            if array.dtype.kind == "c":
                return self._complex_pairs(array, dtype or COMPLEX_OF[dtypes.default_float], device)
            if dtype is None:
                dtype = {"b": dtypes.bool, "f": dtypes.default_float}.get(array.dtype.kind, dtypes.default_int)
                if array.dtype.kind not in "bfiu":
                    raise TypeError(f"cannot build a Tensor from elements of type {array.dtype}")
            _check_values_fit(array, dtype, "Tensor")
        array = np.array(array, dtype=dtype.np, order="C")  # a copy; keeps 0-d arrays 0-d
        buffer = get_device(device).alloc(dtype, array.size).copyin(array)
        record_host_buffer(buffer)
        return LazyBuffer.from_buffer(buffer, array.shape)

    def _complex_pairs(self, data, dtype: DType | None, device) -> LazyBuffer:
        """The buffer of a complex Tensor, each value's (real, imag) parts on a last axis of 2; self
        becomes a ComplexTensor."""
        from lazygrad.complex_tensor import ComplexTensor
        if isinstance(device, tuple):
            raise TypeError("a complex Tensor cannot be put on several devices yet")
        self.__class__ = ComplexTensor
        self._parts = None
        array = np.asarray(data)  # a numpy array or scalar keeps its precision; a Python complex is complex64
        dtype = dtype or (dtypes.from_any(array.dtype) if isinstance(data, (np.ndarray, np.generic))
                          else COMPLEX_OF[dtypes.default_float])
        if not dtype.is_complex:
            raise TypeError(f"cannot build a {dtype.name} Tensor from complex values; use a complex dtype "
                            "(complex64, complex128) or take their .real first")
        array = np.array(array, dtype=dtype.np, order="C")
        pairs = array.reshape(-1).view(COMPLEX_PARTS[dtype].np).reshape(array.shape + (2,))
        buffer = get_device(device).alloc(COMPLEX_PARTS[dtype], pairs.size).copyin(pairs)
        record_host_buffer(buffer)
        return LazyBuffer.from_buffer(buffer, pairs.shape)

    def _apply(self, op: OpDef, *others: "Tensor", arg=None) -> "Tensor":
        """Apply one primitive of the op table, recording it for backward when a source needs grads."""
        if op.is_elementwise:
            stored_only = self.lazydata.dtype in STORAGE_WIDE
            sources = []  # a loop, not a list comprehension (a function call): this runs for every op
            for other in others:
                if other._complex:  # a select of complex values (binary ops cast both operands to complex)
                    from lazygrad.complex_tensor import ComplexTensor
                    return ComplexTensor._select(self, *others)
                source = other.lazydata
                sources.append(source)
                stored_only = stored_only or source.dtype in STORAGE_WIDE
            if stored_only and op is not Ops.CAST and op is not Ops.BITCAST:
                return self._storage_op(op, others, arg)
            lazy = self.lazydata.alu(op, *sources, arg=arg)
        elif op.kind == REDUCE:
            if self.lazydata.dtype in STORAGE_WIDE:
                return self._storage_op(op, others, arg)
            lazy = self.lazydata.reduce(op, arg)
        elif op.kind == GATHER:
            lazy = self.lazydata.take(others[0].lazydata)
        elif op is Ops.CONTIGUOUS:
            lazy = self.lazydata.contiguous()
        elif op is Ops.COPY:
            lazy = self.lazydata.copy_to(arg)
        else:
            lazy = getattr(self.lazydata, op.method)(arg)
        out = _wrapped(lazy)
        # only floating point results carry gradients (comparisons, casts to int, argmax do not), as in PyTorch
        needs_grad = self.requires_grad
        for other in others:  # a loop, not any(generator): this runs for every op built
            needs_grad = needs_grad or other.requires_grad
        if needs_grad and Tensor.grad_enabled and lazy.dtype.is_float:
            out.requires_grad = True
            out._ctx = (op, (self,) + others, arg)
        return out

    def _storage_op(self, op: OpDef, others: tuple["Tensor", ...], arg) -> "Tensor":
        """An op on operands of a stored-only dtype (`dtype.STORAGE_WIDE`): a storage float (bfloat16,
        the float8s, float4) as PyTorch computes it, in float32, its float result rounded to that dtype
        once (a sum or a matmul accumulates in float32 and rounds at the end); a 4-bit integer in
        int32, its result wrapped to 4 bits (as ml_dtypes' arithmetic wraps). So the devices only
        load, store and convert those dtypes; they never compute in them."""
        stored = next(tensor.dtype for tensor in (self,) + others if tensor.dtype in STORAGE_WIDE)
        computes = STORAGE_WIDE[stored]

        def wide(tensor: "Tensor") -> "Tensor":
            return tensor.cast(STORAGE_WIDE[tensor.dtype]) if tensor.dtype in STORAGE_WIDE else tensor
        result = wide(self)._apply(op, *map(wide, others), arg=arg)
        return result.cast(stored) if result.dtype == computes else result

    # ---- autograd -----------------------------------------------------------------------------

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if requires_grad and not self.dtype.is_float:
            raise TypeError(f"only floating point tensors can require gradients, got {self.dtype.name}")
        self.requires_grad = requires_grad
        return self

    def register_post_accumulate_grad_hook(self, hook) -> None:
        """Calls `hook(self)` at the end of every backward that gave this leaf a gradient, once its
        `.grad` holds all of it (as PyTorch's). DistributedDataParallel averages gradients so."""
        if not self.requires_grad or self._ctx is not None:
            raise RuntimeError("register_post_accumulate_grad_hook: only a leaf tensor that requires grad (a "
                               "parameter) has its gradient accumulated; call requires_grad_() on a leaf")
        entry = _GRAD_HOOKS.get(id(self))
        if entry is None or entry[0]() is not self:
            key = id(self)
            entry = _GRAD_HOOKS[key] = (weakref.ref(self, lambda _: _GRAD_HOOKS.pop(key, None)), [])
        entry[1].append(hook)

    def detach(self) -> "Tensor":
        """The same value, cut from the backward graph."""
        return _wrapped(self.lazydata)  # ComplexTensor has its own

    def _with_gradient(self, sources: tuple["Tensor", ...], rule) -> "Tensor":
        """This tensor's value with `rule(grad, out, sources, rule) -> [gradient of each source]` as its
        derivative, in place of the one autograd would derive op by op: for a composite whose
        derivative is much cheaper written directly (the fold of convolution windows)."""
        if not (Tensor.grad_enabled and any(source.requires_grad for source in sources)):
            return Tensor(self.lazydata) if self.requires_grad else self  # nothing recorded: no new tensor
        out = Tensor(self.lazydata)
        out.requires_grad = True
        out._ctx = (None, tuple(sources), rule)  # no op: the rule is its own
        return out

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
        """Accumulate d(self)/d(leaf) into `.grad` of every leaf that requires grad (lazily).

        This tensor itself is realized first, as in PyTorch, where it exists before backward: a
        `loss.item()` after an optimizer step that wrote the parameters in place then reads the
        loss of this step instead of a stale value."""
        if not self.requires_grad:
            raise RuntimeError("backward: this tensor does not require grad and has no grad_fn")
        self.realize()
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError(f"backward: grad can be implicitly created only for scalar outputs, "
                                   f"got shape {self.shape}; pass gradient=")
            gradient = Tensor.full(self.shape, 1.0, self.dtype, self.device)
        elif gradient.shape != self.shape:
            raise ValueError(f"backward: gradient of shape {gradient.shape} does not match output {self.shape}")
        grads = {id(self): gradient.detach()}
        hooked: dict[int, Tensor] = {}  # leaves with post-accumulate hooks that got a gradient
        with no_grad():
            for tensor in reversed(self._backward_order()):
                grad = grads.pop(id(tensor), None)
                if grad is None:
                    continue
                op, sources, arg = tensor._ctx
                rule = arg if op is None else op.grad
                if not callable(rule):
                    raise RuntimeError(f"backward: {op} is not differentiable")
                source_grads = rule(grad, tensor.detach(), [source.detach() for source in sources], arg)
                for source, source_grad in zip(sources, source_grads):
                    if source_grad is None or not source.requires_grad:
                        continue
                    if source._ctx is None:  # a leaf: accumulate, as PyTorch does
                        source.grad = source_grad if source.grad is None else source.grad + source_grad
                        if id(source) in _GRAD_HOOKS:
                            hooked[id(source)] = source
                    elif id(source) in grads:
                        grads[id(source)] = grads[id(source)] + source_grad
                    else:
                        grads[id(source)] = source_grad
        for leaf in hooked.values():
            for hook in list(_GRAD_HOOKS[id(leaf)][1]):
                hook(leaf)

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
    def real(self) -> "Tensor":
        """The real part: the tensor itself, for a real dtype (ComplexTensor has its own)."""
        return self

    @property
    def imag(self) -> "Tensor":
        raise TypeError(f"imag: a {self.dtype.name} tensor has no imaginary part (torch.imag too needs a complex tensor)")

    def conj(self) -> "Tensor":
        return self

    def is_complex(self) -> bool:
        return False

    @property
    def ndim(self) -> int:
        return len(self.lazydata.shape)  # not self.shape: one property call less, for every op built

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
        tensors = (self,) + others
        nodes = []  # a loop, not a list comprehension (a function call): every eager op runs this
        for tensor in tensors:
            node = tensor.lazydata
            if node.__class__ is LazyBuffer:
                nodes.append(node)
            else:
                nodes.extend(node.lbs)
        realize(nodes)
        for tensor in tensors:
            node = tensor.lazydata
            if node.__class__ is not LazyBuffer:
                shards = [LazyBuffer.from_buffer(lb.buffer, lb.shape) if lb.op is not Ops.BUFFER else lb for lb in node.lbs]
                tensor.lazydata = MultiLazyBuffer(shards, node.axis, node.bounds)
            elif node.op is not Ops.BUFFER:  # keep only the buffer, not the graph that made it
                tensor.lazydata = LazyBuffer.from_buffer(node.buffer, node.shape)
        return self

    def assign(self, value) -> "Tensor":
        """Give this tensor `value` (a Tensor, array or number, broadcast to this shape and cast to
        this dtype), stored into this tensor's buffer when it is realized, not into a new one.

        The write is lazy like every op. Values built earlier from this tensor's old contents must be
        realized before it, else reading them raises StaleValueError. Under autograd a leaf that
        requires grad can only be assigned inside `no_grad()`, as in PyTorch."""
        if Tensor.grad_enabled and self.requires_grad and self._ctx is None:
            raise RuntimeError(f"assign: a leaf tensor {self.shape} that requires grad cannot be written in "
                               "place while gradients are recorded; wrap the update in `with no_grad():`")
        if not isinstance(value, Tensor):
            array = np.asarray(value)
            if not isinstance(value, np.ndarray):  # Python numbers must fit, as in every fill
                _check_values_fit(array, self.dtype, "assign")
            value = Tensor(array, device=self.device)
        if value.device != self.device:
            raise ValueError(f"assign: value is on {value.device}, the tensor on {self.device}; "
                             f"move it with .to({self.device!r})")
        if broadcast_shapes("assign", self.shape, value.shape) != self.shape:
            raise ValueError(f"assign: value of shape {value.shape} cannot be broadcast to the tensor's shape {self.shape}")
        value = value.detach().cast(self.dtype)._broadcast_to(self.shape)
        self.lazydata = self.lazydata.assign(value.lazydata)
        return self

    def numpy(self) -> np.ndarray:
        if isinstance(self.lazydata, MultiLazyBuffer):  # gathered on its first device
            return self.to(self.device[0]).numpy()
        self.realize()
        self.lazydata.check_current()
        return self.lazydata.buffer.array.reshape(self.shape).copy()

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """np.asarray(tensor) and np.array(tensor): the values, realized, as `numpy()` gives them (a
        copy; without this numpy would read the tensor element by element, one kernel each)."""
        if copy is False:
            raise ValueError("__array__: a lazygrad tensor's values are copied to numpy; copy=False is not possible")
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """DLPack export (lazygrad/dlpack.py): the realized tensor's host memory, shared, not copied."""
        from lazygrad.dlpack import to_dlpack
        return to_dlpack(self, stream, max_version, dl_device, copy)

    def __array_namespace__(self, /, *, api_version: str | None = None):
        """The array API standard's namespace for Tensors (lazygrad/array_api.py)."""
        from lazygrad import array_api
        if api_version not in (None, array_api.__array_api_version__):
            raise ValueError(f"__array_namespace__: lazygrad implements the array API {array_api.__array_api_version__}, "
                             f"not {api_version!r}")
        return array_api

    def to_device(self, device: str, /, *, stream=None) -> "Tensor":
        """The array API standard's name for `.to(device)`."""
        return self.to(device)

    def __dlpack_device__(self) -> tuple[int, int]:
        from lazygrad.dlpack import DLPACK_CPU, HOST_DEVICES
        if isinstance(self.device, tuple) or self.device.split(":")[0] not in HOST_DEVICES:
            raise BufferError(f"__dlpack_device__: the tensor is on {self.device}, and lazygrad shares host memory "
                              "only; move it first with .to('CPU') (a copy)")
        return (DLPACK_CPU, 0)

    def item(self):
        if self.numel() != 1:
            raise ValueError(f"item(): only a tensor with one element can be converted to a Python scalar, "
                             f"got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def to(self, *args, device: str | None = None, dtype=None) -> "Tensor":
        """`x.to("NPY")`, `x.to(dtypes.float16)`, `x.to("CPU", dtypes.int32)` or `x.to(other_tensor)`
        (its device and dtype): a string names a device, a tuple of strings several (a copy on each,
        see `shard`), anything else a dtype. A sharded tensor `.to(device)` is gathered there."""
        for arg in args:
            if isinstance(arg, Tensor):
                device, dtype = device or arg.device, dtype or arg.dtype
            elif isinstance(arg, str) or (isinstance(arg, tuple) and all(isinstance(each, str) for each in arg)):
                device = arg
            elif arg is not None:
                dtype = arg
        result = self if dtype is None else self.cast(dtype)
        if device is not None:
            result = result._apply(Ops.COPY, arg=canonical_device(device))
        return result

    def shard(self, devices, axis: int | None = None) -> "Tensor":
        """This tensor split along `axis` over `devices` (a tuple of names), one consecutive piece per
        device as numpy's array_split cuts it; `axis=None` puts the whole tensor on each. Ops on the
        result run on every device, each on its piece; a reduce over the split axis (a matmul's sum
        among them) adds the devices' partial results on each device, so its result is replicated.
        `.to(device)` gathers the pieces on one device; `.device` is the tuple (lazygrad/multi.py)."""
        devices = canonical_device(tuple(devices) if isinstance(devices, list) else devices)
        if not isinstance(devices, tuple):
            raise TypeError(f"shard: devices must be a tuple of device names, got {devices!r}")
        if axis is not None:
            axis = _normalize_axis(axis, self.ndim, "shard")
        node = self.lazydata
        if isinstance(node, MultiLazyBuffer):
            if (node.device, node.axis) == (devices, axis):
                return self
            node = node.gathered(devices[0])
        out = Tensor(MultiLazyBuffer.shard(node, devices, axis))
        if self.requires_grad and Tensor.grad_enabled:  # its gradient is gathered back, as a copy's
            out.requires_grad = True
            out._ctx = (Ops.COPY, (self,), devices)
        return out

    def shard_(self, devices, axis: int | None = None) -> "Tensor":
        """`shard` in place, for a leaf (a parameter, a buffer, data): data-parallel training
        replicates each parameter with `p.shard_(devices)` and splits the batch with `x.shard(devices, 0)`."""
        if self._ctx is not None:
            raise RuntimeError("shard_: only a leaf tensor (a parameter, a buffer or data) can be sharded in "
                               "place; use shard() for a computed value")
        # realized now: each device's copy is then a buffer of its own, which an optimizer's in-place
        # update writes, instead of a pending copy of the buffer that the update overwrites
        self.lazydata = self.detach().shard(devices, axis).realize().lazydata
        if self.grad is not None:
            self.grad.shard_(devices, axis)
        return self

    def __bool__(self) -> bool:
        return bool(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __index__(self) -> int:
        """A one-element integer tensor as a Python int (an index, a range's bound), as PyTorch allows."""
        if not (self.dtype.is_int or self.dtype.is_bool):
            raise TypeError(f"__index__: only an integer tensor can be used as an index, not {self.dtype.name}")
        return int(self.item())

    def __pos__(self) -> "Tensor":
        return self

    # ---- type conversion ----------------------------------------------------------------------

    def cast(self, dtype) -> "Tensor":
        dtype = dtypes.from_any(dtype)
        if dtype == self.dtype:
            return self
        if dtype.is_complex:  # the real part; the imaginary part zero
            from lazygrad.complex_tensor import ComplexTensor
            real = self.cast(COMPLEX_PARTS[dtype])
            return ComplexTensor.from_parts(real, real.zeros_like())
        if (dtype in STORAGE_FLOATS or self.dtype in STORAGE_FLOATS) and dtypes.float32 not in (dtype, self.dtype):
            # storage floats convert to and from float32 only (PyTorch too rounds a double to float first)
            return self._apply(Ops.CAST, arg=dtypes.float32).cast(dtype)
        return self._apply(Ops.CAST, arg=dtype)

    def bitcast(self, dtype) -> "Tensor":
        dtype = dtypes.from_any(dtype)
        if dtype.itemsize != self.dtype.itemsize:
            raise TypeError(f"bitcast: {self.dtype.name} and {dtype.name} differ in size")
        return self if dtype == self.dtype else self._apply(Ops.BITCAST, arg=dtype)

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

    def _operands(self, other, op: str, reverse: bool = False, selects: bool = False) -> tuple["Tensor", "Tensor"]:
        """Both operands promoted to one dtype and broadcast to one shape, PyTorch style. A number
        beside a storage float stays float32 for an op that computes with it, is that storage float
        for one that only `selects` it (where)."""
        if isinstance(other, Tensor):
            if other.device != self.device:
                raise ValueError(f"{op}: tensors are on different devices, {self.device} and {other.device}; "
                                 f"move one with .to({self.device!r})")
            dtype = self.dtype
            if other.dtype is not dtype:  # one dtype promotes to itself: the common case skips this
                groups = ([], [], [])
                for tensor in (self, other):
                    groups[0 if tensor.ndim else 1].append(tensor.dtype)
                dtype = result_type(*groups)
        elif isinstance(other, (bool, int, float, complex, np.generic)):
            node = self.lazydata
            dtype = _scalar_result_type(node.dtype, len(node.shape) > 0, other)
            if self._complex or dtype.category == 3:  # a complex tensor, or a complex number (category, not
                return self._complex_operands(other, reverse)  # is_complex: no call on every op built)
            _check_scalar_fits(other, dtype, op)
            x = self if dtype is node.dtype else self.cast(dtype)
            # beside a stored-only dtype the number takes the dtype its op computes in (as PyTorch keeps
            # a scalar in its op math type): e8m0 has no negatives, bfloat16 would round 0.1
            stored = STORAGE_WIDE[dtype] if dtype in STORAGE_WIDE and not selects else dtype
            constant = Tensor(LazyBuffer.const(other, stored, node.shape, node.device))  # built broadcast: no grad
            return (constant, x) if reverse else (x, constant)
        else:
            raise TypeError(f"{op}: unsupported operand type {type(other).__name__}")
        shape = broadcast_shapes(op, self.shape, other.shape)
        x = self if self.dtype is dtype else self.cast(dtype)
        y = other if other.dtype is dtype else other.cast(dtype)
        x, y = x._broadcast_to(shape), y._broadcast_to(shape)
        return (y, x) if reverse else (x, y)

    def _complex_operands(self, number, reverse: bool) -> tuple["Tensor", "Tensor"]:
        """A number beside a complex tensor, or a complex number beside a tensor: both complex."""
        from lazygrad.complex_tensor import ComplexTensor
        dtype = _scalar_result_type(self.dtype, self.ndim > 0, number)
        x, constant = self.cast(dtype), ComplexTensor.full(self.shape, number, dtype, self.device)
        return (constant, x) if reverse else (x, constant)

    def _broadcast_to(self, shape: tuple[int, ...]) -> "Tensor":
        if self.shape == shape:
            return self
        padded = self if len(shape) == self.ndim else self._apply(Ops.RESHAPE, arg=(1,) * (len(shape) - self.ndim) + self.shape)
        return padded._apply(Ops.EXPAND, arg=shape)

    def _binary(self, op: OpDef, other, reverse: bool = False, name: str = "") -> "Tensor":
        x, y = self._operands(other, name or op.name.lower(), reverse)
        return x._apply(op, y)

    # ---- Python operators (the named methods live in tensor_methods/) --------------------------

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
    def __abs__(self): return self.abs()

    # ---- comparisons and bitwise operators ----------------------------------------------------

    def __lt__(self, other): return self._binary(Ops.CMPLT, other, name="lt")
    def __gt__(self, other): return self._binary(Ops.CMPLT, other, reverse=True, name="gt")
    def __ne__(self, other): return self._binary(Ops.CMPNE, other, name="ne")
    def __eq__(self, other): return self._binary(Ops.CMPNE, other, name="eq").logical_not()
    def __le__(self, other): return self._compare_or_equal(other, "le", greater=False)
    def __ge__(self, other): return self._compare_or_equal(other, "ge", greater=True)

    def _compare_or_equal(self, other, name: str, greater: bool) -> "Tensor":
        """self <= other (>= when `greater`). Against a number c compared as a float, one strict
        comparison with the next value of the compared dtype past c (x <= 6 is x < nextafter(6, inf)),
        which answers the same for every x, NaN and infinities included, in one op instead of four
        (less-than, or not not-equal). Not where that next value is subnormal (c = 0): a CPU thread
        with denormals-are-zero set (by a library built with -ffast-math) or an OpenCL device that
        flushes them would compare with 0 instead."""
        if isinstance(other, (int, float, np.integer, np.floating)) and not isinstance(other, bool):
            node = self.lazydata
            dtype = _scalar_result_type(node.dtype, len(node.shape) > 0, other)
            _check_scalar_fits(other, dtype, name)
            if dtype.is_float and math.isfinite(other):
                bound = dtype.np_type(other)
                with np.errstate(over="ignore"):  # past the largest finite value is infinity, as wanted
                    past = np.nextafter(bound, dtype.np_type(-np.inf if greater else np.inf))
                if abs(past) >= np.finfo(dtype.np).tiny:  # a normal number (or infinity)
                    x = self if dtype is node.dtype else self.cast(dtype)
                    return x._binary(Ops.CMPLT, past.item(), reverse=greater, name=name)
        strict = self > other if greater else self < other
        return strict.logical_or(self == other)

    def _bitwise(self, op: OpDef, other, name: str, reverse: bool = False) -> "Tensor":
        x, y = self._operands(other, name, reverse)
        if op.integer_only and x.dtype.is_float:
            raise TypeError(f"{name}: not supported for {x.dtype.name} tensors (bool and integer only)")
        return x._apply(op, y)

    def __and__(self, other): return self._bitwise(Ops.AND, other, "bitwise_and")
    def __or__(self, other): return self._bitwise(Ops.OR, other, "bitwise_or")
    def __xor__(self, other): return self._bitwise(Ops.XOR, other, "bitwise_xor")
    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __lshift__(self, other): return self._bitwise(Ops.SHL, other, "bitwise_left_shift")
    def __rshift__(self, other): return self._bitwise(Ops.SHR, other, "bitwise_right_shift")
    def __rlshift__(self, other): return self._bitwise(Ops.SHL, other, "bitwise_left_shift", reverse=True)
    def __rrshift__(self, other): return self._bitwise(Ops.SHR, other, "bitwise_right_shift", reverse=True)

    def __invert__(self) -> "Tensor":
        if self.dtype.is_float:
            raise TypeError(f"bitwise_not: not supported for {self.dtype.name} tensors")
        all_ones = self._const_like(True if self.dtype.is_bool else -1)  # -1 becomes 255 in uint8, as a C cast does
        return self._apply(Ops.XOR, all_ones)

