"""The C dialect: a loop program becomes one C function for the CPU device.

Global loops run in parallel with OpenMP when the kernel is large (the outermost, or the outermost
few collapsed into one where the first alone splits unevenly over the threads, `parallel_loops`);
the innermost loop is left
simple (restrict pointers, no calls into libm for exp2) so the C compiler vectorizes it, and
sums, products and maxima are marked as `omp simd` reductions so they vectorize without
-ffast-math (a max through a declared reduction that keeps NaN).

Vector copies: a float32 kernel whose reduce, if any, is a sum (a register tile of a matmul or
convolution, and a bias, batch norm, clamp or gelu after it) gets linearize's vector copies
(see codegen/linearize.py), as GCC/clang vector types of the CPU's lane count (`lg_float8` on
AVX2): each tile row is written as the vector fmas it should become, so the compiler does not have
to find them by packing scalar statements (its SLP vectorizer), which took most of a tile's compile
(ResNet-18's 3x3 convolution over 64 channels at 56x56: 0.34 -> 0.11 s of gcc, and no slower). The
fma of a vector is written lane by lane with `__builtin_fmaf`, which the compiler packs into one
vector fma without an instruction-set header or builtin; loads and stores go through a vector type
aligned to its element, since a view's offset need not be a multiple of the vector. Arithmetic,
comparisons (masks of -1/0 lanes), selects, max and exp2 (`lg_exp2f8`: the scalar helper's steps
on whole vectors, bit for bit the same) are vector expressions; any other op is computed lane by
lane (`v[0]` ... `v[7]`) and gathered into a vector again.

`CRenderer(standalone=True)` renders the same loops for a C file of their own (lazygrad.export):
one thread, ISO C99 with math.h, no OpenMP, attributes or builtins, each function `static`; a
tile's multiply-adds are fused where math.h says fmaf is fast (FP_FAST_FMAF), else rounded twice;
no vector types (a GNU extension), so gcc packs a tile's copies itself there.
"""
from __future__ import annotations

import dataclasses
import functools
import math

from lazygrad.dtype import dtypes
from lazygrad.ops import OpDef, Ops
from lazygrad.renderer import narrow_floats
from lazygrad.renderer.cstyle import CStyleRenderer, define_once, exp2_helper, pick, taylor_steps
from lazygrad.renderer.loop_program import Element, LoopProgram


def _vector_exp2_helper(lanes: int) -> str:
    """lg_exp2f on a vector of float32 lanes, the same steps as the scalar helper in vector operations,
    so each lane's result is the scalar one's bit for bit: rint as the sum and difference with 1.5 *
    2^23 (exact rounding to nearest even for |x| <= 2^22, and the argument is clamped to [-150,
    134]; without -ffast-math the compiler keeps both), the powers of two from the integer lanes'
    bits (a cast between vector types of one size keeps the bits), each polynomial step's fma written
    lane by lane as a tile's are (render_vector_fma), one vector fma once compiled."""
    vector, mask = f"lg_float{lanes}", f"lg_mask{lanes}"

    def select(condition: str, chosen: str, other: str) -> str:  # lg_select's bits, which may not be defined
        return f"({vector})((({condition}) & ({mask})({chosen})) | (~({condition}) & ({mask})({other})))"

    def lane_fma(product: str, factor: str, addend: str) -> str:  # packed into one vector fma
        return f"({vector}){{{', '.join(f'__builtin_fmaf({product}[{lane}], {factor}[{lane}], {addend})' for lane in range(lanes))}}}"
    lines = [f"/* lg_exp2f{lanes}: lg_exp2f lane by lane */",
             f"static inline {vector} lg_exp2f{lanes}({vector} x) {{",
             f"  {vector} zeros = ({vector}){{0.0f}};",
             f"  {mask} zero = x < -150.0f;",
             f"  {vector} clamped = {select('x > 134.0f', 'zeros + 134.0f', select('zero', 'zeros', 'x'))};",
             f"  {vector} n = (clamped + 12582912.0f) - 12582912.0f;",
             f"  {vector} f = clamped - n;",
             f"  {vector} p = zeros + {taylor_steps(7, 'f', lane_fma)};"]
    lines += [f"  {mask} whole = __builtin_convertvector({select('n == n', 'n', 'zeros')}, {mask});",
              f"  {mask} half = whole / 2;",
              f"  {mask} low_bits = (half + 127) << 23, high_bits = (whole - half + 127) << 23;",
              f"  return {select('zero', 'zeros', f'p * ({vector})low_bits * ({vector})high_bits')};",
              "}"]
    return "\n".join(lines)


