"""The fusion contract, pinned by counting the kernels common patterns launch (and checking values)."""
import math

import numpy as np
import pytest

from lazygrad import Tensor, no_grad, stats
from lazygrad.codegen.opts import load_strides, steps_along
from lazygrad.ops import Ops
from lazygrad.schedule.fuse import create_schedule


def kernels_for(build) -> tuple[int, np.ndarray]:
    stats.reset()
    result = build().realize()
    return stats.kernels, result.numpy()


@pytest.fixture
def inputs():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((32, 48)).astype(np.float32) for _ in range(3)]
    tensors = [Tensor(array) for array in arrays]
    return arrays, tensors


def test_ten_op_elementwise_chain_on_three_inputs_is_one_kernel(inputs):
    (a, b, c), (ta, tb, tc) = inputs

    def chain(x, y, z, lib):
        out = x * y + z                       # 2
        out = lib.maximum(out, 0) * 0.5 - x   # 5
        out = lib.exp(out) + y * y            # 8
        return lib.sqrt(out) / (z * z + 1)    # 12

    count, value = kernels_for(lambda: chain(ta, tb, tc, _TensorLib))
    assert count == 1
    np.testing.assert_allclose(value, chain(a, b, c, np), rtol=1e-5, atol=1e-6)


class _TensorLib:
    maximum = staticmethod(lambda x, y: x.maximum(y))
    exp = staticmethod(lambda x: x.exp())
    sqrt = staticmethod(lambda x: x.sqrt())


def test_reduce_fuses_with_its_elementwise_input(inputs):
    (a, b, _), (ta, tb, _) = inputs
    count, value = kernels_for(lambda: (ta * tb).sum(1))
    assert count == 1
    np.testing.assert_allclose(value, (a * b).sum(1), rtol=1e-5, atol=1e-5)


def test_reduce_fuses_with_elementwise_output():
    x = np.random.default_rng(1).standard_normal((16, 20)).astype(np.float32)
    count, value = kernels_for(lambda: (Tensor(x) * 2).sum(1).relu())
    assert count == 1
    np.testing.assert_allclose(value, np.maximum((x * 2).sum(1), 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask_dtype, kernels", [(np.int64, 2), (np.int32, 1)])
def test_an_int64_mask_broadcast_into_a_reduce_is_stored_once(mask_dtype, kernels):
    """An attention mask cast from int64 to float (no AVX2 vector instruction) and broadcast over
    every score is stored once, not converted again for every score; an int32 one is cheap to redo."""
    rng = np.random.default_rng(3)
    scores = Tensor(rng.standard_normal((4, 3, 16, 16)).astype(np.float32)).realize()
    mask = np.ones((4, 16), mask_dtype)
    mask[:, 11:] = 0
    mask_tensor = Tensor(mask).realize()
    count, value = kernels_for(lambda: (scores + (1.0 - mask_tensor.reshape(4, 1, 1, 16).float()) * -1e9).amax(-1))
    assert count == kernels
    expected = (scores.numpy() + (1.0 - mask.reshape(4, 1, 1, 16).astype(np.float32)) * -1e9).max(-1)
    np.testing.assert_allclose(value, expected, rtol=1e-6)


def test_linear_bias_relu_is_one_kernel():
    rng = np.random.default_rng(2)
    x, w, b = (rng.standard_normal(shape).astype(np.float32) for shape in [(8, 32), (32, 16), (16,)])
    count, value = kernels_for(lambda: (Tensor(x) @ Tensor(w) + Tensor(b)).relu())
    assert count == 1
    np.testing.assert_allclose(value, np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-5)


def test_softmax_from_primitives_is_two_kernels(inputs):
    """The row max and the sum of exponentials share one kernel (two loops per row), then the
    division."""
    (a, _, _), (ta, _, _) = inputs

    def softmax():
        e = (ta - ta.max(axis=1, keepdim=True)).exp()
        return e / e.sum(axis=1, keepdim=True)
    count, value = kernels_for(softmax)
    assert count == 2
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(value, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_layernorm_is_two_kernels(inputs):
    """The mean and the variance share one kernel, then the normalization."""
    (a, _, _), (ta, _, _) = inputs

    def layernorm():
        centered = ta - ta.mean(1, keepdim=True)
        return centered / ((centered * centered).mean(1, keepdim=True) + 1e-5).sqrt()
    count, value = kernels_for(layernorm)
    assert count == 2
    centered = a - a.mean(1, keepdims=True)
    expected = centered / np.sqrt((centered ** 2).mean(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5)


def test_a_batch_norm_computes_its_per_channel_scale_and_shift_once():
    """In eval mode a batch norm is input * scale + shift with scale = weight / sqrt(var + eps) and
    shift = bias - mean * scale: values of the parameters alone with a square root, broadcast over
    every pixel, which the scheduler stores once (`worth_storing_parameter_value`, a kernel of C
    elements each) instead of recomputing per element. A layer norm's 1 / sqrt(variance + eps) reads
    a computed variance and stays inlined (2 kernels)."""
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(1)
    mean, var, weight, bias = rng.uniform(0.5, 2, (4, 8)).astype(np.float32)
    x = rng.standard_normal((2, 8, 5, 5)).astype(np.float32)
    parameters = [Tensor(value).realize() for value in (mean, var, weight, bias)]
    count, value = kernels_for(lambda: F.batch_norm(Tensor(x), *parameters))
    assert count == 2  # scale and shift side by side, the normalization
    channel = (1, 8, 1, 1)
    expected = (x - mean.reshape(channel)) / np.sqrt(var.reshape(channel) + 1e-5) * weight.reshape(channel) + bias.reshape(channel)
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)
    rows = Tensor(x.reshape(20, 20))
    count, _ = kernels_for(lambda: F.layer_norm(rows, (20,)))
    assert count == 2


def test_a_matmul_in_panels_stores_a_computed_left_operand_by_rows_or_packs_it():
    """On CPU, (m, k) @ (k, n) with k * n >= 2^17 copies its right operand into panels
    (linalg._panel_product). A left operand whose rows fill whole register tiles (96 rows) is read in
    place: computed (a scale, shift and relu, or an exp), it is stored row by row first, so the
    weight's panels, that store and the product make 3 kernels. With 97 rows it is packed into
    padded panels: a cheap one is computed inside its pack, an expensive one stored first, and the
    product's padding rows are cut off by a copy: 4 and 5."""
    rng = np.random.default_rng(2)
    for m, counts in [(96, (3, 3)), (97, (4, 5))]:
        x, w = rng.standard_normal((m, 512)).astype(np.float32), rng.standard_normal((512, 256)).astype(np.float32)
        scale = rng.standard_normal(512).astype(np.float32)
        count, value = kernels_for(lambda: (Tensor(x) * Tensor(scale) + 1).relu() @ Tensor(w))
        assert count == counts[0], m
        np.testing.assert_allclose(value, np.maximum(x * scale + 1, 0) @ w, rtol=1e-4, atol=1e-3)
        count, value = kernels_for(lambda: (Tensor(x) * 0.1).exp() @ Tensor(w))
        assert count == counts[1], m
        np.testing.assert_allclose(value, np.exp(x * 0.1) @ w, rtol=1e-4, atol=1e-3)


def test_a_product_whose_right_operand_has_its_columns_apart_reads_a_contiguous_copy():
    """(1280, 256) @ (256, 320) where the right operand is an activation stored channels first viewed
    as (positions, channels) (the weight gradient of a 1x1 convolution over 4x4 positions, MobileNetV2's
    last): in place its tile had no vector along the columns, 16 apart, and ran scalar (3.1 ms); a
    copy of its 82K elements first lets the product tile along them (0.4 ms)."""
    rng = np.random.default_rng(13)
    a = rng.standard_normal((1280, 256)).astype(np.float32)
    x = rng.standard_normal((16, 320, 4, 4)).astype(np.float32)
    out = Tensor(a) @ Tensor(x).permute(0, 2, 3, 1).reshape(256, 320)
    items = [item for item in create_schedule([out.lazydata]) if item.kernel is not None]
    copy, product = items
    assert not copy.kernel.reduce_axes and product.inputs[1] is copy.outputs[0]
    np.testing.assert_allclose(out.numpy(), a @ x.transpose(0, 2, 3, 1).reshape(256, 320), rtol=1e-4, atol=1e-3)


def test_a_transposed_stored_weight_that_panels_do_not_divide_is_packed_without_a_copy():
    """x @ W.T with W stored and 1000 columns, which panels of 32 (or 16) do not divide: the panels
    (padded with zero columns) are copied from W itself, read transposed, and the product cuts the
    padding off: 3 kernels. W.T was first stored as a transposed copy (GPT-2's output layer, 50257 x
    768, 92 ms of a training step at 2 threads)."""
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((64, 256)).astype(np.float32), rng.standard_normal((1000, 256)).astype(np.float32)
    tx, tw = Tensor(x).realize(), Tensor(w).realize()
    count, value = kernels_for(lambda: tx @ tw.T)
    assert count == 3
    np.testing.assert_allclose(value, x @ w.T, rtol=1e-4, atol=1e-3)


def test_movement_chains_add_no_kernel(inputs):
    (a, b, _), (ta, tb, _) = inputs
    count, value = kernels_for(
        lambda: (ta.permute(1, 0).pad(((1, 1), (2, 2))).shrink(((0, 40), (1, 30))).flip(0) + 1)
        .reshape(20, 2, 29).expand(3, 20, 2, 29))
    assert count == 1
    expected = np.flip(np.pad(a.T, ((1, 1), (2, 2)))[0:40, 1:30], 0) + 1
    np.testing.assert_allclose(value, np.broadcast_to(expected.reshape(20, 2, 29), (3, 20, 2, 29)))


def test_realizing_a_view_of_a_realized_buffer_is_one_copy_kernel(inputs):
    (a, _, _), (ta, _, _) = inputs
    count, value = kernels_for(lambda: ta.T[::2])
    assert count == 1
    np.testing.assert_array_equal(value, a.T[::2])


def test_a_reduce_feeding_another_reduce_is_stored_once(inputs):
    (a, b, _), (ta, tb, _) = inputs
    count, value = kernels_for(lambda: (ta @ tb.T).sum(axis=1, keepdim=True))
    assert count == 3  # the copy of tb.T that matmul makes first, the matmul, the sum
    np.testing.assert_allclose(value, (a @ b.T).sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-4)


def test_shared_reduce_used_by_two_outputs_is_computed_once(inputs):
    (a, _, _), (ta, _, _) = inputs
    total = ta.sum(1, keepdim=True)
    stats.reset()
    first, second = total + ta, total * ta
    first.realize(second)
    assert stats.kernels == 2  # the sum, then one kernel writing both outputs
    np.testing.assert_allclose(first.numpy(), a.sum(1, keepdims=True) + a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second.numpy(), a.sum(1, keepdims=True) * a, rtol=1e-5, atol=1e-5)


def test_schedule_is_deterministic(inputs):
    from lazygrad.schedule.fuse import create_schedule
    _, (ta, tb, tc) = inputs
    graph = ((ta @ tb.T).relu().sum(0) + tc.max()).lazydata
    first = [item.kernel for item in create_schedule([graph])]
    second = [item.kernel for item in create_schedule([graph])]
    assert first == second and len(first) == 4  # tb.T's copy, the matmul, its sum, tc.max()


# ---- sibling kernels merged into one with several outputs ----------------------------------------

def realize_counting(*tensors) -> int:
    stats.reset()
    Tensor.realize(*tensors)
    return stats.kernels


def test_siblings_reading_a_common_buffer_are_one_kernel_with_several_outputs(inputs):
    (a, b, _), (ta, tb, _) = inputs
    plus, times, positive = ta + tb, ta * 2, ta > 0
    assert realize_counting(plus, times, positive) == 1
    np.testing.assert_allclose(plus.numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose(times.numpy(), a * 2, rtol=1e-6)
    np.testing.assert_array_equal(positive.numpy(), a > 0)


def test_kernels_sharing_no_buffer_or_shape_stay_apart(inputs):
    (a, b, _), (ta, tb, _) = inputs
    assert realize_counting(ta + 1, tb * 2) == 2
    assert realize_counting(ta + 1, ta[:4] * 2) == 2


def test_a_kernel_reading_its_siblings_result_is_not_merged_with_it(inputs):
    (a, b, _), (ta, tb, _) = inputs
    first = ta + tb
    second = first * ta
    assert realize_counting(first, second) == 2
    np.testing.assert_allclose(second.numpy(), (a + b) * a, rtol=1e-6)


def test_at_most_eight_outputs_per_kernel(inputs):
    (a, _, _), (ta, _, _) = inputs
    results = [ta + number for number in range(10)]
    assert realize_counting(*results) == 2
    for number, result in enumerate(results):
        np.testing.assert_allclose(result.numpy(), a + number, rtol=1e-6)


def test_a_merge_that_would_close_a_cycle_keeps_the_kernels_apart(inputs):
    """a and d read x, c and b read y; b needs a and d needs c. Merging {c, b} and {a, d} would make
    each merged kernel wait for the other, so the schedule keeps the four kernels."""
    (x, y, _), (tx, ty, _) = inputs
    a, c = tx + 1, ty + 2
    b, d = a * ty, c * tx
    assert realize_counting(a, c, b, d) == 4
    np.testing.assert_allclose(b.numpy(), (x + 1) * y, rtol=1e-6)
    np.testing.assert_allclose(d.numpy(), (y + 2) * x, rtol=1e-6)


def test_a_reduce_read_elsewhere_than_its_row_is_not_chained(inputs):
    """The sum reads the max of another row (a flipped view), so it cannot run in the max's loop."""
    (a, _, _), (ta, _, _) = inputs
    row_max = ta.max(axis=1, keepdim=True)
    count, value = kernels_for(lambda: (ta - row_max.flip(0)).sum(axis=1))
    assert count == 2
    np.testing.assert_allclose(value, (a - a.max(axis=1, keepdims=True)[::-1]).sum(axis=1), rtol=1e-4, atol=1e-4)


def test_chained_reduces_keep_nan_and_inf(inputs):
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, -np.inf, -np.inf], [np.inf, 1.0, 2.0], [0.5, -2.0, 4.0]], np.float32)
    t = Tensor(x)
    centered = t - t.max(axis=1, keepdim=True)
    count, value = kernels_for(lambda: centered.exp().sum(axis=1))
    assert count == 1
    with np.errstate(invalid="ignore"):
        expected = np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1)
    np.testing.assert_array_equal(np.isnan(value), np.isnan(expected))
    np.testing.assert_allclose(value[~np.isnan(expected)], expected[~np.isnan(expected)], rtol=1e-6)


