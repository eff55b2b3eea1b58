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
- Math functions are OpenCL's overloaded ones (`sin`, `fmod`, `log2`, `exp2` for float64), and a
  bitcast is `as_<type>(x)`. Shifts follow numpy for every amount (the op table's shift templates).
- Two math functions are written so that a CPU driver can vectorize them across work-items: PoCL
  3.0 links its math library as calls it never inlines, and one call in a kernel keeps the whole
  work-group loop scalar (`.exp()` over 2^24 floats took 140 ms instead of 15). `sqrt` is the
  compiler's `__builtin_sqrtf`/`__builtin_sqrt` (IEEE square root, correctly rounded: the same
  values as before), and a float32 `exp2` is `lg_exp2f`, a branch-free polynomial as on the CPU
  device (at most 3 ulp from the correctly rounded value in the normal range).
- Each work-item computes one output with its accumulator in a register (the renderer does not
  ask linearize for CPU-style accumulator arrays), or with UPCAST opts (the default for a matmul,
  opts.work_item_tile) a tile of outputs in as many registers, updated with `__builtin_fmaf`:
  OpenCL's `fma` is a library call on PoCL, which kept a 16 x 8 tile scalar (160 ms against 7 at 512).
- Vector types: the renderer has a float32 vector width (`float_vector_width`; realize builds each
  OpenCL device's renderer with the device's OpenCLDevice.float_vector_width). With a width above
  1, linearize groups the copies of a kernel's last upcast axis into vectors (its "vector copies")
  when every value is float32, every op has an "opencl" vector entry in the op table (`vector_ops`:
  its operators and ?: act lane by lane on vectors) and every store is contiguous and aligned
  along the lanes: the 16 columns of a matmul row are one `float16`. An aligned contiguous unmasked
  load is `*(__global const float16*)(data + index)`, one vector load; a masked, strided or unaligned
  load gathers its lanes, `(float16)(a, b, ...)`; a value the same in every lane stays a scalar and
  is broadcast where a vector needs it; a store is `*(__global float16*)(data + index) = value`.
  The aligned pointer is used rather than vloadN/vstoreN because PoCL 3.0 calls library functions
  for those (measured: a call per load), and the device offers the width only when buffers' base
  addresses are aligned to it. Vector fma is `lg_fma16`, the builtin lane by lane, which LLVM packs
  into one vector fma; OpenCL's `fma` on vectors is a library call on PoCL too. Kernels with other
  dtypes, math functions (exp2, sqrt, ...) or bool values (comparisons, WHERE) stay scalar. PoCL
  already vectorizes scalar elementwise kernels across work-items, and an UPCAST by the width
  measured no faster there, so the default opts add none; the matmul tile is where vectors apply
  (PoCL, AVX-512: matmul 512 4.2 -> 3.3 ms, 1024 92 -> 100 ms, see docs/architecture.md).
- Every innermost reduce loop ends with `lg_lockstep();`. It does nothing unless the device defines
  `LAZYGRAD_LOCKSTEP_REDUCES` (the OPENCL device does on CPUs); then it is a work-group barrier, which
  makes PoCL run the work-items of a group one loop step at a time, so a step is one vector
  instruction across 16 outputs instead of a scalar chain per output (matmul 512: 100 ms -> 15 ms).
  Each work-item still sums its own values in the same order, so results do not change. Every
  work-item of a group runs the same number of steps, as a barrier requires. A kernel with UPCAST
  opts has no `lg_lockstep()`: its tile is vectorized within each work-item instead.

- Work-groups (the LOCAL and GROUP opts): the work-items of one group (`LoopProgram.local_loops`)
  are all of dimension 0, whose global size is the group size, so `get_local_id(0)` is the flat id
  `lid` they are recovered from; the global loops then take dimensions 1 and 2 (more than two share
  dimension 2). A GROUP's lanes fold through a `__local` array after a
  `barrier(CLK_LOCAL_MEM_FENCE)` (CStyleRenderer.render_group_fold). The global size is always a
  multiple of the group, so every work-item exists and reaches the barrier.

