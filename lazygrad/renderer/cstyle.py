"""Expression syntax shared by the C-family dialects (C, OpenCL, CUDA).

A loop program's values are typed trees (renderer/loop_program.py); `render_expr` prints one
through the `render_*` method of its kind, which this class answers from the op table's C-family
templates. A dialect subclasses it and overrides only what differs (type names, math helpers, how
a kernel is declared and its loops are laid out).

`render_thread_body` is the body of one GPU work-item (OpenCL and CUDA share it), including the
fold of a GROUP: each lane's partial result goes to local memory, the group waits at a barrier,
and lane 0 folds the lanes in order and stores. Values of several lanes (`Statement.width`, see
linearize's vector copies) are declared with `value_type_name`; only a dialect whose
`vector_width` exceeds 1 (OpenCL) receives them, and it supplies the `render_vector_*` syntax.
"""
from __future__ import annotations

import functools
import math
import re

import numpy as np

from lazygrad.dtype import STORAGE_FLOATS, STORAGE_INTS, DType, dtypes
from lazygrad.ops import OPS, OpDef, Ops, reduce_identity
from lazygrad.renderer import narrow_floats
from lazygrad.renderer.loop_program import (
    Accumulate,
    Broadcast,
    ByteDot,
    Const,
    Element,
    Fma,
    InRange,
    Lane,
    Load,
    Masked,
    Op,
    Valid,
    Var,
    Vector,
    VectorLoad,
)
from lazygrad.shape.symbolic import Condition, FloorSyntax


def define_once(text: str, name: str | None = None) -> str:
    """A helper guarded so that it is defined once however many kernel sources precede it in one
    file: the CPU and OpenCL devices compile several kernels of a realize together. The guard is
    named after `name`, by default the first lg_ name in the text."""
    guard = "LG_HAVE_" + re.search(r"lg_\w+", name or text).group(0)
    return f"#ifndef {guard}\n#define {guard}\n{text}\n#endif"


def taylor_steps(degree: int, suffix: str, fma) -> str:
    """2^f as a Taylor polynomial of `degree` in Horner's steps, each one fused multiply-add written
    by `fma(product, factor, addend)` (the kernels compile with -ffp-contract=off, so a product and
    a sum would be rounded apart: 7 more instructions of about 55 per vector of a softmax's exps,
    whose kernels ran 9-10% slower so): `c0;\n  p = fma(p, f, c1); ...`, after `p = `."""
    coefficients = [math.log(2) ** k / math.factorial(k) for k in range(degree, -1, -1)]
    return ";\n".join([f"{coefficients[0]!r}{suffix}"]
                       + [f"  p = {fma('p', 'f', f'{c!r}{suffix}')}" for c in coefficients[1:]])


# The fused multiply-add of each dialect of exp2_helper, by floating type: the CPU device's builtins
# (an FMA instruction with -march=native wherever the CPU has one), an exported file's lg_fmaf and
# lg_fma (math.h's fmaf where it is fast, else a product and a sum; c.py), OpenCL's fma.
EXP2_FMAS = {"gnu": {"float": "__builtin_fmaf", "double": "__builtin_fma"},
             "c99": {"float": "lg_fmaf", "double": "lg_fma"},
             "opencl": {"float": "fma", "double": "fma"}}


# Per floating type: the Taylor polynomial's degree, the exponent's bias and the mantissa's bits.
EXP2_FORMATS = {"float": (7, 127, 23), "double": (13, 1023, 52)}