def test_reduces_over_the_same_rows_of_a_common_buffer_are_one_kernel(inputs):
    (a, b, _), (ta, tb, _) = inputs
    total, squares, largest, other = ta.sum(axis=1), (ta * ta).sum(axis=1), ta.max(axis=1), tb.sum(axis=0)
    assert realize_counting(total, squares, largest, other) == 2  # other sums columns: other loops
    np.testing.assert_allclose(total.numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(squares.numpy(), (a * a).sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(largest.numpy(), a.max(axis=1))
    np.testing.assert_allclose(other.numpy(), b.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_a_reduce_needing_another_through_a_third_kernel_is_not_merged_with_it(inputs):
    """second reads first's result through a column-wise kernel, so the three stay apart."""
    (a, _, _), (ta, _, _) = inputs
    first = ta.sum(axis=1, keepdim=True)
    shifted = (ta - first).sum(axis=0, keepdim=True)  # other loops: its own kernel
    second = (ta * shifted).sum(axis=1)
    assert realize_counting(first, second) == 3
    expected_shift = (a - a.sum(axis=1, keepdims=True)).sum(axis=0, keepdims=True)
    np.testing.assert_allclose(second.numpy(), (a * expected_shift).sum(axis=1), rtol=1e-4, atol=1e-3)


def test_projections_of_one_input_stay_separate_tiled_kernels():
    """Q, K and V of attention read one input with the same loops. Merged side by side, the kernel
    of three reduces gets no register tile (2 GFLOP/s against 40 or more for each alone)."""
    from lazygrad.codegen.axes import merge_dims
    from lazygrad.renderer.c import CRenderer
    from lazygrad.codegen.opts import heuristic_opts
    from lazygrad.schedule.fuse import create_schedule
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    weights = [rng.standard_normal((96, 96)).astype(np.float32) for _ in range(3)]
    tx = Tensor(x)
    projections = [tx.linear(Tensor(w)) for w in weights]
    items = [item for item in create_schedule([p.lazydata for p in projections]) if item.kernel is not None]
    products = [item.kernel for item in items if item.kernel.reduce_axes]
    assert len(products) == 3
    assert all(any(opt.op == "UPCAST" for opt in heuristic_opts(merge_dims(kernel), CRenderer())) for kernel in products)
    for projection, w in zip(projections, weights):
        np.testing.assert_allclose(projection.numpy(), x @ w.T, rtol=1e-4, atol=1e-4)


def test_a_large_costly_value_read_through_a_broadcast_is_stored_once():
    """A value of 2^16 elements or more, read through an EXPAND by an elementwise kernel and costing
    more than a few ops, is stored first (`worth_storing_broadcast`), not recomputed for every copy:
    a max pool's gradient per window, read at each window position. A small one stays inlined unless
    it costs more than SMALL_BROADCAST_RECOMPUTE_LIMIT (ONNX's DynamicQuantizeLinear zero point); a
    cheap one stays inlined: one kernel. (Integers: a float function of realized buffers with an
    expensive op is stored whatever its size, `worth_storing_parameter_value`.)"""
    rng = np.random.default_rng(3)

    def case(rows: int, build):
        a, b = (rng.integers(1, 100, (rows, 256)).astype(np.int32) for _ in range(2))
        c = rng.integers(-5, 5, (rows, 256, 4)).astype(np.int32)
        count, value = kernels_for(lambda: build(Tensor(a), Tensor(b)).reshape(rows, 256, 1).expand(rows, 256, 4) * Tensor(c))
        np.testing.assert_array_equal(value, build(a, b)[..., None] * c)
        return count

    def costly(x, y):  # two floor divisions and a floor remainder (each a DIV or MOD and its sign fix) and more
        return x // y + (x % y) * 3 + y // x

    def moderate(x, y):  # ten cheap ops
        return (x * y + x) * (y - x) + x * 3 + y * 5 - (x + 2) * y

    assert case(256, costly) == 2 and case(8, costly) == 2
    assert case(256, moderate) == 2 and case(8, moderate) == 1
    assert case(256, lambda x, y: x * y + x) == 1


def test_a_strided_transposed_convolution_multiplies_no_spread_zeros():
    """A 4x4 stride-2 transposed convolution (an upsampling) runs as one convolution per phase of its
    output (each a 2x2 kernel over the input), interleaved: its products iterate over the input's
    positions by the kernel, not the input spread out with zeros between its elements, four times
    as many at stride 2 (a U-Net's 8 x 64 x 32 x 32: 4.0 ms product, 4.4 ms storing the spread
    input). Values against numpy, grouped and with an output_padding too."""
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(6)
    for groups, output_padding in ((1, 0), (2, 1)):
        x = rng.standard_normal((2, 8, 6, 5)).astype(np.float32)
        w = rng.standard_normal((8, 4 // groups, 4, 4)).astype(np.float32)
        with no_grad():
            out = F.conv_transpose2d(Tensor(x), Tensor(w), stride=2, padding=1, output_padding=output_padding,
                                     groups=groups)
        items = [item for item in create_schedule([out.lazydata]) if item.kernel is not None]
        products = sum(math.prod(item.kernel.full_shape) for item in items if item.kernel.reduce_axes)
        assert products <= x.size * (4 // groups) * 16
        expected = np.zeros((2, 4, 2 * 6 + 2 + output_padding, 2 * 5 + 2 + output_padding), np.float64)
        for ky in range(4):
            for kx in range(4):
                for group in range(groups):
                    inputs = slice(group * 8 // groups, (group + 1) * 8 // groups)
                    outs = slice(group * 4 // groups, (group + 1) * 4 // groups)
                    expected[:, outs, ky:ky + 12:2, kx:kx + 10:2] += np.einsum(
                        "nchw,co->nohw", x[:, inputs], w[inputs, :, ky, kx])
        np.testing.assert_allclose(out.numpy(), expected[:, :, 1:1 + out.shape[2], 1:1 + out.shape[3]],
                                   rtol=1e-4, atol=1e-4)


def test_a_strided_transposed_convolutions_phases_read_one_padding_of_its_input():
    """Each phase of a strided transposed convolution reads x shifted by its own offsets: one padding of
    x covering them all is stored once and each phase reads a view of it, where a padding per phase
    stored four copies at stride 2 in 2-D, through bounds tests in one kernel (a U-Net's 4x4
    upsampling of 8 x 64 x 32 x 32: 0.3-0.6 ms, and its phase products 1.6 -> 1.1 ms reading one)."""
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(7)
    x = Tensor(rng.standard_normal((2, 16, 32, 32)).astype(np.float32)).realize()
    w = rng.standard_normal((16, 8, 4, 4)).astype(np.float32)
    with no_grad():
        out = F.conv_transpose2d(x, Tensor(w), stride=2, padding=1)
    items = [item for item in create_schedule([out.lazydata]) if item.kernel is not None]
    copies = [item for item in items if not item.kernel.reduce_axes
              and any(source.buffer is x.lazydata.buffer for source in item.inputs)]
    assert sum(len(item.outputs) for item in copies) == 1
    expected = np.zeros((2, 8, 66, 66), np.float64)
    for ky in range(4):
        for kx in range(4):
            expected[:, :, ky:ky + 64:2, kx:kx + 64:2] += np.einsum("nchw,co->nohw", x.numpy(), w[:, :, ky, kx])
    np.testing.assert_allclose(out.numpy(), expected[:, :, 1:65, 1:65], rtol=1e-4, atol=1e-4)


def test_a_transposed_convolution_takes_its_input_gradient_as_a_strided_convolution():
    """The input gradient of a 4x4 stride-2 transposed convolution (an upsampling) is the strided
    convolution of the output's gradient by the same weight: no kernel of it iterates over more
    than that convolution's multiply-adds. Derived through the zeros spread between the input's
    elements it was the windows' product with the weight, 16 products per output element, then
    their fold (a U-Net's 8 x 64 x 32 x 32 upsampling, 2 threads: 30 ms of a 178 ms step)."""
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(4)
    x = Tensor(rng.standard_normal((2, 8, 6, 6)).astype(np.float32), requires_grad=True)
    w = rng.standard_normal((8, 4, 4, 4)).astype(np.float32)
    out = F.conv_transpose2d(x, Tensor(w), stride=2, padding=1)
    g = rng.standard_normal(out.shape).astype(np.float32)
    (out * Tensor(g)).sum().backward()
    items = [item for item in create_schedule([x.grad.lazydata]) if item.kernel is not None]
    assert max(math.prod(item.kernel.full_shape) for item in items) <= math.prod(x.shape) * 4 * 16
    padded = np.pad(g, ((0, 0), (0, 0), (1, 1), (1, 1)))  # out[2i - 1 + ky] += x[i] w[ky]: read back at 2i + ky
    expected = np.zeros((2, 8, 6, 6), np.float32)
    for ky in range(4):
        for kx in range(4):
            expected += np.einsum("nohw,co->nchw", padded[:, :, ky:ky + 12:2, kx:kx + 12:2], w[:, :, ky, kx])
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-4, atol=1e-4)


def _weight_gradient(batch: int, channels: int, size: int, out_channels: int, seed: int):
    """A 3x3 convolution's weight gradient (padding 1) against a random output gradient: the kernels
    of its schedule, the gradient computed, and numpy's."""
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
    w = Tensor(rng.standard_normal((out_channels, channels, 3, 3)).astype(np.float32), requires_grad=True)
    g = rng.standard_normal((batch, out_channels, size, size)).astype(np.float32)
    (F.conv2d(Tensor(x), w, padding=1) * Tensor(g)).sum().backward()
    items = [item for item in create_schedule([w.grad.lazydata]) if item.kernel is not None]
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.stack([np.stack([np.einsum("nchw,nohw->oc", padded[:, :, ky:ky + size, kx:kx + size], g)
                                   for kx in range(3)], -1) for ky in range(3)], -2)
    return items, w.grad.numpy(), expected


def test_a_weight_gradient_over_large_activations_copies_its_windows_once():
    """A convolution's weight gradient over 4 x 64 x 64 positions of 32 channels, 3x3 (windows of 4.7M
    elements) to 8 output channels: the windows are copied once, into the product's panels. Counted
    as a value derived from stored buffers (the activations), they were copied again into panels
    after a contiguous copy (a U-Net's 4x4 windows at 64x64: 90 ms for the copy, 9 for the product,
    2 threads)."""
    items, gradient, expected = _weight_gradient(4, 32, 64, 8, seed=5)
    windows = 4 * 64 * 64 * 32 * 9
    assert sum(math.prod(item.outputs[0].shape) >= windows for item in items) == 1
    np.testing.assert_allclose(gradient, expected, rtol=1e-3, atol=1e-2)


def test_a_weight_gradient_to_few_channels_reads_its_windows_in_place():
    """A convolution to 3 output channels (a U-Net's last): its weight gradient, 3 rows by 8 x 32 x 32
    positions, reads the input's windows where they are, one kernel; a copy of the windows first
    (im2col, nine times the input) cost more than the product (8 x 32 x 64 x 64, 2 threads: 1.2-1.9 ms
    for the copy, 1.3-1.7 for the product after it, 0.8-0.9 in place)."""
    items, gradient, expected = _weight_gradient(8, 16, 32, 3, seed=7)
    assert max(math.prod(item.outputs[0].shape) for item in items) < 8 * 16 * 32 * 32
    np.testing.assert_allclose(gradient, expected, rtol=1e-3, atol=1e-2)


def test_an_unstrided_convolution_takes_its_input_gradient_as_a_convolution():
    """The input gradient of a 3x3 convolution with stride 1 is the transposed convolution of the
    output's gradient: no kernel of the backward pass writes a buffer the size of the windows (nine
    times the input), as the windows' product with the weight, then their fold, would."""
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(4)
    x = Tensor(rng.standard_normal((2, 8, 12, 12)).astype(np.float32), requires_grad=True)
    w = Tensor(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
    g = rng.standard_normal((2, 16, 12, 12)).astype(np.float32)
    (F.conv2d(x, w, padding=1) * Tensor(g)).sum().backward()
    items = [item for item in create_schedule([x.grad.lazydata]) if item.kernel is not None]
    assert max(math.prod(item.outputs[0].shape) for item in items) < 9 * math.prod(x.shape)
    expected = np.zeros((2, 8, 14, 14), np.float32)  # d(sum(conv * g))/dx, accumulated into the padded input
    for ky in range(3):
        for kx in range(3):
            expected[:, :, ky:ky + 12, kx:kx + 12] += np.einsum("nohw,oc->nchw", g, w.numpy()[:, :, ky, kx])
    np.testing.assert_allclose(x.grad.numpy(), expected[:, :, 1:13, 1:13], rtol=1e-4, atol=1e-4)


def test_elementwise_ops_on_a_transposed_reduce_compute_in_its_stored_order():
    """A reduce viewed through a permute (a convolution computed channels last, returned channels
    first): the elementwise ops after it compute in the order the reduce stores, so they join its
    kernel, and the permute stays a view on top; a value read in both orders keeps the logical one."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 6, 5)).astype(np.float32), rng.standard_normal((1, 5, 1)).astype(np.float32)
    x, scale = Tensor(a), Tensor(b)
    summed = x.sum(0).T.reshape(1, 5, 6)                       # stored (6, 5), viewed (1, 5, 6)
    activated = (summed * scale + 1).relu()
    node = activated.lazydata
    assert node.op is Ops.PERMUTE and node.srcs[0].op not in (Ops.PERMUTE, Ops.RESHAPE)
    # stored once (it is read by two reduces), in the reduce's kernel
    count, value = kernels_for(lambda: activated.sum(2) + activated.amax(2))
    expected = np.maximum(a.sum(0).T[None] * b + 1, 0)
    np.testing.assert_allclose(value, expected.sum(2) + expected.max(2), rtol=1e-5, atol=1e-5)
    assert count == 2
    # operands computed in different orders: the op computes in the logical one
    mixed = x.sum(0).T + x.permute(0, 2, 1).amax(0)
    assert mixed.lazydata.op is not Ops.PERMUTE
    np.testing.assert_allclose(mixed.numpy(), a.sum(0).T + a.max(0).T, rtol=1e-5)


def test_a_number_beside_a_transposed_reduce_is_the_constant_in_the_stored_order():
    """The number of `summed + 1` on a value stored transposed is that constant broadcast to the stored
    shape, the one kept for that shape, not a permute of the broadcast built for each op."""
    a = np.arange(60, dtype=np.float32).reshape(2, 6, 5)
    summed = Tensor(a).sum(0).T                                # stored (6, 5), viewed (5, 6)
    first, second = (summed + 1).lazydata.srcs[0], (summed + 1).lazydata.srcs[0]
    assert first.op is Ops.ADD and second is first             # hash-consed: nothing new for the second
    value, constant = first.srcs
    assert constant.op is Ops.EXPAND and constant.shape == (6, 5) and constant.srcs[0].srcs[0].op is Ops.CONST
    np.testing.assert_array_equal((summed + 1).numpy(), a.sum(0).T + 1)
    # the constant's value, whatever its dtype: a False beside a transposed mask stays False (each on
    # a reduce not realized yet, as `summed`'s is now)
    np.testing.assert_array_equal(((Tensor(a).sum(0).T > 50) & False).numpy(), np.zeros((5, 6), bool))
    np.testing.assert_array_equal(((Tensor(a).sum(0).T > 50) | True).numpy(), np.ones((5, 6), bool))
    np.testing.assert_array_equal((Tensor(a).sum(0).T.cast("int32") * -3).numpy(), a.sum(0).T.astype(np.int32) * -3)


def test_a_concatenation_of_transposed_reduces_computes_in_their_stored_order():
    """Two reduces stored (pixels, channels), viewed channels first and concatenated along the
    channels (SqueezeNet's fire modules): the padded views keep their sources' order, so the
    concatenation is computed and stored channels last, a permute on top, where it transposed both
    into the logical order; the max pool after it reads it in order."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 25, 5)).astype(np.float32), rng.standard_normal((2, 25, 3)).astype(np.float32)
    first = Tensor(a).sum(0).reshape(1, 5, 5, 5).permute(0, 3, 1, 2)   # stored (25, 5), viewed (1, 5, 5, 5)
    second = Tensor(b).sum(0).reshape(1, 5, 5, 3).permute(0, 3, 1, 2)  # stored (25, 3)
    joined = Tensor.cat([first, second], dim=1).relu()
    assert joined.lazydata.op is Ops.PERMUTE
    pooled = joined.max_pool2d(3, 2)
    stores = [node.arg[1].shape for item in create_schedule([pooled.lazydata]) if item.kernel is not None
              for node in item.kernel.ast.walk() if node.op is Ops.STORE and item.kernel.name.startswith("E_")]
    assert (1, 5, 5, 8) in stores                                      # the concatenation, channels last
    joined_np = np.maximum(np.concatenate([a.sum(0), b.sum(0)], axis=1), 0).reshape(5, 5, 8).transpose(2, 0, 1)
    windows = np.lib.stride_tricks.sliding_window_view(joined_np, (3, 3), axis=(1, 2))[:, ::2, ::2]
    np.testing.assert_allclose(pooled.numpy()[0], windows.max(axis=(3, 4)), rtol=1e-5, atol=1e-6)


def test_elementwise_ops_on_a_prefix_of_a_transposed_reduce_compute_in_its_stored_order():
    """A matmul's result without the rows its panels padded (a 1x1 convolution over 49 positions
    computed as a (56, C) matmul, cut to 49 rows, viewed channels first) is a prefix of its storage:
    ops on it compute in the stored order too, so a residual sum with another channels-last value
    stays channels last and the sum over the pixels after it reads both in order. A cut that is no
    prefix (columns) keeps the logical order."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 8, 5)).astype(np.float32), rng.standard_normal((3, 7, 5)).astype(np.float32)
    padded = Tensor(a).sum(0)                                   # stored (8, 5)
    prefix = padded[:7].reshape(1, 7, 5).permute(0, 2, 1)       # viewed (1, 5, 7)
    other = Tensor(b).sum(0).reshape(1, 7, 5).permute(0, 2, 1)  # stored (7, 5) too
    scaled = prefix * Tensor(np.float32(3))                     # the prefix alone: a batch norm of it
    added = (scaled + other).relu()
    assert scaled.lazydata.op is Ops.PERMUTE and added.lazydata.op is Ops.PERMUTE
    count, value = kernels_for(lambda: added.sum(2))
    expected = np.maximum(a.sum(0)[:7] * 3 + b.sum(0), 0).T[None]
    np.testing.assert_allclose(value, expected.sum(2), rtol=1e-5, atol=1e-5)
    assert count == 3
    columns = padded[:, :4].T + 1                               # not a prefix of the storage
    assert columns.lazydata.op is not Ops.PERMUTE
    np.testing.assert_allclose(columns.numpy(), a.sum(0)[:, :4].T + 1, rtol=1e-5)


@pytest.mark.parametrize("out_channels", [24, 40])
def test_a_convolution_to_channels_a_panel_of_16_does_not_divide_computes_them_last_in_panels_of_8(out_channels):
    """MobileNetV2's 1x1 projections to 24 channels: channels last in panels of 8, so the
    channels-last depthwise convolution before them and the BatchNorm after them need no transposed
    copy. Values against numpy, forward and the input's gradient."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 32, 9, 9)).astype(np.float32)
    w = rng.standard_normal((out_channels, 32, 1, 1)).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    out = x.conv2d(Tensor(w))
    schedule = [item for item in create_schedule([out.lazydata]) if item.kernel is not None]
    assert any(item.kernel.name.endswith(f"_{out_channels // 8}_8_1_1_r32") for item in schedule), \
        [item.kernel.name for item in schedule]
    np.testing.assert_allclose(out.numpy(), np.einsum("oc,nchw->nohw", w[:, :, 0, 0], a), rtol=1e-4, atol=1e-4)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.broadcast_to(w[:, :, 0, 0].sum(0)[None, :, None, None], a.shape),
                               rtol=1e-4, atol=1e-4)


def test_a_convolution_with_channels_in_the_middle_reads_a_channels_last_input_from_a_copy():
    """A 1x1 convolution that keeps its channels in the middle (20 channels) after one computed
    channels last: its vector walks the columns, so the input is stored in that order first rather
    than gathered across the channels."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    w1, w2 = rng.standard_normal((32, 16, 1, 1)).astype(np.float32), rng.standard_normal((20, 32, 1, 1)).astype(np.float32)
    hidden = Tensor(a).conv2d(Tensor(w1)).relu()
    out = hidden.conv2d(Tensor(w2))
    reduces = [item.kernel for item in create_schedule([out.lazydata]) if item.kernel is not None and item.kernel.reduce_axes]
    last = reduces[-1]
    loads = [node for node in last.ast.walk() if node.op is Ops.LOAD]
    assert all(node.arg[1].views[-1].strides[-1] in (0, 1) or node.arg[1].shape[-1] == 1 for node in loads)
    expected = np.einsum("oc,nchw->nohw", w2[:, :, 0, 0], np.maximum(np.einsum("oc,nchw->nohw", w1[:, :, 0, 0], a), 0))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_pointwise_convolution_of_channels_last_values_and_others_reads_a_channels_last_copy():
    """DenseNet's 1x1 convolutions, each of the batch norm and ReLU of a concatenation of
    channels-last values (its Winograd outputs) and a channels-first one (the pooled block input):
    the operands' orders differ, so the ReLU computes in the logical order, and the convolution
    (output channels last) reads a channels-last copy of it, along its reduce, where it read each
    position's channels 400 floats apart (256 -> 128 channels at 56x56, the kernel alone: 2.14 ->
    1.39 ms). A channels-first input that reads no channels-last value is read in place."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((1, 8, 20, 20)).astype(np.float32), rng.standard_normal((1, 16, 20, 20)).astype(np.float32)
    w1, w2 = rng.standard_normal((16, 8, 1, 1)).astype(np.float32), rng.standard_normal((32, 32, 1, 1)).astype(np.float32)
    grown = Tensor(a).conv2d(Tensor(w1))                # stored (1, 20, 20, 16)
    joined = Tensor.cat([grown, Tensor(b) * 2], dim=1).relu()
    out = joined.conv2d(Tensor(w2))
    kernels = [item.kernel for item in create_schedule([out.lazydata]) if item.kernel is not None]
    product = next(kernel for kernel in kernels if kernel.reduce_axes and kernel.full_shape[kernel.reduce_axes[0]] == 32)
    (reduce_axis,) = product.reduce_axes
    assert sorted(load[reduce_axis] for load in load_strides(product, product.ast.walk())) == [1, 16]  # x, the weight panels
    expected_joined = np.maximum(np.concatenate([np.einsum("oc,nchw->nohw", w1[:, :, 0, 0], a), b * 2], axis=1), 0)
    np.testing.assert_allclose(out.numpy(), np.einsum("oc,nchw->nohw", w2[:, :, 0, 0], expected_joined),
                               rtol=1e-4, atol=1e-4)
    alone = (Tensor(b) * 2).relu().conv2d(Tensor(w2[:, :16]))
    stores = [node.arg[1].shape for item in create_schedule([alone.lazydata]) if item.kernel is not None
              for node in item.kernel.ast.walk() if node.op is Ops.STORE]
    assert (1, 20, 20, 16) not in stores


def test_a_strided_convolution_of_a_channels_last_relu_reads_a_padded_channels_last_copy():
    """ResNet's stride-2 3x3 convolutions (output channels last): their input, the ReLU of a
    channels-last 1x1 convolution, is copied with its zero padding channels last, a plain copy where
    the channels-first padded copy gathered across the channels (128 channels at 56x56: 0.41 -> 0.08
    ms), and the product reduces over the kernel positions, then the channels, contiguous in that
    copy. Values and gradients against numpy."""
    rng = np.random.default_rng(8)
    a = rng.standard_normal((2, 8, 12, 12)).astype(np.float32)
    w1 = (rng.standard_normal((32, 8, 1, 1)) / 3).astype(np.float32)
    w2 = (rng.standard_normal((16, 32, 3, 3)) / 10).astype(np.float32)
    x, first, second = Tensor(a, requires_grad=True), Tensor(w1, requires_grad=True), Tensor(w2, requires_grad=True)
    with no_grad():
        inference = Tensor(a).conv2d(Tensor(w1)).relu().conv2d(Tensor(w2), stride=2, padding=1)
    kernels = [item.kernel for item in create_schedule([inference.lazydata]) if item.kernel is not None]
    stores = [node.arg[1].shape for kernel in kernels for node in kernel.ast.walk() if node.op is Ops.STORE]
    assert (2, 14, 14, 32) in stores and (2, 32, 14, 14) not in stores   # the padded copy, channels last
    product = next(kernel for kernel in kernels if len(kernel.reduce_axes) == 3)
    innermost = max(product.reduce_axes)
    assert product.full_shape[innermost] == 32
    assert any(load[innermost] == 1 for load in load_strides(product, product.ast.walk()))
    relu = np.maximum(np.einsum("oc,nchw->nohw", w1[:, :, 0, 0], a), 0)
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(relu, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
    expected = np.einsum("nchwij,kcij->nkhw", windows[:, :, ::2, ::2], w2)
    np.testing.assert_allclose(inference.numpy(), expected, rtol=1e-4, atol=1e-4)
    x.conv2d(first).relu().conv2d(second, stride=2, padding=1).sum().backward()
    spread = np.zeros_like(np.pad(relu, ((0, 0), (0, 0), (1, 1), (1, 1))))  # d(sum)/d(padded relu)
    for i in range(3):
        for j in range(3):
            spread[:, :, i:i + 12:2, j:j + 12:2] += w2[:, :, i, j].sum(0)[None, :, None, None]
    grad_relu = spread[:, :, 1:13, 1:13] * (relu > 0)
    np.testing.assert_allclose(first.grad.numpy()[:, :, 0, 0], np.einsum("nohw,nchw->oc", grad_relu, a), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(second.grad.numpy(), windows[:, :, ::2, ::2].sum((0, 2, 3))[None].repeat(16, 0),
                               rtol=1e-4, atol=1e-4)


def test_a_strided_depthwise_convolution_reads_its_channels_last_input_through_the_padding():
    """MobileNetV2's stride-2 depthwise convolutions: the 1x1 convolution before them stores its
    output channels last, and the depthwise kernel reads it through the zero padding as a view (each
    vector of channels is inside the padding or outside it as a whole: one masked vector load),
    where a padded copy (112x112x96: 0.29 ms) was written and read again."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    w1, wd = rng.standard_normal((32, 16, 1, 1)).astype(np.float32), rng.standard_normal((32, 1, 3, 3)).astype(np.float32)
    hidden = Tensor(a).conv2d(Tensor(w1)).relu()
    out = hidden.conv2d(Tensor(wd), stride=2, padding=1, groups=32)
    names = [item.kernel.name for item in create_schedule([out.lazydata]) if item.kernel is not None]
    assert not any(name.startswith("E_1_14_14") for name in names), names   # no padded copy
    inner = np.pad(np.maximum(np.einsum("oc,nchw->nohw", w1[:, :, 0, 0], a), 0), ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.zeros((1, 32, 6, 6), np.float32)
    for ky in range(3):
        for kx in range(3):
            expected += inner[:, :, ky:ky + 12:2, kx:kx + 12:2] * wd[None, :, 0, ky, kx, None, None]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def _onnx_conv_relu_pool(w: np.ndarray, pool: str):
    """x -> pool(Relu(Conv(x, w)), 3x3, stride 2, pads 1) through lazygrad.onnx, lazily; pool is
    "MaxPool" or "AveragePool" (with count_include_pad)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from lazygrad.onnx import OnnxModel
    extra = {"count_include_pad": 1} if pool == "AveragePool" else {}
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node(pool, ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], **extra)], "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w.shape[1], 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    return lambda x: model(x=x)["y"]


@pytest.mark.parametrize("route", ["nn", "onnx"])
@pytest.mark.parametrize("pool", ["max", "average"])
def test_a_pool_of_a_channels_last_value_pools_channels_last(route, pool):
    """ResNet's stem (a max pool), DenseNet's transitions (an average pool): the pool of a
    channels-last convolution's relu reads it as it is stored (the channels are the vector) and
    stores channels last, so the residual sum or convolution after it stays channels last, by every
    route (lazygrad.onnx's pools pad explicitly, their own way). Values against numpy."""
    from lazygrad import no_grad
    rng = np.random.default_rng(7)
    a, w = rng.standard_normal((1, 16, 12, 12)).astype(np.float32), rng.standard_normal((32, 16, 1, 1)).astype(np.float32)
    with no_grad():
        hidden = Tensor(a).conv2d(Tensor(w)).relu()
        if route == "nn":
            out = hidden.max_pool2d(3, 2, 1) if pool == "max" else hidden.avg_pool2d(3, 2, 1)
        else:
            out = _onnx_conv_relu_pool(w, "MaxPool" if pool == "max" else "AveragePool")(Tensor(a))
        names = [item.kernel.name for item in create_schedule([out.lazydata]) if item.kernel is not None]
        assert "r_1_6_6_32_r3x3" in names, names
        fill = -np.inf if pool == "max" else 0
        padded = np.pad(np.maximum(np.einsum("oc,nchw->nohw", w[:, :, 0, 0], a), 0), ((0, 0), (0, 0), (1, 1), (1, 1)),
                        constant_values=fill)
        windows = np.array([padded[:, :, ky:ky + 12:2, kx:kx + 12:2] for ky in range(3) for kx in range(3)])
        expected = windows.max(axis=0) if pool == "max" else windows.sum(axis=0) / 9
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_relu_stores_its_output_when_a_gradient_will_read_it():
    """Training: relu's output is stored by the forward pass (its gradient reads it), so backward
    kernels read it as laid out instead of computing it again from a channels-last convolution's
    product across the channels; a max pool's padded input is stored too. Inference builds neither
    copy. Gradient values against numpy."""
    from lazygrad import no_grad
    rng = np.random.default_rng(8)
    a, w = rng.standard_normal((2, 8, 6, 6)).astype(np.float32), rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
    x, weight = Tensor(a, requires_grad=True), Tensor(w)
    hidden = x.conv2d(weight).relu()
    assert _stored(hidden.lazydata)
    pooled = hidden.max_pool2d(2)
    with no_grad():
        assert Tensor(a).conv2d(weight).relu().lazydata.op is not Ops.CONTIGUOUS
    pooled.sum().backward()
    product = np.einsum("oc,nchw->nohw", w[:, :, 0, 0], a)
    blocks = product.reshape(2, 16, 3, 2, 3, 2)
    is_max = (blocks == blocks.max(axis=(3, 5), keepdims=True)) & (blocks > 0)
    grad_product = is_max.reshape(2, 16, 6, 6).astype(np.float32)
    np.testing.assert_allclose(x.grad.numpy(), np.einsum("oc,nohw->nchw", w[:, :, 0, 0], grad_product),
                               rtol=1e-4, atol=1e-4)


def _stored(node) -> bool:
    """Whether node is a stored value, or a view of one stored in another order of its axes."""
    return node.op is Ops.CONTIGUOUS or (node.op is Ops.PERMUTE and node.srcs[0].op is Ops.CONTIGUOUS)


def _agree_with_npy(run, tolerance: float) -> None:
    """run(device) -> tensors, on CPU (which may assert on its graphs) and on NPY, the reference:
    the values agree within `tolerance`."""
    for actual, expected in zip(run("CPU"), run("NPY")):
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=tolerance, atol=tolerance)


def _kept_input(out):
    """The value silu's gradient reads: the stored input among out's autograd sources."""
    return out._ctx[1][0].lazydata


@pytest.mark.parametrize("activation", ["relu", "relu6", "silu"])
def test_a_kept_activation_of_a_channels_last_product_is_stored_channels_last(activation):
    """What an activation keeps for its gradient (its output, or silu's input) is stored in the order
    its kernel reads the convolution's channels-last product, and viewed channels first, and
    elementwise ops on it compute in that order: stored channels first, the batch norm and
    activation of MobileNetV2's training step were written across the channels, and its gradients
    computed so (its kernels 116 -> 94 ms). Gradients of a convolution, a training batch norm and
    the activation against the NPY device's."""
    rng = np.random.default_rng(21)
    a, w = rng.standard_normal((2, 8, 6, 6)).astype(np.float32), rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
    g = rng.standard_normal((2, 16, 6, 6)).astype(np.float32)

    def run(device):
        x = Tensor(a, requires_grad=True, device=device)
        normed = x.conv2d(Tensor(w, device=device)).batch_norm(None, None, training=True)
        out = getattr(normed, activation)()
        if device == "CPU":
            kept = out.lazydata if activation != "silu" else _kept_input(out)
            assert kept.op is Ops.PERMUTE and kept.srcs[0].op is Ops.CONTIGUOUS, kept
            assert kept.srcs[0].shape == (2, 6, 6, 16)
            # an op on the kept value and another channels-last product computes channels last
            # too (a gradient's select), rather than reading both across the channels
            with no_grad():
                other = x.conv2d(Tensor(w, device=device)) * 2
                gated = (Tensor(kept) > 0).where(other, 0)
            assert gated.lazydata.op is Ops.PERMUTE, gated.lazydata
        (out * Tensor(g, device=device)).sum().backward()
        return out, x.grad
    _agree_with_npy(run, 1e-4)


def test_a_channels_last_product_and_ops_of_broadcast_values_compute_channels_last():
    """An elementwise op of a channels-last product and a value computed only from broadcasts (its
    per-channel mean negated and scaled, as a batch norm's gradient has it) computes in the
    product's order: the broadcast value has no order of its own. Taken as channels first,
    MobileNetV2's batch norm gradients were written across the channels (its training step's
    kernels 94 -> 86 ms). Values against numpy."""
    rng = np.random.default_rng(3)
    a, w = rng.standard_normal((2, 8, 6, 6)).astype(np.float32), rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
    with no_grad():
        product = Tensor(a).conv2d(Tensor(w))
        mean = product.mean((0, 2, 3), keepdim=True)
        centered = product - mean
        scaled = product + (-mean).expand(product.shape) * 2
    assert centered.lazydata.op is Ops.PERMUTE and scaled.lazydata.op is Ops.PERMUTE
    expected = np.einsum("oc,nchw->nohw", w[:, :, 0, 0], a)
    expected_mean = expected.mean((0, 2, 3), keepdims=True)
    np.testing.assert_allclose(centered.numpy(), expected - expected_mean, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(scaled.numpy(), expected - 2 * expected_mean, rtol=1e-4, atol=1e-4)


def test_a_strided_depthwise_convolutions_input_gradient_is_computed_channels_last():
    """x's gradient of a strided depthwise convolution computed channels last is one sum of its
    taps' shifted products over the phases of whole strides, stored channels last (as the
    activation's and batch norm's gradients after it read it), not the windows' fold across the
    channels (MobileNetV2's training step: its kernels 86 -> 76 ms). Values against NPY."""
    rng = np.random.default_rng(4)
    a, w = rng.standard_normal((2, 16, 8, 8)).astype(np.float32), rng.standard_normal((16, 1, 3, 3)).astype(np.float32)
    g = rng.standard_normal((2, 16, 4, 4)).astype(np.float32)

    def run(device):
        x = Tensor(a, requires_grad=True, device=device)
        (x.conv2d(Tensor(w, device=device), stride=2, padding=1, groups=16) * Tensor(g, device=device)).sum().backward()
        if device == "CPU":  # a view of the sum over (N, H, W, C)
            node = x.grad.lazydata
            assert node.op is Ops.PERMUTE and node.srcs[0].shape == (2, 8, 8, 16), node
        return (x.grad,)
    _agree_with_npy(run, 1e-5)


def test_a_clamp_between_numbers_stores_its_output_when_a_gradient_will_read_it():
    """Training: a clamp between two numbers (ReLU6) keeps its output, as relu does, and its
    gradient reads that output: the bounds, or x between them. Computed again from x in the backward
    kernels, it was a batch norm of a channels-last convolution's product read across the channels
    (MobileNetV2's training step at batch 16: its kernels 125 -> 115 ms). Inference stores nothing.
    Gradient values against numpy, 0 at the bounds."""
    from lazygrad import no_grad
    rng = np.random.default_rng(12)
    a = rng.standard_normal((4, 32)).astype(np.float32) * 4
    a[0, :3] = (0.0, 4.0, 2.0)  # 1.5 times: both bounds, and inside
    g = rng.standard_normal((4, 32)).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    out = (x * 1.5).clamp(0, 6)
    assert _stored(out.lazydata)
    with no_grad():
        assert (Tensor(a) * 1.5).clamp(0, 6).lazydata.op is not Ops.CONTIGUOUS
    (out * Tensor(g)).sum().backward()
    inside = (a * 1.5 > 0) & (a * 1.5 < 6)
    np.testing.assert_allclose(out.numpy(), np.clip(a * 1.5, 0, 6), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), np.where(inside, 1.5 * g, 0), rtol=1e-6)


def test_a_sum_of_two_products_stays_two_tiled_kernels():
    """relu(x @ w1 + y @ w2), as a ResNet-50 bottleneck adds its unstrided 1x1 projection of the
    block's input to its last 1x1 convolution. The second product reads the first's result only at
    the position it computes, which would chain the two into one kernel of two reduces, and such a
    kernel has no register tile (56 ms there, against 0.8 ms for each product alone)."""
    from lazygrad.codegen.axes import merge_dims
    from lazygrad.codegen.opts import heuristic_opts
    from lazygrad.renderer.c import CRenderer
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal((64, 96)).astype(np.float32) for _ in range(2))
    w1, w2 = (rng.standard_normal((96, 128)).astype(np.float32) for _ in range(2))
    out = (Tensor(x) @ Tensor(w1) + Tensor(y) @ Tensor(w2)).relu()
    items = [item for item in create_schedule([out.lazydata]) if item.kernel is not None]
    products = [item.kernel for item in items if item.kernel.reduce_axes]
    assert len(products) == 2
    assert all(any(opt.op == "UPCAST" for opt in heuristic_opts(merge_dims(kernel), CRenderer())) for kernel in products)
    np.testing.assert_allclose(out.numpy(), np.maximum(x @ w1 + y @ w2, 0), rtol=1e-4, atol=1e-4)


def test_a_residual_stream_read_by_several_kernels_is_stored_every_few_layers():
    """x = x + layer(norm(x)) eight times, as a transformer's residual stream: each x is read by its
    layer's row statistics and by its layer's product. Recomputed there, the last layer's kernels
    would sum all eight earlier layers' outputs again (ViT-B/16: its 27 layer norms took 35 ms of
    320); stored once it reads four buffers of its size, each kernel reads only the latest few."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    weights = [rng.standard_normal((32, 32)).astype(np.float32) * 0.1 for _ in range(8)]
    stream, expected = Tensor(x).realize(), x
    for w in weights:
        stream = stream + (stream - stream.mean(axis=1, keepdim=True)) @ Tensor(w).realize()
        expected = expected + (expected - expected.mean(axis=1, keepdims=True)) @ w
    items = [item for item in create_schedule([stream.lazydata]) if item.kernel is not None]
    full_size = [[node for node in item.inputs if node.numel() == x.size] for item in items]
    assert max(map(len, full_size)) <= 4
    np.testing.assert_allclose(stream.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_masked_softmax_chains_its_max_and_sum():
    """Attention's softmax over scores plus a broadcast mask: a register tile would fit its sum (the
    mask stays put along the queries), but it sums no product of two loads, so its row max and sum
    stay one kernel (BERT: 6 kernels fewer than with them apart)."""
    rng = np.random.default_rng(4)
    scores = rng.standard_normal((2, 4, 16, 16)).astype(np.float32)
    mask = np.where(rng.random((2, 1, 1, 16)) < 0.2, -1e4, 0.0).astype(np.float32)
    count, value = kernels_for(lambda: (Tensor(scores).realize() + Tensor(mask).realize()).softmax(-1))
    assert count == 2
    shifted = np.exp(scores + mask - (scores + mask).max(-1, keepdims=True))
    np.testing.assert_allclose(value, shifted / shifted.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("channels, pooled_kernels", [(256, 2), (4, 1)])
def test_a_pool_over_a_large_padded_value_stores_its_padding(channels, pooled_kernels):
    """Inception-v3's 3x3 average pools (stride 1, padding 1) of a computed value: its padded form is
    stored first, so the pool reads one plain view instead of testing the bounds of every load and
    computing each index through two views (768 channels at 17x17, 2 threads: 0.72 -> 0.10 ms). A
    small one (under 4096 elements padded) keeps its view, and its one kernel."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((1, channels, 17, 17)).astype(np.float32)
    out = (Tensor(a) + 1).avg_pool2d(3, stride=1, padding=1)
    items = [item for item in create_schedule([out.lazydata]) if item.kernel is not None]
    assert len(items) == pooled_kernels
    (pool,) = [item.kernel for item in items if item.kernel.reduce_axes]
    loads = [node for node in pool.ast.walk() if node.op is Ops.LOAD]
    assert all(view.mask is None for load in loads for view in load.arg[1].views) == (pooled_kernels == 2)
    padded = np.pad(a + 1, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    np.testing.assert_allclose(out.numpy(), windows.sum(axis=(-1, -2)) / 9, rtol=1e-5, atol=1e-5)  # padding counted


def test_a_small_gate_of_an_exp_and_a_division_over_a_reduce_is_stored_and_a_norms_scale_is_not():
    """A per-channel value read through an EXPAND whose own ops above the reduce it reads cost more
    than SMALL_BROADCAST_OWN_OPS_LIMIT (a squeeze-and-excitation gate, the sigmoid of a channel sum) is
    stored, so the kernel scaling every position computes no exp; 1 / sqrt(variance + eps) (a batch
    norm's) stays inlined in the normalizing kernel."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 32, 9, 9)).astype(np.float32)
    bias = rng.standard_normal((1, 32, 1, 1)).astype(np.float32)
    features, shift = Tensor(x), Tensor(bias)
    gated = features * (features.mean((2, 3), keepdim=True) + shift).sigmoid()
    centered = features - features.mean((0, 2, 3), keepdim=True)
    normalized = centered * ((centered * centered).mean((0, 2, 3), keepdim=True) + 1e-5).rsqrt()
    for value, op, stored in ((gated, Ops.EXP2, True), (normalized, Ops.SQRT, False)):
        items = [item for item in create_schedule([value.lazydata]) if item.kernel is not None]
        (last,) = [item.kernel for item in items if item.outputs[0] is value.lazydata]
        assert (op not in {node.op for node in last.ast.walk()}) == stored
    gate = 1 / (1 + np.exp(-(x.mean((2, 3), keepdims=True, dtype=np.float64) + bias)))
    np.testing.assert_allclose(gated.numpy(), x * gate, rtol=1e-5, atol=1e-6)
    mean = x.mean((0, 2, 3), keepdims=True, dtype=np.float64)
    variance = ((x - mean) ** 2).mean((0, 2, 3), keepdims=True)
    np.testing.assert_allclose(normalized.numpy(), (x - mean) / np.sqrt(variance + 1e-5), rtol=1e-4, atol=1e-5)


def test_a_linear_layer_over_batched_rows_differentiates_as_a_two_dimensional_product():
    """x @ W.T with x of (batch, tokens, width): the batch dims join the rows, so the product and both
    gradients are 2-D matmuls, and every product of the backward pass takes a register tile. Derived
    op by op through the forward's panels, the input gradient was a reduce over the panels' layout
    that took none (GPT-2's MLP, 1024x256 @ 256x1024: 31 ms against 1.1). Values against numpy."""
    from lazygrad.codegen.axes import merge_dims
    from lazygrad.codegen.opts import heuristic_opts
    from lazygrad.renderer.c import CRenderer
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((2, 64, 256)).astype(np.float32), rng.standard_normal((1024, 256)).astype(np.float32)
    g = rng.standard_normal((2, 64, 1024)).astype(np.float32)
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    (tx.linear(tw) * Tensor(g)).sum().backward()
    items = [item for item in create_schedule([tx.grad.lazydata, tw.grad.lazydata]) if item.kernel is not None]
    products = [item.kernel for item in items if item.kernel.reduce_axes]
    assert len(products) == 2
    assert all(any(opt.op == "UPCAST" for opt in heuristic_opts(merge_dims(kernel), CRenderer())) for kernel in products)
    np.testing.assert_allclose(tx.grad.numpy(), g @ w, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(tw.grad.numpy(), g.reshape(-1, 1024).T @ x.reshape(-1, 256), rtol=1e-4, atol=1e-3)


def test_an_expensive_gradient_read_transposed_by_a_weight_gradient_is_computed_once():
    """Backward through Linear, tanh GELU, Linear: the GELU's slope (an exp) feeds the input gradient
    row by row and the first weight's gradient transposed (into panels of its rows). It is stored in
    the order it is computed, once, and the panels read it transposed; stored as the transposed view
    reads it, it was computed twice, once reading its operands across rows (GPT-2's MLP backward:
    7.5-11 ms against 0.3). Values against numpy."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 128, 256)).astype(np.float32)
    w1, w2 = (rng.standard_normal(shape).astype(np.float32) * 0.05 for shape in ((1024, 256), (256, 1024)))
    g = rng.standard_normal((4, 128, 256)).astype(np.float32)
    tx, tw1 = Tensor(x, requires_grad=True), Tensor(w1, requires_grad=True)
    (tx.linear(tw1).gelu(approximate="tanh").linear(Tensor(w2)) * Tensor(g)).sum().backward()
    items = [item for item in create_schedule([tx.grad.lazydata, tw1.grad.lazydata]) if item.kernel is not None]
    assert sum(node.op is Ops.EXP2 for item in items for node in item.kernel.ast.walk()) == 1
    h = x @ w1.T
    inner = 0.7978845608 * (h + 0.044715 * h ** 3)
    slope = 0.5 * (1 + np.tanh(inner)) + 0.5 * h * (1 - np.tanh(inner) ** 2) * 0.7978845608 * (1 + 3 * 0.044715 * h ** 2)
    grad_h = (g @ w2) * slope
    np.testing.assert_allclose(tx.grad.numpy(), grad_h @ w1, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(tw1.grad.numpy(), grad_h.reshape(-1, 1024).T @ x.reshape(-1, 256), rtol=1e-3, atol=1e-2)


def test_attention_backward_products_take_whole_register_tiles():
    """The gradients of batched products (attention's scores q @ k.transpose(-1, -2) and its output
    p @ v) are batched matmuls too: each takes matmul's transposed-operand copy and a register tile
    of many rows and columns (8 x 32 with AVX-512's lanes). Derived op by op, g @ v.T and the
    scores' gradient by the keys were reduces along both operands' contiguous dim, 4x4 tiles of dot
    products (GPT-2's 8 x 4 heads of 128 x 64, 2 threads: 1.2 ms each, 0.2 as matmuls)."""
    from lazygrad.codegen.axes import merge_dims
    from lazygrad.codegen.opts import heuristic_opts
    from lazygrad.renderer.c import CRenderer
    rng = np.random.default_rng(8)
    arrays = [rng.standard_normal((2, 4, 128, 64)).astype(np.float32) for _ in range(4)]
    q, k, v = (Tensor(array, requires_grad=True) for array in arrays[:3])
    ((q @ k.transpose(-1, -2)).softmax(-1) @ v * Tensor(arrays[3])).sum().backward()
    grads = [q.grad.lazydata, k.grad.lazydata, v.grad.lazydata]
    products = [item.kernel for item in create_schedule(grads) if item.kernel is not None and len(item.kernel.full_shape) == 5]
    assert len(products) == 4  # backward realizes the forward pass first: g @ v.T, p.T @ g, and two by the scores' gradient
    for kernel in products:
        tile = math.prod(opt.amount for opt in heuristic_opts(merge_dims(kernel), CRenderer()) if opt.op == "UPCAST")
        assert tile >= 64, kernel.name
    qa, ka, va, ga = (array.astype(np.float64) for array in arrays)
    scores = qa @ ka.transpose(0, 1, 3, 2)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    grad_p = ga @ va.transpose(0, 1, 3, 2)
    grad_scores = p * (grad_p - (grad_p * p).sum(-1, keepdims=True))
    np.testing.assert_allclose(q.grad.numpy(), grad_scores @ ka, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(k.grad.numpy(), grad_scores.transpose(0, 1, 3, 2) @ qa, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(v.grad.numpy(), p.transpose(0, 1, 3, 2) @ ga, rtol=1e-3, atol=1e-3)


def test_a_transposed_read_beside_an_expensive_op_is_copied_in_order_first():
    """A kernel without a reduce that reads a value transposed (a channels-last gradient viewed
    NCHW) and computes an exp at every position (a SiLU's slope at an NCHW input) gets a transposed
    copy of that value first (`_store_out_of_order_reads`): the kernel after it reads everything in
    its own order, so its exps vectorize. Without an expensive op, or where the transposed view is of
    a broadcast (a per-channel gate), it stays one kernel."""
    rng = np.random.default_rng(5)
    gradient = rng.standard_normal((2, 16, 16, 64)).astype(np.float32)
    x = rng.standard_normal((2, 64, 16, 16)).astype(np.float32)
    gate = rng.standard_normal((1, 1, 1, 64)).astype(np.float32)
    g, tx, tgate = Tensor(gradient), Tensor(x), Tensor(gate)
    sigmoid = 1 / (1 + np.exp(-x))

    def schedule_of(out):
        return [item for item in create_schedule([out.lazydata]) if item.kernel is not None]
    out = g.permute(0, 3, 1, 2) * tx.sigmoid()
    copy, product = schedule_of(out)
    assert copy.kernel.stores[0].arg[1].shape == (2, 64, 16, 16) and product.inputs[0] is copy.outputs[0]
    for steps in load_strides(product.kernel, [node for node in product.kernel.ast.walk() if node.op is Ops.LOAD]):
        assert steps.get(len(product.kernel.full_shape) - 1) == 1  # every load walks the kernel's last axis
    np.testing.assert_allclose(out.numpy(), gradient.transpose(0, 3, 1, 2) * sigmoid, rtol=1e-5, atol=1e-6)
    cheap = g.permute(0, 3, 1, 2) * tx
    assert len(schedule_of(cheap)) == 1
    broadcast = tgate.expand(2, 16, 16, 64).permute(0, 3, 1, 2) * tx.sigmoid()
    assert len(schedule_of(broadcast)) == 1
    np.testing.assert_allclose(broadcast.numpy(), gate.transpose(0, 3, 1, 2) * sigmoid, rtol=1e-5, atol=1e-6)


def test_an_expensive_value_of_a_channels_last_product_read_in_nchw_order_is_stored_whole():
    """A 1x1 convolution computed channels last, its bias and SiLU (elementwise ops over the
    product's order, the NCHW view above them) read back in NCHW order by two halves (a detector's
    split block): the SiLU is stored whole in the product's order, and the halves copy it
    (`_store_out_of_order_reads`). Storing only the cheap parts below its exps (the biased sum, then
    its sign and exponent) left the exps and divisions in the transposing kernel, one element at a
    time: 0.72 ms for 2 x 16 x 160 x 160 outputs where the SiLU alone takes 0.2 and the copy 0.06."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 32, 64, 64)).astype(np.float32)
    weight, bias = rng.standard_normal((32, 32, 1, 1)).astype(np.float32) / 6, rng.standard_normal(32).astype(np.float32)
    with no_grad():
        y = Tensor(x).conv2d(Tensor(weight), Tensor(bias))
        halves = (y * y.sigmoid()).split(16, dim=1)
        items = [item for item in create_schedule([half.lazydata for half in halves]) if item.kernel is not None]
    for item in items:
        if any(node.op is Ops.EXP2 for node in item.kernel.ast.walk()):
            accesses = [node for node in item.kernel.ast.walk() if node.op in (Ops.LOAD, Ops.STORE)]
            for steps in load_strides(item.kernel, accesses, ops=(Ops.LOAD, Ops.STORE)):
                assert steps.get(len(item.kernel.full_shape) - 1) in (0, 1, None), item.kernel.name
    product = np.einsum("oc,nchw->nohw", weight[:, :, 0, 0], x) + bias.reshape(1, 32, 1, 1)
    silu = product / (1 + np.exp(-product))
    for half, expected in zip(halves, (silu[:, :16], silu[:, 16:])):
        np.testing.assert_allclose(half.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_a_strided_convolutions_input_gradient_is_stored_before_an_expensive_slope_reads_it():
    """The input gradient of a stride-2 convolution interleaves the phases of its windows'
    gradient, which no vector walks in order; a SiLU's slope (an exp and a division) times it is
    computed by a kernel of its own that reads the stored gradient in order
    (`_store_out_of_order_reads`), not inside the interleaving kernel, one element at a time."""
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 8, 32, 32)).astype(np.float32)
    weight = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    a = Tensor(x, requires_grad=True)
    F.conv2d(a.silu(), Tensor(weight), stride=2, padding=1).sum().backward()
    last = [item for item in create_schedule([a.grad.lazydata]) if item.kernel is not None][-1]
    for load in [node for node in last.kernel.ast.walk() if node.op is Ops.LOAD]:
        assert steps_along(load.arg[1])[-1] in ({0}, {1})
    spread = np.zeros((2, 8, 34, 34))
    for ky in range(3):
        for kx in range(3):
            spread[:, :, ky:ky + 32:2, kx:kx + 32:2] += weight[:, :, ky, kx].astype(np.float64).sum(0)[None, :, None, None]
    sigmoid = 1 / (1 + np.exp(-x.astype(np.float64)))
    expected = spread[:, :, 1:33, 1:33] * sigmoid * (1 + x * (1 - sigmoid))
    np.testing.assert_allclose(a.grad.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_reduce_mixing_orders_around_an_expensive_op_reads_a_stored_copy_of_the_transposed_part():
    """A per-channel sum of an NCHW gradient times a SiLU's slope at an NCHW input times a value
    computed from a channels-last one (a group norm's weight gradient after a convolution) stores
    the channels-last part in the reduce's order first; a sum reading channels last alone (an SE
    block's pool of a SiLU) stays one kernel, its loop order chosen by opts."""
    rng = np.random.default_rng(8)
    stored_last = rng.standard_normal((2, 16, 16, 64)).astype(np.float32)
    gradient, x = rng.standard_normal((2, 2, 64, 16, 16)).astype(np.float32)
    value = Tensor(stored_last).permute(0, 3, 1, 2) * 0.5 - 1
    slope = Tensor(x).sigmoid()
    mixed = (Tensor(gradient) * slope * value).sum((0, 2, 3))
    items = [item for item in create_schedule([mixed.lazydata]) if item.kernel is not None]
    assert len(items) == 2 and not items[0].kernel.reduce_axes
    sigmoid = 1 / (1 + np.exp(-x))
    expected = (gradient * sigmoid * (stored_last.transpose(0, 3, 1, 2) * 0.5 - 1)).sum((0, 2, 3))
    np.testing.assert_allclose(mixed.numpy(), expected, rtol=1e-4, atol=1e-4)
    pooled = Tensor(stored_last).permute(0, 3, 1, 2).silu().sum((2, 3))
    assert len([item for item in create_schedule([pooled.lazydata]) if item.kernel is not None]) == 1


def test_an_expensive_value_padded_along_its_last_axis_is_computed_before_the_padded_copy():
    """A SiLU of an NCHW activation stored with a convolution's zero padding: computed in the
    padded copy, every position tests its bounds and gcc vectorizes nothing, the exps one by one;
    the SiLU is stored first by a kernel in order, then copied with its padding. Padding only outside
    the last axis (channels last) and a cheap op keep one kernel."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 8, 32, 32)).astype(np.float32)
    silu = x / (1 + np.exp(-x))

    def kernels(out):
        return [item for item in create_schedule([out.lazydata]) if item.kernel is not None]
    padded = Tensor(x).silu().pad(((0, 0), (0, 0), (1, 1), (1, 1)))
    first, copy = kernels(padded)
    assert first.kernel.full_shape == x.shape and copy.inputs == first.outputs
    np.testing.assert_allclose(padded.numpy(), np.pad(silu, ((0, 0), (0, 0), (1, 1), (1, 1))), rtol=1e-5, atol=1e-6)
    assert len(kernels(Tensor(x).relu().pad(((0, 0), (0, 0), (1, 1), (1, 1))))) == 1
    channels_last = Tensor(x.transpose(0, 2, 3, 1).copy()).silu().pad(((0, 0), (1, 1), (1, 1), (0, 0)))
    assert len(kernels(channels_last)) == 1


def test_a_depthwise_convolutions_weight_gradient_sums_over_the_batch_and_each_output_axis_apart():
    """The weight gradient of a depthwise convolution (one output channel per group) sums over the
    batch, rows and columns as three loops: as a batched matmul of one row per channel its steps
    were the three merged, every load's index a division and two remainders (MobileNetV2's 144
    channels at 28x28, batch 16: 13.9 -> 2.3 ms)."""
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 6, 16, 16)).astype(np.float32)
    g = rng.standard_normal((2, 6, 8, 8)).astype(np.float32)
    w = Tensor(rng.standard_normal((6, 1, 3, 3)).astype(np.float32), requires_grad=True)
    (F.conv2d(Tensor(x), w, stride=2, padding=1, groups=6) * Tensor(g)).sum().backward()
    (item,) = [item for item in create_schedule([w.grad.lazydata]) if item.kernel is not None and item.kernel.reduce_axes]
    assert [item.kernel.full_shape[axis] for axis in item.kernel.reduce_axes] == [2, 8, 8]
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.stack([np.stack([np.einsum("nchw,nchw->c", padded[:, :, ky:ky + 16:2, kx:kx + 16:2], g)
                                   for kx in range(3)], -1) for ky in range(3)], -2)[:, None]
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_channels_last_depthwise_convolutions_weight_gradient_has_its_channels_innermost():
    """In whole vectors of channels a depthwise convolution computes channels last, from a
    channels-last copy of its input; its weight gradient reads that copy, the channels the innermost
    axis of the sum, so every load is a vector of them (with an output row innermost, 28 columns
    filled 16 lanes poorly: MobileNetV2's 144 channels at 28x28, batch 16, 2.5 -> 0.9 ms)."""
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 16, 9, 9)).astype(np.float32)
    g = rng.standard_normal((2, 16, 5, 5)).astype(np.float32)
    w = Tensor(rng.standard_normal((16, 1, 3, 3)).astype(np.float32), requires_grad=True)
    (F.conv2d(Tensor(x), w, stride=2, padding=1, groups=16) * Tensor(g)).sum().backward()
    (item,) = [item for item in create_schedule([w.grad.lazydata]) if item.kernel is not None and item.kernel.reduce_axes]
    assert item.kernel.full_shape[-1] == 16 and item.kernel.reduce_axes == (0, 1, 2)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.stack([np.stack([np.einsum("nchw,nchw->c", padded[:, :, ky:ky + 9:2, kx:kx + 9:2], g)
                                   for kx in range(3)], -1) for ky in range(3)], -2)[:, None]
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_training_batch_norms_gradients_are_two_kernels():
    """BatchNorm on batch statistics has its input gradient written out, inv_std * (g - mean(g) -
    x_hat * mean(g * x_hat)), where derived op by op through the mean, the centering and the
    variance it took 40 ops and 4 kernels (27 ops, 2 kernels now: the sums, then the input gradient;
    MobileNetV2's eager training step builds its backward graph 15% faster, 72 fewer kernels)."""
    from lazygrad import nn
    rng = np.random.default_rng(14)
    x = rng.standard_normal((16, 8, 28, 28)).astype(np.float32)  # 12544 values a channel: sums in two stages
    g = rng.standard_normal((16, 8, 28, 28)).astype(np.float32)
    tx = Tensor(x, requires_grad=True)
    norm = nn.BatchNorm2d(8)
    with no_grad():
        norm.weight.assign(Tensor(rng.uniform(0.5, 1.5, 8).astype(np.float32))).realize()
    (norm(tx) * Tensor(g)).sum().backward()
    count, _ = kernels_for(lambda: Tensor.realize(tx.grad, norm.weight.grad, norm.bias.grad))
    assert count == 2
    xd, gd, w = x.astype(np.float64), g.astype(np.float64), norm.weight.numpy().astype(np.float64)[None, :, None, None]
    mean, var = xd.mean((0, 2, 3), keepdims=True), xd.var((0, 2, 3), keepdims=True)
    inverse = 1 / np.sqrt(var + 1e-5)
    normalized, grad = (xd - mean) * inverse, gd * w
    expected = inverse * (grad - grad.mean((0, 2, 3), keepdims=True)
                          - normalized * (grad * normalized).mean((0, 2, 3), keepdims=True))
    np.testing.assert_allclose(tx.grad.numpy(), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(norm.weight.grad.numpy(), (gd * normalized).sum((0, 2, 3)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(norm.bias.grad.numpy(), gd.sum((0, 2, 3)), rtol=1e-4, atol=1e-4)


def test_a_group_norms_input_gradient_is_written_out_too():
    """GroupNorm and LayerNorm share the written-out gradient of their normalization (`F._normalize`):
    a group norm's three gradients are 5 kernels, 6 derived op by op."""
    from lazygrad import nn
    rng = np.random.default_rng(15)
    x = rng.standard_normal((8, 64, 32, 32)).astype(np.float32)
    g = rng.standard_normal((8, 64, 32, 32)).astype(np.float32)
    tx, norm = Tensor(x, requires_grad=True), nn.GroupNorm(8, 64)
    (norm(tx) * Tensor(g)).sum().backward()
    count, _ = kernels_for(lambda: Tensor.realize(tx.grad, norm.weight.grad, norm.bias.grad))
    assert count == 5
    grouped, gd = x.astype(np.float64).reshape(8, 8, -1), g.astype(np.float64).reshape(8, 8, -1)
    inverse = 1 / np.sqrt(grouped.var(2, keepdims=True) + 1e-5)
    normalized = (grouped - grouped.mean(2, keepdims=True)) * inverse
    expected = inverse * (gd - gd.mean(2, keepdims=True) - normalized * (gd * normalized).mean(2, keepdims=True))
    np.testing.assert_allclose(tx.grad.numpy(), expected.reshape(x.shape), rtol=1e-4, atol=1e-5)


def test_a_strided_input_gradient_beside_a_transposed_read_is_stored_first():
    """A stride-2 depthwise convolution's input gradient (its windows' gradient interleaved by phase,
    through padding) masked by a test of a channels-last value (MobileNetV2's ReLU6 backward): the
    transposed read wants its channels innermost, the interleaving its phases unrolled, so the
    gradient is stored first and the kernel after it reads it in order (11.8 -> 9.5 ms plus the
    gradient's own kernel at batch 16, 96 channels of 56x56)."""
    from lazygrad.codegen.opts import validity_varies_along
    from lazygrad.nn import functional as F
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 32, 16, 16)).astype(np.float32)
    weight = rng.standard_normal((32, 1, 3, 3)).astype(np.float32)
    stored_last = rng.standard_normal((2, 16, 16, 32)).astype(np.float32)
    g = rng.standard_normal((2, 32, 8, 8)).astype(np.float32)
    a = Tensor(x, requires_grad=True)
    (F.conv2d(a, Tensor(weight), stride=2, padding=1, groups=32) * Tensor(g)).sum().backward()
    out = a.grad * (Tensor(stored_last).permute(0, 3, 1, 2) > 0)
    last = [item for item in create_schedule([out.lazydata]) if item.kernel is not None][-1]
    shape = last.kernel.full_shape
    for load in [node for node in last.kernel.ast.walk() if node.op is Ops.LOAD]:
        steps = steps_along(load.arg[1])[-1]
        assert len(steps) == 1 or not validity_varies_along(load.arg[1], shape, len(shape) - 1)
    spread = np.zeros((2, 32, 18, 18))
    for ky in range(3):
        for kx in range(3):
            spread[:, :, ky:ky + 16:2, kx:kx + 16:2] += g * weight[None, :, 0, ky, kx, None, None]
    expected = spread[:, :, 1:17, 1:17] * (stored_last.transpose(0, 3, 1, 2) > 0)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
