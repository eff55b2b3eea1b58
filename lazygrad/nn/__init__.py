"""Neural-network building blocks on top of Tensor; front-end layer, beside tensor.py.

`lazygrad.nn.functional` holds PyTorch's torch.nn.functional (convolution, pooling, normalization,
attention, losses), each function composed from Tensor methods; `lazygrad.nn` the layers built on
it (`module.py` the Module base and containers, `layers.py` the layers with parameters,
`activations.py` those without; PyTorch's names, parameters and initializations); `nn.optim` the optimizers; `nn.state` state
dicts and safetensors checkpoints.
"""
from lazygrad.nn import functional, optim, state
from lazygrad.nn.activations import (ELU, GELU, AvgPool2d, CrossEntropyLoss, Flatten, LeakyReLU, LogSoftmax,
                                     MaxPool2d, MSELoss, ReLU, Sigmoid, SiLU, Softmax, Softplus, Tanh)
from lazygrad.nn.layers import (BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, ConvTranspose2d, Dropout, Embedding,
                                GroupNorm, LayerNorm, Linear, MultiheadAttention, RMSNorm)
from lazygrad.nn.module import Identity, Module, ModuleList, Sequential

__all__ = ["functional", "optim", "state", "Module", "Sequential", "ModuleList", "Identity", "Linear", "Conv1d",
           "Conv2d", "ConvTranspose2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm", "RMSNorm",
           "Embedding", "Dropout", "MultiheadAttention", "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "LeakyReLU",
           "ELU", "Softplus", "Softmax", "LogSoftmax", "Flatten", "MaxPool2d", "AvgPool2d", "CrossEntropyLoss",
           "MSELoss"]