The first line of every kernel says how to launch it, `// launch: global=<dim0>,<dim1>,...`, with
` local=<dim0>,<dim1>,...` when the kernel has work-groups; the OPENCL device reads it, so the
renderer alone decides which loop maps to which dimension (without a local size the device
chooses the work-group size).
"""
from __future__ import annotations

import math

import numpy as np

from lazygrad.dtype import STORAGE_WIDE, DType, dtypes
from lazygrad.ops import OpDef, Ops
from lazygrad.renderer import narrow_floats
from lazygrad.renderer.cstyle import CStyleRenderer, define_once, exp2_helper
from lazygrad.renderer.loop_program import Loop, LoopProgram


def lane_names(width: int) -> list[str]:
    """OpenCL's component names of a vector: s0 .. s9, sa .. sf."""
    return [f"s{lane:x}" for lane in range(width)]


def render_vector_fma_helper(width: int) -> str:
    """lg_fma<width>: fma of float vectors lane by lane with the compiler's builtin, which LLVM packs
    into one vector fma; OpenCL's `fma` on vectors is a library call on PoCL 3.0 (see the module
    docstring)."""
    lanes = ", ".join(f"__builtin_fmaf(a.{lane}, b.{lane}, c.{lane})" for lane in lane_names(width))
    vector = f"float{width}"
    return f"{vector} lg_fma{width}({vector} a, {vector} b, {vector} c) {{ return ({vector})({lanes}); }}"


LOCKSTEP_HELPER = ("#ifdef LAZYGRAD_LOCKSTEP_REDUCES\n#define lg_lockstep() barrier(CLK_LOCAL_MEM_FENCE)\n"
                   "#else\n#define lg_lockstep()\n#endif")

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
    "lg_exp2f(": exp2_helper("float", "opencl"),
    "lg_lockstep(": LOCKSTEP_HELPER,
    "lg_log2(": "#define lg_log2(x) log2(x)",
    "lg_bf16_to_float(": "float lg_bf16_to_float(ushort bits) { return as_float((uint)bits << 16); }",
    "lg_float_to_bf16(": "ushort lg_float_to_bf16(float x) { uint u = as_uint(x); "
                         "if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u); "
                         "return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }",
}

MAX_DIMENSIONS = 3

# OpenCL vector lengths the renderer builds (3 is left out: a float3 occupies four floats in memory).
VECTOR_WIDTHS = (2, 4, 8, 16)
HELPERS.update({f"lg_fma{width}(": render_vector_fma_helper(width) for width in VECTOR_WIDTHS})
for _narrow in narrow_floats.NARROW_FLOATS:
    HELPERS.update(narrow_floats.helpers(_narrow, "opencl"))
# guarded: the OPENCL device builds several kernels' sources as one program (devices/opencl.py)
HELPERS = {marker: define_once(text, marker) for marker, text in HELPERS.items()}

def indentation(text: str) -> str:
    return text[:len(text) - len(text.lstrip())]


def loop_ends(body: list[str], var: str) -> list[int]:
    """The indices of the closing braces of the `for` loops over `var` in a thread body, whose lines
    are indented two spaces per level: each is the first line after its header at the header's
    indentation."""
    ends = []
    for header, text in enumerate(body):
        if not (text.lstrip().startswith("for (") and f" {var} = 0;" in text):
            continue
        closing = indentation(text) + "}"
        ends.append(next(number for number in range(header + 1, len(body)) if body[number] == closing))
    return ends


def launch_line(global_size: list[int], local_size: int | None) -> str:
    """`// launch: global=...`, and ` local=...` when the kernel's work-group (of `local_size`
    work-items, all along dimension 0) is prescribed."""
    if local_size is None:
        return f"// launch: global={','.join(str(size) for size in global_size or [1])}"
    sizes = [local_size] + global_size
    local = [local_size] + [1] * len(global_size)
    return f"// launch: global={','.join(map(str, sizes))} local={','.join(map(str, local))}"


