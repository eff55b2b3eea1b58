"""ONNX function expansion: operators the ONNX standard defines as a graph of simpler operators.

Used by model.py for an operator with no entry in the operator table: when its schema carries a
function body (SoftmaxCrossEntropyLoss, Attention, Range, ...), the node is replaced by that body,
with its edges renamed, attribute references resolved, and run with the body's opset versions.
Context-dependent bodies depend on the input types, so they are expanded when the node runs.
"""
from __future__ import annotations

import itertools

import onnx
from onnx import AttributeProto, FunctionProto, NodeProto, TypeProto, helper

from lazygrad.onnx.registry import find_operator

_prefixes = itertools.count()


def function_schema(domain: str, op_type: str, opset: int):
    """The schema of op_type at this opset when it is defined by a function body, else None."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except Exception:
        return None
    if schema.has_function or schema.has_context_dependent_function:
        return schema
    return None


def _pick_version(versions, opset: int) -> int | None:
    usable = [version for version in versions if version <= opset]
    return max(usable) if usable else (min(versions) if versions else None)


def function_body(node: NodeProto, schema, opset: int, input_types: list[TypeProto]) -> FunctionProto:
    """The body of node's operator for the opset in use (built for the input types when context-dependent)."""
    body = FunctionProto()
    if schema.has_function:
        version = _pick_version(schema.function_opset_versions, opset)
        body.ParseFromString(schema.get_function_with_opset_version(version))
        return body
    version = _pick_version(schema.context_dependent_function_opset_versions, opset)
    serialized = schema.get_context_dependent_function_with_opset_version(
        version, node.SerializeToString(), [t.SerializeToString() for t in input_types])
    body.ParseFromString(serialized)
    return body


def with_defaults(node: NodeProto, schema) -> NodeProto:
    complete = NodeProto()
    complete.CopyFrom(node)
    present = {attribute.name for attribute in node.attribute}
    for name, attribute in schema.attributes.items():
        if name not in present and attribute.default_value.name:
            complete.attribute.append(attribute.default_value)
    return complete


def _renamed_node(inner: NodeProto, rename, attributes: dict) -> NodeProto:
    renamed = NodeProto()
    renamed.CopyFrom(inner)
    del renamed.input[:]
    del renamed.output[:]
    del renamed.attribute[:]
    renamed.input.extend(rename(name) for name in inner.input)
    renamed.output.extend(rename(name) for name in inner.output)
    for attribute in inner.attribute:
        if attribute.ref_attr_name:
            if attribute.ref_attr_name in attributes:
                resolved = AttributeProto()
                resolved.CopyFrom(attributes[attribute.ref_attr_name])
                resolved.name = attribute.name
                renamed.attribute.append(resolved)
        elif attribute.type == AttributeProto.GRAPH:
            copy = AttributeProto()
            copy.CopyFrom(attribute)
            _rename_subgraph(copy.g, rename, attributes)
            renamed.attribute.append(copy)
        else:
            renamed.attribute.append(attribute)
    return renamed


def _rename_subgraph(graph, rename, attributes: dict) -> None:
    """Rename a body's subgraph in place: its own inputs and outputs keep local names, the rest follow rename."""
    local = {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
    for node in graph.node:
        local.update(node.output)

    def inner_rename(name: str) -> str:
        return name if name in local or name == "" else rename(name)

    nodes = [_renamed_node(node, inner_rename, attributes) for node in graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    for output in graph.output:
        output.name = inner_rename(output.name)


def expand(node: NodeProto, schema, opset: int, input_types: list[TypeProto]) -> tuple[list[NodeProto], dict]:
    """The body's nodes wired to node's inputs and outputs, and the body's opsets by domain."""
    node = with_defaults(node, schema)
    body = function_body(node, schema, opset, input_types)
    prefix = f"{node.op_type}_{next(_prefixes)}__"
    names = {}
    for index, name in enumerate(body.input):
        names[name] = node.input[index] if index < len(node.input) else ""
    for index, name in enumerate(body.output):
        if index < len(node.output) and node.output[index]:
            names[name] = node.output[index]

    def rename(name: str) -> str:
        if name in names:
            return names[name]
        return "" if name == "" else prefix + name

    attributes = {attribute.name: attribute for attribute in node.attribute}
    nodes = [_renamed_node(inner, rename, attributes) for inner in body.node]
    opsets = {("" if op.domain == "ai.onnx" else op.domain): op.version for op in body.opset_import}
    return nodes, opsets


def missing_in_function(node: NodeProto, schema, opset: int) -> list[str]:
    """Operators of a (static) function body that lazygrad.onnx cannot run, for the load-time check."""
    if not schema.has_function:  # context-dependent bodies need input types: checked when they run
        return []
    nodes, opsets = expand(node, schema, opset, [TypeProto() for _ in node.input])
    missing = []
    for inner in nodes:
        inner_opset = opsets.get(inner.domain or "", opset)
        if find_operator(inner.domain, inner.op_type) is None:
            inner_schema = function_schema(inner.domain, inner.op_type, inner_opset)
            if inner_schema is None:
                missing.append(inner.op_type)
            else:
                missing.extend(missing_in_function(inner, inner_schema, inner_opset))
    return missing


def type_proto_of(value, elem_type_of) -> TypeProto:
    """A TypeProto describing a runtime value (Tensor, list of Tensors or None) for context-dependent bodies."""
    if value is None:
        return TypeProto()
    if isinstance(value, list):
        element = type_proto_of(value[0], elem_type_of) if value else TypeProto()
        return helper.make_sequence_type_proto(element)
    return helper.make_tensor_type_proto(elem_type_of(value.dtype), value.shape)
