"""Conversions between float32 and the 8- and 4-bit float formats (float8_e4m3fn, float8_e5m2 and their
fnuz variants, which have no negative zero and one NaN, 0x80, for infinities too; float8_e8m0fnu,
powers of two alone; float4_e2m1fn, one code per byte), as C-family helper functions for every
dialect; the renderers emit them where a kernel casts (cstyle.py).

Like bfloat16, these are storage dtypes: the front end converts them to float32 before any op and
back after (Tensor._apply), so a kernel only loads, stores and converts them. A format's 256 codes
decode through a table of their values. Encoding finds the nearest value by a binary search over the
non-negative codes, ties to the even code (round to nearest even, as the code's last bit is the
mantissa's), with the first code past the largest finite value standing for the next power of the
format's spacing, so a value that rounds beyond the largest becomes that code: NaN in e4m3fn and the
fnuz formats, which have no infinity, and infinity in e5m2; exactly as ml_dtypes converts (test/ops/test_narrow_floats.py
compares every float32 of the formats' range).
"""
from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from lazygrad.dtype import DType, dtypes


def _float_literal(value: float) -> str:
    if np.isnan(value):
        return "NAN"
    if np.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    return repr(float(value)) + "f"


@functools.lru_cache(maxsize=None)
def _format(dtype: DType) -> tuple[list[int], list[float], int, tuple[int, int], int, bool]:
    """(the float32 bits of every code's value, the non-negative codes' values up to the largest finite
    one and, unless the format saturates, one more step standing for the value past it, the code
    returned beyond the last step, the codes of NaN and of -NaN (float4_e2m1fn has none: ml_dtypes
    gives NaN the code of -0 and -NaN that of 0), the sign bit, whether the format saturates (float4_e2m1fn: no infinity or
    NaN, so anything beyond its largest value becomes that value)."""
    sign = 0x8 if dtype == dtypes.float4_e2m1fn else 0x80
    codes = 2 * sign
    values = np.arange(codes, dtype=np.uint8).view(dtype.np).astype(np.float32)
    largest = float(ml_dtypes.finfo(dtype.np).max)
    largest_code = int(np.array(largest, np.float32).astype(dtype.np).view(np.uint8))
    nan = tuple(int(np.array(value, np.float32).astype(dtype.np).view(np.uint8)) for value in (np.nan, -np.nan))
    saturates = dtype == dtypes.float4_e2m1fn
    steps = values[:largest_code + 1].astype(np.float64).tolist()
    if saturates:
        return values.view(np.uint32).tolist(), steps, largest_code, nan, sign, True
    steps.append(largest + (largest - steps[-2]))  # the value the overflow code stands for when rounding
    return values.view(np.uint32).tolist(), steps, largest_code + 1, nan, sign, False


def helper_names(dtype: DType) -> tuple[str, str]:
    """(decode, encode) function names: lg_float8_e4m3fn_to_float, lg_float_to_float8_e4m3fn."""
    return f"lg_{dtype.name}_to_float", f"lg_float_to_{dtype.name}"


