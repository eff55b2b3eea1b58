"""The Python array API standard's namespace over lazygrad Tensors: `lazygrad.array_api`, also what
`Tensor.__array_namespace__()` returns, so code written against the standard (scikit-learn with
`array_api_dispatch`, array-api-compat, SciPy) computes with lazygrad.

Front-end layer, beside the Tensor methods: every function here composes Tensor methods, so it is
as lazy, differentiable and device-aware as they are. The arrays are Tensors themselves (no wrapper
type); the standard's names and keyword signatures map onto PyTorch-style methods:

    import lazygrad.array_api as xp
    x = xp.asarray([[1.0, 2.0], [3.0, 4.0]])
    xp.sum(xp.permute_dims(x, (1, 0)) * 2, axis=0)

The functions whose result's shape depends on the values (`nonzero`, `unique_*`) realize their
input first, as PyTorch does. Differences from the standard, each with its reason, are listed in
docs/tensor.md ("The array API standard"): `Tensor.size` is PyTorch's method rather than the
standard's attribute, and complex arrays carry no gradients. The `fft` extension is in
lazygrad/fft.py.
"""
from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from lazygrad.dtype import COMPLEX_PARTS as _COMPLEX_PARTS
from lazygrad.dtype import DType, dtypes
from lazygrad.dtype import finfo as _finfo
from lazygrad.dtype import iinfo as _iinfo
from lazygrad.dtype import result_type as _result_type
from lazygrad.tensor import Tensor

__array_api_version__ = "2023.12"

# ---- data types and constants -----------------------------------------------------------------------

bool = dtypes.bool  # noqa: A001  (the standard's names)
int8, int16, int32, int64 = dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64
uint8, uint16, uint32, uint64 = dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64
float16, float32, float64 = dtypes.float16, dtypes.float32, dtypes.float64
complex64, complex128 = dtypes.complex64, dtypes.complex128
DTYPES = {dtype.name: dtype for dtype in (bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64,
                                          complex64, complex128)}

e, inf, nan, pi = math.e, math.inf, math.nan, math.pi
newaxis = None


def _array(x: Any, device: str | None = None) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x, device=device)


def _axes(axis) -> tuple[int, ...] | None:
    return None if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)


# ---- creation ------------------------------------------------------------------------------------

def asarray(obj, /, *, dtype: DType | None = None, device: str | None = None, copy: builtins.bool | None = None) -> Tensor:
    """A Tensor from a Tensor, a numpy array, a buffer with `__dlpack__`, nested sequences or a Python
    scalar. `copy=True` always copies, `copy=False` raises where a copy is needed (another dtype or
    device, or data that is not a Tensor already), `None` copies only then."""
    if isinstance(obj, Tensor):
        moved = obj if device is None or device == obj.device else obj.to(device)
        cast = moved if dtype is None or dtype == moved.dtype else moved.cast(dtype)
        if cast is obj:
            return obj.clone() if copy else obj
        if copy is False:
            raise ValueError(f"asarray: copy=False, but a {obj.dtype.name} Tensor on {obj.device} needs a copy to "
                             f"become {(dtype or obj.dtype).name} on {device or obj.device}")
        return cast
    if copy is False:
        raise ValueError(f"asarray: copy=False, but a {type(obj).__name__} needs a copy to become a Tensor")
    if hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray):
        obj = np.from_dlpack(obj)
    elif isinstance(obj, (list, tuple)):
        obj = _plain(obj)
    return Tensor(obj, dtype=dtype, device=device)


def _plain(obj):
    """Nested sequences with the Tensors in them as their values (a list of 0-d arrays is allowed)."""
    if isinstance(obj, Tensor):
        return obj.numpy().tolist()
    return [_plain(item) for item in obj] if isinstance(obj, (list, tuple)) else obj


def arange(start, /, stop=None, step=1, *, dtype: DType | None = None, device: str | None = None) -> Tensor:
    return Tensor.arange(start, stop, step, dtype=dtype, device=device)


def empty(shape, *, dtype: DType | None = None, device: str | None = None) -> Tensor:
    return Tensor.zeros(shape, dtype=dtype, device=device)


def zeros(shape, *, dtype: DType | None = None, device: str | None = None) -> Tensor:
    return Tensor.zeros(shape, dtype=dtype, device=device)


def ones(shape, *, dtype: DType | None = None, device: str | None = None) -> Tensor:
    return Tensor.ones(shape, dtype=dtype, device=device)


def full(shape, fill_value, *, dtype: DType | None = None, device: str | None = None) -> Tensor:
    return Tensor.full(shape, fill_value, dtype=dtype, device=device)


def _like(x: Tensor, fill_value, dtype, device) -> Tensor:
    return Tensor.full(x.shape, fill_value, dtype=dtype or x.dtype, device=device or x.device)


def empty_like(x: Tensor, /, *, dtype: DType | None = None, device: str | None = None) -> Tensor:
    return _like(x, 0, dtype, device)


def zeros_like(x: Tensor, /, *, dtype: DType | None = None, device: str | None = None) -> Tensor:
    return _like(x, 0, dtype, device)


def ones_like(x: Tensor, /, *, dtype: DType | None = None, device: str | None = None) -> Tensor:
    return _like(x, 1, dtype, device)


def full_like(x: Tensor, /, fill_value, *, dtype: DType | None = None, device: str | None = None) -> Tensor:
    return _like(x, fill_value, dtype, device)


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: DType | None = None,
        device: str | None = None) -> Tensor:
    n_cols = n_rows if n_cols is None else n_cols
    k = builtins.max(-n_rows, builtins.min(k, n_cols))  # a diagonal past the matrix is empty, however far
    rows = Tensor.arange(n_rows, device=device).reshape(n_rows, 1)
    cols = Tensor.arange(n_cols, device=device).reshape(1, n_cols)
    return (cols - rows == k).cast(dtype or dtypes.default_float)