class OpenCLRenderer(CStyleRenderer):
    dialects = ("opencl", "c")
    # Types of values in registers.
    type_names = {dtypes.bool: "bool", dtypes.uint8: "uchar", dtypes.int8: "char", dtypes.int16: "short",
                  dtypes.uint16: "ushort", dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long",
                  dtypes.uint64: "ulong", dtypes.float16: "float", dtypes.bfloat16: "ushort",
                  dtypes.float8_e4m3fn: "uchar", dtypes.float8_e5m2: "uchar", dtypes.float8_e4m3fnuz: "uchar",
                  dtypes.float8_e5m2fnuz: "uchar", dtypes.float8_e8m0fnu: "uchar", dtypes.float4_e2m1fn: "uchar",
                  dtypes.int4: "uchar", dtypes.uint4: "uchar",
                  dtypes.float32: "float", dtypes.float64: "double"}
    # Types of buffer elements in memory, where they differ from the register type.
    storage_names = {dtypes.bool: "uchar", dtypes.float16: "half"}

    float16_in_registers_as_float = True
    supports_local = True
    local_memory_qualifier = "__local"
    group_barrier = "barrier(CLK_LOCAL_MEM_FENCE)"

    def __init__(self, float_vector_width: int = 1):
        """`float_vector_width`: lanes of the float32 vectors to build (1: scalar code only)."""
        if float_vector_width not in (1,) + VECTOR_WIDTHS:
            raise ValueError(f"OpenCLRenderer: float_vector_width must be one of 1, "
                             f"{', '.join(map(str, VECTOR_WIDTHS))}; got {float_vector_width}")
        self.float_vector_width = float_vector_width

    def storage_name(self, dtype: DType) -> str:
        return self.storage_names.get(dtype, self.type_name(dtype))

    # ---- vectors (linearize's vector copies) ---------------------------------------------------

    def vector_width(self, dtype: DType, size: int) -> int:
        """float32 values of an upcast axis are built as vectors of the device's width, halved until
        it divides the axis; other dtypes stay scalar."""
        width = self.float_vector_width if dtype == dtypes.float32 else 1
        while size % width:  # widths are powers of two
            width //= 2
        return width

    def render_vector_load(self, param: str, dtype: DType, index: str, width: int) -> str:
        """An aligned vector read through a vector pointer: one load instruction. vloadN would say
        the same without the alignment, but PoCL 3.0 calls a library function for it."""
        return f"(*(__global const {self.value_type_name(dtype, width)}*)({param} + ({index})))"

    def render_vector_store(self, param: str, dtype: DType, index: str, value: str, width: int) -> str:
        return f"*(__global {self.value_type_name(dtype, width)}*)({param} + ({index})) = {value};"

    def render_vector(self, dtype: DType, lanes: list[str]) -> str:
        """A vector of separately computed lanes (a gather)."""
        return f"(({self.value_type_name(dtype, len(lanes))})({', '.join(lanes)}))"

    def render_broadcast(self, dtype: DType, width: int, value: str) -> str:
        return f"(({self.value_type_name(dtype, width)})({value}))"

    def render_lane(self, name: str, dtype: DType, lane: int) -> str:
        """One lane of a vector (a reduce's result stored lane by lane)."""
        return f"{name}.{lane_names(lane + 1)[lane]}"

    def render_vector_op(self, op: OpDef, src_dtypes: list[DType], dtype: DType, operands: list[str], width: int) -> str:
        assert dtype == dtypes.float32, f"{op} on {dtype.name} vectors is not rendered"
        return super().render_vector_op(op, src_dtypes, dtype, operands, width)

    def render_vector_fma(self, dtype: DType, width: int, left: str, right: str, accumulator: str) -> str:
        return f"lg_fma{width}({left}, {right}, {accumulator})"

    # ---- expressions --------------------------------------------------------------------------

    def render_const(self, value, dtype: DType) -> str:
        if dtype == dtypes.int64 and value != np.iinfo(np.int64).min:
            return f"{int(value)}L"
        if dtype == dtypes.uint64:  # OpenCL C's long is 64 bits and has no long long
            return f"{int(value)}ul"
        return super().render_const(value, dtype)

    def half_load(self, param: str, index: str) -> str:
        return f"vload_half({index}, {param})"

    def math_suffix(self, dtype: DType) -> str:
        return ""  # OpenCL's math functions are overloaded: sin, fmod and log2 take float and double

    def render_cast(self, src_dtype: DType, dtype: DType, operand: str) -> str:
        if src_dtype in STORAGE_WIDE or dtype in STORAGE_WIDE:
            return self.render_storage_cast(src_dtype, dtype, operand)
        if dtype == dtypes.float16:
            return f"lg_half_from_double({operand})" if src_dtype == dtypes.float64 else f"lg_half((float)({operand}))"
        return self.fill(self.template(Ops.CAST, src_dtype), [operand], src_dtype, dtype)

    def render_fma(self, dtype: DType, left: str, right: str, accumulator: str) -> str:
        """The compiler's fused multiply-add (one rounding, as OpenCL's `fma`), not a library call
        (see the module docstring)."""
        builtin = "__builtin_fma" if dtype == dtypes.float64 else "__builtin_fmaf"
        return f"{builtin}({left}, {right}, {accumulator})"

    def render_bitcast(self, source: DType, target: DType, operand: str) -> str:
        if source.is_bool or target.is_bool:  # one byte either way; OpenCL has no as_bool
            return f"(({self.type_name(target)})({operand}))"
        if source == dtypes.float16:
            bits = f"lg_half_bits({operand})"
            return bits if target == dtypes.float16 else f"as_{self.type_name(target)}({bits})"
        if target == dtypes.float16:
            return f"lg_half_from_bits(as_ushort({operand}))"
        return f"as_{self.type_name(target)}({operand})"

    def render_store(self, param: str, dtype: DType, index: str, value: str) -> str:
        if dtype == dtypes.float16:
            return f"vstore_half_rte({value}, {index}, {param});"
        return f"{param}[{index}] = {value};"

    # ---- the kernel ---------------------------------------------------------------------------

    @staticmethod
    def global_dimensions(loops: list[Loop], dimensions: int = MAX_DIMENSIONS) -> list[list[Loop]]:
        """The global loops of each of `dimensions` work-item dimensions, the first one the innermost
        loop; when there are more loops than dimensions, the outer loops share the last one."""
        if len(loops) <= dimensions:
            return [[loop] for loop in reversed(loops)]
        shared = len(loops) - dimensions + 1
        return [[loop] for loop in reversed(loops[shared:])] + [loops[:shared]]

    @staticmethod
    def vectorized_in_work_item(program: LoopProgram) -> bool:
        """Whether each work-item computes an upcast tile, whose straight-line copies the driver packs
        into vector instructions within the work-item; lockstep across work-items would only keep
        the tile's accumulators in memory between steps (matmul 512 with 16 x 4: 25 ms against 8)."""
        return any(opt.op == "UPCAST" for opt in program.opts)

    @staticmethod
    def add_lockstep(body: list[str], program: LoopProgram) -> list[str]:
        """The thread body with `lg_lockstep();` as the last statement of the innermost reduce loop,
        in each place that loop is rendered (a kernel with several reduces runs the loops once per
        reduce); unchanged when no reduce loop was rendered."""
        if not program.reduce_loops:
            return body
        body = list(body)
        for end in reversed(loop_ends(body, program.reduce_loops[-1].var)):
            body.insert(end, body[end][:-1] + "  lg_lockstep();")
        return body

    def render_program(self, program: LoopProgram) -> str:
        params = []
        for name, dtype, is_output in program.params:
            qualifier = "" if is_output else "const "
            params.append(f"__global {qualifier}{self.storage_name(dtype)}* restrict {name}")
        lines = [f"__kernel void {program.name}({', '.join(params)}) {{"]

        def line(text: str) -> None:
            lines.append("  " + text)

        local_size = None
        first_global_dimension = 0
        if program.local_loops:  # the work-group is dimension 0
            local_size = math.prod(loop.size for loop in program.local_loops)
            line("long lid = get_local_id(0);")
            for text in self.render_unflatten(program.local_loops, "lid", "long"):
                line(text)
            first_global_dimension = 1
        dimensions = self.global_dimensions(program.global_loops, MAX_DIMENSIONS - first_global_dimension)
        global_size = [math.prod(loop.size for loop in loops) for loops in dimensions]
        for dimension, loops in enumerate(dimensions, start=first_global_dimension):
            if len(loops) == 1:
                line(f"long {loops[0].var} = get_global_id({dimension});")
                continue
            line(f"long gid{dimension} = get_global_id({dimension});")
            for text in self.render_unflatten(loops, f"gid{dimension}", "long"):
                line(text)
        body = self.render_thread_body(program, "long")
        if not self.vectorized_in_work_item(program):
            body = self.add_lockstep(body, program)
        for text in body:
            line(text)
        lines.append("}")
        body = "\n".join(lines)
        helpers = [text for marker, text in HELPERS.items() if marker in body]
        header = [launch_line(global_size, local_size)]
        if "double" in body or any("double" in text for text in helpers):
            header.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        return "\n".join(header + helpers) + "\n\n" + body + "\n"
