"""OpenCL vector types: linearize's vector copies rendered as floatN loads, ops, fma and stores.

The renderer is built with an explicit float vector width, so these golden checks need no device
and do not depend on the width PoCL reports. Results on the device are in
test/devices/test_opencl_vectors.py.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from lazygrad import Tensor
from lazygrad.devices.opencl import float_vector_width
from lazygrad.codegen.axes import merge_dims
from lazygrad.codegen.linearize import _is_vector_access, linearize
from lazygrad.renderer.opencl import OpenCLRenderer
from lazygrad.codegen.opts import Opt
from lazygrad.schedule.fuse import create_schedule
from lazygrad.shape.symbolic import Lin, var


def tensor(shape, dtype=np.float32) -> Tensor:
    return Tensor(np.ones(shape, dtype=dtype), device="CPU")


def source_of(result: Tensor, width: int, opts=None) -> str:
    """The source of the one kernel computing `result`, with the default opts or `opts` (over the
    dim-merged kernel)."""
    (item,) = [item for item in create_schedule([result.lazydata]) if item.kernel is not None]
    renderer = OpenCLRenderer(width)
    return renderer.render_program(linearize(merge_dims(item.kernel), renderer, opts=opts))


VECTOR_LOAD = re.compile(r"\(\*\(__global const float(\d+)\*\)\(data\d+ \+ \(")
VECTOR_STORE = re.compile(r"\*\(__global float(\d+)\*\)\(data0 \+ \(")


def vector_loads(source: str) -> list[int]:
    return [int(width) for width in VECTOR_LOAD.findall(source)]


def vector_stores(source: str) -> list[int]:
    return [int(width) for width in VECTOR_STORE.findall(source)]


# ---- matmul: the work-item tile's 16-wide rows -----------------------------------------------

def test_matmul_tile_rows_are_float16_vectors_at_width_16():
    source = source_of(tensor((64, 128)) @ tensor((128, 64)), 16)
    assert vector_loads(source) == [16]          # one row of the right operand per step, read once
    assert vector_stores(source) == [16] * 8     # 8 rows of 16 outputs
    assert source.count("lg_fma16(") == 8 + 1    # 8 vector updates, and the helper's definition
    assert source.count("float16 acc") == 8
    assert "__builtin_fmaf(a.sf, b.sf, c.sf)" in source  # the helper: lane-wise builtin, no library fma
    assert " fma(" not in source and "vload16" not in source


def test_matmul_tile_splits_rows_into_narrower_vectors():
    source = source_of(tensor((64, 128)) @ tensor((128, 64)), 4)
    assert vector_loads(source) == [4] * 4 and vector_stores(source) == [4] * 32
    assert source.count("lg_fma4(") == 32 + 1


def test_matmul_at_width_1_is_scalar_code():
    source = source_of(tensor((64, 128)) @ tensor((128, 64)), 1)
    assert vector_loads(source) == [] and vector_stores(source) == []
    assert "float16" not in source and "lg_fma" not in source
    assert source.count("__builtin_fmaf(") == 16 * 8


def test_matmul_epilogue_runs_on_vectors():
    bias = tensor((64,))
    source = source_of((tensor((64, 128)) @ tensor((128, 64)) + bias).relu(), 16)
    assert vector_loads(source) == [16, 16]      # the right operand's row and the bias
    assert vector_stores(source) == [16] * 8
    assert re.search(r"float16 v\d+ = \(acc0\+v\d+\);", source), source   # the bias added to a vector


def test_float64_and_float16_matmuls_stay_scalar():
    for dtype in (np.float64, np.float16):
        source = source_of(tensor((64, 128), dtype) @ tensor((128, 64), dtype), 16)
        assert vector_loads(source) == [] and vector_stores(source) == [], dtype
        assert not re.search(r"(float|double|half)16 ", source), dtype


# ---- elementwise kernels with an UPCAST ------------------------------------------------------

UPCAST_16 = [Opt("UPCAST", 0, 16)]


def test_contiguous_elementwise_upcast_is_vector_loads_and_a_vector_store():
    source = source_of(tensor((64, 64)) * tensor((64, 64)) + 1, 16, UPCAST_16)
    assert vector_loads(source) == [16, 16] and vector_stores(source) == [16]
    assert re.search(r"float16 v\d+ = \(v\d+\+\(\(float16\)\(v\d+\)\)\);", source), source  # 1.0f, broadcast
    assert source_of(tensor((64, 64)) * tensor((64, 64)) + 1, 1, UPCAST_16).count("data0[") == 16


def test_an_input_padded_across_the_lanes_is_one_masked_vector_load():
    """Padding outside the vector's axis makes every lane valid together or none: one test, one
    vector load or a vector of zeros."""
    padded = tensor((60, 64)).pad(((2, 2), (0, 0)))
    source = source_of(padded + tensor((64, 64)), 16, [Opt("UPCAST", 1, 16)])
    assert vector_loads(source) == [16, 16]
    assert re.search(r"\(\(\(i0>=2\)&&\(i0<62\)\) \? \(\*\(__global const float16\*\)", source), source
    assert vector_stores(source) == [16]


def test_an_input_padded_along_the_lanes_gathers_them():
    padded = tensor((64, 60)).pad(((0, 0), (2, 2)))
    source = source_of(padded + tensor((64, 64)), 16, [Opt("UPCAST", 1, 16)])
    assert vector_loads(source) == [16]                     # the unpadded operand
    assert "((float16)(" in source and "?" in source        # the masked lanes, gathered
    assert vector_stores(source) == [16]


def test_transposed_input_gathers_its_lanes():
    source = source_of(tensor((64, 64)).T * 2 + tensor((64, 64)), 16, [Opt("UPCAST", 1, 16)])
    assert vector_loads(source) == [16] and vector_stores(source) == [16]
    gather = re.search(r"\(\(float16\)\(data\d+\[[^,]*\], data\d+\[", source)
    assert gather is not None, source


def test_unaligned_run_is_gathered():
    shifted = tensor((4097,))[1:]       # offset 1: contiguous but not a multiple of the width
    source = source_of(shifted * 2, 16, UPCAST_16)
    assert vector_loads(source) == [] and vector_stores(source) == [16]


def test_a_strided_store_keeps_the_kernel_scalar():
    (item,) = create_schedule([(tensor((64, 32)).T * 2).lazydata])
    renderer = OpenCLRenderer(16)
    # the transposed input keeps both dims; UPCAST the row axis, along which the output steps by a row
    program = linearize(item.kernel, renderer, opts=[Opt("UPCAST", 0, 16)])
    source = renderer.render_program(program)
    assert program.vector_width == 1 and "float16" not in source
    assert source.count("data0[") == 16


def test_unvectorized_ops_and_dtypes_stay_scalar():
    cases = [tensor((64, 64)).exp(), tensor((64, 64)).sqrt(), tensor((64, 64), np.int32) * 3,
             tensor((64, 64), np.float16) * 3, tensor((64, 64)) < 2, tensor((64, 64), np.float64) + 1]
    for result in cases:
        source = source_of(result, 16, UPCAST_16)
        assert vector_loads(source) == [] and vector_stores(source) == [], source


def test_vector_reduce_accumulates_columns_in_vectors():
    source = source_of(tensor((64, 64)).sum(0), 16, [Opt("UPCAST", 1, 16)])
    assert "float16 acc0 = ((float16)(0.0f));" in source and vector_stores(source) == [16]
    maximum = source_of(tensor((64, 64)).amax(0), 16, [Opt("UPCAST", 1, 16)])
    assert "float16 acc0 = ((float16)((-INFINITY)));" in maximum
    assert "acc0 = ((v1>acc0 || v1!=v1) ? v1 : acc0);" in maximum   # NaN-keeping max, lane by lane


def test_reduce_outputs_strided_along_the_lanes_are_stored_lane_by_lane():
    # the loads walk axis 0 contiguously, the 16 sums are a row (64 elements) apart in the output
    source = source_of(tensor((64, 64, 16)).permute(2, 0, 1).sum(2), 16, [Opt("UPCAST", 0, 16)])
    assert "float16 acc0 = ((float16)(0.0f));" in source and vector_stores(source) == []
    assert [line.strip().split(" = ")[1] for line in source.split("\n") if line.strip().startswith("data0[")] == \
        [f"acc0.s{lane:x};" for lane in range(16)]

def test_width_must_be_an_opencl_vector_length():
    with pytest.raises(ValueError, match="float_vector_width must be one of 1, 2, 4, 8, 16; got 3"):
        OpenCLRenderer(3)


# ---- the pieces ------------------------------------------------------------------------------

def test_vector_access_needs_consecutive_unmasked_lanes_at_an_aligned_start():
    i = var("i", 0, 99)

    def lanes(offsets, conditions=()):
        return [lambda tracker, offset=offset: (offset, list(conditions)) for offset in offsets]

    assert _is_vector_access(None, lanes([i * 4 + lane for lane in range(4)]))
    assert not _is_vector_access(None, lanes([i * 4 + 1 + lane for lane in range(4)]))   # unaligned start
    assert not _is_vector_access(None, lanes([i * 2 + lane for lane in range(4)]))       # i*2 may be odd
    assert not _is_vector_access(None, lanes([i * 4 + 2 * lane for lane in range(4)]))   # stride 2
    assert not _is_vector_access(None, lanes([Lin.of(8)] * 4))                          # the same element
    assert not _is_vector_access(None, lanes([i * 4 + lane for lane in range(4)], [(i, 1, 100)]))  # masked


@pytest.mark.parametrize("preferred, native, alignment_bits, expected", [
    (16, 16, 1024, 16), (16, 16, 256, 8), (4, 8, 1024, 4), (8, 4, 1024, 4), (1, 1, 1024, 1),
    (0, 0, 1024, 1), (6, 16, 1024, 4)])
def test_device_float_vector_width(preferred, native, alignment_bits, expected):
    assert float_vector_width(preferred, native, alignment_bits) == expected
