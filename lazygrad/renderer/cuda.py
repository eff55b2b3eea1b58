"""The CUDA dialect: a loop program becomes one `extern "C" __global__` function for the CUDA device.

Expression syntax comes from CStyleRenderer and the op table; this file supplies what differs:

- The global loops become one flat 1-D launch over the product of their sizes, `BLOCK` threads per
  block: each thread computes `gid`, returns when `gid` is past the end, and recovers every loop
  variable from `gid` with `/` and `%`. Reduce loops stay plain `for` loops with the accumulator in
  a register.
- float16 is `__half` in memory (`#include <cuda_fp16.h>`, only when used). In registers it is a
  `float` rounded to half after every op (`lg_half`), which is what numpy computes and avoids the
  overload ambiguities of `__half` arithmetic with ints; a float16 sum or product accumulates in
  float and is rounded once at the end, as numpy's are.
- Math helpers in CUDA syntax; a bitcast copies the bytes (`lg_bitcast(T, x)`, a template around
  memcpy that the compiler turns into a register move, like `__float_as_int`). Shifts and
  accumulator arrays are handled as in the OpenCL dialect (renderer/opencl.py).

- Work-groups (the LOCAL and GROUP opts) are blocks: a kernel with `LoopProgram.local_loops`
  launches one block per position of the global loops (recovered from `blockIdx.x`) and one thread
  per work-item of the group (recovered from `threadIdx.x`, the flat id `lid`). The launch covers
  the loops exactly, so there is no bounds check and no early return: every thread reaches the
  `__syncthreads()` of a GROUP's fold through `__shared__` memory (CStyleRenderer.render_group_fold).

The first line says how to launch the kernel, `// launch: grid=<blocks> block=<threads>`; the CUDA
device reads it. `compile_to_ptx` in devices/cuda.py compiles this source without a GPU.
"""
from __future__ import annotations

import math

from lazygrad.dtype import STORAGE_WIDE, DType, dtypes
from lazygrad.renderer import narrow_floats
from lazygrad.renderer.cstyle import CStyleRenderer
from lazygrad.renderer.loop_program import LoopProgram

BLOCK = 256

# Each helper is emitted only when the kernel uses it (the key is looked for in the kernel text).
HELPERS = {
    "INFINITY": "#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif",
    "NAN": "#ifndef NAN\n#define NAN __int_as_float(0x7fffffff)\n#endif",
    "lg_half(": "__device__ inline float lg_half(float x) { return __half2float(__float2half_rn(x)); }",
    "lg_half_from_double(": "__device__ inline float lg_half_from_double(double x) "
                            "{ return __half2float(__double2half(x)); }",
    "lg_bitcast": "template <typename T, typename F> __device__ inline T lg_bitcast_(F x) "
                  "{ static_assert(sizeof(T) == sizeof(F), \"bitcast needs equal sizes\"); "
                  "T y; memcpy(&y, &x, sizeof(T)); return y; }\n"
                  "#define lg_bitcast(T, x) lg_bitcast_<T>(x)",
    "lg_floordiv(": "__device__ inline long long lg_floordiv(long long a, long long b) "
                    "{ long long q = a / b; return q - ((a % b != 0) && ((a < 0) != (b < 0))); }",
    "lg_floormod(": "__device__ inline long long lg_floormod(long long a, long long b) "
                    "{ long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }",
    "lg_exp2f(": "__device__ inline float lg_exp2f(float x) { return exp2f(x); }",
    "lg_exp2(": "__device__ inline double lg_exp2(double x) { return exp2(x); }",
    "lg_log2f(": "__device__ inline float lg_log2f(float x) { return log2f(x); }",
    "lg_log2(": "__device__ inline double lg_log2(double x) { return log2(x); }",
    "lg_bf16_to_float(": "__device__ inline float lg_bf16_to_float(unsigned short bits) "
                         "{ return __uint_as_float((unsigned int)bits << 16); }",
    "lg_float_to_bf16(": "__device__ inline unsigned short lg_float_to_bf16(float x) { unsigned int u = __float_as_uint(x); "
                         "if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); "
                         "return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }",
}