def exp2_helper(ctype: str, dialect: str) -> str:
    """lg_exp2f (float) or lg_exp2 (double), 2^x without branches or library calls, so loops calling
    it vectorize (libm's exp2 is a call per element), in one of three spellings of the same steps:
    "gnu" (the CPU device's gcc/clang C), "c99" (ISO C for an exported file: math.h's rint, the powers
    of two built in a union) or "opencl" (its rint and as_float).

    x = n + f with n = rint(x), |f| <= 1/2; 2^f is a Taylor polynomial in fused multiply-adds (float: degree 7, truncation
    error ~5e-9; double: 13, ~4e-18, within 1 ulp of numpy); 2^n is applied as two exact power-of-two
    factors, so results reach the subnormal range and overflow cleanly to inf. Below the smallest
    subnormal the result rounds to 0 and is given as 0 from a harmless input: computed, it would
    underflow through subnormals, each a microcode assist on x86 (a softmax over BERT's masked
    scores, -3.4e38, ran 3-4x slower). NaN fails every comparison and flows through."""
    degree, exponent_bias, mantissa_bits = EXP2_FORMATS[ctype]
    single = ctype == "float"
    name, suffix = ("lg_exp2f", "f") if single else ("lg_exp2", "")
    integer, size = ("int", 4) if single else ("long long" if dialect != "opencl" else "long", 8)
    rint = {"gnu": f"__builtin_rint{suffix}", "c99": f"rint{suffix}", "opencl": "rint"}[dialect]
    zero_below = -(exponent_bias + mantissa_bits)  # 2^-150 (float) and 2^-1075 (double) round to 0
    lines = [f"/* 2^x: a Taylor polynomial of 2^f, |f| <= 1/2, times two exact powers of two; 0 below 2^{zero_below}",
             "   without computing through subnormals (see renderer/cstyle.py exp2_helper) */",
             f"{'' if dialect == 'opencl' else 'static inline '}{ctype} {name}({ctype} x) {{",
             f"  int zero = x < {float(zero_below)!r}{suffix};",
             f"  {ctype} clamped = x > {float(exponent_bias + 7)!r}{suffix} ? {float(exponent_bias + 7)!r}{suffix} "
             f": (zero ? 0.0{suffix} : x);",
             f"  {ctype} n = {rint}(clamped);",
             f"  {ctype} f = clamped - n;",
             f"  {ctype} p = {taylor_steps(degree, suffix, lambda a, b, c: f'{EXP2_FMAS[dialect][ctype]}({a}, {b}, {c})')};",
             f"  int whole = (int)(n == n ? n : 0.0{suffix});",
             "  int halved = whole / 2;  /* not `half`, a type in OpenCL */",
             f"  {integer} low_bits = ({integer})(halved + {exponent_bias}) << {mantissa_bits}, "
             f"high_bits = ({integer})(whole - halved + {exponent_bias}) << {mantissa_bits};"]
    if dialect == "c99":
        lines += [f"  union {{ {integer} bits; {ctype} value; }} low, high;",
                  "  low.bits = low_bits;",
                  "  high.bits = high_bits;",
                  f"  return zero ? 0.0{suffix} : p * low.value * high.value;"]
    elif dialect == "opencl":
        lines += [f"  return zero ? 0.0{suffix} : p * as_{ctype}(low_bits) * as_{ctype}(high_bits);"]
    else:
        lines += [f"  {ctype} low, high;",
                  f"  __builtin_memcpy(&low, &low_bits, {size});",
                  f"  __builtin_memcpy(&high, &high_bits, {size});",
                  f"  return zero ? 0.0{suffix} : p * low * high;"]
    return "\n".join(lines + ["}"])


def _validity(valid: Condition | bool) -> str | bool:
    """A validity as the render_* methods take it: True, False, or the condition's text."""
    return valid if isinstance(valid, bool) else valid.render()


def _category(dtype: DType) -> str:
    return "float" if dtype.is_float else ("bool" if dtype.is_bool else "int")


def pick(template, dtype: DType) -> str | None:
    """A template for an operand of `dtype` from an op table entry: the string, or a dict's entry for
    the dtype's name, else "uint" for an unsigned integer (where -1 is the largest value), else its
    category (a bool's falls back to "int"); None when the dict has none."""
    if isinstance(template, str):
        return template
    category = _category(dtype)
    keys = (dtype.name, "uint" if dtype.is_unsigned else None, category, "int" if category == "bool" else None)
    return next((template[key] for key in keys if key in template), None)


