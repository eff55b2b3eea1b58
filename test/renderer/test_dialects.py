"""Golden checks of the OpenCL and CUDA dialects: how loops map to threads, types in memory, helpers.

No device is needed: kernels come from the scheduler and are only rendered. OpenCL renderers are
built with float vector width 1 (scalar code), so the width a device reports does not matter here;
vector code is checked in test_opencl_vector_source.py.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from lazygrad import Tensor, dtypes
from lazygrad.ops import ELEMENTWISE, OPS, REDUCE
from lazygrad.renderer.cuda import CUDARenderer
from lazygrad.codegen.linearize import linearize
from lazygrad.renderer.opencl import OpenCLRenderer
from lazygrad.schedule.fuse import create_schedule

RENDERERS = [OpenCLRenderer(1), CUDARenderer()]


def sources(tensor: Tensor, renderer) -> list[str]:
    """The source of every kernel that computes tensor, in schedule order."""
    return [renderer.render_program(linearize(item.kernel, renderer))
            for item in create_schedule([tensor.lazydata]) if item.kernel is not None]


def tensor(shape, dtype=np.float32) -> Tensor:
    return Tensor(np.ones(shape, dtype=dtype), device="CPU")


def softmax(x: Tensor) -> Tensor:
    exponentials = (x - x.amax(-1, keepdim=True)).exp()
    return exponentials / exponentials.sum(-1, keepdim=True)


# ---- OpenCL ----------------------------------------------------------------------------------

def test_opencl_softmax_maps_rows_and_columns_to_work_items():
    kernels = sources(softmax(tensor((6, 10))), OpenCLRenderer(1))
    assert len(kernels) == 2
    for source in kernels:
        assert source.startswith("// launch: global=")
        assert "__kernel void " in source and "get_global_id(0)" in source
        assert "#pragma omp" not in source and "for (long i" not in source  # global loops are work-items
    row_max_and_sum, normalize = kernels  # the max's loop, then the sum's, in each work-item
    assert row_max_and_sum.startswith("// launch: global=6\n")
    assert row_max_and_sum.count("for (long r1 = 0; r1 < 10; r1++)") == 2
    assert normalize.startswith("// launch: global=10,6\n")
    assert "long i1 = get_global_id(0);" in normalize and "long i0 = get_global_id(1);" in normalize


def test_opencl_more_than_three_global_loops_share_dimension_two():
    (source,) = sources(tensor((2, 3, 4, 5, 2), np.int32).permute(4, 2, 0, 3, 1) * 3, OpenCLRenderer(1))
    assert source.startswith("// launch: global=3,5,16\n")
    assert "long gid2 = get_global_id(2);" in source
    assert "long i0 = (gid2 / 8);" in source and "long i1 = (gid2 / 2) % 4;" in source
    assert "long i2 = gid2 % 2;" in source


def test_opencl_parameters_are_global_restrict_pointers_and_inputs_const():
    (source,) = sources(tensor((4, 4)) + tensor((4, 4)) * 2, OpenCLRenderer(1))
    assert re.search(r"__kernel void \w+\(__global float\* restrict data0, "
                     r"__global const float\* restrict data1, __global const float\* restrict data2\)", source)


def test_opencl_bool_buffers_are_uchar_in_memory():
    (source,) = sources(tensor((8,), np.bool_) & (tensor((8,)) < 2), OpenCLRenderer(1))
    assert "__global uchar* restrict data0" in source and "__global const uchar* restrict data1" in source
    assert "bool*" not in source and "bool v" in source


def test_opencl_float16_is_half_in_memory_and_float_in_registers():
    (source,) = sources((tensor((8,), np.float16) * 3 + 1).sqrt(), OpenCLRenderer(1))
    assert "__global half* restrict data0" in source and "vload_half(" in source and "vstore_half_rte(" in source
    assert "cl_khr_fp16" not in source and "half v" not in source and "lg_half(" in source


def test_opencl_enables_float64_only_where_used():
    (with_double,) = sources(tensor((8,), np.float64) * 2, OpenCLRenderer(1))
    (without,) = sources(tensor((8,)) * 2, OpenCLRenderer(1))
    assert "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" in with_double
    assert "cl_khr_fp64" not in without


def test_opencl_int64_constants_have_the_long_suffix():
    (source,) = sources(tensor((8,), np.int64) * 3, OpenCLRenderer(1))
    assert "3L" in source and "ll" not in source


def test_opencl_uses_its_own_math_and_bitcast_names():
    (math_source,) = sources(tensor((8,)).sqrt() + tensor((8,)).sin(), OpenCLRenderer(1))
    # sqrt is the compiler's IEEE builtin (which PoCL inlines), sin is OpenCL's overloaded function
    assert "__builtin_sqrtf(" in math_source and " sin(" in math_source and "sinf(" not in math_source
    (bitcast_source,) = sources(tensor((8,)).bitcast(dtypes.int32) + 1, OpenCLRenderer(1))
    assert "as_int(" in bitcast_source


def test_a_column_sum_keeps_one_accumulator_per_work_item():
    for renderer in RENDERERS:
        (source,) = sources(tensor((64, 32)).sum(0), renderer)
        assert re.search(r"acc\d+\[", source) is None, source


def test_opencl_matmul_tile_uses_the_builtin_fma_and_no_lockstep():
    """A matmul gets a 16 x 8 register tile per work-item, vectorized within the work-item: its
    updates are the compiler's fma (OpenCL's `fma` is a library call on PoCL) and its reduce loop
    has no lockstep barrier; a short reduce keeps one output per work-item, in lockstep."""
    (tiled,) = sources(tensor((64, 128)) @ tensor((128, 64)), OpenCLRenderer(1))
    assert tiled.startswith("// launch: global=4,8\n")
    assert tiled.count("__builtin_fmaf(") == 16 * 8 and " fma(" not in tiled
    assert "lg_lockstep" not in tiled
    (wide,) = sources(tensor((64, 128), np.float64) @ tensor((128, 64), np.float64), OpenCLRenderer(1))
    assert wide.count("__builtin_fma(") == 16 * 8
    (short,) = sources(tensor((64, 8)) @ tensor((8, 64)), OpenCLRenderer(1))
    assert "lg_lockstep();" in short and "fma" not in short


# ---- CUDA ------------------------------------------------------------------------------------

def test_cuda_softmax_is_a_flat_launch_over_the_output():
    kernels = sources(softmax(tensor((6, 10))), CUDARenderer())
    assert len(kernels) == 2
    for source in kernels:
        assert 'extern "C" __global__ void ' in source
        assert "long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x;" in source
        assert "#pragma omp" not in source and "cuda_fp16" not in source
    assert kernels[0].startswith("// launch: grid=1 block=6\n") and "if (gid >= 6) return;" in kernels[0]
    normalize = kernels[1]
    assert "if (gid >= 60) return;" in normalize
    assert "long long i0 = (gid / 10);" in normalize and "long long i1 = gid % 10;" in normalize


def test_cuda_launch_covers_the_output_with_blocks_of_256():
    (source,) = sources(tensor((1000,)) + 1, CUDARenderer())
    assert source.startswith("// launch: grid=4 block=256\n") and "if (gid >= 1000) return;" in source


def test_cuda_includes_half_support_only_when_float16_is_used():
    (with_half,) = sources(tensor((8,), np.float16) * 2, CUDARenderer())
    assert "#include <cuda_fp16.h>" in with_half and "__half* __restrict__ data0" in with_half
    assert "__half2float(" in with_half and "__float2half_rn(" in with_half


# ---- every op renders on every dialect --------------------------------------------------------

def _operand_dtypes(name: str):
    if name in ("AND", "OR", "XOR", "SHL", "SHR"):
        return (dtypes.int32, dtypes.bool) if name not in ("SHL", "SHR") else (dtypes.int32,)
    if OPS[name].float_only:
        return (dtypes.float16, dtypes.float32, dtypes.float64)
    return (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int8, dtypes.int64)


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda renderer: renderer.dialects[0])
@pytest.mark.parametrize("name", sorted(ELEMENTWISE - {"CAST", "BITCAST", "WHERE"}))
def test_every_elementwise_op_renders(renderer, name: str):
    for dtype in _operand_dtypes(name):
        src_dtypes = [dtype] * OPS[name].arity
        out_dtype = OPS[name].out_dtype(src_dtypes, None) if OPS[name].out_dtype else dtype
        text = renderer.render_op(OPS[name], src_dtypes, out_dtype, [f"x{number}" for number in range(OPS[name].arity)])
        assert "x0" in text and "{" not in text


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda renderer: renderer.dialects[0])
@pytest.mark.parametrize("name", sorted(name for name, op in OPS.items() if op.kind == REDUCE))
def test_every_reduce_renders_its_accumulation(renderer, name: str):
    for dtype in (dtypes.float16, dtypes.float32, dtypes.int32):
        text = renderer.render_accumulate(OPS[name], dtype, "acc", "value")
        assert "acc" in text and "value" in text


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda renderer: renderer.dialects[0])
def test_a_four_bit_integer_is_read_as_its_nibble_whatever_it_is_cast_to(renderer):
    """int4 and uint4 are a byte's low nibble; int4's sign bit is extended. CUDA's float16 cast
    once skipped that read (int4 -8 came out 8 on an H200)."""
    for target in (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int8, dtypes.uint8, dtypes.int64, dtypes.bool):
        assert "((((int)(x) & 15) ^ 8) - 8)" in renderer.render_cast(dtypes.int4, target, "x"), target
        assert "((int)(x) & 15)" in renderer.render_cast(dtypes.uint4, target, "x"), target


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda renderer: type(renderer).__name__)
def test_a_kernel_with_several_outputs_stores_each_in_its_own_type(renderer):
    source = tensor((4, 6))
    results = [source + 1, (source * 2).cast(dtypes.float16), source > 0]
    schedule = create_schedule([result.lazydata for result in results])
    assert len(schedule) == 1 and len(schedule[0].outputs) == 3
    text = renderer.render_program(linearize(schedule[0].kernel, renderer))
    signature = re.search(r"void \w+\(([^)]*)\)", text).group(1)
    parameters = [parameter.strip() for parameter in signature.split(",")]
    assert [parameter.endswith(f"data{number}") for number, parameter in enumerate(parameters)] == [True] * 4
    assert ["const" in parameter for parameter in parameters] == [False, False, False, True]
    half_store = "vstore_half_rte(" if isinstance(renderer, OpenCLRenderer) else "__float2half_rn("
    assert half_store in text and "data0[" in text and "data2[" in text


# ---- work-groups: LOCAL and GROUP ------------------------------------------------------------

def grouped_sum_source(renderer, opts) -> str:
    from lazygrad.codegen.axes import merge_dims
    (item,) = create_schedule([tensor((4, 64)).sum(1).lazydata])
    return renderer.render_program(linearize(merge_dims(item.kernel), renderer, opts=opts))


def test_opencl_grouped_sum_folds_lanes_through_local_memory():
    from lazygrad.codegen.opts import Opt
    source = grouped_sum_source(OpenCLRenderer(1), [Opt("GROUP", 1, 16)])
    assert source.startswith("// launch: global=16,4 local=16,1\n")
    body = source[source.index("__kernel"):]
    assert body == (
        "__kernel void r_4_r64(__global float* restrict data0, __global const float* restrict data1) {\n"
        "  long lid = get_local_id(0);\n"
        "  long r2 = lid;\n"
        "  long i0 = get_global_id(1);\n"
        "  float acc0 = 0.0f;\n"
        "  for (long r1 = 0; r1 < 4; r1++) {\n"
        "    float v1 = data1[i0*64+r1*16+r2];\n"
        "    acc0 = (acc0+v1);\n"
        "    lg_lockstep();\n"
        "  }\n"
        "  __local float acc0_lanes[16];\n"
        "  acc0_lanes[lid] = acc0;\n"
        "  barrier(CLK_LOCAL_MEM_FENCE);\n"
        "  if (r2 == 0) {\n"
        "    for (long lane = 1; lane < 16; lane++) {\n"
        "      acc0 = (acc0+acc0_lanes[lid+lane]);\n"
        "    }\n"
        "    data0[i0] = acc0;\n"
        "  }\n"
        "}\n")


def test_cuda_grouped_sum_folds_lanes_through_shared_memory():
    from lazygrad.codegen.opts import Opt
    source = grouped_sum_source(CUDARenderer(), [Opt("GROUP", 1, 16)])
    assert source.startswith("// launch: grid=4 block=16\n")
    body = source[source.index("extern"):]
    assert body == (
        'extern "C" __global__ void r_4_r64(float* __restrict__ data0, const float* __restrict__ data1) {\n'
        "  long long group = blockIdx.x;\n"
        "  long long lid = threadIdx.x;\n"
        "  long long r2 = lid;\n"
        "  long long i0 = group;\n"
        "  float acc0 = 0.0f;\n"
        "  for (long long r1 = 0; r1 < 4; r1++) {\n"
        "    float v1 = data1[i0*64+r1*16+r2];\n"
        "    acc0 = (acc0+v1);\n"
        "  }\n"
        "  __shared__ float acc0_lanes[16];\n"
        "  acc0_lanes[lid] = acc0;\n"
        "  __syncthreads();\n"
        "  if (r2 == 0) {\n"
        "    for (long long lane = 1; lane < 16; lane++) {\n"
        "      acc0 = (acc0+acc0_lanes[lid+lane]);\n"
        "    }\n"
        "    data0[i0] = acc0;\n"
        "  }\n"
        "}\n")


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda renderer: renderer.dialects[0])
def test_local_rows_put_the_work_group_in_its_own_dimension(renderer):
    from lazygrad.codegen.opts import Opt
    source = grouped_sum_source(renderer, [Opt("LOCAL", 0, 2), Opt("GROUP", 2, 8)])
    launch = "// launch: global=16,2 local=16,1\n" if renderer.dialects[0] == "opencl" else "// launch: grid=2 block=16\n"
    assert source.startswith(launch)
    assert "i1 = (lid / 8)" in source and "r3 = lid % 8" in source
    assert "return" not in source  # every work-item reaches the barrier
    assert source.count("_lanes[lid] = acc0;") == 1 and "if (r3 == 0) {" in source
