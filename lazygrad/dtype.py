"""Data types and PyTorch's type promotion rules; a foundation every other layer uses.

A DType names an element type once: its numpy equivalent (for the NPY device and for moving
data in and out), its C name (for renderers) and its category (bool < integer < floating < complex).
The complex dtypes never reach a kernel: a complex Tensor holds its (real, imaginary) pairs in a float
buffer (lazygrad/complex_tensor.py), so they have no C name.

Promotion follows PyTorch (see `result_type`):
  * Between tensors of the same rank class, the result is the smallest type that holds both
    (uint8 + int8 -> int16, int32 + float16 -> float16, bool + anything -> the other); uint64 with a
    signed integer type is an error, since no integer type holds both.
  * Python scalars and 0-d tensors only take part when they are of a higher category than the
    dimensioned tensors: `int8_tensor + 100` stays int8, `int8_tensor + 2.5` becomes float32
    (the default float), `bool_tensor + 1` becomes int64. (A scalar the result dtype cannot hold,
    `int8_tensor + 1000`, is an error: see `_check_scalar_fits` in tensor_methods/helpers.py.)
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True, eq=False)
class DType:
    """One instance per dtype (the attributes of `dtypes`), so equality and hashing are by identity:
    cheap, and dtypes are hashed in every graph and kernel key. Pickling keeps that instance."""
    name: str
    itemsize: int
    category: int  # 0 bool, 1 integer, 2 floating, 3 complex
    np_type: type
    c_name: str

    def __reduce__(self):
        return (_dtype_named, (self.name,))

    @property
    def is_float(self) -> bool:
        return self.category == 2

    @property
    def is_int(self) -> bool:
        return self.category == 1

    @property
    def is_bool(self) -> bool:
        return self.category == 0

    @property
    def is_complex(self) -> bool:
        return self.category == 3

    @property
    def is_unsigned(self) -> bool:
        return self.category == 1 and (np.dtype(self.np_type).kind == "u" or self.np_type is ml_dtypes.uint4)

    @property
    def np(self) -> np.dtype:
        return np.dtype(self.np_type)

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"


class dtypes:
    """The dtypes lazygrad supports, as `dtypes.float32` etc."""
    bool = DType("bool", 1, 0, np.bool_, "bool")
    uint8 = DType("uint8", 1, 1, np.uint8, "unsigned char")
    int8 = DType("int8", 1, 1, np.int8, "signed char")
    int16 = DType("int16", 2, 1, np.int16, "short")
    uint16 = DType("uint16", 2, 1, np.uint16, "unsigned short")
    int32 = DType("int32", 4, 1, np.int32, "int")
    uint32 = DType("uint32", 4, 1, np.uint32, "unsigned int")
    int64 = DType("int64", 8, 1, np.int64, "long long")
    uint64 = DType("uint64", 8, 1, np.uint64, "unsigned long long")
    # 4-bit integers, one per byte as ml_dtypes holds them (the low nibble, two's complement for int4);
    # every op on them computes in int32 and wraps its result to 4 bits (Tensor._apply)
    int4 = DType("int4", 1, 1, ml_dtypes.int4, "unsigned char")
    uint4 = DType("uint4", 1, 1, ml_dtypes.uint4, "unsigned char")
    float16 = DType("float16", 2, 2, np.float16, "_Float16")
    # bfloat16: its bits in memory; every op on it computes in float32 and rounds once (Tensor._apply)
    bfloat16 = DType("bfloat16", 2, 2, ml_dtypes.bfloat16, "unsigned short")
    # 8-bit floats (OCP's): their codes in memory, computed like bfloat16 (renderer/narrow_floats.py)
    float8_e4m3fn = DType("float8_e4m3fn", 1, 2, ml_dtypes.float8_e4m3fn, "unsigned char")
    float8_e5m2 = DType("float8_e5m2", 1, 2, ml_dtypes.float8_e5m2, "unsigned char")
    # and their fnuz variants (AMD's): no negative zero, no infinity, one NaN
    float8_e4m3fnuz = DType("float8_e4m3fnuz", 1, 2, ml_dtypes.float8_e4m3fnuz, "unsigned char")
    float8_e5m2fnuz = DType("float8_e5m2fnuz", 1, 2, ml_dtypes.float8_e5m2fnuz, "unsigned char")
    # exponent only (MX block scales): 2^(code - 127), 255 is NaN; no zero, no sign
    float8_e8m0fnu = DType("float8_e8m0fnu", 1, 2, ml_dtypes.float8_e8m0fnu, "unsigned char")
    # 4-bit float (MX): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives; one code per byte in memory
    float4_e2m1fn = DType("float4_e2m1fn", 1, 2, ml_dtypes.float4_e2m1fn, "unsigned char")
    float32 = DType("float32", 4, 2, np.float32, "float")
    float64 = DType("float64", 8, 2, np.float64, "double")
    complex64 = DType("complex64", 8, 3, np.complex64, "")  # (real, imag) float32 pairs
    complex128 = DType("complex128", 16, 3, np.complex128, "")  # (real, imag) float64 pairs

    default_float = float32
    default_int = int64

    @staticmethod
    def all() -> tuple[DType, ...]:
        return ALL_DTYPES

    @staticmethod
    def from_any(value) -> DType:
        """A DType from a DType, a name ('float32'), a numpy dtype or a Python type."""
        if isinstance(value, DType):
            return value
        if value is float:
            return dtypes.default_float
        if value is int:
            return dtypes.default_int
        if value is bool:
            return dtypes.bool
        if value is complex:
            return dtypes.complex64
        if isinstance(value, str) and value in DTYPES_BY_NAME:
            return DTYPES_BY_NAME[value]
        try:
            np_dtype = np.dtype(value)
        except TypeError:
            np_dtype = None
        if np_dtype is not None and np_dtype in DTYPES_BY_NUMPY:
            return DTYPES_BY_NUMPY[np_dtype]
        valid = ", ".join(d.name for d in ALL_DTYPES)
        raise TypeError(f"unknown dtype {value!r}; valid dtypes are: {valid}")


ALL_DTYPES = (dtypes.bool, dtypes.int4, dtypes.uint4, dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.uint16,
              dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float4_e2m1fn, dtypes.float8_e4m3fn, dtypes.float8_e5m2,
              dtypes.float8_e4m3fnuz, dtypes.float8_e5m2fnuz, dtypes.float8_e8m0fnu, dtypes.float16, dtypes.bfloat16,
              dtypes.float32, dtypes.float64)
# Floats that are only stored: every op converts them to float32 first and rounds its result back
# (Tensor._apply), and they convert to and from float32 only (Tensor.cast).
STORAGE_FLOATS = frozenset({dtypes.bfloat16, dtypes.float8_e4m3fn, dtypes.float8_e5m2, dtypes.float8_e4m3fnuz,
                            dtypes.float8_e5m2fnuz, dtypes.float8_e8m0fnu, dtypes.float4_e2m1fn})
# Integers that are only stored: every op computes in int32 and wraps its result back.
STORAGE_INTS = frozenset({dtypes.int4, dtypes.uint4})
# Each stored-only dtype and the dtype its ops compute in.
STORAGE_WIDE = {**{dtype: dtypes.float32 for dtype in STORAGE_FLOATS}, **{dtype: dtypes.int32 for dtype in STORAGE_INTS}}
# The complex dtypes, each with the float dtype of its parts; kept out of ALL_DTYPES, the dtypes
# kernels compute in.
COMPLEX_PARTS = {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}
COMPLEX_OF = {part: dtype for dtype, part in COMPLEX_PARTS.items()}
DTYPES_BY_NAME = {d.name: d for d in ALL_DTYPES + tuple(COMPLEX_PARTS)}
DTYPES_BY_NUMPY = {np.dtype(d.np_type): d for d in ALL_DTYPES + tuple(COMPLEX_PARTS)}


class finfo:
    """Limits of a float dtype, with torch.finfo's fields; finfo() describes the default float."""

    def __init__(self, dtype=None):
        dtype = dtypes.default_float if dtype is None else dtypes.from_any(dtype)
        dtype = COMPLEX_PARTS.get(dtype, dtype)  # a complex dtype's limits are its parts' (numpy, torch)
        if not dtype.is_float:
            raise TypeError(f"finfo: expects a floating point dtype, got {dtype.name}; use lazygrad.iinfo for "
                            "integer dtypes")
        limits = ml_dtypes.finfo(dtype.np) if dtype in STORAGE_FLOATS else np.finfo(dtype.np)
        self.dtype = dtype.name  # a name, as in PyTorch
        self.bits = limits.bits
        self.eps = float(limits.eps)
        self.max = float(limits.max)
        self.min = float(limits.min)
        self.tiny = self.smallest_normal = float(limits.smallest_normal)
        self.resolution = 10.0 ** -limits.precision  # numpy rounds it to the dtype (float16: 0.0010004)

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Limits of an integer dtype, with torch.iinfo's fields (bool has none, as in PyTorch)."""

    def __init__(self, dtype):
        dtype = dtypes.from_any(dtype)
        if not dtype.is_int:
            raise TypeError(f"iinfo: expects an integer dtype, got {dtype.name}"
                            + ("; use lazygrad.finfo for floating point dtypes" if dtype.is_float else ""))
        limits = ml_dtypes.iinfo(dtype.np) if dtype in STORAGE_INTS else np.iinfo(dtype.np)
        self.dtype = dtype.name
        self.bits = limits.bits
        self.max = int(limits.max)
        self.min = int(limits.min)

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


