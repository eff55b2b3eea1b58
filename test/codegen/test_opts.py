"""Opts: validation with reasons, the default heuristic's tiles, and random valid opt sequences on
random graphs, which must compute what the NPY device computes."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import lazygrad.realize as realize
import lazygrad.codegen.linearize as linearize_module
import lazygrad.tensor_methods.linalg as linalg
from lazygrad import Tensor, dtypes, no_grad, stats
from lazygrad.nn import functional as F
from lazygrad.ops import Ops
from lazygrad.codegen.axes import kernel_trackers, merge_dims
from lazygrad.renderer.c import CRenderer, parallel_loops
from lazygrad.renderer.loop_program import Loop
from lazygrad.renderer.cuda import CUDARenderer
from lazygrad.codegen.linearize import linearize
from lazygrad.renderer.opencl import OpenCLRenderer
from lazygrad.codegen.opts import Opt, OptError, apply_opt, apply_opts, candidate_opts, heuristic_opts, initial, \
    panel_tile
from lazygrad.schedule.fuse import create_schedule


def kernel_of(tensor: Tensor):
    (item,) = [item for item in create_schedule([tensor.lazydata]) if item.kernel is not None]
    return merge_dims(item.kernel)


def matmul_kernel(m=16, k=12, n=32):
    return kernel_of(Tensor(np.ones((m, k), np.float32)) @ Tensor(np.ones((k, n), np.float32)))


# ---- validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("opt,reason", [
    (Opt("UPCAST", 0, 5), "not divisible by 5"),
    (Opt("UPCAST", 2, 4), "is a reduce axis"),
    (Opt("UNROLL", 0, 4), "is a global axis"),
    (Opt("BLOCK", 0, 4), "is a global axis"),
    (Opt("UPCAST", 7, 2), "out of range"),
    (Opt("UPCAST", 1, 1), "at least 2"),
    (Opt("LOCAL", 0, 4), "needs a dialect with work-groups"),
    (Opt("SPLIT", 0, 4), "unknown opt"),
    (Opt("THREADS", 0, 0), "between 1 and"),
    (Opt("THREADS", 0, 65), "between 1 and"),
])
def test_a_refused_opt_says_why(opt, reason):
    with pytest.raises(OptError, match=reason):
        apply_opt(initial(matmul_kernel()), opt, CRenderer())


def test_upcasts_are_capped():
    kernel = kernel_of(Tensor(np.ones((64, 64), np.float32)) @ Tensor(np.ones((64, 64), np.float32)))
    with pytest.raises(OptError, match="outputs per iteration"):
        apply_opts(kernel, [Opt("UPCAST", 1, 32), Opt("UPCAST", 0, 16)], CRenderer())


def test_candidates_all_apply():
    optimized = initial(matmul_kernel())
    candidates = candidate_opts(optimized, CRenderer())
    assert Opt("UPCAST", 1, 32) in candidates and Opt("UNROLL", 2, 4) in candidates
    for opt in candidates:
        apply_opt(optimized, opt, CRenderer())


# ---- the heuristic ------------------------------------------------------------------------------

def test_matmul_tiles_columns_by_32_and_rows_by_8():
    assert heuristic_opts(matmul_kernel(), CRenderer()) == [Opt("UPCAST", 1, 32), Opt("UPCAST", 0, 8)]


def test_matmul_rows_that_8_does_not_divide_take_7_where_it_does():
    """196 or 49 rows (a stride-2 convolution's input gradient over 14x14 or 7x7 positions): 7 rows
    by 32 columns, 14 accumulators, where 4 rows left the fma units waiting (ResNet-18's training
    step at batch 16, one thread: 196 x 256 by 256 x 1152 per image 33 -> 18 ms, 49 rows 25 -> 18)."""
    a = np.random.default_rng(8).standard_normal((196, 64)).astype(np.float32)
    b = np.random.default_rng(9).standard_normal((64, 64)).astype(np.float32)
    product = Tensor(a) @ Tensor(b)
    assert heuristic_opts(kernel_of(product), CRenderer()) == [Opt("UPCAST", 1, 32), Opt("UPCAST", 0, 7)]
    np.testing.assert_allclose(product.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def last_kernel_of(tensor: Tensor):
    """The last kernel of a schedule (dim-merged) and how many kernels there are."""
    items = [item for item in create_schedule([tensor.lazydata]) if item.kernel is not None]
    return merge_dims(items[-1].kernel), len(items)


def product_kernel_of(tensor: Tensor):
    """The one reduce kernel of a schedule (dim-merged) and how many kernels there are."""
    items = [item for item in create_schedule([tensor.lazydata]) if item.kernel is not None]
    (kernel,) = [item.kernel for item in items if item.kernel.reduce_axes]
    return merge_dims(kernel), len(items)


AVX2 = CRenderer(simd_lanes=8, simd_registers=16)
AVX512 = CRenderer(simd_lanes=16, simd_registers=32)


@pytest.fixture
def avx2_panels(monkeypatch):
    """Matmul operands packed into AVX2's panels (6 x 16, linalg.panel_shape), whatever this CPU's
    vector registers: the tests that use it read a packed product's opts under AVX2's tiles."""
    monkeypatch.setattr(linalg, "panel_shape", lambda device: panel_tile(AVX2))


def test_tiles_keep_their_accumulators_within_the_vector_registers():
    """With 16 registers of 8 floats (AVX2) a 32 x 8 tile would need 32 registers for its sums, and
    16 x 8 all 16, spilling: a matmul takes the widest vector of which 2 rows fit beside 4 registers
    for its operands, then as many rows as fit there, 32 x 2 (attention's 8x12 heads of 128x128 @
    128x32, two threads: 1.89 -> 1.36 ms from 16 x 8); AVX-512 keeps 32 x 8. A row of 7 columns
    (a convolution with channels in the middle: 12 output channels make no panel of 16) takes three
    registers (4 + 2 + 1), so 4 output channels (ResNet-18's last stage when it computed so: 82 ms
    untiled, 11 ms); AVX-512 takes 6, the most of the row choices that divides 12."""
    assert heuristic_opts(matmul_kernel(), AVX2) == [Opt("UPCAST", 1, 32), Opt("UPCAST", 0, 2)]
    assert heuristic_opts(matmul_kernel(), CRenderer()) == [Opt("UPCAST", 1, 32), Opt("UPCAST", 0, 8)]
    x = Tensor(np.ones((1, 16, 9, 9), np.float32))
    w = Tensor(np.ones((12, 16, 3, 3), np.float32))
    assert heuristic_opts(kernel_of(x.conv2d(w)), AVX2) == [Opt("UPCAST", 2, 7), Opt("UPCAST", 0, 4)]
    assert heuristic_opts(kernel_of(x.conv2d(w)), CRenderer()) == [Opt("UPCAST", 2, 7), Opt("UPCAST", 0, 6)]


def test_strided_convolutions_tile_the_columns_their_input_skips_along():
    """The input is read every second column: no load walks the columns contiguously, but a tile of
    them still reuses each weight from a register (ResNet-18's first layer, AVX2: 68 -> 5.8 ms). (With
    whole panels of 16 output channels such a convolution computes them last instead.)"""
    x = Tensor(np.ones((1, 3, 38, 38), np.float32))
    w = Tensor(np.ones((8, 3, 7, 7), np.float32))
    assert heuristic_opts(kernel_of(x.conv2d(w, stride=2)), AVX2) == [Opt("UPCAST", 2, 16), Opt("UPCAST", 0, 8)]
    x = Tensor(np.ones((1, 8, 56, 56), np.float32))
    w = Tensor(np.ones((8, 8, 1, 1), np.float32))
    assert heuristic_opts(kernel_of(x.conv2d(w, stride=2)), AVX2)[:2] == [Opt("UPCAST", 2, 28), Opt("UPCAST", 0, 2)]


def test_pointwise_convolutions_over_rows_no_power_of_two_divides_take_a_convolution_width():
    """A 1x1 convolution with its channels in the middle (output channels that whole panels of 16 do
    not divide) is a matmul over pixels: 14x14 = 196 takes 28 columns (MobileNetV2's 96 -> 576
    channels, AVX2: 1.1 ms untiled, 0.55 ms as 28 x 4; 32 -> 64 channels 0.029 ms as 28 x 2, 0.032 as
    28 x 4); 7x7 = 49 keeps linearize's loops (7 columns: 2-3x slower)."""
    w = Tensor(np.ones((12, 32, 1, 1), np.float32))
    assert heuristic_opts(kernel_of(Tensor(np.ones((1, 32, 14, 14), np.float32)).conv2d(w)), AVX2) == \
        [Opt("UPCAST", 1, 28), Opt("UPCAST", 0, 2)]
    assert heuristic_opts(kernel_of(Tensor(np.ones((1, 32, 7, 7), np.float32)).conv2d(w)), AVX2) == []


def test_the_cpu_renderer_takes_the_machines_vector_registers():
    from lazygrad.devices.cpu import simd_registers
    assert simd_registers({"sse2", "avx", "avx2", "fma"}, "x86_64") == (8, 16)
    assert simd_registers({"avx2", "avx512f", "avx512bw"}, "x86_64") == (16, 32)
    assert simd_registers({"fp", "asimd"}, "aarch64") == (4, 32)
    assert simd_registers(set(), "x86_64") == (4, 16)
    renderer = realize.renderer_for("CPU")
    assert (renderer.simd_lanes, renderer.simd_registers) == realize.get_device("CPU").simd


def test_conv2d_tiles_output_channels_and_columns():
    """A small padded input is read through its windows with masked loads: 16 columns by 16
    output channels (here 8 by 8, the sizes), several times faster than 32 x 8 on such loads."""
    x = Tensor(np.ones((2, 4, 8, 8), np.float32))
    w = Tensor(np.ones((8, 4, 3, 3), np.float32))
    assert heuristic_opts(kernel_of(x.conv2d(w, padding=1)), CRenderer()) == [Opt("UPCAST", 3, 8), Opt("UPCAST", 1, 8)]


def test_conv2d_of_a_large_padded_input_copies_it_and_tiles_32_by_8():
    """The padded input is stored once (schedule/fuse.py `worth_storing_padded`), so the convolution's loads
    are plain and it takes 32 columns by 8 output channels, as a matmul. conv2d 32x16x32x32 by
    32x16x3x3, padding 1 (bench_kernels, medians of 10 runs alternating with the old code): 7.0 ms
    before (masked loads, 16 x 16), 3.1 ms after (0.2 ms copy + 2.7 ms convolution); torch with 2
    threads 6.7 ms (2.3 to 2.9 ms in a few runs)."""
    x = Tensor(np.ones((4, 16, 32, 32), np.float32))
    w = Tensor(np.ones((32, 16, 3, 3), np.float32))
    kernel, kernel_count = last_kernel_of(x.conv2d(w, padding=1))
    assert kernel_count == 2
    loads = [node for node in kernel.ast.walk() if node.op is Ops.LOAD]
    assert all(view.mask is None for load in loads for view in load.arg[1].views)
    assert heuristic_opts(kernel, CRenderer()) == [Opt("UPCAST", 3, 32), Opt("UPCAST", 1, 8)]


@pytest.mark.parametrize("channels, amount", [(32, 32), (48, 16), (24, 8)])
def test_a_channels_last_padded_copy_is_computed_in_vectors_of_channels(channels, amount):
    """A padded copy of a channels-last value, its padding along rows and columns only, takes vectors
    along its channels (`contiguous_vector_tile`): two, one, or half of one (24 channels, ShuffleNetV2's
    first max pool: 0.11 -> 0.017 ms), since gcc's own vectorizer is kept out of padded reads."""
    x = np.arange(1 * 6 * 6 * channels, dtype=np.float32).reshape(1, 6, 6, channels)
    padded = Tensor(x).pad(((0, 0), (1, 1), (1, 1), (0, 0))) * 2
    kernel = kernel_of(padded)
    assert Opt("UPCAST", len(kernel.full_shape) - 1, amount) in heuristic_opts(kernel, CRenderer(16, 32))
    np.testing.assert_array_equal(padded.numpy(), np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))) * 2)