# The libm functions and macros kernels use, declared here instead of including <math.h>: parsing
# that header was a quarter of a small kernel's compile (cc1 on a one-loop kernel 52 -> 33 ms with
# gcc 12). devices/cpu.py makes a call to anything undeclared a compile error, never an int-valued guess.
MATH_DECLARATIONS = """\
float sqrtf(float); double sqrt(double); float sinf(float); double sin(double);
float fmodf(float, float); double fmod(double, double); float log2f(float); double log2(double);
double fma(double, double, double);
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")"""

# bfloat16 as bits (cstyle.CStyleRenderer.render_storage_cast), with unions.
BF16_TO_FLOAT = ("static inline float lg_bf16_to_float(unsigned short bits) "
                 "{ union { unsigned int u; float f; } value; value.u = (unsigned int)bits << 16; return value.f; }")
FLOAT_TO_BF16 = ("static inline unsigned short lg_float_to_bf16(float x) "
                 "{ union { float f; unsigned int u; } value; value.f = x; unsigned int u = value.u; "
                 "if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); "
                 "return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }")

# A reduction OpenMP knows only by its declaration here (the NaN-keeping max, `lg_max_float` below)
# over a loop of at most this many steps takes no `omp simd` pragma: gcc then combined the lanes of
# every row through the declaration, one by one. Maxes over rows of contiguous floats, 2 threads:
# 33600 rows of 16 0.50 -> 0.021 ms (a detector's softmax over 16 distances per box side), 16800 of
# 33 0.26 -> 0.14, of 60 0.2-0.37 -> 0.17. Longer rows take a row tile (opts.py), and one long
# reduce keeps the pragma: a max of 2^22 floats 0.27 ms with it, 2.0 without.
SHORT_DECLARED_REDUCTION = 64

# Each helper is emitted only when the kernel body uses it.
HELPERS = {
    "lg_bitcast": "#define lg_bitcast(T, x) ({ __typeof__(x) lg_src_ = (x); T lg_dst_; "
                  "__builtin_memcpy(&lg_dst_, &lg_src_, sizeof(lg_dst_)); lg_dst_; })",
    "lg_floordiv": "static inline long lg_floordiv(long a, long b) "
                   "{ long q = a / b; return q - ((a % b != 0) && ((a < 0) != (b < 0))); }",
    "lg_floormod": "static inline long lg_floormod(long a, long b) "
                   "{ long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }",
    "lg_exp2f": exp2_helper("float", "gnu"),
    # A max that vectorizes: each SIMD lane keeps its own maximum, NaN included, and lanes combine
    # the same way (OpenMP's built-in max reduction would drop a NaN lane).
    "reduction(lg_max_float:": "#pragma omp declare reduction(lg_max_float : float : omp_out = "
                               "((omp_in > omp_out || omp_in != omp_in) ? omp_in : omp_out)) "
                               "initializer(omp_priv = -INFINITY)",
    "reduction(lg_max_double:": "#pragma omp declare reduction(lg_max_double : double : omp_out = "
                                "((omp_in > omp_out || omp_in != omp_in) ? omp_in : omp_out)) "
                                "initializer(omp_priv = -INFINITY)",
    "lg_exp2(": exp2_helper("double", "gnu"),
    # A float MAX (and a reduce max's step) keeping a NaN of its first operand, as the op table's
    # template, written so gcc compiles it without branches (vmaxss, then a cmov for the NaN): the
    # template's `a > b || a != a` it compiled to jumps wherever the loop stayed scalar, which random
    # signs mispredict (an int8 digits CNN's 2x2 max pool of a relu, batch 200: 3.4 -> 0.66 ms).
    "lg_maxf(": "static inline float lg_maxf(float a, float b) { float m = a > b ? a : b; return a != a ? a : m; }",
    "lg_max(": "static inline double lg_max(double a, double b) { double m = a > b ? a : b; return a != a ? a : m; }",
    # A scalar WHERE of floats, bit by bit: gcc compiled `c ? a : b` of floats to a jump wherever the
    # loop stayed scalar (a tile's copies, gcc's loop vectorizer off), which a relu's random signs
    # mispredict (a max pool's backward at batch 16, 3x3 windows by 2, spread through the relu's
    # mask, 2 threads: 38 -> 18 ms). Where gcc vectorizes the loop, both forms are one blend.
    "lg_wheref(": "static inline float lg_wheref(bool c, float a, float b) { int m = -(int)c, x, y; "
                  "__builtin_memcpy(&x, &a, 4); __builtin_memcpy(&y, &b, 4); x = (x & m) | (y & ~m); "
                  "__builtin_memcpy(&a, &x, 4); return a; }",
    "lg_where(": "static inline double lg_where(bool c, double a, double b) { long long m = -(long long)c, x, y; "
                 "__builtin_memcpy(&x, &a, 8); __builtin_memcpy(&y, &b, 8); x = (x & m) | (y & ~m); "
                 "__builtin_memcpy(&a, &x, 8); return a; }",
    "lg_log2f": "static inline float lg_log2f(float x) { return log2f(x); }",
    "lg_log2(": "static inline double lg_log2(double x) { return log2(x); }",
    "lg_bf16_to_float(": BF16_TO_FLOAT,
    "lg_float_to_bf16(": FLOAT_TO_BF16,
}
# The vectors of VECTOR_DTYPES of the lane counts CPUs have (renderer/c.py CRenderer.vector_width): one
# type for values, one for memory accesses, aligned to its element; and the masks comparisons make.
def _vector_types(ctype: str, name: str, lanes: int, size: int = 4) -> str:
    mask = define_once(f"typedef int lg_mask{lanes} __attribute__((vector_size({4 * lanes})));")
    return (f"typedef {ctype} {name}{lanes} __attribute__((vector_size({size * lanes})));\n"
            f"typedef {ctype} {name}{lanes}_unaligned __attribute__((vector_size({size * lanes}), aligned({size})));\n{mask}")


