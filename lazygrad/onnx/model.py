"""OnnxModel: loads an ONNX model, checks every operator is supported, and runs its graph with Tensor ops.

The front door of lazygrad.onnx. Loading parses the protobuf (proto.py), turns initializers into
Tensors on the chosen device and looks up every node's operator in the table (registry.py), so that
all unsupported operators are reported at once, before anything runs. Running walks the nodes in
order and calls each operator. A node whose inputs are all known constants (initializers, Constant
and Shape outputs, earlier folded nodes) runs once on the NPY device and its outputs become known
constants (constant folding) when they are small or take no more bytes than its inputs, up to
FOLD_MAX_BYTES (a weight sliced, concatenated or transposed: its kernels then read one plain
buffer, where they computed the concatenation in every use: a GRU's gates, reordered from torch's,
made each time step's kernel select between two weights, element by element); a larger result
stays lazy, since a few bytes of model can ask for gigabytes (`ConstantOfShape([2**28])`) and an
int8 weight's dequantized copy would take four times its bytes in every product that reads it.
Nothing else is realized
except small inputs an operator needs as numbers (a Reshape's shape), so the result Tensors are lazy
and fuse like any other.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx

from lazygrad.dtype import STORAGE_FLOATS, DType, dtypes
from lazygrad.onnx.functions import expand, function_schema, missing_in_function, type_proto_of
from lazygrad.onnx.order import ordered_model
from lazygrad.onnx.qdq import fuse_qdq
from lazygrad.onnx.proto import (UnsupportedError, ValueInfo, attribute_value, describe_value, elem_type_name,
                                 elem_type_of_dtype, is_supported_elem_type, load_model_proto, onnx_numpy,
                                 tensor_to_numpy, to_carrier)
from lazygrad.onnx.registry import OpContext, draws_random, find_operator
from lazygrad.onnx.replay import Replays
from lazygrad.realize import record_data_dependence
from lazygrad.tensor import Tensor

FOLD_LIMIT = 4096  # outputs of at most this many elements are folded whatever their inputs
# Larger outputs are folded up to this many bytes (a fold keeps a host copy and a device copy beside
# its inputs': a large model's transposed weights would double its memory)
FOLD_MAX_BYTES = 64 << 20


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    graphs = []
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            graphs.append(attribute.g)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            graphs.extend(attribute.graphs)
    return graphs


def walk_nodes(graph: onnx.GraphProto):
    """Every node of a graph, including the nodes of If/Loop/Scan bodies (each body's right after
    the node that holds it, however deeply bodies nest)."""
    stack = [iter(graph.node)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            continue
        yield node
        stack.extend(iter(subgraph.node) for subgraph in reversed(_subgraphs(node)))


# Operators whose output dtype is their argument, not their input's: never widened (`_widen_storage_floats`).
EXPLICIT_OUTPUT_TYPE = {"Cast", "CastLike"}


def _widen_storage_floats(node, inputs: list) -> tuple[list, DType] | None:
    """A node's inputs with its storage-float tensors (bfloat16, a float8) as float32, and that
    dtype, when it reads one and no float32: each ONNX operator then computes in float32 and its
    float outputs are rounded back once, as ONNX's reference computes Celu in bfloat16; lazygrad's
    own ops would round after every primitive. None otherwise."""
    tensors = [value for value in inputs if isinstance(value, Tensor)]
    stored = next((value.dtype for value in tensors if value.dtype in STORAGE_FLOATS), None)
    if node.op_type in EXPLICIT_OUTPUT_TYPE or stored is None or any(value.dtype == dtypes.float32 for value in tensors):
        return None
    return [value.float() if isinstance(value, Tensor) and value.dtype in STORAGE_FLOATS else value
            for value in inputs], stored


def _node_label(node: onnx.NodeProto) -> str:
    return f"{node.op_type} (node {node.name!r}" if node.name else f"{node.op_type} (unnamed node"


class OnnxModel:
    """An ONNX model ready to run on a lazygrad device: `OnnxModel("model.onnx")(x=array)["y"]`."""

    def __init__(self, model, device: str | None = None, strict: bool = True):
        """model: a path, the bytes of a model or an onnx.ModelProto. Unsupported operators raise
        UnsupportedError (all of them in one message) unless strict=False, which only lists them in
        `unsupported()`."""
        proto, self.base_dir = load_model_proto(model)
        self.proto = fuse_qdq(ordered_model(proto))
        self.device = Tensor.zeros(1, device=device).device
        self.opsets = {("" if op.domain == "ai.onnx" else op.domain): op.version for op in self.proto.opset_import}
        graph = self.proto.graph
        if strict:
            self.check_supported()
        initializer_names = {tensor.name for tensor in graph.initializer}
        self.inputs = [describe_value(value) for value in graph.input if value.name not in initializer_names]
        self.outputs = [describe_value(value) for value in graph.output]
        self.declared_types = {info.name: info.elem_type for info in
                               map(describe_value, list(graph.input) + list(graph.output) + list(graph.value_info))}
        self.declared_types.update({tensor.name: tensor.data_type for tensor in graph.initializer})
        self.constants: dict[int, tuple[Tensor, np.ndarray]] = {}
        self.initializers = {tensor.name: self.constant(tensor_to_numpy(tensor, self.base_dir))
                             for tensor in graph.initializer}
        self.initializer_constants = dict(self.constants)
        # (a node's bytes, its inputs' values) -> the folded outputs (`_fold`), or None for a result too large
        self.folds: dict[tuple, list | None] = {}
        self.folded_constants: dict[int, tuple[Tensor, np.ndarray]] = {}  # as `constants`, for the folds
        self.generators: dict[tuple, np.random.Generator] = {}  # a seeded random node's outputs -> its generator (OpContext.generator)
        self.replays = Replays()

    # ---- loading ----------------------------------------------------------------------------------

    def unsupported(self) -> list[str]:
        """One line per unsupported operator or element type, in graph order."""
        problems = []
        for node in walk_nodes(self.proto.graph):
            opset = self.opsets.get("" if node.domain == "ai.onnx" else node.domain)
            domain = "" if node.domain in ("", "ai.onnx") else f"{node.domain}."
            if find_operator(node.domain, node.op_type) is not None:
                continue
            label = _node_label(node).replace(node.op_type, domain + node.op_type, 1)
            schema = function_schema(node.domain, node.op_type, opset or 1)
            if schema is None:
                problems.append(f"{label}, opset {opset})")
                continue
            try:
                missing = sorted(set(missing_in_function(node, schema, opset)))
            except Exception:  # a body that cannot be expanded without input types is checked when it runs
                missing = []
            if missing:
                problems.append(f"{label}, opset {opset}: its function body uses {', '.join(missing)})")
        for kind, values in (("input", self.proto.graph.input), ("output", self.proto.graph.output)):
            for value in values:
                info = describe_value(value)
                if info.elem_type is not None and not is_supported_elem_type(info.elem_type):
                    problems.append(f"element type {elem_type_name(info.elem_type)} ({kind} {info.name!r})")
        for tensor in self.proto.graph.initializer:
            if not is_supported_elem_type(tensor.data_type):
                problems.append(f"element type {elem_type_name(tensor.data_type)} (initializer {tensor.name!r})")
        return problems

    def check_supported(self) -> None:
        problems = self.unsupported()
        if problems:
            raise UnsupportedError("unsupported: " + "; ".join(problems))

    def op_histogram(self) -> Counter:
        return Counter(node.op_type for node in walk_nodes(self.proto.graph))

    def constant(self, array: np.ndarray, device: str | None = None) -> Tensor:
        """A Tensor for a known value, remembered so operators can read it as numbers without running."""
        array = to_carrier(np.asarray(array))
        tensor = Tensor(array, device=device or self.device)
        self.constants[id(tensor)] = (tensor, array)
        return tensor

    def is_known(self, tensor: Tensor) -> bool:
        known = self.constants.get(id(tensor))
        return known is not None and known[0] is tensor

    def concrete(self, tensor: Tensor) -> np.ndarray:
        """The value of a tensor as numpy: free for known values, realized (once) otherwise."""
        known = self.constants.get(id(tensor))
        if known is not None and known[0] is tensor:
            return known[1]
        record_data_dependence("an ONNX operator reads a value the model computed as numbers")
        array = tensor.numpy()
        self.constants[id(tensor)] = (tensor, array)
        return array

    # ---- running ----------------------------------------------------------------------------------

    def __call__(self, **inputs) -> dict:
        return self.run(inputs)

    def run(self, inputs: dict) -> dict:
        """Run the graph: inputs by name (numpy arrays, Tensors, lists of them for sequences); returns
        a dict of output name to Tensor (a list for sequences, None for an empty optional): lazy
        Tensors on the first call with inputs of these shapes and dtypes; on later ones realized,
        from the fourth on by replaying the kernels the third launched (replay.py says when a call
        walks the graph instead)."""
        expected = [info.name for info in self.inputs]
        unknown = sorted(set(inputs) - set(expected) - set(self.initializers))
        missing = [name for name in expected if name not in inputs]
        if unknown or missing:
            raise ValueError(f"model inputs are {expected}; got unknown {unknown} and missing {missing}")
        values = {info.name: self._input_value(info, inputs[info.name]) for info in self.inputs}
        overridden = set(inputs) & set(self.initializers)
        for name in overridden:
            values[name] = self._input_value(None, inputs[name])
        return self.replays.run(self, values, bool(overridden))

    def run_graph(self, values: dict) -> dict:
        """Walk the graph once for the input values (and initializers given as inputs) by name."""
        # values known during the previous run are dropped, but for the initializers and folds
        self.constants = {**self.initializer_constants, **self.folded_constants}
        values = self._run_nodes(self.proto.graph.node, {**self.initializers, **values})
        return {info.name: values[info.name] for info in self.outputs}

    def run_numpy(self, inputs: dict) -> dict:
        """Like run, but outputs are numpy arrays in their declared ONNX types (uint32, bfloat16, ...)."""
        outputs = self.run(inputs)
        types = {info.name: info.elem_type for info in self.outputs}
        return {name: _to_numpy(value, types[name]) for name, value in outputs.items()}

    def _input_value(self, info: ValueInfo | None, value):
        if value is None or isinstance(value, Tensor):
            return value if value is None or value.device == self.device else value.to(self.device)
        if isinstance(value, (list, tuple)):
            return [self._input_value(None, item) for item in value]
        array = to_carrier(np.asarray(value))
        if info is not None and info.kind == "tensor" and info.dtype is not None and array.dtype != info.dtype.np:
            raise TypeError(f"input {info.name!r} must be {info.type_name}, got an array of {array.dtype}")
        return Tensor(array, device=self.device)

    def _run_nodes(self, nodes, values: dict, opsets: dict | None = None) -> dict:
        for node in nodes:
            inputs = [values[name] if name else None for name in node.input]
            while inputs and inputs[-1] is None:
                inputs.pop()
            outputs = self._run_node(node, inputs, values, opsets or self.opsets)
            for name, output in zip(node.output, outputs):
                if name:
                    values[name] = output
        return values

    def _run_node(self, node: onnx.NodeProto, inputs: list, values: dict, opsets: dict) -> list:
        opset = opsets.get("" if node.domain == "ai.onnx" else node.domain, 1)
        function = find_operator(node.domain, node.op_type)
        if function is None:
            return self._run_function(node, inputs, values, opset)
        attributes = {attribute.name: attribute_value(attribute, self.base_dir) for attribute in node.attribute}
        if self._foldable(node, inputs):
            folded = self._fold(node, function, inputs, attributes, opset, values)
            if folded is not None:
                return folded
        return self._call(function, OpContext(self, node, opset, values), inputs, attributes)

    def _call(self, function, context: OpContext, inputs: list, attributes: dict) -> list:
        widened = _widen_storage_floats(context.node, inputs)
        try:
            outputs = function(context, *(inputs if widened is None else widened[0]), **attributes)
        except UnsupportedError:
            raise
        except Exception as error:
            raise RuntimeError(f"{_node_label(context.node)}, opset {context.opset}) failed: "
                               f"{type(error).__name__}: {error}") from error
        outputs = list(outputs) if isinstance(outputs, tuple) else [outputs]
        if widened is not None:
            outputs = [output.cast(widened[1]) if isinstance(output, Tensor) and output.dtype == dtypes.float32
                       else output for output in outputs]
        return outputs

    def _foldable(self, node: onnx.NodeProto, inputs: list) -> bool:
        """Whether a node only reads known constants (no grads), so it can run once with numpy."""
        present = [value for value in inputs if value is not None]
        if not present or _subgraphs(node) or not all(isinstance(value, Tensor) for value in present):
            return False
        if draws_random(node.domain, node.op_type):
            return False
        return not any(value.requires_grad or not self.is_known(value) for value in present)

    def _fold(self, node, function, inputs: list, attributes: dict, opset: int, values: dict) -> list | None:
        """Run a node on the NPY device from its constant inputs; its outputs become known constants.
        None when its outputs hold more than FOLD_LIMIT elements and more bytes than its inputs
        (small inputs can ask for a huge result) or than FOLD_MAX_BYTES: nothing has been computed
        then (the outputs are lazy until read), and the node runs
        lazily like any other. What a node folded to is kept for the same input values, so later
        runs compute nothing on NPY: under the jit, whose capture cannot replay work done without
        kernels, a model folding its quantization scales (ResNet-18 quantized by ONNX Runtime)
        replays instead of running plainly on every call. Kept with its Tensor on the model's
        device, which later runs read again rather than copying it anew."""
        arrays = [None if value is None else self.concrete(value) for value in inputs]
        # the node by its bytes: iterating a protobuf's nodes may give new Python objects every run;
        # an initializer or an earlier fold, which lives as long as the model, by its identity
        # (hashing a large weight's bytes on every run cost more than folding it)
        key = (node.SerializeToString(), tuple(
            None if array is None else id(value) if id(value) in self.initializer_constants
            or id(value) in self.folded_constants else (array.dtype.str, array.shape, array.tobytes())
            for value, array in zip(inputs, arrays)))
        if key not in self.folds:
            host_inputs = [None if array is None else self.constant(array, "NPY") for array in arrays]
            outputs = self._call(function, OpContext(self, node, opset, values, device="NPY"), host_inputs, attributes)
            tensors = [output for output in outputs if isinstance(output, Tensor)]
            size = sum(output.numel() * output.dtype.itemsize for output in tensors)
            large = sum(output.numel() for output in tensors) > FOLD_LIMIT and \
                (size > sum(array.nbytes for array in arrays if array is not None) or size > FOLD_MAX_BYTES)
            self.folds[key] = None if large else [self._folded_constant(output.numpy()) if isinstance(output, Tensor)
                                                  else output for output in outputs]
        return self.folds[key]

    def _folded_constant(self, array: np.ndarray) -> Tensor:
        """A known constant that every later run knows too, as it knows the initializers."""
        tensor = self.constant(array)
        self.folded_constants[id(tensor)] = self.constants[id(tensor)]
        return tensor

    def _run_function(self, node: onnx.NodeProto, inputs: list, values: dict, opset: int) -> list:
        """Run a node whose operator the ONNX standard defines as a function of other operators."""
        schema = function_schema(node.domain, node.op_type, opset)
        if schema is None:
            raise UnsupportedError(f"unsupported: {_node_label(node)}, opset {opset})")
        types = [type_proto_of(value, elem_type_of_dtype) for value in inputs]
        nodes, body_opsets = expand(node, schema, opset, types)
        scope = dict(values)
        self._run_nodes(nodes, scope, {**self.opsets, **body_opsets})
        return [scope.get(name) if name else None for name in node.output]

    def run_subgraph(self, graph: onnx.GraphProto, inputs: list, outer: dict) -> list:
        values = dict(outer)
        for tensor in graph.initializer:
            values[tensor.name] = self.constant(tensor_to_numpy(tensor, self.base_dir))
        for value_info, value in zip(graph.input, inputs):
            values[value_info.name] = value
        values = self._run_nodes(graph.node, values)
        return [values[output.name] for output in graph.output]

    def __repr__(self) -> str:
        inputs = ", ".join(str(info) for info in self.inputs)
        outputs = ", ".join(str(info) for info in self.outputs)
        return f"OnnxModel({len(self.proto.graph.node)} nodes on {self.device}; inputs {inputs}; outputs {outputs})"


def _to_numpy(value, elem_type):
    if value is None:
        return None
    if isinstance(value, list):
        return [_to_numpy(item, elem_type) for item in value]
    return onnx_numpy(value.numpy(), elem_type)


