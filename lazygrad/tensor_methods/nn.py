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
