"""PyTorch's nn layers with parameters: Linear, convolutions, normalizations, Embedding, Dropout and
MultiheadAttention; front-end layer.

Each layer keeps PyTorch's constructor arguments, default initialization and parameter names, so a
PyTorch state dict loads 1:1 (`lazygrad.nn.state.load_state_dict`). Parameters are plain Tensors with
requires_grad=True stored as attributes (see module.py). The math is in `lazygrad.nn.functional`; a
layer holds the tensors and calls it:

    model = Sequential(Conv2d(1, 16, 3, padding=1), ReLU(), Flatten(), Linear(16 * 8 * 8, 10))
    logits = model(images)
    model.eval()                    # BatchNorm uses running statistics, Dropout passes through
"""
from __future__ import annotations

import math

import numpy as np

import lazygrad.nn.functional as F
from lazygrad.dtype import dtypes
from lazygrad.nn.module import Module, _parameter, _repeated, _uniform
from lazygrad.tensor import Tensor


# ---- linear and convolution ----------------------------------------------------------------------

class Linear(Module):
    """y = x @ weight.T + bias; weight (out_features, in_features) and bias drawn from
    U(-1/sqrt(in_features), 1/sqrt(in_features)), as PyTorch does."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        self.in_features, self.out_features = in_features, out_features
        bound = 1 / math.sqrt(in_features) if in_features else 0.0
        self.weight = _uniform((out_features, in_features), bound, dtype, device)
        self.bias = _uniform((out_features,), bound, dtype, device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class _ConvNd(Module):
    """Shared by the convolutions: weight and bias drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), where
    fan_in is weight.shape[1] times the kernel area (PyTorch's kaiming_uniform_ with a=sqrt(5))."""
    dims = 2
    transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", output_padding=0,
                 device=None, dtype=None):
        name = type(self).__name__
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels={in_channels} and out_channels={out_channels} must both be "
                             f"divisible by groups={groups}")
        if padding_mode != "zeros":
            raise NotImplementedError(f"{name}: padding_mode={padding_mode!r} is not supported (only 'zeros')")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _repeated(kernel_size, self.dims)
        self.stride, self.dilation = _repeated(stride, self.dims), _repeated(dilation, self.dims)
        self.padding = padding if isinstance(padding, str) else _repeated(padding, self.dims)
        self.output_padding = _repeated(output_padding, self.dims)
        if self.transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        fan_in = shape[1] * math.prod(self.kernel_size)
        bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
        self.weight = _uniform(shape, bound, dtype, device)
        self.bias = _uniform((out_channels,), bound, dtype, device) if bias else None

    def extra_repr(self) -> str:
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}")
        if self.dilation != (1,) * self.dims:
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        return text + (", bias=False" if self.bias is None else "")


class Conv1d(_ConvNd):
    """1-D convolution of (N, C_in, L); weight (out_channels, in_channels/groups, kernel_size)."""
    dims = 1

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device=device, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv2d(_ConvNd):
    """2-D convolution of (N, C_in, H, W); weight (out_channels, in_channels/groups, kH, kW)."""
    dims = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device=device, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose2d(_ConvNd):
    """Transposed 2-D convolution; weight (in_channels, out_channels/groups, kH, kW), as in PyTorch."""
    dims = 2
    transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, output_padding, device=device, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                  self.groups, self.dilation)


# ---- normalization -------------------------------------------------------------------------------