HELPERS.update({f"lg_float{lanes}": _vector_types("float", "lg_float", lanes) for lanes in (4, 8, 16)})
HELPERS.update({f"lg_int{lanes}": _vector_types("int", "lg_int", lanes) for lanes in (4, 8, 16)})
HELPERS.update({f"lg_uchar{lanes}": _vector_types("unsigned char", "lg_uchar", lanes, 1) for lanes in (4, 8, 16)})
HELPERS.update({f"lg_schar{lanes}": _vector_types("signed char", "lg_schar", lanes, 1) for lanes in (4, 8, 16)})
# bools as they lie in memory, one byte each, for a vector load that widens them into a mask
HELPERS.update({f"lg_bool{lanes}_unaligned": f"typedef unsigned char lg_bool{lanes}_unaligned "
                 f"__attribute__((vector_size({lanes}), aligned(1)));" for lanes in (4, 8, 16)})
# A float read once and broadcast across a vector copy's lanes (a register tile's left operand). The
# empty asm hides where the pointer points, so gcc's SLP vectorizer does not group a tile's reads of
# such values into one vector load it then splits lane by lane: with the values 32 floats apart (a
# 1x1 convolution reading a channels-last input) it loaded a whole vector for each and broadcast its
# first lane, 138 against 84 us for the same kernel reading them 1 apart; hidden, each is an fma's
# broadcast memory operand again (84 us).
HELPERS["lg_splat_load("] = ("#define lg_splat_load(p) ({ __typeof__(p) lg_at_ = (p); __asm__(\"\" : \"+r\"(lg_at_)); "
                             "*lg_at_; })")
# AVX-512 VNNI's vpdpbusd: to each int32 lane, the four products of its four uint8 (a's bytes) by int8
# (b's bytes) (CRenderer.render_byte_dot); the 4 bytes a broadcasts are read as one unaligned int.
HELPERS["lg_byte_dot16("] = ("typedef int lg_int_unaligned __attribute__((aligned(1)));\n"
                             "#if defined(__clang__)\n#define lg_byte_dot16(acc, a, b) "
                             "((lg_int16)__builtin_ia32_vpdpbusd512((acc), (a), (b)))\n"
                             "#else\n#define lg_byte_dot16(acc, a, b) "
                             "((lg_int16)__builtin_ia32_vpdpbusd_v16si((acc), (a), (b)))\n#endif")
# A select of float vectors by a mask of -1/0 lanes, bit by bit (C's ?: takes no vector condition); gcc
# makes it one blend. A generic macro, so one definition serves every lane count.
HELPERS["lg_select("] = ("#define lg_select(mask, a, b) ((__typeof__(a))(((mask) & (__typeof__(mask))(a)) "
                         "| (~(mask) & (__typeof__(mask))(b))))")
