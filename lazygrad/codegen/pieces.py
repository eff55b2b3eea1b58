"""Concatenations split into pieces: a kernel whose value is chosen among several padded sources by
ranges of one axis (`Tensor.cat`'s `where` of padded pieces, and whatever is fused into it) becomes
one kernel per range, each reading only the source valid there.

Data path: linearize.kernel_source asks `concatenated_pieces` for every kernel (a reduce is split
along an axis it does not reduce: a global average pool of a concatenation); where it gets pieces,
each is linearized on its own (its own opts) and a renderer that can (`render_pieces`, the C
dialect) prints them as one function that runs them in turn. Whole, every element of a
concatenation of k sources tests and loads all k of them: DenseNet-121's concatenations of up to 33
sources, with the batch norm and ReLU of the next layer fused in, took 3.3 ms for 196x1024 elements.

A piece is the kernel with every view shrunk to its range (`ShapeTracker.shrink`): a view whose
mask covers the range loses the test, one outside it reads nothing (its loads render as zeros), and
the store writes the piece's range of the output.
"""
from __future__ import annotations

from lazygrad.codegen.axes import shrink_kernel
from lazygrad.codegen.kernel import Kernel, KernelNode
from lazygrad.ops import Ops

# The most pieces a kernel is split into: each is a loop nest of its own to compile.
MAX_PIECES = 64


def _cuts(kernel: Kernel, axis: int) -> tuple[set[int], int]:
    """The positions along `axis` where some mask of the kernel's shape (a view's, or the top view's
    of a stack: a concatenation of shuffled channels) begins or ends inside the axis, and how many
    distinct such ranges there are (the sources a concatenation along it chooses among)."""
    size = kernel.full_shape[axis]
    cuts, ranges = set(), set()
    for node in kernel.ast.walk():
        if node.op not in (Ops.LOAD, Ops.VALID):
            continue
        tracker = node.arg if node.op is Ops.VALID else node.arg[1]
        view = tracker.views[-1]
        if view.mask is None or view.shape != kernel.full_shape:
            continue
        low, high = view.mask[axis]
        if (low, high) != (0, size) and low < high:
            ranges.add((low, high))
            cuts.update(position for position in (low, high) if 0 < position < size)
    return cuts, len(ranges)


def concatenated_pieces(kernel: Kernel) -> list[Kernel] | None:
    """The kernel split along the axis, not a reduce's, that the most distinct masked ranges (at
    least two) divide, one kernel per range between their bounds; None for a kernel without such an
    axis."""
    best, best_ranges = None, 1
    for axis in range(len(kernel.full_shape)):
        if axis in kernel.reduce_axes:
            continue
        cuts, ranges = _cuts(kernel, axis)
        if ranges > best_ranges and len(cuts) + 1 <= MAX_PIECES:
            best, best_ranges = (axis, sorted(cuts)), ranges
    if best is None:
        return None
    axis, cuts = best
    shape = kernel.full_shape
    bounds = [0] + cuts + [shape[axis]]
    pieces = []
    for start, end in zip(bounds, bounds[1:]):
        piece = shrink_kernel(kernel, tuple((start, end) if dim == axis else (0, size) for dim, size in enumerate(shape)))
        pieces.append(Kernel(_folded(piece.ast), piece.full_shape, piece.reduce_axes, piece.buffer_dtypes))
    return pieces


def _validity(tracker) -> bool | None:
    """True where a tracker is valid everywhere (no view masks anything), False where nowhere (its
    top view masks everything), else None."""
    if tracker.views[-1].is_empty_mask:
        return False
    if all(view.mask is None or all(bounds == (0, size) for bounds, size in zip(view.mask, view.shape))
           for view in tracker.views):
        return True
    return None


def _folded(ast: KernelNode) -> KernelNode:
    """The AST with the validity tests a piece has decided folded: a test or a load valid nowhere
    is a constant, a WHERE on a constant its chosen value. Without this, a load that only a WHERE
    chooses would keep gcc's loop vectorizer off the piece (renderer/c.py)."""
    rebuilt: dict[KernelNode, KernelNode] = {}
    for node in ast.walk():
        srcs = tuple(rebuilt[src] for src in node.srcs)
        folded = None
        if node.op is Ops.VALID and _validity(node.arg) is not None:
            folded = KernelNode.make(Ops.CONST, node.dtype, (), (_validity(node.arg), None))
        elif node.op is Ops.LOAD and _validity(node.arg[1]) is False:
            folded = KernelNode.make(Ops.CONST, node.dtype, (), (node.dtype.np_type(0).item(), None))
        elif node.op is Ops.WHERE and srcs[0].op is Ops.CONST and srcs[0].arg[1] is None:
            folded = srcs[1] if srcs[0].arg[0] else srcs[2]
        rebuilt[node] = folded or KernelNode.make(node.op, node.dtype, srcs, node.arg)
    return rebuilt[ast]