@pytest.mark.parametrize("columns", [24, 72])
def test_on_avx512_a_matmul_of_24_columns_takes_them_in_one_tile(columns):
    """24 columns (16 + 8 lanes), which 16 does not divide, go into the tile whole instead of three
    tiles of 8 (2 threads, kernel alone: 3136x144 @ 144x24 0.21 -> 0.13 ms); AVX2 keeps 8."""
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((3136, 144)).astype(np.float32), rng.standard_normal((144, columns)).astype(np.float32)
    result = (Tensor(a) * 1.0) @ (Tensor(b) * 1.0)
    kernel, _ = last_kernel_of(result)
    assert heuristic_opts(kernel, AVX512)[:2] == [Opt("UPCAST", 1, 24), Opt("UPCAST", 0, 8)]
    assert heuristic_opts(kernel, AVX2)[0] == Opt("UPCAST", 1, 8)
    np.testing.assert_allclose(result.numpy(), a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("channels, amount", [(144, 16), (192, 32)])
def test_a_select_of_loads_is_computed_in_vectors_of_channels(channels, amount):
    """A ReLU6 gradient through a batch norm's, channels last: its gradient load feeds only a select,
    which keeps gcc's loop vectorizer off that kernel (renderer/c.py MASKED_LOAD_ATTRIBUTE), so its
    channels take vectors (`contiguous_vector_tile`) as a padded copy's do: MobileNetV2's at 12544 x 144,
    2 threads, 1.24 -> 0.65 ms, where it ran one element at a time."""
    rng = np.random.default_rng(7)
    out, grad = rng.uniform(-2, 8, (2, 7, 7, channels)).astype(np.float32), rng.standard_normal((2, 7, 7, channels)).astype(np.float32)
    scale = rng.standard_normal(channels).astype(np.float32)
    result = ((Tensor(out) <= 0) | (Tensor(out) >= 6)).where(0, Tensor(grad)) * Tensor(scale)
    kernel = kernel_of(result)
    assert heuristic_opts(kernel, CRenderer(16, 32)) == [Opt("UPCAST", len(kernel.full_shape) - 1, amount)]
    np.testing.assert_array_equal(result.numpy(), np.where((out <= 0) | (out >= 6), 0, grad) * scale)


def test_a_channels_last_value_padded_only_along_its_rows_is_stored_with_its_padding():
    """A 3x1 convolution of a value computed channels last (a 1x1 convolution's output), padded along
    its rows only, over 8 columns: its padded input is stored (schedule/fuse.py `worth_storing_padded`),
    though its unpadded last axis would fill vectors, since the product broadcasts one input value at
    a time, each tested alone through the view (Inception-v3's 3x1 convolutions over 384 channels at
    8x8: 1.1-1.3 ms reading the view, 0.44-0.53 reading the copy)."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 32, 8, 8)).astype(np.float32)
    w1, w2 = rng.standard_normal((64, 32, 1, 1)).astype(np.float32), rng.standard_normal((64, 64, 3, 1)).astype(np.float32)
    out = Tensor(x).conv2d(Tensor(w1)).conv2d(Tensor(w2), padding=(1, 0))
    items = [item for item in create_schedule([out.lazydata]) if item.kernel is not None]
    products = [item.kernel for item in items if item.kernel.reduce_axes]
    loads = [node for node in products[-1].ast.walk() if node.op is Ops.LOAD]
    assert all(view.mask is None for load in loads for view in load.arg[1].views)
    first = np.einsum("oc,chw->ohw", w1[:, :, 0, 0], x[0])
    padded = np.pad(first, ((0, 0), (1, 1), (0, 0)))
    expected = sum(np.einsum("oc,chw->ohw", w2[:, :, tap, 0], padded[:, tap:tap + 8]) for tap in range(3))
    np.testing.assert_allclose(out.numpy()[0], expected, rtol=1e-4, atol=1e-4)


def test_a_convolution_of_a_padded_view_gets_the_same_kernel_as_one_given_padding(direct_convolutions):
    """lazygrad.onnx pads the input itself, then convolves without padding; nn.Conv2d passes the
    padding. Both reach the same schedule: the padded input stored, the weight copied into panels,
    the same tiled product."""
    x = Tensor(np.ones((1, 64, 14, 14), np.float32))
    w = Tensor(np.ones((64, 64, 3, 3), np.float32))
    given, given_count = product_kernel_of(x.conv2d(w, padding=1))
    viewed, viewed_count = product_kernel_of(x.pad(((0, 0), (0, 0), (1, 1), (1, 1))).conv2d(w))
    assert given_count == viewed_count
    assert given.ast is viewed.ast and given.full_shape == viewed.full_shape
    assert heuristic_opts(given, CRenderer()) == heuristic_opts(viewed, CRenderer()) != []


@pytest.mark.parametrize("size, columns", [(7, 7), (14, 7), (28, 7), (56, 7), (16, 8)])
def test_a_convolution_with_wide_windows_tiles_output_channels_by_columns(size, columns, direct_convolutions):
    """64 channels by 3x3 or more computes with the output channels last, from the weight copied
    into panels of 16 (nn/spatial.py `_output_channels_last_product`): the tile is those 16 channels
    by a run of 7 columns where 7 divides them, else 8 (ResNet-18's 512x512x3x3 at 7x7, AVX2, 2
    threads: 7.5 ms with 7 columns by 4 channels, 3.0 ms; 64x64x3x3 at 56x56: 16 x 8 90 GFLOP/s,
    16 x 7 112)."""
    x = Tensor(np.ones((1, 64, size, size), np.float32))
    w = Tensor(np.ones((32, 64, 3, 3), np.float32))
    kernel, count = product_kernel_of(x.conv2d(w, padding=1))
    assert kernel.full_shape[:4] == (size, size, 2, 16)
    assert heuristic_opts(kernel, AVX2) == [Opt("UPCAST", 3, 16), Opt("UPCAST", 1, columns)]
    assert count == 4  # the padded input, the weight's panels, the product, its (N, C, H, W) copy


def test_avx512_takes_two_groups_of_output_channels_by_a_run_of_columns(direct_convolutions):
    """With 32 registers, 16 output channels by 7 columns (7 accumulators) become 2 groups of 16 by 7
    (`_channel_group`): each input value feeds twice the fmas. Inception-v3's 5x5 convolutions, 48
    -> 64 channels at 35x35, kernel alone 0.85-1.11 -> 0.65-0.85 ms. AVX2 keeps its tile (16
    channels are 2 of its vectors already); 17 columns leave no room on either."""
    rng = np.random.default_rng(9)
    x_value, w_value = rng.standard_normal((1, 48, 35, 35)).astype(np.float32), rng.standard_normal((64, 48, 5, 5)).astype(np.float32)
    out = Tensor(x_value).conv2d(Tensor(w_value), padding=2)
    kernel, _ = product_kernel_of(out)
    assert heuristic_opts(kernel, AVX512) == [Opt("UPCAST", 3, 16), Opt("UPCAST", 2, 2), Opt("UPCAST", 1, 7)]
    assert heuristic_opts(kernel, AVX2) == [Opt("UPCAST", 3, 16), Opt("UPCAST", 1, 7)]
    wide, _ = product_kernel_of(Tensor(np.ones((1, 192, 17, 17), np.float32)).conv2d(Tensor(np.ones((192, 192, 1, 7), np.float32)), padding=(0, 3)))
    assert [opt.amount for opt in heuristic_opts(wide, AVX512)] == [16, 17]
    padded = np.pad(x_value[0], ((0, 0), (2, 2), (2, 2)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (5, 5), axis=(1, 2))  # (48, 35, 35, 5, 5)
    np.testing.assert_allclose(out.numpy()[0], np.einsum("chwij,ocij->ohw", windows, w_value), rtol=1e-4, atol=1e-3)


def test_a_1x1_convolution_in_half_vectors_of_channels_takes_all_its_channel_groups():
    """A 1x1 convolution to 24 channels computed channels last (MobileNetV2's projections): its
    channels are panels of 8, half an AVX-512 vector, so its tile of 8 channels by 8 positions takes
    the 3 groups too (`_channel_group`; the training step's 144 -> 24 channels at 28x28, kernel alone,
    0.78 -> 0.46 ms). 16 channels (a whole vector) keep their tile."""
    rng = np.random.default_rng(15)
    x_value = rng.standard_normal((1, 144, 28, 28)).astype(np.float32)
    w_value = rng.standard_normal((24, 144, 1, 1)).astype(np.float32)
    out = Tensor(x_value).conv2d(Tensor(w_value))
    kernel, _ = product_kernel_of(out)
    assert kernel.full_shape == (784, 3, 8, 144, 1)
    assert heuristic_opts(kernel, AVX512) == [Opt("UPCAST", 2, 8), Opt("UPCAST", 1, 3), Opt("UPCAST", 0, 8)]
    np.testing.assert_allclose(out.numpy()[0], np.einsum("chw,oc->ohw", x_value[0], w_value[:, :, 0, 0]), rtol=1e-4, atol=1e-3)
    whole, _ = product_kernel_of(Tensor(x_value).conv2d(Tensor(rng.standard_normal((32, 144, 1, 1)).astype(np.float32))))
    assert all(opt.amount != 2 for opt in heuristic_opts(whole, AVX512) if opt.op == "UPCAST")


def test_a_convolution_whose_rows_make_no_vectors_computes_output_channels_last():
    """SqueezeNet's 3x3 convolutions, 16 -> 64 channels over 55x55 positions: small windows (144
    elements) keep channels in the middle where their rows make vectors (56 columns), but 55 would
    be tiled as 11 scalar columns (1.74-1.96 ms); channels last, 16 channels by 11 positions, 0.55
    with the copy back. The values match numpy either way."""
    rng = np.random.default_rng(4)
    w_value = rng.standard_normal((64, 16, 3, 3)).astype(np.float32)
    for size, channels_last in ((55, True), (56, False)):
        x_value = rng.standard_normal((1, 16, size, size)).astype(np.float32)
        out = Tensor(x_value).conv2d(Tensor(w_value), padding=1)
        kernel, _ = product_kernel_of(out)
        assert (kernel.full_shape[:4] == (size, size, 4, 16)) == channels_last, kernel.full_shape
        padded = np.pad(x_value, ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
        np.testing.assert_allclose(out.numpy(), np.einsum("nchwij,kcij->nkhw", windows, w_value), rtol=1e-4, atol=1e-4)


def test_output_channels_a_panel_does_not_divide_are_padded_to_whole_panels_when_few_are_added():
    """SqueezeNet's last convolution, 512 -> 1000 channels at 13x13: computed as 1008 channels in
    panels of 16 (whole AVX-512 vectors; 2.8 ms in panels of 8, 1.5 so), the 8 zero channels cut
    off after. 24 channels would take a third more: they keep panels of 8. 230 channels, which not
    even half panels divide, compute channels last too, as 240 (R(2+1)D's, a third of the speed
    with channels in the middle, in tiles of 2 channels). Values match numpy."""
    rng = np.random.default_rng(5)
    for out_channels, panel in ((1000, (63, 16)), (24, (3, 8)), (230, (15, 16))):
        x_value = rng.standard_normal((1, 32, 13, 13)).astype(np.float32)
        w_value = rng.standard_normal((out_channels, 32, 1, 1)).astype(np.float32)
        out = Tensor(x_value).conv2d(Tensor(w_value))
        kernel, _ = product_kernel_of(out)
        assert panel in zip(kernel.full_shape, kernel.full_shape[1:]), kernel.full_shape  # (panels, channels each)
        np.testing.assert_allclose(out.numpy(), np.einsum("nchw,kc->nkhw", x_value, w_value[:, :, 0, 0]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("length, channels_last", [(3000, True), (1024, False)])
def test_a_1d_convolution_whose_rows_take_no_whole_vectors_computes_output_channels_last(length, channels_last):
    """A 1-D convolution over 3000 positions (an audio model's), 64 -> 64 channels, kernel 5: with
    channels in the middle its tile would take runs of 30 columns, which no vector divides (0.89 ms,
    2 threads); channels last, 16 channels by 4 positions (0.33 ms). 1024 positions take runs of 32
    and keep that layout. Values match numpy either way."""
    rng = np.random.default_rng(7)
    x_value = rng.standard_normal((1, 64, length)).astype(np.float32)
    w_value = rng.standard_normal((64, 64, 5)).astype(np.float32)
    out = Tensor(x_value).conv1d(Tensor(w_value), padding=2)
    kernel, _ = product_kernel_of(out)
    assert (kernel.full_shape[:3] == (length, 4, 16)) == channels_last, kernel.full_shape
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x_value, ((0, 0), (0, 0), (2, 2))), 5, axis=2)
    np.testing.assert_allclose(out.numpy(), np.einsum("nclk,ock->nol", windows, w_value), rtol=1e-4, atol=1e-3)


def test_a_convolution_of_an_input_computed_channels_last_computes_output_channels_last():
    """A 3x3 convolution, 16 -> 32 channels at 28x28 (144 window elements), keeps its channels in the
    middle on an input stored that way, but reading a ReLU of a channels-last 1x1 convolution it
    computes channels last too: it reads that input along its channels as stored, where the other
    layout copies it across them first (2 threads, with the 1x1 convolution: 0.25 -> 0.12 ms at
    56x56; R(2+1)D's temporal 3x1x1 convolutions 29 -> 17 ms). Values match numpy."""
    rng = np.random.default_rng(8)
    x_value = rng.standard_normal((1, 16, 28, 28)).astype(np.float32)
    first, second = (rng.standard_normal(shape).astype(np.float32) for shape in ((16, 16, 1, 1), (32, 16, 3, 3)))
    x = Tensor(x_value)
    kernel, _ = product_kernel_of(x.conv2d(Tensor(second), padding=1))
    assert kernel.full_shape[:3] == (32, 28, 28)
    out = x.conv2d(Tensor(first)).relu().conv2d(Tensor(second), padding=1)
    items = [item for item in create_schedule([out.lazydata]) if item.kernel is not None and item.kernel.reduce_axes]
    assert [merge_dims(item.kernel).full_shape[:4] for item in items] == [(784, 16, 16, 1), (28, 28, 2, 16)]
    hidden = np.maximum(np.einsum("nchw,oc->nohw", x_value, first[:, :, 0, 0]), 0)
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(hidden, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
    np.testing.assert_allclose(out.numpy(), np.einsum("nchwij,ocij->nohw", windows, second), rtol=1e-4, atol=1e-3)


def test_a_convolution_whose_columns_no_tile_divides_computes_whole_tiles_of_columns():
    """SqueezeNet 1.0's first convolution, 3 -> 96 channels 7x7 with stride 2 over 224 columns: 109
    output columns, a prime, which no tile's row count divides, so its tile was one column by the six
    panels of output channels (2.7 ms, 2 threads); computed as 112, the input read with zeros past
    its last column and the 3 extra columns cut off, 8 columns by a panel (1.5 ms with that copy).
    A product of little work a position (3 -> 32 channels 3x3) keeps its 109. Values match numpy."""
    rng = np.random.default_rng(12)
    x_value = rng.standard_normal((1, 3, 13, 224)).astype(np.float32)
    for out_channels, size, columns in ((96, 7, 112), (32, 3, 111)):
        w_value = rng.standard_normal((out_channels, 3, size, size)).astype(np.float32)
        out = Tensor(x_value).conv2d(Tensor(w_value), stride=2)
        kernel, _ = product_kernel_of(out)
        assert kernel.full_shape[1] == columns, kernel.full_shape
        windows = np.lib.stride_tricks.sliding_window_view(x_value, (size, size), axis=(2, 3))[:, :, ::2, ::2]
        np.testing.assert_allclose(out.numpy(), np.einsum("nchwij,ocij->nohw", windows, w_value), rtol=1e-4, atol=1e-3)


def test_an_unpadded_convolution_of_a_channels_last_value_reduces_over_the_channels_innermost():
    """A 3x3 convolution without padding (Inception-v3's valid ones, a band of a dilated one) of a
    ReLU of a channels-last 1x1 convolution: its reduce takes the kernel positions, then the
    channels, so consecutive steps read neighbouring values of that channels-last value, as for a
    padded input (with the channels outermost each step jumped by a whole row of channels: a band
    of DeepLabV3's 2048-channel convolution at 16x16, 43 -> 6 ms). Values match numpy."""
    rng = np.random.default_rng(13)
    x_value = rng.standard_normal((1, 16, 9, 9)).astype(np.float32)
    first, second = (rng.standard_normal(shape).astype(np.float32) for shape in ((32, 16, 1, 1), (32, 32, 3, 3)))
    out = Tensor(x_value).conv2d(Tensor(first)).relu().conv2d(Tensor(second))
    items = [item for item in create_schedule([out.lazydata]) if item.kernel is not None and item.kernel.reduce_axes]
    assert merge_dims(items[-1].kernel).full_shape == (7, 7, 2, 16, 3, 3, 32)
    hidden = np.maximum(np.einsum("nchw,oc->nohw", x_value, first[:, :, 0, 0]), 0)
    windows = np.lib.stride_tricks.sliding_window_view(hidden, (3, 3), axis=(2, 3))
    np.testing.assert_allclose(out.numpy(), np.einsum("nchwij,ocij->nohw", windows, second), rtol=1e-4, atol=1e-3)


def test_a_grouped_convolution_without_gradients_computes_each_groups_output_channels_last():
    """RegNetX's and ResNeXt's grouped 3x3 convolutions (16 or more output channels a group): with
    channels in the middle the tile's vector was a run of 14 or 7 columns and its rows a group's
    channels (408 channels in 17 groups at 14x14, 2 threads: 0.35 ms); channels last, a panel of each
    group's output channels by a run of columns (0.21; RegNetX-1.6GF 18.3 -> 14.2 ms). 8 channels a
    group keep the other layout (256 in 32 groups at 28x28: 0.26 ms, 0.39 so), and so does a
    convolution whose gradient is taken. Values match numpy."""
    rng = np.random.default_rng(10)
    x_value = rng.standard_normal((1, 64, 14, 14)).astype(np.float32)
    for out_channels, trained, channels_last in ((64, False, True), (32, False, False), (64, True, False)):
        w_value = rng.standard_normal((out_channels, 16, 3, 3)).astype(np.float32)
        w = Tensor(w_value, requires_grad=trained)
        out = Tensor(x_value).conv2d(w, padding=1, groups=4)
        kernel, _ = product_kernel_of(out)
        assert (kernel.full_shape[:4] == (14, 14, 4, out_channels // 4)) == channels_last, kernel.full_shape
        windows = np.lib.stride_tricks.sliding_window_view(np.pad(x_value, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3),
                                                           axis=(2, 3)).reshape(1, 4, 16, 14, 14, 3, 3)
        expected = np.einsum("ngchwij,gocij->ngohw", windows, w_value.reshape(4, out_channels // 4, 16, 3, 3))
        np.testing.assert_allclose(out.numpy(), expected.reshape(1, out_channels, 14, 14), rtol=1e-4, atol=1e-3)


def test_a_strided_convolution_computes_output_channels_last():
    """ResNet's downsampling, 1x1 with stride 2: channels in the middle, the tile's vector of columns
    is gathered from every other input column (16x64x56x56 by 128x64: 9.7 ms, 28 x 2); channels
    last, 16 output channels by 4 columns each broadcast (4.3 ms). Its first layer, 3x7x7 with
    stride 2, narrow windows: 4.0-5.6 -> 2.7 ms at batch 1 as 16 x 7."""
    x = Tensor(np.ones((1, 64, 56, 56), np.float32))
    w = Tensor(np.ones((128, 64, 1, 1), np.float32))
    kernel, count = product_kernel_of(x.conv2d(w, stride=2))
    assert kernel.full_shape[:4] == (28, 28, 8, 16)
    assert heuristic_opts(kernel, AVX2) == [Opt("UPCAST", 3, 16), Opt("UPCAST", 1, 4)]
    assert count == 3  # the weight's panels, the product, its (N, C, H, W) copy
    kernel, _ = product_kernel_of(x.conv2d(w))  # unstrided 1x1: channels last too (see below)
    assert kernel.full_shape[:3] == (3136, 8, 16)
    stem = Tensor(np.ones((64, 3, 7, 7), np.float32))
    kernel, _ = product_kernel_of(Tensor(np.ones((1, 3, 224, 224), np.float32)).conv2d(stem, stride=2, padding=3))
    assert kernel.full_shape[:4] == (112, 112, 4, 16)
    assert heuristic_opts(kernel, AVX2) == [Opt("UPCAST", 3, 16), Opt("UPCAST", 1, 7)]


def test_a_1x1_convolution_with_a_small_weight_runs_its_channel_rows_inside_the_pixels():
    """A 1x1 convolution to 20 channels at 56x56 (channels in the middle: no panel of 8 or 16 divides
    them): the weight fits in L1 and the input does not, so a PANEL of the whole output-channel axis
    runs the row tiles inside the loop over pixel tiles and the input is read once (MobileNetV2's
    96 -> 24 channels when they computed so, AVX2, 2 threads: 0.52 -> 0.32 ms). A weight beyond 4096
    elements keeps the rows outside."""
    x = Tensor(np.ones((1, 96, 56, 56), np.float32))
    kernel = kernel_of(x.conv2d(Tensor(np.ones((20, 96, 1, 1), np.float32))))
    assert heuristic_opts(kernel, AVX2) == [Opt("UPCAST", 1, 32), Opt("UPCAST", 0, 2), Opt("PANEL", 0, 10)]
    kernel = kernel_of(x.conv2d(Tensor(np.ones((50, 96, 1, 1), np.float32))))
    assert heuristic_opts(kernel, AVX2) == [Opt("UPCAST", 1, 32), Opt("UPCAST", 0, 2)]
    rng = np.random.default_rng(5)
    x_value, w_value = rng.standard_normal((1, 96, 56, 56), np.float32), rng.standard_normal((20, 96), np.float32)
    out = Tensor(x_value).conv2d(Tensor(w_value.reshape(20, 96, 1, 1))).numpy()
    np.testing.assert_allclose(out, np.einsum("oc,nchw->nohw", w_value, x_value), rtol=1e-4, atol=1e-4)


def test_the_panels_of_a_packed_matmul_are_a_register_tile_that_fits_the_cpu():
    """Two vectors of columns by the most rows whose accumulators leave three registers free."""
    assert panel_tile(AVX2) == (6, 16)
    assert panel_tile(AVX512) == (8, 32)  # AVX-512
    assert panel_tile(CRenderer(simd_lanes=4, simd_registers=32)) == (8, 8)    # Arm NEON
    assert panel_tile(CRenderer(simd_lanes=4, simd_registers=16)) == (6, 8)    # SSE


def test_a_1x1_convolution_over_few_positions_is_a_matmul_in_panels(monkeypatch):
    """MobileNetV2's 7x7 and 14x14 1x1 convolutions (nn/spatial.py `_pointwise_product`): a tile
    of positions by a panel of output channels, as a matmul's (8 x 32 with AVX-512, 6 x 16 with
    AVX2), here 7 x 32: 49 positions are read as 7 tiles of 7 rows of a row-major copy (from NCHW),
    not packed; at 56x56 a product with its output channels last."""
    monkeypatch.setattr(linalg, "panel_shape", lambda device: (8, 32))
    w = Tensor(np.ones((320, 160, 1, 1), np.float32))
    kernel, count = product_kernel_of(Tensor(np.ones((1, 160, 7, 7), np.float32)).conv2d(w))
    assert kernel.full_shape[:3] == (49, 10, 32)
    assert count == 4  # the positions' row-major copy, the weight's panels, the product, its (N, C, H, W) copy
    assert heuristic_opts(kernel, AVX512) == [Opt("UPCAST", 2, 32), Opt("UPCAST", 0, 7)]
    kernel, _ = product_kernel_of(Tensor(np.ones((1, 160, 56, 56), np.float32)).conv2d(w))
    assert kernel.full_shape[:3] == (3136, 20, 16)


def test_a_1x1_convolution_over_many_positions_computes_output_channels_last():
    """MobileNetV2's 1x1 convolutions before each depthwise one (24 -> 144 channels at 56x56): output
    channels last, so the depthwise convolution, which computes channels last too, copies its input
    without a transpose (nn/spatial.py); 16 output channels by 4 positions on AVX2."""
    x = Tensor(np.ones((1, 24, 56, 56), np.float32))
    kernel, count = product_kernel_of(x.conv2d(Tensor(np.ones((144, 24, 1, 1), np.float32))))
    assert kernel.full_shape[:3] == (3136, 9, 16) and count == 3  # the weight's panels, the product, its NCHW copy
    assert heuristic_opts(kernel, AVX2) == [Opt("UPCAST", 2, 16), Opt("UPCAST", 0, 4)]


@pytest.mark.parametrize("batch, channels, size, panel", [(1, 512, 7, Opt("PANEL", 0, 7)), (1, 256, 14, Opt("PANEL", 0, 14)),
                                                          (2, 512, 7, Opt("PANEL", 0, 2)), (1, 128, 28, None),
                                                          (1, 64, 56, None), (16, 256, 14, None)])
def test_a_convolution_with_a_large_weight_runs_each_channel_panel_over_all_its_rows(batch, channels, size, panel):
    """A weight beyond L2 (1 MiB) is read once per output row unless the rows run inside the loop
    over output-channel panels (AVX2, 2 threads, 1x512x7x7 by 512x512x3x3: 3.24 -> 2.57 ms); one that
    fits keeps its rows outside (1x64x56x56 by 64: 2.06 -> 2.36 ms with them inside), and so does
    one whose input does not fit (16x256x14x14 by 256: 29.5 -> 37.1 ms with the images inside)."""
    x = Tensor(np.ones((batch, channels, size, size), np.float32))
    w = Tensor(np.ones((channels, channels, 3, 3), np.float32)).requires_grad_()  # trained: direct, not Winograd
    kernel, _ = product_kernel_of(x.conv2d(w, padding=1))
    opts = heuristic_opts(kernel, AVX2)
    assert opts[:2] == [Opt("UPCAST", 3 + (batch > 1), 16), Opt("UPCAST", 1 + (batch > 1), 7)]
    assert opts[2:] == ([] if panel is None else [panel])


def test_conv2d_rows_that_no_power_of_two_divides_still_get_a_tile():
    """28 or 14 columns (MNIST, late ResNet layers) take the whole row as the vector: conv2d
    16x32x28x28 by 64x32x3x3 ran 105 ms without a tile and 7 ms with 28 x 8."""
    w = Tensor(np.ones((8, 4, 3, 3), np.float32))
    for size, columns in ((30, 28), (16, 14), (58, 28)):
        x = Tensor(np.ones((2, 4, size, size), np.float32))
        assert heuristic_opts(kernel_of(x.conv2d(w)), CRenderer()) == [Opt("UPCAST", 3, columns), Opt("UPCAST", 1, 8)]


def test_only_convolution_tiles_turn_off_predictive_commoning():
    """gcc's predictive commoning rebuilds a convolution tile's overlapping window loads from
    scalars (6.6 ms against 2.7 ms); a matmul's source stays as it was."""
    x = Tensor(np.ones((2, 4, 30, 30), np.float32))
    w = Tensor(np.ones((8, 4, 3, 3), np.float32))
    renderer = CRenderer()
    conv_source = renderer.render_program(linearize(kernel_of(x.conv2d(w)), renderer))
    matmul_source = renderer.render_program(linearize(matmul_kernel(), renderer))
    assert '"no-predictive-commoning"' in conv_source
    assert "predictive" not in matmul_source and 'optimize("no-tree-loop-vectorize")' in matmul_source


def test_elementwise_kernels_get_no_tile():
    x = Tensor(np.ones((64, 64), np.float32))
    assert heuristic_opts(kernel_of(x * 2 + 1), CRenderer()) == []
    assert heuristic_opts(kernel_of(x * 2 + 1), OpenCLRenderer()) == []


def channels_last_epilogue(channels: int, size: int, residual: bool, padded: bool = True):
    """A batch norm and relu of a channels-last convolution output read back in NCHW order, padded
    for the next 3x3 convolution (ResNet-18's) unless asked not to, with an NCHW residual added if asked."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal((1, size, size, channels)).astype(np.float32)
    scale, shift = rng.standard_normal((2, 1, channels, 1, 1)).astype(np.float32)
    out = Tensor(values).permute(0, 3, 1, 2) * Tensor(scale) + Tensor(shift)
    expected = values.transpose(0, 3, 1, 2) * scale + shift
    if residual:
        other = rng.standard_normal((1, channels, size, size)).astype(np.float32)
        out, expected = out + Tensor(other), expected + other
    padding = ((0, 0), (0, 0), (1, 1), (1, 1)) if padded else ((0, 0),) * 4
    return out.relu().pad(padding), np.pad(np.maximum(expected, 0), padding)


def test_a_transposed_read_runs_a_cache_line_of_its_rows_innermost():
    """An elementwise kernel reading channels last and storing NCHW gets a PANEL of 16 channels, one
    64-byte line of the input (opts.py transposed_read_panel): that loop runs innermost, each pass
    reading one line and writing into 16 output rows, whose lines fill over the next passes. An
    axis no line divides is taken whole. Not when a pass would touch more than 64 pages (the L1
    TLB) or the axis is longer than 512: such an axis keeps the plain loop, or is a tile of lines
    where it reads 32 rows or more a multiple of 4 KiB apart (they share L1 sets: a detector's 32
    to 80 channels of 160x160 back to channels last, 0.25-2.0 ms in a plain loop, 0.13-0.37 as
    tiles). Padded for the next convolution (masked reads, which keep
    gcc's loop vectorizer out), the pass is upcast instead: each step a vector (ResNet-18's 64
    channels at 56x56 into the padded input, kernel alone, 2 threads: 0.49 -> 0.12 ms)."""
    renderer = CRenderer(8, 16)
    for channels, size, residual in ((64, 56, False), (128, 28, True), (64, 56, True), (512, 7, False)):
        # (64, 56, True): rows 12 KiB apart, 2 pages a channel; (512, 7): ResNet-18's last stage
        out, expected = channels_last_epilogue(channels, size, residual, padded=False)
        assert heuristic_opts(kernel_of(out), renderer) == [Opt("PANEL", 0, 16)]
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
        out, expected = channels_last_epilogue(channels, size, residual)
        assert heuristic_opts(kernel_of(out), renderer) == [Opt("UPCAST", 0, 16)]
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    out, expected = channels_last_epilogue(24, 56, residual=False, padded=False)  # the whole 24, storing whole lines
    assert heuristic_opts(kernel_of(out), renderer) == [Opt("PANEL", 0, 24), Opt("UPCAST", 1, 16)]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    x = Tensor(np.ones((16, 1024), np.float32))
    assert heuristic_opts(kernel_of(x.T + 1), renderer) == []  # 1024 rows: more lines than L1 holds
    x = Tensor(np.ones((64, 1024), np.float32))  # 64 rows 4 KiB apart, sharing L1 sets: a tile of lines
    assert heuristic_opts(kernel_of(x.T + 1), renderer) == [Opt("UPCAST", 0, 16), Opt("UPCAST", 2, 16)]
    unaliased = Tensor(np.ones((16, 64, 56, 56), np.float32)).permute(0, 2, 3, 1).contiguous()
    assert heuristic_opts(kernel_of(unaliased), renderer) == []  # planes 12 KiB apart, however large
    for channels in (32, 48):  # 160x160 planes, 100 KiB apart: 819,200 and 1,228,800 elements
        nchw = np.random.default_rng(channels).standard_normal((1, channels, 160, 160)).astype(np.float32)
        out = Tensor(nchw).permute(0, 2, 3, 1).contiguous()
        assert heuristic_opts(kernel_of(out), renderer) == [Opt("UPCAST", 0, 16), Opt("UPCAST", 2, 16)]
        np.testing.assert_array_equal(out.numpy(), nchw.transpose(0, 2, 3, 1))


def test_a_transposed_read_whose_stores_lie_pages_apart_runs_blocks_of_the_stored_axis_inside_its_panel():
    """Where the stores of a transposed read's PANEL lie a multiple of 4 KiB apart (NCHW planes of
    32x32 float32), they share one L1 set: a second PANEL runs blocks of 128 positions inside the
    panel's loop, so the stores walk their rows (opts.py _page_aliased_block). Planes of 28x28 keep
    the plain PANEL."""
    renderer = CRenderer(8, 16)
    rng = np.random.default_rng(4)
    for size, expected_opts in ((32, [Opt("PANEL", 0, 16), Opt("PANEL", 1, 128)]), (28, [Opt("PANEL", 0, 16)])):
        values = rng.standard_normal((1, size, size, 64)).astype(np.float32)
        other = rng.standard_normal((1, 64, size, size)).astype(np.float32)
        out = Tensor(values).permute(0, 3, 1, 2) + Tensor(other)
        assert heuristic_opts(kernel_of(out), renderer) == expected_opts
        np.testing.assert_allclose(out.numpy(), values.transpose(0, 3, 1, 2) + other, rtol=1e-6)


@pytest.mark.parametrize("shape", [(1, 128, 128, 64), (4, 56, 56, 96), (2, 112, 112, 48)])
def test_a_large_transposed_read_of_whole_lines_is_a_tile_of_lines(shape):
    """A transposed read of 2^20 elements or more whose axis is whole cache lines (16 float32
    channels), into a stored axis of whole lines too, is a 16 x 16 tile: 16 copies of the read's
    axis, each a vector of 16 stored positions (its lanes gathered from the 16 lines read), stored as
    whole vectors. ResNet-18's training step at batch 16, 2 threads: its transposing kernels 10.5 ->
    4.7 ms (64 channels at 112x112 into a weight gradient's rows), 9.9 -> 5.5 (a batch norm at 28x28).
    A computed value (more than one load) takes vectors of half a line: its loads' 16 x 16 values
    spilled (the same step's eleven tiles 18.4 -> 15.5 ms, a batch norm's gradient at 28x28 1.35 ->
    0.67; plain copies 1-7% slower so keep whole lines). A smaller one keeps the PANEL (the tile
    compiles 3-8x longer)."""
    renderer = CRenderer(16, 32)
    rng = np.random.default_rng(5)
    batch, size, _, channels = shape
    values = rng.standard_normal(shape).astype(np.float32)
    copied = Tensor(values).permute(0, 3, 1, 2).contiguous()
    assert [(opt.op, opt.amount) for opt in heuristic_opts(kernel_of(copied), renderer)] == [("UPCAST", 16), ("UPCAST", 16)]
    program = linearize(kernel_of(copied), renderer)
    assert program.vector_width == 16 and len(program.stores) == 16 and all(store.width == 16 for store in program.stores)
    np.testing.assert_array_equal(copied.numpy(), values.transpose(0, 3, 1, 2))
    other = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
    out = Tensor(values).permute(0, 3, 1, 2) * 2 + Tensor(other)
    kernel = kernel_of(out)
    opts = heuristic_opts(kernel, renderer)
    assert [(opt.op, opt.amount) for opt in opts] == [("UPCAST", 16), ("UPCAST", 8)]
    program = linearize(kernel, renderer)
    assert program.vector_width == 8 and len(program.stores) == 16 and all(store.width == 8 for store in program.stores)
    # no reuse across iterations for gcc's unroll-and-jam and predictive commoning to find: half its time
    assert 'no-loop-unroll-and-jam", "no-predictive-commoning"' in renderer.render_program(program)
    np.testing.assert_allclose(out.numpy(), values.transpose(0, 3, 1, 2) * 2 + other, rtol=1e-6)
    small = Tensor(values[:, :16, :16]).permute(0, 3, 1, 2) * 2
    assert [opt.op for opt in heuristic_opts(kernel_of(small), renderer)] == ["PANEL"]


@pytest.mark.parametrize("rows, columns, wide, unrolled", [(3, 288, 48, []), (2, 256, 64, [Opt("UNROLL", 4, 2)])])
def test_a_product_of_a_few_rows_takes_a_wider_vector(rows, columns, wide, unrolled):
    """A matmul whose rows are a few (a U-Net's last convolution's weight gradient: 3 output channels)
    takes them whole and, with no second row axis to add, a wider vector where its accumulators still
    fit the registers (AVX-512: 3 x 48, 2 x 64; AVX2's 16 registers keep 32), each broadcast row value
    then used by more columns (3 x 4096 @ 4096 x 288, 2 threads: 0.148 -> 0.121 ms). 2 x 64, eight
    vectors, takes its reduce two steps at a time (`few_accumulators_unroll`)."""
    a = np.random.default_rng(5).standard_normal((rows, 4096)).astype(np.float32)
    b = np.random.default_rng(6).standard_normal((4096, columns)).astype(np.float32)
    product = Tensor(a) @ Tensor(b)
    kernel = kernel_of(product)
    assert heuristic_opts(kernel, CRenderer(16, 32)) == [Opt("UPCAST", 1, wide), Opt("UPCAST", 0, rows)] + unrolled
    assert heuristic_opts(kernel, CRenderer(8, 16)) == [Opt("UPCAST", 1, 32), Opt("UPCAST", 0, rows)]
    np.testing.assert_allclose(product.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_a_tile_of_few_accumulators_takes_its_reduce_two_steps_at_a_time():
    """A 1x1 convolution of 96 channels at 56x56 to 16, batch 16 (MobileNetV2's training step has
    such products): its tile, 16 channels by 8 positions, holds 8 AVX-512 vectors, so its reduce is
    unrolled by 2 into accumulators of their own (kernel alone, 2 threads, 1.36 -> 1.01 ms). A tile of
    more vectors keeps its loop; so does AVX2, where it was not measured."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((16, 96, 56, 56)).astype(np.float32)
    weight = rng.standard_normal((16, 96, 1, 1)).astype(np.float32)
    with no_grad():
        out = F.conv2d(Tensor(x), Tensor(weight))
    kernel = [merge_dims(item.kernel) for item in create_schedule([out.lazydata]) if item.kernel is not None
              and item.kernel.reduce_axes][-1]
    assert kernel.full_shape == (16, 3136, 16, 96, 1)
    opts = heuristic_opts(kernel, CRenderer(16, 32))
    assert opts == [Opt("UPCAST", 2, 16), Opt("UPCAST", 1, 8), Opt("UNROLL", 5, 2)]
    assert all(opt.op != "UNROLL" for opt in heuristic_opts(kernel, CRenderer(8, 16)))
    expected = np.einsum("nchw,oc->nohw", x.astype(np.float64), weight[:, :, 0, 0].astype(np.float64))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-3)
    wide = Tensor(rng.standard_normal((64, 256)).astype(np.float32)) @ Tensor(rng.standard_normal((256, 256)).astype(np.float32))
    assert all(opt.op != "UNROLL" for opt in heuristic_opts(kernel_of(wide), CRenderer(16, 32)))  # 32 x 8: 16 vectors


def test_a_uint8_by_int8_dot_product_keeps_plain_loops_for_the_compiler():
    """int32 sums of uint8 by int8 products along a contiguous axis (lazygrad.quantize's Linear) get
    no opts and no `omp simd` pragma: gcc then compiles the inner loop to AVX-512 VNNI's dot products
    (256 x 1024 by 1024 x 1024, one thread: 2.7 ms, 196 GOP/s, where float32's tile takes 4.6). Other
    integer products (int8 by int8, which VNNI has no instruction for) keep their tiles."""
    rng = np.random.default_rng(9)
    left = rng.integers(0, 256, (8, 64)).astype(np.uint8)
    right = rng.integers(-127, 128, (16, 64)).astype(np.int8)
    product = (Tensor(left).cast(dtypes.int32).unsqueeze(-2) * Tensor(right).cast(dtypes.int32))
    dots = product._reduce(Ops.SUM, -1, False, "dot")
    kernel = kernel_of(dots)
    assert heuristic_opts(kernel, CRenderer(16, 32)) == []
    source = CRenderer(16, 32).render_program(linearize(kernel, CRenderer(16, 32)))
    assert "omp simd" not in source
    np.testing.assert_array_equal(dots.numpy(), left.astype(np.int64) @ right.astype(np.int64).T)
    signed = (Tensor(left.astype(np.int8) // 2).cast(dtypes.int32).unsqueeze(-2) * Tensor(right).cast(dtypes.int32))
    assert heuristic_opts(kernel_of(signed._reduce(Ops.SUM, -1, False, "dot")), CRenderer(16, 32)) != []


def test_a_reduce_to_one_value_walks_its_input_in_stored_order():
    """The max |x| of a value stored channels last, read as NCHW, runs over the buffer in the order it
    is stored: after merge_dims one flat reduce axis, every load one step along memory."""
    rng = np.random.default_rng(13)
    stored = rng.standard_normal((2, 5, 6, 8)).astype(np.float32)           # (N, H, W, C)
    nchw = Tensor(stored).permute(0, 3, 1, 2)
    largest = nchw.abs().max()
    kernel = merge_dims(kernel_of(largest))
    assert kernel.full_shape == (2 * 5 * 6 * 8,) and kernel.reduce_axes == (0,)
    assert largest.item() == np.abs(stored).max()
    total = (nchw * 2).sum()  # a sum too, to float rounding
    assert merge_dims(kernel_of(total)).full_shape == (480,)
    np.testing.assert_allclose(total.item(), (stored * 2).sum(), rtol=1e-5)


def test_uint8_by_int8_sums_laid_out_in_lanes_of_four_get_the_byte_dot_tile():
    """A sum of uint8 by int8 products whose weights come 4 per lane, 16 lanes in a row (lazygrad.
    quantize's packed convolution weight) gets byte_dot_tile's opts where the renderer has byte
    dot products (AVX-512 VNNI): the 4 steps unrolled, 16 output channels as the vector lanes and
    a row of pixels as copies; linearize writes each copy's step as one lg_byte_dot16 and no
    product of its own. A renderer without them (AVX2) gets another tile. The sums are exact
    wherever this machine runs them."""
    rng = np.random.default_rng(10)
    x = rng.integers(0, 256, (2, 6, 8, 4)).astype(np.uint8)           # (rows, pixels, channels/4, 4)
    w = rng.integers(-127, 128, (2, 8, 16, 4)).astype(np.int8)        # (channel blocks, channels/4, 16, 4)
    rows = Tensor(x).reshape(2, 6, 1, 1, 8, 4).cast(dtypes.int32)
    weights = Tensor(w).permute(0, 2, 1, 3).cast(dtypes.int32)      # (blocks, 16, channels/4, 4)
    sums = (rows * weights)._reduce(Ops.SUM, (-2, -1), False, "dot")    # (2, 6, 2, 16)
    kernel = merge_dims(kernel_of(sums))
    vnni = CRenderer(16, 32, byte_dot_lanes=16)
    opts = heuristic_opts(kernel, vnni)
    assert [opt.op for opt in opts] == ["UNROLL", "UPCAST", "UPCAST"] and opts[1].amount == 16
    source = vnni.render_program(linearize(kernel, vnni))
    copies = 6  # the row of pixels
    assert source.count("= lg_byte_dot16(acc") == copies and "(int)(" not in source  # no product cast to int
    assert "lg_byte_dot16" not in CRenderer(8, 16).render_program(linearize(kernel, CRenderer(8, 16)))
    expected = np.einsum("rpcj,bckj->rpbk", x.astype(np.int64), w.astype(np.int64))
    np.testing.assert_array_equal(sums.numpy(), expected)


def test_a_channels_last_max_pool_takes_its_channels_in_vectors_and_keeps_nan():
    """A max pool computed channels last (nn/spatial.py) upcasts its 64 channels as four vectors:
    each window step a vector load and a vector max held in registers (ResNet-18's pool, one
    thread, kernel alone: 0.45 -> 0.26 ms). The vector max keeps a NaN, as the scalar one does."""
    rng = np.random.default_rng(8)
    values = rng.standard_normal((2, 12, 12, 64)).astype(np.float32)
    values[0, 3, 4, 5] = values[1, 0, 0, 63] = np.nan
    with no_grad():
        out = F.max_pool2d((Tensor(values) * 2).permute(0, 3, 1, 2), 3, 2, 1)
        pool = [item.kernel for item in create_schedule([out.lazydata]) if item.kernel is not None][0]
        kernel = merge_dims(pool)
        assert kernel.full_shape == (2, 6, 6, 64, 3, 3)
        assert heuristic_opts(kernel, CRenderer(16, 32)) == [Opt("UPCAST", 3, 64)]
        assert "lg_select" in CRenderer(16, 32).render_program(linearize(pool, CRenderer(16, 32)))
        doubled = np.pad(values * 2, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
        windows = np.lib.stride_tricks.sliding_window_view(doubled, (3, 3), axis=(1, 2))[:, ::2, ::2]
        expected = np.max(windows, axis=(-2, -1)).transpose(0, 3, 1, 2)  # np.max keeps NaN
        np.testing.assert_array_equal(out.numpy(), expected)


def test_a_max_pool_reading_channels_last_values_in_nchw_order_takes_its_channels_in_vectors():
    """A 2x2 max pool of an NCHW view whose values are stored channels last (an int8 convolution's
    sums, dequantized on the way): the channels, contiguous in every load though not the last output
    axis, are the upcast axis (`pool_vector_tile`), not plain loops of two-step windows."""
    rng = np.random.default_rng(14)
    stored = rng.standard_normal((2, 8, 8, 32)).astype(np.float32)       # (N, H, W, C)
    with no_grad():
        pooled = F.max_pool2d((Tensor(stored).permute(0, 3, 1, 2) * 2).relu(), 2)
        (pool,) = [item.kernel for item in create_schedule([pooled.lazydata]) if item.kernel is not None]
        kernel = merge_dims(pool)
        opts = heuristic_opts(kernel, CRenderer(16, 32))
        assert len(opts) == 1 and opts[0].op == "UPCAST" and kernel.full_shape[opts[0].axis] == 32
        assert opts[0].axis != max(axis for axis in range(len(kernel.full_shape)) if axis not in kernel.reduce_axes)
    windows = np.maximum(stored * 2, 0).reshape(2, 4, 2, 4, 2, 32).max((2, 4)).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(pooled.numpy(), windows)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.float16, np.float32, np.int64])
def test_a_large_transposed_copy_of_every_item_size_runs(dtype):
    """The tile of lines is for lines of at most 16 values: a line of 64 bytes (an int8 weight of 2048 x
    512 copied transposed for ONNX's MatMulInteger) or 32 halves would make a tile of more outputs
    than a kernel may have (OptError: the transformer quantized by ONNX Runtime failed to run); those
    keep the PANEL."""
    values = np.random.default_rng(6).integers(-100, 100, (2048, 512)).astype(dtype)
    np.testing.assert_array_equal(Tensor(values).realize().T.contiguous().numpy(), values.T)


def test_of_two_transposed_reads_the_one_walking_an_outer_axis_gets_the_panel():
    """A residual sum of a Winograd convolution's output (its 2x2 output planes outermost, each
    tile row contiguous: near the stored order) and a channels-last one (contiguous along the
    channels, far outside it), stored NCHW: the PANEL follows the channels-last read, which in the
    stored order gathers across every loop (ResNet-18's 28x28 stage at batch 16, one thread, kernel
    alone: 6.9 ms with the tile rows innermost, 3.3 ms with 16 channels)."""
    rng = np.random.default_rng(6)
    channels, rows = 32, 14
    tiles = rng.standard_normal((2, 2, channels, 2, rows, rows)).astype(np.float32)
    last = rng.standard_normal((2, 2 * rows, 2 * rows, channels)).astype(np.float32)
    planes = Tensor(tiles).permute(3, 2, 4, 0, 5, 1).reshape(2, channels, 2 * rows, 2 * rows)
    out = (planes + Tensor(last).permute(0, 3, 1, 2)).relu()
    kernel = kernel_of(out)
    assert kernel.full_shape == (2, channels, rows, 2, rows, 2)
    assert heuristic_opts(kernel, CRenderer(16, 32)) == [Opt("PANEL", 1, 16)]
    expected = tiles.transpose(3, 2, 4, 0, 5, 1).reshape(2, channels, 2 * rows, 2 * rows) + last.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(out.numpy(), np.maximum(expected, 0), rtol=1e-6)


def test_a_matmul_operand_packed_into_row_panels_reads_a_cache_line_of_each_row_per_pass():
    """A left operand copied into panels of 6 rows (linalg's packing: MobileNetV2's 14x14 and 7x7
    activations, channels last, with their batch norm and ReLU6) reads its rows, up to 1024 long,
    a cache line per pass: 6 lines read, 96 floats written together (one thread, AVX-512, its
    eleven packs 1.06 -> 0.36 ms; in the shape's order each element read came from another row).
    Rows longer than 1024 keep the plain loops (BERT's 1536: no faster so). Padded to whole panels
    (masked reads, which keep gcc's loop vectorizer out), the line is upcast instead of a PANEL, each
    step a vector (196 x 576, 2 threads: 0.125 -> 0.114 ms)."""
    rng = np.random.default_rng(7)
    for width, expected_opts in ((576, [Opt("UPCAST", 1, 16)]), (1536, [])):
        rows, scale = rng.standard_normal((196, width)).astype(np.float32), rng.standard_normal(width).astype(np.float32)
        x = (Tensor(rows) * Tensor(scale)).relu6().pad(((0, 2), (0, 0)))
        packed = x.reshape(33, 6, width).permute(0, 2, 1).contiguous()
        assert heuristic_opts(kernel_of(packed), CRenderer(16, 32)) == expected_opts
        expected = np.pad(np.clip(rows * scale, 0, 6), ((0, 2), (0, 0))).reshape(33, 6, width).transpose(0, 2, 1)
        np.testing.assert_allclose(packed.numpy(), expected, rtol=1e-6)


def test_nchw_channels_packed_into_panels_run_over_images_and_pixels_apart():
    """Packing NCHW channels into panels of 16 (a matmul operand over batch and pixels) merges
    images and pixels into one axis of the panel; the kernel runs over them apart again
    (axes.refine_dims with view.split_along), so the load's index is a sum of steps, not a division
    and a remainder per element, and the pixels of each image's channel plane, read contiguously,
    are a PANEL innermost (16 x 64 x 56 x 56 into panels of 16, AVX-512, 2 threads: 2.9 -> 0.6 ms),
    a whole plane (196 pixels, which no cache line divides) per pass, the panel's row of 16 upcast."""
    values = np.random.default_rng(5).standard_normal((2, 64, 14, 14)).astype(np.float32)
    packed = Tensor(values).permute(1, 0, 2, 3).reshape(4, 16, 392).permute(0, 2, 1).contiguous()
    kernel = kernel_of(packed)
    assert kernel.full_shape == (4, 2, 196, 16)
    assert all(len(tracker.views) == 1 for tracker in kernel_trackers(kernel.ast))
    assert heuristic_opts(kernel, CRenderer(8, 16)) == [Opt("PANEL", 2, 196), Opt("UPCAST", 3, 16)]
    expected = values.transpose(1, 0, 2, 3).reshape(4, 16, 392).transpose(0, 2, 1)
    np.testing.assert_array_equal(packed.numpy(), expected)


def test_a_transposed_read_beside_a_select_only_load_takes_its_pass_in_vectors():
    """A ReLU's gradient read back in NCHW order from a channels-last activation (a batch norm's
    backward in ResNet-18's training step): the gradient is a load only a select reads, which keeps
    gcc's loop vectorizer out, so the PANEL's pass of 16 channels would run one element at a time.
    Those 16 channels are upcast instead: each step a vector (its 256 x 3136 kernel, 2 threads,
    2.4 -> 0.7 ms)."""
    rng = np.random.default_rng(11)
    stored = rng.standard_normal((2, 14, 14, 64)).astype(np.float32)
    grad = rng.standard_normal((2, 64, 14, 14)).astype(np.float32)
    out = (Tensor(stored).realize().permute(0, 3, 1, 2) > 0).where(Tensor(grad).realize(), 0) * 2
    kernel = kernel_of(out)
    assert kernel.full_shape == (2, 64, 196)
    assert heuristic_opts(kernel, CRenderer(16, 32)) == [Opt("UPCAST", 1, 16)]
    np.testing.assert_array_equal(out.numpy(), np.where(stored.transpose(0, 3, 1, 2) > 0, grad, 0) * 2)


@pytest.mark.parametrize("rows", [1280, 512])
def test_a_transposed_copy_into_rows_of_half_lines_stores_half_lines_over_a_whole_pass(rows):
    """A classifier's weight, 1000 x rows, copied transposed for x @ W.T in a training step: its
    stored rows of 1000 take half lines only (1000 = 62.5 lines), so a pass reads the whole of each
    weight row and each step stores 8 (MobileNetV2's 1000 x 1280, 2 threads, alone: 0.97 -> 0.24 ms;
    ResNet-18's 1000 x 512 0.20 -> 0.12, before a pass of 16 rows)."""
    weight = np.random.default_rng(13).standard_normal((1000, rows)).astype(np.float32)
    copied = Tensor(weight).realize().T.contiguous()
    kernel = kernel_of(copied)
    assert kernel.full_shape == (rows, 1000)
    assert heuristic_opts(kernel, CRenderer(16, 32)) == [Opt("PANEL", 0, rows), Opt("UPCAST", 1, 8)]
    np.testing.assert_array_equal(copied.numpy(), weight.T)


@pytest.mark.parametrize("channels, size", [(768, 17), (288, 35)])
def test_a_transposed_copy_whose_rows_no_line_divides_stores_whole_lines(channels, size):
    """NCHW to channels last, 768 channels at 17x17 (Inception-v3's): a pass reads a channel's 289
    pixels, which no cache line divides, and stores one element into each of 289 rows 3 KiB apart,
    which share four of L1's sets. 16 channels are upcast, so each step stores a whole line. So too
    for passes longer than TRANSPOSED_READ_MAX (288 channels at 35x35, 1225 pixels)."""
    values = np.random.default_rng(9).standard_normal((1, channels, size, size)).astype(np.float32)
    copied = Tensor(values).realize().permute(0, 2, 3, 1).contiguous()
    kernel = kernel_of(copied)
    assert kernel.full_shape == (size * size, channels)
    assert heuristic_opts(kernel, CRenderer(16, 32)) == [Opt("PANEL", 0, size * size), Opt("UPCAST", 1, 16)]
    np.testing.assert_array_equal(copied.numpy(), values.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("count_include_pad", [True, False])
def test_an_average_pool_with_padding_computed_channels_last_takes_its_channels_in_vectors(count_include_pad):
    """A 3x3 average pool with padding of values stored channels last (Inception-v3's pool branches):
    a sum over padded windows, which gcc's loop vectorizer stays out of, so the channels are upcast
    in whole vectors (`pool_vector_tile`), as a max pool's are."""
    stored = np.random.default_rng(10).standard_normal((2, 9, 9, 64)).astype(np.float32)
    with no_grad():
        pooled = F.avg_pool2d((Tensor(stored) * 2).permute(0, 3, 1, 2), 3, 1, 1, count_include_pad=count_include_pad)
        pooled = pooled.permute(0, 2, 3, 1)  # kept in the order it is computed
        pool = [item.kernel for item in create_schedule([pooled.contiguous().lazydata]) if item.kernel is not None]
        opts = [heuristic_opts(merge_dims(kernel), CRenderer(16, 32)) for kernel in pool]
        assert [Opt("UPCAST", 3, 64)] in opts
    padded = np.pad(stored * 2, ((0, 0), (1, 1), (1, 1), (0, 0)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2)).sum((-2, -1))
    counts = 9.0 if count_include_pad else np.lib.stride_tricks.sliding_window_view(
        np.pad(np.ones((9, 9)), 1), (3, 3)).sum((-2, -1))[None, :, :, None]
    np.testing.assert_allclose(pooled.numpy(), windows / counts, rtol=1e-5, atol=1e-6)


def test_window_columns_packed_into_panels_are_stored_a_whole_panel_row_at_a_time():
    """A 3x3 convolution's weight gradient packs its input's windows into panels of 32 columns
    (channel, ky, kx): each output row gathers 32 values from as many input streams. A PANEL of one
    run of window columns runs innermost and the panel's row is upcast, so each step stores whole
    vectors (ResNet-18's training step at batch 16, 64 channels at 56x56, one thread: 19.6 -> 5.3 ms).
    A stride-2 window is followed along its run too (at 28x28 from 56x56: 16.3 -> 1.8 ms)."""
    from lazygrad.nn.spatial import pool_windows
    values = np.random.default_rng(3).standard_normal((2, 8, 10, 10)).astype(np.float32)
    for stride, run in ((1, 8), (2, 4)):
        windows = pool_windows(Tensor(values), (3, 3), (stride, stride), (1, 1))  # (2, 8, o, o, 3, 3)
        outputs = windows.shape[2]
        columns = windows.permute(0, 2, 3, 1, 4, 5).reshape(2 * outputs * outputs, 72)
        packed = columns.pad(((0, 0), (0, 24))).reshape(-1, 3, 32).permute(1, 0, 2).contiguous()
        kernel = kernel_of(packed)
        assert kernel.full_shape == (3, 2 * outputs * outputs, 32)
        assert heuristic_opts(kernel, CRenderer(16, 32)) == [Opt("PANEL", 1, run), Opt("UPCAST", 2, 32)]
        view = np.lib.stride_tricks.sliding_window_view(values, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
        expected = np.pad(view.transpose(0, 2, 3, 1, 4, 5).reshape(-1, 72), ((0, 0), (0, 24)))
        np.testing.assert_array_equal(packed.numpy(), expected.reshape(-1, 3, 32).transpose(1, 0, 2))


def test_a_large_source_packed_into_panels_is_read_once_in_its_own_order():
    """Rows packed into panels of columns (the stem's weight gradient: 147 window values a row)
    loop over the panels inside the rows when the rows span 32 MiB or more, so the source streams
    from memory once (ResNet-18's stem at batch 16, one thread: 27 -> 8.2 ms); rows that stay in
    cache keep the stored order (its 7x7 stage, 800 KB: 1.7 ms against 15.5 with the panels inside).
    Panels of a row that fit one upcast are its copies, the panel axis and the columns upcast whole
    (the same order), so the last panel's padding is decided per copy (2 threads: 7.6 -> 3.8 ms); a
    row of 25 panels keeps the PANEL. Where only the padding's panel varies along the columns, rows
    in cache are upcast so too (`_panels_of_padded_columns`: MobileNetV2's 12544 x 144 into 5 panels,
    2.0 -> 0.15 ms in its training step), each element a scalar before."""
    rng = np.random.default_rng(4)
    cases = ((57344, 147, 5, [Opt("UPCAST", 2, 32), Opt("UPCAST", 0, 5)]),
             (8192, 147, 5, [Opt("UPCAST", 2, 32), Opt("UPCAST", 0, 5)]),
             (57344, 790, 25, [Opt("PANEL", 0, 25)]))
    for rows, width, panels, expected_opts in cases:
        values = rng.standard_normal((rows, width)).astype(np.float32)
        source = Tensor(values) * 2
        padding = panels * 32 - width
        packed = source.pad(((0, 0), (0, padding))).reshape(rows, panels, 32).permute(1, 0, 2).contiguous()
        assert heuristic_opts(kernel_of(packed), CRenderer(16, 32)) == expected_opts
        expected = np.pad(values * 2, ((0, 0), (0, padding))).reshape(rows, panels, 32).transpose(1, 0, 2)
        np.testing.assert_array_equal(packed.numpy(), expected)


def test_windows_flattened_into_rows_are_copied_over_the_windows_dims():
    """A convolution's weight gradient packs its input's windows as rows (image, y, x) by columns
    (channel, ky, kx): flattened, each element's index took a division and a remainder per source
    dim; over the windows' own dims (axes.py refine_dims) it is a sum of steps (ResNet-18's 7x7
    stride-2 stem at batch 16, 2 threads: 166 -> 11-14 ms)."""
    from lazygrad.nn.spatial import pool_windows
    values = np.random.default_rng(6).standard_normal((2, 3, 12, 12)).astype(np.float32)
    padded = Tensor(values).pad(((0, 0), (0, 0), (3, 3), (3, 3)))
    windows = pool_windows(padded, (7, 7), (2, 2), (1, 1))  # (2, 3, 6, 6, 7, 7)
    rows = windows.permute(0, 2, 3, 1, 4, 5).reshape(72, 147).contiguous()
    kernel = kernel_of(rows)
    assert kernel.full_shape == (2, 6, 6, 3, 7, 7)
    source = realize._render("CPU", kernel).source
    body = source[source.index("void "):]
    assert "/" not in body and "%" not in body
    padded_values = np.pad(values, ((0, 0), (0, 0), (3, 3), (3, 3)))
    expected = np.stack([padded_values[:, :, 2 * y:2 * y + 7, 2 * x:2 * x + 7] for y in range(6) for x in range(6)], 1)
    np.testing.assert_array_equal(rows.numpy(), expected.reshape(72, 147))


def test_opencl_matmul_tiles_16_columns_by_8_rows_per_work_item():
    renderer = OpenCLRenderer()
    assert heuristic_opts(matmul_kernel(64, 128, 64), renderer) == [Opt("UPCAST", 1, 16), Opt("UPCAST", 0, 8)]
    assert heuristic_opts(matmul_kernel(6, 64, 24), renderer) == [Opt("UPCAST", 1, 8), Opt("UPCAST", 0, 2)]
    assert heuristic_opts(matmul_kernel(7, 64, 7), renderer) == []
    assert heuristic_opts(matmul_kernel(64, 32, 64), renderer) == []  # a short reduce: one output each


def reduce_kernel_on_npy(tensor_of):
    """The reduce kernel of `tensor_of(make)`, made from NPY tensors: NPY schedules the route that every
    device but CPU takes (no operand panels or channels-last layout: those are the CPU device's)."""
    *_, item = create_schedule([tensor_of(lambda *shape: Tensor(np.ones(shape, np.float32), device="NPY")).lazydata])
    return merge_dims(item.kernel)


def test_cuda_tiles_leave_enough_work_items_to_fill_the_gpu():
    """CUDA's tile shrinks as outputs get fewer, so the grid keeps target_work_items work-items
    (opts.py spread_tile); with far fewer outputs, a warp's lanes share each reduce."""
    renderer = CUDARenderer()
    assert renderer.target_work_items == 100_000

    def matmul(m, k, n):
        return heuristic_opts(reduce_kernel_on_npy(lambda make: make(m, k) @ make(k, n)), renderer)
    # BERT's FFN, 1024 x 1536 outputs: 2 columns by 4 rows; 1024 x 384 outputs: 2 rows
    assert matmul(1024, 384, 1536) == [Opt("UPCAST", 1, 2), Opt("UPCAST", 0, 4)]
    assert matmul(1024, 1536, 384) == [Opt("UPCAST", 0, 2)]
    assert matmul(2048, 32, 2048) == [Opt("UPCAST", 1, 2), Opt("UPCAST", 0, 8)]
    assert matmul(512, 512, 256) == []  # one output each
    assert matmul(64, 128, 64) == [Opt("UPCAST", 0, 2), Opt("GROUP", 3, 32)]
    assert matmul(7, 64, 7) == []  # 2 steps per lane: too short to share
    # ResNet-18's last 3x3 convolution
    kernel = reduce_kernel_on_npy(lambda make: make(1, 512, 7, 7).conv2d(make(512, 512, 3, 3), padding=1))
    assert kernel.full_shape == (512, 7, 7, 512, 3, 3)
    assert heuristic_opts(kernel, renderer) == [Opt("UPCAST", 2, 7), Opt("UPCAST", 0, 2), Opt("GROUP", 5, 32)]


def test_cuda_long_reduces_without_a_tile_get_a_warp_of_lanes():
    """One thread adding thousands of float32 terms in a row loses precision (test_reduce.py's long
    sum); on CUDA a warp's 32 lanes share each such reduce, reading neighbouring addresses."""
    assert heuristic_opts(row_sum_kernel(4, 4096), CUDARenderer()) == [Opt("GROUP", 1, 32)]
    assert heuristic_opts(row_sum_kernel(4, 4096), OpenCLRenderer()) == []
    assert heuristic_opts(row_sum_kernel(4, 48), CUDARenderer()) == []  # short: one thread each
    assert heuristic_opts(row_sum_kernel(4, 4080), CUDARenderer()) == []  # no whole warps
    x = Tensor(np.ones((4, 4096), np.float32))
    centred = x - x.mean(axis=1, keepdim=True)
    chained = kernel_of((centred * centred).sum(axis=1))  # a mean, then a sum of squares
    assert heuristic_opts(chained, CUDARenderer()) == [Opt("GROUP", 1, 32)]


def test_gpu_heuristic_tiles_only_matmuls():
    """Row reduces, softmax and convolutions keep one output per work-item on the GPU dialects."""
    x = Tensor(np.ones((64, 128), np.float32))
    assert heuristic_opts(kernel_of(x.sum(axis=1)), OpenCLRenderer()) == []
    assert heuristic_opts(kernel_of(x.max(axis=1)), OpenCLRenderer()) == []
    images = Tensor(np.ones((2, 16, 14, 14), np.float32))
    weights = Tensor(np.ones((32, 16, 3, 3), np.float32))
    assert heuristic_opts(kernel_of(images.conv2d(weights)), OpenCLRenderer()) == []
    (item,) = [item for item in create_schedule([x.softmax(1).lazydata]) if item.kernel is not None][:1]
    assert heuristic_opts(merge_dims(item.kernel), OpenCLRenderer()) == []


def test_the_gpu_tile_leaves_the_c_heuristic_alone():
    """The same matmul kernel: C keeps its 32 x 8 tile, OpenCL gets 16 x 8."""
    kernel = matmul_kernel(128, 512, 128)
    assert heuristic_opts(kernel, CRenderer()) == [Opt("UPCAST", 1, 32), Opt("UPCAST", 0, 8)]
    assert heuristic_opts(kernel, OpenCLRenderer()) == [Opt("UPCAST", 1, 16), Opt("UPCAST", 0, 8)]


def test_sizes_that_do_not_divide_get_a_smaller_tile_or_none():
    assert heuristic_opts(matmul_kernel(m=6, n=40), CRenderer()) == [Opt("UPCAST", 1, 8), Opt("UPCAST", 0, 6)]
    assert heuristic_opts(matmul_kernel(m=7, n=7), CRenderer()) == []


def test_cheap_row_reduces_take_eight_rows_and_eight_accumulators():
    x = Tensor(np.ones((64, 256), np.float32))
    assert heuristic_opts(kernel_of(x.sum(axis=1)), CRenderer()) == [Opt("UPCAST", 0, 8), Opt("UNROLL", 2, 8)]
    assert heuristic_opts(kernel_of(x.max(axis=1)), CRenderer()) == [Opt("UPCAST", 0, 8), Opt("UNROLL", 2, 8)]
    assert heuristic_opts(kernel_of(x.exp().sum(axis=1)), CRenderer()) == []   # exp stays a vectorized loop
    assert heuristic_opts(kernel_of(x.sum(axis=0)), CRenderer()) == []         # columns: inner accumulator loops


def test_a_reduce_reading_across_its_outputs_computes_a_cache_line_of_them():
    """Per-channel sums of an activation stored channels last, as batch norm's statistics and
    gradients read a convolution's output: a load walks the channels contiguously and no reduce
    axis, so 16 channels are summed together, each step reading a whole line. A plain column sum
    keeps linearize's accumulator array instead."""
    rng = np.random.default_rng(5)
    stored = rng.standard_normal((4, 16, 16, 32)).astype(np.float32)
    gradient = rng.standard_normal((4, 32, 16, 16)).astype(np.float32)
    activation = Tensor(stored).realize().permute(0, 3, 1, 2)  # NCHW view of NHWC memory

    def upcasts(tensor):
        kernel = kernel_of(tensor)
        opts = heuristic_opts(kernel, CRenderer())
        assert all(kernel.full_shape[opt.axis] == 32 for opt in opts)
        return opts

    mixed = (Tensor(gradient) * activation).sum((0, 2, 3))
    assert [(opt.op, opt.amount) for opt in upcasts(mixed)] == [("UPCAST", 16)]
    np.testing.assert_allclose(mixed.numpy(), (gradient * stored.transpose(0, 3, 1, 2)).sum((0, 2, 3)), rtol=1e-4, atol=1e-4)
    # two reduces side by side (a sum and a sum of squares): the same
    both = activation.sum((0, 2, 3)) + (activation * activation).sum((0, 2, 3))
    assert [(opt.op, opt.amount) for opt in upcasts(both)] == [("UPCAST", 16)]
    np.testing.assert_allclose(both.numpy(), stored.sum((0, 1, 2)) + (stored * stored).sum((0, 1, 2)), rtol=1e-4, atol=1e-4)
    assert upcasts(activation.sum((0, 2, 3))) == []  # channels last among the outputs: accumulator array
    assert upcasts((Tensor(gradient[:, :, :4, :4]) * activation[:, :, :4, :4]).sum((0, 2, 3))) == []  # 64 steps


def test_a_reduce_reading_whole_channels_last_rows_upcasts_all_their_channels():
    """Partial per-channel sums (each of 8 row groups summed apart, as the scheduler splits a batch
    norm's long reduce), every load walking 64 channels contiguously: all 64 are upcast, so each row
    is read once rather than once per 16 channels. With a load across the channels (an NCHW
    gradient beside it) or without other outputs for the threads, a line of 16 as before."""
    rng = np.random.default_rng(6)
    stored = rng.standard_normal((4, 8, 64, 64)).astype(np.float32)          # (N, H, W, C)
    activation = (Tensor(stored) * 2).permute(0, 3, 1, 2)                    # computed, viewed NCHW
    partial = activation.reshape(4, 64, 8, 1, 64).sum((0, 3, 4))              # (64, 8): per channel, per row group
    kernel = kernel_of(partial)
    channel_axis = kernel.full_shape.index(64)
    assert heuristic_opts(kernel, CRenderer()) == [Opt("UPCAST", channel_axis, 64)]
    np.testing.assert_allclose(partial.numpy(), (stored * 2).sum((0, 2)).T, rtol=1e-4, atol=1e-4)
    gradient = rng.standard_normal((4, 64, 8, 64)).astype(np.float32)
    mixed = (Tensor(gradient) * activation).reshape(4, 64, 8, 1, 64).sum((0, 3, 4))
    assert [(opt.op, opt.amount) for opt in heuristic_opts(kernel_of(mixed), CRenderer())] == [("UPCAST", 16)]
    np.testing.assert_allclose(mixed.numpy(), (gradient * (stored * 2).transpose(0, 3, 1, 2)).sum((0, 3)),
                               rtol=1e-4, atol=1e-4)
    whole = activation.sum((0, 2, 3)) + (activation * activation).sum((0, 2, 3))  # no other outputs
    assert [(opt.op, opt.amount) for opt in heuristic_opts(kernel_of(whole), CRenderer())] == [("UPCAST", 16)]


@pytest.mark.usefixtures("avx2_panels")
def test_a_matmul_in_panels_with_a_long_reduce_runs_it_in_blocks(monkeypatch):
    """A weight gradient's matmul, 264 rows (33 row tiles of 8: no PANEL divides them, too many to
    run inside each panel of columns) by a reduce of thousands of steps: each row tile's operands
    would stream from beyond L2 for every panel of columns, so the reduce runs in blocks of the
    largest divisor up to 1024 steps (fewer partial sums written back than with 256: ResNet-18's
    weight gradients at batch 16 4-8% faster). Shorter reduces keep the tile alone."""
    monkeypatch.setattr(linalg, "panel_shape", lambda device: (8, 32))

    def opts(k):
        a, b = Tensor(np.ones((264, k), np.float32)), Tensor(np.ones((k, 576), np.float32))
        items = [item for item in create_schedule([(a @ b).lazydata]) if item.kernel is not None and item.kernel.reduce_axes]
        kernel = merge_dims(items[-1].kernel)
        assert kernel.full_shape[-1] == k
        return [opt for opt in heuristic_opts(kernel, CRenderer()) if opt.op == "BLOCK"]
    assert [opt.amount for opt in opts(4096)] == [1024]
    assert [opt.amount for opt in opts(6272)] == [896]  # 2^7 * 7^2 steps
    assert opts(2048) == []


def test_a_product_whose_tile_holds_every_row_runs_its_reduce_unblocked():
    """With all the rows in one register tile (a weight gradient to 8 output channels over 32768
    positions), each tile reads its own columns of the large operand once: a BLOCK would keep
    nothing for another row tile, and costs a parallel region per block (opts.py _row_tiles). With
    several row tiles (64 rows) the long reduce keeps its blocks."""
    def blocks(rows):
        a, b = Tensor(np.ones((rows, 32768), np.float32)), Tensor(np.ones((32768, 288), np.float32))
        items = [item for item in create_schedule([(a @ b).lazydata]) if item.kernel is not None and item.kernel.reduce_axes]
        return [opt for opt in heuristic_opts(merge_dims(items[-1].kernel), CRenderer()) if opt.op == "BLOCK"]
    assert blocks(8) == []
    assert blocks(3) == []
    assert len(blocks(64)) == 1


def test_a_strided_spread_is_upcast_by_its_stride():
    """A max pool's backward (3x3 windows, stride 2) reads each window's gradient at every other
    input position: both spatial axes are upcast by 2, so each copy's parity test is a constant."""
    rng = np.random.default_rng(7)
    x = Tensor(rng.permutation(2 * 4 * 16 * 16).reshape(2, 4, 16, 16).astype(np.float32), requires_grad=True)
    (F.max_pool2d(x, 3, stride=2, padding=1) * Tensor(rng.standard_normal((2, 4, 8, 8)).astype(np.float32))).sum().backward()
    kernels = [merge_dims(item.kernel) for item in create_schedule([x.grad.lazydata])
               if item.kernel is not None and not item.kernel.reduce_axes and math.prod(item.kernel.full_shape) == x.numel()]
    spread = [heuristic_opts(kernel, CRenderer()) for kernel in kernels]
    assert any(len(opts) == 2 and all(opt.op == "UPCAST" and opt.amount == 2 for opt in opts) for opts in spread)


def test_products_of_rows_get_a_small_tile_over_unrolled_steps():
    """Both operands contiguous along the reduce (a @ b.T written out; matmul itself copies b.T
    first when a has 8 rows or more, see test_a_matmul_copies_a_transposed_operand_first)."""
    a, b = Tensor(np.ones((16, 256), np.float32)), Tensor(np.ones((32, 256), np.float32))
    rows = (a.reshape(16, 1, 256) * b.reshape(1, 32, 256)).sum(-1)
    assert heuristic_opts(kernel_of(rows), CRenderer()) == [Opt("UPCAST", 1, 4), Opt("UPCAST", 0, 4), Opt("UNROLL", 4, 8)]


def test_a_matmul_copies_a_transposed_operand_first():
    """x @ w.T with 8 rows or more: a copy of w.T, then the tiled kernel of a plain matmul."""
    x, w = Tensor(np.ones((16, 256), np.float32)), Tensor(np.ones((32, 256), np.float32))
    items = [item for item in create_schedule([(x @ w.T).lazydata]) if item.kernel is not None]
    assert len(items) == 2 and not items[0].kernel.reduce_axes
    assert heuristic_opts(merge_dims(items[1].kernel), CRenderer())[:2] == [Opt("UPCAST", 1, 32), Opt("UPCAST", 0, 8)]


def test_a_product_of_one_row_gathered_from_a_channels_last_value_copies_the_row_first():
    """VGG's flatten of 512 x 7x7 channels-last values into its first Linear (here 64 x 8x8 into 256):
    each output's dot product read them at a division and a remainder of their position, 25088 x
    4096 of them (89 ms at batch 1, 2 threads); a copy of the row first (9 ms). A row read as stored
    takes no copy. Values match numpy."""
    rng = np.random.default_rng(9)
    x_value = rng.standard_normal((1, 64, 8, 8)).astype(np.float32)
    w_value, v_value = rng.standard_normal((64, 64, 1, 1)).astype(np.float32), rng.standard_normal((256, 4096)).astype(np.float32)
    hidden = Tensor(x_value).conv2d(Tensor(w_value)).relu()  # computed channels last
    for row, expected_row in ((hidden.reshape(1, -1), None), (Tensor(x_value).reshape(1, -1), x_value.reshape(1, -1))):
        out = row @ Tensor(v_value).T
        (product,) = [item.kernel for item in create_schedule([out.lazydata])
                      if item.kernel is not None and item.kernel.reduce_axes == (2,)]
        reads = [node.arg[1] for node in product.ast.walk() if node.op is Ops.LOAD]
        assert all(len(tracker.views) == 1 for tracker in reads), reads
        if expected_row is None:
            expected_row = np.maximum(np.einsum("nchw,oc->nohw", x_value, w_value[:, :, 0, 0]), 0).reshape(1, -1)
        np.testing.assert_allclose(out.numpy(), expected_row @ v_value.T, rtol=1e-4, atol=1e-3)


def test_noopt_applies_no_opts():
    x, w = Tensor(np.ones((16, 12), np.float32)), Tensor(np.ones((12, 32), np.float32))
    (item,) = create_schedule([(x @ w).lazydata])
    assert linearize(item.kernel, CRenderer(), optimize=False).opts == ()


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int32, dtypes.int64])
def test_tiled_matmul_matches_numpy_for_every_dtype(dtype):
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, (16, 24)).astype(dtype.np)
    b = rng.integers(-3, 4, (24, 40)).astype(dtype.np)
    result = Tensor(a) @ Tensor(b)
    assert realize.get_program("CPU", create_schedule([result.lazydata])[0].kernel).opts
    np.testing.assert_allclose(result.numpy().astype(np.float64), (a.astype(np.float64) @ b), rtol=1e-3)


def test_tiled_conv_with_padding_matches_numpy_padded_conv():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 8, 16)).astype(np.float32)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    result = Tensor(x).conv2d(Tensor(w), padding=1).numpy()
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # n c h w kh kw
    expected = np.einsum("nchwij,ocij->nohw", windows, w)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)


def render_anew(monkeypatch):
    """Forget loaded programs and pass by the program cache, so a patched heuristic takes effect (and
    what it renders never reaches the cache, where other tests and later runs would find it)."""
    monkeypatch.setattr(realize, "_PROGRAMS", {})
    monkeypatch.setattr(realize, "load_rendered", lambda key: None)
    monkeypatch.setattr(realize, "store_rendered", lambda key, rendered: None)


def with_opts(monkeypatch, opts):
    monkeypatch.setattr(linearize_module, "heuristic_opts", lambda kernel, renderer: list(opts))
    render_anew(monkeypatch)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int64])
@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_blocked_reduce_with_an_elementwise_tail_matches_numpy(monkeypatch, dtype, reduce):
    rng = np.random.default_rng(4)
    a = rng.integers(-3, 4, (16, 256)).astype(dtype.np)
    b = rng.integers(-3, 4, (256, 32)).astype(dtype.np)
    bias = rng.integers(-3, 4, (32,)).astype(dtype.np)
    with_opts(monkeypatch, [Opt("UPCAST", 2, 8), Opt("UPCAST", 0, 4), Opt("BLOCK", 2, 64), Opt("UNROLL", 3, 2)])
    product = Tensor(a).reshape(16, 256, 1) * Tensor(b).reshape(1, 256, 32)
    reduced = product.sum(1) if reduce == "sum" else product.amax(1)
    result = (reduced + Tensor(bias)).relu()
    (item,) = create_schedule([result.lazydata])
    assert any(opt.op == "BLOCK" for opt in realize.get_program("CPU", item.kernel).opts)
    products = a.astype(np.int64)[:, :, None] * b[None, :, :]
    expected = np.maximum((products.sum(1) if reduce == "sum" else products.max(1)) + bias, 0)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6)


def test_block_needs_an_output_that_holds_the_accumulator():
    a, b = Tensor(np.ones((8, 256), np.float16)), Tensor(np.ones((256, 8), np.float16))
    with pytest.raises(OptError, match="accumulator's dtype"):
        apply_opt(initial(kernel_of(a @ b)), Opt("BLOCK", 2, 64), CRenderer())
    with pytest.raises(OptError, match="only rendered by the C dialect"):
        apply_opt(initial(matmul_kernel(k=256)), Opt("BLOCK", 2, 64), OpenCLRenderer())


def test_only_matmuls_of_large_operands_are_blocked():
    """Blocks keep part of an operand in cache while the tiles reuse it: with operands of 8 MiB and
    more (here 4096 x 512 floats, read in place: 32 rows take no panels); smaller ones take the tile
    alone (BERT's 1024x384x384, 2 threads: 51 GFLOP/s in blocks of 64 steps, 75 without)."""
    x, w = Tensor(np.ones((32, 4096), np.float32)), Tensor(np.ones((4096, 512), np.float32), requires_grad=True)
    assert heuristic_opts(kernel_of(x @ w), CRenderer())[-1] == Opt("BLOCK", 4, 64)
    assert [opt.op for opt in heuristic_opts(matmul_kernel(64, 512, 64), CRenderer())] == ["UPCAST", "UPCAST"]
    assert [opt.op for opt in heuristic_opts(matmul_kernel(64, 128, 64), CRenderer())] == ["UPCAST", "UPCAST"]


def test_a_block_is_for_the_operand_the_rows_share_when_one_matmul_of_it_leaves_the_cache():
    """The operand every row tile reads again (the one moving along the tile's vector) decides, per
    matmul of a batch: Winograd's 16 matmuls of 784x256 @ 256x256 (8 MiB of right operands in all,
    256 KiB each) run without blocks, as does a large left operand with a small right one (one
    thread: 16.5 ms without blocks, 22.5 with; 3136x1024 @ 1024x64 15.3 and 22.7)."""
    def opts(left, right):
        return heuristic_opts(kernel_of(Tensor(np.ones(left, np.float32)) @ Tensor(np.ones(right, np.float32))), CRenderer())
    assert [opt.op for opt in opts((16, 784, 256), (16, 256, 256))] == ["UPCAST", "UPCAST"]
    assert [opt.op for opt in opts((4, 3136, 1024), (4, 1024, 64))] == ["UPCAST", "UPCAST"]


# ---- PANEL: operands in panels, row tiles run inside the column loop --------------------------------

@pytest.mark.usefixtures("avx2_panels")
def test_a_large_matmul_copies_its_right_operand_into_panels_and_panels_its_row_tiles():
    """264 rows make 44 tiles of 6: x is read in place, row by row."""
    x, w = Tensor(np.ones((264, 2048), np.float32)), Tensor(np.ones((2048, 1024), np.float32))
    kernel, count = last_kernel_of(x @ w)
    assert count == 2  # w's panels, then the product
    assert heuristic_opts(kernel, AVX2) == [Opt("UPCAST", 2, 16), Opt("UPCAST", 0, 6), Opt("PANEL", 0, 4),
                                            Opt("BLOCK", 6, 256)]
    program = linearize(kernel, AVX2)
    # row panels (264 rows / 6 per tile / 4 tiles), column panels (1024 / 16), then the 4 row tiles
    assert [loop.size for loop in program.global_loops] == [11, 64, 4]


@pytest.mark.usefixtures("avx2_panels")
def test_rows_that_fill_no_whole_panel_are_padded_and_cut_off():
    """256 rows make 42 panels of 6 and 4 rows over: x is padded to 258 rows (a copy, row by row,
    beside the weight's panels), and the product's last 2 rows are cut off by a copy of the result
    (a user of it would read it through the cut)."""
    x, w = Tensor(np.ones((256, 2048), np.float32)), Tensor(np.ones((2048, 1024), np.float32))
    kernel, count = product_kernel_of(x @ w)
    assert count == 4 and kernel.full_shape[0] == 258
    assert heuristic_opts(kernel, AVX2)[-1] == Opt("UPCAST", 0, 6)


@pytest.mark.usefixtures("avx2_panels")
def test_a_panelled_matmul_of_small_operands_takes_its_tile_alone():
    """BERT's FFN (1024x1536 @ 1536x384 in panels), AVX2, 2 threads: 95 GFLOP/s with a tile of
    8 x 16 (its 16 accumulators leave no register for the operands: 3 spill), 159 with 6 x 16."""
    x, w = Tensor(np.ones((1026, 1536), np.float32)), Tensor(np.ones((1536, 384), np.float32))
    kernel, count = last_kernel_of(x @ w)
    assert count == 2
    assert heuristic_opts(kernel, AVX2) == [Opt("UPCAST", 2, 16), Opt("UPCAST", 0, 6)]


@pytest.mark.usefixtures("avx2_panels")
def test_an_expensive_left_operand_is_stored_before_it_is_packed():
    """Packing reads x across its rows; computed there, gelu ran one element at a time (BERT's FFN,
    5x slower than storing it first). 97 rows fill no whole tile, so x is packed."""
    x, w = Tensor(np.ones((97, 384), np.float32)), Tensor(np.ones((384, 384), np.float32))
    items = [item for item in create_schedule([(x.gelu() @ w).lazydata]) if item.kernel is not None]
    with_exp = [item.kernel for item in items if any(node.op is Ops.EXP2 for node in item.kernel.ast.walk())]
    assert len(items) == 5 and len(with_exp) == 1 and with_exp[0].full_shape == (97, 384)  # and the cut


def test_attention_scores_copy_the_keys_to_tile_along_them():
    """q @ k.transpose(-1, -2) with k a (batch, tokens, heads, size) projection seen as heads: the
    keys' rows run along the reduce, so they are copied first and the product takes a register tile
    (BERT's scores, 8x12 heads of 128x32 @ 32x128, AVX2: 5.0 ms as dot products, 2.2 tiled)."""
    q = Tensor(np.ones((2, 16, 4, 32), np.float32)).transpose(1, 2)
    k = Tensor(np.ones((2, 16, 4, 32), np.float32)).transpose(1, 2)
    kernel, count = last_kernel_of(q @ k.transpose(-1, -2))
    assert count == 2  # the keys' copy, then the product
    assert [opt.op for opt in heuristic_opts(kernel, AVX2)] == ["UPCAST", "UPCAST"]


@pytest.mark.usefixtures("avx2_panels")
def test_attention_over_a_prime_count_of_tokens_is_padded_into_panels():
    """ViT's 197 tokens: q @ k.T (12 heads of 197x64 @ 64x197) and the probabilities @ v (197x197 @
    197x64) fill no whole tile read in place, whose heuristic then left them untiled (45 and 73
    GFLOP/s, 2 threads, AVX-512); padded to whole tiles, k's columns in panels and q's rows copied
    row by row, each is a register tile (the model's attention products 26 -> 9 ms of 12 layers)."""
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((12, 197, 64)).astype(np.float32) for _ in range(3))
    scores = Tensor(q) @ Tensor(k).transpose(-1, -2)
    attended = scores.softmax(-1) @ Tensor(v)
    for result in (scores, attended):
        items = [item for item in create_schedule([result.lazydata]) if item.kernel is not None and item.kernel.reduce_axes]
        product = max((item.kernel for item in items), key=lambda kernel: math.prod(kernel.full_shape))
        assert [opt.op for opt in heuristic_opts(merge_dims(product), AVX2)][:2] == ["UPCAST", "UPCAST"]
    expected = q @ k.transpose(0, 2, 1)
    np.testing.assert_allclose(scores.numpy(), expected, rtol=1e-4, atol=1e-4)
    weights = np.exp(expected - expected.max(-1, keepdims=True))
    np.testing.assert_allclose(attended.numpy(), (weights / weights.sum(-1, keepdims=True)) @ v, rtol=1e-4, atol=1e-4)
    small = Tensor(np.ones((12, 49, 32), np.float32)) @ Tensor(np.ones((12, 32, 49), np.float32))
    _, count = product_kernel_of(small)  # Swin's windows of 49 tokens: small enough in place
    assert count == 1


def test_small_matmuls_read_their_operands_in_place():
    for m, k, n in [(32, 1024, 1024), (256, 256, 256)]:  # few rows (w being trained), small w
        w = Tensor(np.ones((k, n), np.float32), requires_grad=True)
        _, count = last_kernel_of(Tensor(np.ones((m, k), np.float32)) @ w)
        assert count == 1, (m, k, n)


def test_few_rows_by_a_large_weight_run_every_row_tile_inside_each_panel():
    """A prompt's 32 rows by a layer's 3072x768 weight in panels: 4 row tiles, each panel of columns
    streamed once with all 4 inside it (PANEL of the whole row axis, no BLOCK); so by a 768x768 one
    and 1152x192 (MNASNet's 1x1 convolutions at 7x7); a 256x192 weight, which the row tiles read
    again from L1 and L2, keeps the tile alone."""
    with no_grad():
        for (n, k), panelled in (((3072, 768), True), ((768, 3072), True), ((768, 768), True), ((1152, 192), True),
                                 ((256, 192), False)):
            w = Tensor(np.ones((n, k), np.float32)).realize()
            kernel, _ = last_kernel_of(Tensor(np.ones((32, k), np.float32)) @ w.T)
            opts = heuristic_opts(kernel, CRenderer())
            assert [opt.op for opt in opts] == ["UPCAST", "UPCAST"] + (["PANEL"] if panelled else []), (n, k, opts)
            if panelled:  # the 4 row tiles of 8 (the rows' axis after its UPCAST), whole
                assert opts[-1] == Opt("PANEL", 0, 4)


def test_row_tiles_no_panel_divides_run_inside_each_panel_of_a_large_weight(monkeypatch):
    """ViT's 197 tokens make 25 tiles of 8 rows, which no PANEL of 8, 4 or 2 divides: all 25 run
    inside each panel of a 3072x768 weight, which would otherwise stream in once per row tile. 16
    tiles keep their PANELs of 4; 43 tiles, too many to keep near, keep the tile alone."""
    monkeypatch.setattr(linalg, "panel_shape", lambda device: (8, 32))
    with no_grad():
        w = Tensor(np.ones((3072, 768), np.float32)).realize()
        for rows, panel in ((197, Opt("PANEL", 0, 25)), (128, Opt("PANEL", 0, 4)), (344, None)):
            kernel, _ = product_kernel_of(Tensor(np.ones((rows, 768), np.float32)) @ w.T)
            panels = [opt for opt in heuristic_opts(kernel, AVX512) if opt.op == "PANEL"]
            assert panels == ([] if panel is None else [panel]), rows


def test_up_to_32_row_tiles_all_run_inside_each_panel_of_a_shared_weight(monkeypatch):
    """ConvNeXt-T's MLP at 14x14 (196 positions: 28 tiles of 7 rows) by its 384x1536 weight, and
    ResNet-50's 1x1 convolution 256 -> 1024 there: one PANEL of all 28 row tiles, where PANELs of 4
    read each panel of the weight 7 times (kernels alone in the model, 9 of them: 20.5 -> 18.2 ms).
    BERT's 1024 tokens, 128 tiles, keep PANELs of 8."""
    monkeypatch.setattr(linalg, "panel_shape", lambda device: (8, 32))
    with no_grad():
        for rows, k, n, panel in ((196, 384, 1536, 28), (196, 256, 1024, 28), (1024, 384, 1536, 8)):
            w = Tensor(np.ones((n, k), np.float32)).realize()
            kernel, _ = product_kernel_of(Tensor(np.ones((rows, k), np.float32)) @ w.T)
            panels = [opt for opt in heuristic_opts(kernel, AVX512) if opt.op == "PANEL"]
            assert [opt.amount for opt in panels] == [panel], (rows, k, n, panels)


def test_row_tiles_no_panel_divides_run_inside_each_panel_of_a_weight_half_the_l2(monkeypatch):
    """ViT's attention projection, 197 tokens by a 768x768 weight (2.25 MiB, where the L2 holds 2):
    its 25 row tiles all run inside each panel of the weight, which with the tile alone every row
    tile read whole from beyond L2 (2 threads, kernel alone: 1.56-1.76 -> 1.14-1.24 ms). A weight
    below WIDE_VECTOR_PANEL_ELEMENTS, which the tiles reread from L2, keeps the tile alone."""
    monkeypatch.setattr(linalg, "panel_shape", lambda device: (8, 32))
    with no_grad():
        for n, panel in ((768, Opt("PANEL", 0, 25)), (256, None)):
            w = Tensor(np.ones((n, 768), np.float32)).realize()
            kernel, _ = product_kernel_of(Tensor(np.ones((197, 768), np.float32)) @ w.T)
            panels = [opt for opt in heuristic_opts(kernel, AVX512) if opt.op == "PANEL"]
            assert panels == ([] if panel is None else [panel]), n


def test_a_convolution_whose_positions_no_row_tile_divides_takes_all_its_channel_groups():
    """Inception-v3's stem, 3 -> 32 channels over 149x149 positions (prime: no row tile), computed
    channels last with its output channels in groups: every group is upcast, so each input value
    loaded serves all 32 channels, not one group (2 threads, kernel alone: 4.2 -> 0.57 ms)."""
    x, w = Tensor(np.ones((1, 3, 299, 299), np.float32)), Tensor(np.ones((32, 3, 3, 3), np.float32))
    kernel, _ = product_kernel_of(x.conv2d(w, stride=2))
    upcasts = [opt for opt in heuristic_opts(kernel, CRenderer()) if opt.op == "UPCAST"]
    assert len(upcasts) == 2 and math.prod(opt.amount for opt in upcasts) == 32, upcasts


def test_an_odd_number_of_matmul_rows_takes_the_largest_row_tile_that_divides_it(monkeypatch):
    """SqueezeNet's last 1x1 convolution, 512 -> 1000 channels over 13x13 = 169 positions: 13 rows
    (2 threads: 8.8 ms one row at a time, 1.7 as 13 x 8) by 16 channels of the 1008 it computes."""
    monkeypatch.setattr(linalg, "panel_shape", lambda device: (8, 32))
    x, w = Tensor(np.ones((1, 512, 13, 13), np.float32)), Tensor(np.ones((1000, 512, 1, 1), np.float32))
    kernel, _ = product_kernel_of(x.conv2d(w))
    opts = heuristic_opts(kernel, AVX512)
    assert sorted(opt.amount for opt in opts if opt.op == "UPCAST") == [13, 16]


def test_a_constant_weight_is_packed_from_eight_rows_once():
    """x @ W.T under no_grad (a linear layer in inference, a prompt of 32 tokens): W's panels are a
    value of an unchanged buffer, kept after the first call, so later calls run the product alone.
    Below 8 rows, or with W's gradient recorded, W is read in place."""
    rng = np.random.default_rng(8)
    w = Tensor(rng.standard_normal((3072, 768)).astype(np.float32), requires_grad=True).realize()
    x = rng.standard_normal((32, 768)).astype(np.float32)
    with no_grad():
        product = Tensor(x) @ w.T
        assert last_kernel_of(product)[1] == 2  # W's panels, the product reading x in place
        np.testing.assert_allclose(product.numpy(), x @ w.numpy().T, rtol=1e-4, atol=1e-3)
        stats.reset()
        again = (Tensor(x[:16]) @ w.T).numpy()
        assert stats.kernels == 1, "W's panels are kept from the first call"
        np.testing.assert_allclose(again, x[:16] @ w.numpy().T, rtol=1e-4, atol=1e-3)
        assert last_kernel_of(Tensor(x[:7]) @ w.T)[1] == 1
    assert last_kernel_of(Tensor(x) @ w.T)[1] == 2  # recorded: W copied once per call (transposed), not packed


@pytest.mark.usefixtures("avx2_panels")
def test_a_matmul_whose_columns_fill_no_whole_panel_pads_the_last():
    """147 columns (a 7x7 convolution over 3 channels, its weight gradient's im2col): panels of 16
    with the last one padded with zeros, the extra columns cut off the product."""
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((128, 1024)).astype(np.float32), rng.standard_normal((1024, 147)).astype(np.float32)
    product = Tensor(x).realize() @ Tensor(w).realize()
    items = [item for item in create_schedule([product.lazydata]) if item.kernel is not None]
    assert len(items) == 4  # the panels of each operand, the product, its cut
    assert merge_dims(items[-2].kernel).full_shape[-3:] == (10, 16, 1024)
    np.testing.assert_allclose(product.numpy(), x @ w, rtol=1e-4, atol=1e-3)


@pytest.mark.usefixtures("avx2_panels")
def test_on_avx2_a_panel_is_taken_only_with_its_block_of_steps():
    """384 steps make no block of 256: the row tiles of a PANEL would read the panel's steps from
    beyond L1 (BERT's FFN, AVX2: 40 GFLOP/s with the PANEL, 53 with the tile alone)."""
    x, w = Tensor(np.ones((264, 384), np.float32)), Tensor(np.ones((384, 1536), np.float32))
    kernel, count = last_kernel_of(x @ w)
    assert count == 2  # w's panels, the product reading x in place
    assert [opt.op for opt in heuristic_opts(kernel, AVX2)] == ["UPCAST", "UPCAST"]


def test_on_avx512_the_row_tiles_sharing_a_large_operand_run_in_panels(monkeypatch):
    """BERT's FFN in AVX-512's 8 x 32 panels: 128 row tiles share a 384x1536 (or 1536x384) weight,
    which streams from L3 for every row tile unless a PANEL of 8 of them uses each of its panels
    from L2 (2 threads, kernel alone: 156 -> 183 and 137 -> 163 GFLOP/s). A 384x384 weight (147K
    elements) keeps the tile alone (162 -> 167 only), and so does every size under AVX2."""
    monkeypatch.setattr(linalg, "panel_shape", lambda device: (8, 32))
    for (k, n), panelled in (((384, 1536), True), ((1536, 384), True), ((384, 384), False)):
        kernel, count = last_kernel_of(Tensor(np.ones((1024, k), np.float32)) @ Tensor(np.ones((k, n), np.float32)))
        assert count == 2, (k, n)  # w's panels, the product reading x in place
        panels = [opt for opt in heuristic_opts(kernel, AVX512) if opt.op == "PANEL"]
        assert panels == ([Opt("PANEL", 0, 8)] if panelled else []), (k, n)
        assert "PANEL" not in [opt.op for opt in heuristic_opts(kernel, AVX2)]


def test_on_avx512_a_panelled_matmul_runs_its_reduce_whole(monkeypatch):
    """AVX-512's 8 x 32 panels with a PANEL take no blocks of 256 steps, which AVX2's take: every
    block wrote the partial sums back and read them again (2 threads, kernel alone, 2048x1024 @
    1024x2048: 364 -> 517 GFLOP/s; GPT-2's tied vocabulary gradient, 4096 x 1024 tokens by 1024 x 256
    plus the embedding's, 8.3 -> 5.0 ms). A reduce of 3072 steps or more keeps its long blocks."""
    monkeypatch.setattr(linalg, "panel_shape", lambda device: (8, 32))
    for k, block in ((1024, None), (2048, None), (4096, Opt("BLOCK", 6, 1024))):
        kernel, _ = last_kernel_of(Tensor(np.ones((2048, k), np.float32)) @ Tensor(np.ones((k, 2048), np.float32)))
        opts = heuristic_opts(kernel, AVX512)
        assert Opt("PANEL", 0, 8) in opts, k
        assert [opt for opt in opts if opt.op == "BLOCK"] == ([block] if block else []), k
    # a weight gradient's x.T in panels by 4608 columns: over 128 steps, too short for two blocks, the
    # PANEL stays (Winograd's products: 5.2 -> 3.8 ms); over 784, which blocks did not divide, the
    # tile alone stays (7.9 ms against 8.3 with the PANEL)
    for k, panelled in ((128, True), (784, False), (1024, True)):
        kernel, _ = last_kernel_of((Tensor(np.ones((k, 512), np.float32)) * 1.0).T @ Tensor(np.ones((k, 4608), np.float32)))
        opts = heuristic_opts(kernel, AVX512)
        assert (Opt("PANEL", 0, 8) in opts) == panelled and "BLOCK" not in [opt.op for opt in opts], k
    monkeypatch.setattr(linalg, "panel_shape", lambda device: (6, 16))
    kernel, _ = last_kernel_of(Tensor(np.ones((264, 2048), np.float32)) @ Tensor(np.ones((2048, 1024), np.float32)))
    assert heuristic_opts(kernel, AVX2)[-1] == Opt("BLOCK", 6, 256)


@pytest.mark.usefixtures("avx2_panels")
def test_panel_keeps_enough_row_panels_for_the_threads():
    x, w = Tensor(np.ones((96, 2048), np.float32)), Tensor(np.ones((2048, 1024), np.float32))
    kernel, _ = last_kernel_of(x @ w)
    assert Opt("PANEL", 0, 4) in heuristic_opts(kernel, AVX2)  # 16 row tiles: 4 panels of 4


def test_a_panel_with_a_long_reduce_runs_it_in_long_blocks(monkeypatch):
    """ResNet-18's weight gradients at 14x14, batch 16, in AVX-512's 8 x 32 panels: 256 x 3136 @
    3136 x 2304. Its 32 row tiles take a PANEL and its 3136 steps blocks of 784 (2 threads, kernel
    alone: 17.0-17.2 ms; the tile alone in blocks of 224 steps, 17.7-17.9; a PANEL that needed blocks
    of 256, which 3136 steps do not make, took none: 19.7-20.2)."""
    monkeypatch.setattr(linalg, "panel_shape", lambda device: (8, 32))
    x, w = Tensor(np.ones((256, 3136), np.float32)), Tensor(np.ones((3136, 2304), np.float32))
    kernel, _ = last_kernel_of(x @ w)
    assert kernel.full_shape[:3] == (256, 72, 32)  # x read in place, 32 tiles of 8 rows
    assert heuristic_opts(kernel, AVX512) == [
        Opt("UPCAST", 2, 32), Opt("UPCAST", 0, 8), Opt("PANEL", 0, 8), Opt("BLOCK", 6, 784)]


@pytest.mark.usefixtures("avx2_panels")
def test_row_panels_that_take_no_panel_keep_the_tile_alone():
    """43 row tiles (a prime) take no PANEL; blocks of 64 steps measured 96 GFLOP/s there against 134
    for the tile alone (256x2048 @ 2048x1024, AVX2, 2 threads)."""
    x, w = Tensor(np.ones((256, 2048), np.float32)), Tensor(np.ones((2048, 1024), np.float32))
    kernel, _ = product_kernel_of(x @ w)
    assert heuristic_opts(kernel, AVX2) == [Opt("UPCAST", 2, 16), Opt("UPCAST", 0, 6)]


@pytest.mark.parametrize("opt,renderer,reason", [
    (Opt("PANEL", 2, 2), CRenderer(), "is a reduce axis"),
    (Opt("PANEL", 1, 2), CRenderer(), "no global loop after axis 1"),
    (Opt("PANEL", 0, 3), CRenderer(), "not divisible by 3"),
    (Opt("PANEL", 0, 2), OpenCLRenderer(), "only rendered by the C dialect"),
])
def test_a_refused_panel_says_why(opt, renderer, reason):
    with pytest.raises(OptError, match=reason):
        apply_opt(initial(matmul_kernel()), opt, renderer)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int64])
