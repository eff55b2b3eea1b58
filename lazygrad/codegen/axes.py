"""Reshaping a kernel's iteration space: merging adjacent loop dims, splitting one in two, moving one.

Used by linearize (merged dims, inner accumulator loops) and by opts (every split an opt makes).
A reshape succeeds only when every view of the kernel follows it without a second view, so the
index expressions stay as short as before.
"""
from __future__ import annotations

from lazygrad.codegen.kernel import Kernel, KernelNode
from lazygrad.ops import Ops
from lazygrad.shape.view import ShapeTracker, split_along


def kernel_trackers(ast: KernelNode) -> set[ShapeTracker]:
    """Every view of an AST: its loads', stores', masked constants' and validity tests'."""
    found = set()
    for node in ast.walk():
        if node.op in (Ops.LOAD, Ops.STORE):
            found.add(node.arg[1])
        elif node.op is Ops.CONST and node.arg[1] is not None:
            found.add(node.arg[1])
        elif node.op is Ops.VALID:
            found.add(node.arg)
    return found


def _reshape_ast(ast: KernelNode, mapping: dict[ShapeTracker, ShapeTracker]) -> KernelNode:
    """The same AST with every tracker replaced by its entry in mapping."""
    rebuilt: dict[KernelNode, KernelNode] = {}
    for node in ast.walk():
        srcs = tuple(rebuilt[src] for src in node.srcs)
        arg = node.arg
        if node.op in (Ops.LOAD, Ops.STORE):
            arg = (arg[0], mapping[arg[1]])
        elif node.op is Ops.CONST and arg[1] is not None:
            arg = (arg[0], mapping[arg[1]])
        elif node.op is Ops.VALID:
            arg = mapping[arg]
        rebuilt[node] = KernelNode.make(node.op, node.dtype, srcs, arg)
    return rebuilt[ast]


def reshape_kernel(kernel: Kernel, new_full: tuple[int, ...], new_axes: set[int],
                   allow_views: bool = False) -> Kernel | None:
    """The kernel over a reshaped iteration space, or None if some view would need a second view
    (unless `allow_views`)."""
    out_shape = kernel.output_shape
    new_out = tuple(1 if axis in new_axes else size for axis, size in enumerate(new_full))
    mapping = {}
    for tracker in kernel_trackers(kernel.ast):
        if tracker.shape not in (kernel.full_shape, out_shape):
            return None  # the source of an indexed load (TAKE) has a dim more, and keeps its shape
        reshaped = tracker.reshape(new_full if tracker.shape == kernel.full_shape else new_out)
        if len(reshaped.views) > len(tracker.views) and not allow_views:
            return None
        mapping[tracker] = reshaped
    return Kernel(_reshape_ast(kernel.ast, mapping), tuple(new_full), tuple(sorted(new_axes)), kernel.buffer_dtypes)


def _splits(shape: tuple[int, ...], finer: tuple[int, ...]) -> bool:
    """Whether `finer` splits every dim of `shape` into consecutive dims (size-1 dims aside)."""
    position = 0
    for size in shape:
        product = 1
        while product < size and position < len(finer):
            product *= finer[position]
            position += 1
        if product != size:
            return False
    return all(size == 1 for size in finer[position:])


def refine_dims(kernel: Kernel) -> Kernel:
    """A kernel without a reduce whose load is a reshape of a view it cannot merge into runs over
    finer dims, where the load's index is a sum of steps, instead of over the merged dims, where each
    element took a division and a remainder per source dim. The finer dims are that view's (a copy
    of padded windows flattened into rows; ResNet-18's stem windows packed for its weight gradient,
    batch 16, 2 threads: 166 -> 11-14 ms) or the kernel's split where they carry into that view's
    next dim (half of a channel shuffle: ShuffleNetV2's 116 x 14 x 14 halves, 0.15 -> 0.007 ms)."""
    if kernel.reduce_axes:
        return kernel
    for tracker in kernel_trackers(kernel.ast):
        if len(tracker.views) < 2 or tracker.shape != kernel.full_shape:
            continue
        for finer in (tracker.views[-2].shape, split_along(tracker.views[-1], tracker.views[-2].shape)):
            if len(finer) <= len(kernel.full_shape) or not _splits(kernel.full_shape, finer):
                continue
            refined = reshape_kernel(kernel, tuple(finer), set())
            if refined is not None:
                return refined
    return kernel