def promote_types(a: DType, b: DType) -> DType:
    """The smallest dtype both a and b convert to without losing their category."""
    if a == b:
        return a
    if a.is_complex or b.is_complex:
        # the complex dtype whose parts hold both floats: complex64 with float64 gives complex128, as in PyTorch
        floats = [COMPLEX_PARTS.get(d, d) for d in (a, b) if d.category >= 2]
        return COMPLEX_OF[floats[0] if len(floats) == 1 else promote_types(*floats)]
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.is_float:
        if a.itemsize == b.itemsize:  # float16 and bfloat16: neither holds the other (PyTorch: float32)
            return dtypes.float32
        return a if a.itemsize >= b.itemsize else b
    # Two integer types: the smallest that holds both, numpy's table (uint8 + int8 -> int16, uint32 +
    # int32 -> int64), as PyTorch for the types it promotes. None holds uint64 and a signed type
    # (numpy gives float64, PyTorch an error): an error here too. The 4-bit types promote as ml_dtypes
    # (int4 + uint4 -> int8, uint4 + int8 -> int8, int4 + uint8 -> int16).
    stand_a, stand_b = _byte_stand_in(a, b), _byte_stand_in(b, a)
    if stand_a == stand_b:
        return stand_a
    result = np.promote_types(stand_a.np, stand_b.np)
    if result.kind == "f":
        raise TypeError(f"no integer dtype holds both {a.name} and {b.name}; cast one of them first "
                        f"(.cast(dtypes.int64) or .cast(dtypes.uint64))")
    return DTYPES_BY_NUMPY[result]


