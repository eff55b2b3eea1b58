"""GRAPH=1: writes the lazy graph about to be realized as a Graphviz DOT file (and a PNG when
Graphviz's `dot` is installed), so a user can see what fused into what. Called by the engine."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

from lazygrad.lazy import LazyBuffer, walk
from lazygrad.ops import Ops


def to_dot(outputs: list[LazyBuffer]) -> str:
    nodes = walk(outputs)
    names = {id(node): f"n{index}" for index, node in enumerate(nodes)}
    output_ids = {id(node) for node in outputs}
    lines = ["digraph lazygrad {", "  rankdir=BT;", '  node [shape=box, fontname="monospace"];']
    for node in nodes:
        label = f"{node.op}\\n{node.dtype.name}{list(node.shape)}"
        if node.arg is not None and node.op is not Ops.BUFFER:
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
    """Write the graph to a new file in the temporary folder; returns its path (also printed to
    stderr). The name is random and the file created exclusively, as is the PNG beside it: another
    user of the machine can neither predict the name nor put a symlink there first to have the file
    written elsewhere."""
    handle, path = tempfile.mkstemp(prefix=f"lazygrad_graph_{os.getpid()}_", suffix=".dot")
    with os.fdopen(handle, "w") as file:
        file.write(to_dot(outputs))
    message = f"GRAPH: wrote {path}"
    if shutil.which("dot"):
        png = _write_png(path)
        message += f" and {png}" if png else " (Graphviz could not draw it, or the PNG's name was taken)"
    print(message, file=sys.stderr)
    return path


def _write_png(dot_path: str) -> str | None:
    rendered = subprocess.run(["dot", "-Tpng", dot_path], capture_output=True)
    if rendered.returncode != 0:
        return None
    png = dot_path[:-4] + ".png"
    try:
        with open(png, "xb") as file:  # O_EXCL: never through a file or symlink put there first
            file.write(rendered.stdout)
    except FileExistsError:
        return None
    return png