def full_reduce_in_stored_order(kernel: Kernel) -> Kernel:
    """A reduce to one value walks its first load in the order that load is stored: with a tensor
    stored channels last (a convolution's output) read in NCHW order, every step jumped a line
    (lazygrad.quantize's max |x| of a MobileNetV2 activation, 32 x 112 x 112: 2.0 -> 0.37 ms)."""
    shape = kernel.full_shape
    if not kernel.reduce_axes or any(size > 1 and axis not in kernel.reduce_axes for axis, size in enumerate(shape)):
        return kernel
    loads = [node for node in kernel.ast.walk() if node.op is Ops.LOAD and node.arg[1].shape == shape]
    if not loads or len(loads[0].arg[1].views) != 1:
        return kernel
    strides = loads[0].arg[1].views[0].strides
    order = sorted(range(len(shape)), key=lambda dim: -abs(strides[dim]))  # stable: ties keep their order
    if order == list(range(len(shape))):
        return kernel
    mapping = {tracker: tracker.permute(order) for tracker in kernel_trackers(kernel.ast)}
    new_axes = tuple(position for position, dim in enumerate(order) if dim in kernel.reduce_axes)
    return Kernel(_reshape_ast(kernel.ast, mapping), tuple(shape[dim] for dim in order), new_axes, kernel.buffer_dtypes)


def merge_dims(kernel: Kernel) -> Kernel:
    """Merge adjacent loop dims of the same kind wherever every view reshapes without a new view
    (after `refine_dims`, and `full_reduce_in_stored_order`)."""
    kernel = full_reduce_in_stored_order(refine_dims(kernel))
    dim = 0
    while dim < len(kernel.full_shape) - 1:
        shape, axes = list(kernel.full_shape), set(kernel.reduce_axes)
        merged = None
        if (dim in axes) == (dim + 1 in axes):
            new_full = tuple(shape[:dim] + [shape[dim] * shape[dim + 1]] + shape[dim + 2:])
            new_axes = {axis if axis <= dim else axis - 1 for axis in axes}
            merged = reshape_kernel(kernel, new_full, new_axes)
        if merged is None:
            dim += 1
        else:
            kernel = merged
    return kernel


def split_dim(kernel: Kernel, dim: int, inner: int) -> Kernel | None:
    """Split loop dim into (size // inner, inner), both of the same kind. A view that cannot split
    the dim gets a view on top that does (the split of a strided spread: see strided_spread_tile)."""
    shape, axes = list(kernel.full_shape), set(kernel.reduce_axes)
    new_full = tuple(shape[:dim] + [shape[dim] // inner, inner] + shape[dim + 1:])
    new_axes = {axis if axis < dim else axis + 1 for axis in axes} | ({dim} if dim in axes else set())
    return reshape_kernel(kernel, new_full, new_axes, allow_views=True)


def move_dim(kernel: Kernel, source: int, destination: int) -> Kernel:
    """The kernel with loop dim `source` moved to position `destination` (every view permuted alike,
    so each still reads and writes the same elements)."""
    order = [dim for dim in range(len(kernel.full_shape)) if dim != source]
    order.insert(destination, source)
    mapping = {tracker: tracker.permute(order) for tracker in kernel_trackers(kernel.ast)}
    new_full = tuple(kernel.full_shape[dim] for dim in order)
    new_axes = tuple(position for position, dim in enumerate(order) if dim in kernel.reduce_axes)
    return Kernel(_reshape_ast(kernel.ast, mapping), new_full, new_axes, kernel.buffer_dtypes)


def shrink_kernel(kernel: Kernel, window: tuple[tuple[int, int], ...]) -> Kernel:
    """The kernel over a window of its iteration space (a (start, end) per dim, no reduce dim cut):
    every view shrunk alike, so the stores write that window of the outputs (a view of the outputs'
    shape keeps its 1 on each reduce dim)."""
    def window_of(tracker) -> tuple[tuple[int, int], ...]:
        if tracker.shape == kernel.full_shape:
            return window
        return tuple((0, 1) if dim in kernel.reduce_axes else bounds for dim, bounds in enumerate(window))
    mapping = {tracker: tracker.shrink(window_of(tracker)) for tracker in kernel_trackers(kernel.ast)}
    shape = tuple(end - start for start, end in window)
    return Kernel(_reshape_ast(kernel.ast, mapping), shape, kernel.reduce_axes, kernel.buffer_dtypes)
