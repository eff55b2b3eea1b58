"""Neural-network building blocks on top of Tensor; front-end layer, beside tensor.py.

`lazygrad.nn.functional` holds PyTorch's torch.nn.functional (convolution, pooling, normalization,
attention, losses), each function composed from Tensor methods; `lazygrad.nn` the layers built on
it (PyTorch's names, parameters and initializations); `nn.optim` the optimizers; `nn.state` state
dicts and safetensors checkpoints.
"""
from lazygrad.nn import functional, optim, state
from lazygrad.nn.layers import (ELU, GELU, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, ConvTranspose2d,
                                CrossEntropyLoss, Dropout, Embedding, Flatten, GroupNorm, Identity, LayerNorm,
                                LeakyReLU, Linear, LogSoftmax, MaxPool2d, Module, ModuleList, MSELoss,
                                MultiheadAttention, ReLU, RMSNorm, Sequential, Sigmoid, SiLU, Softmax, Softplus,
                                Tanh)

__all__ = ["functional", "optim", "state", "Module", "Sequential", "ModuleList", "Identity", "Linear", "Conv1d",
           "Conv2d", "ConvTranspose2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm", "RMSNorm",
           "Embedding", "Dropout", "MultiheadAttention", "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "LeakyReLU",
           "ELU", "Softplus", "Softmax", "LogSoftmax", "Flatten", "MaxPool2d", "AvgPool2d", "CrossEntropyLoss",
           "MSELoss"]
