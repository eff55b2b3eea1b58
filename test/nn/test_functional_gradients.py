"""Gradients of lazygrad.nn.functional against central finite differences in float64, on CPU and NPY.

Each case reduces the function's output to a scalar through a fixed random projection (so every
output element matters with its own weight) and checks the gradient of every input. Inputs are small
and drawn away from kinks (no ties inside a max-pool window, no |x| near 0 in a loss).
"""
import numpy as np
import pytest

import lazygrad.nn.functional as F
from gradcheck import check_gradients
from lazygrad import Tensor

DEVICES = ["CPU", "NPY"]
rng = np.random.default_rng(1)


def projected(output: Tensor) -> Tensor:
    """sum(output * R) for a fixed R of output's shape: a scalar depending on every element."""
    weights = np.random.default_rng(abs(hash(output.shape)) % 2**32).uniform(-1.0, 1.0, output.shape)
    return (output * Tensor(weights, device=output.device)).sum()


def randn(*shape):
    return rng.standard_normal(shape)


def distinct(*shape):
    """Values at least 0.05 apart, so no max-pool window holds a near tie."""
    count = int(np.prod(shape))
    return rng.permutation(np.arange(count) * 0.05 - count * 0.025).reshape(shape) + rng.uniform(0, 0.01, shape)


def logits_and_targets():
    logits = randn(4, 3, 2)
    target = np.array([[0, 2], [1, -100], [2, 2], [-100, 0]])
    return logits, target


