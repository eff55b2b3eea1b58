"""Winograd's F(2x2, 3x3) for large 3x3 convolutions in inference on CPU (nn/spatial.py): the
convolution's values (numpy's, in float64) for every padding and size, taken by every route to a
convolution (F.conv2d, nn.Conv2d, lazygrad.onnx), and left out for training and on other devices."""
import numpy as np
import pytest

import lazygrad.nn.spatial as spatial
from lazygrad import Tensor, nn, no_grad, stats
from lazygrad.nn import functional as F
from lazygrad.ops import Ops
from lazygrad.codegen.axes import merge_dims
from lazygrad.codegen.opts import heuristic_opts, load_strides
from lazygrad.renderer.c import CRenderer
from lazygrad.codegen.linearize import linearize
from lazygrad.schedule.fuse import create_schedule

rng = np.random.default_rng(7)


@pytest.fixture
def winograd_calls(monkeypatch):
    """How many convolutions ran as Winograd products."""
    calls = []
    original = spatial._winograd_product

    def counted(padded, weight):
        calls.append(padded.shape)
        return original(padded, weight)
    monkeypatch.setattr(spatial, "_winograd_product", counted)
    return calls


def convolved(x: np.ndarray, w: np.ndarray, b: np.ndarray, padding) -> np.ndarray:
    """numpy's 3x3 convolution (cross-correlation) in float64: the oracle."""
    top, left = (padding, padding) if isinstance(padding, int) else padding
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, top), (left, left)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # (N, C, H, W, 3, 3)
    return np.einsum("nchwij,kcij->nkhw", windows, w.astype(np.float64)) + b.reshape(1, -1, 1, 1)


def conv_case(batch: int, channels: int, size: int, out_channels: int | None = None):
    x = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
    w = (rng.standard_normal((out_channels or channels, channels, 3, 3)) / np.sqrt(9 * channels)).astype(np.float32)
    b = rng.standard_normal(out_channels or channels).astype(np.float32)
    return x, w, b


@pytest.mark.parametrize("size, padding", [(14, 1), (15, 1), (16, 0), (13, 2), (15, (2, 1))])
def test_winograd_gives_the_direct_convolution(size, padding, winograd_calls):
    x, w, b = conv_case(2, 128, size, 136)  # 2 images x 49 to 64 tiles: past WINOGRAD_MIN_TILES
    got = F.conv2d(Tensor(x, device="CPU"), Tensor(w, device="CPU"), Tensor(b, device="CPU"), padding=padding).numpy()
    assert len(winograd_calls) == 1
    np.testing.assert_allclose(got, convolved(x, w, b, padding), rtol=1e-4, atol=1e-4)