def linspace(start, stop, /, num: int, *, dtype: DType | None = None, device: str | None = None,
             endpoint: builtins.bool = True) -> Tensor:
    if isinstance(start, complex) or isinstance(stop, complex) or (dtype is not None and dtype.is_complex):
        start, stop = complex(start), complex(stop)  # the real and imaginary parts spaced alike
        dtype = dtype or complex64
        parts = [linspace(getattr(start, part), getattr(stop, part), num, dtype=_COMPLEX_PARTS[dtype], device=device,
                          endpoint=endpoint) for part in ("real", "imag")]
        return parts[0] + parts[1] * 1j
    if endpoint or num == 0:
        return Tensor.linspace(start, stop, num, dtype=dtype, device=device)
    return Tensor.linspace(start, stop, num + 1, dtype=dtype, device=device)[:num]


def meshgrid(*arrays: Tensor, indexing: str = "xy") -> list[Tensor]:
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', not {indexing!r}")
    sizes = [array.shape[0] for array in arrays]
    if indexing == "xy" and len(arrays) >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    grids = []
    for index, array in enumerate(arrays):
        axis = {0: 1, 1: 0}.get(index, index) if indexing == "xy" and len(arrays) >= 2 else index
        shape = [1] * len(arrays)
        shape[axis] = array.shape[0]
        grids.append(array.reshape(shape).expand(sizes))
    return grids


def tril(x: Tensor, /, *, k: int = 0) -> Tensor:
    return x.tril(k)


def triu(x: Tensor, /, *, k: int = 0) -> Tensor:
    return x.triu(k)


def from_dlpack(x, /, *, device: str | None = None, copy: builtins.bool | None = None) -> Tensor:
    from lazygrad.dlpack import from_dlpack as wrap
    result = wrap(x)
    if device is not None and device != result.device:
        return result.to(device)
    return result.clone() if copy else result


# ---- data types ----------------------------------------------------------------------------------

def astype(x: Tensor, dtype: DType, /, *, copy: builtins.bool = True, device: str | None = None) -> Tensor:
    """x in `dtype`; a complex array to a real dtype raises, as the standard says (take `real(x)`)."""
    if x.dtype.is_complex and not dtype.is_complex:
        raise TypeError(f"astype: casting a {x.dtype.name} array to {dtype.name} is not permitted; take real(x) "
                        "or abs(x) first")
    if device is not None and device != x.device:
        x = x.to(device)
    if dtype == x.dtype:
        return x.clone() if copy else x
    return x.cast(dtype)


# The standard's type promotion within a kind; across kinds it leaves the result undefined and
# lazygrad follows PyTorch (an integer and a float give the float).
_INTEGER_ORDER = {int8: 0, int16: 1, int32: 2, int64: 3}


def can_cast(from_, to: DType, /) -> builtins.bool:
    """Whether the standard's promotion turns `from_` (a dtype or an array) into `to`: within a kind
    only (bool to bool, integers to wider integers, floats to wider floats)."""
    source = from_.dtype if isinstance(from_, Tensor) else from_
    if source.is_bool or to.is_bool:
        return source.is_bool and to.is_bool
    if source.category > to.category or (source.category < 2) != (to.category < 2):
        return False  # float to complex, never complex to float
    try:
        return _result_type([source, to], [], []) == to
    except TypeError:  # no dtype holds both (uint64 and a signed integer)
        return False


def result_type(*arrays_and_dtypes) -> DType:
    """The dtype the standard's promotion gives: arrays' dtypes and dtypes first, then Python scalars,
    which take the arrays' kind (`result_type(int8_array, 1)` is int8)."""
    kinds, scalars = [], []
    for item in arrays_and_dtypes:
        if isinstance(item, Tensor):
            kinds.append(item.dtype)
        elif isinstance(item, DType):
            kinds.append(item)
        elif isinstance(item, (builtins.bool, int, float, complex)):
            scalars.append(dtypes.bool if isinstance(item, builtins.bool) else dtypes.default_int if isinstance(item, int)
                           else dtypes.default_float if isinstance(item, float) else complex64)
        else:
            raise TypeError(f"result_type: expected arrays, dtypes or Python scalars, got {type(item).__name__}")
    if not kinds:
        raise ValueError("result_type: at least one array or dtype is needed")
    return _result_type(kinds, [], scalars)


@dataclass(frozen=True)
class _FloatInfo:
    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: DType


@dataclass(frozen=True)
class _IntegerInfo:
    bits: int
    max: int
    min: int
    dtype: DType


def finfo(type, /) -> _FloatInfo:  # noqa: A002  (the standard's name)
    """The standard's fields; its `dtype` is the dtype itself (lazygrad.finfo's is the name, as torch's),
    a complex dtype's that of its parts."""
    dtype = type.dtype if isinstance(type, Tensor) else type
    dtype = _COMPLEX_PARTS.get(dtype, dtype)
    limits = _finfo(dtype)
    return _FloatInfo(dtype.itemsize * 8, limits.eps, limits.max, limits.min, limits.smallest_normal, dtype)


def iinfo(type, /) -> _IntegerInfo:  # noqa: A002
    dtype = type.dtype if isinstance(type, Tensor) else type
    limits = _iinfo(dtype)
    return _IntegerInfo(dtype.itemsize * 8, limits.max, limits.min, dtype)


_KINDS = {
    "bool": lambda dtype: dtype.is_bool,
    "signed integer": lambda dtype: dtype.is_int and not dtype.is_unsigned,
    "unsigned integer": lambda dtype: dtype.is_int and dtype.is_unsigned,
    "integral": lambda dtype: dtype.is_int,
    "real floating": lambda dtype: dtype.is_float,
    "complex floating": lambda dtype: dtype.is_complex,
    "numeric": lambda dtype: not dtype.is_bool,
}


def isdtype(dtype: DType, kind) -> builtins.bool:
    if isinstance(kind, tuple):
        return builtins.any(isdtype(dtype, one) for one in kind)
    if isinstance(kind, DType):
        return dtype == kind
    if kind not in _KINDS:
        raise ValueError(f"isdtype: unknown kind {kind!r}; expected a dtype or one of {', '.join(_KINDS)}")
    return _KINDS[kind](dtype)


