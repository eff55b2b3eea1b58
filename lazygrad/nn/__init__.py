"""Neural-network building blocks on top of Tensor; front-end layer, beside tensor.py.

`lazygrad.nn.functional` holds PyTorch's torch.nn.functional (convolution, pooling, normalization,
attention, losses), each function composed from Tensor methods.
"""
from lazygrad.nn import functional

__all__ = ["functional"]