CASES = {
    "conv2d": (lambda x, w, b: projected(F.conv2d(x, w, b, stride=2, padding=1)),
               [randn(1, 2, 5, 4), randn(3, 2, 3, 3), randn(3)]),
    "conv2d_dilated_grouped": (lambda x, w: projected(F.conv2d(x, w, stride=(1, 2), padding=(2, 1), dilation=2,
                                                                groups=2)),
                               [randn(1, 4, 5, 5), randn(2, 2, 2, 3)]),
    # unstrided: the input's gradient is a transposed convolution (not the windows' fold)
    "conv2d_unstrided": (lambda x, w, b: projected(F.conv2d(x, w, b, padding=1)),
                         [randn(2, 3, 5, 4), randn(4, 3, 3, 3), randn(4)]),
    "conv2d_unstrided_dilated_grouped": (lambda x, w: projected(F.conv2d(x, w, padding=(2, 1), dilation=(2, 1),
                                                                          groups=2)),
                                         [randn(1, 4, 6, 5), randn(4, 2, 3, 2)]),
    # channels last on CPU (nn/spatial.py): a depthwise convolution of 8 channels, unstrided and strided,
    # and a 1x1 convolution to 16 channels
    "conv2d_depthwise_channels_last": (lambda x, w, b: projected(F.conv2d(x, w, b, padding=1, groups=8)),
                                       [randn(1, 8, 4, 5), randn(8, 1, 3, 3), randn(8)]),
    "conv2d_depthwise_channels_last_strided": (lambda x, w: projected(F.conv2d(x, w, stride=2, padding=1, groups=8)),
                                               [randn(2, 8, 5, 5), randn(8, 1, 3, 3)]),
    # x's gradient as phases of whole strides, channels last: a stride per axis, a dilation, and
    # padding some taps of the first outputs read only (nn/spatial.py `_strided_depthwise_input_gradient`)
    "conv2d_depthwise_channels_last_strided_phases": (lambda x, w: projected(F.conv2d(
        x, w, stride=(2, 3), padding=(2, 1), dilation=(1, 2), groups=8)), [randn(2, 8, 6, 7), randn(8, 1, 3, 3)]),
    # its weight gradient from the forward's channels-last copy (a dilation, padding unequal per side)
    "conv2d_depthwise_channels_last_dilated": (lambda x, w: projected(F.conv2d(x, w, padding=(2, 1), dilation=(2, 1),
                                                                                groups=8)),
                                               [randn(2, 8, 6, 5), randn(8, 1, 3, 2)]),
    # taps reading only padding at every output are dropped (nn/spatial.py `_without_padding_taps`):
    # all but the center one; strided, the center one reading inside the input, which is cropped
    "conv2d_dilated_past_the_input": (lambda x, w, b: projected(F.conv2d(x, w, b, padding=4, dilation=4)),
                                      [randn(1, 2, 3, 4), randn(3, 2, 3, 3), randn(3)]),
    "conv2d_dilated_strided_cropped": (lambda x, w: projected(F.conv2d(x, w, stride=2, padding=3, dilation=5)),
                                       [randn(2, 2, 6, 7), randn(3, 2, 3, 3)]),
    "conv2d_pointwise_channels_last": (lambda x, w: projected(F.conv2d(x, w)), [randn(1, 3, 4, 5), randn(16, 3, 1, 1)]),
    # a stride beyond the kernel: the input gradient's phases (nn/spatial.py _fold_windows) that no
    # offset reaches are zeros, and rows and columns past the last window get none
    "conv2d_stride_beyond_kernel": (lambda x, w: projected(F.conv2d(x, w, stride=(3, 4), padding=(1, 0))),
                                    [randn(1, 2, 7, 9), randn(3, 2, 2, 2)]),
    "conv2d_same_even_kernel": (lambda x, w: projected(F.conv2d(x, w, padding="same")),  # padded 0 before, 1 after
                                [randn(1, 2, 4, 5), randn(3, 2, 2, 2)]),
    "conv1d_batched_strided": (lambda x, w: projected(F.conv1d(x, w, stride=2, padding=1)),
                               [randn(3, 2, 7), randn(4, 2, 3)]),
    "conv3d_grouped": (lambda x, w, b: projected(F.conv3d(x, w, b, padding=1, groups=2)),
                       [randn(2, 4, 3, 3, 2), randn(2, 2, 2, 2, 2), randn(2)]),
    "conv_transpose2d": (lambda x, w, b: projected(F.conv_transpose2d(x, w, b, stride=2, padding=1,
                                                                      output_padding=1)),
                         [randn(1, 2, 3, 3), randn(2, 3, 3, 2), randn(3)]),
    # both gradients written out (nn/spatial.py _conv_transpose): grouped, dilated, strides and
    # paddings per axis, an output_padding
    "conv_transpose2d_grouped_dilated": (lambda x, w: projected(F.conv_transpose2d(
        x, w, stride=(2, 3), padding=(1, 0), output_padding=(1, 0), groups=2, dilation=(1, 2))),
        [randn(2, 4, 3, 2), randn(4, 3, 3, 2)]),
    "conv_transpose1d": (lambda x, w: projected(F.conv_transpose1d(x, w, stride=3, padding=2)),
                         [randn(2, 3, 4), randn(3, 2, 5)]),
    "max_pool2d": (lambda x: projected(F.max_pool2d(x, 3, stride=2, padding=1)), [distinct(1, 2, 5, 6)]),
    "max_pool2d_ceil_dilated": (lambda x: projected(F.max_pool2d(x, 2, stride=2, dilation=2, ceil_mode=True)),
                                [distinct(1, 1, 6, 7)]),
    "avg_pool2d": (lambda x: projected(F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True,
                                                    count_include_pad=False)),
                   [randn(1, 2, 6, 5)]),
    "adaptive_avg_pool2d": (lambda x: projected(F.adaptive_avg_pool2d(x, (3, 2))), [randn(1, 2, 5, 4)]),
    "layer_norm": (lambda x, w, b: projected(F.layer_norm(x, (3, 4), w, b)),
                   [randn(2, 3, 4), randn(3, 4), randn(3, 4)]),
    "batch_norm_training": (lambda x, w, b: projected(F.batch_norm(x, None, None, w, b, training=True)),
                            [randn(3, 2, 2, 2), randn(2), randn(2)]),
    "group_norm": (lambda x, w, b: projected(F.group_norm(x, 2, w, b)), [randn(2, 4, 3), randn(4), randn(4)]),
    "cross_entropy_smoothing_ignore_index": (
        lambda x, w: F.cross_entropy(x, Tensor(logits_and_targets()[1], device=x.device), w, label_smoothing=0.2),
        [logits_and_targets()[0], rng.uniform(0.5, 2.0, 3)]),
    "cross_entropy_probabilities": (
        lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1, reduction="sum"),
        [randn(3, 4), rng.dirichlet(np.ones(4), size=3)]),
    "binary_cross_entropy_with_logits": (
        lambda x, t, w, p: F.binary_cross_entropy_with_logits(x, t, w, pos_weight=p),
        [randn(3, 4) * 3, rng.random((3, 4)), rng.random(4), rng.uniform(0.5, 3.0, 4)]),
    "scaled_dot_product_attention_causal": (
        lambda q, k, v: projected(F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        [randn(1, 2, 3, 4), randn(1, 2, 4, 4), randn(1, 2, 4, 3)]),
    "scaled_dot_product_attention_mask": (
        lambda q, k, v: projected(F.scaled_dot_product_attention(
            q, k, v, attn_mask=Tensor(np.array([[True, False, True], [True, True, False]]), device=q.device))),
        [randn(2, 2, 3), randn(2, 3, 3), randn(2, 3, 2)]),
    "interpolate_bicubic": (lambda x: projected(F.interpolate(x, size=(5, 3), mode="bicubic")), [randn(1, 2, 3, 4)]),
    "interpolate_area": (lambda x: projected(F.interpolate(x, size=(2, 3), mode="area")), [randn(1, 2, 5, 4)]),
    "interpolate_bilinear": (lambda x: projected(F.interpolate(x, size=(5, 3), mode="bilinear")), [randn(1, 2, 3, 4)]),
    "interpolate_bilinear_align_corners": (
        lambda x: projected(F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)),
        [randn(1, 1, 3, 2)]),
    "embedding": (lambda w: projected(F.embedding(Tensor(np.array([[3, 0], [3, 1]]), device=w.device), w)),
                  [randn(4, 3)]),
    # fewer tokens than rows: summed per distinct token, then spread to the rows; -1 and 9 read no row
    "embedding_few_tokens": (lambda w: projected(F.embedding(Tensor(np.array([[5, 0, -1], [5, 9, 2]]), device=w.device), w)),
                             [randn(8, 3)]),
    "normalize": (lambda x: projected(F.normalize(x, dim=(0, 2))), [randn(2, 3, 4)]),
    "normalize_p3": (lambda x: projected(F.normalize(x, p=3, dim=-1)), [randn(3, 4)]),
    "cosine_similarity_broadcast": (lambda a, b: projected(F.cosine_similarity(a, b, dim=-1)),
                                    [randn(2, 3, 4), randn(3, 4)]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name, device):
    function, arrays = CASES[name]
    check_gradients(function, *arrays, device=device)