def test_paneled_kernels_match_numpy(monkeypatch, dtype):
    """PANEL moves a loop and permutes every view with it: a tiled and blocked matmul with a bias
    and relu epilogue, and an elementwise kernel over a transposed view, against numpy."""
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (32, 256)).astype(dtype.np)
    b = rng.integers(-3, 4, (256, 64)).astype(dtype.np)
    bias = rng.integers(-3, 4, (64,)).astype(dtype.np)
    with_opts(monkeypatch, [Opt("UPCAST", 1, 16), Opt("UPCAST", 0, 2), Opt("PANEL", 0, 4), Opt("BLOCK", 5, 64)])
    result = (Tensor(a) @ Tensor(b) + Tensor(bias)).relu()
    (item,) = create_schedule([result.lazydata])
    assert [opt.op for opt in realize.get_program("CPU", item.kernel).opts] == ["UPCAST", "UPCAST", "PANEL", "BLOCK"]
    np.testing.assert_array_equal(result.numpy(), np.maximum(a @ b + bias, 0))
    with_opts(monkeypatch, [Opt("PANEL", 0, 4)])
    c = rng.integers(-3, 4, (64, 32)).astype(dtype.np)
    np.testing.assert_array_equal((Tensor(a[:, :64]) * 2 + Tensor(c).T).numpy(), a[:, :64] * 2 + c.T)