# ---- element-wise functions ----------------------------------------------------------------------

def _unary(method: str):
    def function(x: Tensor, /) -> Tensor:
        return getattr(x, method)()
    function.__name__ = method
    return function


def _binary(method: str):
    """A function of two arrays (or an array and a Python scalar) with the standard's promotion: both
    arrays count alike, 0-d or not (PyTorch's methods let a dimensioned operand's dtype win:
    int16 0-d + int8 is int8 there, int16 here), and a scalar takes the array's kind."""
    def function(x1, x2, /) -> Tensor:
        dtype = result_type(x1, x2)
        x1 = _array(x1, x2.device) if not isinstance(x1, Tensor) else x1
        return getattr(x1.cast(dtype), method)(x2.cast(dtype) if isinstance(x2, Tensor) else x2)
    function.__name__ = method
    return function


abs = _unary("abs")  # noqa: A001
acos, acosh, asin, asinh = _unary("acos"), _unary("acosh"), _unary("asin"), _unary("asinh")
atan, atanh, ceil, cos, cosh = _unary("atan"), _unary("atanh"), _unary("ceil"), _unary("cos"), _unary("cosh")
exp, expm1, floor, isfinite = _unary("exp"), _unary("expm1"), _unary("floor"), _unary("isfinite")
isinf, isnan, log, log1p, log2 = _unary("isinf"), _unary("isnan"), _unary("log"), _unary("log1p"), _unary("log2")
logical_not, negative, reciprocal = _unary("logical_not"), _unary("neg"), _unary("reciprocal")
sin, sinh, sqrt, square = _unary("sin"), _unary("sinh"), _unary("sqrt"), _unary("square")
tan, tanh, trunc, bitwise_invert = _unary("tan"), _unary("tanh"), _unary("trunc"), _unary("__invert__")

add, subtract, multiply, divide = _binary("add"), _binary("sub"), _binary("mul"), _binary("div")
atan2, copysign, logaddexp = _binary("atan2"), _binary("copysign"), _binary("logaddexp")
floor_divide, remainder, pow = _binary("floor_divide"), _binary("remainder"), _binary("pow")  # noqa: A001
maximum, minimum = _binary("maximum"), _binary("minimum")
equal, not_equal, less, less_equal = _binary("eq"), _binary("ne"), _binary("lt"), _binary("le")
greater, greater_equal = _binary("gt"), _binary("ge")
logical_and, logical_or, logical_xor = _binary("logical_and"), _binary("logical_or"), _binary("logical_xor")
bitwise_and, bitwise_or, bitwise_xor = _binary("__and__"), _binary("__or__"), _binary("__xor__")
bitwise_left_shift, bitwise_right_shift = _binary("__lshift__"), _binary("__rshift__")


def sign(x: Tensor, /) -> Tensor:
    """-1, 0 or 1, and NaN for NaN as the standard says (Tensor.sign gives 0 there, as PyTorch does);
    x / |x| for a complex x."""
    return x.isnan().where(x, x.sign()) if x.dtype.is_float else x.sign()


def positive(x: Tensor, /) -> Tensor:
    return x


def conj(x: Tensor, /) -> Tensor:
    return x.conj()


def real(x: Tensor, /) -> Tensor:
    return x.real


def imag(x: Tensor, /) -> Tensor:
    return x.imag


def log10(x: Tensor, /) -> Tensor:
    return x.log10() if x.dtype.is_complex else x.log2() * math.log10(2)


def hypot(x1: Tensor, x2: Tensor, /) -> Tensor:
    return _array(x1).hypot(x2)


def signbit(x: Tensor, /) -> Tensor:
    """True where the sign bit is set: negative numbers, -0.0 and NaNs with their sign bit."""
    if not x.dtype.is_float:
        return x < 0
    return _like(x, 1.0, None, None).copysign(x) < 0


def round(x: Tensor, /) -> Tensor:  # noqa: A001
    return x.round()


def clip(x: Tensor, /, min=None, max=None) -> Tensor:  # noqa: A002
    return x if min is None and max is None else x.clip(min, max)


# ---- indexing, linear algebra --------------------------------------------------------------------

def take(x: Tensor, indices: Tensor, /, *, axis: int | None = None) -> Tensor:
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"take: axis is required for a {x.ndim}-d array (shape {x.shape})")
        axis = 0
    return x.index_select(axis, indices)


def matmul(x1: Tensor, x2: Tensor, /) -> Tensor:
    return x1.matmul(x2)


def matrix_transpose(x: Tensor, /) -> Tensor:
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose: needs at least 2 dims, got shape {x.shape}")
    return x.mT


def tensordot(x1: Tensor, x2: Tensor, /, *, axes=2) -> Tensor:
    """Sums over `axes` (a count: x1's last and x2's first that many; or two sequences of axes)."""
    if isinstance(axes, int):
        if axes < 0:
            raise ValueError(f"tensordot: axes must be at least 0, got {axes}")
        first, second = list(range(x1.ndim - axes, x1.ndim)), list(range(axes))
    else:
        first, second = [list(_axes(part)) for part in axes]
    first, second = [axis % x1.ndim for axis in first], [axis % x2.ndim for axis in second]
    kept1 = [axis for axis in range(x1.ndim) if axis not in first]
    kept2 = [axis for axis in range(x2.ndim) if axis not in second]
    summed = math.prod(x1.shape[axis] for axis in first)
    left = x1.permute(kept1 + first).reshape(math.prod(x1.shape[axis] for axis in kept1), summed)
    right = x2.permute(second + kept2).reshape(summed, math.prod(x2.shape[axis] for axis in kept2))
    return (left @ right).reshape([x1.shape[axis] for axis in kept1] + [x2.shape[axis] for axis in kept2])