HELPERS.update({f"lg_exp2f{lanes}(": _vector_exp2_helper(lanes) for lanes in (4, 8, 16)})
for _narrow in narrow_floats.NARROW_FLOATS:
    HELPERS.update(narrow_floats.helpers(_narrow, "c"))
HELPERS = {marker: define_once(text, marker) for marker, text in HELPERS.items()}

# The helpers of a standalone kernel (an exported file, lazygrad/export/): ISO C99 with math.h, no
# OpenMP, so no declared reductions; BITCAST is a union (CRenderer.render_bitcast). The file that holds
# the kernels includes each helper once.
# A fused multiply-add where math.h says it is fast (FP_FAST_FMAF: an FMA instruction, e.g.
# -march=native on x86-64 since Haswell), as lazygrad computes it; elsewhere fmaf is a library
# call (the digits CNN 5x slower), and a product and a sum rounded separately stand in.
STANDALONE_FMAS = {
    "lg_fmaf(": define_once("#if defined(FP_FAST_FMAF)\n#define lg_fmaf(a, b, c) fmaf(a, b, c)\n#else\n"
                      "#define lg_fmaf(a, b, c) ((a) * (b) + (c))\n#endif"),
    "lg_fma(": define_once("#if defined(FP_FAST_FMA)\n#define lg_fma(a, b, c) fma(a, b, c)\n#else\n"
                     "#define lg_fma(a, b, c) ((a) * (b) + (c))\n#endif"),
}
STANDALONE_HELPERS = {
    **STANDALONE_FMAS,
    "lg_floordiv": HELPERS["lg_floordiv"],
    "lg_floormod": HELPERS["lg_floormod"],
    # exp2's polynomial steps are lg_fmaf's (lg_fma's): each comes with its definition
    "lg_exp2f": define_once(STANDALONE_FMAS["lg_fmaf("] + "\n" + exp2_helper("float", "c99"), "lg_exp2f"),
    "lg_exp2(": define_once(STANDALONE_FMAS["lg_fma("] + "\n" + exp2_helper("double", "c99"), "lg_exp2("),
    "lg_log2f": HELPERS["lg_log2f"],
    "lg_log2(": HELPERS["lg_log2("],
    "lg_maxf(": HELPERS["lg_maxf("],
    "lg_max(": HELPERS["lg_max("],
}
STANDALONE_INCLUDES = ["#include <math.h>", "#include <stdbool.h>"]


# For kernels whose opts expand the loop body into copies (register tiles): gcc packs the copies
# into vectors itself (SLP), with 512-bit vectors where the CPU has them, so a 32 x 8 tile's
# accumulators fit in registers; and gcc 12's loop vectorizer, which miscompiles some loops that
# store several outputs computed from shared masked loads (a padded tile), stays out.
EXPANDED_BODY_ATTRIBUTE = '__attribute__((optimize("no-tree-loop-vectorize"), target("prefer-vector-width=512"))) '
# A tile with several reduce loops (a convolution: channels, then kernel rows and columns) also
# turns off gcc's predictive commoning: the innermost loop steps a window one column along, so
# each step's loads overlap the last step's, and gcc then carries the shared values over in scalar
# registers and rebuilds every vector from them instead of loading it whole (conv2d 32x16x32x32 by
# 32x16x3x3 with a 32 x 8 tile: 6.6 ms with it, 2.7 ms without).
WINDOWED_TILE_ATTRIBUTE = ('__attribute__((optimize("no-tree-loop-vectorize", "no-predictive-commoning"), '
                           'target("prefer-vector-width=512"))) ')

# Expanded copies without a reduce loop (a tile of a transposed read's lines, a vector copy) also turn
# off unroll-and-jam and predictive commoning: they have no reuse across iterations to find, and on a
# 16 x 16 tile of a batch norm's gradient they were half of gcc's time (0.58 -> 0.29 s).
EXPANDED_COPY_ATTRIBUTE = ('__attribute__((optimize("no-tree-loop-vectorize", "no-loop-unroll-and-jam", '
                           '"no-predictive-commoning"), target("prefer-vector-width=512"))) ')

# For other kernels with a load that only a WHERE's choice uses: gcc 12 turns such a load into a masked
# load (vmaskmovpd) and its SLP vectorizer can give two such loads the same mask, a wrong answer (a
# gradient through a clamped norm: test_a_masked_choice_between_loads_is_right_on_every_device); its
# loop vectorizer stays out of them, as of the tiles above. So too where a load reads through padding,
# whose masks it got wrong for some rows (linearize._has_masked_read).
MASKED_LOAD_ATTRIBUTE = '__attribute__((optimize("no-tree-loop-vectorize"))) '