def test_every_route_to_a_convolution_takes_it(winograd_calls):
    x, w, b = conv_case(2, 128, 14)
    layer = nn.Conv2d(128, 128, 3, padding=1, device="CPU")
    with no_grad():
        layer.weight.assign(Tensor(w, device="CPU")).realize()
        layer.bias.assign(Tensor(b, device="CPU")).realize()
        from_layer = layer(Tensor(x, device="CPU")).numpy()
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from lazygrad.onnx import OnnxModel
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), device="CPU")
    from_onnx = model.run({"x": x})["y"].numpy()
    assert len(winograd_calls) == 2
    expected = convolved(x, w, b, 1)
    np.testing.assert_allclose(from_layer, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(from_onnx, expected, rtol=1e-4, atol=1e-4)


def test_a_training_convolution_takes_it_for_its_input_gradient_only(winograd_calls):
    """Training computes a convolution's value directly (so its weight's gradient reads the input's
    windows as stored for it) and its input's gradient, a convolution of the output's gradient with
    the flipped weight, as Winograd's product, stored (N, C, H, W) for the batch norm's gradient."""
    x, w, _ = conv_case(2, 64, 14)
    g = rng.standard_normal((2, 64, 14, 14)).astype(np.float32)
    inputs, weight = Tensor(x, device="CPU").requires_grad_(), Tensor(w, device="CPU").requires_grad_()
    (F.conv2d(inputs, weight, padding=1) * Tensor(g, device="CPU")).sum().backward()
    assert len(winograd_calls) == 1
    exact = [Tensor(x.astype(np.float64)).requires_grad_(), Tensor(w.astype(np.float64)).requires_grad_()]
    (F.conv2d(exact[0], exact[1], padding=1) * Tensor(g.astype(np.float64))).sum().backward()
    np.testing.assert_allclose(inputs.grad.numpy(), exact[0].grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(weight.grad.numpy(), exact[1].grad.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("padding", [0, 1, 2])
def test_a_transposed_convolution_takes_it(padding, winograd_calls):
    """conv_transpose2d at stride 1 is a convolution with the flipped weight (the route of an input's
    gradient), in inference as in backward."""
    x, w, b = conv_case(2, 48, 13, 40)  # w.transpose(1, 0, 2, 3): conv_transpose2d's (C_in, C_out, 3, 3)
    got = F.conv_transpose2d(Tensor(x, device="CPU"), Tensor(w.transpose(1, 0, 2, 3).copy(), device="CPU"),
                             Tensor(b[:40], device="CPU"), padding=padding).numpy()
    assert len(winograd_calls) == 1
    exact = F.conv_transpose2d(Tensor(x.astype(np.float64)), Tensor(w.transpose(1, 0, 2, 3).astype(np.float64)),
                               Tensor(b[:40].astype(np.float64)), padding=padding).numpy()
    np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-4)


def test_small_convolutions_and_other_devices_stay_direct(winograd_calls):
    x, w, b = conv_case(2, 128, 14)
    F.conv2d(Tensor(x[:, :, :8, :8], device="CPU"), Tensor(w, device="CPU"), padding=1).realize()  # 32 tiles: too few
    narrow = conv_case(2, 16, 14)
    F.conv2d(Tensor(narrow[0], device="CPU"), Tensor(narrow[1], device="CPU"), padding=1).realize()  # 16 channels
    F.conv2d(Tensor(x, device="CPU"), Tensor(w, device="CPU"), stride=2, padding=1).realize()
    F.conv2d(Tensor(x[:1, :, :4, :4], device="NPY"), Tensor(w, device="NPY"), padding=1).realize()  # no CPU kernels
    assert winograd_calls == []


def test_sixty_four_channels_take_winograd_while_the_transformed_input_fits_the_cache(winograd_calls):
    """From 64 to 95 channels the matmuls' reduce is short: Winograd only where its 16 transformed
    planes stay within WINOGRAD_CACHED_BYTES (ResNet-18's 56x56 layers at batch 4, not 8)."""
    x, w, _ = conv_case(8, 64, 56)
    F.conv2d(Tensor(x[:4], device="CPU"), Tensor(w, device="CPU"), padding=1).realize()
    assert len(winograd_calls) == 1
    out = F.conv2d(Tensor(x, device="CPU"), Tensor(w, device="CPU"), padding=1)
    assert len(winograd_calls) == 1
    expected = F.conv2d(Tensor(x.astype(np.float64)), Tensor(w.astype(np.float64)), padding=1).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_batch_computed_channels_last_with_fewer_than_96_channels_stays_direct(winograd_calls):
    """DenseNet's 128 -> 32 3x3 convolutions at batch 8 read a batch norm and ReLU of channels-last
    values, which a direct convolution reads along its channels as stored (nn/spatial.py): direct,
    its model 4-8% faster. One image, or a batch stored channels first, still takes Winograd."""
    x, w, _ = conv_case(2, 64, 14, out_channels=32)
    first = Tensor(conv_case(1, 64, 1)[1][:, :, 1:2, 1:2].copy(), device="CPU")  # a 1x1 convolution: channels last
    for images, channels_last, taken in ((2, True, 0), (1, True, 1), (2, False, 1)):
        calls = len(winograd_calls)
        source = Tensor(x[:images], device="CPU")
        hidden = F.conv2d(source, first).relu() if channels_last else source
        out = F.conv2d(hidden, Tensor(w, device="CPU"), padding=1)
        assert len(winograd_calls) - calls == taken, (images, channels_last)
        expected = F.conv2d(Tensor(hidden.numpy().astype(np.float64)), Tensor(w.astype(np.float64)), padding=1)
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_its_kernels_compute_along_the_channels(winograd_calls):
    """Channels last throughout: the transforms of the input and of the weight, the 16 matmuls and
    the output's transform each load and store contiguously along the channels, so on AVX-512 each
    is a tile of 16-lane vectors (with the tiles contiguous the input's transform read every other
    column, scalar by scalar). A weight computed in the call (backward's flipped one) is first copied
    with its output channels last: read in place its transform took 9.7 ms at 512 channels, 1.1 ms
    from the copy. Seven kernels: the input stored channels last, the weight's copy, the four (the
    relu joins the output's transform), and the result's (N, K, H, W) copy. A stored weight (a parameter) is read in place, six
    kernels: its transform then reads only unchanged buffers, and later calls keep it
    (derived_values.py), where a transform of the copy, an intermediate, ran every call."""
    x, w, _ = conv_case(1, 64, 14)
    with no_grad():
        stored = F.conv2d(Tensor(x, device="CPU"), Tensor(w, device="CPU"), padding=1).relu()
        computed = F.conv2d(Tensor(x, device="CPU"), Tensor(w, device="CPU") * 2, padding=1).relu()
    assert len(winograd_calls) == 2
    for out, count, expected_widths in [(stored, 6, [1, 16, 16, 16]), (computed, 7, [16, 16, 16, 16])]:
        kernels = [item.kernel for item in create_schedule([out.lazydata]) if item.kernel is not None]
        widths = sorted(linearize(merge_dims(kernel), CRenderer(16, 32)).vector_width
                        for kernel in kernels if kernel.reduce_axes)
        assert len(kernels) == count and widths == expected_widths


def test_its_output_is_stored_channels_last_with_the_bias_and_activation(winograd_calls):
    """The output's transform stores each tile's 2x2 outputs channels last, (N, H, W, K): the bias and
    the relu after it join that kernel, and a 1x1 convolution after it (computed channels last)
    reads it along the channels, its reduce axis. The transform's register tile takes a vector of
    channels by both the 2 rows and the 2 columns of a tile's outputs, which share each loaded
    vector of the 16 planes."""
    x, w, b = conv_case(1, 64, 28)  # 784 positions: more than a matmul in panels takes (POINTWISE_MAX_POSITIONS)
    pointwise = (rng.standard_normal((128, 64, 1, 1)) / 8).astype(np.float32)
    with no_grad():
        out = F.conv2d(F.conv2d(Tensor(x, device="CPU"), Tensor(w, device="CPU"), Tensor(b, device="CPU"),
                                padding=1).relu(), Tensor(pointwise, device="CPU"))
    assert len(winograd_calls) == 1
    kernels = [item.kernel for item in create_schedule([out.lazydata]) if item.kernel is not None]
    transform = next(kernel for kernel in kernels if kernel.reduce_axes and kernel.full_shape[0] == 16
                     and kernel.full_shape[-1] == 64 and 2 in kernel.full_shape)
    assert {Ops.MAX, Ops.ADD} <= {node.op for node in transform.ast.walk()}  # relu(sum + bias)
    (pointwise_product,) = [kernel for kernel in kernels if kernel.reduce_axes and kernel.full_shape[-3:] == (64, 1, 1)]
    (reduce_axis,) = [axis for axis in pointwise_product.reduce_axes if pointwise_product.full_shape[axis] == 64]
    strides = load_strides(pointwise_product, pointwise_product.ast.walk())
    assert any(load[reduce_axis] == 1 for load in strides)
    merged = merge_dims(transform)
    upcasts = [opt for opt in heuristic_opts(merged, CRenderer(16, 32)) if opt.op == "UPCAST"]
    assert sorted(merged.full_shape[opt.axis] for opt in upcasts if opt.amount == merged.full_shape[opt.axis]) == [2, 2]
    expected = convolved(x, w, b, 1).clip(0, None)
    np.testing.assert_allclose(out.numpy(), np.einsum("nchw,kc->nkhw", expected, pointwise[:, :, 0, 0]),
                               rtol=1e-4, atol=1e-4)


def eager_calls_on_a_stored_weight(x: np.ndarray, w: np.ndarray):
    """Two eager relu(conv2d) calls, on x and 2x, by one stored weight, each against numpy: the
    kernels each ran and the second call's schedule."""
    weight = Tensor(w, device="CPU").realize()
    counts = []
    for scale in (1, 2):
        stats.reset()
        with no_grad():
            out = F.conv2d(Tensor(x * scale, device="CPU"), weight, padding=1).relu()
            kernels = [item.kernel for item in create_schedule([out.lazydata]) if item.kernel is not None]
            got = out.numpy()
        counts.append(stats.kernels)
        np.testing.assert_allclose(got, convolved(x * scale, w, np.zeros(w.shape[0]), 1).clip(0, None),
                                   rtol=1e-4, atol=1e-4)
    return counts, kernels


def test_a_stored_weights_transform_is_kept_between_eager_calls(winograd_calls):
    counts, _ = eager_calls_on_a_stored_weight(*conv_case(1, 64, 14)[:2])
    assert len(winograd_calls) == 2 and counts == [6, 5]


def test_a_stored_weights_transform_is_kept_in_panels_for_its_products(winograd_calls):
    """From 128 channels on the transformed weight (16 planes of C x K, rows K floats apart) takes
    the panels of a stored weight, (16, K / 32, C, 32): read in place, its rows a power of two apart
    shared a few cache sets (ResNet-50's 14x14 stage, 16 x 49x256 @ 256x256, kernel alone:
    3.3-4.2 -> 2.6-3.5 ms). Made from the stored weight alone, the transform is kept between eager
    calls, and a jit replay skips its copy into panels too."""
    counts, kernels = eager_calls_on_a_stored_weight(*conv_case(1, 256, 14)[:2])
    (product,) = [kernel for kernel in kernels if kernel.reduce_axes and kernel.full_shape[0] == 16
                  and kernel.full_shape[-1] == 256 and 32 in kernel.full_shape]
    (reduce_axis,) = product.reduce_axes
    panel_reads = [load for load in load_strides(product, product.ast.walk())
                   if load[reduce_axis] == 32 and 1 in load.values()]
    assert len(winograd_calls) == 2 and len(panel_reads) == 1 and counts[1] < counts[0]
