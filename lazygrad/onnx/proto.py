"""Reads ONNX protobuf pieces into Python: element types, tensors, attributes, value descriptions.

Used by model.py when it loads a model. ONNX element types lazygrad has no dtype for are carried
in a wider one (int4 and int2 in int8, float8e8m0 and float4 in float32); Cast rounds carried floats
to their format's precision, and `onnx_numpy` turns a carried result back into the declared numpy type. External data files are read only from
inside the model's folder (`external_data_file`), which every tensor of a model is checked against
when it loads.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lazygrad.dtype import DType, dtypes

DTYPE_OF_ELEM_TYPE = {
    TensorProto.BOOL: dtypes.bool, TensorProto.UINT8: dtypes.uint8, TensorProto.INT8: dtypes.int8,
    TensorProto.INT16: dtypes.int16, TensorProto.INT32: dtypes.int32, TensorProto.INT64: dtypes.int64,
    TensorProto.FLOAT16: dtypes.float16, TensorProto.FLOAT: dtypes.float32, TensorProto.DOUBLE: dtypes.float64,
    TensorProto.BFLOAT16: dtypes.bfloat16, TensorProto.UINT16: dtypes.uint16, TensorProto.UINT32: dtypes.uint32,
    TensorProto.UINT64: dtypes.uint64, TensorProto.FLOAT8E4M3FN: dtypes.float8_e4m3fn,
    TensorProto.FLOAT8E5M2: dtypes.float8_e5m2, TensorProto.FLOAT8E4M3FNUZ: dtypes.float8_e4m3fnuz,
    TensorProto.FLOAT8E5M2FNUZ: dtypes.float8_e5m2fnuz,
}
CARRIED_ELEM_TYPES = {
    TensorProto.UINT4: dtypes.uint8, TensorProto.INT4: dtypes.int8, TensorProto.UINT2: dtypes.uint8,
    TensorProto.INT2: dtypes.int8, TensorProto.FLOAT4E2M1: dtypes.float32, TensorProto.FLOAT8E8M0: dtypes.float32,
}
CARRIER_OF_NUMPY_NAME = {"float4_e2m1fn": np.float32, "float8_e8m0fnu": np.float32,
                         "int4": np.int8, "int2": np.int8, "uint4": np.uint8, "uint2": np.uint8}


class UnsupportedError(NotImplementedError):
    """The model uses operators or element types lazygrad.onnx does not implement."""


def elem_type_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type)


def is_supported_elem_type(elem_type: int) -> bool:
    return elem_type in DTYPE_OF_ELEM_TYPE or elem_type in CARRIED_ELEM_TYPES


def dtype_of(elem_type: int) -> DType:
    """The lazygrad dtype that holds values of an ONNX element type."""
    if elem_type in DTYPE_OF_ELEM_TYPE:
        return DTYPE_OF_ELEM_TYPE[elem_type]
    if elem_type in CARRIED_ELEM_TYPES:
        return CARRIED_ELEM_TYPES[elem_type]
    raise UnsupportedError(f"unsupported: element type {elem_type_name(elem_type)}")


def elem_type_of_dtype(dtype: DType) -> int:
    return next(elem_type for elem_type, candidate in DTYPE_OF_ELEM_TYPE.items() if candidate == dtype)


def numpy_dtype_of(elem_type: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def to_carrier(array: np.ndarray) -> np.ndarray:
    """A numpy array whose dtype lazygrad supports: carried types are widened, values kept."""
    carrier = CARRIER_OF_NUMPY_NAME.get(array.dtype.name)
    return array if carrier is None else array.astype(carrier)


def onnx_numpy(array: np.ndarray, elem_type: int | None) -> np.ndarray:
    """A computed array in its declared ONNX type when lazygrad carried it in a wider dtype."""
    if elem_type in CARRIED_ELEM_TYPES and array.dtype == CARRIED_ELEM_TYPES[elem_type].np:
        return array.astype(numpy_dtype_of(elem_type))
    return array


def tensor_to_numpy(tensor: TensorProto, base_dir: str | None = None) -> np.ndarray:
    """An initializer or constant as numpy, reading external data files inside base_dir only."""
    if tensor.data_location == TensorProto.EXTERNAL:
        external_data_file(tensor, base_dir)
        return numpy_helper.to_array(tensor, base_dir=base_dir)
    return numpy_helper.to_array(tensor)


def external_data_file(tensor: TensorProto, base_dir: str | None) -> str:
    """The file holding a tensor's external data. It must lie inside the model's folder once symlinks
    and '..' are resolved: a downloaded model must not read other files into its outputs."""
    location = next((entry.value for entry in tensor.external_data if entry.key == "location"), "")
    if base_dir is None:
        raise ValueError(f"tensor {tensor.name!r} keeps its data in the external file {location!r}, but the "
                         "model was given as bytes or a ModelProto, so it has no folder to read that file from; "
                         "load the model from its path (OnnxModel('folder/model.onnx'))")
    folder = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(folder, location))
    if os.path.isabs(location) or path == folder or os.path.commonpath([folder, path]) != folder:
        raise ValueError(f"tensor {tensor.name!r} keeps its data in {location!r}, which is not a file inside the "
                         f"model's folder {folder}: external data files must be inside the model's folder")
    return path


def all_graphs(graph: onnx.GraphProto):
    """A graph and every graph inside it (If, Loop and Scan bodies at any depth), without recursion."""
    pending = [graph]
    while pending:
        graph = pending.pop()
        yield graph
        for node in graph.node:
            pending.extend(subgraphs(node))


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    graphs = []
    for attribute in node.attribute:
        graphs.extend([attribute.g] if attribute.HasField("g") else [])
        graphs.extend(attribute.graphs)
    return graphs


def stored_tensors(model: onnx.ModelProto):
    """Every tensor stored in a model's graphs: initializers and tensor attributes (a sparse tensor
    as its values and indices)."""
    for graph in all_graphs(model.graph):
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield from (sparse.values, sparse.indices)
        for node in graph.node:
            for attribute in node.attribute:
                yield from [attribute.t, *attribute.tensors]
                for sparse in [attribute.sparse_tensor, *attribute.sparse_tensors]:
                    yield from (sparse.values, sparse.indices)


def check_external_data(model: onnx.ModelProto, base_dir: str | None) -> None:
    """Refuse, before anything is read, every external data file the model may not read."""
    for tensor in stored_tensors(model):
        if tensor.data_location == TensorProto.EXTERNAL:
            external_data_file(tensor, base_dir)


def attribute_value(attribute: onnx.AttributeProto, base_dir: str | None = None):
    """An attribute as a Python value; TENSOR attributes become numpy (external data read inside
    base_dir), GRAPH ones stay protos."""
    value = helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, TensorProto):
        return tensor_to_numpy(value, base_dir)
    if attribute.type == onnx.AttributeProto.STRINGS:
        return [item.decode("utf-8") for item in value]
    if attribute.type in (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
        return list(value)
    return value


@dataclass(frozen=True)
class ValueInfo:
    """A graph input or output: its name, element type and shape (symbolic dims are str, unknown None)."""
    name: str
    kind: str                      # "tensor", "sequence", "optional" or "unknown"
    elem_type: int | None
    shape: tuple | None

    @property
    def dtype(self) -> DType | None:
        if self.elem_type is None or not is_supported_elem_type(self.elem_type):
            return None
        return dtype_of(self.elem_type)

    @property
    def type_name(self) -> str:
        return "?" if self.elem_type is None else elem_type_name(self.elem_type).lower()

    def __str__(self) -> str:
        dims = "?" if self.shape is None else "(" + ", ".join("?" if d is None else str(d) for d in self.shape) + ")"
        kind = "" if self.kind == "tensor" else f"{self.kind} of "
        return f"{self.name}: {kind}{self.type_name}{dims}"


def describe_value(value_info: onnx.ValueInfoProto) -> ValueInfo:
    type_proto = value_info.type
    kind = "tensor"
    while True:
        which = type_proto.WhichOneof("value")
        if which == "sequence_type":
            kind, type_proto = "sequence", type_proto.sequence_type.elem_type
        elif which == "optional_type":
            kind, type_proto = "optional", type_proto.optional_type.elem_type
        else:
            break
    if which != "tensor_type":
        return ValueInfo(value_info.name, "unknown" if which is None else kind, None, None)
    tensor_type = type_proto.tensor_type
    shape = None
    if tensor_type.HasField("shape"):
        shape = tuple(dim.dim_value if dim.HasField("dim_value") else (dim.dim_param or None)
                      for dim in tensor_type.shape.dim)
    return ValueInfo(value_info.name, kind, tensor_type.elem_type or None, shape)


def load_model_proto(model) -> tuple[onnx.ModelProto, str | None]:
    """A ModelProto and the folder external data is read from (None for bytes and ModelProtos, which
    then may not have external data), from a path, bytes or a ModelProto."""
    if isinstance(model, onnx.ModelProto):
        proto, base_dir = model, None
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto, base_dir = parse_model_bytes(bytes(model), "the model bytes"), None
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no ONNX model at {path!r}")
        with open(path, "rb") as file:
            proto, base_dir = parse_model_bytes(file.read(), repr(path)), os.path.dirname(os.path.abspath(path))
    else:
        raise TypeError(f"OnnxModel takes a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
    check_external_data(proto, base_dir)
    return proto, base_dir


def parse_model_bytes(data: bytes, where: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as error:
        raise ValueError(f"{where}: not a valid ONNX model ({len(data)} bytes): the protobuf does not parse "
                         f"({error}); the file may be truncated or not an ONNX file") from None
    if not model.HasField("graph") or not model.opset_import:
        raise ValueError(f"{where}: not a valid ONNX model ({len(data)} bytes): it has no graph or no opset "
                         "import; the file may be truncated or not an ONNX file")
    return model