class CStyleRenderer(FloorSyntax):
    """Index arithmetic comes from FloorSyntax (lg_floordiv/lg_floormod for possibly negative operands)."""
    # The op table's render keys this renderer reads, the first an op has winning (ops/table.py).
    dialects: tuple[str, ...] = ("c",)
    type_names: dict[DType, str] = {}
    # Whether strided reduces may keep per-output accumulators in an array (a CPU cache tiling);
    # GPU dialects give each thread one output and one register accumulator instead.
    accumulator_arrays = False
    # Whether a tile's epilogue reads its sums back from the output (see linearize; a gcc matter).
    spills_tile_epilogue = False
    # Whether LOCAL and GROUP opts apply (a dialect with work-groups), and the syntax they need:
    # the qualifier of memory shared by a group, and the statement that waits for the whole group.
    supports_local = False
    local_memory_qualifier = ""
    group_barrier = ""

    @functools.cached_property
    def vector_ops(self) -> frozenset[OpDef]:
        """Ops linearize may apply to vectors (besides loads and constants), those the op table gives a
        vector entry in one of this renderer's dialects; see vector_width."""
        return frozenset(op for op in OPS.values() if any(dialect in op.vector for dialect in self.dialects))

    def computes_on_vectors(self, op: OpDef, src_dtype: DType, dtype: DType) -> bool:
        """Whether linearize writes `op` on vectors as one expression (render_vector_op), not lane by
        lane: the ops of `vector_ops`."""
        return op in self.vector_ops

    def type_name(self, dtype: DType) -> str:
        return self.type_names.get(dtype, dtype.c_name)

    def value_type_name(self, dtype: DType, width: int = 1) -> str:
        """The register type of a value of `width` lanes (`float16` for 16 float32 lanes)."""
        return self.type_name(dtype) + (str(width) if width > 1 else "")

    def vector_width(self, dtype: DType, size: int) -> int:
        """Lanes per vector value of `dtype` that linearize may build along an upcast axis of `size`
        positions (a divisor of it); 1 (scalar code) unless a dialect says otherwise."""
        return 1

    # ---- expressions --------------------------------------------------------------------------

    def render_expr(self, expr) -> str:
        """The text of one of a loop program's values (renderer/loop_program.py), its operands first."""
        kind = type(expr)
        if kind is Var:
            return expr.name
        if kind is Element:
            return f"{expr.array}[{expr.index.render(self)}]"
        if kind is Const:
            return self.render_const(expr.value, expr.dtype)
        if kind is Load:
            render = self.render_splat_load if expr.splat else self.render_load
            return render(expr.param, expr.dtype, expr.index.render(self), _validity(expr.valid))
        if kind is VectorLoad:
            return self.render_vector_load(expr.param, expr.dtype, expr.index.render(self), expr.width)
        if kind is Masked:
            return self.render_masked(self.render_expr(expr.value), expr.dtype, _validity(expr.valid), expr.width)
        if kind is Valid:
            return f"({expr.condition.render()})"
        if kind is Op:
            operands = [self.render_expr(operand) for operand in expr.operands]
            if expr.width > 1:
                return self.render_vector_op(expr.op, list(expr.src_dtypes), expr.dtype, operands, expr.width)
            return self.render_op(expr.op, list(expr.src_dtypes), expr.dtype, operands)
        if kind is Vector:
            return self.render_vector(expr.dtype, [self.render_expr(lane) for lane in expr.lanes])
        if kind is Lane:
            return self.render_lane(self.render_expr(expr.value), expr.dtype, expr.lane)
        if kind is Broadcast:
            return self.render_broadcast(expr.dtype, expr.width, self.render_expr(expr.value))
        if kind is Accumulate:
            return self.render_accumulate(expr.op, expr.dtype, self.render_expr(expr.accumulator),
                                          self.render_expr(expr.value), expr.width)
        if kind is Fma:
            operands = [self.render_expr(operand) for operand in (expr.left, expr.right, expr.accumulator)]
            if expr.width > 1:
                return self.render_vector_fma(expr.dtype, expr.width, *operands)
            return self.render_fma(expr.dtype, *operands)
        if kind is ByteDot:
            addresses = [f"{element.array} + ({element.index.render(self)})" for element in (expr.activations, expr.weights)]
            return self.render_byte_dot(self.render_expr(expr.accumulator), *addresses, expr.width)
        if kind is InRange:
            value = self.render_expr(expr.value)
            return f"({value}>=0 && {value}<{expr.size})"
        raise TypeError(f"{type(self).__name__}: no rendering for {expr!r}")

    def render_const(self, value, dtype: DType) -> str:
        if dtype in STORAGE_FLOATS or dtype in STORAGE_INTS:  # its bits, its code (a 4-bit int's nibble)
            return str(int(np.array(value, dtype=dtype.np).view(np.uint16 if dtype.itemsize == 2 else np.uint8)))
        if self.float16_in_registers_as_float and dtype == dtypes.float16:
            return self.render_const(float(np.float16(value)), dtypes.float32)
        if dtype.is_bool:
            return "1" if value else "0"
        if dtype.is_int:
            value = int(value)
            if dtype.is_unsigned:
                return f"{value}ull" if dtype == dtypes.uint64 else f"{value}u"
            if value == np.iinfo(dtype.np).min:
                return f"({value + 1}-1)"
            return f"{value}ll" if dtype == dtypes.int64 else str(value)
        value = float(value)
        if math.isnan(value):
            text = "NAN"
        elif math.isinf(value):
            text = "INFINITY" if value > 0 else "(-INFINITY)"
        elif dtype == dtypes.float32:
            text = str(np.float32(value))
            text = (text if "." in text or "e" in text else text + ".0") + "f"
        else:
            text = repr(value)
        return text if dtype != dtypes.float16 else f"(({self.type_name(dtype)}){text})"

    # GPU dialects keep float16 as half in memory and float in registers: they set this and
    # supply `half_load`, and their float16 constants are written as floats.
    float16_in_registers_as_float = False

    def half_load(self, param: str, index: str) -> str:
        raise NotImplementedError(f"{type(self).__name__} must say how to read a half from memory")

    def render_load(self, param: str, dtype: DType, index: str, valid) -> str:
        if self.float16_in_registers_as_float and dtype == dtypes.float16 and valid is not False:
            load = self.half_load(param, index)
            return load if valid is True else f"(({valid}) ? {load} : 0.0f)"
        if valid is True:
            return f"{param}[{index}]"
        if valid is False:
            return self.render_const(0, dtype)
        return f"(({valid}) ? {param}[{index}] : {self.render_const(0, dtype)})"

    def render_splat_load(self, param: str, dtype: DType, index: str, valid) -> str:
        """A value read once for every lane of a vector copy (the C dialect hides it from gcc's
        grouping of loads)."""
        return self.render_load(param, dtype, index, valid)

    def render_masked(self, value: str, dtype: DType, valid, width: int = 1) -> str:
        """value where valid, else zero (a vector of zeros for a vector value of `width` lanes)."""
        zero = self.render_const(0, dtype)
        if width > 1:
            zero = self.render_broadcast(dtype, width, zero)
        if valid is True:
            return value
        if valid is False:
            return zero
        return f"(({valid}) ? {value} : {zero})"

    def template(self, op: OpDef, operand_dtype: DType) -> str:
        """The op's scalar template for an operand of `operand_dtype`, from the first of this
        renderer's dialects that has one."""
        render = op.render
        for dialect in self.dialects:
            template = pick(render[dialect], operand_dtype) if dialect in render else None
            if template is not None:
                return template
        raise TypeError(f"{op} is not defined for {operand_dtype.name}")

    def vector_template(self, op: OpDef, operand_dtype: DType) -> str:
        """The op's template on vectors (`vector_ops`): its vector entry in this renderer's first
        dialect that has one, or the scalar template where that says LANEWISE or has no entry for
        the operand's dtype."""
        vector = op.vector
        dialect = next(dialect for dialect in self.dialects if dialect in vector)
        template = pick(vector[dialect], operand_dtype) if vector[dialect] is not None else None
        return template if template is not None else self.template(op, operand_dtype)

    def math_suffix(self, dtype: DType) -> str:
        """The `{f}` of a template: C's suffix of a math function on this operand type."""
        return "" if dtype == dtypes.float64 else "f"

    def fill(self, template: str, operands: list[str], operand_dtype: DType, dtype: DType, width: int = 1) -> str:
        """A template with its operands and fields (see ops/table.py)."""
        bits = 64 if operand_dtype.itemsize == 8 else 32  # narrower integers are promoted to int
        return template.format(*operands, f=self.math_suffix(operand_dtype), ctype=self.type_name(dtype),
                               bits=bits, top=bits - 1, width=width)

    def render_storage_cast(self, src_dtype: DType, dtype: DType, operand: str) -> str | None:
        """A CAST to or from a storage float, held as its bits or code (bfloat16 as an unsigned 16-bit
        integer, a float8 as a byte); None for other casts. The front end converts them to and from
        float32 only (Tensor.cast): lg_bf16_to_float shifts the bits into a float's high half,
        lg_float_to_bf16 rounds to nearest even and keeps a NaN a NaN; the float8 helpers are
        narrow_floats.py's. Each dialect defines the helpers. A 4-bit integer is its nibble in a byte:
        stored as the value's low 4 bits (a float truncated through a 64-bit integer first, as
        ml_dtypes converts), read back with int4's sign bit extended."""
        if dtype in STORAGE_INTS:
            wide = self.type_name(dtypes.int64) if src_dtype.is_float else "int"
            source = self.render_storage_cast(src_dtype, dtypes.int32, operand) if src_dtype in STORAGE_INTS else operand
            return f"(({self.type_name(dtype)})(({wide})({source}) & 15))"
        if src_dtype in STORAGE_INTS:
            nibble = f"((int)({operand}) & 15)"
            value = f"(({nibble} ^ 8) - 8)" if src_dtype == dtypes.int4 else nibble
            return value if dtype == dtypes.int32 else f"(({self.type_name(dtype)}){value})"
        if dtype in STORAGE_FLOATS and src_dtype not in STORAGE_FLOATS:
            name = "lg_float_to_bf16" if dtype == dtypes.bfloat16 else narrow_floats.helper_names(dtype)[1]
            return f"{name}((float)({operand}))"
        if src_dtype in STORAGE_FLOATS and dtype not in STORAGE_FLOATS:
            name = "lg_bf16_to_float" if src_dtype == dtypes.bfloat16 else narrow_floats.helper_names(src_dtype)[0]
            return f"{name}({operand})"
        return None

    def render_op(self, op: OpDef, src_dtypes: list[DType], dtype: DType, operands: list[str]) -> str:
        """An op from its template; a conversion (CAST, BITCAST) from the dialect's render_cast or
        render_bitcast. A dialect keeping float16 in float registers rounds every result float32
        may not hold exactly as a float16."""
        operand_dtype = src_dtypes[-1] if src_dtypes else dtype
        if op.converts:
            text = getattr(self, f"render_{op.name.lower()}")(src_dtypes[0], dtype, operands[0])
        else:
            text = self.fill(self.template(op, operand_dtype), operands, operand_dtype, dtype)
        if self.float16_in_registers_as_float and dtype == dtypes.float16 and not op.exact_in_half:
            return f"lg_half({text})"
        return text

    def render_cast(self, src_dtype: DType, dtype: DType, operand: str) -> str:
        text = self.render_storage_cast(src_dtype, dtype, operand)
        if text is not None:
            return text
        if src_dtype == dtypes.bool and dtype.is_float:
            # through int: gcc vectorizes that as a mask's low bit converted, where `(float)(b)`
            # stayed scalar, and keeps it branch-free in scalar code, where `b ? 1.0f : 0.0f`
            # became a branch on the data (a max pool's backward at batch 16, 3x3 windows by 2,
            # the 2 threads here: its count of maxima per window 3.9 -> 2.6 ms, `(float)(b)` 13;
            # its spread back to the input 29.7 -> 11.3 ms, the select's branches mispredicted)
            return f"(({self.type_name(dtype)})(int)({operand}))"
        return self.fill(self.template(Ops.CAST, src_dtype), [operand], src_dtype, dtype)

    def render_bitcast(self, src_dtype: DType, dtype: DType, operand: str) -> str:
        return self.fill(self.template(Ops.BITCAST, src_dtype), [operand], src_dtype, dtype)

    def render_vector_op(self, op: OpDef, src_dtypes: list[DType], dtype: DType, operands: list[str], width: int) -> str:
        """An op of `vector_ops` on vectors of `width` lanes (scalar operands already broadcast)."""
        operand_dtype = src_dtypes[-1] if src_dtypes else dtype
        return self.fill(self.vector_template(op, operand_dtype), operands, operand_dtype, dtype, width)

    def render_accumulate(self, op: OpDef, dtype: DType, accumulator: str, value: str, width: int = 1) -> str:
        """accumulator updated with value by the reduce's op (`width` lanes of a vector copy)."""
        template = self.vector_template(op, dtype) if width > 1 else self.template(op, dtype)
        return self.fill(template, [accumulator, value], dtype, dtype, width)

    def render_fma(self, dtype: DType, left: str, right: str, accumulator: str) -> str:
        """left * right + accumulator with one rounding (the dialect's fma)."""
        return f"fma({left}, {right}, {accumulator})"

    def render_identity(self, op: OpDef, dtype: DType) -> str:
        return self.render_const(reduce_identity(op, dtype), dtype)

    def render_store(self, param: str, dtype: DType, index: str, value: str) -> str:
        return f"{param}[{index}] = {value};"

    def render_statements(self, statements) -> list[str]:
        """Lines of a statement list (declarations and accumulator updates), unindented."""
        lines = []
        for statement in statements:
            declaration = f"{self.value_type_name(statement.dtype, statement.width)} " if statement.declare else ""
            lines.append(f"{declaration}{self.render_expr(statement.target)} = {self.render_expr(statement.expr)};")
        return lines

    @staticmethod
    def render_unflatten(loops, flat: str, index_type: str) -> list[str]:
        """Declarations of the variables of `loops` (the last varying fastest) recovered from one
        flat index with `/` and `%`."""
        lines = []
        inner_size = math.prod(loop.size for loop in loops)
        for number, loop in enumerate(loops):
            inner_size //= loop.size
            quotient = flat if inner_size == 1 else f"({flat} / {inner_size})"
            lines.append(f"{index_type} {loop.var} = {quotient if number == 0 else f'{quotient} % {loop.size}'};")
        return lines

    def render_group_fold(self, program, stage, last: bool, loop_index_type: str) -> tuple[list[str], list[str]]:
        """GROUP's fold of one reduce, as (lines every work-item runs, lines that finish the fold).
        Every work-item writes its partial results to local memory at its flat local id `lid` and
        waits at the barrier (so no work-item may leave before it). A group's lanes sit at
        lid-lane .. lid-lane+n-1, the lane varying fastest. After the last reduce only lane 0 folds
        them, into its own accumulator; after an earlier one (a layer norm's mean, before the sum of
        squares that reads it) every lane folds them from lane 0's slot, so each holds the same
        result. Both fold in lane order, with the same update as the reduce (a max keeps NaN)."""
        slots = math.prod(loop.size for loop in program.local_loops)
        lane, lanes = program.group_lane.var, program.group_lane.size
        everyone, folding = [], []
        for accumulator in stage.results:
            everyone.append(f"{self.local_memory_qualifier} {self.type_name(accumulator.dtype)} "
                            f"{accumulator.name}_lanes[{slots}];")
            everyone.append(f"{accumulator.name}_lanes[lid] = {accumulator.name};")
        everyone.append(f"{self.group_barrier};")
        first = "lid" if last else f"lid-{lane}"
        for accumulator in stage.results:
            update = self.render_accumulate(accumulator.op, accumulator.dtype, accumulator.name,
                                            f"{accumulator.name}_lanes[{first}+lane]")
            if not last:
                folding.append(f"{accumulator.name} = {accumulator.name}_lanes[{first}];")
            folding += [f"for ({loop_index_type} lane = 1; lane < {lanes}; lane++) {{",
                        f"  {accumulator.name} = {update};",
                        "}"]
        return everyone, folding

    def render_thread_body(self, program, loop_index_type: str) -> list[str]:
        """One output position per thread (GPU dialects): the reduce loop with its register
        accumulator, the values after it, and the stores (one per output buffer); the lines the
        caller indents into its kernel. With GROUP, every lane folds each earlier reduce's lanes and
        only lane 0 finishes the outputs."""
        lines = []
        depth = 0

        def line(text: str) -> None:
            lines.append("  " * depth + text)

        stages = program.stages
        for number, stage in enumerate(stages):  # each reduce in turn, over the same loops
            for accumulator in stage.accumulators:
                identity = self.render_identity(accumulator.op, accumulator.dtype)
                if accumulator.width > 1:
                    identity = self.render_broadcast(accumulator.dtype, accumulator.width, identity)
                line(f"{self.value_type_name(accumulator.dtype, accumulator.width)} {accumulator.name} = {identity};")
            for loop in program.reduce_loops:
                line(f"for ({loop_index_type} {loop.var} = 0; {loop.var} < {loop.size}; {loop.var}++) {{")
                depth += 1
            for text in self.render_statements(stage.inner):
                line(text)
            for _ in program.reduce_loops:
                depth -= 1
                line("}")
            for text in self.render_statements(stage.combine):
                line(text)
            if program.group_lane is not None:
                last = number == len(stages) - 1
                everyone, folding = self.render_group_fold(program, stage, last, loop_index_type)
                for text in everyone:
                    line(text)
                if last:
                    line(f"if ({program.group_lane.var} == 0) {{")
                    depth += 1
                for text in folding:
                    line(text)
            for accumulator in stage.accumulators:
                if accumulator.dtype == dtypes.float16:  # summed in float, as numpy does; rounded once at the end
                    line(f"{accumulator.name} = lg_half({accumulator.name});")
        for text in self.render_statements(program.outer):
            line(text)
        param_dtypes = {name: dtype for name, dtype, _ in program.params}
        for store in program.stores:
            index, value = store.index.render(self), self.render_expr(store.value)
            if store.width > 1:
                text = self.render_vector_store(store.param, param_dtypes[store.param], index, value, store.width)
            else:
                text = self.render_store(store.param, param_dtypes[store.param], index, value)
            line(text if store.guard is None else f"if ({self.render_expr(store.guard)}) {text}")
        if program.group_lane is not None:
            depth -= 1
            line("}")
        return lines
