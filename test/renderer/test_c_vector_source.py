"""C vector types: a register tile's rows rendered as GCC/clang vectors of the CPU's lane count.

The renderer is built with explicit lanes (8: AVX2's float32 lanes; 16: AVX-512's), so the source
checks do not depend on this machine; the values checks run the kernels on the CPU device. The 3x3
convolutions here are the direct product's (not Winograd's: see the autouse fixture).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import lazygrad.nn.functional as F
from lazygrad import Tensor, dtypes
from lazygrad.beam import KernelBench
from lazygrad.devices import get_device
from lazygrad.codegen.axes import merge_dims
from lazygrad.renderer.c import CRenderer
from lazygrad.codegen.linearize import linearize
from lazygrad.codegen.opts import heuristic_opts
from lazygrad.schedule.fuse import create_schedule


@pytest.fixture(autouse=True)
def direct(direct_convolutions):
    pass


def realized(shape, seed: int = 0) -> Tensor:
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).realize()


def program_of(result: Tensor, lanes: int, name_prefix: str = "r_"):
    """The loop program of `result`'s kernel whose name starts with `name_prefix`, default opts."""
    kernels = [item.kernel for item in create_schedule([result.lazydata]) if item.kernel is not None]
    (kernel,) = [kernel for kernel in kernels if kernel.name.startswith(name_prefix)]
    renderer = CRenderer(simd_lanes=lanes, simd_registers=16 if lanes == 8 else 32)
    return renderer, linearize(merge_dims(kernel), renderer)


VECTOR_LOAD = re.compile(r"\(\*\(const lg_float(\d+)_unaligned\*\)\(data\d+ \+ \(")
VECTOR_STORE = re.compile(r"\*\(lg_float(\d+)_unaligned\*\)\(data0 \+ \(")