def test_unrolled_max_keeps_nan_and_each_step_its_own_accumulator(monkeypatch):
    values = np.arange(64, dtype=np.float32).reshape(4, 16)
    values[1, 5] = np.nan
    values[2, 3] = np.inf
    with_opts(monkeypatch, [Opt("UNROLL", 1, 8)])
    result = Tensor(values).max(axis=1)
    (item,) = create_schedule([result.lazydata])
    program = linearize(item.kernel, CRenderer(), opts=[Opt("UNROLL", 1, 8)])
    assert len(program.accumulators) == 8 and len(program.combine) == 7
    np.testing.assert_array_equal(result.numpy(), values.max(axis=1))


def test_padded_tile_that_gcc_12_vectorized_wrongly(monkeypatch):
    """Two outputs per iteration from shared masked loads, in a loop gcc's loop vectorizer took."""
    graph = (2, 2, 2, dtypes.float32, 0, "padded")
    with_opts(monkeypatch, [Opt("UPCAST", 1, 2), Opt("UNROLL", 3, 4)])
    np.testing.assert_array_equal(build("CPU", *graph).numpy(), build("NPY", *graph).numpy())


# ---- random graphs under random valid opts, against NPY ---------------------------------------

SIZES = st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16])
DTYPES = [dtypes.float32, dtypes.float16, dtypes.int32]


