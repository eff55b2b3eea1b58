"""lazygrad.nn layers against float64 numpy formulations of PyTorch's definitions: forward values,
gradients (central finite differences of the numpy formulation), default initializations, parameter
names, and train/eval behaviour.

Most checks run on NPY in float64 (no compiling, exact enough for finite differences); the layers of
the digits demo are also checked on CPU. The numpy references are written from the definitions (a
loop over kernel offsets for convolution, a scatter for transposed convolution), never from the
functional module's windowed views.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from lazygrad import Tensor, dtypes, manual_seed, no_grad
import lazygrad.nn as nn
from lazygrad.nn.state import get_parameters, get_state_dict

rng = np.random.default_rng(0)
F64 = dtypes.float64


def randn(*shape) -> np.ndarray:
    return rng.standard_normal(shape)


# ---- numpy formulations --------------------------------------------------------------------------

def conv2d_reference(x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """out[n, o, i, j] = bias[o] + sum over c, a, b of x_padded[n, c, i*s + a*d, j*s + b*d] * w[o, c, a, b],
    with c running over the input channels of o's group."""
    batch, channels, height, width = x.shape
    out_channels, per_group, kernel_h, kernel_w = weight.shape
    x = np.pad(x, ((0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1])))
    out_h = (x.shape[2] - dilation[0] * (kernel_h - 1) - 1) // stride[0] + 1
    out_w = (x.shape[3] - dilation[1] * (kernel_w - 1) - 1) // stride[1] + 1
    out = np.zeros((batch, out_channels, out_h, out_w))
    outputs_per_group = out_channels // groups
    for group in range(groups):
        outputs = slice(group * outputs_per_group, (group + 1) * outputs_per_group)
        for a in range(kernel_h):
            for b in range(kernel_w):
                rows = slice(a * dilation[0], a * dilation[0] + stride[0] * (out_h - 1) + 1, stride[0])
                columns = slice(b * dilation[1], b * dilation[1] + stride[1] * (out_w - 1) + 1, stride[1])
                window = x[:, group * per_group:(group + 1) * per_group, rows, columns]
                out[:, outputs] += np.einsum("nchw,oc->nohw", window, weight[outputs, :, a, b])
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return out


def conv_transpose2d_reference(x, weight, bias, stride, padding, output_padding, groups=1):
    """Each input element x[n, c, i, j] adds x * weight[c, o, a, b] to out[n, o, i*s - p + a, j*s - p + b]."""
    batch, in_channels, height, width = x.shape
    _, per_group, kernel_h, kernel_w = weight.shape
    full_h = (height - 1) * stride[0] + kernel_h + output_padding[0]
    full_w = (width - 1) * stride[1] + kernel_w + output_padding[1]
    full = np.zeros((batch, per_group * groups, full_h, full_w))
    inputs_per_group = in_channels // groups
    for group in range(groups):
        inputs = slice(group * inputs_per_group, (group + 1) * inputs_per_group)
        outputs = slice(group * per_group, (group + 1) * per_group)
        for a in range(kernel_h):
            for b in range(kernel_w):
                rows = slice(a, a + stride[0] * (height - 1) + 1, stride[0])
                columns = slice(b, b + stride[1] * (width - 1) + 1, stride[1])
                full[:, outputs, rows, columns] += np.einsum("nchw,co->nohw", x[:, inputs], weight[inputs, :, a, b])
    out = full[:, :, padding[0]:full_h - padding[0], padding[1]:full_w - padding[1]]
    return out + bias.reshape(1, -1, 1, 1)


def normalize_reference(x, axes, eps):
    mean = x.mean(axis=axes, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps)


def softmax_reference(x, axis):
    exponentials = np.exp(x - x.max(axis=axis, keepdims=True))
    return exponentials / exponentials.sum(axis=axis, keepdims=True)


def multihead_attention_reference(query, key, value, in_weight, in_bias, out_weight, out_bias, heads,
                                  additive_mask=None):
    """PyTorch's multi_head_attention_forward for batch-first inputs (N, L, E), in float64."""
    embed = query.shape[-1]
    head_dim = embed // heads
    q = query @ in_weight[:embed].T + in_bias[:embed]
    k = key @ in_weight[embed:2 * embed].T + in_bias[embed:2 * embed]
    v = value @ in_weight[2 * embed:].T + in_bias[2 * embed:]

    def split(t):
        return t.reshape(t.shape[0], t.shape[1], heads, head_dim).transpose(0, 2, 1, 3)

    scores = split(q) @ split(k).transpose(0, 1, 3, 2) / math.sqrt(head_dim)
    if additive_mask is not None:
        scores = scores + additive_mask
    weights = softmax_reference(scores, -1)
    out = (weights @ split(v)).transpose(0, 2, 1, 3).reshape(query.shape)
    return out @ out_weight.T + out_bias, weights