# The dtypes a tile's copies are written as C vector types for (CRenderer.vector_width), with their names:
# float32 everywhere, int32 for integer products (lazygrad.quantize, ONNX's ConvInteger): as separate
# scalars gcc packed ResNet-18's int32 convolutions into vectors for some kernels only (6.4 GOP/s for
# the others, against 84 where it did); uint8 and int8 for quantized values converted to and from
# those (linearize._carried_dtypes), with as many lanes, a quarter of the bytes.
VECTOR_DTYPES = {dtypes.float32: "lg_float", dtypes.int32: "lg_int", dtypes.uint8: "lg_uchar", dtypes.int8: "lg_schar"}


def parallel_loops(loops, threads: int) -> int:
    """How many of the outermost global loops OpenMP splits over the threads, as one loop: the
    first, and the next ones while their iterations so far divide unevenly and are few (under 32
    per thread: at most 3% of the threads' time lost waiting beyond that). OpenMP's static schedule
    gives each thread one run of iterations, so 7 rows of tiles on 2 threads ran as 4 + 3: ResNet-50's
    1x1 convolutions at 14x14, 196 x 256 by 256 x 1024 as 7 x 4 rows of 7 by 32 panels of 32, kernel
    alone, 2 threads, 0.42-0.55 -> 0.37-0.39 ms collapsed with the panels' loop. The innermost
    global loop is never taken in: it may be the one the C compiler vectorizes."""
    count, iterations = 1, loops[0].size
    while count < len(loops) - 1 and iterations % threads and iterations < 32 * threads:
        iterations *= loops[count].size
        count += 1
    return count


