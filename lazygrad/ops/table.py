"""The op table: one OpDef per primitive, with everything the rest of lazygrad needs to know about it.

For each op: its kind and arity, the dtype it produces, its numpy reference (what the NPY device
runs and what tests compare against), its gradient rule written with Tensor operations (so the
backward pass stays lazy and fuses), the identity of reduces, and how it renders in each C-family
dialect, on scalars and on vectors.

Gradient rules are called as `grad(g, out, srcs, arg)` and return one gradient (or None) per source.
`NOT_DIFFERENTIABLE` marks ops that have no gradient, so a missing rule is always a visible choice.

Render templates are format strings: `{0}`, `{1}`, `{2}` are the operands (already names, so they
may be repeated), `{f}` is the dialect's math-function suffix for the operand type ("f" below double
in C and CUDA, none in OpenCL, whose functions are overloaded), `{ctype}` is the C type of the result,
`{bits}` and `{top}` the bits of the (promoted) operand and one less, `{width}` a vector's lanes. A
dict picks a template by the operand's dtype name ("float32"), else by "uint" for unsigned
integers, else by its category ("float", "int", "bool"; bool falls back to "int").

`render` and `vector` are keyed by dialect, and a renderer reads the first of its dialects an op
has (renderer/cstyle.py `dialects`): "gnu" (the CPU device's C, GCC/clang extensions allowed), "c99"
(an exported file's ISO C), "cpu" (either of those), "opencl", "cuda", and "c", the C-family default
every renderer falls back to. `vector` lists the dialects that compute the op on vector values,
each with its vector template, or None where the scalar template applies lane by lane as it is;
a dialect without an entry computes the op one lane at a time (or, with no `lanewise_ops`, not in
vectors at all). CAST and BITCAST (`converts`) are conversions between dtypes, which each dialect's
type system renders (`render_cast`, `render_bitcast`), from the template only in the plain case.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from lazygrad.dtype import DType, dtypes

UNARY, BINARY, TERNARY, REDUCE, MOVEMENT, SOURCE = "unary", "binary", "ternary", "reduce", "movement", "source"
GATHER = "gather"  # TAKE: a load whose position along the last axis comes from another tensor
KERNEL = "kernel"  # LOAD, VALID, STORE, SINK: the kernel AST's own (codegen/kernel.py), not the lazy graph's
NOT_DIFFERENTIABLE = "not differentiable"
LN2 = math.log(2)


@dataclass(frozen=True, eq=False)
class OpDef:
    """One op. The lazy graph, the kernel AST, the loop program and the renderers hold these objects
    (`Ops.ADD`), one per op, so comparing them is identity; `OPS[name]` finds one by its name."""
    name: str
    kind: str
    arity: int
    ref: Callable | None = None            # numpy reference; movement and source ops are run by the NPY device
    grad: Callable | str | None = None     # grad(g, out, srcs, arg) -> tuple, or NOT_DIFFERENTIABLE
    out_dtype: Callable[[list[DType], object], DType] | None = None  # default: dtype of the last operand
    render: dict = field(default_factory=dict)  # dialect -> template; "c" is the C-family default
    vector: dict = field(default_factory=dict)  # dialect -> template on vectors (None: the scalar one)
    converts: bool = False                 # CAST and BITCAST: rendered by the dialect's render_cast/bitcast
    simd_reduction: dict | str | None = None  # a reduce's OpenMP reduction operator by its accumulator's
    #                                        dtype (renderer/c.py marks its loop `omp simd reduction`)
    float_only: bool = False               # the Tensor layer casts integer inputs to float first
    integer_only: bool = False             # bool and integer operands only (bitwise ops); a float is an error
    flops: int = 1                         # arithmetic ops per application (Kernel.count_flops, DEBUG=2):
    #                                        0 for conversions, views, sources and the kernel AST's own nodes
    keeps_zero: bool = False               # op(0, ...) == 0, so padding may be pushed through it
    # What computing it once costs beside an add, for the scheduler (a value that costs more than a
    # few adds to recompute is stored, schedule/fuse.py) and for opts (a body copied many times over
    # in a tile must cost 1 per op, codegen/opts.py): libm calls, divisions and remainders cost more.
    cost: int = 1
    exact_in_half: bool = False            # in float16, the float32 result is already a float16 value
    #                                        (a GPU dialect computing in float32 need not round it)
    ulps: int = 0                          # how many units in the last place a device's float result
    #                                        may be from `ref` (test/ops/test_primitives.py); 0: bit for bit
    is_elementwise: bool = field(init=False)  # unary, binary or ternary (a field: the scheduler asks often)
    method: str = field(init=False)         # the name of LazyBuffer's method for a movement op ("reshape")

    def __post_init__(self):
        object.__setattr__(self, "is_elementwise", self.kind in (UNARY, BINARY, TERNARY))
        object.__setattr__(self, "method", self.name.lower())
        if self.converts or self.kind in (MOVEMENT, SOURCE, KERNEL):
            object.__setattr__(self, "flops", 0)

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    def __reduce__(self):  # pickled by name: the unpickled op is this process's one record
        return (_op_named, (self.name,))

    def __lt__(self, other: "OpDef") -> bool:
        return self.name < other.name


def _bool_out(dtypes_in, arg) -> DType:
    return dtypes.bool


def _arg_dtype(dtypes_in, arg) -> DType:
    return arg


def _int_safe_divisor(b):
    return np.where(b == 0, 1, b)


def _div_ref(a, b):
    """C division: true division for floats; truncation for integers, with x/0 = 0 (numpy's choice)."""
    if a.dtype.kind == "f":
        return np.divide(a, b)
    safe = _int_safe_divisor(b)
    quotient = np.floor_divide(a, safe)
    rounds_down = (np.remainder(a, safe) != 0) & ((a < 0) != (safe < 0))
    quotient = np.where(rounds_down, quotient + 1, quotient).astype(a.dtype)
    return np.where(b == 0, np.zeros_like(a), quotient)


def _mod_ref(a, b):
    """C remainder (sign of the dividend); x % 0 = 0 for integers."""
    if a.dtype.kind == "f":
        return np.fmod(a, b)
    return np.where(b == 0, np.zeros_like(a), np.fmod(a, _int_safe_divisor(b)).astype(a.dtype))


def _float16_in_float32(reduce, x: np.ndarray, axes) -> np.ndarray:
    """A numpy sum or product over axes: float16 accumulated in float32 and rounded once, as the
    compiled devices do (numpy itself rounds to float16 between blocks of a strided reduce)."""
    if x.dtype == np.float16:
        return reduce(x, axis=axes, keepdims=True, dtype=np.float32).astype(np.float16)
    return reduce(x, axis=axes, keepdims=True, dtype=x.dtype)


def _max_grad(g, out, srcs, arg):
    x, y = srcs
    # Ties share the gradient equally, as PyTorch's maximum does.
    share_x = (x > y).cast(g.dtype) + (x == y).cast(g.dtype) * 0.5
    return (g * share_x, g * (1 - share_x))


def _reduce_max_grad(g, out, srcs, arg):
    (x,) = srcs
    is_max = (x == out.expand(x.shape)).cast(g.dtype)
    count = is_max.sum(axis=arg, keepdim=True)
    return ((g / count).expand(x.shape) * is_max,)


def _prod_grad(g, out, srcs, arg):
    """Each element's gradient is the product of the others (out / x would be 0 / 0 at a zero): the
    product of the non-zero elements where x is the only zero of its group, 0 for every element of a
    group with two or more zeros, as in PyTorch."""
    (x,) = srcs
    is_zero = x == 0
    zeros_as_ones = is_zero.where(1, x)
    zeros = is_zero.sum(axis=arg, keepdim=True).expand(x.shape)
    nonzero_product = zeros_as_ones.prod(axis=arg, keepdim=True).expand(x.shape)
    others = is_zero.where((zeros == 1).where(nonzero_product, 0),
                           (zeros == 0).where(nonzero_product / zeros_as_ones, 0))
    return (g.expand(x.shape) * others,)


def _permute_grad(g, out, srcs, arg):
    inverse = tuple(sorted(range(len(arg)), key=lambda axis: arg[axis]))
    return (g.permute(inverse),)


def _expand_grad(g, out, srcs, arg):
    (x,) = srcs
    axes = tuple(i for i, (before, after) in enumerate(zip(x.shape, arg)) if before != after)
    return (g.sum(axis=axes, keepdim=True) if axes else g,)


def _pad_grad(g, out, srcs, arg):
    (x,) = srcs
    return (g.shrink(tuple((lo, lo + size) for (lo, _), size in zip(arg, x.shape))),)


def _shrink_grad(g, out, srcs, arg):
    (x,) = srcs
    return (g.pad(tuple((start, size - end) for (start, end), size in zip(arg, x.shape))),)


def _take_ref(source, index):
    """source[..., index[...]] along the last axis, 0 where the index is outside [0, n)."""
    size = source.shape[-1]
    inside = (index >= 0) & (index < size)
    if size == 0:
        return np.zeros(index.shape, source.dtype)
    taken = np.take_along_axis(source, np.where(inside, index, 0).astype(np.int64)[..., None], axis=-1)[..., 0]
    return np.where(inside, taken, np.zeros((), source.dtype))


def _take_grad(g, out, srcs, arg):
    """The incoming gradient added back at the position each output was read from (a one-hot
    comparison with every position of the source's last axis), none for the index."""
    source, index = srcs
    positions = source.arange(source.shape[-1], device=source.device)
    return ((index.unsqueeze(-1) == positions).where(g.unsqueeze(-1), 0), None)


EXPENSIVE = 4  # the cost of an op that is a libm call or a division (exp2, log2, sin, sqrt, 1/x, /, %)


def _unary(name, ref, grad, c, float_only=True, keeps_zero=False, cost=1, exact_in_half=False, ulps=0,
           dialects=None, vector=None):
    return OpDef(name, UNARY, 1, ref=ref, grad=grad, render={"c": c, **(dialects or {})}, vector=vector or {},
                 float_only=float_only, keeps_zero=keeps_zero, cost=cost, exact_in_half=exact_in_half, ulps=ulps)


def _binary(name, ref, grad, c, out_dtype=None, keeps_zero=True, cost=1, exact_in_half=False, dialects=None,
            vector=None, integer_only=False):
    return OpDef(name, BINARY, 2, ref=ref, grad=grad, render={"c": c, **(dialects or {})}, vector=vector or {},
                 out_dtype=out_dtype, keeps_zero=keeps_zero, cost=cost, exact_in_half=exact_in_half,
                 integer_only=integer_only)


# The scalar template on vectors, lane by lane: C's operators on GCC/clang vector types (a comparison
# gives a mask of -1/0 lanes) and OpenCL's, whose ?: also reads such masks.
LANEWISE = None
# C's ?: takes no vector condition: a select of vectors by a mask, bit by bit (c.py lg_select); MAX_REDUCE's
# is the same with the accumulator second.
C_VECTOR_MAX = {"float": "lg_select((({0}>{1}) | ({0}!={0})), {0}, {1})", "int": "lg_select(({0}>{1}), {0}, {1})",
                "bool": "({0} | {1})"}  # masks: true is -1 in every bit
# OpenCL and CUDA: shifts as numpy defines them for every amount, a negative one included (OpenCL
# takes it modulo the width): past the promoted width a left shift gives 0, a right shift the sign.
GPU_SHIFTS = {"SHL": "(({1})<0 || ({1})>={bits} ? 0 : {0}<<({1}))",
              "SHR": "({0}>>(({1})<0 || ({1})>={bits} ? {top} : ({1})))"}


def _cast_ref(x: np.ndarray, dtype) -> np.ndarray:
    """numpy's astype, except between ml_dtypes' int4 and uint4, which numpy does not cast: through int64."""
    if x.dtype.kind == "V" and np.dtype(dtype.np).kind == "V" and x.dtype.itemsize == 1 and "int" in dtype.name:
        return x.astype(np.int64).astype(dtype.np)
    return x.astype(dtype.np)


_DEFS = [
    # elementwise, one operand
    _unary("NEG", np.negative, lambda g, out, srcs, arg: (-g,), "(-{0})", float_only=False, keeps_zero=True,
           exact_in_half=True, vector={"gnu": LANEWISE, "opencl": LANEWISE}),
    _unary("RECIP", np.reciprocal, lambda g, out, srcs, arg: (-g * out * out,), "(1/{0})", cost=EXPENSIVE,
           vector={"opencl": LANEWISE}),
    # OpenCL: the compiler's square root, not a call to PoCL's math library, which keeps a loop scalar
    _unary("SQRT", np.sqrt, lambda g, out, srcs, arg: (g / (out * 2),), "sqrt{f}({0})", keeps_zero=True,
           cost=EXPENSIVE, dialects={"opencl": {"float64": "__builtin_sqrt({0})", "float": "__builtin_sqrtf({0})"}}),
    # exp2 is lazygrad's polynomial (renderer/cstyle.py exp2_helper): 2 ulps in float32, 1 in float64;
    # log2 and sin are the C or OpenCL library's, within 1 ulp of numpy's. On C's vectors, the
    # polynomial's steps on whole vectors (c.py lg_exp2f8).
    _unary("EXP2", np.exp2, lambda g, out, srcs, arg: (g * out * LN2,), "lg_exp2{f}({0})", cost=EXPENSIVE, ulps=2,
           dialects={"opencl": {"float64": "lg_exp2({0})", "float": "lg_exp2f({0})"}},
           vector={"gnu": "lg_exp2f{width}({0})"}),
    _unary("LOG2", np.log2, lambda g, out, srcs, arg: (g / (srcs[0] * LN2),), "lg_log2{f}({0})", cost=EXPENSIVE,
           ulps=1),
    _unary("SIN", np.sin, lambda g, out, srcs, arg: (g * (math.pi / 2 - srcs[0]).sin(),), "sin{f}({0})",
           keeps_zero=True, cost=EXPENSIVE, ulps=1),
    OpDef("CAST", UNARY, 1, ref=_cast_ref,
          grad=lambda g, out, srcs, arg: (g.cast(srcs[0].dtype),),
          out_dtype=_arg_dtype, render={"c": "(({ctype})({0}))"}, converts=True, keeps_zero=True, exact_in_half=True),
    OpDef("BITCAST", UNARY, 1, ref=lambda x, dtype: x.view(dtype.np), grad=NOT_DIFFERENTIABLE,
          out_dtype=_arg_dtype, render={"c": "lg_bitcast({ctype}, {0})"}, converts=True, keeps_zero=True,
          exact_in_half=True),
    # elementwise, two operands
    _binary("ADD", np.add, lambda g, out, srcs, arg: (g, g), "({0}+{1})", vector={"gnu": LANEWISE, "opencl": LANEWISE}),
    _binary("MUL", np.multiply, lambda g, out, srcs, arg: (g * srcs[1], g * srcs[0]), "({0}*{1})",
            vector={"gnu": LANEWISE, "opencl": LANEWISE}),
    _binary("DIV", _div_ref,
            lambda g, out, srcs, arg: (g / srcs[1], -g * srcs[0] / (srcs[1] * srcs[1])),
            {"float": "({0}/{1})", "int": "({1}==0 ? 0 : {1}==-1 ? -{0} : {0}/{1})",
             "uint": "({1}==0 ? 0 : {0}/{1})"}, keeps_zero=False, cost=EXPENSIVE, vector={"opencl": LANEWISE}),
    _binary("MOD", _mod_ref, NOT_DIFFERENTIABLE,
            {"float": "fmod{f}({0}, {1})", "int": "({1}==0 || {1}==-1 ? 0 : {0}%{1})",
             "uint": "({1}==0 ? 0 : {0}%{1})"}, keeps_zero=False, cost=EXPENSIVE, exact_in_half=True),
    # NaN propagates through MAX, as in numpy.maximum. The CPU's C writes the float MAX as c.py's
    # lg_maxf, which gcc compiles without branches where a loop stays scalar.
    _binary("MAX", np.maximum, _max_grad, {"float": "(({0}>{1} || {0}!={0}) ? {0} : {1})",
                                           "int": "({0}>{1} ? {0} : {1})", "bool": "({0}|{1})"},
            exact_in_half=True, dialects={"cpu": {"float32": "lg_maxf({0}, {1})", "float64": "lg_max({0}, {1})"}},
            vector={"gnu": C_VECTOR_MAX, "opencl": LANEWISE}),
    _binary("CMPLT", np.less, NOT_DIFFERENTIABLE, "({0}<{1})", out_dtype=_bool_out,
            vector={"gnu": {"bool": "(~{0} & {1})"}}),  # masks: true is -1 in every bit
    _binary("CMPNE", np.not_equal, NOT_DIFFERENTIABLE, "({0}!={1})", out_dtype=_bool_out, vector={"gnu": LANEWISE}),
    _binary("AND", np.bitwise_and, NOT_DIFFERENTIABLE, "({0}&{1})", vector={"gnu": LANEWISE}, integer_only=True),
    _binary("OR", np.bitwise_or, NOT_DIFFERENTIABLE, "({0}|{1})", vector={"gnu": LANEWISE}, integer_only=True),
    _binary("XOR", np.bitwise_xor, NOT_DIFFERENTIABLE, "({0}^{1})", vector={"gnu": LANEWISE}, integer_only=True),
    # Shifts by the operand's width or more are undefined in C; numpy gives 0 (or -1 for a
    # negative value shifted right), and so do we. The amount is compared as unsigned (a negative
    # one is then too large too, as in numpy), said with a cast so -Wextra has no mixed-sign
    # comparison to warn about in an exported file (lazygrad.export).
    _binary("SHL", np.left_shift, NOT_DIFFERENTIABLE, "((unsigned long long)({1}) >= sizeof({0})*8 ? 0 : {0}<<{1})",
            dialects={"opencl": GPU_SHIFTS["SHL"], "cuda": GPU_SHIFTS["SHL"]}, integer_only=True),
    _binary("SHR", np.right_shift, NOT_DIFFERENTIABLE,
            "((unsigned long long)({1}) >= sizeof({0})*8 ? ({0} < 0 ? -1 : 0) : {0}>>{1})",
            dialects={"opencl": GPU_SHIFTS["SHR"], "cuda": GPU_SHIFTS["SHR"]}, integer_only=True),
    # elementwise, three operands: WHERE(condition, if_true, if_false). The CPU device's float WHERE
    # picks bits by a mask (c.py lg_wheref), which gcc does not turn into a jump on the data.
    OpDef("WHERE", TERNARY, 3, ref=np.where,
          grad=lambda g, out, srcs, arg: (None, srcs[0].where(g, 0), srcs[0].where(0, g)),
          render={"c": "({0} ? {1} : {2})",
                  "gnu": {"float32": "lg_wheref({0}, {1}, {2})", "float64": "lg_where({0}, {1}, {2})"}},
          vector={"gnu": "lg_select({0}, {1}, {2})"}, keeps_zero=True, exact_in_half=True),
    # reduces over the axes in `arg`, keeping them as size 1; rendered as the update of an accumulator
    # ({0}) by a value ({1})
    OpDef("SUM", REDUCE, 1, ref=lambda x, axes: _float16_in_float32(np.sum, x, axes),
          grad=lambda g, out, srcs, arg: (g.expand(srcs[0].shape),), render={"c": "({0}+{1})"},
          vector={"gnu": LANEWISE, "opencl": LANEWISE},
          # none for an integer sum, which gcc vectorizes by itself (integer addition reassociates
          # exactly): under the pragma it misses the dot-product patterns, such as a sum of uint8 by
          # int8 products, which AVX-512 VNNI adds four to a lane in one instruction (vpdpbusd)
          simd_reduction={"float": "+"}),
    OpDef("PROD", REDUCE, 1, ref=lambda x, axes: _float16_in_float32(np.prod, x, axes),
          grad=_prod_grad,
          render={"c": "({0}*{1})"}, vector={"opencl": LANEWISE}, simd_reduction="*"),
    OpDef("MAX_REDUCE", REDUCE, 1,
          ref=lambda x, axes: np.max(x, axis=axes, keepdims=True, initial=reduce_identity(Ops.MAX_REDUCE, x.dtype)),
          grad=_reduce_max_grad, render={"c": {"float": "(({1}>{0} || {1}!={1}) ? {1} : {0})",
                                                "int": "({1}>{0} ? {1} : {0})", "bool": "({0}|{1})"},
                                          "cpu": {"float32": "lg_maxf({1}, {0})", "float64": "lg_max({1}, {0})"}},
          vector={"gnu": {"float": "lg_select((({1}>{0}) | ({1}!={1})), {1}, {0})",
                          "int": "lg_select(({1}>{0}), {1}, {0})", "bool": "({1} | {0})"},
                  "opencl": LANEWISE},
          # floats through a declared reduction that keeps NaN (c.py), which OpenMP's max would drop
          simd_reduction={"float64": "lg_max_double", "float": "lg_max_float", "int": "max", "bool": None}),
    # TAKE(source, index): source of shape index.shape + (n,) read along its last axis at the integer
    # index: result[...] = source[..., index[...]], 0 for an index outside [0, n).
    # Rendered by linearize as an indexed load (`_Emitter.emit_take`), so a lookup costs its rows,
    # not a comparison with every row; the scheduler stores every TAKE (fuse.py).
    OpDef("TAKE", GATHER, 2, ref=_take_ref, grad=_take_grad),
    # movement: views, never a copy
    OpDef("RESHAPE", MOVEMENT, 1, grad=lambda g, out, srcs, arg: (g.reshape(srcs[0].shape),)),
    OpDef("PERMUTE", MOVEMENT, 1, grad=_permute_grad),
    OpDef("EXPAND", MOVEMENT, 1, grad=_expand_grad),
    OpDef("PAD", MOVEMENT, 1, grad=_pad_grad),
    OpDef("SHRINK", MOVEMENT, 1, grad=_shrink_grad),
    OpDef("FLIP", MOVEMENT, 1, grad=lambda g, out, srcs, arg: (g.flip(arg),)),
    # sources and sinks
    OpDef("CONST", SOURCE, 0, grad=NOT_DIFFERENTIABLE),
    OpDef("BUFFER", SOURCE, 0, grad=NOT_DIFFERENTIABLE),
    OpDef("COPY", SOURCE, 1, grad=lambda g, out, srcs, arg: (g.to(srcs[0].device),)),
    OpDef("CONTIGUOUS", SOURCE, 1, grad=lambda g, out, srcs, arg: (g,)),
    OpDef("ASSIGN", SOURCE, 2, grad=NOT_DIFFERENTIABLE),
]

OPS: dict[str, OpDef] = {op.name: op for op in _DEFS}
ELEMENTWISE = {name for name, op in OPS.items() if op.kind in (UNARY, BINARY, TERNARY)}
# the kernel AST's own nodes (codegen/kernel.py describes their args)
KERNEL_OPS: dict[str, OpDef] = {name: OpDef(name, KERNEL, arity) for name, arity in
                                (("LOAD", 0), ("VALID", 0), ("STORE", 1), ("SINK", -1))}


class Ops:
    """Every op as an attribute, `Ops.ADD`: what the kernel AST, codegen and the renderers compare."""


for _op in [*_DEFS, *KERNEL_OPS.values()]:
    setattr(Ops, _op.name, _op)


def _op_named(name: str) -> OpDef:
    return OPS.get(name) or KERNEL_OPS[name]


def reduce_identity(op: OpDef, dtype) -> object:
    """The value a reduce starts from (and returns for an empty input)."""
    np_dtype = np.dtype(dtype.np_type) if isinstance(dtype, DType) else np.dtype(dtype)
    if op is Ops.SUM:
        return np_dtype.type(0)
    if op is Ops.PROD:
        return np_dtype.type(1)
    if np_dtype.kind == "f":
        return np_dtype.type(-np.inf)
    if np_dtype.kind == "b":
        return np.bool_(False)
    return np.iinfo(np_dtype).min