def random_opts(kernel, renderer, rng: np.random.Generator) -> list[Opt]:
    """Up to three opts, each drawn from those valid after the previous ones."""
    optimized, opts = initial(kernel), []
    for _ in range(rng.integers(1, 4)):
        choices = candidate_opts(optimized, renderer)
        if not choices:
            break
        opt = choices[rng.integers(len(choices))]
        optimized = apply_opt(optimized, opt, renderer)
        opts.append(opt)
    return opts


@st.composite
def opt_graph(draw):
    """A small graph with a reduce that tiles: a (batched) matmul-like product or a padded window
    sum, then an elementwise tail; its dtype and layout drawn at random."""
    m, k, n = draw(SIZES), draw(SIZES), draw(SIZES)
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2 ** 16))
    kind = draw(st.sampled_from(["matmul", "transposed", "padded", "sum", "elementwise", "max"]))
    return m, k, n, dtype, seed, kind


def build(device, m, k, n, dtype, seed, kind):
    rng = np.random.default_rng(seed)
    a_values = rng.integers(-3, 4, (m, k)).astype(dtype.np)
    b_values = rng.integers(-3, 4, (k, n)).astype(dtype.np)
    a, b = Tensor(a_values, device=device), Tensor(b_values, device=device)
    if kind == "matmul":
        return (a @ b) * 2 + 1
    if kind == "transposed":
        return (b.T @ a.T).relu()
    if kind == "padded":
        return (a.pad(((1, 1), (0, 2))).reshape(m + 2, 1, k + 2) * b.pad(((0, 2), (0, 0))).T.reshape(1, n, k + 2)).sum(-1)
    if kind == "sum":
        return a.sum(0) + b.sum(1)[:1]
    if kind == "max":
        return (a.reshape(m, k, 1) + b.reshape(1, k, n)).amax(1)
    return (a.reshape(m, k, 1) * b.reshape(1, k, n) - 1).abs()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=opt_graph(), opt_seed=st.integers(0, 2 ** 16))