def test_convolution_tile_rows_are_vectors_of_the_lane_count():
    x, w = realized((1, 64, 14, 14)), realized((64, 64, 3, 3), seed=1)
    renderer, program = program_of(F.conv2d(x, w, padding=1), 8)
    source = renderer.render_program(program)
    assert program.vector_width == 8
    tile = sum(accumulator.width for accumulator in program.accumulators)
    assert VECTOR_LOAD.findall(source) == ["8"] * 2            # the weight panel's 16 channels, read once per step
    assert VECTOR_STORE.findall(source) == ["8"] * (tile // 8)
    assert source.count("lg_float8 acc") == tile // 8
    assert "__builtin_fmaf(" in source and "__builtin_ia32" not in source and "#include <immintrin.h>" not in source
    assert "#pragma omp simd reduction" not in source         # the reduction is the vectors' own


def test_avx512_lanes_give_vectors_of_16():
    x, w = realized((1, 64, 14, 14)), realized((64, 64, 3, 3), seed=1)
    renderer, program = program_of(F.conv2d(x, w, padding=1), 16)
    assert program.vector_width == 16
    assert "typedef float lg_float16 __attribute__((vector_size(64)));" in renderer.render_program(program)


# Depthwise convolutions of 12 channels (which whole vectors of 8 do not divide) keep their channels in
# the middle, where a row of columns is the vector; with 8, 16, ... channels they compute channels
# last (nn/spatial.py), below.

def test_a_row_that_half_the_lanes_divide_takes_half_registers():
    # 28 columns: vectors of 4 (AVX2's 128-bit halves)
    x, w = realized((1, 12, 28, 28)), realized((12, 1, 3, 3), seed=1)
    renderer, program = program_of(F.conv2d(x, w, padding=1, groups=12), 8)
    assert program.vector_width == 4
    assert "typedef float lg_float4 " in renderer.render_program(program)


def test_an_axis_the_lanes_do_not_divide_stays_scalar():
    # a depthwise convolution's row of 14 columns: vectors of 2 measured slower than gcc's packing
    x, w = realized((1, 12, 14, 14)), realized((12, 1, 3, 3), seed=1)
    renderer, program = program_of(F.conv2d(x, w, padding=1, groups=12), 8)
    assert program.vector_width == 1
    assert "lg_float" not in renderer.render_program(program)


def test_a_depthwise_row_is_tiled_in_whole_vectors():
    # columns alone (no output axis reuses a load): 56 = 7 vectors of 8, not the 28 a scalar tile takes
    x, w, scale = realized((1, 12, 56, 56)), realized((12, 1, 3, 3), seed=1), realized((1, 12, 1, 1), seed=2)
    renderer, program = program_of((F.conv2d(x, w, padding=1, groups=12) * scale).relu6(), 8)
    assert [str(opt) for opt in program.opts] == ["UPCAST(2,56)"] and program.vector_width == 8


@pytest.mark.parametrize("lanes, channels_tile", [(8, 8), (16, 32)], ids=["avx2-lanes", "avx512-lanes"])
def test_a_channels_last_depthwise_tile_is_vectors_of_channels_by_a_run_of_columns(lanes, channels_tile):
    # every load walks the channels: they are the vector, by 8 columns along which the weight stays
    # put, as many vectors of channels as fit beside them in the registers
    x, w = realized((1, 32, 56, 56)), realized((32, 1, 3, 3), seed=1)
    renderer, program = program_of(F.conv2d(x, w, padding=1, groups=32), lanes)
    assert program.vector_width == lanes
    assert sorted(opt.amount for opt in program.opts) == sorted([channels_tile, 8])
    assert all(opt.op == "UPCAST" for opt in program.opts)


@pytest.mark.parametrize("lanes, kernel, taps", [(8, 3, (3, 3)), (16, 3, (3, 3)), (8, 5, (5,)), (16, 5, (5,))],
                         ids=["avx2-3x3", "avx512-3x3", "avx2-5x5", "avx512-5x5"])
def test_a_depthwise_weight_gradients_taps_share_each_step(lanes, kernel, taps):
    """The weight gradient of a depthwise convolution computed channels last: a vector of channels by
    the window's taps, whole (a row of them where all of a 5x5 window's do not fit the registers),
    so each step reads the output gradient once for every tap."""
    x = realized((2, 32, 12, 12))
    w = Tensor(np.random.default_rng(1).standard_normal((32, 1, kernel, kernel)).astype(np.float32), requires_grad=True)
    grad = realized((2, 32, 12, 12), seed=2)
    (F.conv2d(x, w, padding=kernel // 2, groups=32) * grad).sum().backward()
    renderer, program = program_of(w.grad, lanes)
    assert program.vector_width == lanes
    assert sorted(opt.amount for opt in program.opts) == sorted((lanes,) + taps)
    padded = np.pad(x.numpy().astype(np.float64), ((0, 0), (0, 0), (kernel // 2,) * 2, (kernel // 2,) * 2))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kernel, kernel), axis=(2, 3))
    expected = np.einsum("nchwij,nchw->cij", windows, grad.numpy().astype(np.float64))[:, None]
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_vectorized_depthwise_convolution_matches_numpy():
    x, w = realized((1, 16, 56, 56)), realized((16, 1, 3, 3), seed=1)
    result = F.conv2d(x, w, padding=1, groups=16).relu6().numpy()
    padded = np.pad(x.numpy().astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    expected = np.clip(np.einsum("nchwij,cij->nchw", windows, w.numpy()[:, 0].astype(np.float64)), 0, 6)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)


def test_a_relu_after_the_tile_is_a_vector_max():
    # max(x, 0) keeping a NaN of x, as the scalar template: a select by two vector comparisons
    a, b = realized((64, 96)), realized((96, 64), seed=1)
    renderer, program = program_of((a @ b).relu(), 8)
    source = renderer.render_program(program)
    assert program.vector_width == 8 and "lg_select(" in source


def test_masks_combined_after_the_tile_keep_their_truth_values():
    # masks are -1/0 lanes: their max (logical or) and their < (not a, and b) are bit operations
    a, b = realized((64, 96)), realized((96, 64), seed=1)
    product = a @ b
    positive, small = product > 0, product.abs() < 5
    result = (positive.maximum(small)).where(product, -1.0) + (positive < small).where(100.0, 0.0)
    renderer, program = program_of(result, 8)
    assert program.vector_width == 8
    p = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
    expected = np.where((p > 0) | (np.abs(p) < 5), p, -1.0) + np.where((p <= 0) & (np.abs(p) < 5), 100.0, 0.0)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_masks_ored_and_anded_are_vector_bit_operations():
    """A clamp's NaN test (x < lo or x != x) and a logical and of masks are `|` and `&` on the masks,
    not a lane-by-lane expression per lane (relu6 after a tile: gcc compiled 16 scalar ors per vector)."""
    a, b = realized((64, 96)), realized((96, 64), seed=1)
    product = a @ b
    result = product.relu6() + (product > 0).logical_and(product < 3).where(10.0, 0.0)
    renderer, program = program_of(result, 16)
    source = renderer.render_program(program)
    assert program.vector_width == 16 and "[0] != 0)" not in source and "|" in source and "&" in source
    p = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
    expected = np.clip(p, 0, 6) + np.where((p > 0) & (p < 3), 10.0, 0.0)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_an_op_without_a_vector_form_is_computed_lane_by_lane():
    # sqrt after the tile: each lane's sqrtf on its lane of the row's vector, the tile still vectors
    a, b = realized((64, 96)), realized((96, 64), seed=1)
    result = (a @ b).abs().sqrt()
    renderer, program = program_of(result, 8)
    source = renderer.render_program(program)
    assert program.vector_width == 8 and re.search(r"sqrtf\(v\d+\[7\]\)", source)
    expected = np.sqrt(np.abs(a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)))
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_max_reduce_takes_its_rows_as_vector_lanes_and_keeps_nan():
    """A row maximum's accumulators are vectors across its 8 rows, updated by the vector MAX select
    (one thread, 4096 x 4096: 12.0 -> 3.1 ms; 1024 x 30522 logits 17.5 -> 6.9 ms); a NaN in a row
    is its maximum, as numpy's."""
    values = realized((16, 1000)).numpy()
    values[3, 500] = values[9, 0] = np.nan
    x = Tensor(values).realize()
    np.testing.assert_array_equal(x.max(axis=1).numpy(), values.max(axis=1))
    renderer, program = program_of(x.max(axis=1), 16)
    assert program.vector_width == 8 and "lg_select" in renderer.render_program(program)


@pytest.mark.parametrize("lanes", [8, 16])
def test_exp2_after_the_tile_is_the_scalar_helper_lane_for_lane(lanes):
    """gelu's erf and a sigmoid after a matmul call lg_exp2f on whole vectors (lg_exp2f8, lg_exp2f16),
    which gives each lane the scalar helper's result bit for bit: the same values as the product
    stored first and the epilogue computed by plain loops, at the exponent's edges too (0 below
    2^-150, inf above 2^128, NaN through)."""
    a, b = realized((64, 96)), realized((96, 64), seed=1)
    a_values = a.numpy() * 12
    a_values[0, :4] = [np.nan, 0.0, 0.0, 0.0]
    a = Tensor(a_values).realize()
    for epilogue in (lambda x: x.exp(), lambda x: x.sigmoid(), lambda x: x.gelu(), lambda x: (x * 40).exp2()):
        renderer, program = program_of(epilogue(a @ b), lanes)
        assert program.vector_width == lanes and f"lg_exp2f{lanes}(" in renderer.render_program(program)
        if lanes == get_device("CPU").simd[0]:  # the program this CPU runs: bitwise the same as unfused
            fused = epilogue(a @ b).numpy()
            apart = epilogue((a @ b).realize()).numpy()
            np.testing.assert_array_equal(fused, apart)
    result = ((a @ b) * 40).exp2().numpy()
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(result, np.exp2((a @ b).numpy() * np.float32(40)), rtol=1e-6, atol=0)
    assert np.isnan(result[0]).all() and np.isinf(result).any() and (result == 0).any()


def test_exp2_in_float32_is_within_one_ulp_of_the_exact_value():
    """lg_exp2f's polynomial steps are fused multiply-adds: every normal result lies within 1 ulp of
    2^x computed in float64 (with each product and sum rounded apart, 1.1 ulp at worst)."""
    x = np.concatenate([np.linspace(-126, 127, 400_003, dtype=np.float32),
                        np.random.default_rng(2).uniform(-20, 20, 200_000).astype(np.float32)])
    got = Tensor(x).exp2().numpy().astype(np.float64)
    exact = np.exp2(x.astype(np.float64))
    assert np.all(np.abs(got - exact) <= np.spacing(exact.astype(np.float32)).astype(np.float64))


def test_a_clamp_after_the_tile_selects_with_vector_masks():
    # relu6 without a gradient is two comparisons and two selects: masks of -1/0 lanes, a bitwise select
    a, b = realized((64, 96)), realized((96, 64), seed=1)
    renderer, program = program_of((a @ b).relu6(), 8)
    source = renderer.render_program(program)
    assert program.vector_width == 8
    assert "lg_mask8 " in source and source.count("lg_select(") >= 2


@pytest.mark.parametrize("lanes", [8, 16], ids=["avx2-lanes", "avx512-lanes"])
def test_a_reduce_whose_outputs_are_strided_along_the_lanes_stores_them_lane_by_lane(lanes):
    # a max pool of a channels-last input into NCHW: the loads walk the channels (the vectors), the
    # outputs are 55x55 apart; each is stored once after its window, so the lanes go out one by one
    # (before, the whole window ran scalar: SqueezeNet's 3x3 pools 0.8 ms -> vectors)
    x = realized((1, 33, 33, 64)).permute(0, 3, 1, 2)
    pooled = x.max_pool2d(3, 2)
    renderer, program = program_of(pooled, lanes)
    source = renderer.render_program(program)
    assert program.vector_width == lanes and VECTOR_STORE.findall(source) == []
    assert re.search(rf"data0\[[^]]*\] = acc\d+\[{lanes - 1}\];", source)
    windows = np.lib.stride_tricks.sliding_window_view(x.numpy(), (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    np.testing.assert_array_equal(pooled.numpy(), windows.max(axis=(4, 5)))


def test_a_stored_comparison_stays_scalar():
    # a bool output is one byte per element: no float vector store
    a, b = realized((64, 96)), realized((96, 64), seed=1)
    renderer, program = program_of((a @ b) < 0.5, 8)
    assert program.opts and program.vector_width == 1


def test_two_vector_kernels_compile_in_one_source():
    # the CPU device compiles several kernels' sources as one file: the typedefs are guarded
    x, w = realized((1, 64, 14, 14)), realized((64, 64, 3, 3), seed=1)
    sources = []
    for number in range(2):
        renderer, program = program_of(F.conv2d(x, w, padding=1), 8)
        program.name = f"{program.name}_{number}"
        sources.append(renderer.render_program(program))
    assert all(source.count("typedef float lg_float8 ") == 1 for source in sources)
    assert get_device("CPU").compiler.compile("\n".join(sources))


@pytest.mark.parametrize("batch,channels,size,stride", [(1, 64, 14, 1), (2, 32, 9, 2), (1, 64, 7, 2)])
def test_vectorized_convolutions_match_numpy(batch, channels, size, stride):
    x, w = realized((batch, channels, size, size)), realized((channels, channels, 3, 3), seed=1)
    result = F.conv2d(x, w, padding=1, stride=stride).numpy()
    padded = np.pad(x.numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = (size + 2 - 3) // stride + 1
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride][:, :, :out, :out]
    expected = np.einsum("nchwij,ocij->nohw", windows.astype(np.float64), w.numpy().astype(np.float64))
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)


def test_vectorized_clamped_matmul_matches_numpy_at_the_bounds_and_nan():
    a, b = realized((96, 200)), realized((200, 48), seed=1)
    a_values = a.numpy()
    a_values[0, 0] = np.nan                                   # NaN flows through the selects to one row
    product = Tensor(a_values).realize() @ b
    result = (product * 3).clamp(-1.0, 2.0).numpy()
    expected = np.clip(a_values.astype(np.float64) @ b.numpy().astype(np.float64) * 3, -1.0, 2.0)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)
    assert np.isnan(result[0]).all() and not np.isnan(result[1:]).any()


@pytest.mark.parametrize("lanes", [4, 16], ids=["sse-lanes", "avx512-lanes"])
def test_other_cpus_lane_counts_compute_the_same_here(lanes):
    # vectors of 4 and 16 lanes (SSE, AVX-512) compile and run on any CPU gcc targets; each tile with
    # its epilogue matches the kernel's plain loops on the same random inputs
    x, w = realized((1, 64, 14, 14)), realized((64, 64, 3, 3), seed=1)
    rows, depthwise, scale = realized((1, 32, 56, 56), seed=4), realized((32, 1, 3, 3), seed=2), realized((1, 32, 1, 1), seed=3)
    for result in (F.conv2d(x, w, padding=1), (F.conv2d(rows, depthwise, padding=1, groups=32) * scale).relu6()):
        (kernel,) = [item.kernel for item in create_schedule([result.lazydata])
                     if item.kernel is not None and item.kernel.name.startswith("r_")]
        renderer = CRenderer(simd_lanes=lanes, simd_registers=16 if lanes == 4 else 32)
        merged = merge_dims(kernel)
        opts = heuristic_opts(merged, renderer)
        assert linearize(merged, renderer, opts=opts).vector_width in (lanes, lanes // 2)
        bench = KernelBench("CPU", kernel, renderer)
        bench.clear_outputs()
        bench.run(bench.build(opts))
        assert bench.matches()


def test_vectorized_matmul_with_bias_matches_numpy():
    a, b, bias = realized((96, 200)), realized((200, 48), seed=1), realized((48,), seed=2)
    result = (a @ b + bias).numpy()
    expected = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64) + bias.numpy()
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)


def test_a_tiles_broadcast_values_are_read_through_a_hidden_pointer():
    """A register tile's broadcast operand (here a 1x1 convolution's channels-last input, 8 pixels
    32 floats apart) is read with `lg_splat_load`, which hides the address from gcc's grouping of
    loads: grouped, it read each value as a whole vector and broadcast its first lane (138 against
    84 us for the kernel). The values run on the CPU device."""
    x, w = realized((1, 28, 28, 32)), realized((192, 32, 1, 1), seed=1)
    result = F.conv2d(x.permute(0, 3, 1, 2), w)
    renderer, program = program_of(result, 16)
    source = renderer.render_program(program)
    assert source.count("lg_splat_load(data1 + (") >= 8 and "#define lg_splat_load(p)" in source
    expected = np.einsum("oc,nhwc->nohw", w.numpy()[:, :, 0, 0], x.numpy())
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_bool_cast_to_float_goes_through_int():
    """A comparison counted as a float (a max pool's maxima per window, for its gradient) renders as
    `(float)(int)(b)`: gcc vectorizes it, where it kept `(float)(b)` of a bool scalar, and compiles it
    without jumps in scalar code, where the select `b ? 1.0f : 0.0f` became one (ResNet-18's max pool
    backward at batch 16, 2 threads: the count 3.9 -> 2.6 ms). Values against numpy, NaN included."""
    a = np.random.default_rng(2).integers(0, 3, (64, 300)).astype(np.float32)
    a[0, :5] = np.nan
    x, m = Tensor(a), Tensor(np.full((64, 1), 1, np.float32))
    counted = (x == m).float().sum(1)
    renderer, program = program_of(counted, 16)
    source = renderer.render_program(program)
    assert "((float)(int)(" in source and "? 1.0f : 0.0f)" not in source
    np.testing.assert_array_equal(counted.numpy(), (a == 1).sum(1).astype(np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_scalar_where_of_floats_picks_bits_without_a_jump(dtype):
    """A float WHERE in a tile's scalar copies (a max pool's backward through a relu's mask) is the
    bit-by-bit lg_wheref / lg_where, which gcc compiles without jumps; it made `c ? a : b` a jump
    that random signs mispredict. Values against numpy, infinities included."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 4, 16, 16)).astype(dtype)
    a[0, 0, :2, :2] = [[np.inf, -np.inf], [np.inf, -0.0]]
    g = rng.standard_normal((2, 4, 8, 8)).astype(dtype)
    x = Tensor(a, requires_grad=True)
    (F.max_pool2d(x.relu(), 3, stride=2, padding=1) * Tensor(g)).sum().backward()
    spread = [item.kernel for item in create_schedule([x.grad.lazydata]) if item.kernel is not None
              and not item.kernel.reduce_axes and item.kernel.full_shape[-2:] == (16, 16)]
    programs = [linearize(merge_dims(kernel), CRenderer()) for kernel in spread]
    helper = "lg_wheref(" if dtype == np.float32 else "lg_where("
    assert any(helper in CRenderer().render_program(program) and any(opt.op == "UPCAST" for opt in program.opts)
               for program in programs)
    out = x.grad.numpy()
    relu = np.maximum(a, 0)
    padded = np.pad(relu, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    expected = np.zeros_like(padded)
    for i in range(8):
        for j in range(8):
            window = padded[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].reshape(2, 4, 9)
            first = np.argmax(window, axis=2)  # the whole gradient to the first maximum, as in PyTorch
            chosen = (np.arange(9) == first[..., None]).reshape(2, 4, 3, 3)
            expected[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] += chosen * g[:, :, i, j, None, None]
    expected = np.where(a > 0, expected[:, :, 1:-1, 1:-1], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_an_int32_convolution_tile_is_written_as_int_vectors_with_its_float_epilogue():
    """Integer products (ONNX's ConvInteger, lazygrad.quantize) take the float tile's shape with
    int32 vectors, and a float32 epilogue after the sum (dequantize, bias, relu) keeps the vectors,
    its cast lane by lane: as separate scalars gcc packed some such kernels and not others
    (ResNet-18 quantized by ONNX Runtime, one thread, 6.4 against 95 GOP/s; the model 430 -> 85 ms)."""
    rng = np.random.default_rng(4)
    x = Tensor(rng.integers(-255, 256, (1, 64, 56, 56)).astype(np.int32)).realize()
    w = Tensor(rng.integers(-127, 128, (64, 64, 3, 3)).astype(np.int32)).realize()
    scale = Tensor(rng.random((1, 64, 1, 1)).astype(np.float32)).realize()
    product = x.conv2d(w, padding=1)
    dequantized = (product.cast(dtypes.float32) * scale - 3.0).relu()
    for result in (product, dequantized):
        renderer, program = program_of(result, 16)
        source = renderer.render_program(program)
        assert program.vector_width == 16 and "lg_int16" in source
    exact = F.conv2d(Tensor(x.numpy().astype(np.float64)), Tensor(w.numpy().astype(np.float64)), padding=1).numpy()
    np.testing.assert_array_equal(product.numpy(), exact.astype(np.int32))
    expected = np.maximum(exact.astype(np.float32) * scale.numpy() - 3.0, 0)
    np.testing.assert_allclose(dequantized.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("lanes", [8, 16])
def test_a_bool_mask_read_from_memory_in_a_matmul_epilogue_widens_into_a_vector_mask(lanes):
    """A causal attention's scores filled with -inf where a stored bool mask says so: the tile's
    epilogue loads the mask's bytes as one vector and widens them into -1/0 lanes (it raised a
    KeyError rendering a bool vector load before)."""
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((2, 3, 8, 16)).astype(np.float32), rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    mask = np.tril(np.ones((8, 16), bool), 4)
    scores = (Tensor(q) @ Tensor(k).transpose(-1, -2)) * 0.25
    result = scores.masked_fill(Tensor(mask).logical_not().realize(), float("-inf"))
    renderer, program = program_of(result, lanes)
    assert program.vector_width == lanes and f"lg_bool{lanes}_unaligned" in renderer.render_program(program)
    expected = np.where(mask, (q @ k.transpose(0, 1, 3, 2)) * 0.25, -np.inf)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_a_scalar_that_a_mask_picks_leaves_the_loop_vectorizer_on():
    """Attention scores with a mask's fill value read from a one-element buffer (Swin's -100 on its
    shifted windows): the C compiler reads that element once, outside the loops, so it cannot
    become the masked load that keeps gcc's loop vectorizer off a kernel (renderer/c.py); a value a
    mask picks from a whole tensor still does. Each case computes numpy's values."""
    q, k, bias = realized((6, 49, 32)), realized((6, 32, 49), seed=1), realized((6, 49, 49), seed=2)
    masked = realized((49, 49), seed=3) > 0.5
    scores = q.numpy() @ k.numpy()
    for fill, fill_value in ((Tensor(np.array([-100.0], np.float32)).realize().reshape(()), -100.0), (bias, bias.numpy())):
        result = q @ k + masked.where(fill, 0.0)
        renderer, program = program_of(result, 16)
        assert program.select_only_loads is (fill is bias)
        assert ('optimize("no-tree-loop-vectorize")' in renderer.render_program(program)) is (fill is bias)
        expected = scores + np.where(masked.numpy(), fill_value, 0.0)
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-4)


def test_a_kernel_reading_a_stored_bool_mask_is_vectorized_by_the_compiler():
    """A causal softmax's normalization reads its stored mask as bytes (`unsigned char*`): gcc
    vectorizes no loop that loads a `_Bool` from memory, which left it scalar (8x4x128x128 scores, 2
    threads: 0.89 -> 0.12 ms). The compiled code multiplies packed floats where it multiplied one at
    a time (checked where the compiler is gcc on x86-64); an exported file keeps `bool*` in its
    signature. Values against numpy."""
    import platform
    scores = realized((2, 4, 16, 32))
    allowed = Tensor(np.tril(np.ones((16, 32), bool))).realize()
    result = (scores * 0.125).masked_fill(allowed.logical_not(), float("-inf")).softmax(-1)
    kernels = [item.kernel for item in create_schedule([result.lazydata]) if item.kernel is not None]
    normalize = next(kernel for kernel in kernels if not kernel.reduce_axes)
    source = CRenderer().render_program(linearize(merge_dims(normalize), CRenderer()))
    assert "const unsigned char* restrict" in source and "bool*" not in source
    exported = CRenderer(standalone=True)
    assert "const bool* restrict" in exported.render_program(linearize(merge_dims(normalize), exported))
    if platform.machine() in ("x86_64", "AMD64") and get_device("CPU").compiler.path.endswith("gcc"):
        assert re.search(r"\bv?mulps\b", get_device("CPU").compiler.assembly(source))
    values = np.where(np.tril(np.ones((16, 32), bool)), scores.numpy() * 0.125, -np.inf)
    expected = np.exp(values - values.max(-1, keepdims=True))
    np.testing.assert_allclose(result.numpy(), expected / expected.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_values_masks_pick_that_stay_put_along_a_long_last_axis_leave_the_loop_vectorizer_on():
    """A cross entropy's gradient over 256 classes: each row's gradient, picked where the class is the
    row's target, stays put along the classes (the last, innermost loop), so gcc reads it once before
    that loop and cannot make it a masked load: the kernel keeps the loop vectorizer (1024 x 4096, 2
    threads: 12.8 -> 1.9 ms). Two such picks by different masks in one kernel (gcc 12 once gave two
    masked loads one mask) are right too. Values against numpy."""
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(7)
    logits, labels = rng.standard_normal((64, 256)).astype(np.float32), rng.integers(0, 256, 64)
    x = Tensor(logits, requires_grad=True)
    F.cross_entropy(x, Tensor(labels)).backward()
    kernels = [item.kernel for item in create_schedule([x.grad.lazydata]) if item.kernel is not None]
    (gradient,) = [kernel for kernel in kernels if kernel.full_shape == (64, 256) and not kernel.reduce_axes]
    assert not linearize(merge_dims(gradient), CRenderer()).select_only_loads
    softmax = np.exp(logits - logits.max(1, keepdims=True))
    softmax /= softmax.sum(1, keepdims=True)
    np.testing.assert_allclose(x.grad.numpy(), (softmax - np.eye(256)[labels]) / 64, rtol=1e-5, atol=1e-7)

    first, second = rng.integers(0, 256, (64, 1)), rng.integers(0, 256, (64, 1))
    g1, g2 = rng.standard_normal((64, 1)).astype(np.float32), rng.standard_normal((64, 1)).astype(np.float32)
    classes = Tensor(np.arange(256)).realize()
    picked = ((Tensor(first) == classes).where(Tensor(g1), 0.0) + (Tensor(second) == classes).where(Tensor(g2), 0.0)) * 2
    (kernel,) = [item.kernel for item in create_schedule([picked.lazydata]) if item.kernel is not None]
    assert not linearize(merge_dims(kernel), CRenderer()).select_only_loads
    expected = (np.where(first == np.arange(256), g1, 0) + np.where(second == np.arange(256), g2, 0)) * 2
    np.testing.assert_array_equal(picked.numpy(), expected)


def test_a_quantize_dequantize_round_trip_is_written_as_vectors():
    """A padded channels-last value quantized to uint8 and back (an ONNX model's QDQ pair before a
    depthwise convolution): the uint8 values ride along as vectors of as many lanes and a quarter of the
    bytes, converted with __builtin_convertvector (linearize._carried_dtypes) through int32 vectors (two
    instructions: vcvttps2dq and vpmovdb); the kernel was scalar."""
    x = realized((1, 8, 8, 32))
    quantized = ((x / 0.05).round() + 7).clamp(0, 255).cast(dtypes.uint8)
    result = ((quantized.cast(dtypes.float32) - 7) * 0.05).pad(((0, 0), (1, 1), (1, 1), (0, 0)))
    for lanes in (8, 16):
        renderer, program = program_of(result, lanes, "E_")
        source = renderer.render_program(program)
        assert program.vector_width == lanes
        assert "__builtin_convertvector(" in source and f"lg_uchar{lanes}" in source
        # float32 to bytes and back through int32: gcc 12 converts them directly one lane at a time
        assert "__builtin_convertvector(__builtin_convertvector(" in source and f"lg_int{lanes})" in source
    rounded = np.clip(np.round(x.numpy() / np.float32(0.05)) + 7, 0, 255)
    expected = np.pad((rounded - 7) * np.float32(0.05), ((0, 0), (1, 1), (1, 1), (0, 0)))
    np.testing.assert_array_equal(result.numpy(), expected)


def test_a_narrow_integer_computed_on_stays_scalar():
    """uint8 values selected by a mask (a padding with a zero point known when the kernel runs): a
    comparison or select of uint8 vectors would give masks of other lanes than the float32 ones, so
    the kernel keeps scalar copies (vector lanes of uint8 made gcc refuse the source)."""
    values = np.random.default_rng(2).integers(0, 256, (1, 8, 8, 32)).astype(np.uint8)
    zero_point = Tensor(np.array(131, np.uint8)).realize()
    inside = Tensor.ones(1, 8, 8, 32, dtype=dtypes.bool).pad(((0, 0), (1, 1), (1, 1), (0, 0)))
    result = inside.where(Tensor(values).realize().pad(((0, 0), (1, 1), (1, 1), (0, 0))), zero_point)
    for lanes in (8, 16):
        assert program_of(result, lanes, "E_")[1].vector_width == 1
    np.testing.assert_array_equal(result.numpy(), np.pad(values, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=131))


def test_a_short_max_reduce_takes_no_declared_simd_reduction():
    """A max over rows of 16 or 33 contiguous floats is a plain loop: through the declared NaN-keeping
    reduction (`lg_max_float`) gcc combined each row's lanes one by one, 24x slower for 16. A max
    over one long row keeps the pragma (7x faster with it). Both keep a NaN, as numpy's max does."""
    rng = np.random.default_rng(3)
    for shape in ((64, 16), (64, 33), (1, 4096)):
        values = rng.standard_normal(shape).astype(np.float32)
        values[0, 3] = np.nan
        values[-1, -1] = np.nan
        result = Tensor(values).amax(-1)
        (item,) = [item for item in create_schedule([result.lazydata]) if item.kernel is not None]
        kernel, renderer = merge_dims(item.kernel), CRenderer()
        source = renderer.render_program(linearize(kernel, renderer, opts=heuristic_opts(kernel, renderer)))
        assert ("omp simd reduction(lg_max_float:" in source) == (shape[1] > 64), shape
        np.testing.assert_array_equal(result.numpy(), values.max(-1))