for _narrow in narrow_floats.NARROW_FLOATS:
    HELPERS.update(narrow_floats.helpers(_narrow, "cuda"))


class CUDARenderer(CStyleRenderer):
    dialects = ("cuda", "c")
    # Types of values in registers (the rest are the C names).
    type_names = {dtypes.float16: "float"}
    # Types of buffer elements in memory, where they differ from the register type.
    storage_names = {dtypes.float16: "__half"}

    float16_in_registers_as_float = True
    supports_local = True
    local_memory_qualifier = "__shared__"
    group_barrier = "__syncthreads()"
    # lanes of a long reduce (opts.py _lane_axis): one warp
    reduce_lanes = 32
    # work-items a kernel's grid should keep (opts.py spread_tile): about 750 per SM of an H200
    target_work_items = 100_000

    def storage_name(self, dtype: DType) -> str:
        return self.storage_names.get(dtype, self.type_name(dtype))

    # ---- expressions --------------------------------------------------------------------------

    def half_load(self, param: str, index: str) -> str:
        return f"__half2float({param}[{index}])"

    def render_bitcast(self, src_dtype: DType, dtype: DType, operand: str) -> str:
        if dtypes.float16 not in (src_dtype, dtype):
            return super().render_bitcast(src_dtype, dtype, operand)
        if src_dtype == dtype:
            return operand
        if src_dtype == dtypes.float16:
            return f"lg_bitcast({self.type_name(dtype)}, __float2half_rn({operand}))"
        return f"__half2float(lg_bitcast(__half, {operand}))"

    def render_cast(self, src_dtype: DType, dtype: DType, operand: str) -> str:
        if dtype == dtypes.float16 and src_dtype not in STORAGE_WIDE:  # int4 and uint4: render_storage_cast reads the nibble
            return f"lg_half_from_double({operand})" if src_dtype == dtypes.float64 else f"lg_half((float)({operand}))"
        return super().render_cast(src_dtype, dtype, operand)

    def render_store(self, param: str, dtype: DType, index: str, value: str) -> str:
        if dtype == dtypes.float16:
            return f"{param}[{index}] = __float2half_rn({value});"
        return f"{param}[{index}] = {value};"

    # ---- the kernel ---------------------------------------------------------------------------

    def render_parts(self, program: LoopProgram) -> tuple[str, list[str], str]:
        """(launch line, helpers and includes, kernel function): render_program joins them.

        Helpers are the same text in every kernel, so several kernels can share one file."""
        params = []
        for name, dtype, is_output in program.params:
            qualifier = "" if is_output else "const "
            params.append(f"{qualifier}{self.storage_name(dtype)}* __restrict__ {name}")
        total = math.prod(loop.size for loop in program.global_loops)
        lines = [f'extern "C" __global__ void {program.name}({", ".join(params)}) {{']

        def line(text: str) -> None:
            lines.append("  " + text)

        if program.local_loops:  # a block per group, a thread per work-item of the group
            block = math.prod(loop.size for loop in program.local_loops)
            grid = total
            line("long long group = blockIdx.x;")
            line("long long lid = threadIdx.x;")
            for text in self.render_unflatten(program.local_loops, "lid", "long long"):
                line(text)
            for text in self.render_unflatten(program.global_loops, "group", "long long"):
                line(text)
        else:  # a flat launch, BLOCK threads per block, the last block partly idle
            block = min(BLOCK, total)
            grid = -(-total // block)
            line("long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x;")
            line(f"if (gid >= {total}) return;")
            for text in self.render_unflatten(program.global_loops, "gid", "long long"):
                line(text)
        for text in self.render_thread_body(program, "long long"):
            line(text)
        lines.append("}")
        body = "\n".join(lines)
        helpers = [text for marker, text in HELPERS.items() if marker in body]
        if "half" in body:
            helpers.insert(0, "#include <cuda_fp16.h>")
        launch = f"// launch: grid={grid} block={block}"
        return launch, helpers, body

    def render_program(self, program: LoopProgram) -> str:
        launch, helpers, body = self.render_parts(program)
        return "\n".join([launch] + helpers) + "\n\n" + body + "\n"