def test_random_graphs_under_random_opts_match_npy(graph, opt_seed, monkeypatch_module):
    rng = np.random.default_rng(opt_seed)
    chosen = []

    def pick(kernel, renderer):
        opts = random_opts(kernel, renderer, rng)
        chosen.append([str(opt) for opt in opts])
        return opts
    monkeypatch_module.setattr(linearize_module, "heuristic_opts", pick)
    render_anew(monkeypatch_module)
    actual = build("CPU", *graph).numpy()
    expected = build("NPY", *graph).numpy()
    tolerance = 2e-2 if graph[3] == dtypes.float16 else 1e-5
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=tolerance, atol=tolerance,
                               err_msg=f"graph {graph} with opts {chosen}")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_random_opts_on_opencl_match_npy(monkeypatch):
    opencl_available()
    rng = np.random.default_rng(3)
    monkeypatch.setattr(linearize_module, "heuristic_opts", lambda kernel, renderer: random_opts(kernel, renderer, rng))
    render_anew(monkeypatch)
    for kind in ("matmul", "padded", "max"):
        graph = (8, 6, 16, dtypes.float32, 5, kind)
        np.testing.assert_allclose(build("OPENCL", *graph).numpy(), build("NPY", *graph).numpy(), rtol=1e-5)


@pytest.mark.parametrize("opts", [[], [Opt("UNROLL", 1, 4)], [Opt("UPCAST", 0, 4)], [Opt("UNROLL", 1, 8), Opt("UPCAST", 0, 2)]],
                         ids=["plain", "unrolled", "upcast", "both"])
