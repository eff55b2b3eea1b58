"""Checks that every name a model's nodes read is defined, and puts each graph's nodes in dependency
order; called by model.py when a model loads, so running can walk the nodes as they are stored.

ONNX asks for nodes in topological order and onnx's checker refuses a graph out of order, but
hand-edited and merged models break it; like ONNX Runtime, such a graph is sorted here rather than
refused. What no order can run (a name nothing defines, a cycle) is a ValueError naming the node.
"""
from __future__ import annotations

import onnx

from lazygrad.dependency_order import dependency_order
from lazygrad.onnx.proto import all_graphs, subgraphs


def ordered_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model, or a copy whose graphs have their nodes in dependency order when one had not (the
    caller's proto is never changed)."""
    check_names_are_defined(model.graph)
    if all(node_order(graph) == list(range(len(graph.node))) for graph in all_graphs(model.graph)):
        return model
    ordered = onnx.ModelProto()
    ordered.CopyFrom(model)
    for graph in all_graphs(ordered.graph):
        nodes = [graph.node[index] for index in node_order(graph)]
        del graph.node[:]
        graph.node.extend(nodes)
    return ordered


def check_names_are_defined(graph: onnx.GraphProto) -> None:
    """Every input of every node, and every graph output, is a graph input, an initializer or a
    node's output, of its own graph or of one enclosing it."""
    pending = [(graph, ())]
    while pending:
        graph, outer = pending.pop()
        scopes = (*outer, {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
                  | {name for node in graph.node for name in node.output})
        for node in graph.node:
            for name in node.input:
                if name and not any(name in scope for scope in scopes):
                    raise ValueError(f"{node_label(node)} in graph {graph.name!r} reads {name!r}, which no input, "
                                     "initializer or node of the graph (or of a graph enclosing it) defines")
            pending.extend((subgraph, scopes) for subgraph in subgraphs(node))
        for output in graph.output:
            if not any(output.name in scope for scope in scopes):
                raise ValueError(f"graph {graph.name!r} has an output {output.name!r} that no input, initializer "
                                 "or node defines")


def node_order(graph: onnx.GraphProto) -> list[int]:
    """Indices of the graph's nodes so that each comes after the nodes whose outputs it reads (inside
    its subgraphs too), keeping the stored order where it allows (Kahn's algorithm)."""
    nodes = graph.node
    producer = {name: index for index, node in enumerate(nodes) for name in node.output if name}
    sources = [{producer[name] for name in names_read(node) if name in producer} for node in nodes]
    order = dependency_order(sources)
    if len(order) < len(nodes):
        cycle = describe_cycle(graph, sources, set(range(len(nodes))) - set(order))
        raise ValueError(f"graph {graph.name!r} has a cycle, so no order can run it: {cycle}")
    return order


def names_read(node: onnx.NodeProto) -> set[str]:
    """The node's inputs and the names its subgraphs read from outside themselves, which may be outputs
    of other nodes of the node's graph."""
    names = {name for name in node.input if name}
    for subgraph in subgraphs(node):
        read, defined = set(), set()
        for graph in all_graphs(subgraph):
            read.update(name for inner in graph.node for name in inner.input)
            read.update(output.name for output in graph.output)
            defined.update(name for inner in graph.node for name in inner.output)
            defined.update(value.name for value in graph.input)
            defined.update(tensor.name for tensor in graph.initializer)
        names.update(read - defined - {""})
    return names


def describe_cycle(graph: onnx.GraphProto, sources: list[set[int]], waiting: set[int]) -> str:
    """One cycle among the nodes left unordered: each of them waits for another one that waits."""
    index = min(waiting)
    path, position = [], {}
    while index not in position:
        position[index] = len(path)
        path.append(index)
        index = min(source for source in sources[index] if source in waiting)
    cycle = [node_label(graph.node[index]) for index in path[position[index]:] + [index]]
    return f"{cycle[0]} reads an output of " + ", which reads an output of ".join(cycle[1:])


def node_label(node: onnx.NodeProto) -> str:
    return f"{node.op_type} (node {node.name!r})" if node.name else f"{node.op_type} (unnamed node)"