def vecdot(x1: Tensor, x2: Tensor, /, *, axis: int = -1) -> Tensor:
    """sum(conj(x1) * x2) over axis, in the two arrays' promoted dtype; the axis is not broadcast."""
    if x1.ndim == 0 or x2.ndim == 0 or x1.shape[axis] != x2.shape[axis]:
        raise ValueError(f"vecdot: the arrays' sizes along axis {axis} differ: shapes {x1.shape} and {x2.shape}")
    dtype = result_type(x1, x2)
    return (x1.cast(dtype).conj() * x2.cast(dtype)).sum(axis, dtype=dtype)


# ---- manipulation ------------------------------------------------------------------------------

def broadcast_arrays(*arrays: Tensor) -> list[Tensor]:
    shape = np.broadcast_shapes(*(array.shape for array in arrays))
    return [array.expand(shape) for array in arrays]


def broadcast_to(x: Tensor, /, shape) -> Tensor:
    return x.expand(tuple(shape))


def concat(arrays, /, *, axis: int | None = 0) -> Tensor:
    arrays = list(arrays)
    if axis is None:
        arrays, axis = [array.reshape(-1) for array in arrays], 0
    return arrays[0].cat(*arrays[1:], dim=axis)


def expand_dims(x: Tensor, /, axis: int = 0) -> Tensor:
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise IndexError(f"expand_dims: axis {axis} is out of range for a {x.ndim}-d array")
    return x.unsqueeze(axis)


def flip(x: Tensor, /, *, axis=None) -> Tensor:
    return x.flip(*(range(x.ndim) if axis is None else _axes(axis)))


def moveaxis(x: Tensor, source, destination, /) -> Tensor:
    return x.moveaxis(source, destination)


def permute_dims(x: Tensor, /, axes) -> Tensor:
    return x.permute(tuple(axes))


def repeat(x: Tensor, repeats, /, *, axis: int | None = None) -> Tensor:
    """Each element `repeats` times (an int, or one count per element along the axis) along axis, or
    along the flattened array when axis is None."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    if isinstance(repeats, int):
        return x.repeat_interleave(repeats, axis)
    counts = np.asarray(repeats.numpy() if isinstance(repeats, Tensor) else repeats).reshape(-1)
    positions = Tensor(np.repeat(np.arange(x.shape[axis]), counts), device=x.device)
    return x.index_select(axis, positions)


def reshape(x: Tensor, /, shape, *, copy: builtins.bool | None = None) -> Tensor:
    result = x.reshape(tuple(shape))
    return result.clone() if copy else result


def roll(x: Tensor, /, shift, *, axis=None) -> Tensor:
    if axis is None:
        return x.reshape(-1).roll(shift, 0).reshape(x.shape)
    return x.roll(shift, axis)


def squeeze(x: Tensor, /, axis) -> Tensor:
    axes = [a % x.ndim for a in _axes(axis)] if x.ndim else list(_axes(axis))
    if builtins.any(x.shape[a] != 1 for a in axes):
        raise ValueError(f"squeeze: axis {axis} of shape {x.shape} is not of size 1")
    return x.reshape([size for index, size in enumerate(x.shape) if index not in axes])


def stack(arrays, /, *, axis: int = 0) -> Tensor:
    arrays = list(arrays)
    return arrays[0].stack(*arrays[1:], dim=axis)


def tile(x: Tensor, repetitions, /) -> Tensor:
    repetitions = tuple(repetitions)
    if len(repetitions) < x.ndim:
        repetitions = (1,) * (x.ndim - len(repetitions)) + repetitions
    return x.reshape((1,) * (len(repetitions) - x.ndim) + x.shape).tile(*repetitions)


def unstack(x: Tensor, /, *, axis: int = 0) -> tuple[Tensor, ...]:
    return x.unbind(axis)


# ---- searching, sorting, sets --------------------------------------------------------------------

def argmax(x: Tensor, /, *, axis: int | None = None, keepdims: builtins.bool = False) -> Tensor:
    return x.argmax(axis, keepdims)


def argmin(x: Tensor, /, *, axis: int | None = None, keepdims: builtins.bool = False) -> Tensor:
    return x.argmin(axis, keepdims)


def count_nonzero(x: Tensor, /, *, axis=None, keepdims: builtins.bool = False) -> Tensor:
    return (x != 0).sum(_axes(axis), keepdims, dtype=dtypes.int64)


def nonzero(x: Tensor, /) -> tuple[Tensor, ...]:
    if x.ndim == 0:
        raise ValueError("nonzero: a 0-d array has no indices; reshape it to 1-d first")
    return x.nonzero(as_tuple=True)


def searchsorted(x1: Tensor, x2: Tensor, /, *, side: str = "left", sorter: Tensor | None = None) -> Tensor:
    """For each value of x2, the index in the sorted 1-d x1 where it would go: the count of x1's
    values below it (`side="left"`) or not above it ("right"). NaN sorts last."""
    if x1.ndim != 1:
        raise ValueError(f"searchsorted: x1 must be 1-d, got shape {x1.shape}")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', not {side!r}")
    if sorter is not None:
        x1 = x1.index_select(0, sorter)
    values, table = x2.unsqueeze(-1), x1
    before = table < values if side == "left" else table <= values
    if table.dtype.is_float:  # NaN after every number: a NaN value goes after all but x1's NaNs
        before = before | (values.isnan() & ~table.isnan()) if side == "left" else before | values.isnan()
    return before.sum(-1, dtype=dtypes.int64)


def where(condition: Tensor, x1, x2, /) -> Tensor:
    return _array(condition).where(x1, x2)


def argsort(x: Tensor, /, *, axis: int = -1, descending: builtins.bool = False, stable: builtins.bool = True) -> Tensor:
    return x.argsort(axis, descending, stable)


def sort(x: Tensor, /, *, axis: int = -1, descending: builtins.bool = False, stable: builtins.bool = True) -> Tensor:
    return x.sort(axis, descending, stable).values


def _unique(x: Tensor):
    """numpy's unique of the realized values, NaNs each their own value, as the standard asks."""
    values, first, inverse, counts = np.unique(x.numpy().reshape(-1), return_index=True, return_inverse=True,
                                               return_counts=True, equal_nan=False)

    def back(array, dtype=None):
        return Tensor(array, dtype=dtype, device=x.device)
    return back(values, x.dtype), back(first, dtypes.int64), back(inverse.reshape(x.shape), dtypes.int64), \
        back(counts, dtypes.int64)