class _BatchNorm(Module):
    """Batch normalization over dim 1 with running statistics (PyTorch's names and defaults).

    Training uses the batch's statistics and updates running_mean/running_var lazily (see
    F.batch_norm); the update is computed at the start of the next training forward at the latest,
    so a training loop never keeps more than one step's graph alive. eval() uses the running ones.
    momentum=None keeps a cumulative average, 1 / num_batches_tracked, read from the device. The
    counter and the statistics are written with `assign`, so a jitted training step updates them.
    """
    accepted_ndims: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None):
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = _parameter(np.ones(num_features), dtype, device) if affine else None
        self.bias = _parameter(np.zeros(num_features), dtype, device) if affine else None
        if track_running_stats:
            float_type = dtype or dtypes.default_float
            self.running_mean = Tensor(np.zeros(num_features), dtype=float_type, device=device)
            self.running_var = Tensor(np.ones(num_features), dtype=float_type, device=device)
            self.num_batches_tracked = Tensor(np.array(0, dtype=np.int64), device=device)
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        if x.ndim not in self.accepted_ndims:
            raise ValueError(f"{name}: expected a {' or '.join(f'{n}-D' for n in self.accepted_ndims)} input, "
                             f"got shape {x.shape}")
        if x.shape[1] != self.num_features:
            raise ValueError(f"{name}: expected {self.num_features} channels in dim 1, got input of shape {x.shape}")
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            pending = [t for t in (self.running_mean, self.running_var, self.num_batches_tracked)
                       if not t.lazydata.realized]
            if pending:
                Tensor.realize(*pending)
            self.num_batches_tracked.assign(self.num_batches_tracked + 1)
            if self.momentum is None:
                momentum = self.num_batches_tracked.detach().cast(self.running_mean.dtype).reciprocal()
        use_batch_statistics = self.training or self.running_mean is None
        keep_running = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if keep_running else None, self.running_var if keep_running else None,
                            self.weight, self.bias, use_batch_statistics, momentum, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """BatchNorm over (N, C) or (N, C, L)."""
    accepted_ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """BatchNorm over (N, C, H, W)."""
    accepted_ndims = (4,)


class LayerNorm(Module):
    """Normalize over the trailing normalized_shape dims; weight ones and bias zeros of that shape."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        self.normalized_shape = tuple(_repeated(normalized_shape, 1))
        self.eps, self.elementwise_affine = eps, elementwise_affine
        affine_bias = elementwise_affine and bias
        self.weight = _parameter(np.ones(self.normalized_shape), dtype, device) if elementwise_affine else None
        self.bias = _parameter(np.zeros(self.normalized_shape), dtype, device) if affine_bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    """Normalize each of num_groups channel groups of (N, C, *); per-channel weight ones, bias zeros."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None):
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels={num_channels} must be divisible by num_groups={num_groups}")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = _parameter(np.ones(num_channels), dtype, device) if affine else None
        self.bias = _parameter(np.zeros(num_channels), dtype, device) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class RMSNorm(Module):
    """x / sqrt(mean(x**2) + eps) over the trailing normalized_shape dims, times weight (ones).
    eps=None uses the machine epsilon of the input's dtype, as PyTorch does."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None):
        self.normalized_shape = tuple(_repeated(normalized_shape, 1))
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = _parameter(np.ones(self.normalized_shape), dtype, device) if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


# ---- embedding and dropout -----------------------------------------------------------------------

class Embedding(Module):
    """A table of num_embeddings vectors drawn from N(0, 1); the row at padding_idx starts at zero and
    gets no gradient."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 device=None, dtype=None):
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} must be within [-{num_embeddings}, "
                                 f"{num_embeddings})")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        table = Tensor.randn(num_embeddings, embedding_dim).numpy()
        if padding_idx is not None:
            table[padding_idx] = 0
        self.weight = _parameter(table, dtype, device)

    def forward(self, indices: Tensor) -> Tensor:
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        padding = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{padding}"