class CRenderer(CStyleRenderer):
    """`simd_lanes` and `simd_registers`: float32 lanes per vector register and how many there are
    on the CPU compiled for (devices/cpu.py); a register tile's accumulators must fit in them. The
    defaults are an AVX-512 CPU's.

    `standalone`: kernels for a C file of their own (lazygrad/export/): ISO C99 with math.h, one
    thread (no OpenMP pragmas, no THREADS opt), no compiler-specific attributes or builtins, each a
    `static` function. The loops and their opts are the CPU device's, so the arithmetic is too."""
    supports_threads = True
    accumulator_arrays = True
    expands_tiles = True
    spills_tile_epilogue = True

    # Ops on vectors (`vector_ops`, the op table's "gnu" vector entries): C's operators act lane by lane
    # on GCC/clang vector types (a comparison gives a mask of -1/0 lanes; WHERE is a select by it,
    # lg_select).
    lanewise_ops = True  # other ops of a vector copy computed lane by lane (render_lane, render_vector)
    vector_dtypes = VECTOR_DTYPES

    def __init__(self, simd_lanes: int = 16, simd_registers: int = 32, standalone: bool = False,
                 byte_dot_lanes: int = 0, threads: int = 1):
        self.simd_lanes, self.simd_registers = simd_lanes, simd_registers
        self.threads = threads  # how many an OpenMP loop runs on without a THREADS opt (devices/cpu.py)
        # int32 lanes of one instruction adding four uint8-by-int8 products to each (AVX-512 VNNI's
        # 16; 0: none). linearize writes such sums of a tile with it (see codegen/opts.py byte_dot_tile).
        self.byte_dot_lanes = 0 if standalone else byte_dot_lanes
        self.standalone = standalone
        # the op table's templates: the device's GNU C or an exported file's ISO C, then the CPU's C
        self.dialects = ("c99" if standalone else "gnu", "cpu", "c")
        if standalone:
            self.supports_threads = False

    # ---- vectors (linearize's vector copies) ---------------------------------------------------

    def vector_width(self, dtype, size: int) -> int:
        """float32 values of an upcast axis are built as vectors of one register where the CPU's
        lanes divide the axis, else of half a register (AVX2's 4 lanes) where those do, down to 4
        lanes: MobileNetV2's depthwise rows of 28 as vectors of 4, kernel alone, 0.15-0.18 -> 0.12-0.14
        and 0.13 -> 0.08-0.09 ms, where rows of 14 as vectors of 2 ran slower than gcc's own packing. None in
        a standalone file (ISO C)."""
        if self.standalone or dtype not in VECTOR_DTYPES:
            return 1
        for lanes in (self.simd_lanes, self.simd_lanes // 2):
            if lanes >= 4 and size % lanes == 0:
                return lanes
        return 1

    def value_type_name(self, dtype, width: int = 1) -> str:
        if width == 1:
            return self.type_name(dtype)
        return f"lg_mask{width}" if dtype == dtypes.bool else f"{VECTOR_DTYPES[dtype]}{width}"

    def render_vector_load(self, param: str, dtype, index: str, width: int) -> str:
        if dtype == dtypes.bool:  # bytes of 0 or 1 widened to a mask's lanes of 0 or -1
            loaded = f"*(const lg_bool{width}_unaligned*)({param} + ({index}))"
            return f"(-__builtin_convertvector({loaded}, lg_mask{width}))"
        return f"(*(const {VECTOR_DTYPES[dtype]}{width}_unaligned*)({param} + ({index})))"

    def render_splat_load(self, param: str, dtype, index: str, valid) -> str:
        if dtype not in VECTOR_DTYPES or valid is not True:
            return self.render_load(param, dtype, index, valid)
        return f"lg_splat_load({param} + ({index}))"

    def render_vector_store(self, param: str, dtype, index: str, value: str, width: int) -> str:
        return f"*({VECTOR_DTYPES[dtype]}{width}_unaligned*)({param} + ({index})) = {value};"

    def render_vector(self, dtype, lanes: list[str]) -> str:
        """A vector of separately computed lanes (a gather); a mask's lanes are -1 (true) or 0, as a
        vector comparison gives them."""
        if dtype == dtypes.bool:
            return f"(-(lg_mask{len(lanes)}){{{', '.join(lanes)}}})"
        return f"(({VECTOR_DTYPES[dtype]}{len(lanes)}){{{', '.join(lanes)}}})"

    def render_lane(self, name: str, dtype, lane: int) -> str:
        """One lane of a vector: a mask's lane (-1 or 0) as a C truth value."""
        return f"({name}[{lane}] != 0)" if dtype == dtypes.bool else f"{name}[{lane}]"

    def render_broadcast(self, dtype, width: int, value: str) -> str:
        return self.render_vector(dtype, [value] * width)

    def computes_on_vectors(self, op: OpDef, src_dtype, dtype) -> bool:
        """The vector ops, and a CAST between vector types (not from or to a mask, whose true lanes
        are -1): __builtin_convertvector, lane by lane as C's conversion, one or two instructions
        (a quantized uint8 to float32: a widening and a conversion)."""
        if op is Ops.CAST:
            return src_dtype in VECTOR_DTYPES and dtype in VECTOR_DTYPES
        return super().computes_on_vectors(op, src_dtype, dtype)

    def render_vector_op(self, op: OpDef, src_dtypes, dtype, operands: list[str], width: int) -> str:
        assert dtype in VECTOR_DTYPES or dtype == dtypes.bool, f"{op} on {dtype.name} vectors is not rendered"
        if op is Ops.CAST:
            value, source = operands[0], src_dtypes[0]
            if source.is_float != dtype.is_float and min(source.itemsize, dtype.itemsize) < 4:
                # between float32 and a byte through int32: gcc 12 converts a float vector to bytes (or
                # back) one lane at a time, 16 scalar conversions, and through int32 in two instructions
                value = f"__builtin_convertvector({value}, lg_int{width})"
            return f"__builtin_convertvector({value}, {VECTOR_DTYPES[dtype]}{width})"
        return super().render_vector_op(op, src_dtypes, dtype, operands, width)

    def render_vector_fma(self, dtype, width: int, left: str, right: str, accumulator: str) -> str:
        lanes = [f"__builtin_fmaf({left}[{lane}], {right}[{lane}], {accumulator}[{lane}])" for lane in range(width)]
        return self.render_vector(dtype, lanes)

    def render_byte_dot(self, accumulator: str, activations: str, weights: str, width: int) -> str:
        """The accumulator (int32 lanes) plus, per lane, the dot product of the 4 uint8 at `activations`
        (an address, the same for every lane) with that lane's 4 int8 at `weights` (lane-major)."""
        assert width == self.byte_dot_lanes == 16, "AVX-512 VNNI's dot products have 16 lanes"
        broadcast = self.render_broadcast(dtypes.int32, width, f"(*(const lg_int_unaligned*)({activations}))")
        return f"lg_byte_dot16({accumulator}, {broadcast}, (*(const lg_int16_unaligned*)({weights})))"

    def render_fma(self, dtype, left: str, right: str, accumulator: str) -> str:
        if self.standalone:
            return f"{'lg_fma' if dtype == dtypes.float64 else 'lg_fmaf'}({left}, {right}, {accumulator})"
        return f"{'fma' if dtype == dtypes.float64 else '__builtin_fmaf'}({left}, {right}, {accumulator})"

    def render_bitcast(self, src_dtype, dtype, operand: str) -> str:
        if self.standalone:  # the op table's lg_bitcast is a GNU statement expression
            source = self.type_name(src_dtype)
            return f"((union {{ {source} from; {self.type_name(dtype)} to; }}){{ {operand} }}).to"
        return super().render_bitcast(src_dtype, dtype, operand)

    @staticmethod
    def simd_reduction(accumulator) -> str | None:
        """The OpenMP reduction operator that lets the compiler vectorize this accumulator's loop (the
        op table's `simd_reduction`), or None."""
        operators = accumulator.op.simd_reduction
        return pick(operators, accumulator.dtype) if operators is not None else None

    @staticmethod
    def function_attribute(program: LoopProgram) -> str:
        """gcc settings for kernels whose opts expand the loop body (none for the others)."""
        if not any(opt.op in ("UPCAST", "UNROLL") for opt in program.opts):
            return MASKED_LOAD_ATTRIBUTE if program.select_only_loads or program.masked_reads else ""
        if not program.reduce_loops:
            return EXPANDED_COPY_ATTRIBUTE
        return WINDOWED_TILE_ATTRIBUTE if len(program.reduce_loops) > 1 else EXPANDED_BODY_ATTRIBUTE

    def render_program(self, program: LoopProgram) -> str:
        """The kernel's whole source: what it needs declared (prelude), then its function."""
        function = self.render_function(program)
        return "\n".join(self.prelude(function)) + "\n\n" + function + "\n"

    def prelude(self, function: str) -> list[str]:
        """The declarations a kernel's function needs before it: the libm functions (the lazygrad
        device declares them itself; a standalone file includes math.h) and the helpers it calls."""
        if self.standalone:
            return STANDALONE_INCLUDES + [text for marker, text in STANDALONE_HELPERS.items() if marker in function]
        return [MATH_DECLARATIONS, "#include <stdbool.h>"] + [text for marker, text in HELPERS.items() if marker in function]

    def render_pieces(self, name: str, programs: list[LoopProgram]) -> str:
        """A kernel split into pieces (codegen/pieces.py) as one function named `name` that calls
        each piece's function in turn (their parameters are the kernel's, all alike)."""
        functions = [self.render_function(dataclasses.replace(program, name=f"{name}_piece{number}"), static=True)
                     for number, program in enumerate(programs)]
        params = programs[0].params
        calls = [f"  {name}_piece{number}({', '.join(param for param, _, _ in params)});" for number in range(len(programs))]
        wrapper = "\n".join([f"{'static ' if self.standalone else ''}void {name}({self.render_params(params)}) {{", *calls, "}"])
        source = "\n\n".join(functions + [wrapper])
        return "\n".join(self.prelude(source)) + "\n\n" + source + "\n"

    def render_params(self, params) -> str:
        """A kernel function's parameters: its outputs first, then its inputs (const). The device's
        bool buffers are bytes (`unsigned char`, each 0 or 1, converted to bool as read): gcc
        vectorizes no loop that reads a `_Bool` from memory (a causal mask's softmax over 8x4x128x128
        scores, 2 threads: 0.89 -> 0.10 ms); an exported file keeps `bool` in its signatures."""
        return ", ".join(f"{'' if is_output else 'const '}{self._pointee(dtype)}* restrict {name}"
                         for name, dtype, is_output in params)

    def _pointee(self, dtype) -> str:
        return "unsigned char" if dtype == dtypes.bool and not self.standalone else self.type_name(dtype)

    def render_function(self, program: LoopProgram, static: bool = False) -> str:
        """The kernel as one C function named program.name (its outputs first, then its inputs);
        `static`: local to its source (a piece of a kernel split into pieces)."""
        standalone = self.standalone
        attribute = "static " if standalone else ("static " if static else "") + self.function_attribute(program)
        lines = [f"{attribute}void {program.name}({self.render_params(program.params)}) {{"]
        depth = 1

        def line(text: str) -> None:
            lines.append("  " * depth + text)

        def openmp_pragma(text: str) -> None:
            if not standalone:  # a standalone kernel runs on one thread, compiled without OpenMP
                line(text)

        block = program.block_loop
        if block is not None:
            line(f"for (long {block.var} = 0; {block.var} < {block.size}; {block.var}++) {{")
            depth += 1
        for number, loop in enumerate(program.global_loops):
            if number == 0 and program.parallel:
                collapsed = parallel_loops(program.global_loops, program.threads or self.threads)
                openmp_pragma("#pragma omp parallel for" + (f" collapse({collapsed})" if collapsed > 1 else "")
                              + (f" num_threads({program.threads})" if program.threads else ""))
            line(f"for (long {loop.var} = 0; {loop.var} < {loop.size}; {loop.var}++) {{")
            depth += 1
        def open_loops(loops, simd_pragma: str | None = None) -> None:
            nonlocal depth
            for number, loop in enumerate(loops):
                if simd_pragma and number == len(loops) - 1:
                    openmp_pragma(simd_pragma)
                line(f"for (long {loop.var} = 0; {loop.var} < {loop.size}; {loop.var}++) {{")
                depth += 1

        def close_loops(loops) -> None:
            nonlocal depth
            for _ in loops:
                depth -= 1
                line("}")

        def statement_lines(statements) -> None:
            for text in self.render_statements(statements):
                line(text)

        param_dtypes = {name: dtype for name, dtype, _ in program.params}

        def store_text(store, width: int = 1) -> str:
            render = self.render_store if width == 1 else functools.partial(self.render_vector_store, width=width)
            text = render(store.param, param_dtypes[store.param], store.index.render(self), self.render_expr(store.value))
            return text if store.guard is None else f"if ({self.render_expr(store.guard)}) {text}"

        def accumulator_type(dtype) -> str:  # a float16 sum accumulates in float, rounded once, as numpy's
            return self.type_name(dtypes.float32 if dtype == dtypes.float16 else dtype)

        inner_loops = program.inner_loops
        if inner_loops:  # one reduce, one accumulator per inner output, kept in an L1-sized array
            first = program.accumulators[0]
            size = math.prod(loop.size for loop in inner_loops)
            line(f"{accumulator_type(first.dtype)} {first.name}[{size}];")
            line(f"for (long a = 0; a < {size}; a++) {first.name}[a] = {self.render_identity(first.op, first.dtype)};")
            open_loops(program.reduce_loops)
            open_loops(inner_loops, "#pragma omp simd" if program.vectorize else None)
            statement_lines(program.inner)
            close_loops(inner_loops)
            close_loops(program.reduce_loops)
            statement_lines(program.combine)
        for stage in ([] if inner_loops else program.stages):
            first = stage.accumulators[0]
            identity = self.render_identity(first.op, first.dtype)
            for number, accumulator in enumerate(stage.accumulators):
                initial = identity
                if block is not None and number < len(program.partial_stores):  # earlier blocks' result
                    store = program.partial_stores[number]
                    initial = f"{block.var} == 0 ? {identity} : {self.render_expr(Element(store.param, store.index))}"
                type_name = accumulator_type(first.dtype)
                if accumulator.width > 1:
                    type_name = self.value_type_name(first.dtype, accumulator.width)
                    initial = self.render_broadcast(first.dtype, accumulator.width, initial)
                line(f"{type_name} {accumulator.name} = {initial};")
            # one scalar accumulator per reduce (not a tile's several): a SIMD reduction over all of them
            single = program.vectorize and len(stage.accumulators) == stage.reduces and program.vector_width == 1
            operator = self.simd_reduction(first) if single else None
            if operator is not None and operator.startswith("lg_") \
                    and math.prod(loop.size for loop in program.reduce_loops) <= SHORT_DECLARED_REDUCTION:
                operator = None
            names = ", ".join(accumulator.name for accumulator in stage.accumulators)
            open_loops(program.reduce_loops, f"#pragma omp simd reduction({operator}:{names})" if operator else None)
            statement_lines(stage.inner)
            close_loops(program.reduce_loops)
            statement_lines(stage.combine)
        if block is not None:  # only the last block finishes the outputs
            line(f"if ({block.var} < {block.size - 1}) {{")
            for store in program.partial_stores:
                line(f"  {store_text(store)}")
            line("} else {")
            depth += 1
        open_loops(inner_loops)
        for store in program.raw_stores:
            line(store_text(store))
        statement_lines(program.outer)
        for store in program.stores:
            line(store_text(store, store.width))
        close_loops(inner_loops)
        if block is not None:
            depth -= 1
            line("}")
        close_loops(program.global_loops)
        if block is not None:
            depth -= 1
            line("}")
        lines.append("}")
        return "\n".join(lines)