def unique_values(x: Tensor, /) -> Tensor:
    return _unique(x)[0]


def unique_counts(x: Tensor, /):
    values, _, _, counts = _unique(x)
    return _Unique(values=values, counts=counts)


def unique_inverse(x: Tensor, /):
    values, _, inverse, _ = _unique(x)
    return _Unique(values=values, inverse_indices=inverse)


def unique_all(x: Tensor, /):
    values, first, inverse, counts = _unique(x)
    return _Unique(values=values, indices=first, inverse_indices=inverse, counts=counts)


class _Unique(tuple):
    """The named tuples of the unique_* functions (`values`, then what was asked for, in order)."""

    def __new__(cls, **fields):
        result = super().__new__(cls, fields.values())
        result.__dict__.update(fields)
        return result


# ---- statistics and utilities ------------------------------------------------------------------

def max(x: Tensor, /, *, axis=None, keepdims: builtins.bool = False) -> Tensor:  # noqa: A001
    return x.amax(_axes(axis), keepdims)


def min(x: Tensor, /, *, axis=None, keepdims: builtins.bool = False) -> Tensor:  # noqa: A001
    return x.amin(_axes(axis), keepdims)


def mean(x: Tensor, /, *, axis=None, keepdims: builtins.bool = False) -> Tensor:
    return x.mean(_axes(axis), keepdims)


def _total_dtype(x: Tensor, dtype: DType | None) -> DType | None:
    """The standard's dtype of a sum or product: an unsigned input's is the default unsigned type,
    uint64 (Tensor.sum gives int64 there, as PyTorch)."""
    return uint64 if dtype is None and x.dtype.is_unsigned else dtype


def sum(x: Tensor, /, *, axis=None, dtype: DType | None = None, keepdims: builtins.bool = False) -> Tensor:  # noqa: A001
    return x.sum(_axes(axis), keepdims, dtype=_total_dtype(x, dtype))


def prod(x: Tensor, /, *, axis=None, dtype: DType | None = None, keepdims: builtins.bool = False) -> Tensor:
    return x.prod(_axes(axis), keepdims, dtype=_total_dtype(x, dtype))


def std(x: Tensor, /, *, axis=None, correction: float = 0.0, keepdims: builtins.bool = False) -> Tensor:
    return x.std(_axes(axis), keepdim=keepdims, correction=correction)


def var(x: Tensor, /, *, axis=None, correction: float = 0.0, keepdims: builtins.bool = False) -> Tensor:
    return x.var(_axes(axis), keepdim=keepdims, correction=correction)


def cumulative_sum(x: Tensor, /, *, axis: int | None = None, dtype: DType | None = None,
                   include_initial: builtins.bool = False) -> Tensor:
    if axis is None:
        if x.ndim > 1:
            raise ValueError(f"cumulative_sum: axis is required for a {x.ndim}-d array (shape {x.shape})")
        axis = 0
    summed = x.cumsum(axis, dtype=_total_dtype(x, dtype))
    if not include_initial:
        return summed
    axis %= x.ndim
    widths = [(0, 0)] * x.ndim
    widths[axis] = (1, 0)
    return summed.pad(tuple(widths))


def all(x: Tensor, /, *, axis=None, keepdims: builtins.bool = False) -> Tensor:  # noqa: A001
    return x.all(_axes(axis), keepdims)


def any(x: Tensor, /, *, axis=None, keepdims: builtins.bool = False) -> Tensor:  # noqa: A001
    return x.any(_axes(axis), keepdims)


# ---- inspection ------------------------------------------------------------------------------------

class _Info:
    """What `__array_namespace_info__()` tells about this library and its devices."""

    def capabilities(self) -> dict:
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self) -> str:
        from lazygrad.knobs import knobs
        return knobs.dev

    def default_dtypes(self, *, device: str | None = None) -> dict:
        return {"real floating": dtypes.default_float, "complex floating": complex64,
                "integral": dtypes.default_int, "indexing": dtypes.int64}

    def devices(self) -> list[str]:
        from lazygrad.devices import get_device
        found = []
        for name in ("CPU", "NPY", "OPENCL", "CUDA"):
            try:
                get_device(name)
            except Exception:  # no runtime or hardware for it here
                continue
            found.append(name)
        return found

    def dtypes(self, *, device: str | None = None, kind=None) -> dict:
        return {name: dtype for name, dtype in DTYPES.items() if kind is None or isdtype(dtype, kind)}


def __array_namespace_info__() -> _Info:
    return _Info()


# ---- the linalg extension: what composes from lazy ops ------------------------------------------

def _outer(x1: Tensor, x2: Tensor, /) -> Tensor:
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError(f"outer: both arrays must be 1-d, got shapes {x1.shape} and {x2.shape}")
    return x1.reshape(-1, 1) * x2.reshape(1, -1)


def _diagonal(x: Tensor, /, *, offset: int = 0) -> Tensor:
    return x.diagonal(offset, -2, -1)


def _trace(x: Tensor, /, *, offset: int = 0, dtype: DType | None = None) -> Tensor:
    return x.diagonal(offset, -2, -1).sum(-1, dtype=_total_dtype(x, dtype))