def test_chained_reduces_match_numpy_under_opts(monkeypatch, opts):
    """Softmax's statistics kernel (row max, then the sum of exponentials, in one kernel): every
    copy of the sum's body reads the max of its own row."""
    values = np.random.default_rng(6).standard_normal((8, 32)).astype(np.float32)
    values[3, 7] = np.nan
    with_opts(monkeypatch, opts)
    x = Tensor(values)
    row_max = x.max(axis=1, keepdim=True)
    total = (x - row_max).exp().sum(axis=1, keepdim=True)
    (item,) = create_schedule([row_max.lazydata, total.lazydata])
    assert len(item.outputs) == 2 and len(linearize(item.kernel, CRenderer(), opts=opts).stages) == 2
    Tensor.realize(row_max, total)
    with np.errstate(invalid="ignore"):
        expected_max = values.max(axis=1, keepdims=True)
        expected_total = np.exp(values - expected_max).sum(axis=1, keepdims=True)
    np.testing.assert_array_equal(row_max.numpy(), expected_max)
    np.testing.assert_allclose(total.numpy(), expected_total, rtol=1e-5)


@pytest.mark.parametrize("opts", [[], [Opt("UNROLL", 1, 4)], [Opt("UPCAST", 0, 4)], [Opt("UNROLL", 1, 8), Opt("UPCAST", 0, 2)]],
                         ids=["plain", "unrolled", "upcast", "both"])
def test_independent_reduces_share_one_pass_under_opts(monkeypatch, opts):
    """A normalization's gradient sums (g, g * x) over the same axes: one pass over the loops, the
    values both read computed once. A sum that reads another reduce's result (softmax's sum after
    its max) joins the pass after that reduce's, where the independent sums run too."""
    x_values = np.random.default_rng(7).standard_normal((8, 32)).astype(np.float32)
    g_values = np.random.default_rng(8).standard_normal((8, 32)).astype(np.float32)
    with_opts(monkeypatch, opts)
    x, grad = Tensor(x_values), Tensor(g_values)
    g = grad * x.sigmoid()
    row_max = g.max(axis=1, keepdim=True)
    results = (row_max, (g - row_max).exp().sum(axis=1), g.sum(axis=1), (g * x).sum(axis=1))
    (item,) = create_schedule([result.lazydata for result in results])
    program = linearize(item.kernel, CRenderer(), opts=opts)
    assert sorted(stage.reduces for stage in program.stages) == [1, 3]
    if not opts:  # the sigmoid once a pass, the softmax's exponential once: 3 calls and the definition
        source = CRenderer().render_program(program)
        assert sum("lg_exp2f(" in line for line in source.splitlines()) == 4
    Tensor.realize(*results)
    expected_g = g_values / (1 + np.exp(-x_values.astype(np.float64)))
    expected_max = expected_g.max(1, keepdims=True)
    expected = (expected_max, np.exp(expected_g - expected_max).sum(1), expected_g.sum(1), (expected_g * x_values).sum(1))
    for result, want in zip(results, expected):
        np.testing.assert_allclose(result.numpy(), want, rtol=1e-5, atol=1e-5)


def test_chained_reduces_refuse_block():
    x = Tensor(np.ones((4, 512), np.float32))
    total = (x - x.max(axis=1, keepdim=True)).sum(axis=1)
    (item,) = create_schedule([total.lazydata])
    with pytest.raises(OptError, match="several reduces"):
        apply_opt(initial(merge_dims(item.kernel)), Opt("BLOCK", 1, 64), CRenderer())


# ---- work-groups: LOCAL and GROUP (GPU dialects) ------------------------------------------------

def row_sum_kernel(rows=4, columns=64):
    return kernel_of(Tensor(np.ones((rows, columns), np.float32)).sum(axis=1))


@pytest.mark.parametrize("opts,reason", [
    ([Opt("LOCAL", 2, 4)], "is a reduce axis; LOCAL applies to global axes"),
    ([Opt("GROUP", 0, 4)], "is a global axis; GROUP applies to reduce axes"),
    ([Opt("LOCAL", 1, 5)], "not divisible by 5"),
    ([Opt("LOCAL", 1, 32), Opt("GROUP", 3, 12)], "more than 256 work-items in a group"),
    ([Opt("GROUP", 2, 4), Opt("GROUP", 2, 3)], "only one GROUP per kernel"),
])
def test_a_refused_work_group_opt_says_why(opts, reason):
    with pytest.raises(OptError, match=reason):
        apply_opts(matmul_kernel(m=16, k=12, n=32), opts, OpenCLRenderer())


@pytest.mark.parametrize("opts", [[Opt("GROUP", 1, 16)], [Opt("UPCAST", 0, 2), Opt("GROUP", 2, 4), Opt("LOCAL", 0, 2)]],
                         ids=["group", "upcast-group-local"])
def test_grouped_chained_reduces_match_numpy(monkeypatch, opts):
    """Several reduces in one kernel under GROUP (a layer norm's mean, then its sum of squares;
    softmax's max, then its sum of exponentials): every lane folds the earlier reduce's lanes before
    the later reduce reads its result."""
    opencl_available()
    grouped = []

    def pick(kernel, renderer):
        if sum(node.is_reduce for node in kernel.ast.walk()) < 2:
            return []
        grouped.append(kernel)
        return list(opts)
    monkeypatch.setattr(linearize_module, "heuristic_opts", pick)
    render_anew(monkeypatch)
    values = np.random.default_rng(5).standard_normal((8, 64)).astype(np.float32) * 3 + 1
    x = Tensor(values, device="OPENCL")
    centred = x - x.mean(axis=1, keepdim=True)
    np.testing.assert_allclose((centred * centred).sum(axis=1).numpy(), ((values - values.mean(1, keepdims=True)) ** 2).sum(1),
                               rtol=1e-5, atol=1e-5)
    exponentials = (x - x.max(axis=1, keepdim=True)).exp().sum(axis=1).numpy()
    np.testing.assert_allclose(exponentials, np.exp(values - values.max(1, keepdims=True)).sum(1), rtol=1e-5)
    assert len(grouped) == 2  # one grouped kernel for each


