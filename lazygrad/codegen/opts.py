"""Kernel optimizations (opts): how a kernel's loops are arranged, chosen before linearize runs.

Data path: realize.get_program picks a list of `Opt`s for each kernel (the heuristic below, or
BEAM search in lazygrad/beam.py), `apply_opts` turns the kernel into an `OptimizedKernel`, and
`linearize` lays out its loops. Each opt names an axis of the kernel's iteration space after
adjacent dims are merged (`OptimizedKernel.kernel.full_shape`, which grows as opts split axes):

  UPCAST axis n   split a global axis into (size/n, n) and compute the n outputs together in one
                  iteration (register tiles: a loaded value is reused across the tile, and the C
                  compiler packs the n straight-line copies into vector instructions)
  UNROLL axis n   split a reduce axis into (size/n, n) and unroll the inner n steps, each into its
                  own accumulator (folded together after the loop: independent chains vectorize)
  LOCAL axis n    split a global axis into (size/n, n) and run the inner n outputs as work-items of
                  one work-group (GPU dialects; the C dialect refuses it)
  GROUP axis n    split a reduce axis into (size/n, n): n work-items of a group (lanes) each reduce
                  every n-th step into their own accumulator, then the n partial results are
                  folded from local memory, in lane order (GPU dialects; one per kernel; with
                  several reduces, every lane folds the earlier ones, which the later ones read)
  BLOCK axis n    run a reduce axis in blocks of n, the block loop outermost, with partial results kept
                  in the output buffer between blocks (cache blocking for big matmuls; C only)
  PANEL axis n    split a global axis into (size/n, n) and move the inner n loop inside the later global
                  loops: n steps along this axis run for each step of theirs, so what those loops
                  read stays in L1 while n tiles reuse it (in a matmul, a panel of the right operand
                  serves n row tiles before the next panel is read; C only)
  THREADS axis n  run the outermost global loop (axis) on n CPU threads, 1 for none (C only; without
                  it, a kernel of 32768 iterations or more runs on every core, a smaller one on one)

Every opt is validated: a refused opt raises `OptError` saying why (not divisible, too large,
wrong kind of axis, not supported by this renderer). Upcast and unrolled axes are expanded into
straight-line code by linearize, so the same opt list runs on every renderer that accepts it.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from lazygrad.codegen.axes import kernel_trackers, move_dim, split_dim
from lazygrad.codegen.kernel import Kernel, KernelNode
from lazygrad.dtype import dtypes
from lazygrad.ops import Ops
from lazygrad.shape.symbolic import Lin, render_condition, var

OPT_OPS = ("UPCAST", "UNROLL", "BLOCK", "PANEL", "LOCAL", "GROUP", "THREADS")
# Part of BEAM's cache key: bump it when an opt's meaning or the code it renders changes.
OPTS_VERSION = 4  # 4: byte dot tiles and a branchless scalar max render the same opts anew

# Straight-line copies of the loop body: outputs computed together (upcast) times reduce steps
# unrolled. Larger tiles spill registers and make the C compiler slow. 272: 17 rows of 16 columns,
# 17 vector accumulators on AVX-512 (Inception-v3's 17x17 stage, whose rows nothing else divides).
MAX_UPCAST = 272
MAX_EXPANSION = 512

# Work-items in one work-group (LOCAL sizes times the GROUP size): every GPU and PoCL allow 256.
MAX_LOCAL = 256
MAX_THREADS = 64

GLOBAL, REDUCE, UPCAST, UNROLL, BLOCK = "global", "reduce", "upcast", "unroll", "block"
LOCAL, GROUP = "local", "group"       # a global axis in a work-group; a reduce axis split over lanes
REDUCE_KINDS = (REDUCE, UNROLL, BLOCK, GROUP)


class OptError(ValueError):
    """An opt that cannot apply to this kernel; the message says why."""


@dataclass(frozen=True)
class Opt:
    op: str
    axis: int
    amount: int

    def __str__(self) -> str:
        return f"{self.op}({self.axis},{self.amount})"


@dataclass(frozen=True)
class OptimizedKernel:
    """A kernel whose axes each have a kind: global, reduce, upcast (expanded outputs), unroll
    (expanded reduce steps), block (a reduce loop outside the global loops), local (work-items of a
    group) or group (the lanes a reduce is split over). `kernel.reduce_axes` holds the reduce,
    unroll, block and group axes."""
    kernel: Kernel
    kinds: tuple[str, ...]
    opts: tuple[Opt, ...] = ()

    def axes_of(self, kind: str) -> list[int]:
        return [axis for axis, axis_kind in enumerate(self.kinds) if axis_kind == kind]

    def expanded_size(self, *kinds: str) -> int:
        return math.prod(self.kernel.full_shape[axis] for axis, kind in enumerate(self.kinds) if kind in kinds)


def initial(kernel: Kernel) -> OptimizedKernel:
    """The kernel with no opts applied: every axis is a plain global or reduce loop."""
    kinds = tuple(REDUCE if axis in kernel.reduce_axes else GLOBAL for axis in range(len(kernel.full_shape)))
    return OptimizedKernel(kernel, kinds)


def _split_axis(optimized: OptimizedKernel, axis: int, amount: int, inner_kind: str,
                outer_kind: str | None = None) -> OptimizedKernel:
    """Split `axis` into (size / amount, amount); the inner part gets `inner_kind`, the outer part
    `outer_kind` (by default the axis's own kind)."""
    kernel = optimized.kernel
    split = split_dim(kernel, axis, amount)
    if split is None:
        raise OptError(f"axis {axis} of {kernel.full_shape} cannot be split by {amount}: some view would need a reshape")
    outer_kind = outer_kind or optimized.kinds[axis]
    kinds = optimized.kinds[:axis] + (outer_kind, inner_kind) + optimized.kinds[axis + 1:]
    reduce_axes = tuple(index for index, kind in enumerate(kinds) if kind in REDUCE_KINDS)
    split = Kernel(split.ast, split.full_shape, reduce_axes, split.buffer_dtypes)
    return OptimizedKernel(split, kinds, optimized.opts)


def apply_opt(optimized: OptimizedKernel, opt: Opt, renderer) -> OptimizedKernel:
    """The kernel with one more opt, or OptError with the reason it does not apply."""
    shape = optimized.kernel.full_shape
    if opt.op not in OPT_OPS:
        raise OptError(f"unknown opt {opt.op!r}; the opts are {', '.join(OPT_OPS)}")
    if opt.op in ("LOCAL", "GROUP") and not getattr(renderer, "supports_local", False):
        raise OptError(f"{opt.op} needs a dialect with work-groups; {type(renderer).__name__} has none")
    if not 0 <= opt.axis < len(shape):
        raise OptError(f"{opt}: axis {opt.axis} is out of range for a kernel of shape {shape}")
    if opt.op == "THREADS":  # no split: the amount is a thread count, 1 allowed
        _check_threads(optimized, opt, renderer)
        return OptimizedKernel(optimized.kernel, optimized.kinds, optimized.opts + (opt,))
    size, kind = shape[opt.axis], optimized.kinds[opt.axis]
    if opt.amount < 2:
        raise OptError(f"{opt}: the amount must be at least 2, got {opt.amount}")
    if size % opt.amount != 0:
        raise OptError(f"{opt}: axis {opt.axis} has size {size}, not divisible by {opt.amount}")
    if opt.op in ("UPCAST", "LOCAL", "PANEL") and kind != GLOBAL:
        raise OptError(f"{opt}: axis {opt.axis} is a {kind} axis; {opt.op} applies to global axes")
    if opt.op in ("UNROLL", "GROUP", "BLOCK") and kind != REDUCE:
        raise OptError(f"{opt}: axis {opt.axis} is a {kind} axis; {opt.op} applies to reduce axes")
    if opt.op == "UPCAST" and optimized.expanded_size(UPCAST) * opt.amount > MAX_UPCAST:
        raise OptError(f"{opt}: more than {MAX_UPCAST} outputs per iteration")
    if opt.op in ("UPCAST", "UNROLL") and optimized.expanded_size(UPCAST, UNROLL) * opt.amount > MAX_EXPANSION:
        raise OptError(f"{opt}: more than {MAX_EXPANSION} copies of the loop body")
    if opt.op == "BLOCK":
        _check_block(optimized, opt, renderer)
        split = _split_axis(optimized, opt.axis, opt.amount, REDUCE, outer_kind=BLOCK)
        return OptimizedKernel(split.kernel, split.kinds, optimized.opts + (opt,))
    if opt.op == "PANEL":
        return _apply_panel(optimized, opt, renderer)
    if opt.op in ("LOCAL", "GROUP"):
        _check_work_group(optimized, opt)
    inner_kind = {"UPCAST": UPCAST, "UNROLL": UNROLL, "LOCAL": LOCAL, "GROUP": GROUP}.get(opt.op)
    if inner_kind is None:
        raise OptError(f"{opt.op} is not implemented for {type(renderer).__name__} yet")
    split = _split_axis(optimized, opt.axis, opt.amount, inner_kind)
    return OptimizedKernel(split.kernel, split.kinds, optimized.opts + (opt,))


def _check_block(optimized: OptimizedKernel, opt: Opt, renderer) -> None:
    """BLOCK runs the reduce in blocks of `amount` steps, the block loop outermost; each pass over
    the outputs adds its block to partial results kept in the output buffer, so a block of the
    operands stays in cache while every output uses it. The output must hold the accumulator
    exactly, and must not be one of the inputs."""
    kernel = optimized.kernel
    if not getattr(renderer, "expands_tiles", False):
        raise OptError(f"{opt}: BLOCK (partial results kept in the output) is only rendered by the C dialect")
    if BLOCK in optimized.kinds:
        raise OptError(f"{opt}: the kernel already has a BLOCK")
    if opt.amount >= kernel.full_shape[opt.axis]:
        raise OptError(f"{opt}: a block of {opt.amount} covers all of axis {opt.axis} (size {kernel.full_shape[opt.axis]})")
    reduce_nodes = [node for node in kernel.ast.walk() if node.is_reduce]
    if len(reduce_nodes) > 1:
        raise OptError(f"{opt}: a kernel with several reduces keeps no partial results")
    reduce_node = reduce_nodes[0] if reduce_nodes else None
    output_dtype = kernel.buffer_dtypes[0]
    if reduce_node is None or reduce_node.dtype != output_dtype or output_dtype.itemsize < 4:
        raise OptError(f"{opt}: partial results need an output of the accumulator's dtype (32 or 64 bits)")
    store_views = kernel.stores[0].arg[1].views
    if len(store_views) != 1 or store_views[0].mask is not None:
        raise OptError(f"{opt}: the output view must be a plain one")


def _apply_panel(optimized: OptimizedKernel, opt: Opt, renderer) -> OptimizedKernel:
    """PANEL: split the axis, then move its inner part behind the last global loop."""
    if not getattr(renderer, "expands_tiles", False):
        raise OptError(f"{opt}: PANEL (reordered loops for cache reuse) is only rendered by the C dialect")
    shape = optimized.kernel.full_shape
    later = [axis for axis, kind in enumerate(optimized.kinds) if kind == GLOBAL and axis > opt.axis and shape[axis] > 1]
    if not later:
        raise OptError(f"{opt}: no global loop after axis {opt.axis} to move its panel inside")
    split = _split_axis(optimized, opt.axis, opt.amount, GLOBAL)
    destination = later[-1] + 1  # just after the last global loop, which the split moved one place on
    kernel = move_dim(split.kernel, opt.axis + 1, destination)
    kinds = list(split.kinds)
    kinds.insert(destination, kinds.pop(opt.axis + 1))
    return OptimizedKernel(kernel, tuple(kinds), optimized.opts + (opt,))


def _check_threads(optimized: OptimizedKernel, opt: Opt, renderer) -> None:
    """THREADS sets how many CPU threads run the outermost global loop: once per kernel, between 1
    and MAX_THREADS, on the dialect that runs on CPU cores."""
    if not getattr(renderer, "supports_threads", False):
        raise OptError(f"{opt}: THREADS needs the C dialect; {type(renderer).__name__} runs work-items instead")
    if any(previous.op == "THREADS" for previous in optimized.opts):
        raise OptError(f"{opt}: the kernel has a THREADS already")
    if not 1 <= opt.amount <= MAX_THREADS:
        raise OptError(f"{opt}: the thread count must be between 1 and {MAX_THREADS}, got {opt.amount}")
    shape = optimized.kernel.full_shape
    outermost = next((axis for axis, kind in enumerate(optimized.kinds) if kind == GLOBAL and shape[axis] > 1), None)
    if outermost is None:
        raise OptError(f"{opt}: the kernel has no global loop to run on threads")
    if opt.axis != outermost:
        raise OptError(f"{opt}: THREADS applies to the outermost global loop, axis {outermost}")


def _check_work_group(optimized: OptimizedKernel, opt: Opt) -> None:
    """LOCAL and GROUP add work-items to a group: at most MAX_LOCAL of them in all. A kernel has at most
    one GROUP: its lanes split the reduce loops that all of the kernel's reduces run over (softmax's
    max, then its sum), and fold each reduce's partial results in turn."""
    work_items = optimized.expanded_size(LOCAL, GROUP) * opt.amount
    if work_items > MAX_LOCAL:
        raise OptError(f"{opt}: more than {MAX_LOCAL} work-items in a group ({work_items})")
    if opt.op != "GROUP":
        return
    if GROUP in optimized.kinds:
        raise OptError(f"{opt}: only one GROUP per kernel (the kernel has one already)")


def apply_opts(kernel: Kernel, opts, renderer) -> OptimizedKernel:
    """Apply opts in order to a (dim-merged) kernel; OptError names the first one refused."""
    optimized = initial(kernel)
    for opt in opts:
        optimized = apply_opt(optimized, opt, renderer)
    return optimized


# ---- the default heuristic ------------------------------------------------------------------------

def _probe(shape: tuple[int, ...]) -> list[Lin]:
    """A variable `p<axis>` over each axis of more than one position (0 for the others): the indices
    at which the heuristics read a view's offset and conditions."""
    return [var(f"p{axis}", 0, size - 1) if size > 1 else Lin.of(0) for axis, size in enumerate(shape)]


def _index_steps(offset, sample: list[int], axis: int, positions) -> set[int]:
    """How far the memory index `offset` moves from each of `positions` to the next along `axis`,
    the other axes at `sample`."""
    steps = set()
    for position in positions:
        here = {f"p{index}": value for index, value in enumerate(sample)}
        here[f"p{axis}"] = position
        steps.add(offset.evaluate({**here, f"p{axis}": position + 1}) - offset.evaluate(here))
    return steps


def load_strides(kernel: Kernel, nodes, ops=(Ops.LOAD,)) -> list[dict[int, int | None]]:
    """For each load (or other memory access of `ops`) over the full shape: how far its memory index
    moves per step along each axis (0 where the load does not move, so its value is reused along that
    axis; None where the step varies, as through a reshape of a padded window)."""
    shape = kernel.full_shape
    probe = _probe(shape)
    samples = [[0] * len(shape), [size // 2 for size in shape], [max(size - 2, 0) for size in shape]]
    strides = []
    for node in nodes:
        if node.op not in ops or node.arg[1].shape != shape:
            continue
        offset, _ = node.arg[1].index_and_valid(probe)
        found = {}
        for axis, size in enumerate(shape):
            if size == 1:
                continue
            steps = set().union(*(_index_steps(offset, sample, axis, (min(sample[axis], size - 2),)) for sample in samples))
            found[axis] = steps.pop() if len(steps) == 1 else None
        strides.append(found)
    return strides


def steps_along(tracker) -> list[set[int]]:
    """For each axis of a view, the steps its memory index takes along it, sampled at its first two
    steps at the start and in the middle of the other axes: one step, 0 or 1, where it walks the axis
    in order; one other step where it gathers; several where the step varies (a view valid at every
    other position: the phases of a strided window's gradient, interleaved)."""
    shape = tracker.shape
    offset, _ = tracker.index_and_valid(_probe(shape))
    samples = ([0] * len(shape), [size // 2 for size in shape])
    return [set().union(*(_index_steps(offset, sample, axis, range(min(size, 3) - 1)) for sample in samples))
            for axis, size in enumerate(shape)]


def _largest_divisor(size: int, choices: tuple[int, ...]) -> int | None:
    return next((amount for amount in choices if size % amount == 0 and size >= amount), None)


def _reduce_source(kernel: Kernel) -> KernelNode | None:
    return next((node.srcs[0] for node in kernel.ast.walk() if node.is_reduce), None)


# Vector widths of a convolution tile over plain loads, widest first: any width from 32 down to 4,
# so rows that no power of two divides (28, 14, 7 columns) get a tile too. conv2d 16x32x28x28 by
# 64x32x3x3: 7 ms with 28 x 8, 105 ms with no tile; 8x64x14x14 by 64x64x3x3: 3 ms with 14 x 8, 20 ms;
# 1x512x7x7 by 512x512x3x3 (ResNet-18's last stage, AVX2, one thread): 82 ms without, 11 ms with 7 x 4.
CONVOLUTION_VECTOR_CHOICES = tuple(range(32, 3, -1))
# ... after whole AVX-512 vectors where those divide the axis: 80 channels took 20 lanes, a vector and
# a quarter (Winograd's input transform of a detector's 80-channel head at 40x40: 0.58 ms, 0.23 as 16)
WHOLE_VECTORS_FIRST = (32, 16)


# Where the loads walk the vector axis only with a stride (a strided convolution: ResNet's and
# MobileNet's first layers, the first of each later stage), 16 or 8 columns come first, then any
# width from 32 down to 4, whatever the number of reduce axes (a 1x1 convolution has one). AVX2, one
# thread: 1x3x224x224 by 64x3x7x7, stride 2: 68 ms without a tile, 5.8 ms with 16 x 8, 7.6 ms with
# 28 x 4; 1x128x28x28 by 256x128x3x3, stride 2: 40 ms without, 5.8 ms with 14 x 4.
STRIDED_VECTOR_CHOICES = (16, 8) + tuple(width for width in CONVOLUTION_VECTOR_CHOICES if width not in (16, 8))
STRIDED_STEPS = (2, 3, 4)


def vector_pieces(width: int, lanes: int) -> int:
    """Vector registers that hold `width` consecutive floats: whole vectors, then the power-of-two
    pieces gcc packs the rest into (7 floats with 8 lanes: 4 + 2 + 1, three registers)."""
    return width // lanes + bin(width % lanes).count("1")


# Vector registers a matmul's register tile leaves for its operands: the right operand's vectors of a
# step and the left operand's broadcast value (AVX2's 16 registers: 12 for accumulators).
OPERAND_REGISTERS = 4


def _accumulators_fit(renderer, reserved: int = 0):
    """A test of (columns, rows) tiles: their accumulators fit in the renderer's vector registers
    (`simd_lanes`, `simd_registers`; any tile fits where a renderer has none), less `reserved` of them.
    Measured on AVX2
    (16 registers of 8 floats, one thread): matmul 1024x384x384 32 x 8 (32 registers) 32 GFLOP/s,
    32 x 4 and 16 x 8 (16) 50; conv2d 1x256x14x14 by 256x256x3x3 14 x 8 (24) 26, 14 x 4 (12) 35;
    1x64x56x56 by 64x64x3x3 28 x 8 31, 28 x 4 36."""
    lanes, registers = getattr(renderer, "simd_lanes", None), getattr(renderer, "simd_registers", None)
    if lanes is None:
        return lambda columns, rows: True
    return lambda columns, rows: vector_pieces(columns, lanes) * rows <= registers - reserved


def _has_masked_load(source: KernelNode) -> bool:
    """Whether some load reads through padding (a view with a mask: each element is tested)."""
    return any(node.op is Ops.LOAD and any(view.mask is not None for view in node.arg[1].views)
               for node in source.walk())


def matmul_tile(kernel: Kernel, renderer=None) -> list[Opt]:
    """Register tile for a reduce whose loads each stay put along some output axis (matmul,
    convolution): the output axis that some load walks contiguously (the vector axis) and an output
    axis that load does not move along (the row axis) are upcast, so every loaded value is used
    many times from registers. A matmul (one reduce axis) gets 8 rows (7 where 8 does not divide them
    and 7 does, MATMUL_ROW_CHOICES) by the widest of 32, 16, 8 (AVX-512: 32, 16, 24, 8)
    columns that fits beside them (with operands of LARGE_OPERAND_ELEMENTS or more, the widest
    vector first), else a convolution's width of 16 or more. A convolution
    (several reduce axes) whose loads are plain gets 8 output channels by 32 or 16 columns where they
    divide its rows, else the widest run up to 32 that does (28 for 28 or 56 columns, 14 for 14; a run alone, as a depthwise
    convolution's, takes whole vectors where they divide it, `_in_whole_vectors`), or, computed with its output
    channels last (nn/spatial.py), 16 output channels by 7 or 8 columns; one reading a padded input
    through its windows (masked loads) gets 16 columns by 16 output channels, which measured several
    times faster there than 32 x 8. Fewer rows where the accumulators would not fit in the
    renderer's vector registers (`_accumulators_fit`). Empty when the kernel is not like that."""
    source = _reduce_source(kernel)
    if source is None:
        return []
    globals_ = [axis for axis, size in enumerate(kernel.full_shape) if axis not in kernel.reduce_axes and size > 1]
    strides = load_strides(kernel, source.walk())
    if len(strides) < 2:
        return []
    fits = _accumulators_fit(renderer)
    if len(kernel.reduce_axes) == 1 and renderer is not None:
        rows, width = panel_tile(renderer)
        if reads_panels(kernel, strides, width):  # linalg's panels: their tile, whatever the row count
            tile = _vector_and_row_tile(kernel, globals_, strides, (width,), (rows, rows - 1))
            if len(tile) == 2:
                return tile
    if len(kernel.reduce_axes) == 1:
        # AVX-512: 24 columns (16 + 8 lanes) where 16 does not divide them, all three 8-lane groups in
        # one tile (2 threads, kernels alone: 3136x144 @ 144x24 0.21 -> 0.13 ms, 12544x96 @ 96x24 0.47
        # -> 0.28; MobileNetV2's 1x1 convolutions to 24 channels at 28x28, batch 16, 0.83 -> 0.44)
        vector_choices = (32, 16, 24, 8) if _wide_vectors(renderer) else (32, 16, 8)
        row_choices = MATMUL_ROW_CHOICES + ODD_ROW_CHOICES
        if not large_operands(kernel, strides):
            # the widest vector of which 2 rows of accumulators fit beside OPERAND_REGISTERS, then
            # as many rows as fit there (AVX2: 32 x 2, where 16 x 8 filled all 16 registers with
            # accumulators and spilled; 2 threads, kernel alone: attention's 8x12 heads of 128x32 @
            # 32x128 2.43 -> 1.79 ms, of 128x128 @ 128x32 1.89 -> 1.36; MobileNetV2's 1x1 convolutions,
            # 144 -> 24 channels at 56x56 1.29 -> 0.85, 32 -> 16 at 112x112 0.74 -> 0.54; a panel
            # product's 16 columns keep 6 rows. AVX-512: 32 x 8, as before)
            fits = _accumulators_fit(renderer, reserved=OPERAND_REGISTERS)
            vector_choices = tuple(columns for columns in vector_choices if fits(columns, 2)) or (8,)
        # output rows that no power of two divides take a convolution's widths down to 16 (a 1x1
        # convolution over 14x14 pixels, 196: MobileNetV2's 96 -> 576 channels, AVX2, 2 threads: 1.1 ms
        # untiled, 0.55 with 28 x 4); narrower ones keep linearize's loops (its 7x7 ones, 49 pixels:
        # 2-3x slower as 7 x 8)
        vector_choices += tuple(width for width in CONVOLUTION_VECTOR_CHOICES if width >= 16 and width not in vector_choices)
    elif _has_masked_load(source):
        vector_choices, row_choices = (16, 8), (16, 8, 4, 2)
    else:
        # 7 before 8: channels last, 16 output channels by 8 columns (16 accumulators) left no
        # register for the weight's vectors (AVX2, 2 threads, 1x64x56x56 by 64x64x3x3: 90 GFLOP/s
        # as 16 x 8, 112 as 16 x 7)
        vector_choices, row_choices = WHOLE_VECTORS_FIRST + CONVOLUTION_VECTOR_CHOICES, (7, 8, 6, 4, 2) + ODD_ROW_CHOICES
    tile = _vector_and_row_tile(kernel, globals_, strides, vector_choices, row_choices, fits)
    if len(tile) == 2 and len(kernel.reduce_axes) == 1:
        tile = _with_second_row_axis(kernel, globals_, strides, tile, row_choices, fits)
    if len(tile) == 2 and not _has_masked_load(source) and renderer is not None:
        group = _channel_group(kernel, globals_, strides, tile, renderer)
        if group is not None:
            tile = sorted(tile + [group], key=lambda opt: -opt.axis)
    if len(tile) == 1 and renderer is not None:
        tile = [_in_whole_vectors(kernel, tile[0], source.dtype, renderer)]
        group = _column_group(kernel, globals_, strides, tile[0], source.dtype, renderer)
        if group is not None:
            tile = sorted(tile + [group], key=lambda opt: -opt.axis)
    return tile


# A matmul tile's row axis taken whole with fewer rows than this takes a second row axis too.
FEW_TILE_ROWS = 4


def _with_second_row_axis(kernel: Kernel, globals_: list[int], strides: list[dict[int, int | None]],
                          tile: list[Opt], row_choices: tuple[int, ...], fits) -> list[Opt]:
    """`tile` (a vector and a row UPCAST) with a second row axis where its row axis is short and
    taken whole (else a wider vector), so more accumulators share each loaded value: Winograd's
    output transform, 2x2 outputs of each tile from 16 planes stored channels last (nn/spatial.py), whose two row axes
    are the output's 2 rows and 2 columns of a tile. 2 threads, AVX-512, kernels alone, as
    32 channels by 2 columns -> by 2 x 2: 64 channels at 56x56 0.188 -> 0.161 ms, 128 at 28x28
    0.085 -> 0.078, 192 at 28x28 0.131 -> 0.123, 256 at 14x14 0.052 -> 0.049."""
    for vector, row in (tile, tile[::-1]):
        walking = next((load for load in strides if load[vector.axis] == 1 and load[row.axis] == 0), None)
        if walking is not None:
            break
    else:
        return tile
    if kernel.full_shape[row.axis] != row.amount or row.amount >= FEW_TILE_ROWS:
        return tile
    for axis in reversed(globals_):
        if axis in (vector.axis, row.axis) or walking[axis] != 0:
            continue
        fitting = tuple(rows for rows in row_choices if fits(vector.amount, rows * row.amount))
        amount = _largest_divisor(kernel.full_shape[axis], fitting)
        if amount is not None:
            return sorted(tile + [Opt("UPCAST", axis, amount)], key=lambda opt: -opt.axis)
    # no second row axis: a wider vector, whose columns share each broadcast row value (a U-Net's last
    # convolution's weight gradient, 3 output channels by 288 window columns over 32768 positions,
    # 2 threads: 3 x 32 0.85 ms, 3 x 48 0.64)
    for amount in (2 * vector.amount, 3 * vector.amount // 2):
        if kernel.full_shape[vector.axis] % amount == 0 and fits(amount, row.amount) \
                and amount * row.amount <= MAX_UPCAST:
            return [Opt("UPCAST", vector.axis, amount) if opt is vector else opt for opt in tile]
    return tile


def reads_panels(kernel: Kernel, strides: list[dict[int, int | None]], width: int) -> bool:
    """Whether a matmul reads its right operand from panels `width` columns wide (linalg's
    `_panel_product`): some load walks the last output axis, of `width`, contiguously, moves by
    `width` per reduce step, and by one whole panel along another output axis that the other loads
    stay put along (in a batched matmul they move along the batch too)."""
    shape, (reduce_axis,) = kernel.full_shape, kernel.reduce_axes
    outputs = [axis for axis, size in enumerate(shape) if axis != reduce_axis and size > 1]
    if not outputs or shape[outputs[-1]] != width:
        return False
    last, panel = outputs[-1], width * shape[reduce_axis]
    for index, load in enumerate(strides):
        if load[last] != 1 or load[reduce_axis] != shape[last]:
            continue
        others = strides[:index] + strides[index + 1:]
        if any(step == panel and all(other[axis] == 0 for other in others) for axis, step in load.items()):
            return True
    return False


# Row counts a matmul's register tile takes (`matmul_tile`), most first. 7 for rows of 7x7 or 14x14
# positions (a stride-2 convolution's input gradient at batch 16, one thread: 196 x 256 by 256 x 1152
# per image as 7 x 32, 33 -> 18 ms; as 4 x 32 the fma units waited on too few accumulators).
MATMUL_ROW_CHOICES = (8, 7, 6, 4, 2)
# Where none of those divides a product's rows (an odd count), the most of these that does and fits:
# 13 for 13x13 positions (SqueezeNet's last 1x1 convolution, 169 positions by 512 -> 1000 channels,
# 2 threads: 8.8 ms one row at a time, 1.7 as 13 x 8), 17 for Inception-v3's 17x17 stage, 11 or 5
# for 55x55.
ODD_ROW_CHOICES = (17, 15, 13, 11, 9, 5, 3)


def panel_tile(renderer) -> tuple[int, int]:
    """(rows, columns) of the register tile of a matmul whose operands are packed into panels of
    that many rows and columns (tensor_methods/linalg.py `_panel_product`): two vectors of columns
    by the most rows whose accumulators fit beside those two vectors and a broadcast value. AVX2
    (16 registers of 8 floats): 6 x 16, where 8 x 16 spilled 3 accumulators (1024x384 @ 384x1536,
    2 threads: 95 -> 159 GFLOP/s of a 171 peak). AVX-512 (32 of 16): 8 x 32; against 6 x 16 there,
    operands packed included, one thread: ResNet-18's weight gradients at batch 16 (64x50176 @
    50176x576, 64x200704 @ 200704x147, 128x12544 @ 12544x1152) 97-100 -> 103-104, 83-86 -> 90-92,
    99-100 -> 103-104 GFLOP/s, 512x3136 @ 3136x2304 77-79 -> 87-93, BERT's 1024x384 @ 384x1536
    105-106 -> 111-112; 12 x 32 or 8 x 48 were slower on the weight gradients."""
    lanes, fits = getattr(renderer, "simd_lanes", 8), _accumulators_fit(renderer, reserved=3)
    return next((rows for rows in MATMUL_ROW_CHOICES if fits(2 * lanes, rows)), 2), 2 * lanes


# Vectors of channels by output columns in `channels_vector_tile`, the widest run of columns first.
CHANNEL_VECTOR_CHOICES = (4, 3, 2, 1)
CHANNEL_COLUMN_CHOICES = (8, 7, 4, 2)


def channels_vector_tile(kernel: Kernel, renderer) -> list[Opt]:
    """Register tile for a convolution whose every load walks the last output axis contiguously: a
    depthwise convolution computed with its channels last (nn/spatial.py), where each output channel
    reads only its own input channel. That axis is the vector, in whole vectors of the renderer's
    lanes, by a run of the output axis before it (columns), along which the weight stays put, so
    each step loads a weight vector once for the run. Empty when the kernel is not like that."""
    source = _reduce_source(kernel)
    if source is None or len(kernel.reduce_axes) < 2 or not getattr(renderer, "simd_lanes", None):
        return []
    globals_ = [axis for axis, size in enumerate(kernel.full_shape) if axis not in kernel.reduce_axes and size > 1]
    strides = load_strides(kernel, source.walk())
    if len(globals_) < 2 or len(strides) < 2 or any(load.get(globals_[-1]) != 1 for load in strides):
        return []
    channels, column_axis = globals_[-1], globals_[-2]
    lanes = renderer.vector_width(source.dtype, kernel.full_shape[channels])
    if lanes <= 1 or not any(load.get(column_axis) == 0 for load in strides):
        return []
    fits = _accumulators_fit(renderer, reserved=OPERAND_REGISTERS)
    for columns in CHANNEL_COLUMN_CHOICES:
        for vectors in CHANNEL_VECTOR_CHOICES:
            if kernel.full_shape[column_axis] % columns == 0 and kernel.full_shape[channels] % (vectors * lanes) == 0 \
                    and fits(vectors * lanes, columns) and vectors * lanes * columns <= MAX_UPCAST:
                return [Opt("UPCAST", channels, vectors * lanes), Opt("UPCAST", column_axis, columns)]
    return [Opt("UPCAST", channels, lanes)] + _whole_window(kernel, globals_[:-1], strides, lanes, fits)


def _whole_window(kernel: Kernel, globals_: list[int], strides: list[dict], lanes: int, fits) -> list[Opt]:
    """UPCASTs of the last two axes before the channels along which some load stays put, whole, or
    of the last alone: a depthwise convolution's weight gradient, whose outputs are the taps of its
    window, the output gradient the load that stays put. Each step then reads the gradient once for
    every tap, and the input's rows once for the taps along them, where each tap's pass over the
    batch read both again (MobileNetV2's 144 channels at 28x28, batch 16, 3x3, 2 threads: 1.27 ->
    0.58 ms; 32 channels at 56x56 1.01 -> 0.46)."""
    window = [axis for axis in globals_ if any(load.get(axis) == 0 for load in strides)][-2:]
    for axes in (window, window[-1:]):
        taps = math.prod(kernel.full_shape[axis] for axis in axes)
        if axes and fits(lanes, taps) and lanes * taps <= MAX_UPCAST:
            return [Opt("UPCAST", axis, kernel.full_shape[axis]) for axis in reversed(axes)]
    return []


# Vectors of channels a max pool computed channels last takes in one step (`pool_vector_tile`).
POOL_VECTORS = 4


def _padded_window_sum(reduce: KernelNode) -> bool:
    """Whether a SUM adds the values of one load that reads through padding (an average pool's
    padded windows), not products of two."""
    source = reduce.srcs[0]
    return sum(node.op is Ops.LOAD for node in source.walk()) == 1 and _has_masked_load(source)


def pool_vector_tile(kernel: Kernel, renderer) -> list[Opt]:
    """A max over windows whose every load walks the last output axis contiguously (a max pool
    computed channels last, nn/spatial.py `_channels_last_pool`): that axis upcast in whole
    vectors, up to POOL_VECTORS, so each window step is a vector load and a vector max into
    accumulators held in registers (the C renderer's vector MAX_REDUCE). Without it, linearize's
    loop over an array of accumulators loads and stores each one at every step. ResNet-18's pool
    (64 channels, 112x112 -> 56x56), one thread, kernel alone: 0.45 -> 0.28 ms. So too a sum over
    padded windows (an average pool with padding): gcc's loop vectorizer is kept out of kernels
    with padding (renderer/c.py), so the accumulator array's loop ran one element at a time
    (Inception-v3's 3x3 pools over 768 channels at 17x17, 2 threads: 0.35 -> 0.02 ms). Sums without
    padding keep the array, which gcc vectorizes (a column sum of a realized activation measured
    the same or 5-15% faster so)."""
    reduces = [node for node in kernel.ast.walk() if node.is_reduce]
    if len(reduces) != 1 or len(kernel.reduce_axes) < 2:
        return []
    if reduces[0].op is not Ops.MAX_REDUCE and not (reduces[0].op is Ops.SUM and _padded_window_sum(reduces[0])):
        return []
    globals_ = [axis for axis, size in enumerate(kernel.full_shape) if axis not in kernel.reduce_axes and size > 1]
    strides = load_strides(kernel, reduces[0].srcs[0].walk())
    # the last such axis; an earlier one where the output is stored another way (a pool of an NCHW
    # view of channels-last sums: an int8 digits CNN's, batch 200, 1.12 -> 0.70 ms)
    channels = next((axis for axis in reversed(globals_) if strides and all(load.get(axis) == 1 for load in strides)),
                    None)
    if channels is None:
        return []
    lanes = renderer.vector_width(reduces[0].dtype, kernel.full_shape[channels])
    if lanes <= 1:
        return []
    vectors = next(count for count in range(POOL_VECTORS, 0, -1) if kernel.full_shape[channels] % (count * lanes) == 0)
    return [Opt("UPCAST", channels, vectors * lanes)]


# Vector registers the columns of a tile without rows may fill (`_in_whole_vectors`).
LONE_VECTOR_REGISTERS = 8


def _column_group(kernel: Kernel, globals_: list[int], strides: list[dict[int, int | None]], upcast: Opt, dtype,
                  renderer) -> Opt | None:
    """For a tile of columns alone that spans its whole axis: UPCAST of the output axis before it
    along which the load walking the columns moves on while another load stays put (a convolution
    computed channels last, its output channels in groups of 16: the groups), by the most that
    divides it within LONE_VECTOR_REGISTERS vectors, so each value of the other load is used for
    every group. Inception-v3's stem, 3 -> 32 channels to 149x149 positions (no row count divides
    149), 2 threads, kernel alone: 4.2 ms as 16 channels, 0.57 as both groups of 16."""
    size = kernel.full_shape[upcast.axis]
    lanes = renderer.vector_width(dtype, size)
    if upcast.amount != size or lanes <= 1:
        return None
    axis = _group_axis(globals_, strides, upcast.axis)
    if axis is None:
        return None
    limit = LONE_VECTOR_REGISTERS * lanes // upcast.amount
    amount = next((count for count in range(limit, 1, -1) if kernel.full_shape[axis] % count == 0), None)
    return None if amount is None else Opt("UPCAST", axis, amount)


def _group_axis(globals_: list[int], strides: list[dict[int, int | None]], vector_axis: int,
                skip: tuple[int, ...] = ()) -> int | None:
    """The last output axis (not `vector_axis`, not in `skip`) along which every load walking the
    vector axis moves on while some load that stays put along the vector stays put along it too: a
    convolution's groups of output channels computed channels last, whose weight moves with them
    and whose input does not."""
    walking = [load for load in strides if load.get(vector_axis) == 1]
    others = [load for load in strides if load.get(vector_axis) == 0]
    if not walking or not others:
        return None
    return next((axis for axis in reversed(globals_) if axis != vector_axis and axis not in skip
                 and all(load.get(axis) not in (0, None) for load in walking)
                 and any(load.get(axis) == 0 for load in others)), None)


def _channel_group(kernel: Kernel, globals_: list[int], strides: list[dict[int, int | None]], tile: list[Opt],
                   renderer) -> Opt | None:
    """For a convolution's tile of a vector of output channels by a run of columns: UPCAST of the
    output axis along which the load walking the vector moves on while the other stays put (the
    groups of 16 output channels of one computed channels last), by the most that divides it whose
    accumulators and weight vectors, with the broadcast value, fit in the vector registers, so each
    input value feeds that many more fmas. With AVX-512's 32 registers, 16 channels by 7 columns
    (7 accumulators, too few to hide the fma's latency) become 2 groups by 7 columns, kernel alone,
    2 threads: Inception-v3's 5x5 convolutions, 48 -> 64 channels at 35x35, 0.85-1.11 -> 0.65-0.85
    ms; ResNet's 3x3 over 512 channels at 7x7 1.9-2.5 -> 1.8-2.2. AVX2's 16 channels are two vectors
    already, whose 14 accumulators leave no room. A 1x1 convolution (one reduce axis) takes groups only
    where its vector is narrower than the renderer's (channels in panels of 8 on AVX-512, as 24 output
    channels are): MobileNetV2's training step, 144 -> 24 channels at 28x28 as 8 channels by 8
    positions, 0.78 -> 0.45 ms alone with the 3 groups."""
    lanes, registers = getattr(renderer, "simd_lanes", None), getattr(renderer, "simd_registers", None)
    vector = next((opt for opt in tile if any(load.get(opt.axis) == 1 for load in strides)), None)
    if lanes is None or vector is None or (len(kernel.reduce_axes) == 1 and vector.amount >= lanes):
        return None
    row = next(opt for opt in tile if opt is not vector)
    axis = _group_axis(globals_, strides, vector.axis, skip=(row.axis,))
    if axis is None:
        return None
    pieces = vector_pieces(vector.amount, lanes)
    counts = [count for count in range(2, kernel.full_shape[axis] + 1) if kernel.full_shape[axis] % count == 0
              and pieces * count * (row.amount + 1) + 1 <= registers and vector.amount * row.amount * count <= MAX_UPCAST]
    return Opt("UPCAST", axis, max(counts)) if counts else None


def _in_whole_vectors(kernel: Kernel, upcast: Opt, dtype, renderer) -> Opt:
    """A tile of columns alone (a depthwise convolution: no other output axis reuses a load) as the
    most whole vectors of the renderer's lanes, up to LONE_VECTOR_REGISTERS, that divide the axis,
    which C writes as vector types; else as it was. AVX2, 2 threads, MobileNetV2's depthwise
    convolutions with batch norm and ReLU6, kernel alone (ms, 28 or 8 columns -> 56): 32 channels at
    112x112 0.36 -> 0.19, 144 at 56x56 0.38 -> 0.24, 96 at 56x56 stride 2 0.50 -> 0.40-0.45."""
    size = kernel.full_shape[upcast.axis]
    lanes = renderer.vector_width(dtype, size)
    if lanes <= 1:
        return upcast
    for vectors in range(LONE_VECTOR_REGISTERS, 0, -1):
        if size % (vectors * lanes) == 0:
            return Opt("UPCAST", upcast.axis, vectors * lanes)
    return upcast


# A matmul whose largest operand has fewer float elements than this (8 MiB of float32) gets its
# register tile alone, 8 rows by the widest vector that fits beside them: PANEL and BLOCK keep blocks
# of an operand in cache while the tiles reuse them, which pays only when the operands are far larger
# than the caches. Measured on AVX2 (2 threads, 1 MiB L2, 32 MiB L3), kernel alone, GFLOP/s:
# 1024x1536 @ 1536x384 in panels with a bias and residual epilogue (BERT's FFN) 56 with 32 x 4, PANEL
# and BLOCK 256, 82-89 with 16 x 8 alone; 1024x384 @ 384x384 51 with 32 x 4 and BLOCK 64, 75 with
# 16 x 8 alone; 1024^3 83 -> 96; but 2048^3 78 with PANEL and BLOCK, 30-38 without. On AVX-512 the
# row tiles of such a matmul take a PANEL all the same where they share a large operand (wide_vector_panel).
LARGE_OPERAND_ELEMENTS = 1 << 21


def large_operands(kernel: Kernel, strides: list[dict[int, int | None]]) -> bool:
    """Whether some load reads at least LARGE_OPERAND_ELEMENTS distinct positions (the product of
    the axes it moves along)."""
    shape = kernel.full_shape
    return any(math.prod(shape[axis] for axis, step in load.items() if step != 0) >= LARGE_OPERAND_ELEMENTS
               for load in strides)


def reused_across_rows(kernel: Kernel, strides: list[dict[int, int | None]], vector_axis: int) -> int:
    """Elements of the operand a register tile's rows share, the one moving along its vector axis, in
    one matmul of a batch (leaving out the axes every load moves along). Where it is far larger than
    the caches, every row tile reads it from memory again unless the reduce runs in blocks: one
    thread, 32x4096 @ 4096x512 2.9 -> 2.2 ms in blocks of 64 steps. Where it fits, the blocks only
    cost: Winograd's 16 matmuls of 784x256 @ 256x256 (ResNet-18's 14x14 stage at batch 16) 16.5 ->
    22.5 ms, 4 of 3136x1024 @ 1024x64 15.3 -> 22.7, though their left operands are large."""
    return max((_positions_in_one_matmul(kernel, strides, load) for load in strides if load[vector_axis] != 0), default=0)


def _positions_in_one_matmul(kernel: Kernel, strides: list[dict[int, int | None]], load: dict[int, int | None]) -> int:
    """Elements `load` (one of `strides`) reads in one matmul of a batch: the sizes of the axes it
    moves along multiplied, leaving out the output axes every load moves along (the batch)."""
    shape = kernel.full_shape
    batch = {axis for axis in range(len(shape))
             if axis not in kernel.reduce_axes and all(other.get(axis, 0) != 0 for other in strides)}
    return math.prod(shape[axis] for axis, step in load.items() if step != 0 and axis not in batch)


def _vector_and_row_tile(kernel: Kernel, globals_: list[int], strides: list[dict[int, int | None]],
                         vector_choices: tuple[int, ...], row_choices: tuple[int, ...],
                         fits=lambda columns, rows: True,
                         strided_choices: tuple[int, ...] = STRIDED_VECTOR_CHOICES) -> list[Opt]:
    """UPCAST of the last output axis that some load walks contiguously (or else with a small stride,
    by `strided_choices`) while another load stays put along it (by the first of
    `vector_choices` that divides it), and of an output axis that walking load stays put along (by
    the first of `row_choices` that divides it and `fits` with the vector); empty when no axis is
    like that."""
    reused = {axis for axis in globals_ if any(load[axis] == 0 for load in strides)}
    for vector_axis in reversed(globals_):
        walking = [load for load in strides if load[vector_axis] == 1]
        choices = vector_choices
        if not walking:
            walking = [load for load in strides if load[vector_axis] in STRIDED_STEPS]
            choices = strided_choices
        if vector_axis not in reused or not walking:
            continue
        if any(step is not None and step not in (0, 1) + STRIDED_STEPS for load in strides
               for step in (load[vector_axis],)):
            # another load gathers along it (a group norm's weight gradient, its channels the axis its
            # small per-channel factor walks, its activations 4096 apart: 5.7 ms, 0.4 untiled)
            continue
        vector_amount = _largest_divisor(kernel.full_shape[vector_axis], choices)
        if vector_amount is None:
            continue
        row_axes = [axis for axis in reversed(globals_) if axis != vector_axis and walking[0][axis] == 0]
        for row_axis in row_axes:
            fitting = tuple(rows for rows in row_choices if fits(vector_amount, rows))
            row_amount = _largest_divisor(kernel.full_shape[row_axis], fitting)
            if row_amount is not None:
                # the later axis is split first, so the earlier one keeps its number
                tile = [Opt("UPCAST", vector_axis, vector_amount), Opt("UPCAST", row_axis, row_amount)]
                return sorted(tile, key=lambda opt: -opt.axis)
        return [Opt("UPCAST", vector_axis, vector_amount)]
    return []


# The longest axis that `transposed_read_panel` moves innermost: one pass of it stores into that many
# cache lines of each output, which should stay in L1 for the next passes (BERT's keys transposed for
# QK^T, 384 rows of 128 tokens, once ran 0.34 -> 0.66 ms so; allowed again since, the BERT encoder
# measured the same, 252-254 against 255-261 ms, one thread). 512 takes ResNet-18's last stage: 512
# channels at 7x7, batch 16, one thread, its batch norm and relu into the next convolution's padded
# input 1.73 -> 0.75-0.91 ms (ResNet-18 b16 jitted 567-574 -> 563 ms).
TRANSPOSED_READ_MAX = 512
# A matmul operand packed into panels of at most ROW_PANEL_MAX rows (linalg's 6), its rows up to
# ROW_PANEL_READ_MAX long, takes a cache line of its rows per pass too (`transposed_read_panel`).
ROW_PANEL_MAX, ROW_PANEL_READ_MAX = 8, 1024
# Memory pages one pass of that loop may touch at a page or more apart each (the L1 data TLB's
# entries on the CPUs measured; beyond them every access of the pass is a TLB miss).
PAGE_BYTES, PANEL_PAGES = 4096, 64
# A transposed read of at least this many elements whose axis and stored axis are whole cache lines
# is a tile of lines (line x line: 16 x 16 float32; 16 x 8 for a computed value) instead of a PANEL. Its 256 values gcc compiles
# in 0.15-0.3 s where the PANEL's loop takes 0.04: smaller copies (a weight packed once, an inference
# at batch 1) keep the PANEL.
TRANSPOSED_TILE_MIN_ELEMENTS = 1 << 20
# A read along an axis too long for a PANEL is a tile of lines where it reads this many rows or more
# that share L1 sets (`_set_aliased_streams`): 32 to 80 channels of 160x160 back to channels last,
# 0.25-2.0 ms in a plain loop, 0.13-0.38 as tiles. Without aliasing the plain loop won (16 x 64
# channels of 56x56 in ResNet-18's training step, 0.77 ms; 1.08 as tiles).
ALIASED_STREAMS_MIN = 32
CACHE_LINE_BYTES = 64
# An output row this short, gathered (a panel of a weight gradient's window columns, each from its own
# channel and kernel position), is written whole in each step of `transposed_read_panel`'s pass: a
# vector store of values that each come from their own input stream.
STORED_ROW_UPCAST_MAX = 32
# The steps of a read along its input that `transposed_read_panel` follows: contiguous, and the
# windows of a stride-2 convolution (its weight gradient packs them).
READ_STEPS = (1, 2)
# Steps along the stored axis that each block of `_page_aliased_block` covers: the gathered reads'
# lines (this many per read) stay in L1 from one step of the panel's loop to the next.
TRANSPOSED_STORE_BLOCK = 128
# Rows of a source this large are not in cache when the next panel's pass reads them again
# (`source_order_panel`): beyond the 32 MiB L3 of the CPUs measured.
SOURCE_ORDER_MIN_BYTES = 32 << 20


def contiguous_run(kernel: Kernel, access: KernelNode, axis: int, step: int = 1) -> int:
    """How many steps along `axis` an access walking it `step` elements at a time (contiguously, or
    through a stride's windows) takes before its index jumps (the other axes at 0): a merged axis
    of several source dims (batch, rows and columns of a padded window, or NCHW planes) is
    contiguous only along its innermost dim. The whole axis when it never jumps; a jump is looked
    for at the axis's divisors, where such dims end."""
    shape = kernel.full_shape
    probe = _probe(shape)
    offset, _ = access.arg[1].index_and_valid(probe)
    at = {f"p{index}": 0 for index, size in enumerate(shape) if size > 1}

    def index(position: int) -> int:
        at[f"p{axis}"] = position
        return offset.evaluate(at)
    for run in range(2, shape[axis]):
        if shape[axis] % run == 0 and index(run) - index(run - 1) != step:
            return run
    return shape[axis]


def _memory_accesses(kernel: Kernel) -> tuple[list[KernelNode], list[dict[int, int | None]]]:
    """The loads and stores over a kernel's full shape, and each one's steps (`load_strides`)."""
    accesses = [node for node in kernel.ast.walk() if node.op in (Ops.LOAD, Ops.STORE) and node.arg[1].shape == kernel.full_shape]
    return accesses, load_strides(kernel, accesses, ops=(Ops.LOAD, Ops.STORE))


def _set_aliased_streams(shape: tuple[int, ...], stored: int, steps: dict, access: KernelNode) -> bool:
    """Whether a transposed read walks at least ALIASED_STREAMS_MIN input streams a multiple of a page
    apart along the stored axis: each step of a plain loop then reads lines of one L1 set, more of
    them than its ways (NCHW planes of 160x160, 100 KiB apart)."""
    step = steps.get(stored)
    return shape[stored] >= ALIASED_STREAMS_MIN and bool(step) and step * access.dtype.itemsize % PAGE_BYTES == 0


def transposed_read_panel(kernel: Kernel) -> list[Opt]:
    """For a kernel without a reduce that reads an input across its rows (a channels-last
    convolution's output, read back in NCHW order by its batch norm and relu; a matmul operand
    packed into panels): a PANEL of the axis that input walks contiguously, so that loop runs
    innermost. Each pass then reads along the input and stores one element into each output row it
    crosses, whose lines fill over the next passes while they stay in cache; in the stored order
    every element read came from another cache line.

    How long a pass is: where the axis is contiguous only in runs (several source dims merged: the
    batch, rows and columns of a padded window that a convolution's weight gradient packs, or the
    planes of NCHW channels), one run. ResNet-18's training step at batch 16, kernels alone, AVX2,
    2 threads: the 3x3 windows of 64 channels at 56x56 packed into panels of 16, 63-66 -> 16.5 ms
    (20 with passes of 16), at 28x28 37 -> 7.6 ms, 14x14 17 -> 3.6, 7x7 8.3 -> 2.2; an activation
    packed into panels of 6, 5.5 -> 2.3 ms. Where the axis is contiguous whole, one cache line's
    worth (16 float32; the whole axis, at most TRANSPOSED_READ_MAX, when no line divides it; a line also for
    a matmul operand packed into panels of at most ROW_PANEL_MAX rows, rows up to ROW_PANEL_READ_MAX long). Not
    when the pass would touch more than PANEL_PAGES pages a page or more apart (each output row,
    and each input read in the stored order, is one such page per step when its rows are 4 KiB or
    more apart). An axis longer than TRANSPOSED_READ_MAX (a line dividing it) gets the plain loop,
    which a PANEL of a line there ran slower than, unless its rows share L1 sets
    (`_set_aliased_streams`): then the tile of lines below. ResNet-18 at batch 1 (its batch norms' per-channel values stored by the
    scheduler): the first batch norm and relu, 64 channels at 112x112 into the max pool's padded
    input, 1.37 with the whole axis -> 0.89 ms; 64 channels at 56x56 with an NCHW residual (two
    pages per channel) 0.93 without a PANEL -> 0.33 ms, and two convolutions' outputs added 1.01 ->
    0.38 ms. Over ResNet-18's nine such kernels at batch 1, panels of 16 took 2.29 ms, of 32 2.55
    ms; at batch 16 panels of 8 or the whole 64 channels were slower than 16 in each.

    Where the pass is the whole axis (longer than a line, which does not divide it) and a line divides
    the stored axis, that axis is upcast by a line too, so each step stores whole lines, each gathered
    from a line's worth of input streams: the pass's lines, a stored row apart, need not stay in L1,
    where rows a multiple of 1 KiB apart share a few of its sets (Inception-v3's 768 channels at
    17x17 back to channels last, 3 KiB apart, 0.33 -> 0.05 ms; 16 x 256 channels at 14x14 into panels
    of 16, 0.32 -> 0.21; RegNetY-400MF's 440 channels at 16x16, 0.15 -> 0.01; 16 x 64 channels at 7x7
    lost, 0.010 -> 0.013 ms). Such a pass may be longer than TRANSPOSED_READ_MAX, and its rows pages
    apart: 192 channels at 35x35 0.097 -> 0.038 ms, 1024 at 14x14 0.077 -> 0.051. Stored rows that
    only half lines divide (a classifier's 1000 outputs) take a whole pass storing half lines, whatever
    divides the read axis: MobileNetV2's 1000 x 1280 weight transposed in its training step 0.97 ->
    0.24 ms (no PANEL before: 1280 is past TRANSPOSED_READ_MAX), ResNet-18's 1000 x 512 0.20 -> 0.12
    (a pass of 16 rows before).

    A stride-2 window's run is followed too, two elements a step. Where the stored row is at most
    STORED_ROW_UPCAST_MAX values gathered from as many input streams (a panel of a weight gradient's
    window columns), it is upcast as well, so each step of the pass stores whole vectors: AVX-512,
    one thread, 64 channels at 56x56 into panels of 32, 19.6 -> 5.3 ms; the stride-2 windows at 28x28,
    which took no PANEL before, 16.3 -> 1.8 ms.

    Where gcc's loop vectorizer is kept out of the kernel (a load only a select reads, or padding:
    `_scalar_unless_tiled`), the pass's loop would run one element at a time: a pass of whole vectors
    (8 to 32 elements) is upcast instead of moved innermost, so each step is a vector. ResNet-18's
    training step at batch 16, 2 threads, its batch norms' gradients through ReLU read back in NCHW
    order: 256 channels at 14x14 into the weight gradient's rows 2.4 -> 0.7 ms, 512 at 7x7 1.1 -> 0.4,
    the stem's padded copy 4.8 -> 4.0; one of 256 at 14x14 lost, 0.35 -> 0.45.

    Of several such reads, the one whose contiguous axis is outermost sets the PANEL: it gathers
    across the most loops of the stored order. ResNet-18's residual sums at batch 16 read a
    Winograd output (measured when its tile rows were contiguous, just outside the stored axis; it
    is channels last now) beside a channels-last downsampling: the 28x28 stage's kernel alone, one
    thread, 6.9 ms with the tile rows innermost, 3.3 ms with 16 channels; the model at batch 16,
    one thread, jitted, 501/497 -> 480/477 ms."""
    shape = kernel.full_shape
    accesses, strides = _memory_accesses(kernel)
    stored = [axis for access, steps in zip(accesses, strides) if access.op is Ops.STORE
              for axis, step in steps.items() if step == 1]
    if not stored:
        return []
    candidates = []
    for access, steps in zip(accesses, strides):
        across = sorted((step, axis) for axis, step in steps.items() if step in READ_STEPS and axis < stored[0])
        if access.op is not Ops.LOAD or not across or steps.get(stored[0]) in (0, 1) or shape[across[0][1]] < 8:
            continue
        candidates.append((across[0][1], [axis for _, axis in across], access, steps))
    # the read that walks an outer axis first: it gathers across the most loops of the stored order
    for _, across, access, steps in sorted(candidates, key=lambda candidate: candidate[0]):
        run = contiguous_run(kernel, access, across[0], steps[across[0]])
        line = CACHE_LINE_BYTES // access.dtype.itemsize
        stores = _whole_pass_stores(shape[across[0]], shape[stored[0]], line)
        tile_only = False
        if 4 <= run < shape[across[0]]:
            amount = run
        elif stores is not None:  # the whole axis in one pass, each step storing whole lines (or halves)
            return [Opt("PANEL", across[0], shape[across[0]]), Opt("UPCAST", stored[0], stores)]
        elif shape[across[0]] % line == 0 and (shape[across[0]] <= TRANSPOSED_READ_MAX
                                                or (shape[stored[0]] <= ROW_PANEL_MAX and shape[across[0]] <= ROW_PANEL_READ_MAX)):
            amount = line
        elif shape[across[0]] <= TRANSPOSED_READ_MAX:
            amount = shape[across[0]]
        elif shape[across[0]] % line == 0:  # a long axis: a tile of lines or nothing (see the docstring)
            amount, tile_only = line, True
        else:
            continue
        paged = sum(abs(steps.get(across[0]) or 0) * other.dtype.itemsize >= PAGE_BYTES
                    for other, steps in zip(accesses, strides))
        if amount * paged <= PANEL_PAGES:
            panel = Opt("PANEL", across[0], amount)
            if shape[stored[0]] <= STORED_ROW_UPCAST_MAX and steps.get(stored[0], 0) is None:
                return [panel, Opt("UPCAST", stored[0], shape[stored[0]])]
            if amount == line and steps[across[0]] == 1 and shape[across[0]] % line == 0 \
                    and shape[stored[0]] % line == 0 \
                    and (_set_aliased_streams(shape, stored[0], steps, access) if tile_only
                         else math.prod(shape) >= TRANSPOSED_TILE_MIN_ELEMENTS) \
                    and line * line // 2 <= MAX_UPCAST:  # not bytes: a 64 x 64 tile is too many outputs
                # a plain copy's lanes a whole line; a computed value's half of one (its loads' vectors spill)
                loads = sum(node.op is Ops.LOAD for node in kernel.ast.walk())
                lanes = line if loads == 1 and line * line <= MAX_UPCAST else line // 2
                return [Opt("UPCAST", across[0], line), Opt("UPCAST", stored[0] + 1, lanes)]
            if tile_only:
                continue
            if amount <= STORED_ROW_UPCAST_MAX and amount % 8 == 0 and _scalar_unless_tiled(kernel):
                # whole vectors along the pass instead of a loop gcc would leave scalar
                return [Opt("UPCAST", across[0], amount)]
            return [panel] + _page_aliased_block(shape, accesses, strides, across[0], stored[0])
    return []


def _whole_pass_stores(length: int, stored: int, line: int) -> int | None:
    """For `transposed_read_panel`'s read along an axis of `length` (longer than a line) into a stored
    axis of `stored`: the stored axis's upcast for a pass along the whole read axis, each step storing
    whole lines, where no line divides the read axis and one divides the stored axis; half a line where
    only half of one divides the stored axis. None where a pass of lines serves (or no pass at all)."""
    if length <= line:
        return None
    if stored % line == 0:
        return line if length % line else None
    return line // 2 if stored % (line // 2) == 0 else None


def _scalar_unless_tiled(kernel: Kernel) -> bool:
    """Whether gcc's loop vectorizer is kept out of a kernel (renderer/c.py MASKED_LOAD_ATTRIBUTE): a
    load only a select reads, or a load through padding. Its loops then run one element at a time
    unless opts expand them into vector copies."""
    return has_select_only_load(kernel) or _has_masked_load(kernel.ast)


def _page_aliased_block(shape, accesses, strides, panel_axis: int, stored_axis: int) -> list[Opt]:
    """A second PANEL for `transposed_read_panel` where the pass's stores (or the loads in their
    order) lie a multiple of PAGE_BYTES apart, planes of 32x32 or 64x64 float32 channels: then they
    all fall in one set of the L1 cache, whose ways they outnumber, and every step evicts the lines
    the last one filled. Blocks of up to TRANSPOSED_STORE_BLOCK steps of the stored axis go inside
    the panel's loop instead, so the stores run along their rows and the reads gather from lines
    that stay in cache. A channels-last gradient plus an NCHW one, 8x64x32x32, 0.49 -> 0.12 ms;
    8x128x32x32 with a batch norm 4.2 -> 0.46 ms; at 28x28 and 56x56 (no aliasing) the plain PANEL
    ran 1.5-2.5x faster than blocks, so they keep it."""
    aliased = any(steps.get(stored_axis) == 1 and steps.get(panel_axis)
                  and steps[panel_axis] * access.dtype.itemsize % PAGE_BYTES == 0
                  for access, steps in zip(accesses, strides))
    block = next((size for size in range(TRANSPOSED_STORE_BLOCK, TRANSPOSED_STORE_BLOCK // 8, -1)
                  if shape[stored_axis] % size == 0), None)
    return [Opt("PANEL", stored_axis, block)] if aliased and block is not None and block < shape[stored_axis] else []


def source_order_panel(kernel: Kernel) -> list[Opt]:
    """For a copy of runs of rows into panels (a matmul operand packed into panels of columns:
    (columns / width, k, width) from a (k, columns) source, the last axis contiguous in both) whose
    rows span SOURCE_ORDER_MIN_BYTES or more: a PANEL of the whole panel axis, so it loops inside the
    row axis and the source is read once, in its own order. In the stored order each panel's pass
    reads a run of every row from memory again. ResNet-18's training step at batch 16, its stem's
    weight gradient (200704 rows of 147 window values into 5 panels of 32), one thread: 27 -> 8.2
    ms (118 MB of rows). Rows that stay in cache between passes are read faster in the stored order:
    its 7x7 stage at batch 16, 256 rows of 784 into 25 panels (800 KB), 1.7 against 15.5 ms with the
    PANEL; 12544 rows of 128 into 16 panels of 8 (6.4 MB), 1.4 against 4.7 ms. A row's panels that
    fit one upcast are upcast instead (the same order, as vector copies)."""
    shape = kernel.full_shape
    accesses, strides = _memory_accesses(kernel)
    loads = [steps for access, steps in zip(accesses, strides) if access.op is Ops.LOAD]
    stores = [(access, steps) for access, steps in zip(accesses, strides) if access.op is Ops.STORE]
    last = len(shape) - 1
    if len(stores) != 1 or not loads or any(steps.get(last) != 1 for steps in loads + [stores[0][1]]):
        return []
    store, store_steps = stores[0]
    moving = [axis for axis in range(last) if shape[axis] > 1]
    for outer, inner in zip(moving, moving[1:]):
        # the panel axis continues each load's contiguous run: panel p holds the columns after p - 1's
        if all(steps.get(outer) == shape[last] and (steps.get(inner) or 0) > steps[outer] for steps in loads) \
                and (store_steps.get(outer) or 0) > (store_steps.get(inner) or 0) > 0 \
                and max(steps[inner] for steps in loads) * shape[inner] * store.dtype.itemsize >= SOURCE_ORDER_MIN_BYTES:
            paged = store_steps[outer] * store.dtype.itemsize >= PAGE_BYTES
            if shape[outer] * paged > PANEL_PAGES:
                return []
            if shape[outer] * shape[last] <= MAX_UPCAST:
                # every panel of a row as vector copies, in the same order: the padding of the last
                # panel (147 window values in 5 panels of 32) decided per copy, not tested per element
                # (ResNet-18's stem at batch 16, 2 threads: 7.6 -> 5.7 ms alone, 7.5 -> 3.8 in its step)
                return [Opt("UPCAST", last, shape[last]), Opt("UPCAST", outer, shape[outer])]
            return [Opt("PANEL", outer, shape[outer])]
    return []


def _cheap(node: KernelNode) -> bool:
    """Cheap enough to copy many times over in an unrolled body: a load, a constant, a bounds test
    or an elementwise op of cost 1 (ops/table.py). A body with exp2, log2, sin or a division keeps
    its plain loop, which the C compiler vectorizes whole."""
    return node.op in (Ops.LOAD, Ops.CONST, Ops.VALID) or (node.op.is_elementwise and node.op.cost == 1)


def row_reduce_tile(kernel: Kernel) -> list[Opt]:
    """For a cheap reduce whose loads walk its single reduce axis contiguously: unrolled steps
    into independent accumulators (they fill vector registers; max cannot be a SIMD reduction in
    C), and several outputs at once. With one walking load (row sums, row max, a variance) that is
    8 rows by 8 steps, so eight streams run in parallel; with two, each reused along its own output
    axis (a matmul with the right operand transposed, as in nn.Linear), a 4 x 4 tile by 8 steps."""
    source = _reduce_source(kernel)
    if source is None or len(kernel.reduce_axes) != 1 or not all(map(_cheap, source.walk())):
        return []
    reduce_axis = kernel.reduce_axes[0]
    strides = load_strides(kernel, source.walk())
    walking = [load for load in strides if load.get(reduce_axis) == 1]
    if not walking or any(load.get(reduce_axis) not in (0, 1) for load in strides) or kernel.full_shape[reduce_axis] < 64:
        return []
    globals_ = [axis for axis, size in enumerate(kernel.full_shape) if axis not in kernel.reduce_axes and size > 1]
    reused = [[axis for axis in globals_ if load[axis] == 0] for load in walking]
    upcasts: list[tuple[int, int]] = []
    if len(walking) == 2 and reused[0] and reused[1] and reused[0][-1] != reused[1][-1]:
        for axis in (reused[0][-1], reused[1][-1]):
            amount = _largest_divisor(kernel.full_shape[axis], (4, 2))
            if amount is not None:
                upcasts.append((axis, amount))
    elif len(walking) == 1 and globals_:
        amount = _largest_divisor(kernel.full_shape[globals_[-1]], (8, 4, 2))
        if amount is not None:
            upcasts.append((globals_[-1], amount))
    else:
        return []
    opts = [Opt("UPCAST", axis, amount) for axis, amount in sorted(upcasts, reverse=True)]
    reduce_axis += sum(axis < reduce_axis for axis, _ in upcasts)
    unroll = _largest_divisor(kernel.full_shape[kernel.reduce_axes[0]], (8, 4))
    if unroll is not None:
        opts.append(Opt("UNROLL", reduce_axis, unroll))
    return opts


# Outputs a transposed reduce computes together: a 64-byte cache line of float32, or half of one.
TRANSPOSED_REDUCE_LANES = (16, 8)
# Where every load walks the axis contiguously and other outputs give the threads work (at least
# TRANSPOSED_REDUCE_WIDE_WORK of them), up to this many outputs are upcast: a whole channels-last row of
# 64 channels, read once instead of once per 16 (a batch norm's partial sums over ResNet-18's 64
# channels at 56x56 in training, one thread, 1.95 -> 0.71 ms).
TRANSPOSED_REDUCE_WIDE, TRANSPOSED_REDUCE_WIDE_WORK = 64, 8
# Reduces of fewer steps keep linearize's loops: ResNet-18's global average pool at batch 16 (49
# steps over 512 channels stored channels last, plus the residual branch's NCHW rows) ran 0.8 ms
# with its accumulator array, 1.8 ms with 16 channels upcast.
TRANSPOSED_REDUCE_MIN_STEPS = 256


def transposed_reduce_tile(kernel: Kernel) -> list[Opt]:
    """For a reduce with a load that walks an output axis contiguously but no reduce axis (a per-
    channel sum of an activation stored channels last, as a convolution's tile writes it: batch
    norm's statistics and gradients): that output axis upcast by a cache line, so each step reads
    whole lines for TRANSPOSED_REDUCE_LANES outputs instead of one element of a line per output,
    which for a large input meant every line fetched once per output. ResNet-18 training at batch
    16, 2 threads: the stem's batch norm statistics 122 -> 23 ms, its gradient sums 107 -> 22 ms.
    Not when linearize's accumulator array serves better (`choose_inner_axes`: one reduce, the axis
    last among the outputs, every load a row along it: a plain column sum, 1.5 against 3 ms), nor
    for a short reduce (TRANSPOSED_REDUCE_MIN_STEPS). A whole row of up to TRANSPOSED_REDUCE_WIDE
    outputs where every load walks them contiguously and other outputs keep the threads busy."""
    if math.prod(kernel.full_shape[axis] for axis in kernel.reduce_axes) < TRANSPOSED_REDUCE_MIN_STEPS:
        return []
    strides = load_strides(kernel, [node for node in kernel.ast.walk() if node.op is Ops.LOAD])
    globals_ = [axis for axis, size in enumerate(kernel.full_shape) if axis not in kernel.reduce_axes and size > 1]
    one_reduce = sum(node.is_reduce for node in kernel.ast.walk()) == 1
    for load in strides:
        if any(load.get(axis) in (0, 1) for axis in kernel.reduce_axes):
            continue
        for axis in globals_:
            if load.get(axis) != 1:
                continue
            if one_reduce and axis == globals_[-1] and all(other.get(axis) in (0, 1) for other in strides):
                return []
            others = math.prod(kernel.full_shape[other] for other in globals_ if other != axis)
            whole_rows = others >= TRANSPOSED_REDUCE_WIDE_WORK and all(other.get(axis) in (0, 1) for other in strides)
            amount = _largest_divisor(kernel.full_shape[axis], (TRANSPOSED_REDUCE_WIDE,) * whole_rows + TRANSPOSED_REDUCE_LANES)
            if amount is not None:
                return [Opt("UPCAST", axis, amount)]
    return []


# Strides of a spread whose every-d-th-position tests `strided_spread_tile` upcasts away.
SPREAD_STRIDES = (2, 3, 4)


def strided_spread_tile(kernel: Kernel) -> list[Opt]:
    """For a kernel without a reduce whose loads are valid only at every d-th position of an axis (a
    strided window's gradient spread back over its input, as a max pool's backward reads it: the
    test `(i + c) % d < 1` on each load): that axis upcast by d, so in each copy of the body the test
    is a constant, and its bounds tests and index arithmetic fold. ResNet-18's max pool backward at
    batch 16 (nine window terms, stride 2 on both spatial axes): 187 -> 43 ms."""
    shape = kernel.full_shape
    probe = _probe(shape)
    axis_of = {f"p{axis}": axis for axis in range(len(shape))}
    strides: dict[int, int] = {}
    for node in kernel.ast.walk():
        if node.op is not Ops.LOAD:
            continue
        for expr, _, _ in node.arg[1].index_and_valid(probe)[1]:
            for atom in expr.terms:
                if atom.kind != "mod" or atom.divisor not in SPREAD_STRIDES or len(atom.inner.terms) != 1:
                    continue
                (moving, coeff), = atom.inner.terms.items()  # (p + c) % d: one axis, unscaled
                if moving.kind == "var" and coeff == 1 and shape[axis_of[moving.name]] % atom.divisor == 0:
                    strides[axis_of[moving.name]] = atom.divisor
    return [Opt("UPCAST", axis, stride) for axis, stride in sorted(strides.items(), reverse=True)]


def _padding_checks(tracker, shape: tuple[int, ...]) -> list:
    """The bounds checks of a view's validity (its padding) over the kernel's shape; empty for none."""
    return tracker.index_and_valid(_probe(shape))[1]


def validity_varies_along(tracker, shape: tuple[int, ...], axis: int) -> bool:
    """Whether a view's validity (its padding) changes along `axis` anywhere in the kernel's shape:
    tested over the whole axis at the first, middle and last position of the others."""
    checks = _padding_checks(tracker, shape)
    steps = np.arange(shape[axis])
    for sample in ([0] * len(shape), [size // 2 for size in shape], [size - 1 for size in shape]):
        values = {f"p{index}": position for index, position in enumerate(sample)}
        values[f"p{axis}"] = steps
        for expr, at_least, bound in checks:
            position = np.broadcast_to(expr.evaluate(values), steps.shape)
            truth = position >= bound if at_least else position < bound
            if truth.min() != truth.max():
                return True
    return False


# Vectors of consecutive outputs an elementwise kernel computes together (`contiguous_vector_tile`).
ELEMENTWISE_VECTORS = 2


# A loop at least this long is never peeled whole by gcc (it peels up to 16 iterations), so a value
# read at the same place on each of its steps is read once, before it (see has_select_only_load).
HOISTED_LOOP_MIN = 32


def has_select_only_load(kernel: Kernel) -> bool:
    """Whether some LOAD is used only as a value a WHERE chooses (never as its condition or elsewhere):
    a read of padding, or a value a mask picks. Not a read of one element everywhere (a scalar such as
    a mask's fill value, -100 on Swin's shifted-window scores), nor, in a kernel without a reduce, one
    that stays put along a long innermost loop (a cross entropy's gradient per row, picked at the
    row's target class among 4096): the C compiler reads it once, outside that loop, so it cannot
    become a masked load; counted, the first kept gcc's loop vectorizer off the scores' product
    (Swin-T's 16 x 6 x 49 x 49 scores 1.9 -> 0.3 ms), the second off the cross entropy's gradient
    (1024 x 4096, 2 threads: 12.8 -> 1.9 ms). Such a kernel keeps gcc's loop vectorizer off (renderer/c.py
    MASKED_LOAD_ATTRIBUTE), so `contiguous_vector_tile` writes its vectors itself."""
    shape = kernel.full_shape
    long_inner = not kernel.reduce_axes and len(shape) > 0 and shape[-1] >= HOISTED_LOOP_MIN
    steady = len(shape) - 1 if long_inner else None
    uses: dict[KernelNode, list[tuple[KernelNode, int]]] = {}
    nodes = kernel.ast.walk()
    for node in nodes:
        for position, source in enumerate(node.srcs):
            uses.setdefault(source, []).append((node, position))
    return any(node.op is Ops.LOAD and node in uses and not _read_outside_loop(node.arg[1], steady)
               and all(user.op is Ops.WHERE and position > 0 for user, position in uses[node])
               for node in nodes)


def _read_outside_loop(tracker, axis: int | None) -> bool:
    """Whether a load reads one element everywhere, or (one unmasked view) one along `axis`."""
    if all(view.mask is None and not any(view.strides) for view in tracker.views):
        return True
    view = tracker.views[-1]
    return axis is not None and len(tracker.views) == 1 and view.mask is None and view.strides[axis] == 0


def contiguous_vector_tile(kernel: Kernel, renderer) -> list[Opt]:
    """For a kernel without a reduce with padding (a masked load or validity test), or a load only a
    select reads, whose loads and
    store all walk its last axis contiguously (or stay put along it), the padding not changing along
    it: that axis upcast by two vectors (one where two do not divide it: 144 channels; half of one
    where a whole one does not: 24 channels), so the body is computed in vector expressions. gcc's
    own vectorizer gives up on a body with a masked load: EfficientNet's SiLU into its depthwise
    convolution's padded input, channels last, 114x114x32, ran one element at a time, 3.3 ms against
    0.33 as vectors of 32; and it is kept out of kernels with padding anyway (renderer/c.py: it
    gave wrong answers there), so ShuffleNetV2's padded copy of 113x113x24 took 0.11 ms, 0.017 in
    half vectors. Kernels without padding keep gcc's vectors (flat loops), which measured the same
    as these, unless a load feeds only a select (`has_select_only_load`), which keeps gcc's loop
    vectorizer off too: MobileNetV2's ReLU6 gradients through its batch norms, channels last, one
    element at a time, its training step's seven such kernels 2.82 -> 1.48 ms (12544 x 144 1.24 -> 0.65)."""
    lanes = getattr(renderer, "simd_lanes", None)
    shape = kernel.full_shape
    last = len(shape) - 1
    if lanes is None or kernel.reduce_axes or not shape:
        return []
    amount = _largest_divisor(shape[last], (lanes * ELEMENTWISE_VECTORS, lanes, lanes // 2))
    if amount is None:
        return []
    trackers = kernel_trackers(kernel.ast)
    if any(tracker.shape != shape for tracker in trackers) \
            or not (any(_padding_checks(tracker, shape) for tracker in trackers) or has_select_only_load(kernel)):
        return []
    _, strides = _memory_accesses(kernel)
    if any(steps.get(last) not in (0, 1) for steps in strides) or not any(steps.get(last) == 1 for steps in strides):
        return []
    if any(validity_varies_along(tracker, shape, last) for tracker in trackers):
        return _panels_of_padded_columns(kernel, trackers, renderer)
    return [Opt("UPCAST", last, amount)]


def _panels_of_padded_columns(kernel: Kernel, trackers, renderer) -> list[Opt]:
    """For `contiguous_vector_tile`'s kernels whose padding changes along the last axis: where it
    changes along one other axis only, a short one (a matmul operand packed into panels of columns
    padded to whole panels: 144 columns into 5 panels of 32), both axes upcast whole, so each copy's
    padding is decided and its vectors are whole loads or zeros. MobileNetV2's 12544 x 144 activations
    so packed, one kernel alone: 2.3 -> 0.36 ms, where the padding kept every element a scalar."""
    shape, last = kernel.full_shape, len(kernel.full_shape) - 1
    varying = [axis for axis in range(last) if shape[axis] > 1
               and any(validity_varies_along(tracker, shape, axis) for tracker in trackers)]
    if len(varying) != 1 or shape[last] % renderer.simd_lanes or shape[varying[0]] * shape[last] > MAX_UPCAST:
        return []
    return [Opt("UPCAST", last, shape[last]), Opt("UPCAST", varying[0], shape[varying[0]])]


def byte_dot_operands(kernel: Kernel) -> tuple[KernelNode, KernelNode, KernelNode] | None:
    """(the reduce, the uint8 load, the int8 load) of a kernel whose one reduce is an int32 sum of
    uint8 by int8 products (each operand a load cast to int32): lazygrad.quantize's products."""
    reduces = [node for node in kernel.ast.walk() if node.is_reduce]
    if len(reduces) != 1 or reduces[0].op is not Ops.SUM or reduces[0].dtype != dtypes.int32:
        return None
    product = reduces[0].srcs[0]
    if product.op is not Ops.MUL or any(src.op is not Ops.CAST or src.srcs[0].op is not Ops.LOAD for src in product.srcs):
        return None
    weights, activations = sorted((src.srcs[0] for src in product.srcs), key=lambda load: load.dtype.name)
    if (weights.dtype, activations.dtype) != (dtypes.int8, dtypes.uint8):
        return None
    return reduces[0], activations, weights


def byte_dot_product(kernel: Kernel) -> bool:
    """Whether the kernel is int32 sums of uint8 by int8 products along one reduce axis that both
    loads walk contiguously (lazygrad.quantize's Linear): left as plain loops, gcc turns the inner
    loop into AVX-512 VNNI's vpdpbusd, four products added to a lane per instruction, where a
    register tile would keep it scalar (256 x 1024 by 1024 x 1024, one thread: 2.7 ms, 196 GOP/s;
    float32's tile 4.6 ms; as a tile of int32 products 5.7 ms)."""
    operands = byte_dot_operands(kernel)
    if operands is None or len(kernel.reduce_axes) != 1:
        return False
    axis = kernel.reduce_axes[0]
    return all(steps.get(axis) == 1 for steps in load_strides(kernel, operands[1:]))


# Outputs along the activations' axis that a byte dot tile computes together (one vector accumulator
# each, in registers with the weight vector and the broadcasts); with 16 lanes and 4 unrolled steps,
# MAX_EXPANSION allows no more.
BYTE_DOT_MAX_PIXELS = 8


def _byte_dot_steps(kernel: Kernel) -> tuple[dict, dict] | None:
    """How the uint8 and the int8 load of a byte dot product kernel move along each axis, when
    neither has a mask to test (None otherwise)."""
    operands = byte_dot_operands(kernel)
    if operands is None:
        return None
    probe = _probe(kernel.full_shape)
    if any(render_condition(load.arg[1].index_and_valid(probe)[1]) is not True for load in operands[1:]):
        return None
    strides = load_strides(kernel, operands[1:])
    return (strides[0], strides[1]) if len(strides) == 2 else None


def byte_dot_tile(kernel: Kernel, renderer) -> list[Opt]:
    """A register tile of int32 sums of uint8 by int8 products written with the renderer's byte dot
    products (C on AVX-512 VNNI: vpdpbusd adds 4 products to each of 16 lanes), for operands laid out
    for it (nn.functional.byte_dot_conv2d's): a reduce axis of 4 along which both loads step by 1
    (unrolled: one instruction's 4 products), an output axis of 16 lanes along which the uint8 load
    stays and the int8 one steps by 4 (each lane's 4 weights, lane after lane: one vector load),
    and up to BYTE_DOT_MAX_PIXELS outputs of an axis the int8 load stays along (one accumulator
    each, the weights loaded once for all). None of them: [] (see byte_dot_axes)."""
    lanes, steps = getattr(renderer, "byte_dot_lanes", 0), _byte_dot_steps(kernel)
    if not lanes or steps is None:
        return []
    activations, weights = steps
    shape, reduce_axes = kernel.full_shape, kernel.reduce_axes
    step = next((axis for axis in reversed(reduce_axes) if shape[axis] % 4 == 0
                 and activations.get(axis) == 1 and weights.get(axis) == 1), None)
    outputs = [axis for axis, size in enumerate(shape) if axis not in reduce_axes and size > 1]
    lane = next((axis for axis in reversed(outputs) if shape[axis] == lanes
                 and activations.get(axis) == 0 and weights.get(axis) == 4), None)
    if step is None or lane is None:
        return []
    opts = [Opt("UNROLL", step, 4), Opt("UPCAST", lane, lanes)]
    pixels = next((axis for axis in reversed(outputs) if axis < lane and weights.get(axis) == 0), None)
    if pixels is not None:
        most = min(BYTE_DOT_MAX_PIXELS, MAX_EXPANSION // (4 * lanes))  # the lanes count as copies there
        amount = max(n for n in range(1, most + 1) if shape[pixels] % n == 0)
        opts += [Opt("UPCAST", pixels, amount)] if amount > 1 else []
    return opts


def byte_dot_axes(kernel: Kernel, kinds: tuple, renderer) -> tuple[int, int] | None:
    """(lane axis, unrolled axis) of an arranged kernel whose sum linearize writes with the renderer's
    byte dot products: the layout byte_dot_tile asks for, with its UNROLL of 4 as the only unrolled
    axis and its lanes as the last upcast axis (other opts, BEAM's, render the sum as any other)."""
    lanes, steps = getattr(renderer, "byte_dot_lanes", 0), _byte_dot_steps(kernel)
    if not lanes or steps is None:
        return None
    shape = kernel.full_shape
    upcast = [axis for axis, kind in enumerate(kinds) if kind == UPCAST and shape[axis] > 1]
    unrolled = [axis for axis, kind in enumerate(kinds) if kind == UNROLL and shape[axis] > 1]
    if not upcast or len(unrolled) != 1 or shape[upcast[-1]] != lanes or shape[unrolled[0]] != 4:
        return None
    lane, step = upcast[-1], unrolled[0]
    activations, weights = steps
    if activations.get(lane) != 0 or weights.get(lane) != 4 or activations.get(step) != 1 or weights.get(step) != 1:
        return None
    return lane, step


def heuristic_opts(kernel: Kernel, renderer) -> list[Opt]:
    """The default opts of a dim-merged kernel on renderers that vectorize straight-line code (C):
    a register tile for matmul-like reduces (its reduce two steps at a time where it holds few
    accumulators: `few_accumulators_unroll`), else rows and unrolled accumulators for cheap row
    reduces, else a cache line of outputs for a reduce reading across them (`transposed_reduce_tile`,
    also for kernels with several reduces, where otherwise linearize's own loop choices serve:
    flat vectorized loops, inner accumulator arrays); for a kernel without a reduce,
    `transposed_read_panel`, else `source_order_panel`, else `strided_spread_tile`, else
    `contiguous_vector_tile`. The GPU dialects get `work_item_tile` instead."""
    opts = _heuristic_opts(kernel, renderer)
    unroll = few_accumulators_unroll(kernel, opts, renderer)
    return opts if unroll is None else opts + [unroll]


# A register tile of at most this many vector accumulators over a single reduce of at least
# UNROLLED_REDUCE_MIN steps takes its reduce two steps at a time (`few_accumulators_unroll`).
FEW_ACCUMULATORS, UNROLLED_REDUCE_MIN = 8, 64


def few_accumulators_unroll(kernel: Kernel, opts: list[Opt], renderer) -> Opt | None:
    """UNROLL by 2 of the reduce of a float32 product's register tile (a matmul's, a 1x1
    convolution's) of at most FEW_ACCUMULATORS AVX-512 vectors: each unrolled step sums into
    accumulators of its own, so the fmas have twice the independent chains to hide their latency,
    which 8 chains (4 cycles by 2 fma ports) only just cover, and each step's loads overlap the
    last one's. AVX-512, 2 threads, kernels alone: MobileNetV2's training step's 1x1 convolution
    gradient to 16 channels, 16 x 96 x 3136 x 16 as 16 channels by 8 positions, 1.10 -> 0.67 ms (0.98
    -> 0.55 in the step); its classifier, 16 x 1280 @ 1280 x 1000 as 8 x 8, 1.23 -> 0.85; ResNet-18's
    at batch 16 0.55 -> 0.41; 2 x 4096 @ 4096 x 256 0.102 -> 0.096; ResNet-50's 1x1 convolutions as 16
    channels by 8 positions at batch 1 the same (4.62 -> 4.53 ms in the model)."""
    if not _wide_vectors(renderer) or len(kernel.reduce_axes) != 1 \
            or any(opt.op not in ("UPCAST", "PANEL") for opt in opts) or not any(opt.op == "UPCAST" for opt in opts):
        return None
    source = _reduce_source(kernel)
    if source is None or source.op is not Ops.MUL or source.dtype != dtypes.float32 \
            or sum(node.op is Ops.LOAD for node in source.walk()) != 2:
        return None
    steps = kernel.full_shape[kernel.reduce_axes[0]]
    if steps < UNROLLED_REDUCE_MIN or steps % 2:
        return None
    try:
        tiled = apply_opts(kernel, opts, renderer)
    except OptError:
        return None
    if tiled.expanded_size(UPCAST) > FEW_ACCUMULATORS * renderer.simd_lanes:
        return None
    return Opt("UNROLL", tiled.axes_of(REDUCE)[0], 2)


def _heuristic_opts(kernel: Kernel, renderer) -> list[Opt]:
    """heuristic_opts before `few_accumulators_unroll`."""
    if not getattr(renderer, "expands_tiles", False):
        return work_item_tile(kernel, renderer)
    tile = byte_dot_tile(kernel, renderer)
    if tile or byte_dot_product(kernel):
        return tile
    if not kernel.reduce_axes:
        return transposed_read_panel(kernel) or source_order_panel(kernel) or strided_spread_tile(kernel) \
            or contiguous_vector_tile(kernel, renderer)
    if sum(node.is_reduce for node in kernel.ast.walk()) > 1:
        # chained or side-by-side reduces (softmax's max, then sum): plain loops, each a SIMD
        # reduction, unless they read across their outputs
        return transposed_reduce_tile(kernel)
    tile = matmul_tile(kernel, renderer) or channels_vector_tile(kernel, renderer)
    opts = tile or pool_vector_tile(kernel, renderer) or row_reduce_tile(kernel) or transposed_reduce_tile(kernel)
    try:
        tiled = apply_opts(kernel, opts, renderer)
    except OptError:
        return []
    if tile and len(kernel.reduce_axes) > 1:
        panel = convolution_panel(tiled)
        return opts if panel is None else opts + [panel]
    few_rows = few_rows_panel(tiled) if tile else None
    if few_rows is not None:
        return opts + [few_rows]
    strides = load_strides(kernel, _reduce_source(kernel).walk()) if tile else []
    if not tile or not large_operands(kernel, strides):
        panel = (small_operand_panel(tiled) or wide_vector_panel(tiled, renderer)) if tile else None
        return opts if panel is None else opts + [panel]
    several_row_tiles = _row_tiles(tiled) > 1
    panel = panel_opt(tiled)
    if panel is None and panel_row_axis(tiled) is not None:
        # operands in panels whose row panels take no PANEL: the tile alone streams them well (AVX2,
        # 2 threads, 256x2048 @ 2048x1024 as 6 x 16: 134 GFLOP/s alone, 96 in blocks of 64 steps),
        # unless the reduce is so long that each row tile's operands stream from beyond L2 for every
        # panel of columns: a weight gradient, ResNet-18's at batch 16 (64 x 50176 by 50176 x 576
        # 75 -> 38 ms, 256 x 3136 by 3136 x 1152 64 -> 33 ms in blocks of 256 and 196 steps)
        block = long_reduce_block(tiled) if several_row_tiles else None
        return opts if block is None else opts + [block]
    if panel is None:
        large = reused_across_rows(kernel, strides, opts[0].axis) >= LARGE_OPERAND_ELEMENTS
        block = reduce_block(tiled, BLOCK_STEPS) if large and several_row_tiles else None
    else:
        panelled = apply_opt(tiled, panel, renderer)
        # AVX-512's panels take no short blocks: their 8 x 32 tiles ran 1.3-1.5x faster without
        # (2 threads, kernels alone, GFLOP/s: 2048x1024 @ 1024x2048 364 -> 517, 2048^3 329 -> 478,
        # ViT-B/16's MLP at batch 8, 1568x768 @ 768x3072, 340 -> 480; 4096x1024 @ 1024x256 478 -> 501);
        # each block wrote every partial sum back and read it again
        short_blocks = not _wide_vectors(renderer)
        block = long_reduce_block(panelled) if several_row_tiles else None
        if block is None and several_row_tiles and short_blocks:
            block = reduce_block(panelled, PANEL_BLOCK_STEPS)
        # without blocks, AVX-512's PANEL stays where those blocks would have been taken, or the reduce
        # is too short for two of them (ResNet-18's Winograd products at batch 16, 16 x 3136x128 @
        # 128x128: 5.2 -> 3.8 ms), not over other lengths (its 512 x 784 @ 784 x 4608 weight gradients:
        # 7.9 -> 8.3 ms with it)
        reduces = panelled.axes_of(REDUCE)
        wide_panel = several_row_tiles and not short_blocks and len(reduces) == 1 and (
            reduce_block(panelled, PANEL_BLOCK_STEPS) is not None
            or panelled.kernel.full_shape[reduces[0]] < 2 * PANEL_BLOCK_STEPS)
        if block is None and not wide_panel:
            # a panel's row tiles reuse its block of steps from L1; without the block they read it
            # from farther (AVX2, one thread, 1024x384 @ 384x1536 in panels: 40 GFLOP/s with the
            # PANEL, 53 with the tile alone, 48 with blocks of 64 steps)
            block = long_reduce_block(tiled) if several_row_tiles else None
            return opts if block is None else opts + [block]
        tiled = panelled
        opts.append(panel)
    if block is not None:
        try:
            apply_opt(tiled, block, renderer)
            opts.append(block)
        except OptError:
            pass
    return opts


# A work-item's register tile on the GPU dialects: columns that one load reads contiguously (PoCL's
# compiler packs their straight-line copies into one vector register) by rows. Measured on PoCL on a
# 2-core AVX-512 CPU: matmul 512 16.6 ms -> 5.6 ms, 1024 262 ms -> 48 ms with 16 x 8; 32 x 4 was the
# same, 32 x 8 and 64 x 4 up to 30% slower, an UNROLL of the reduce on top 40% slower, 4 rows
# alone (the column walked by neighbouring work-items instead) 2.5x slower than no tile.
WORK_ITEM_VECTOR_CHOICES = (16, 8)
WORK_ITEM_ROW_CHOICES = (8, 4, 2)
# A reduce shorter than this keeps one output per work-item: its loop is too short to repay a tile.
WORK_ITEM_MIN_REDUCE = 64


def work_item_tile(kernel: Kernel, renderer) -> list[Opt]:
    """The default opts on the GPU dialects. On a dialect with `target_work_items` (CUDA: a GPU of
    many cores), `spread_tile`. Otherwise (OpenCL, tuned on PoCL's CPU cores) a register tile of
    WORK_ITEM_VECTOR_CHOICES columns by WORK_ITEM_ROW_CHOICES rows per work-item for a matmul (a
    single reduce over one axis of at least WORK_ITEM_MIN_REDUCE steps, whose loads each stay put
    along some output axis); nothing for other kernels, whose work-items compute one output each."""
    if getattr(renderer, "target_work_items", None):
        return spread_tile(kernel, renderer)
    source = _reduce_source(kernel)
    if source is None or len(kernel.reduce_axes) != 1 or sum(node.is_reduce for node in kernel.ast.walk()) > 1:
        return []
    if kernel.full_shape[kernel.reduce_axes[0]] < WORK_ITEM_MIN_REDUCE:
        return []
    globals_ = [axis for axis, size in enumerate(kernel.full_shape) if axis not in kernel.reduce_axes and size > 1]
    strides = load_strides(kernel, source.walk())
    tile = _vector_and_row_tile(kernel, globals_, strides, WORK_ITEM_VECTOR_CHOICES, WORK_ITEM_ROW_CHOICES) \
        if len(strides) >= 2 else []
    return _checked(kernel, tile, renderer)


# Outputs per work-item on a GPU of many cores (`spread_tile`), by how many the kernel has per
# `target_work_items`: (columns, rows) of the register tile. CUDA on an H200 (132 SMs), kernel alone,
# 16 x 8 (the PoCL tile) -> this: BERT's 1024x384 @ 384x1536 0.46 -> 0.11 ms, 1024x1536 @ 1536x384
# 1.45 -> 0.18, 1024x384 @ 384x384 0.39 -> 0.05, attention's 96 x (128x128 @ 128x32) 0.13 -> 0.03;
# larger tiles left SMs idle (the last: 12 work-groups of 256 work-items for 132 SMs).
SPREAD_TILES = {16: (2, 8), 8: (2, 4), 4: (2, 2), 2: (1, 2)}
# Columns of a window's tile (a convolution's) with lanes: a row of outputs reuses each loaded input
# across its window, so the widest of these that divides the row (ResNet-18's 512x7x7 by 512x3x3 on
# an H200: 0.16 ms as 2 rows, 0.065 as 7 columns by 2 rows, both with 32 lanes); a 1x1 convolution
# has no window and keeps the rows alone (7 columns measured slower there).
GROUPED_WINDOW_COLUMNS = (8, 7, 4, 2)


def spread_tile(kernel: Kernel, renderer) -> list[Opt]:
    """The default opts on a GPU of many cores (a renderer with `target_work_items`, T): for a single
    reduce whose loads each stay put along some output axis (matmul, convolution), the largest
    register tile of SPREAD_TILES that leaves T work-items. Below 2T outputs, one output each (64 to
    128 channels of 28x28 pixels: no tile, with or without lanes, measured as fast); below T/2, 2 rows
    (by GROUPED_WINDOW_COLUMNS columns for a window) and the reduce's lanes (`_lane_axis`: ResNet-18's
    last 3x3 convolution, 512x7x7 outputs by 512x3x3 steps, 0.20 ms -> 0.065 as 7 x 2; its 1x1
    downsampling, 512x7x7 by 256, 0.15 -> 0.025 as 2 rows). Reduces over one axis without a tile
    (row sums, softmax's max and sum, a layer norm's mean and sum of squares) get their lanes too,
    whatever their number of outputs, where each load walks the lane axis contiguously or not at all
    (a matmul's lanes would each read another row of its right operand): a warp's lanes then read
    neighbouring addresses, where one work-item per output read rows 1.5 KiB apart (BERT's layer
    norms on an H200: 0.2-0.3 ms each before)."""
    source = _reduce_source(kernel)
    if source is None:
        return []
    shape, target = kernel.full_shape, renderer.target_work_items
    globals_ = [axis for axis, size in enumerate(shape) if axis not in kernel.reduce_axes and size > 1]
    single = sum(node.is_reduce for node in kernel.ast.walk()) == 1
    strides = load_strides(kernel, (source if single else kernel.ast).walk())
    outputs = math.prod(shape[axis] for axis in globals_)
    per_item = next((size for size in SPREAD_TILES if outputs // size >= target), None)
    lane_axis = _lane_axis(kernel, renderer)
    grouped = single and per_item is None and outputs < target // 2 and lane_axis is not None
    tile = []
    if single and len(strides) >= 2 and (per_item or grouped):
        if per_item:
            columns, rows = (SPREAD_TILES[per_item][0],), SPREAD_TILES[per_item][1]
        else:
            columns, rows = (GROUPED_WINDOW_COLUMNS if len(kernel.reduce_axes) > 1 else (1,)), 2
        tile = _vector_and_row_tile(kernel, globals_, strides, columns, (rows,), strided_choices=columns)
        if columns == (1,):  # rows alone: the vector axis only located the row axis
            tile = [opt for opt in tile if opt.amount == rows]
    coalesced = lane_axis is not None and all(load.get(lane_axis, 0) in (0, 1) for load in strides)
    if grouped or not tile and coalesced and len(kernel.reduce_axes) == 1:
        tile.append(Opt("GROUP", lane_axis + sum(opt.axis < lane_axis for opt in tile), renderer.reduce_lanes))
    return _checked(kernel, tile, renderer)


def _checked(kernel: Kernel, opts: list[Opt], renderer) -> list[Opt]:
    """The opts, or none when they do not apply."""
    try:
        apply_opts(kernel, opts, renderer)
    except OptError:
        return []
    return opts


def _lane_axis(kernel: Kernel, renderer) -> int | None:
    """The reduce axis to split over the renderer's `reduce_lanes` (a warp on CUDA): the longest, when
    the lanes divide it and each lane gets 4 steps or more. Each lane adds every lanes-th term and
    the lanes fold in order; they read neighbouring addresses, and each accumulator takes 1/lanes of
    the terms: one thread adding lazy.ACCUMULATION_LIMIT float32 terms in a row was 6e-5 off on a sum
    of 2^24 0.1s (CUDA on an H200), beyond float32 sums' 1e-5."""
    lanes = getattr(renderer, "reduce_lanes", None)
    if lanes is None or not kernel.reduce_axes:
        return None
    axis = max(kernel.reduce_axes, key=lambda axis: kernel.full_shape[axis])
    size = kernel.full_shape[axis]
    return axis if size % lanes == 0 and size >= 4 * lanes else None


# Steps per BLOCK of a tiled matmul: measured fastest here for 512 to 2048 (64 steps of the 8 rows
# and 32 columns a tile reads stay in L1; 128 and 256 were 10 to 30% slower, 32 and 16 slower too).
BLOCK_STEPS = 64
# With the right operand in panels and PANEL rows, 256 steps: a panel's 256 x 32 block (32 KiB)
# stays in L1 while the PANEL's row tiles use it, and the rows' block of the left operand in L2
# (measured on AVX2; AVX-512's panels take none, WIDE_PANEL_LANES).
PANEL_BLOCK_STEPS = 256
# Vector lanes from which a matmul in panels with a PANEL takes no blocks of PANEL_BLOCK_STEPS (AVX-512).
WIDE_PANEL_LANES = 16
def _wide_vectors(renderer) -> bool:
    """Whether the renderer's vectors are AVX-512's (WIDE_PANEL_LANES float32 lanes or more), for which
    some tile choices were measured apart from AVX2's."""
    return getattr(renderer, "simd_lanes", 8) >= WIDE_PANEL_LANES


# Row tiles per PANEL: the largest that leaves at least PANEL_MIN_CHUNKS steps of the loop outside,
# which the CPU threads share.
PANEL_ROW_TILES = (8, 4, 2)
PANEL_MIN_CHUNKS = 4


def _row_tiles(tiled: OptimizedKernel) -> int:
    """How many row tiles of a register-tiled product share its largest operand: the sizes of its
    global loops along which that operand stays put and another moves, multiplied. A BLOCK of the
    reduce keeps a block of that operand in cache for the next row tile; with one row tile, each
    tile reads its own part of the operand once, and the blocks only cost
    (a weight gradient to 8 output channels over 8 x 64 x 64 positions of 32 channels, 3x3, its
    windows in panels, 2 threads: 1.9 ms in blocks of 64 steps, each block one parallel region over
    9 tiles, 0.61 ms without; to 3 channels from the windows in place 0.97 -> 0.76 ms)."""
    shape = tiled.kernel.full_shape
    strides = load_strides(tiled.kernel, _reduce_source(tiled.kernel).walk())
    if not strides:
        return 1
    largest = max(strides, key=lambda load: _positions_in_one_matmul(tiled.kernel, strides, load))
    return math.prod(shape[axis] for axis in tiled.axes_of(GLOBAL)
                     if largest.get(axis, 0) == 0 and any(load.get(axis, 0) != 0 for load in strides))


def reduce_block(tiled: OptimizedKernel, steps: int = BLOCK_STEPS) -> Opt | None:
    """BLOCK of `steps` for a tiled kernel whose single reduce has at least 2 such blocks (4 for
    the short blocks of BLOCK_STEPS)."""
    reduces = tiled.axes_of(REDUCE)
    if len(reduces) != 1:
        return None
    size = tiled.kernel.full_shape[reduces[0]]
    if size % steps or size < max(2, 4 * BLOCK_STEPS // steps) * steps:
        return None
    return Opt("BLOCK", reduces[0], steps)


# A reduce of at least this many steps in a matmul in panels is run in blocks of up to LONG_BLOCK_STEPS.
LONG_REDUCE_STEPS = 3072
LONG_BLOCK_STEPS = 1024


def long_reduce_block(tiled: OptimizedKernel) -> Opt | None:
    """BLOCK of a tiled kernel's single reduce of LONG_REDUCE_STEPS steps or more (a weight
    gradient's, over every pixel of the batch): the largest divisor of its length between
    BLOCK_STEPS and LONG_BLOCK_STEPS steps. Fewer, longer blocks write the partial sums back less
    often: ResNet-18's at batch 16, 2 threads, kernel alone, 64 x 50176 by 50176 x 576 19.2 -> 17.9
    ms from 256 steps to 1024, 128 x 12544 by 12544 x 1152 18.4 -> 17.2-17.4 from 256 to 784-1568
    (896 taken), 256 x 3136 by 3136 x 2304 17.4 -> 16.7 from 224 to 784."""
    reduces = tiled.axes_of(REDUCE)
    if len(reduces) != 1 or tiled.kernel.full_shape[reduces[0]] < LONG_REDUCE_STEPS:
        return None
    size = tiled.kernel.full_shape[reduces[0]]
    steps = next((steps for steps in range(LONG_BLOCK_STEPS, BLOCK_STEPS - 1, -1) if size % steps == 0), None)
    return None if steps is None else Opt("BLOCK", reduces[0], steps)


# A convolution whose weight has at least this many elements (1 MiB of float32, the L2 of the
# machine measured) runs each panel of output channels over all its output rows, when its input
# reads fewer than CONVOLUTION_PANEL_MAX_INPUT positions (convolution_panel).
CONVOLUTION_PANEL_MIN_WEIGHT = 1 << 18
CONVOLUTION_PANEL_MAX_INPUT = 1 << 20
CONVOLUTION_PANEL_MAX_ROWS = 16


def convolution_panel(tiled: OptimizedKernel) -> Opt | None:
    """PANEL of a register-tiled convolution's first output axis, whole, when its weight is too large
    for L2 and its input is not: the loop over panels of output channels then runs outside the rows,
    so each panel of the weight is read once instead of once per row, while the input the rows read
    stays near. The weight is the load that walks an upcast axis contiguously and stays put along
    that first axis; the input moves along it. AVX2, 2 threads, convolution alone (ms, rows inside
    -> outside): 1x512x7x7 by 512x512x3x3 3.24 -> 2.57, 1x256x14x14 by 256 2.38 -> 2.14; slower with
    a weight that fits (1x64x56x56 by 64: 2.06 -> 2.36) or an input that does not (16x256x14x14 by
    256, the 16 images inside: 29.5 -> 37.1)."""
    source = _reduce_source(tiled.kernel)
    shape = tiled.kernel.full_shape
    globals_ = [axis for axis in tiled.axes_of(GLOBAL) if shape[axis] > 1]
    if source is None or not globals_ or shape[globals_[0]] > CONVOLUTION_PANEL_MAX_ROWS:
        return None
    rows = globals_[0]
    loads = load_strides(tiled.kernel, source.walk())

    def positions(load):  # the positions a load reads: its moving axes' sizes multiplied
        return math.prod(shape[axis] for axis, step in load.items() if step != 0)
    weights = [load for load in loads if load[rows] == 0 and any(load[axis] == 1 for axis in tiled.axes_of(UPCAST))
               and any(load[axis] not in (0, None) for axis in globals_[1:])]
    inputs = [load for load in loads if load[rows] not in (0, None)]
    if (len(weights) != 1 or positions(weights[0]) < CONVOLUTION_PANEL_MIN_WEIGHT
            or any(positions(load) >= CONVOLUTION_PANEL_MAX_INPUT for load in inputs)):
        return None
    return Opt("PANEL", rows, shape[rows])


# The most elements the operand of `small_operand_panel` that moves with the rows may read (16 KiB of
# float32, half of L1), and the fewest the other must read (64 KiB, past L1).
SMALL_OPERAND_ELEMENTS = 1 << 12
STREAMED_OPERAND_ELEMENTS = 1 << 14


def small_operand_panel(tiled: OptimizedKernel) -> Opt | None:
    """PANEL of a register-tiled product's first output axis, whole, when the operand that moves
    along it (a 1x1 convolution's weight, channels in the middle) fits in L1 and the one that does
    not (its input) is larger than L1: the rows then run inside the loop over columns, so the input
    is read once, not once per row tile, while the weight is reread from L1. AVX2, 2 threads,
    kernel alone, MobileNetV2's 1x1 convolutions (ms): 16 -> 96 channels at 112x112 1.07 -> 0.88,
    32 -> 16 0.61 -> 0.45, 96 -> 24 at 56x56 0.52 -> 0.32, 144 -> 24 0.82 -> 0.56, 24 -> 144 0.42 -> 0.37."""
    source = _reduce_source(tiled.kernel)
    shape = tiled.kernel.full_shape
    globals_ = [axis for axis in tiled.axes_of(GLOBAL) if shape[axis] > 1]
    if source is None or len(globals_) < 2:
        return None
    rows = globals_[0]

    def positions(load):  # the positions a load reads: its moving axes' sizes multiplied
        return math.prod(shape[axis] for axis, step in load.items() if step != 0)
    loads = load_strides(tiled.kernel, source.walk())
    moving = [load for load in loads if load[rows] != 0]
    streamed = [load for load in loads if load[rows] == 0]
    if not moving or not streamed or any(positions(load) > SMALL_OPERAND_ELEMENTS for load in moving) \
            or all(positions(load) < STREAMED_OPERAND_ELEMENTS for load in streamed):
        return None
    return Opt("PANEL", rows, shape[rows])


def panel_row_axis(tiled: OptimizedKernel) -> int | None:
    """For a register-tiled matmul whose right operand is stored in panels (linalg's
    _panel_product), a load that walks an upcast axis contiguously and moves on by that whole run
    per reduce step: the row-tile axis that load stays put along, with a global axis after it along
    which the load moves to the next panel. None for other kernels."""
    reduces = tiled.axes_of(REDUCE)
    source = _reduce_source(tiled.kernel)
    if len(reduces) != 1 or source is None:
        return None
    shape = tiled.kernel.full_shape
    globals_ = [axis for axis in tiled.axes_of(GLOBAL) if shape[axis] > 1]
    for load in load_strides(tiled.kernel, source.walk()):
        walked = [axis for axis in tiled.axes_of(UPCAST) if load[axis] == 1]
        if not walked or load[reduces[0]] != shape[walked[0]]:
            continue
        for row_axis in globals_:
            if load[row_axis] == 0 and any(load[axis] not in (0, None) for axis in globals_ if axis > row_axis):
                return row_axis
    return None


# A matmul in panels whose rows make at most FEW_ROW_TILES register tiles, with a right operand of at
# least FEW_ROWS_PANEL_ELEMENTS elements, or at most UNDIVIDED_ROW_TILES that no PANEL_ROW_TILES
# divide, with one of at least STREAMED_PANEL_ELEMENTS, runs every row tile inside each panel of
# columns (few_rows_panel).
FEW_ROW_TILES = 7
FEW_ROWS_PANEL_ELEMENTS = 1 << 16
UNDIVIDED_ROW_TILES = 32
STREAMED_PANEL_ELEMENTS = 1 << 20


def few_rows_panel(tiled: OptimizedKernel) -> Opt | None:
    """PANEL of the whole row-tile axis of a matmul in panels with few row tiles (a prompt's 32 tokens
    by a layer's weight): the columns' loop runs outside, so each panel of a right operand too large
    for L2 streams in once while the few rows of the left one stay in L2, and the CPU threads share
    the panels, not the row tiles. No BLOCK: the whole reduce runs per tile. Found by BEAM and
    measured with 12 layers' weights, so that each streams from memory (2 threads, AVX-512, kernel
    alone, ms): 32x768 @ 768x3072 1.72 -> 0.97, 32x3072 @ 3072x768 1.93 -> 1.08, 32x768 @ 768x2304
    1.64 -> 0.82 (BEAM's own timing). From FEW_ROWS_PANEL_ELEMENTS on: the threads then share the
    panels, where they shared few row tiles unevenly (7 of them, 7x7 positions, on 2 threads: 4
    and 3), and each panel stays near while every row tile reads it (MNASNet's and
    EfficientNet-B0's 1x1 convolutions at 7x7, 49x192 @ 192x1152 0.83 -> 0.56 ms in the model,
    49x1152 @ 1152x192 0.65 -> 0.45; whole models in `bench_ab.py` 0.90x and 0.92-0.94x their
    time; MobileNetV3-Small's, of 96x576 weights and smaller, measured slower, 1.03x). Up to
    UNDIVIDED_ROW_TILES row tiles too where `panel_opt` has no PANEL for them and the right operand
    has STREAMED_PANEL_ELEMENTS: ViT's 197 tokens, 25 tiles of 8 rows, ran with the tile alone,
    every row tile streaming the whole weight (2 threads, kernel alone: 197x768 @ 768x3072 7.6-9.8
    -> 3.9-4.1 ms, 197x3072 @ 3072x768 6.8-7.4 -> 3.8-4.7; ONNX Runtime about 5); by 768x256 and
    384x384 weights, slower (1.09-1.16x)."""
    row_axis = panel_row_axis(tiled)
    if row_axis is None:
        return None
    shape = tiled.kernel.full_shape
    tiles = shape[row_axis]
    if tiles < 2 or tiles > FEW_ROW_TILES and (tiles > UNDIVIDED_ROW_TILES or _row_panel(tiles) is not None):
        return None
    loads = load_strides(tiled.kernel, _reduce_source(tiled.kernel).walk())
    streamed = [load for load in loads if load[row_axis] == 0]
    least = FEW_ROWS_PANEL_ELEMENTS if tiles <= FEW_ROW_TILES else STREAMED_PANEL_ELEMENTS
    if not streamed or max(math.prod(shape[axis] for axis, step in load.items() if step != 0)
                           for load in streamed) < least:
        return None
    return Opt("PANEL", row_axis, shape[row_axis])


# The fewest elements of the operand a matmul's row tiles share (1 MiB of float32, half the L2 of the
# AVX-512 machine measured) for which `wide_vector_panel` runs them in panels.
WIDE_VECTOR_PANEL_ELEMENTS = 1 << 18


def wide_vector_panel(tiled: OptimizedKernel, renderer) -> Opt | None:
    """`panel_opt` for a matmul in panels whose operands are below LARGE_OPERAND_ELEMENTS, on a CPU
    of 16 float32 lanes (AVX-512), when the operand its row tiles share reads at least
    WIDE_VECTOR_PANEL_ELEMENTS in one matmul of a batch: each panel of that operand then serves a
    PANEL of row tiles from L2 instead of streaming from L3 for every row tile. Measured on an
    AVX-512 Xeon (2 MiB L2 a core), 8 x 32 tiles, kernel alone, GFLOP/s with the tile alone -> with
    PANEL(8), 2 threads: BERT's FFN 1024x384 @ 384x1536 156 -> 183, 1024x1536 @ 1536x384 137 -> 163,
    1024^3 128 -> 168, 512^3 135 -> 145; one thread 67 -> 82 and 63 -> 77; 1024x384 @ 384x384
    (147K elements shared) 162 -> 167 only. Not on AVX2: there (a Zen core, 1 MiB L2 and a fast L3,
    one thread) 1024x384 @ 384x1536 ran at 40 GFLOP/s with the PANEL against 53 with the tile alone.
    From 8 to UNDIVIDED_ROW_TILES row tiles, the PANEL takes them all: each panel of the shared
    operand is then read into L1 once and serves every row tile, where PANELs of 4 row tiles read
    it once per 4 (the threads share the loop over the panels of columns, collapsed with the one
    over row panels where that has few: `CRenderer` `parallel_loops`). In
    the models, kernels alone, 2 threads: ResNet-50's 1x1 convolutions at 14x14 (28 tiles of 7
    rows) 3.7-4.8 -> 3.3-4.1 ms, ConvNeXt-T's 196x384 @ 384x1536 and 196x1536 @ 1536x384 (with
    their epilogues, 9 of each) 20.5 -> 18.2 and 18.1 -> 15.9 ms; ViT's 197 tokens by its 768x768
    projection (25 tiles, which no PANEL of 8, 4 or 2 divides, ran with the tile alone, every row
    tile streaming the weight) 1.56-1.76 -> 1.14-1.24 ms."""
    row_axis = panel_row_axis(tiled)
    if row_axis is None or getattr(renderer, "simd_lanes", 0) < 16:
        return None
    loads = load_strides(tiled.kernel, _reduce_source(tiled.kernel).walk())
    shared = max((_positions_in_one_matmul(tiled.kernel, loads, load) for load in loads if load[row_axis] == 0), default=0)
    if shared < WIDE_VECTOR_PANEL_ELEMENTS:
        return None
    tiles = tiled.kernel.full_shape[row_axis]
    if FEW_ROW_TILES < tiles <= UNDIVIDED_ROW_TILES:
        return Opt("PANEL", row_axis, tiles)
    return panel_opt(tiled)


def panel_opt(tiled: OptimizedKernel) -> Opt | None:
    """PANEL of the row-tile axis of a matmul in panels (`panel_row_axis`): the global axis after
    it, along which the right operand's load moves to the next panel, runs outside the panel."""
    row_axis = panel_row_axis(tiled)
    if row_axis is None:
        return None
    amount = _row_panel(tiled.kernel.full_shape[row_axis])
    return None if amount is None else Opt("PANEL", row_axis, amount)


def _row_panel(tiles: int) -> int | None:
    """Row tiles per PANEL for a matmul of this many: the first of PANEL_ROW_TILES that divides them
    into at least PANEL_MIN_CHUNKS panels, or None."""
    return next((amount for amount in PANEL_ROW_TILES if tiles % amount == 0 and tiles // amount >= PANEL_MIN_CHUNKS), None)


def candidate_opts(optimized: OptimizedKernel, renderer) -> list[Opt]:
    """Every single opt that applies to this kernel now (the moves of BEAM and of random tests)."""
    found = []
    amounts = {"UPCAST": (2, 3, 4, 8, 16, 32), "UNROLL": (2, 4, 8, 16), "BLOCK": (64, 128, 256), "PANEL": (2, 4, 8, 16),
               "LOCAL": (2, 4, 8, 16, 32), "GROUP": (2, 4, 8, 16),
               "THREADS": (1,) + tuple(count for count in (2, 4, 8, 16, 32) if count <= (os.cpu_count() or 1))}
    for op, choices in amounts.items():
        for axis in range(len(optimized.kernel.full_shape)):
            for amount in choices:
                opt = Opt(op, axis, amount)
                try:
                    apply_opt(optimized, opt, renderer)
                except OptError:
                    continue
                found.append(opt)
    return found