def _vector_norm(x: Tensor, /, *, axis=None, keepdims: builtins.bool = False, ord=2) -> Tensor:
    """The p-norm over `axis` (all axes when None): ord inf and -inf the largest and smallest
    magnitude, 0 the count of nonzero values, any other p (sum |x|^p)^(1/p)."""
    magnitude, axes = x.abs(), _axes(axis)
    if ord == math.inf:
        return magnitude.amax(axes, keepdims)
    if ord == -math.inf:
        return magnitude.amin(axes, keepdims)
    if ord == 0:
        return (magnitude != 0).sum(axes, keepdims, dtype=magnitude.dtype if magnitude.dtype.is_float else dtypes.default_float)
    if ord == 1:
        return magnitude.sum(axes, keepdims)
    if ord == 2:
        return (magnitude * magnitude).sum(axes, keepdims).sqrt()
    return (magnitude ** ord).sum(axes, keepdims) ** (1.0 / ord)


def _cross(x1: Tensor, x2: Tensor, /, *, axis: int = -1) -> Tensor:
    """The cross product of 3-vectors along `axis` (the arrays broadcast against each other)."""
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ValueError(f"cross: axis {axis} must have size 3, got shapes {x1.shape} and {x2.shape}")
    x1, x2 = broadcast_arrays(x1, x2)

    def part(x: Tensor, index: int) -> Tensor:
        return x.narrow(axis, index, 1)
    a0, a1, a2 = (part(x1, index) for index in range(3))
    b0, b1, b2 = (part(x2, index) for index in range(3))
    return concat([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=axis)


# ---- the factorizations: numpy's LAPACK on the host ----------------------------------------------

# The factorizations whose gradient lazygrad writes out (as lazy matmuls of the host's results):
# inv, det, slogdet, solve, cholesky, eigh (and eigvalsh), svd, svdvals, qr, pinv. matrix_rank
# refuses an input that wants one.
DIFFERENTIABLE = {"inv", "det", "slogdet", "solve", "cholesky", "eigh", "svd", "svdvals", "qr", "pinv"}


def _host(name: str, x: Tensor, *others: Tensor) -> list[np.ndarray]:
    """The realized values of a factorization's inputs, after checking that no gradient is asked for
    where none is recorded (DIFFERENTIABLE) and that the matrices are float ones."""
    from lazygrad.tensor import Tensor as TensorType
    for array in (x, *others):
        if array.requires_grad and TensorType.grad_enabled and name not in DIFFERENTIABLE:
            raise RuntimeError(f"linalg.{name}: computed on the host with numpy, it has no gradient in lazygrad; "
                               "detach() the input or call it under lazygrad.no_grad()")
        if array.dtype.category < 2:
            raise TypeError(f"linalg.{name}: expects floating-point or complex arrays, got {array.dtype.name}")
        if array.ndim < (1 if name == "solve" and array is not x else 2):
            raise ValueError(f"linalg.{name}: expects a stack of matrices, got shape {array.shape}")
    return [array.numpy() for array in (x, *others)]


def _back(value: np.ndarray, like: Tensor) -> Tensor:
    """numpy's result in like's dtype, or in its parts' for a real result of a complex input (singular
    values, a log-determinant)."""
    dtype = like.dtype if np.iscomplexobj(value) else _COMPLEX_PARTS.get(like.dtype, like.dtype)
    return Tensor(np.array(value, dtype=dtype.np), dtype=dtype, device=like.device)  # 0-d stays 0-d


def _cholesky(x: Tensor, /, *, upper: builtins.bool = False) -> Tensor:
    """A's gradient from L's: sym(L^-T Phi(L^T G) L^-1), Phi the lower triangle with its diagonal
    halved and sym(M) = (M + M^T) / 2 (A is taken as symmetric, as PyTorch takes it)."""
    (a,) = _host("cholesky", x)
    lower = np.linalg.cholesky(a)
    result = _back(np.swapaxes(lower, -1, -2) if upper else lower, x)

    def gradient(grad, out, sources, rule):
        grad_lower = grad.mT if upper else grad
        factor = _back(lower, x)
        inverse = _back(np.linalg.inv(lower), x)
        product = factor.mT @ grad_lower
        phi = product.tril() - product * _back(np.eye(lower.shape[-1]), x) * 0.5
        whole = inverse.mT @ phi @ inverse
        return [(whole + whole.mT) * 0.5]
    return result._with_gradient((x,), gradient)


def _transposed_inverse(a: np.ndarray, like: Tensor) -> Tensor:
    """inv(a) with its last two axes swapped, as a constant of the gradients below."""
    return _back(np.swapaxes(np.linalg.inv(a), -1, -2), like)


def _det(x: Tensor, /) -> Tensor:
    """d det(A) / dA = det(A) inv(A)^T (infinite or NaN at a singular A, where PyTorch gives the
    adjugate)."""
    (a,) = _host("det", x)
    result = _back(np.linalg.det(a), x)
    return result._with_gradient((x,), lambda grad, out, sources, rule: [
        (grad * out)[..., None, None] * _transposed_inverse(a, x)])


def _slogdet(x: Tensor, /):
    """logabsdet's gradient is inv(A)^T; the sign has none."""
    (a,) = _host("slogdet", x)
    sign, logabsdet = np.linalg.slogdet(a)
    logabsdet = _back(logabsdet, x)._with_gradient((x,), lambda grad, out, sources, rule: [
        grad[..., None, None] * _transposed_inverse(a, x)])
    return _Unique(sign=_back(sign, x), logabsdet=logabsdet)


def _inv(x: Tensor, /) -> Tensor:
    """d inv(A) = -inv(A) dA inv(A), so A's gradient is -inv(A)^T G inv(A)^T."""
    (a,) = _host("inv", x)
    result = _back(np.linalg.inv(a), x)
    return result._with_gradient((x,), lambda grad, out, sources, rule: [
        -(out.mT @ grad @ out.mT)])


def _relative_tolerance(a: np.ndarray, rtol) -> np.ndarray:
    """Singular values below this fraction of the largest count as zero: the standard's default
    max(M, N) * eps, or `rtol` (a number, or an array per matrix)."""
    if rtol is None:
        return np.asarray(builtins.max(a.shape[-2:]) * np.finfo(a.dtype).eps)
    return np.asarray(rtol.numpy() if isinstance(rtol, Tensor) else rtol)


def _pinv(x: Tensor, /, *, rtol=None) -> Tensor:
    """A's gradient where the rank does not change (PyTorch's): with P = pinv(A),
    -P^T G P^T + (I - A P) G^T P P^T + P^T P G^T (I - P A)."""
    (a,) = _host("pinv", x)
    result = _back(np.linalg.pinv(a, rcond=_relative_tolerance(a, rtol)), x)

    def gradient(grad, out, sources, rule):
        matrix, pseudo = _back(a, x), out
        rows, columns = a.shape[-2], a.shape[-1]
        outside_columns = _back(np.eye(rows), x) - matrix @ pseudo   # I - A P, (m, m)
        outside_rows = _back(np.eye(columns), x) - pseudo @ matrix   # I - P A, (n, n)
        return [-(pseudo.mT @ grad @ pseudo.mT) + outside_columns @ grad.mT @ pseudo @ pseudo.mT
                + pseudo.mT @ pseudo @ grad.mT @ outside_rows]
    return result._with_gradient((x,), gradient)


def _solve(x1: Tensor, x2: Tensor, /) -> Tensor:
    """X = inv(A) B; B's gradient is inv(A)^T G, A's minus that times X^T."""
    a, b = _host("solve", x1, x2)
    like = x1 if x1.dtype == result_type(x1, x2) else x2  # the standard's promotion of the two
    vector = b.ndim == 1  # one right-hand side
    result = _back(np.linalg.solve(a, b[..., None])[..., 0] if vector else np.linalg.solve(a, b), like)

    def gradient(grad, out, sources, rule):
        columns, solution = (grad[..., None], out[..., None]) if vector else (grad, out)
        grad_b = _transposed_inverse(a, like) @ columns
        grad_a = -(grad_b @ solution.mT)
        return [grad_a.cast(x1.dtype), (grad_b[..., 0] if vector else grad_b).cast(x2.dtype)]
    return result._with_gradient((x1, x2), gradient)


def _qr(x: Tensor, /, *, mode: str = "reduced"):
    """A's gradient from Q's and R's where Q has as many columns as A (A no wider than tall, or
    square in complete mode) and R is invertible: (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q,
    copyltu(M) M's lower triangle mirrored above the diagonal (PyTorch's formula). A wide A, or a
    tall one in complete mode, has no unique Q to differentiate: an input that wants a gradient
    there raises."""
    if mode not in ("reduced", "complete"):
        raise ValueError(f"linalg.qr: mode must be 'reduced' or 'complete', not {mode!r}")
    (a,) = _host("qr", x)
    rows, columns = a.shape[-2:]
    if _wants_gradient(x) and (columns > rows or (mode == "complete" and rows != columns)):
        raise RuntimeError(f"linalg.qr: the gradient needs as many columns in Q as in A (mode='reduced' and "
                           f"a matrix no wider than tall), got shape {a.shape} in mode {mode!r}; detach() the "
                           "input or call it under lazygrad.no_grad()")
    q, r = np.linalg.qr(a, mode=mode)
    factor_q, factor_r = _back(q, x), _back(r, x)
    r_inverse_transposed = _transposed_inverse(r, x) if _wants_gradient(x) else None

    def gradient_from(grad_q: Tensor | None, grad_r: Tensor | None) -> Tensor:
        m = factor_r @ grad_r.mT if grad_q is None else -(grad_q.mT @ factor_q)
        inner = factor_q @ (m.tril() + m.tril(-1).mT)
        return (inner if grad_q is None else inner + grad_q) @ r_inverse_transposed

    q_out = factor_q._with_gradient((x,), lambda grad, out, sources, rule: [gradient_from(grad, None)])
    r_out = factor_r._with_gradient((x,), lambda grad, out, sources, rule: [gradient_from(None, grad)])
    return _Unique(Q=q_out, R=r_out)


def _wants_gradient(x: Tensor) -> builtins.bool:
    from lazygrad.tensor import Tensor as TensorType
    return x.requires_grad and TensorType.grad_enabled


def _svd(x: Tensor, /, *, full_matrices: builtins.bool = True):
    """A's gradient from U's, S's and Vh's (V = Vh^T, k = min(m, n) singular values, the first k
    columns of U and V when full_matrices): U [F * (U^T gU - gU^T U) S + diag(gS) + S F * (V^T gV -
    gV^T V)] V^T + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T), F[i, j] = 1 / (s[j]^2 - s[i]^2)
    off the diagonal (Townsend's; repeated singular values give infinities there, a zero one in a
    non-square A infinities in the last terms, as in PyTorch). The columns of a full U or V beyond k
    are not unique: their gradient is ignored."""
    (a,) = _host("svd", x)
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    rows, columns = a.shape[-2:]
    k = builtins.min(rows, columns)
    u_out, s_out, vh_out = _back(u, x), _back(s, x), _back(vh, x)
    if not _wants_gradient(x):
        return _Unique(U=u_out, S=s_out, Vh=vh_out)
    left, right = _back(u[..., :, :k], x), _back(np.swapaxes(vh[..., :k, :], -1, -2), x)  # (m, k), (n, k)
    squares = s[..., None, :] ** 2 - s[..., :, None] ** 2
    eye = np.eye(k, dtype=np.bool_)
    with np.errstate(divide="ignore"):
        gaps = _back(np.where(eye, 0.0, 1.0 / np.where(eye, 1.0, squares)), x)
        inverse_s = _back(1.0 / s, x)
    values = _back(s, x)

    def gradient_from(grad_u: Tensor | None, grad_s: Tensor | None, grad_v: Tensor | None) -> Tensor:
        inner = 0
        outer = 0
        if grad_s is not None:
            inner = inner + grad_s[..., None, :] * _back(np.eye(k), x)
        if grad_u is not None:
            grad_u = grad_u[..., :, :k]
            product = left.mT @ grad_u
            inner = inner + (gaps * (product - product.mT)) * values[..., None, :]
            if rows > k:
                outer = outer + ((grad_u - left @ product) * inverse_s[..., None, :]) @ right.mT
        if grad_v is not None:
            grad_v = grad_v[..., :, :k]
            product = right.mT @ grad_v
            inner = inner + values[..., :, None] * (gaps * (product - product.mT))
            if columns > k:
                outer = outer + (left * inverse_s[..., None, :]) @ (grad_v - right @ product).mT
        return left @ inner @ right.mT + outer

    u_out = u_out._with_gradient((x,), lambda grad, out, sources, rule: [gradient_from(grad, None, None)])
    s_out = s_out._with_gradient((x,), lambda grad, out, sources, rule: [gradient_from(None, grad, None)])
    vh_out = vh_out._with_gradient((x,), lambda grad, out, sources, rule: [gradient_from(None, None, grad.mT)])
    return _Unique(U=u_out, S=s_out, Vh=vh_out)


def _svdvals(x: Tensor, /) -> Tensor:
    """A's gradient from the singular values': U diag(gS) V^T, with the reduced factors (a repeated
    singular value has no unique factors but this sum is the same for any)."""
    u, s, vh = np.linalg.svd(_host("svdvals", x)[0], full_matrices=False)
    return _back(s, x)._with_gradient((x,), lambda grad, out, sources, rule: [
        (_back(u, x) * grad[..., None, :]) @ _back(vh, x)])


def _eigh(x: Tensor, /):
    """A's gradient (A taken as symmetric) from the eigenvalues' and eigenvectors': V (diag(gL) +
    F * (V^T gV)) V^T, F[i, j] = 1 / (L[j] - L[i]) off the diagonal; repeated eigenvalues give
    infinities there, as in PyTorch."""
    values, vectors = np.linalg.eigh(_host("eigh", x)[0])
    gaps = values[..., None, :] - values[..., :, None]
    eye = np.eye(values.shape[-1], dtype=np.bool_)
    with np.errstate(divide="ignore"):
        inverse_gaps = np.where(eye, 0.0, 1.0 / np.where(eye, 1.0, gaps))
    v = _back(vectors, x)

    def gradient_from(grad_values: Tensor | None, grad_vectors: Tensor | None) -> Tensor:
        inner = 0
        if grad_values is not None:
            inner = inner + grad_values[..., None, :] * _back(np.eye(values.shape[-1]), x)
        if grad_vectors is not None:
            inner = inner + _back(inverse_gaps, x) * (v.mT @ grad_vectors)
        return v @ inner @ v.mT

    eigenvalues = _back(values, x)._with_gradient((x,), lambda grad, out, sources, rule: [gradient_from(grad, None)])
    eigenvectors = v._with_gradient((x,), lambda grad, out, sources, rule: [gradient_from(None, grad)])
    return _Unique(eigenvalues=eigenvalues, eigenvectors=eigenvectors)


def _eigvalsh(x: Tensor, /) -> Tensor:
    return _eigh(x).eigenvalues


def _matrix_rank(x: Tensor, /, *, rtol=None) -> Tensor:
    (a,) = _host("matrix_rank", x)
    values = np.linalg.svd(a, compute_uv=False)
    cutoff = values.max(-1, keepdims=True, initial=0.0) * _relative_tolerance(a, rtol)[..., None]
    return Tensor((values > cutoff).sum(-1).astype(np.int64), device=x.device)


def _matrix_power(x: Tensor, n: int, /) -> Tensor:
    """x multiplied by itself n times, lazily by repeated squaring; n < 0 inverts first (on the host)."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"linalg.matrix_power: expects square matrices, got shape {x.shape}")
    if n < 0:
        x, n = _inv(x), -n
    result, square = None, x
    while n:
        if n & 1:
            result = square if result is None else result @ square
        n >>= 1
        if n:
            square = square @ square
    if result is None:  # n == 0: identity matrices
        return (eye(x.shape[-1], dtype=x.dtype, device=x.device) + x * 0).cast(x.dtype)
    return result


def _matrix_norm(x: Tensor, /, *, keepdims: builtins.bool = False, ord="fro") -> Tensor:
    """Frobenius, nuclear (sum of singular values, on the host), 2 and -2 (largest and smallest
    singular value), or 1, -1, inf, -inf (the largest or smallest column or row sum of magnitudes)."""
    if ord == "fro":
        magnitude = x.abs() if x.dtype.is_complex else x
        result = (magnitude * magnitude).sum((-2, -1)).sqrt()
    elif ord in ("nuc", 2, -2):
        values = _svdvals(x)
        result = values.sum(-1) if ord == "nuc" else values.amax(-1) if ord == 2 else values.amin(-1)
    elif ord in (1, -1, math.inf, -math.inf):
        sums = x.abs().sum(-2 if ord in (1, -1) else -1)
        result = sums.amax(-1) if ord in (1, math.inf) else sums.amin(-1)
    else:
        raise ValueError(f"linalg.matrix_norm: ord {ord!r} is not one of 'fro', 'nuc', 1, -1, 2, -2, inf, -inf")
    return result.reshape(result.shape + (1, 1)) if keepdims else result


linalg = SimpleNamespace(matmul=matmul, matrix_transpose=matrix_transpose, tensordot=tensordot, vecdot=vecdot,
                         outer=_outer, diagonal=_diagonal, trace=_trace, vector_norm=_vector_norm, cross=_cross,
                         cholesky=_cholesky, det=_det, slogdet=_slogdet, inv=_inv, pinv=_pinv, solve=_solve, qr=_qr,
                         svd=_svd, svdvals=_svdvals, eigh=_eigh, eigvalsh=_eigvalsh, matrix_rank=_matrix_rank,
                         matrix_power=_matrix_power, matrix_norm=_matrix_norm)

from lazygrad import fft  # noqa: E402, F401  (the standard's fft extension, xp.fft)