def test_work_group_opts_are_candidates_only_on_gpu_dialects():
    kernel = row_sum_kernel()
    for renderer in (OpenCLRenderer(), CUDARenderer()):
        candidates = candidate_opts(initial(kernel), renderer)
        assert Opt("LOCAL", 0, 4) in candidates and Opt("GROUP", 1, 16) in candidates
    assert not [opt for opt in candidate_opts(initial(kernel), CRenderer()) if opt.op in ("LOCAL", "GROUP")]
    with pytest.raises(OptError, match="needs a dialect with work-groups"):
        apply_opt(initial(kernel), Opt("GROUP", 1, 16), CRenderer())


def test_work_group_opts_leave_the_c_output_unchanged():
    """Kernels without LOCAL/GROUP render byte for byte as before on C and OpenCL."""
    kernel = row_sum_kernel()
    program = linearize(kernel, OpenCLRenderer(), opts=[Opt("UNROLL", 1, 4)])
    assert program.local_loops == [] and program.group_lane is None
    for renderer in (CRenderer(), OpenCLRenderer()):  # CUDA groups long reduces (test above)
        # the heuristic from its module: a module-scoped monkeypatch above may replace linearize's
        opts = heuristic_opts(kernel, renderer)
        source = renderer.render_program(linearize(kernel, renderer, opts=opts))
        assert "lanes" not in source and "local=" not in source


def opencl_available() -> None:
    from lazygrad.devices import DeviceUnavailable, get_device
    try:
        get_device("OPENCL")
    except DeviceUnavailable as error:
        pytest.skip(f"no OpenCL device: {error}")


def random_work_group_opts(kernel, renderer, rng: np.random.Generator) -> list[Opt]:
    """Random valid opts: each one a GROUP, a LOCAL or any opt, a third of the time each (when
    there is such a candidate)."""
    optimized, opts = initial(kernel), []
    for _ in range(rng.integers(1, 5)):
        choices = candidate_opts(optimized, renderer)
        if not choices:
            break
        wanted = ("GROUP", "LOCAL", None)[rng.integers(3)]
        pool = [opt for opt in choices if opt.op == wanted] or choices
        opt = pool[rng.integers(len(pool))]
        optimized = apply_opt(optimized, opt, renderer)
        opts.append(opt)
    return opts


KINDS = ["matmul", "transposed", "padded", "sum", "elementwise", "max"]


def test_random_work_group_opts_on_opencl_match_npy(monkeypatch):
    """Random graphs, dtypes and sizes under random valid opt lists rich in LOCAL and GROUP."""
    opencl_available()
    rng = np.random.default_rng(11)
    chosen = []

    def pick(kernel, renderer):
        opts = random_work_group_opts(kernel, renderer, rng)
        chosen.append([str(opt) for opt in opts])
        return opts
    monkeypatch.setattr(linearize_module, "heuristic_opts", pick)
    render_anew(monkeypatch)
    sizes = [2, 4, 6, 8, 12, 16, 32]
    for number in range(36):  # about 30 s when PoCL compiles them all afresh
        kind = KINDS[number % len(KINDS)]
        m, k, n = (int(rng.choice(sizes)) for _ in range(3))
        dtype = DTYPES[number % len(DTYPES)]
        graph = (m, k, n, dtype, number, kind)
        chosen.clear()
        actual = build("OPENCL", *graph).numpy()
        expected = build("NPY", *graph).numpy()
        tolerance = 2e-2 if dtype == dtypes.float16 else 1e-5
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=tolerance,
                                   atol=tolerance, err_msg=f"graph {graph} with opts {chosen}")


def run_with_opts(monkeypatch, opts, make):
    """make() built and realized on OPENCL with `opts` for every kernel."""
    with_opts(monkeypatch, opts)
    return make().numpy()


@pytest.mark.parametrize("opts", [[Opt("GROUP", 1, 16)], [Opt("GROUP", 1, 8), Opt("UNROLL", 1, 4)],
                                  [Opt("UPCAST", 0, 2), Opt("GROUP", 2, 4), Opt("LOCAL", 0, 2)]],
                         ids=["group", "group-unroll", "upcast-group-local"])
def test_grouped_max_keeps_nan_and_grouped_sums_match_numpy(monkeypatch, opts):
    opencl_available()
    values = np.random.default_rng(7).standard_normal((8, 64)).astype(np.float32)
    values[1, 5], values[2, 63], values[3, 0] = np.nan, np.inf, -np.inf
    row_max = run_with_opts(monkeypatch, opts, lambda: Tensor(values, device="OPENCL").max(axis=1))
    np.testing.assert_array_equal(row_max, values.max(axis=1))
    row_sum = run_with_opts(monkeypatch, opts, lambda: Tensor(values, device="OPENCL").sum(axis=1))
    np.testing.assert_allclose(row_sum, values.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_a_grouped_float16_sum_accumulates_in_float_and_rounds_once(monkeypatch):
    """512 ones and 512 values of 2^-5 per row (within lazy.ACCUMULATION_LIMIT, so one kernel):
    summed in half, small values would vanish once a sum passes 64 (half's spacing there is 2^-4);
    in float the row sum 528 is exact."""
    opencl_available()
    values = np.ones((2, 1024), np.float16)
    values[:, 1::2] = np.float16(2.0 ** -5)
    result = run_with_opts(monkeypatch, [Opt("GROUP", 1, 16)], lambda: Tensor(values, device="OPENCL").sum(axis=1))
    expected = values.astype(np.float32).sum(axis=1).astype(np.float16)
    assert result.dtype == np.float16
    np.testing.assert_array_equal(result, expected)


def test_a_grouped_bool_any_matches_numpy(monkeypatch):
    opencl_available()
    values = np.zeros((4, 64), np.bool_)
    values[1, 40] = values[3, 0] = True
    result = run_with_opts(monkeypatch, [Opt("GROUP", 1, 16)], lambda: Tensor(values, device="OPENCL").max(axis=1))
    np.testing.assert_array_equal(result, values.max(axis=1))


def test_a_full_reduce_runs_as_one_group(monkeypatch):
    opencl_available()
    values = np.arange(512, dtype=np.float32)
    result = run_with_opts(monkeypatch, [Opt("GROUP", 0, 64)], lambda: Tensor(values, device="OPENCL").sum())
    assert float(result) == float(values.sum())


def test_softmax_under_local_matches_numpy(monkeypatch):
    """Both softmax kernels (a row max then a sum; a normalization) with their rows in work-groups."""
    opencl_available()
    values = np.random.default_rng(8).standard_normal((16, 32)).astype(np.float32)

    def softmax():
        x = Tensor(values, device="OPENCL")
        exponentials = (x - x.amax(-1, keepdim=True)).exp()
        return exponentials / exponentials.sum(-1, keepdim=True)
    result = run_with_opts(monkeypatch, [Opt("LOCAL", 0, 4)], softmax)
    expected = np.exp(values - values.max(-1, keepdims=True))
    np.testing.assert_allclose(result, expected / expected.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


# ---- THREADS -------------------------------------------------------------------------------------

def big_elementwise_kernel():
    return kernel_of(Tensor(np.ones((256, 256), np.float32)) * 2 + 1)


def test_threads_apply_once_to_the_outermost_global_loop_on_c_only():
    kernel = matmul_kernel()  # (16, 32, 12): globals 0 and 1, reduce 2
    with pytest.raises(OptError, match="outermost global loop, axis 0"):
        apply_opt(initial(kernel), Opt("THREADS", 1, 2), CRenderer())
    once = apply_opt(initial(kernel), Opt("THREADS", 0, 2), CRenderer())
    with pytest.raises(OptError, match="has a THREADS already"):
        apply_opt(once, Opt("THREADS", 0, 1), CRenderer())
    with pytest.raises(OptError, match="needs the C dialect"):
        apply_opt(initial(kernel), Opt("THREADS", 0, 2), OpenCLRenderer())
    assert Opt("THREADS", 0, 1) in candidate_opts(initial(kernel), CRenderer())


@pytest.mark.parametrize("threads,pragma", [(None, "#pragma omp parallel for\n"), (1, None),
                                            (2, "#pragma omp parallel for num_threads(2)\n")])
def test_threads_set_the_outer_loops_thread_count(monkeypatch, threads, pragma):
    opts = [] if threads is None else [Opt("THREADS", 0, threads)]
    source = CRenderer().render_program(linearize(big_elementwise_kernel(), CRenderer(), opts=opts))
    if pragma is None:
        assert "omp parallel" not in source
    else:
        assert pragma in source
    with_opts(monkeypatch, opts)
    values = np.arange(256 * 256, dtype=np.float32).reshape(256, 256)
    np.testing.assert_array_equal((Tensor(values) * 2 + 1).numpy(), values * 2 + 1)


@pytest.mark.parametrize("sizes,threads,collapsed", [
    ((7, 32, 4), 2, 2),      # 7 rows of tiles would run as 4 + 3
    ((28, 32, 4), 2, 1),     # even already
    ((7, 32, 4), 7, 1),
    ((3, 5, 7, 9), 2, 3),    # 3, 15, 105: never the innermost
    ((7, 4), 2, 1),
    ((65, 8, 8), 2, 1),      # many: little to gain
    ((17, 12, 4), 1, 1),
])
def test_the_threads_split_the_outer_loops_together_where_the_first_splits_unevenly(sizes, threads, collapsed):
    assert parallel_loops([Loop(f"i{n}", size, False) for n, size in enumerate(sizes)], threads) == collapsed


@pytest.mark.parametrize("threads", [2, 3])
def test_a_matmul_whose_rows_of_tiles_split_unevenly_runs_collapsed_and_matches_numpy(monkeypatch, threads):
    """448 x 256 @ 256 x 1024: 56 tiles of 8 rows, in 7 PANELs of 8, by 32 panels of columns; the
    pragma collapses both loops, and the product is numpy's."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((448, 256)).astype(np.float32), rng.standard_normal((256, 1024)).astype(np.float32)
    avx512 = CRenderer(simd_lanes=16, simd_registers=32, threads=threads)
    kernel, _ = product_kernel_of(Tensor(a) @ Tensor(b))
    program = linearize(kernel, avx512, opts=heuristic_opts(kernel, avx512))
    assert [loop.size for loop in program.global_loops] == [7, 32, 8] and program.parallel
    assert "#pragma omp parallel for collapse(2)\n" in avx512.render_program(program)
    monkeypatch.setattr(realize, "_RENDERERS", {"CPU": CRenderer(*realize.get_device("CPU").simd, threads=threads)})
    monkeypatch.setattr(realize, "_PROGRAMS", {})
    np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_tiled_opencl_matmuls_match_numpy(monkeypatch, dtype):
    """The default heuristic's tile on OPENCL: a plain matmul, one with a fused bias and relu, and a
    batched one, each against numpy."""
    opencl_available()
    monkeypatch.setattr(realize, "_PROGRAMS", {})
    rng = np.random.default_rng(12)
    a = rng.standard_normal((48, 128)).astype(dtype)
    b = rng.standard_normal((128, 80)).astype(dtype)
    bias = rng.standard_normal(80).astype(dtype)
    batch_a = rng.standard_normal((3, 16, 64)).astype(dtype)
    batch_b = rng.standard_normal((3, 64, 32)).astype(dtype)

    def on_device(values: np.ndarray) -> Tensor:
        return Tensor(values, device="OPENCL")
    products = {
        "plain": (lambda: on_device(a) @ on_device(b), a.astype(np.float64) @ b),
        "bias and relu": (lambda: (on_device(a) @ on_device(b) + on_device(bias)).relu(),
                          np.maximum(a.astype(np.float64) @ b + bias, 0)),
        "batched": (lambda: on_device(batch_a) @ on_device(batch_b), batch_a.astype(np.float64) @ batch_b),
    }
    tolerance = 2e-2 if dtype == np.float16 else 1e-4
    for name, (make, expected) in products.items():
        result = make()
        (item,) = [item for item in create_schedule([result.lazydata]) if item.kernel is not None]
        assert [opt.op for opt in heuristic_opts(merge_dims(item.kernel), OpenCLRenderer())] == ["UPCAST", "UPCAST"], name
        np.testing.assert_allclose(result.numpy().astype(np.float64), expected, rtol=tolerance, atol=tolerance,
                                   err_msg=name)


def test_a_padded_elementwise_kernel_computes_vectors_along_its_unpadded_last_axis():
    """EfficientNet's SiLU stored into its depthwise convolution's padded input, channels last: gcc
    does not vectorize the masked loads, so the channels are upcast by two vectors (3.3 -> 0.33 ms).
    Padding along the last axis, or none, keeps gcc's own loops."""
    x = Tensor(np.random.default_rng(3).standard_normal((1, 6, 6, 64)).astype(np.float32))
    silu = x * x.sigmoid()
    padded = silu.pad(((0, 0), (1, 1), (1, 1), (0, 0)))
    assert heuristic_opts(kernel_of(padded), AVX512) == [Opt("UPCAST", 2, 32)]
    assert heuristic_opts(kernel_of(padded), AVX2) == [Opt("UPCAST", 2, 16)]
    channels_144 = Tensor(np.ones((1, 6, 6, 144), np.float32)).sigmoid().pad(((0, 0), (2, 2), (2, 2), (0, 0)))
    assert heuristic_opts(kernel_of(channels_144), AVX512) == [Opt("UPCAST", 2, 16)]  # one vector: two do not divide
    assert heuristic_opts(kernel_of(silu.pad(((0, 0), (0, 0), (0, 0), (1, 31)))), AVX512) == []
    assert heuristic_opts(kernel_of(silu), AVX512) == []
    expected = np.pad(x.numpy() / (1 + np.exp(-x.numpy())), ((0, 0), (1, 1), (1, 1), (0, 0)))
    np.testing.assert_allclose(padded.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_convolutions_over_17_columns_take_17_rows_of_16_channels(monkeypatch):
    """Inception-v3's 17x17 stage: its 1x1, 1x7 and stride-2 3x3 convolutions had no row tile (17 and
    289 are divisible by none of 8, 7, 6, 4, 2) and its 3x3 one ran 51 ms; as 17 x 16 it runs 3 ms."""
    monkeypatch.setattr(linalg, "panel_shape", lambda device: (8, 32))
    for x, w, stride in (((1, 768, 17, 17), (192, 768, 1, 1), 1), ((1, 192, 17, 17), (192, 192, 1, 7), 1),
                         ((1, 288, 35, 35), (384, 288, 3, 3), 2)):
        padding = (0, 3) if w[-1] == 7 else 0
        kernel, _ = product_kernel_of(Tensor(np.ones(x, np.float32)).conv2d(Tensor(np.ones(w, np.float32)),
                                                                              stride=stride, padding=padding))
        upcasts = sorted(opt.amount for opt in heuristic_opts(kernel, AVX512) if opt.op == "UPCAST")
        assert upcasts == [16, 17], (x, w, heuristic_opts(kernel, AVX512))


def test_a_reduce_per_channel_takes_no_vector_of_channels_its_activations_lie_far_apart_along():
    """A group norm's weight gradient after a convolution with a bias: per channel, the sum over batch
    and pixels of the output's gradient times the normalized input. The bias walks the channels
    contiguously, but the activations lie 4096 apart along them: channels as vector lanes gathered
    16 values a step on one thread (5.7 ms at 8 x 32 x 64 x 64, 2 threads), where the plain loops
    run each channel's pixels as a SIMD reduction on both threads. Values against numpy."""
    from lazygrad import nn
    rng = np.random.default_rng(0)
    norm = nn.GroupNorm(8, 32)
    x = rng.standard_normal((8, 32, 64, 64)).astype(np.float32)
    b, g = rng.standard_normal(32).astype(np.float32), rng.standard_normal((8, 32, 64, 64)).astype(np.float32)
    (norm(Tensor(x) + Tensor(b).reshape(1, 32, 1, 1)) * Tensor(g)).sum().backward()
    (kernel,) = [item.kernel for item in create_schedule([norm.weight.grad.lazydata]) if item.kernel is not None]
    assert not any(opt.op == "UPCAST" for opt in heuristic_opts(merge_dims(kernel), CRenderer()))
    groups = (x + b.reshape(1, 32, 1, 1)).astype(np.float64).reshape(8, 8, -1)
    normalized = ((groups - groups.mean(-1, keepdims=True)) / np.sqrt(groups.var(-1, keepdims=True) + 1e-5))
    expected = (normalized.reshape(8, 32, 64, 64) * g).sum((0, 2, 3))
    np.testing.assert_allclose(norm.weight.grad.numpy(), expected, rtol=1e-3, atol=1e-2)


def test_a_convolution_tile_takes_whole_vectors_of_channels_where_they_divide_them():
    """A reduce over several axes whose vector axis 32 or 16 divides takes that many lanes, not the
    widest run up to 32 that divides it: Winograd's input transform of 80 channels (a detector's score
    head) took 20, a vector and a quarter, and ran at 111 GFLOP/s where 64 channels ran at 400 (40 x
    40 tiles, 2 threads, 0.58 -> 0.23 ms as 16). Runs no power of two divides keep theirs (28 of 56)."""
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((1, 80, 40, 40)).astype(np.float32), rng.standard_normal((80, 80, 3, 3)).astype(np.float32)
    with no_grad():
        out = Tensor(x).conv2d(Tensor(w), padding=1)
        items = [item for item in create_schedule([out.lazydata]) if item.kernel is not None]
    transforms = [merge_dims(item.kernel) for item in items  # the input's 4x4 tiles, transformed
                  if [item.kernel.full_shape[axis] for axis in item.kernel.reduce_axes] == [4, 4]]
    assert transforms, [item.kernel.name for item in items]
    for kernel in transforms:
        channels = kernel.full_shape.index(80)
        assert Opt("UPCAST", channels, 16) in heuristic_opts(kernel, CRenderer(16, 32))
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # 1, 80, 40, 40, 3, 3
    expected = np.einsum("nchwij,ocij->nohw", windows, w)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-3, atol=1e-3)
