"""The OpenCL dialect: a loop program becomes one `__kernel` for the OPENCL device.

Expression syntax comes from CStyleRenderer and the op table; this file supplies what differs:

- Global loops become work-items: the innermost global loop is `get_global_id(0)`, the next one
  dimension 1, the next dimension 2; with more than three global loops the outer ones share
  dimension 2 and each variable is recovered with `/` and `%`. Reduce loops stay plain `for`
  loops with the accumulator in a register.
- Type names are OpenCL's (`uchar`, `char`, `short`, `long`). Kernel arguments may not point to
  `bool`, so bool buffers are `uchar` in memory and `bool` in registers.
- float16 is `half` in memory, read with `vload_half` and written with `vstore_half_rte`, which are
  core OpenCL and need no extension (PoCL on a CPU has no `cl_khr_fp16`). In registers a float16
  value is a `float` rounded to half after every op (`lg_half`), exactly as numpy computes float16;
  a float16 sum or product accumulates in float and is rounded once at the end, as numpy's are.
- Math functions are OpenCL's overloaded ones (`sqrt`, `sin`, `fmod`, `exp2`, `log2`), and a
  bitcast is `as_<type>(x)`. Shifts follow numpy for every amount (`SHIFT_TEMPLATES`).
- Each work-item computes one output with its accumulator in a register (the renderer does not
  ask linearize for CPU-style accumulator arrays).

The first line of every kernel says how to launch it, `// launch: global=<dim0>,<dim1>,...`; the
OPENCL device reads it, so the renderer alone decides which loop maps to which dimension.
"""
from __future__ import annotations

import math

import numpy as np

from lazygrad.dtype import DType, dtypes
from lazygrad.renderer.cstyle import CStyleRenderer
from lazygrad.renderer.linearize import Loop, LoopProgram

# Each helper is emitted only when the kernel uses it (the key is looked for in the kernel text).
HELPERS = {
    "lg_half(": "float lg_half(float x) { ushort bits; vstore_half_rte(x, 0, (__private half*)&bits); "
                "return vload_half(0, (__private half*)&bits); }",
    "lg_half_from_double(": "float lg_half_from_double(double x) { ushort bits; "
                            "vstore_half_rte(x, 0, (__private half*)&bits); "
                            "return vload_half(0, (__private half*)&bits); }",
    "lg_half_bits(": "ushort lg_half_bits(float x) { ushort bits; vstore_half_rte(x, 0, (__private half*)&bits); "
                     "return bits; }",
    "lg_half_from_bits(": "float lg_half_from_bits(ushort bits) { return vload_half(0, (__private half*)&bits); }",
    "lg_floordiv(": "long lg_floordiv(long a, long b) "
                    "{ long q = a / b; return q - ((a % b != 0) && ((a < 0) != (b < 0))); }",
    "lg_floormod(": "long lg_floormod(long a, long b) "
                    "{ long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }",
    "lg_exp2(": "#define lg_exp2(x) exp2(x)",
    "lg_log2(": "#define lg_log2(x) log2(x)",
}

# float16 ops whose float result is already a float16 value, so it needs no rounding.
EXACT_IN_HALF = {"NEG", "MAX", "WHERE", "MOD", "CAST", "BITCAST"}

MAX_DIMENSIONS = 3

# Shifts as numpy defines them for every amount: by a negative amount or by the (promoted) width
# or more, a left shift gives 0 and a right shift the sign fill. The op table's C template checks
# the width only, and OpenCL takes a negative amount modulo the width, so both are checked here.
SHIFT_TEMPLATES = {
    "SHL": "(({1})<0 || ({1})>={bits} ? 0 : {0}<<({1}))",
    "SHR": "({0}>>(({1})<0 || ({1})>={bits} ? {top} : ({1})))",
}


def render_shift(op: str, operand_dtype: DType, operands: list[str]) -> str:
    bits = 64 if operand_dtype.itemsize == 8 else 32  # narrower integers are promoted to int
    return SHIFT_TEMPLATES[op].format(*operands, bits=bits, top=bits - 1)