# ---- checking a layer against a reference --------------------------------------------------------

def numeric_gradient(function, array: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    gradient = np.zeros_like(array)
    for position in np.ndindex(array.shape):
        saved = array[position]
        array[position] = saved + eps
        plus = function()
        array[position] = saved - eps
        minus = function()
        array[position] = saved
        gradient[position] = (plus - minus) / (2 * eps)
    return gradient


def check_forward_and_gradients(layer, reference, inputs: list[np.ndarray], parameters: dict[str, Tensor],
                                device: str = "NPY", rtol: float = 1e-6, atol: float = 1e-8) -> None:
    """layer(*inputs) against reference(*inputs, **parameters as numpy); then the gradients of a random
    projection of the output with respect to every input and parameter, against finite differences
    of the reference. Parameters are float64 so the differences are exact enough."""
    arrays = {name: tensor.numpy() for name, tensor in parameters.items()}
    tensors = [Tensor(array, device=device, requires_grad=True) for array in inputs]
    out = layer(*tensors)
    expected = reference(*inputs, **arrays)
    assert out.shape == expected.shape, f"shape: got {out.shape}, expected {expected.shape}"
    np.testing.assert_allclose(out.numpy(), expected, rtol=rtol, atol=atol, err_msg="forward")

    projection = randn(*expected.shape)
    (out * Tensor(projection, device=device)).sum().backward()

    def projected():
        return float((reference(*inputs, **arrays) * projection).sum())

    for index, (array, tensor) in enumerate(zip(inputs, tensors)):
        np.testing.assert_allclose(tensor.grad.numpy(), numeric_gradient(projected, array), rtol=1e-5, atol=1e-6,
                                   err_msg=f"gradient of input {index}")
    for name, tensor in parameters.items():
        assert tensor.grad is not None, f"{name} got no gradient"
        np.testing.assert_allclose(tensor.grad.numpy(), numeric_gradient(projected, arrays[name]), rtol=1e-5,
                                   atol=1e-6, err_msg=f"gradient of {name}")


def named(layer, *names: str) -> dict[str, Tensor]:
    return {name: getattr(layer, name) for name in names}


# ---- linear and convolution ----------------------------------------------------------------------

def test_linear_matches_x_times_weight_transposed_plus_bias():
    layer = nn.Linear(4, 3, dtype=F64, device="NPY")
    check_forward_and_gradients(layer, lambda x, weight, bias: x @ weight.T + bias, [randn(2, 5, 4)],
                                named(layer, "weight", "bias"))


def test_linear_without_bias_has_bias_none():
    layer = nn.Linear(4, 3, bias=False)
    assert layer.bias is None
    assert list(get_state_dict(layer)) == ["weight"]


@pytest.mark.parametrize("options", [
    dict(),
    dict(stride=2, padding=1),
    dict(padding=1, dilation=2, groups=2),
])
def test_conv2d_matches_the_definition(options):
    layer = nn.Conv2d(4, 4, 3, dtype=F64, device="NPY", **options)
    pair = lambda v: (v, v)  # noqa: E731

    def reference(x, weight, bias):
        return conv2d_reference(x, weight, bias, pair(options.get("stride", 1)), pair(options.get("padding", 0)),
                                pair(options.get("dilation", 1)), options.get("groups", 1))

    check_forward_and_gradients(layer, reference, [randn(1, 4, 5, 4)], named(layer, "weight", "bias"))


def test_conv1d_is_conv2d_over_a_single_row():
    layer = nn.Conv1d(3, 4, 3, padding=1, stride=2, dtype=F64, device="NPY")

    def reference(x, weight, bias):
        return conv2d_reference(x[:, :, None], weight[:, :, None], bias, (1, 2), (0, 1))[:, :, 0]

    check_forward_and_gradients(layer, reference, [randn(2, 3, 7)], named(layer, "weight", "bias"))


@pytest.mark.parametrize("options", [dict(stride=2, padding=1, output_padding=1), dict(stride=1, groups=2)])
def test_conv_transpose2d_scatters_each_input_element(options):
    layer = nn.ConvTranspose2d(4, 6, 3, dtype=F64, device="NPY", **options)
    assert layer.weight.shape == (4, 3 if options.get("groups") == 2 else 6, 3, 3)
    pair = lambda v: (v, v)  # noqa: E731

    def reference(x, weight, bias):
        return conv_transpose2d_reference(x, weight, bias, pair(options.get("stride", 1)),
                                          pair(options.get("padding", 0)), pair(options.get("output_padding", 0)),
                                          options.get("groups", 1))

    check_forward_and_gradients(layer, reference, [randn(2, 4, 3, 4)], named(layer, "weight", "bias"))


def test_conv2d_and_linear_on_cpu_match_numpy_in_float32():
    manual_seed(1)
    conv, linear = nn.Conv2d(2, 3, 3, padding=1), nn.Linear(3 * 4 * 4, 5)
    x = randn(2, 2, 4, 4).astype(np.float32)
    features = conv(Tensor(x)).relu()
    out = linear(features.flatten(1))
    expected_features = np.maximum(conv2d_reference(x, conv.weight.numpy(), conv.bias.numpy(), padding=(1, 1)), 0)
    expected = expected_features.reshape(2, -1) @ linear.weight.numpy().T + linear.bias.numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_convolutions_reject_channels_that_groups_do_not_divide():
    with pytest.raises(ValueError, match="divisible by groups=2"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(NotImplementedError, match="padding_mode='reflect'"):
        nn.Conv2d(3, 4, 3, padding_mode="reflect")


# ---- default initializations (PyTorch's) ---------------------------------------------------------

def test_linear_and_conv_weights_are_uniform_within_one_over_sqrt_fan_in():
    manual_seed(0)
    cases = [(nn.Linear(50, 40), 50), (nn.Conv2d(8, 16, 3), 8 * 9), (nn.Conv1d(4, 8, 5), 4 * 5),
             (nn.ConvTranspose2d(8, 6, 3, groups=2), 3 * 9)]
    for layer, fan_in in cases:
        bound = 1 / math.sqrt(fan_in)
        for tensor in (layer.weight, layer.bias):
            values = tensor.numpy()
            assert values.dtype == np.float32 and tensor.requires_grad
            assert np.abs(values).max() <= bound
            if values.size >= 500:  # uniform on [-b, b]: standard deviation b / sqrt(3)
                assert abs(values.std() - bound / math.sqrt(3)) < 0.1 * bound


def test_normalization_layers_start_as_identity_affine():
    for layer in (nn.BatchNorm2d(5), nn.LayerNorm(5), nn.GroupNorm(1, 5), nn.RMSNorm(5)):
        np.testing.assert_array_equal(layer.weight.numpy(), np.ones(5))
        if getattr(layer, "bias", None) is not None:
            np.testing.assert_array_equal(layer.bias.numpy(), np.zeros(5))
    norm = nn.BatchNorm1d(3)
    np.testing.assert_array_equal(norm.running_mean.numpy(), np.zeros(3))
    np.testing.assert_array_equal(norm.running_var.numpy(), np.ones(3))
    assert norm.num_batches_tracked.dtype == dtypes.int64 and norm.num_batches_tracked.item() == 0
    assert not norm.running_mean.requires_grad


def test_embedding_is_standard_normal_with_a_zero_padding_row():
    manual_seed(0)
    table = nn.Embedding(400, 20, padding_idx=-1).weight.numpy()
    np.testing.assert_array_equal(table[399], np.zeros(20))
    assert abs(table[:399].mean()) < 0.05 and abs(table[:399].std() - 1) < 0.05


def test_multihead_attention_initialization_follows_pytorch():
    manual_seed(0)
    attention = nn.MultiheadAttention(16, 4)
    bound = math.sqrt(6 / (16 + 48))  # xavier_uniform_ over the (3E, E) in_proj_weight
    weight = attention.in_proj_weight.numpy()
    assert weight.shape == (48, 16) and np.abs(weight).max() <= bound and weight.std() > 0.8 * bound / math.sqrt(3)
    np.testing.assert_array_equal(attention.in_proj_bias.numpy(), np.zeros(48))
    np.testing.assert_array_equal(attention.out_proj.bias.numpy(), np.zeros(16))


def test_parameter_names_are_pytorchs():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.LayerNorm(4),
                          nn.MultiheadAttention(4, 2), nn.Embedding(3, 4), nn.GroupNorm(2, 4), nn.RMSNorm(4))
    assert list(get_state_dict(model)) == [
        "0.weight", "0.bias",
        "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked",
        "4.weight", "4.bias",
        "5.in_proj_weight", "5.in_proj_bias", "5.out_proj.weight", "5.out_proj.bias",
        "6.weight", "7.weight", "7.bias", "8.weight",
    ]
    assert len(get_parameters(model)) == 14  # the three BatchNorm buffers do not train


# ---- normalization -------------------------------------------------------------------------------

def test_batchnorm2d_training_uses_batch_statistics_and_updates_running_ones():
    layer = nn.BatchNorm2d(3, dtype=F64, device="NPY")
    layer.weight.lazydata = Tensor(randn(3), device="NPY").lazydata
    layer.bias.lazydata = Tensor(randn(3), device="NPY").lazydata

    def reference(x, weight, bias):
        return normalize_reference(x, (0, 2, 3), 1e-5) * weight.reshape(1, 3, 1, 1) + bias.reshape(1, 3, 1, 1)

    x = randn(4, 3, 2, 3) * 2 + 1
    check_forward_and_gradients(layer, reference, [x], named(layer, "weight", "bias"))
    count = 4 * 2 * 3
    np.testing.assert_allclose(layer.running_mean.numpy(), 0.1 * x.mean(axis=(0, 2, 3)), rtol=1e-10)
    np.testing.assert_allclose(layer.running_var.numpy(), 0.9 + 0.1 * x.var(axis=(0, 2, 3)) * count / (count - 1),
                               rtol=1e-10)
    assert layer.num_batches_tracked.item() == 1


def test_batchnorm_eval_uses_running_statistics_and_training_realizes_the_pending_update():
    layer = nn.BatchNorm1d(2, momentum=0.5, dtype=F64, device="NPY")
    first, second = randn(8, 2), randn(8, 2) + 3
    layer(Tensor(first, device="NPY"))
    assert not layer.running_mean.lazydata.realized   # the update is lazy...
    layer(Tensor(second, device="NPY"))
    assert layer.num_batches_tracked.item() == 2       # ...and computed before the next step builds on it
    expected_mean = 0.5 * (0.5 * first.mean(0)) + 0.5 * second.mean(0)
    np.testing.assert_allclose(layer.running_mean.numpy(), expected_mean, rtol=1e-10)
    layer.eval()
    x = randn(5, 2)
    expected = (x - expected_mean) / np.sqrt(layer.running_var.numpy() + 1e-5)
    np.testing.assert_allclose(layer(Tensor(x, device="NPY")).numpy(), expected, rtol=1e-10)
    assert layer.num_batches_tracked.item() == 2


def test_batchnorm_checks_the_input_rank_and_channels():
    with pytest.raises(ValueError, match="expected a 4-D input"):
        nn.BatchNorm2d(3)(Tensor.zeros(2, 3))
    with pytest.raises(ValueError, match="expected 3 channels"):
        nn.BatchNorm1d(3)(Tensor.zeros(2, 4))


def test_layernorm_normalizes_the_trailing_dims():
    layer = nn.LayerNorm((3, 4), dtype=F64, device="NPY")
    layer.weight.lazydata = Tensor(randn(3, 4), device="NPY").lazydata

    def reference(x, weight, bias):
        return normalize_reference(x, (-2, -1), 1e-5) * weight + bias

    check_forward_and_gradients(layer, reference, [randn(2, 3, 4)], named(layer, "weight", "bias"))


def test_groupnorm_normalizes_each_group_of_channels():
    layer = nn.GroupNorm(2, 4, dtype=F64, device="NPY")
    layer.bias.lazydata = Tensor(randn(4), device="NPY").lazydata

    def reference(x, weight, bias):
        grouped = normalize_reference(x.reshape(2, 2, -1), (2,), 1e-5).reshape(x.shape)
        return grouped * weight.reshape(1, 4, 1) + bias.reshape(1, 4, 1)

    check_forward_and_gradients(layer, reference, [randn(2, 4, 3)], named(layer, "weight", "bias"))


def test_rmsnorm_divides_by_the_root_mean_square():
    layer = nn.RMSNorm(4, eps=1e-6, dtype=F64, device="NPY")

    def reference(x, weight):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * weight

    check_forward_and_gradients(layer, reference, [randn(3, 4)], named(layer, "weight"))


# ---- embedding, dropout, attention ---------------------------------------------------------------

def test_embedding_picks_rows_and_the_padding_row_gets_no_gradient():
    layer = nn.Embedding(5, 3, padding_idx=0, dtype=F64, device="NPY")
    indices = np.array([[0, 2, 4], [2, 2, 1]])
    out = layer(Tensor(indices, device="NPY"))
    np.testing.assert_array_equal(out.numpy(), layer.weight.numpy()[indices])
    out.sum().backward()
    np.testing.assert_array_equal(layer.weight.grad.numpy()[:, 0], [0, 1, 3, 0, 1])


def test_dropout_zeroes_a_fraction_p_while_training_and_nothing_in_eval():
    manual_seed(0)
    layer = nn.Dropout(0.25)
    x = Tensor.ones(100, 100, device="NPY")
    kept = layer(x).numpy()
    assert abs((kept == 0).mean() - 0.25) < 0.02
    np.testing.assert_allclose(kept[kept != 0], 1 / 0.75)
    layer.eval()
    np.testing.assert_array_equal(layer(x).numpy(), np.ones((100, 100)))


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_matches_pytorchs_algorithm(batch_first):
    manual_seed(0)
    attention = nn.MultiheadAttention(8, 2, batch_first=batch_first, dtype=F64, device="NPY")
    attention.in_proj_bias.lazydata = Tensor(randn(24), device="NPY").lazydata
    query, key = randn(2, 3, 8), randn(2, 4, 8)
    padding = np.array([[False, False, False, True], [False, True, False, False]])

    def arrange(array):
        return array if batch_first else array.transpose(1, 0, 2)

    out, weights = attention(Tensor(arrange(query), device="NPY"), Tensor(arrange(key), device="NPY"),
                             Tensor(arrange(key), device="NPY"), key_padding_mask=Tensor(padding, device="NPY"))
    expected, expected_weights = multihead_attention_reference(
        query, key, key, attention.in_proj_weight.numpy(), attention.in_proj_bias.numpy(),
        attention.out_proj.weight.numpy(), attention.out_proj.bias.numpy(), 2,
        np.where(padding, -np.inf, 0.0)[:, None, None, :])
    np.testing.assert_allclose(out.numpy(), arrange(expected), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights.numpy(), expected_weights.mean(1), rtol=1e-10, atol=1e-12)
    assert weights.numpy()[0, :, 3].max() == 0  # a padded key gets no attention


def test_multihead_attention_gradients_and_causal_mask():
    manual_seed(0)
    attention = nn.MultiheadAttention(4, 2, batch_first=True, dtype=F64, device="NPY")
    causal = np.where(np.triu(np.ones((3, 3), dtype=bool), 1), -np.inf, 0.0)

    def forward(x):
        return attention(x, x, x, need_weights=False, is_causal=True)[0]

    def reference(x, in_proj_weight, in_proj_bias):
        return multihead_attention_reference(x, x, x, in_proj_weight, in_proj_bias,
                                             attention.out_proj.weight.numpy(), attention.out_proj.bias.numpy(), 2,
                                             causal)[0]

    check_forward_and_gradients(forward, reference, [randn(2, 3, 4)],
                                named(attention, "in_proj_weight", "in_proj_bias"))


# ---- activations and containers ------------------------------------------------------------------

ACTIVATIONS = {
    "ReLU": (nn.ReLU(), lambda x: np.maximum(x, 0)),
    "GELU": (nn.GELU(), lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    "GELU_tanh": (nn.GELU("tanh"), lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    "SiLU": (nn.SiLU(), lambda x: x / (1 + np.exp(-x))),
    "Sigmoid": (nn.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    "Tanh": (nn.Tanh(), np.tanh),
    "LeakyReLU": (nn.LeakyReLU(0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    "Softmax": (nn.Softmax(dim=1), lambda x: softmax_reference(x, 1)),
    "LogSoftmax": (nn.LogSoftmax(dim=-1), lambda x: np.log(softmax_reference(x, -1))),
    "Flatten": (nn.Flatten(), lambda x: x.reshape(x.shape[0], -1)),
}


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_modules(name):
    module, reference = ACTIVATIONS[name]
    x = randn(3, 4, 2)
    x[np.abs(x) < 0.05] = 0.3  # away from the kinks of ReLU and LeakyReLU
    check_forward_and_gradients(module, reference, [x], {})


def test_softmax_without_dim_uses_pytorchs_legacy_choice():
    x = randn(2, 3, 4)
    np.testing.assert_allclose(nn.Softmax()(Tensor(x, device="NPY")).numpy(), softmax_reference(x, 0), rtol=1e-12)
    np.testing.assert_allclose(nn.Softmax()(Tensor(x[0], device="NPY")).numpy(), softmax_reference(x[0], 1),
                               rtol=1e-12)


def test_sequential_calls_layers_in_order_and_indexes_like_pytorch():
    model = nn.Sequential(nn.Linear(3, 4, device="NPY"), nn.ReLU(), nn.Linear(4, 2, device="NPY"))
    assert len(model) == 3 and isinstance(model[1], nn.ReLU) and isinstance(model[-1], nn.Linear)
    assert [type(layer).__name__ for layer in model[1:]] == ["ReLU", "Linear"]
    x = randn(5, 3).astype(np.float32)
    with no_grad():
        out = model(Tensor(x, device="NPY")).numpy()
    hidden = np.maximum(x @ model[0].weight.numpy().T + model[0].bias.numpy(), 0)
    np.testing.assert_allclose(out, hidden @ model[2].weight.numpy().T + model[2].bias.numpy(), rtol=1e-5)
    assert "(0): Linear(in_features=3, out_features=4, bias=True)" in repr(model)


def test_train_and_eval_reach_modules_in_attributes_lists_and_dicts():
    class Net(nn.Module):
        def __init__(self):
            self.blocks = [nn.Dropout(), nn.Sequential(nn.BatchNorm1d(2))]
            self.heads = {"a": nn.Dropout()}
            self.layers = nn.ModuleList([nn.Linear(2, 2)])

    net = Net()
    inner = [net.blocks[0], net.blocks[1][0], net.heads["a"], net.layers[0]]
    assert net.eval() is net and not net.training and not any(module.training for module in inner)
    net.train()
    assert net.training and all(module.training for module in inner)
    assert list(net.state_dict())[:2] == ["blocks.1.0.weight", "blocks.1.0.bias"]
    assert "layers.0.weight" in net.state_dict()


def test_module_without_forward_says_so():
    with pytest.raises(NotImplementedError, match="Empty must define forward"):
        type("Empty", (nn.Module,), {})()(Tensor([1.0]))


# ---- against PyTorch itself, when it is installed ------------------------------------------------

def test_pytorch_state_dicts_load_and_give_the_same_outputs():
    """Skipped without torch (it is not a test dependency); run it after `pip install torch`."""
    torch = pytest.importorskip("torch")
    from lazygrad.nn.state import load_state_dict
    torch.manual_seed(0)
    x = randn(2, 4, 6, 6).astype(np.float32)
    pairs = [
        (torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)),
        (torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
         nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)),
        (torch.nn.BatchNorm2d(4), nn.BatchNorm2d(4)),
        (torch.nn.GroupNorm(2, 4), nn.GroupNorm(2, 4)),
        (torch.nn.LayerNorm(6), nn.LayerNorm(6)),
        (torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(144, 5), torch.nn.GELU()),
         nn.Sequential(nn.Flatten(), nn.Linear(144, 5), nn.GELU())),
    ]
    for theirs, ours in pairs:
        state = theirs.state_dict()
        assert list(state) == list(get_state_dict(ours)), type(ours).__name__
        load_state_dict(ours, {name: Tensor(value.numpy(), device="NPY") for name, value in state.items()})
        expected = theirs(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(ours(Tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-5,
                                   err_msg=type(ours).__name__)
    attention_theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    attention_ours = nn.MultiheadAttention(8, 2, batch_first=True)
    load_state_dict(attention_ours, {name: Tensor(value.numpy()) for name, value in
                                     attention_theirs.state_dict().items()})
    sequence = randn(2, 5, 8).astype(np.float32)
    expected, expected_weights = attention_theirs(*[torch.from_numpy(sequence)] * 3)
    out, weights = attention_ours(*[Tensor(sequence)] * 3)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights.numpy(), expected_weights.detach().numpy(), rtol=1e-5, atol=1e-6)
