"""Conversions between float32 and the 8-bit float formats (float8_e4m3fn, float8_e5m2 and their fnuz
variants, which have no negative zero and one NaN, 0x80, for infinities too), as C-family
helper functions for every dialect; the renderers emit them where a kernel casts (cstyle.py).

Like bfloat16, these are storage dtypes: the front end converts them to float32 before any op and
back after (Tensor._apply), so a kernel only loads, stores and converts them. A format's 256 codes
decode through a table of their values. Encoding finds the nearest value by a binary search over the
non-negative codes, ties to the even code (round to nearest even, as the code's last bit is the
mantissa's), with the first code past the largest finite value standing for the next power of the
format's spacing, so a value that rounds beyond the largest becomes that code: NaN in e4m3fn and the
fnuz formats, which have no infinity, and infinity in e5m2; exactly as ml_dtypes converts (test/ops/test_float8.py
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
def _format(dtype: DType) -> tuple[list[float], list[float], int, int]:
    """(the float32 bits of all 256 codes' values, the non-negative codes' values up to and including the first
    past the largest finite one (standing for the next step), that code, the positive NaN code)."""
    values = np.arange(256, dtype=np.uint8).view(dtype.np).astype(np.float32)
    largest = float(ml_dtypes.finfo(dtype.np).max)
    overflow = int(np.array(largest, np.float32).astype(dtype.np).view(np.uint8)) + 1
    steps = values[:overflow].astype(np.float64).tolist()
    steps.append(largest + (largest - steps[-2]))  # the value the overflow code stands for when rounding
    nan = int(np.array(np.nan, np.float32).astype(dtype.np).view(np.uint8))
    return values.view(np.uint32).tolist(), steps, overflow, nan


def helper_names(dtype: DType) -> tuple[str, str]:
    """(decode, encode) function names: lg_float8_e4m3fn_to_float, lg_float_to_float8_e4m3fn."""
    return f"lg_{dtype.name}_to_float", f"lg_float_to_{dtype.name}"


def helpers(dtype: DType, dialect: str) -> dict[str, str]:
    """The two conversion functions of `dtype` in a dialect ("c", "opencl", "cuda"), by the marker a
    kernel's text contains when it calls them."""
    values, steps, overflow, nan = _format(dtype)
    decode, encode = helper_names(dtype)
    byte = {"c": "unsigned char", "opencl": "uchar", "cuda": "unsigned char"}[dialect]
    table_qualifier = {"c": "static const", "opencl": "__constant", "cuda": "__device__ static const"}[dialect]
    function_qualifier = {"c": "static inline", "opencl": "", "cuda": "__device__ inline"}[dialect]
    # gcc's builtins in C: its kernels declare the math they call instead of including math.h
    sign_bit = {"c": "__builtin_signbit(x)", "opencl": "signbit(x)", "cuda": "signbit(x)"}[dialect]
    absolute = {"c": "__builtin_fabsf(x)", "opencl": "fabs(x)", "cuda": "fabsf(x)"}[dialect]
    # the decoded values as float32 bits: NaN is no constant an OpenCL table initializer takes
    as_float = {"c": "lg_bits_to_float", "opencl": "as_float", "cuda": "__uint_as_float"}[dialect]
    decode_table = f"{table_qualifier} unsigned int {decode}_table[256] = {{{', '.join(f'{bits:#x}u' for bits in values)}}};"
    steps_table = f"{table_qualifier} float {encode}_steps[{len(steps)}] = {{{', '.join(map(_float_literal, steps))}}};"
    bits_to_float = ("static inline float lg_bits_to_float(unsigned int bits) "
                     "{ union { unsigned int u; float f; } value; value.u = bits; return value.f; }\n"
                     if dialect == "c" else "")
    decode_text = (f"{bits_to_float}{decode_table}\n{function_qualifier} float {decode}({byte} code) "
                   f"{{ return {as_float}({decode}_table[code]); }}")
    encode_text = (
        f"{steps_table}\n{function_qualifier} {byte} {encode}(float x) {{\n"
        f"  {byte} sign = {sign_bit} ? 0x80 : 0;\n"
        f"  if (x != x) return ({byte})({nan} | sign);\n"
        f"  float a = {absolute};\n"
        f"  if (a >= {encode}_steps[{overflow}]) return ({byte})({overflow} | sign);\n"
        f"  int low = 0, high = {overflow};  /* steps[low] <= a < steps[high] */\n"
        f"  while (high - low > 1) {{ int middle = (low + high) / 2; "
        f"if ({encode}_steps[middle] <= a) low = middle; else high = middle; }}\n"
        f"  float below = a - {encode}_steps[low], above = {encode}_steps[high] - a;\n"
        f"  int code = below < above ? low : above < below ? high : (low % 2 == 0 ? low : high);\n"
        + ("" if values[0x80] == 0x80000000 else "  if (code == 0) return 0;  /* no negative zero: 0x80 is NaN */\n")
        + f"  return ({byte})(code | sign);\n}}")
    return {f"{decode}(": decode_text, f"{encode}(": encode_text}


FLOAT8_DTYPES = (dtypes.float8_e4m3fn, dtypes.float8_e5m2, dtypes.float8_e4m3fnuz, dtypes.float8_e5m2fnuz)