class OpenCLRenderer(CStyleRenderer):
    dialect = "opencl"
    # Types of values in registers.
    type_names = {dtypes.bool: "bool", dtypes.uint8: "uchar", dtypes.int8: "char", dtypes.int16: "short",
                  dtypes.int32: "int", dtypes.int64: "long", dtypes.float16: "float",
                  dtypes.float32: "float", dtypes.float64: "double"}
    # Types of buffer elements in memory, where they differ from the register type.
    storage_names = {dtypes.bool: "uchar", dtypes.float16: "half"}

    float16_in_registers_as_float = True

    def storage_name(self, dtype: DType) -> str:
        return self.storage_names.get(dtype, self.type_name(dtype))

    # ---- expressions --------------------------------------------------------------------------

    def render_const(self, value, dtype: DType) -> str:
        if dtype == dtypes.int64 and value != np.iinfo(np.int64).min:
            return f"{int(value)}L"
        return super().render_const(value, dtype)

    def half_load(self, param: str, index: str) -> str:
        return f"vload_half({index}, {param})"

    def render_op(self, op: str, src_dtypes: list[DType], dtype: DType, operands: list[str]) -> str:
        if op == "BITCAST":
            return self.render_bitcast(src_dtypes[0], dtype, operands[0])
        if op == "CAST" and dtype == dtypes.float16:
            if src_dtypes[0] == dtypes.float64:
                return f"lg_half_from_double({operands[0]})"
            return f"lg_half((float)({operands[0]}))"
        operand_dtype = src_dtypes[-1] if src_dtypes else dtype
        if op in SHIFT_TEMPLATES:
            return render_shift(op, src_dtypes[0], operands)
        text = self.template(op, operand_dtype).format(*operands, f="", ctype=self.type_name(dtype))
        if dtype == dtypes.float16 and op not in EXACT_IN_HALF:
            return f"lg_half({text})"
        return text

    def render_bitcast(self, source: DType, target: DType, operand: str) -> str:
        if source.is_bool or target.is_bool:  # one byte either way; OpenCL has no as_bool
            return f"(({self.type_name(target)})({operand}))"
        if source == dtypes.float16:
            bits = f"lg_half_bits({operand})"
            return bits if target == dtypes.float16 else f"as_{self.type_name(target)}({bits})"
        if target == dtypes.float16:
            return f"lg_half_from_bits(as_ushort({operand}))"
        return f"as_{self.type_name(target)}({operand})"

    def render_accumulate(self, op: str, dtype: DType, accumulator: str, value: str) -> str:
        # A float16 accumulator stays a float until the loop ends, as numpy sums float16.
        return self.template(op, dtype).format(accumulator, value, f="", ctype=self.type_name(dtype))

    def render_store(self, param: str, dtype: DType, index: str, value: str) -> str:
        if dtype == dtypes.float16:
            return f"vstore_half_rte({value}, {index}, {param});"
        return f"{param}[{index}] = {value};"

    # ---- the kernel ---------------------------------------------------------------------------

    @staticmethod
    def global_dimensions(loops: list[Loop]) -> list[list[Loop]]:
        """The global loops of each work-item dimension, dimension 0 first (the innermost loop)."""
        if len(loops) <= MAX_DIMENSIONS:
            return [[loop] for loop in reversed(loops)]
        return [[loops[-1]], [loops[-2]], loops[:-2]]

    def render_program(self, program: LoopProgram) -> str:
        params = []
        for name, dtype, is_output in program.params:
            qualifier = "" if is_output else "const "
            params.append(f"__global {qualifier}{self.storage_name(dtype)}* restrict {name}")
        dimensions = self.global_dimensions(program.global_loops)
        global_size = [math.prod(loop.size for loop in loops) for loops in dimensions] or [1]
        lines = [f"__kernel void {program.name}({', '.join(params)}) {{"]

        def line(text: str) -> None:
            lines.append("  " + text)

        for dimension, loops in enumerate(dimensions):
            if len(loops) == 1:
                line(f"long {loops[0].var} = get_global_id({dimension});")
                continue
            line(f"long gid{dimension} = get_global_id({dimension});")
            inner_size = math.prod(loop.size for loop in loops)
            for number, loop in enumerate(loops):
                inner_size //= loop.size
                quotient = f"gid{dimension}" if inner_size == 1 else f"(gid{dimension} / {inner_size})"
                line(f"long {loop.var} = {quotient if number == 0 else f'{quotient} % {loop.size}'};")
        for text in self.render_thread_body(program, "long"):
            line(text)
        lines.append("}")
        body = "\n".join(lines)
        helpers = [text for marker, text in HELPERS.items() if marker in body]
        header = [f"// launch: global={','.join(str(size) for size in global_size)}"]
        if "double" in body or any("double" in text for text in helpers):
            header.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        return "\n".join(header + helpers) + "\n\n" + body + "\n"