def helpers(dtype: DType, dialect: str) -> dict[str, str]:
    """The two conversion functions of `dtype` in a dialect ("c", "opencl", "cuda"), by the marker a
    kernel's text contains when it calls them."""
    decode, encode = helper_names(dtype)
    byte = {"c": "unsigned char", "opencl": "uchar", "cuda": "unsigned char"}[dialect]
    table_qualifier = {"c": "static const", "opencl": "__constant", "cuda": "__device__ static const"}[dialect]
    function_qualifier = {"c": "static inline", "opencl": "", "cuda": "__device__ inline"}[dialect]
    # gcc's builtins in C: its kernels declare the math they call instead of including math.h
    sign_bit = {"c": "__builtin_signbit(x)", "opencl": "signbit(x)", "cuda": "signbit(x)"}[dialect]
    absolute = {"c": "__builtin_fabsf(x)", "opencl": "fabs(x)", "cuda": "fabsf(x)"}[dialect]
    # the decoded values as float32 bits: NaN is no constant an OpenCL table initializer takes
    as_float = {"c": "lg_bits_to_float", "opencl": "as_float", "cuda": "__uint_as_float"}[dialect]
    as_bits = {"c": "lg_float_to_bits", "opencl": "as_uint", "cuda": "__float_as_uint"}[dialect]
    # C's bit casts, guarded on their own: every format's helpers bring them
    bit_casts = ("#ifndef LG_HAVE_BIT_CASTS\n#define LG_HAVE_BIT_CASTS\n"
                 "static inline float lg_bits_to_float(unsigned int bits) "
                 "{ union { unsigned int u; float f; } value; value.u = bits; return value.f; }\n"
                 "static inline unsigned int lg_float_to_bits(float x) "
                 "{ union { float f; unsigned int u; } value; value.f = x; return value.u; }\n#endif\n"
                 if dialect == "c" else "")
    if dtype == dtypes.float8_e8m0fnu:
        return {f"{decode}(": _e8m0_decode(decode, byte, function_qualifier, as_float, bit_casts),
                f"{encode}(": _e8m0_encode(encode, byte, function_qualifier, as_bits, bit_casts)}
    values, steps, top, nan, sign, saturates = _format(dtype)
    decode_table = (f"{table_qualifier} unsigned int {decode}_table[{len(values)}] = "
                    f"{{{', '.join(f'{bits:#x}u' for bits in values)}}};")
    steps_table = f"{table_qualifier} float {encode}_steps[{len(steps)}] = {{{', '.join(map(_float_literal, steps))}}};"
    decode_text = (f"{bit_casts}{decode_table}\n{function_qualifier} float {decode}({byte} code) "
                   f"{{ return {as_float}({decode}_table[code & {2 * sign - 1}]); }}")
    # beyond the last step: the overflow code (NaN or infinity), or the largest value where the format saturates
    last = len(steps) - 1
    encode_text = (
        f"{steps_table}\n{function_qualifier} {byte} {encode}(float x) {{\n"
        f"  {byte} sign = {sign_bit} ? {sign:#x} : 0;\n"
        f"  if (x != x) return ({byte})(sign ? {nan[1]} : {nan[0]});\n"
        f"  float a = {absolute};\n"
        f"  if (a >= {encode}_steps[{last}]) return ({byte})({top} | sign);\n"
        f"  int low = 0, high = {last};  /* steps[low] <= a < steps[high] */\n"
        f"  while (high - low > 1) {{ int middle = (low + high) / 2; "
        f"if ({encode}_steps[middle] <= a) low = middle; else high = middle; }}\n"
        f"  float below = a - {encode}_steps[low], above = {encode}_steps[high] - a;\n"
        f"  int code = below < above ? low : above < below ? high : (low % 2 == 0 ? low : high);\n"
        + ("" if values[sign] == 0x80000000 else "  if (code == 0) return 0;  /* no negative zero: 0x80 is NaN */\n")
        + f"  return ({byte})(code | sign);\n}}")
    if saturates:  # the last step is the largest value itself: at or past it, that value
        encode_text = encode_text.replace(f"return ({byte})({top} | sign);", f"return ({byte})({last} | sign);")
    return {f"{decode}(": decode_text, f"{encode}(": encode_text}


def _e8m0_decode(name: str, byte: str, qualifier: str, as_float: str, bit_casts: str) -> str:
    """2^(code - 127): the code is a float32's exponent field; code 0 (2^-127) is float32's subnormal
    0x00400000; 255 is NaN."""
    return (f"{bit_casts}{qualifier} float {name}({byte} code) {{\n"
            f"  return {as_float}(code == 255 ? 0x7fc00000u : code == 0 ? 0x00400000u : (unsigned int)code << 23);\n}}")


def _e8m0_encode(name: str, byte: str, qualifier: str, as_bits: str, bit_casts: str) -> str:
    """The nearest power of two, ties up, as ml_dtypes rounds: from a float32's exponent field, plus one
    when its mantissa is half or more (1.5 * 2^e lies halfway to 2^(e+1)). Among float32's subnormals,
    2^-127 and below is code 0 (there is no zero), anything above it code 1 (2^-126), as ml_dtypes
    gives; NaN, zero, negatives, infinity and what rounds past 2^127 are NaN (255)."""
    return (f"{bit_casts}{qualifier} {byte} {name}(float x) {{\n"
            f"  if (!(x > 0.0f)) return 255;\n"
            f"  unsigned int bits = {as_bits}(x), exponent = bits >> 23, mantissa = bits & 0x7fffffu;\n"
            f"  if (exponent == 0) return mantissa > 0x400000u ? 1 : 0;  /* subnormal: past 2^-127 is 2^-126 */\n"
            f"  unsigned int code = exponent + (mantissa >= 0x400000u ? 1u : 0u);\n"
            f"  return ({byte})(code >= 255u ? 255u : code);\n}}")


NARROW_FLOATS = (dtypes.float8_e4m3fn, dtypes.float8_e5m2, dtypes.float8_e4m3fnuz, dtypes.float8_e5m2fnuz,
                 dtypes.float8_e8m0fnu, dtypes.float4_e2m1fn)