def _byte_stand_in(dtype: DType, other: DType) -> DType:
    """A 4-bit integer type as the byte type that promotes alike beside `other`: int8 for int4, and
    for uint4 uint8 beside an unsigned type, int8 (which holds it) beside a signed one."""
    if dtype == dtypes.int4 or (dtype == dtypes.uint4 and not other.is_unsigned):
        return dtypes.int8
    return dtypes.uint8 if dtype == dtypes.uint4 else dtype


def scalar_dtype(value) -> DType:
    """The dtype a Python scalar takes when it meets a tensor."""
    if isinstance(value, (bool, np.bool_)):
        return dtypes.bool
    if isinstance(value, (int, np.integer)):
        return dtypes.default_int
    if isinstance(value, (float, np.floating)):
        return dtypes.default_float
    if isinstance(value, (complex, np.complexfloating)):
        return COMPLEX_OF[dtypes.default_float]
    raise TypeError(f"expected a Python scalar (bool, int, float, complex), got {type(value).__name__}")


def _combine_categories(higher: DType | None, lower: DType | None) -> DType | None:
    """Merge a higher-priority result with a lower-priority one, as PyTorch does."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_float and lower.is_complex:  # a float tensor and a complex number: complex of its precision
        return COMPLEX_OF[promote_types(higher, dtypes.float32)]
    if higher.category >= 2:
        return higher
    if higher.is_bool or lower.category >= 2:
        return promote_types(higher, lower)
    return higher


def result_type(dimensioned: list[DType], zero_dim: list[DType], scalars: list[DType]) -> DType:
    """PyTorch's result type for operands grouped by priority: tensors with dims, 0-d tensors, scalars."""
    def fold(group: list[DType]) -> DType | None:
        result = None
        for dtype in group:
            result = dtype if result is None else promote_types(result, dtype)
        return result
    combined = _combine_categories(fold(dimensioned), _combine_categories(fold(zero_dim), fold(scalars)))
    if combined is None:
        raise ValueError("result_type needs at least one operand")
    return combined


def least_float(dtype: DType) -> DType:
    """The dtype a float-only op (exp, sqrt, true division) returns for an input of `dtype`."""
    return dtype if dtype.category >= 2 else dtypes.default_float


def _dtype_named(name: str) -> DType:
    return getattr(dtypes, name)
