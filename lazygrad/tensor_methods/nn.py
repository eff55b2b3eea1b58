"""Neural-network functions as Tensor methods (`x.conv2d(w)`, `logits.cross_entropy(target)`), as
tinygrad users write them: each calls its PyTorch-signature function in lazygrad.nn.functional with
the tensor as the first argument."""


class NNMethods:
    __slots__ = ()

    def conv1d(self, *args, **kwargs):
        """`lazygrad.nn.functional.conv1d(self, ...)`."""
        from lazygrad.nn import functional
        return functional.conv1d(self, *args, **kwargs)

    def conv2d(self, *args, **kwargs):
        """`lazygrad.nn.functional.conv2d(self, ...)`."""
        from lazygrad.nn import functional
        return functional.conv2d(self, *args, **kwargs)

    def conv3d(self, *args, **kwargs):
        """`lazygrad.nn.functional.conv3d(self, ...)`."""
        from lazygrad.nn import functional
        return functional.conv3d(self, *args, **kwargs)

    def conv_transpose1d(self, *args, **kwargs):
        """`lazygrad.nn.functional.conv_transpose1d(self, ...)`."""
        from lazygrad.nn import functional
        return functional.conv_transpose1d(self, *args, **kwargs)

    def conv_transpose2d(self, *args, **kwargs):
        """`lazygrad.nn.functional.conv_transpose2d(self, ...)`."""
        from lazygrad.nn import functional
        return functional.conv_transpose2d(self, *args, **kwargs)

    def max_pool1d(self, *args, **kwargs):
        """`lazygrad.nn.functional.max_pool1d(self, ...)`."""
        from lazygrad.nn import functional
        return functional.max_pool1d(self, *args, **kwargs)

    def max_pool2d(self, *args, **kwargs):
        """`lazygrad.nn.functional.max_pool2d(self, ...)`."""
        from lazygrad.nn import functional
        return functional.max_pool2d(self, *args, **kwargs)

    def avg_pool1d(self, *args, **kwargs):
        """`lazygrad.nn.functional.avg_pool1d(self, ...)`."""
        from lazygrad.nn import functional
        return functional.avg_pool1d(self, *args, **kwargs)

    def avg_pool2d(self, *args, **kwargs):
        """`lazygrad.nn.functional.avg_pool2d(self, ...)`."""
        from lazygrad.nn import functional
        return functional.avg_pool2d(self, *args, **kwargs)

    def adaptive_avg_pool2d(self, *args, **kwargs):
        """`lazygrad.nn.functional.adaptive_avg_pool2d(self, ...)`."""
        from lazygrad.nn import functional
        return functional.adaptive_avg_pool2d(self, *args, **kwargs)

    def interpolate(self, *args, **kwargs):
        """`lazygrad.nn.functional.interpolate(self, ...)`."""
        from lazygrad.nn import functional
        return functional.interpolate(self, *args, **kwargs)

    def linear(self, *args, **kwargs):
        """`lazygrad.nn.functional.linear(self, ...)`."""
        from lazygrad.nn import functional
        return functional.linear(self, *args, **kwargs)

    def dropout(self, *args, **kwargs):
        """`lazygrad.nn.functional.dropout(self, ...)`."""
        from lazygrad.nn import functional
        return functional.dropout(self, *args, **kwargs)

    def layer_norm(self, *args, **kwargs):
        """`lazygrad.nn.functional.layer_norm(self, ...)`."""
        from lazygrad.nn import functional
        return functional.layer_norm(self, *args, **kwargs)

    def batch_norm(self, *args, **kwargs):
        """`lazygrad.nn.functional.batch_norm(self, ...)`."""
        from lazygrad.nn import functional
        return functional.batch_norm(self, *args, **kwargs)

    def group_norm(self, *args, **kwargs):
        """`lazygrad.nn.functional.group_norm(self, ...)`."""
        from lazygrad.nn import functional
        return functional.group_norm(self, *args, **kwargs)

    def rms_norm(self, *args, **kwargs):
        """`lazygrad.nn.functional.rms_norm(self, ...)`."""
        from lazygrad.nn import functional
        return functional.rms_norm(self, *args, **kwargs)

    def scaled_dot_product_attention(self, *args, **kwargs):
        """`lazygrad.nn.functional.scaled_dot_product_attention(self, ...)`."""
        from lazygrad.nn import functional
        return functional.scaled_dot_product_attention(self, *args, **kwargs)

    def cross_entropy(self, *args, **kwargs):
        """`lazygrad.nn.functional.cross_entropy(self, ...)`."""
        from lazygrad.nn import functional
        return functional.cross_entropy(self, *args, **kwargs)

    def nll_loss(self, *args, **kwargs):
        """`lazygrad.nn.functional.nll_loss(self, ...)`."""
        from lazygrad.nn import functional
        return functional.nll_loss(self, *args, **kwargs)

    def binary_cross_entropy(self, *args, **kwargs):
        """`lazygrad.nn.functional.binary_cross_entropy(self, ...)`."""
        from lazygrad.nn import functional
        return functional.binary_cross_entropy(self, *args, **kwargs)

    def binary_cross_entropy_with_logits(self, *args, **kwargs):
        """`lazygrad.nn.functional.binary_cross_entropy_with_logits(self, ...)`."""
        from lazygrad.nn import functional
        return functional.binary_cross_entropy_with_logits(self, *args, **kwargs)

    def mse_loss(self, *args, **kwargs):
        """`lazygrad.nn.functional.mse_loss(self, ...)`."""
        from lazygrad.nn import functional
        return functional.mse_loss(self, *args, **kwargs)

    def l1_loss(self, *args, **kwargs):
        """`lazygrad.nn.functional.l1_loss(self, ...)`."""
        from lazygrad.nn import functional
        return functional.l1_loss(self, *args, **kwargs)

    def smooth_l1_loss(self, *args, **kwargs):
        """`lazygrad.nn.functional.smooth_l1_loss(self, ...)`."""
        from lazygrad.nn import functional
        return functional.smooth_l1_loss(self, *args, **kwargs)

    # ---- tinygrad's names, with tinygrad's arguments -------------------------------------------------

    def layernorm(self, axis=-1, eps: float = 1e-5):
        """(x - mean) / sqrt(var + eps) over axis (an int or a tuple), with the biased variance and no
        weight or bias (tinygrad's layernorm; `layer_norm` is PyTorch's)."""
        centered = self - self.mean(axis, keepdim=True)
        return centered * ((centered * centered).mean(axis, keepdim=True) + eps).rsqrt()

    def batchnorm(self, weight, bias, mean, invstd, axis=1):
        """(x - mean) * weight * invstd + bias with per-channel vectors along axis (an int or a tuple),
        given the inverse standard deviation (tinygrad's batchnorm; `batch_norm` is PyTorch's). weight and
        bias may be None; an invstd with as many dims as x is used as it is."""
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        axes = tuple(a % self.ndim for a in axes)
        shape = tuple(size if dim in axes else 1 for dim, size in enumerate(self.shape))
        out = self - mean.reshape(shape)
        if weight is not None:
            out = out * weight.reshape(shape)
        out = out * (invstd if invstd.ndim == self.ndim else invstd.reshape(shape))
        return out + bias.reshape(shape) if bias is not None else out

    def sparse_categorical_crossentropy(self, Y, ignore_index: int = -1, label_smoothing: float = 0.0,
                                        reduction: str = "mean"):
        """Cross entropy of logits whose last dim holds the classes, against integer labels Y of the other
        dims; labels equal to ignore_index are left out (tinygrad's; `cross_entropy` is PyTorch's)."""
        from lazygrad.nn import functional
        logits = self.movedim(-1, 1) if self.ndim > 2 else self
        return functional.cross_entropy(logits, Y, ignore_index=ignore_index, label_smoothing=label_smoothing,
                                        reduction=reduction)

    def binary_crossentropy(self, Y, reduction: str = "mean"):
        """Binary cross entropy of probabilities against Y (tinygrad's name for `binary_cross_entropy`,
        whose logs are clamped at -100 as in PyTorch)."""
        from lazygrad.nn import functional
        return functional.binary_cross_entropy(self, Y, reduction=reduction)

    def binary_crossentropy_logits(self, Y, reduction: str = "mean", pos_weight=None):
        """Binary cross entropy of logits against Y (tinygrad's name for `binary_cross_entropy_with_logits`)."""
        from lazygrad.nn import functional
        return functional.binary_cross_entropy_with_logits(self, Y, pos_weight=pos_weight, reduction=reduction)

    def sequential(self, layers):
        """Each callable of layers applied in turn, starting from this tensor (tinygrad's sequential)."""
        out = self
        for layer in layers:
            out = layer(out)
        return out