class Dropout(Module):
    """Zero each element with probability p while training, scaling the rest by 1/(1-p)."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


# ---- attention -----------------------------------------------------------------------------------

class MultiheadAttention(Module):
    """PyTorch's MultiheadAttention: parameters in_proj_weight (3E, E), in_proj_bias (3E,) and out_proj
    (a Linear E -> E); with kdim/vdim other than embed_dim, q_proj_weight, k_proj_weight and
    v_proj_weight instead of in_proj_weight. Inputs are (L, N, E), or (N, L, E) with batch_first=True,
    or unbatched (L, E).

    forward returns (output, attention weights averaged over heads, or per head with
    average_attn_weights=False, or None when need_weights=False). A bool attn_mask or key_padding_mask
    is True where attention is NOT allowed (PyTorch's convention for this layer); a float mask is added
    to the scores. is_causal=True without attn_mask builds the causal mask (PyTorch requires the mask).
    add_bias_kv and add_zero_attn are not supported.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device=None, dtype=None):
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        if self.same_embed_dim:  # xavier_uniform_ over the stacked (3E, E) matrix, as PyTorch does
            self.in_proj_weight = _uniform((3 * embed_dim, embed_dim), math.sqrt(6 / (4 * embed_dim)), dtype, device)
        else:
            self.q_proj_weight = _uniform((embed_dim, embed_dim), math.sqrt(3 / embed_dim), dtype, device)
            self.k_proj_weight = _uniform((embed_dim, self.kdim), math.sqrt(6 / (embed_dim + self.kdim)), dtype,
                                          device)
            self.v_proj_weight = _uniform((embed_dim, self.vdim), math.sqrt(6 / (embed_dim + self.vdim)), dtype,
                                          device)
        self.in_proj_bias = _parameter(np.zeros(3 * embed_dim), dtype, device) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if bias:
            self.out_proj.bias = _parameter(np.zeros(embed_dim), dtype, device)

    def _project(self, x: Tensor, which: int) -> Tensor:
        """x @ W.T + b for the query (0), key (1) or value (2) projection."""
        start, end = which * self.embed_dim, (which + 1) * self.embed_dim
        if self.same_embed_dim:
            weight = self.in_proj_weight[start:end]
        else:
            weight = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[which]
        bias = self.in_proj_bias[start:end] if self.in_proj_bias is not None else None
        return F.linear(x, weight, bias)

    def _split_heads(self, x: Tensor) -> Tensor:
        """(N, L, E) -> (N, heads, L, head_dim)."""
        return x.reshape(x.shape[0], x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)

    @staticmethod
    def _as_additive(mask: Tensor, dtype) -> Tensor:
        return mask.where(-math.inf, 0.0).cast(dtype) if mask.dtype.is_bool else mask.cast(dtype)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False):
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif query.ndim != 3:
            raise ValueError(f"MultiheadAttention: expected a 2-D or 3-D query, got shape {query.shape}")
        if not self.batch_first or unbatched:  # (L, N, E) -> (N, L, E)
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if query.shape[-1] != self.embed_dim:
            raise ValueError(f"MultiheadAttention: query has embedding size {query.shape[-1]}, expected "
                             f"embed_dim={self.embed_dim}")
        batch, target, source = query.shape[0], query.shape[1], key.shape[1]
        q = self._split_heads(self._project(query, 0))
        k = self._split_heads(self._project(key, 1))
        v = self._split_heads(self._project(value, 2))
        scores = (q * (1.0 / math.sqrt(self.head_dim))) @ k.transpose(-2, -1)   # (N, heads, L, S)
        if attn_mask is None and is_causal:
            attn_mask = Tensor(np.triu(np.ones((target, source), dtype=bool), 1), device=query.device)
        if attn_mask is not None:
            if attn_mask.ndim == 3:  # (N * heads, L, S)
                attn_mask = attn_mask.reshape(batch, self.num_heads, target, source)
            scores = scores + self._as_additive(attn_mask, scores.dtype)
        if key_padding_mask is not None:
            if key_padding_mask.shape != (batch, source):
                raise ValueError(f"MultiheadAttention: key_padding_mask must have shape {(batch, source)}, got "
                                 f"{key_padding_mask.shape}")
            scores = scores + self._as_additive(key_padding_mask, scores.dtype).reshape(batch, 1, 1, source)
        weights = scores.softmax(-1)
        if self.training and self.dropout > 0:
            weights = F.dropout(weights, self.dropout)
        out = (weights @ v).transpose(1, 2).reshape(batch, target, self.embed_dim)
        out = self.out_proj(out)
        if not self.batch_first or unbatched:
            out = out.transpose(0, 1)
        if unbatched:
            out = out.squeeze(1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(1)
        return out, weights.squeeze(0) if unbatched else weights
