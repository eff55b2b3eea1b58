"""Rendered programs kept in the disk cache, found by their kernel: a new process whose kernels were
rendered before skips opts, linearize and rendering (most of a warm first call's time) and goes
straight to the binary cache with the source.

Engine layer, used by realize.prepare_programs. An entry's key is the kernel's complete description
(every AST node with its full views, the iteration space, the buffer dtypes), the device, the
renderer's settings, NOOPT, and a digest of lazygrad's own Python files, so any change to the code
that renders (or to anything else in the package) renders anew. BEAM's choices have their own
cache; kernels searched by BEAM are not kept here.
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from lazygrad.codegen.kernel import Kernel
from lazygrad.codegen.opts import Opt
from lazygrad.diskcache import cache_get, cache_key, cache_put

TABLE = "program"


@dataclass(frozen=True)
class Rendered:
    """What running a kernel needs from its rendering: the source to compile and how to launch it."""
    name: str
    source: str
    global_size: tuple[int, ...]
    argument_count: int
    opts: tuple[Opt, ...]


@functools.cache
def package_digest() -> str:
    """sha256 of every Python file of the lazygrad package (read once per process, ~100 files)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def describe_kernel(kernel: Kernel) -> str:
    """Every node of the AST, sources first, by number: op, dtype, sources and the full argument
    (views included), so two kernels with the same description render the same program."""
    numbers, lines = {}, []
    for node in kernel.ast.walk():
        numbers[node] = len(numbers)
        dtype = "-" if node.dtype is None else node.dtype.name
        sources = ",".join(str(numbers[src]) for src in node.srcs)
        lines.append(f"{node.op.name} {dtype} ({sources}) {node.arg!r}")
    dtypes = ",".join(dtype.name for dtype in kernel.buffer_dtypes)
    return f"{kernel.full_shape} {kernel.reduce_axes} {dtypes}\n" + "\n".join(lines)


def program_key(device_name: str, renderer, kernel: Kernel, noopt: bool) -> str:
    # the renderer's settings, not what it derived from them and cached on first use (its
    # `vector_ops`, a frozenset whose printed order follows string hashing, which differs between
    # processes: with it in the key, a new process rendered 218 of DenseNet-121's 220 kernels again)
    settings = sorted((name, repr(value)) for name, value in vars(renderer).items()
                      if not isinstance(getattr(type(renderer), name, None), functools.cached_property))
    return cache_key(TABLE, package_digest(), device_name, type(renderer).__name__, settings, noopt,
                     describe_kernel(kernel))


def load_rendered(key: str) -> Rendered | None:
    payload = cache_get(TABLE, key)
    if payload is None:
        return None
    try:
        record = json.loads(payload)
        return Rendered(record["name"], record["source"], tuple(record["global_size"]), record["argument_count"],
                        tuple(Opt(*opt) for opt in record["opts"]))
    except (ValueError, KeyError, TypeError):  # an entry another version wrote: render anew
        return None


def store_rendered(key: str, rendered: Rendered) -> None:
    record = {"name": rendered.name, "source": rendered.source, "global_size": list(rendered.global_size),
              "argument_count": rendered.argument_count,
              "opts": [[opt.op, opt.axis, opt.amount] for opt in rendered.opts]}
    cache_put(TABLE, key, json.dumps(record).encode())
