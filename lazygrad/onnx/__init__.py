"""lazygrad.onnx: run ONNX models with lazygrad Tensors, on every device, differentiable and fused.

    from lazygrad.onnx import OnnxModel
    model = OnnxModel("model.onnx", device="CPU")
    outputs = model(input=np.ones((1, 3, 224, 224), np.float32))   # dict of name -> lazy Tensor

model.py loads and runs graphs; registry.py is the operator table; the ops_*.py modules implement
the operators by topic with Tensor ops; functions.py expands operators ONNX defines as functions;
proto.py reads protobuf pieces; `python -m lazygrad.onnx` is __main__.py. Needs the `onnx` package
(`pip install lazygrad[onnx]`).
"""
# importing the operator modules registers their operators
from lazygrad.onnx import (ops_cast, ops_control, ops_conv, ops_elementwise, ops_grid, ops_indexing,  # noqa: F401
                           ops_misc, ops_nn, ops_qlinear, ops_quantize, ops_random, ops_reduce, ops_resize, ops_rnn, ops_roi,
                           ops_shape, ops_spectral)
from lazygrad.onnx.model import OnnxModel
from lazygrad.onnx.proto import UnsupportedError, ValueInfo

__all__ = ["OnnxModel", "UnsupportedError", "ValueInfo"]
