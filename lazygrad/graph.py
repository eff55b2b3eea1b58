"""GRAPH=1: writes the lazy graph about to be realized as a Graphviz DOT file (and a PNG when
Graphviz's `dot` is installed), so a user can see what fused into what. Called by the engine."""
from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile

from lazygrad.lazy import LazyBuffer, walk

_counter = itertools.count()


def to_dot(outputs: list[LazyBuffer]) -> str:
    nodes = walk(outputs)
    names = {id(node): f"n{index}" for index, node in enumerate(nodes)}
    output_ids = {id(node) for node in outputs}
    lines = ["digraph lazygrad {", "  rankdir=BT;", '  node [shape=box, fontname="monospace"];']
    for node in nodes:
        label = f"{node.op}\\n{node.dtype.name}{list(node.shape)}"
        if node.arg is not None and node.op != "BUFFER":
            label += f"\\n{str(node.arg)[:40]}"
        style = ', style=filled, fillcolor="#dddddd"' if node.realized else ""
        if id(node) in output_ids:
            style = ', style=filled, fillcolor="#c8e6c9"'
        lines.append(f'  {names[id(node)]} [label="{label}"{style}];')
        for src in node.srcs:
            lines.append(f"  {names[id(src)]} -> {names[id(node)]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_graph(outputs: list[LazyBuffer]) -> str:
    """Write the graph; returns the DOT file's path (also printed to stderr)."""
    path = os.path.join(tempfile.gettempdir(), f"lazygrad_graph_{os.getpid()}_{next(_counter)}.dot")
    with open(path, "w") as handle:
        handle.write(to_dot(outputs))
    message = f"GRAPH: wrote {path}"
    if shutil.which("dot"):
        subprocess.run(["dot", "-Tpng", path, "-o", path[:-4] + ".png"], capture_output=True)
        message += f" and {path[:-4]}.png"
    print(message, file=sys.stderr)
    return path
