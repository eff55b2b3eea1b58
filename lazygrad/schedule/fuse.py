"""Graph -> kernels: fusion decides where kernels begin and end, and what gets materialized.

The contract (docs/architecture.md):
  * elementwise ops and movement ops never start a kernel of their own: they are inlined into
    every kernel that uses them (recomputed), unless recomputing a value in each of the kernels
    that read it costs more than storing it once (`worth_storing_shared`: an unrolled recurrence's
    state, a residual stream);
  * a reduce joins the kernel of its user when the path between them is elementwise ops and
    reshapes only, and that kernel has no other reduce; otherwise it is stored (also below a cast
    to bfloat16 or a float8: the reduce's kernel keeps float32 stores);
  * a computed value read through an EXPAND inside a reduce is stored first when recomputing it
    for every broadcast copy would cost more than storing it (`worth_storing`);
  * a float value of realized buffers and constants alone with an expensive op, read through an
    EXPAND, is stored (`worth_storing_parameter_value`: a batch norm's per-channel scale);
  * a value read through an EXPAND outside any reduce is stored when recomputing it for every
    broadcast copy costs more than a few ops if it is large (`worth_storing_broadcast`: a max pool's
    gradient per window), more than an exp and a division if it is small (a squeeze-and-excitation
    gate);
  * a padded value read through an EXPAND inside a sum of products (a convolution's padded input,
    however the padding was written) or a reduce over short windows (a pool's) is stored with its
    zeros when it is not small and its last axis is padded too (`worth_storing_padded`), so the
    reduce's loads carry no bounds tests;
  * in a kernel that computes an expensive op at every position, a large cheap part that reads out
    of the kernel's order (a transposed view, interleaved phases) is stored first, and so is an
    expensive value padded along the innermost axis (`_store_out_of_order_reads`): the expensive
    part then runs in a kernel gcc vectorizes;
  * the user's outputs, CONTIGUOUS, ASSIGN, TAKE (an indexed load) and device copies are always
    materialized;
  * kernels without a reduce that have the same shape and read a common buffer, where neither
    needs the other's result, are merged into one kernel with several outputs (`_merge_siblings`);
  * no kernel has more than MAX_KERNEL_BUFFERS buffers: values below one that would read more are
    stored (`_split_wide_kernels`), and merges stay within it.

An ASSIGN's output is written into its target's existing buffer (`ScheduleItem.in_place`) when that is
safe: the target is realized, the kernel reads that buffer only at the element it writes (no reduce,
same view), and every other kernel of the schedule that reads the old contents can run first.
Otherwise it writes a new buffer, which gives the same values. Written in place, `where(c, new,
target)` stores only where c holds (`_guard_in_place_selects`).

`create_schedule` returns ScheduleItems in an order where every input exists before it is read.
A graph of the same structure as one scheduled before (same ops, arguments, dtypes, shapes and
devices, the same sources realized and sharing the same buffers) reuses that schedule: a training
loop plans each step's kernels once, not every step.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from lazygrad.codegen.axes import merge_dims
from lazygrad.codegen.kernel import Kernel, KernelNode
from lazygrad.codegen.linearize import SHORT_WINDOW
from lazygrad.codegen.opts import byte_dot_operands, matmul_tile, steps_along, validity_varies_along
from lazygrad.dependency_order import dependency_order
from lazygrad.dtype import STORAGE_FLOATS, dtypes
from lazygrad.lazy import LazyBuffer, stored_out_of_order
from lazygrad.ops import GATHER, MOVEMENT, REDUCE, Ops
from lazygrad.ops.table import EXPENSIVE
from lazygrad.shape.view import ShapeTracker

WINDOWED_OUTPUTS = 1 << 15  # outputs from which reduces over pooling windows stay apart (_reduces_windows)
MAX_KERNEL_OUTPUTS = 8  # siblings merged into one kernel (each output is a buffer parameter)
# Buffer parameters (outputs and inputs) of one kernel, within what every device takes: OpenCL
# guarantees 1024 bytes of arguments, 128 pointers; ctypes calls take at most 1024. A kernel that would
# read more (the gradient of a bias an unrolled loop adds at every step sums one value per step) is
# split by storing values below it (`_split_wide_kernels`).
MAX_KERNEL_BUFFERS = 128
# Padded inputs of a sum of products with at least this many elements are stored with their zeros
# (`worth_storing_padded`). conv2d 32x16x32x32 by 32x16x3x3, padding 1: 7.0 ms with masked loads,
# 3.1 ms with the copy (0.2 ms); at 8x34x34 (9K elements) the copy measured neither faster nor slower.
PADDED_COPY_MIN_ELEMENTS = 1 << 12
UNPADDED_VECTOR = 8  # lanes of a vector along an unpadded last axis that make a padded view worth keeping
# A value read by several kernels is stored once when recomputing it in each costs more than this
# (op costs as in worth_storing). One step of an LSTM's cell state costs about 95.
SHARED_RECOMPUTE_LIMIT = 64
# ... or when it reads this many buffers of its own size (each kernel would read them all again):
# ViT-B/16's residual stream, never stored, was summed again from its first layer's input in every
# later layer's layer norm and matmul operands (27 layer norms of 197x768: 35 ms of a 320 ms run).
SHARED_RECOMPUTE_BUFFERS = 4
# A value of at least this many elements read through an EXPAND outside a reduce is stored when
# recomputing it costs more than BROADCAST_RECOMPUTE_LIMIT (`worth_storing_broadcast`).
BROADCAST_STORE_MIN_ELEMENTS = 1 << 16
BROADCAST_RECOMPUTE_LIMIT = 8
# A smaller one is stored when recomputing it costs more than this: ONNX's DynamicQuantizeLinear zero
# point (a rounding and clamping of -min / ((max - min) / 255), about 40 ops with two divisions),
# recomputed for each of ResNet-18's 64 x 114 x 114 activations, made that kernel 17 ms, not 0.4.
SMALL_BROADCAST_RECOMPUTE_LIMIT = 32
# ... or when its own ops, above the reduces it reads (stored in any case, being read through an
# EXPAND), cost more than this: a squeeze-and-excitation gate, sigmoid(fc + bias) per channel (about
# 21), recomputed for each position it scales (EfficientNet-B0's 14x14 x 480 gate times SiLU 0.12 ->
# 0.065 ms); it becomes the reduce's epilogue, or a kernel of a few microseconds. A batch norm's or
# layer norm's 1 / sqrt(variance + eps) (about 10) stays inlined, where the compiler hoists it.
SMALL_BROADCAST_OWN_OPS_LIMIT = 16
# Nodes `worth_storing_parameter_value` walks before it gives up (a batch norm's scale is about 10).
PARAMETER_VALUE_MAX_NODES = 64
# Parts this large that read out of order are stored before a kernel that computes an expensive op at
# every position (`_store_out_of_order_reads`).
OUT_OF_ORDER_STORE_MIN_ELEMENTS = 1 << 14
# ... and one that costs more than this (op costs as in worth_storing), which the kernel would compute
# out of its order, is stored whole instead (`_out_of_order_parts`): a sigmoid or SiLU (about 20) of
# a channels-last convolution read NCHW, not a hard swish (about 10, one division), whose gathered
# loop measured as fast as a stored copy at the sizes MobileNetV3 has (74K-89K elements).
OUT_OF_ORDER_WHOLE_MIN_COST = 12
GUARDED = "GUARDED"  # a marker among a node's pending views: a WHERE above zeroes a PAD's padding
# A path's `under_reduce` inside a reduce to one value: its loop runs on one thread, one element at a
# time. A value other kernels read too, of this many elements or more, that costs more than a few ops
# (`worth_storing`) is stored once rather than recomputed there: lazygrad.quantize's max |x| of a
# convolution's output, its int32 sums rescaled, took 0.26 ms for 200 x 16 x 8 x 8, 0.04 reading it.
SERIAL_REDUCE = "SERIAL_REDUCE"
SERIAL_SHARED_STORE_MIN_ELEMENTS = 1 << 14


class ScheduleItem:
    """One step of a schedule: a kernel to run (or a device copy when `kernel` is None). A plain
    class rather than a dataclass: every realize makes one per kernel, and __post_init__ costs."""
    __slots__ = ("kernel", "outputs", "inputs", "in_place")

    def __init__(self, kernel: Kernel | None, outputs: list[LazyBuffer], inputs: list[LazyBuffer],
                 in_place: list[bool] | None = None):
        self.kernel, self.outputs, self.inputs = kernel, outputs, inputs
        # per output: an ASSIGN writing into its target's buffer
        self.in_place = [False] * len(outputs) if not in_place else in_place

    def __repr__(self) -> str:
        return f"ScheduleItem({self.kernel.name if self.kernel else 'COPY'}, outputs={self.outputs}, inputs={self.inputs})"


def _op_cost(node: LazyBuffer) -> int:
    """What an elementwise op costs to recompute: its op's cost (ops/table.py), and for a cast of a
    64-bit integer to a float that of an expensive op, since AVX2 has no vector instruction for it
    (each lane is converted alone: BERT's attention mask, recomputed for every score, made its
    softmax 6x slower)."""
    if node.op is Ops.CAST and node.dtype.is_float and node.srcs[0].dtype == dtypes.int64:
        return EXPENSIVE
    return node.op.cost


def _is_reduce(node: LazyBuffer) -> bool:
    return node.op.kind == REDUCE


@functools.lru_cache(maxsize=1 << 14)
def _read_order(view: ShapeTracker) -> tuple[bool, bool, bool]:
    """How a kernel reads a stored value through `view` (over the kernel's shape), along its innermost
    axis: (gathers: one step other than 0 or 1; interleaves: the step varies, and so do the bounds,
    as through the padding that interleaves a strided gradient's phases; in order: one step of 0 or
    1). A value broadcast over the kernel (a position bias per attention head, the same for every
    window) is none of them: it stays in cache. A step that varies without bounds that do is a
    tiling (a Winograd output's planes): neither either."""
    shape, last = view.shape, len(view.shape) - 1
    every_axis = steps_along(view)
    if any(steps == {0} for steps, size in zip(every_axis, shape) if size > 1):
        return False, False, False
    steps = every_axis[last]
    if len(steps) > 1:
        return False, validity_varies_along(view, shape, last), False
    return not steps & {0, 1}, False, bool(steps & {0, 1})


_SHARED = -1  # a node's reader when the kernels of two or more roots compute it


def _is_product(reduce: LazyBuffer) -> bool:
    return reduce.op is Ops.SUM and reduce.srcs[0].op is Ops.MUL


def _vectorizes_outputs(reduce: LazyBuffer) -> bool:
    """Whether codegen computes vectors of this reduce's outputs together, which bounds tests in its
    loads break up: a sum of products (a register tile) or a reduce over two or more axes each shorter
    than SHORT_WINDOW (a pool's windows, its outputs vectorized inside the window loops)."""
    if _is_product(reduce):
        return True
    sizes = [reduce.srcs[0].shape[axis] for axis in reduce.arg]
    return len(sizes) >= 2 and max(sizes) < SHORT_WINDOW


class _FusionPlan:
    """Finds the set of nodes to materialize, by growing it until every kernel obeys the contract.

    Each sweep visits the nodes once, users before their sources. A node learns from its users
    which root's kernel computes it (or that several do) and along which paths: a path is
    (reshapes only so far, under a reduce, through an EXPAND, under a reduce that
    `_vectorizes_outputs`). Its users are decided by then, so what reaches it is final, and it is
    stored when that breaks the contract; below a stored node its own kernel begins. The costs it weighs
    are counted before the nodes below are decided, and stores there only lower them, except the buffers
    a value read through an EXPAND in a reduce reads (`worth_storing`: a store below can add one). So it
    sweeps again when one of the values a sweep declined to store is worth storing after all, or when
    `_split_wide_kernels` stored values to keep a kernel's buffers few; usually it sweeps once."""

    def __init__(self, outputs: list[LazyBuffer], nodes: list[LazyBuffer]):
        self.materialized: set[int] = {id(node) for node in outputs if not node.realized}
        for node in nodes:
            if node.realized:
                continue
            if node.op in (Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN, Ops.TAKE):
                self.materialized.add(id(node))
            if node.op is Ops.COPY and not node.srcs[0].realized:
                self.materialized.add(id(node.srcs[0]))
        self.nodes = nodes
        self.cheap: set[int] = set()  # values found cheap to recompute (they stay so: stores only add leaves)
        self.in_order_roots: set[int] = set()  # roots whose kernels `_store_out_of_order_reads` has seen
        self._sweep()
        while self._split_wide_kernels() or any(self.worth_storing(node) for node in self.declined) \
                or self._store_out_of_order_reads():
            self._sweep()

    def is_leaf(self, node: LazyBuffer) -> bool:
        return node.realized or id(node) in self.materialized

    def _recompute_cost_exceeds(self, node: LazyBuffer, limit: int, buffer_limit: int | None = None,
                                min_elements: int = 0, above_reduces: bool = False) -> bool:
        """Whether the ops computing `node` from stored values cost more than `limit` (an expensive
        op counts its cost, a movement op nothing), or, with `buffer_limit`, read that many
        stored values of `min_elements` or more; `above_reduces`: only the ops above the reduces
        below it count. Stops as soon as they do."""
        stack, seen, buffers, cost = [node], set(), 0, 0
        while stack:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            if above_reduces and _is_reduce(current):
                continue
            if current is not node and self.is_leaf(current):
                buffers += current.numel() >= min_elements
                if buffer_limit is not None and buffers >= buffer_limit:
                    return True
                continue
            if current.op.is_elementwise:
                cost += _op_cost(current)
                if cost > limit:
                    return True
            stack.extend(current.srcs)
        return False

    def worth_storing(self, node: LazyBuffer) -> bool:
        """Whether a value read through an EXPAND costs more to recompute per copy than to store once:
        it reads two or more buffers, or does more than a few cheap ops."""
        return self._recompute_cost_exceeds(node, 4, buffer_limit=2)

    def worth_storing_parameter_value(self, node: LazyBuffer) -> bool:
        """Whether a value broadcast over a kernel (read through an EXPAND) is computed once into its
        own buffer: a float value with an expensive op that reads only realized buffers and constants
        (a function of parameters: a batch norm's 1 / sqrt(running variance + eps) per channel).
        Inlined, it is recomputed for every element in loop orders where the C compiler cannot hoist
        it (`transposed_read_panel` runs the channels innermost: two batch norms' square roots and
        divisions per element made a ResNet-18 residual addition 1.75x slower there than without
        the PANEL); stored, a jit replay skips its kernel while the parameters are unchanged."""
        if not node.dtype.is_float:  # index arithmetic (an ONNX Gather's negative indices) stays inlined
            return False
        stack, seen, expensive = [node], set(), False
        while stack:
            current = stack.pop()
            if id(current) in seen or current.realized or current.op is Ops.CONST:
                continue
            seen.add(id(current))
            # a parameter's function is a few ops: a longer walk means computed values below, and
            # stopping keeps each sweep linear in the nodes
            if len(seen) > PARAMETER_VALUE_MAX_NODES or (current is not node and id(current) in self.materialized) \
                    or (not current.op.is_elementwise and current.op.kind != MOVEMENT):
                return False
            expensive = expensive or current.op.cost > 1
            stack.extend(current.srcs)
        return expensive

    def worth_storing_broadcast(self, node: LazyBuffer) -> bool:
        """Whether a large value read through an EXPAND outside any reduce is stored: inlined, it is
        recomputed for every broadcast copy. A max pool's gradient per window, as it was computed
        before nn/spatial._first_maximum (the next layer's input gradient, gathered from nine shifted
        views, over the count of maxima), read back for
        each of the nine window positions made ResNet-18's max pool backward 560 ms of a training
        step; stored, it costs 60 ms, and the pool backward 190. Small values (a batch norm's
        per-channel statistics, a layer norm's per-row ones) stay inlined, where a kernel of their
        own costs more than recomputing them: unless that costs more than
        SMALL_BROADCAST_RECOMPUTE_LIMIT, or their own ops above the reduces they read more than
        SMALL_BROADCAST_OWN_OPS_LIMIT."""
        if node.numel() >= BROADCAST_STORE_MIN_ELEMENTS:
            return self._recompute_cost_exceeds(node, BROADCAST_RECOMPUTE_LIMIT)
        return self._recompute_cost_exceeds(node, SMALL_BROADCAST_OWN_OPS_LIMIT, above_reduces=True) \
            or self._recompute_cost_exceeds(node, SMALL_BROADCAST_RECOMPUTE_LIMIT)

    def worth_storing_shared(self, node: LazyBuffer) -> bool:
        """Whether a value that several kernels compute costs more to recompute in each than to store
        once: its ops cost more than SHARED_RECOMPUTE_LIMIT, or it reads SHARED_RECOMPUTE_BUFFERS
        buffers as large as itself. Without this, an unrolled recurrence (an LSTM's cell state) or a
        residual stream would be recomputed from its first step in every step's kernel: the kernels,
        and the time to plan and compile them, would grow with the square of the steps."""
        if id(node) in self.cheap:
            return False
        if self._recompute_cost_exceeds(node, SHARED_RECOMPUTE_LIMIT, SHARED_RECOMPUTE_BUFFERS, node.numel()):
            return True
        self.cheap.add(id(node))
        return False

    @staticmethod
    def worth_storing_padded(pad: LazyBuffer) -> bool:
        """Whether a padded value read through an EXPAND inside a sum of products (a convolution's
        windows of a padded input, a padded matmul operand) or a pool's windows is stored with its
        padding first: read as a view, every load tests its bounds, and gcc then builds each vector
        of a register tile from scalar loads (a pool's windows of a padded view, read through two
        views, also compute every index anew: Inception-v3's 3x3 average pools over 768 channels at
        17x17, 2 threads, 0.72 ms from the view, 0.10 from the stored padding). Small ones keep the
        view, so a small convolution with bias stays one kernel, and so does one padded only
        outside its last axis when that fills vectors (a depthwise convolution's channels-last
        input): a vector along that axis is valid all together or not at all, one test per load.
        Not where the padded value is stored in another order (a convolution's channels-last output
        padded channels first): no vector walks that last axis there, and each scalar a register tile
        broadcasts is tested alone (Inception-v3's 3x1 convolutions over 384 channels at 8x8 read
        their padded input so)."""
        if pad.arg[-1] == (0, 0) and pad.shape[-1] % UNPADDED_VECTOR == 0 and not stored_out_of_order(pad.srcs[0]):
            return False
        return pad.numel() >= PADDED_COPY_MIN_ELEMENTS

    def _split_wide_kernels(self) -> bool:
        """Store values below every kernel that would read more than MAX_KERNEL_BUFFERS - 1 buffers,
        the source reading most first, until it reads few enough. True if it stored any (the next
        sweep then plans around them)."""
        reads: dict[int, set[int]] = {}  # id(node) -> the buffers its kernel reads to compute it
        stored_any = False
        for node in self.nodes:  # sources first
            if node.realized or node.op in (Ops.CONST, Ops.COPY):
                continue
            sources = [src for src in (node.srcs[:1] if node.op in (Ops.CONTIGUOUS, Ops.ASSIGN) else node.srcs)
                       if src.op is not Ops.CONST or src.realized]
            total = self._reads_of(sources, reads)
            while len(total) >= MAX_KERNEL_BUFFERS:
                widest = max((src for src in sources if not self.is_leaf(src)), key=lambda src: len(reads[id(src)]))
                self.materialized.add(id(widest))
                stored_any = True
                total = self._reads_of(sources, reads)
            reads[id(node)] = total
        return stored_any

    def _store_out_of_order_reads(self) -> bool:
        """In a kernel that computes an expensive op (exp2, a division) over at least half its
        positions, store each cheap part that reads out of the kernel's order, and that the
        expensive part uses, as its own kernel first (`_out_of_order_parts`; for a kernel with a
        reduce, in the reduce's loops). gcc vectorizes no loop with a gathered load (a channels-last
        value read channels first), nor a body that linearize expands into copies (the phases of a
        strided convolution's input gradient, interleaved): the whole body, exp2 and all, then ran
        one element at a time. Stored, the cheap part keeps its loop order (a transposed copy gcc
        vectorizes; the phases' copies) and the kernel after it reads everything in order. A U-Net's
        SiLU gradient (a channels-last gradient times the slope at an NCHW input, 8x64x32x32): 1.3-1.7
        ms in one kernel, 0.1 + 0.1 ms as two. Likewise an expensive value padded along the innermost
        axis (a SiLU into a convolution's padded NCHW input) is stored before the padded copy: with
        bounds tests in its loop gcc vectorizes none of it (8x32x64x64: 1.0 ms, now a SiLU in order
        and a copy, about 0.1 ms each). True if it stored any (the next sweep plans around them)."""
        stored_any = False
        for root in self.roots():
            if root.op is Ops.COPY or id(root) in self.in_order_roots:
                continue
            self.in_order_roots.add(id(root))  # a later store below makes its kernel smaller, not worse
            reduce = self.reduce_of_root.get(id(root))
            if reduce is not None:
                value, shape = reduce.srcs[0], reduce.srcs[0].shape
                if self.is_leaf(value):  # a sum of a stored value: nothing computed in its loops
                    continue
            else:
                value, shape = (root.srcs[0] if root.op in (Ops.CONTIGUOUS, Ops.ASSIGN) else root), root.shape
            for node in self._out_of_order_parts(value, shape, mixed_only=reduce is not None):
                if not self.is_leaf(node):
                    self.materialized.add(id(node))
                    stored_any = True
        return stored_any

    def _out_of_order_parts(self, value: LazyBuffer, shape: tuple[int, ...], mixed_only: bool) -> list[LazyBuffer]:
        """Parts of the kernel computing `value` over `shape` to store first, each of
        OUT_OF_ORDER_STORE_MIN_ELEMENTS or more:
          * the cheap sources of its expensive elementwise ops (over at least half the kernel's
            positions) that read a stored value, not broadcast, out of order:
            its index does not step by the same 0 or 1 all along the kernel's innermost axis
            (`steps_along`: it gathers, or its step and bounds vary as through interleaved phases);
          * an expensive value padded along that axis (its bounds tests vary along the loop);
          * beside a source that gathers, a source that reads interleaved phases (a strided
            convolution's input gradient beside a channels-last value: the loop order suits one);
          * an expensive value (costing more than OUT_OF_ORDER_WHOLE_MIN_COST) that the kernel
            would compute out of its own order (a SiLU over a channels-last product, the NCHW view
            above it), whole, in place of the cheap parts below it: the kernel then copies it.
        `mixed_only` (a reduce, whose store is small): only where another value, not broadcast, is read
        in order, as a reduce reading everything in one order gets its loop order from opts
        (`transposed_reduce_tile`: an SE block's pool over a channels-last activation). The views are
        followed as _KernelBuilder does."""
        last, positions = len(shape) - 1, math.prod(shape)
        if not shape or shape[-1] < 2 or positions < OUT_OF_ORDER_STORE_MIN_ELEMENTS:
            return []
        # (gathers, interleaves, expensive) per (node, pending views), sources first, without recursion
        found: dict[tuple, tuple[bool, bool, bool]] = {}
        parts: dict[int, LazyBuffer] = {}
        wholes: dict[int, LazyBuffer] = {}  # expensive values the kernel reads out of order
        in_order = False  # some large stored value is read in order
        stack = [(value, (), None)]
        while stack:
            node, pending, sources = stack.pop()
            key = (id(node), pending)
            if key in found:
                continue
            if node.op is Ops.CONST:
                found[key] = (False, False, False)
            elif node is not value and self.is_leaf(node):
                gathers, interleaves, ordered = _read_order(_view(node.shape, pending))
                in_order = in_order or ordered
                found[key] = (gathers, interleaves, False)
            elif node.op.kind == MOVEMENT or node.op.is_elementwise:
                if sources is None:
                    sources = [(node.srcs[0], pending + ((node.op, node.arg),))] if node.op.kind == MOVEMENT \
                        else [(src, pending) for src in node.srcs]
                    stack.append((node, pending, sources))
                    stack.extend((src, src_pending, None) for src, src_pending in sources if (id(src), src_pending) not in found)
                    continue
                results = [found[(id(src), src_pending)] for src, src_pending in sources]
                source, source_pending = sources[0]
                if node.op is Ops.PAD and results[0][2] and source.numel() >= OUT_OF_ORDER_STORE_MIN_ELEMENTS \
                        and validity_varies_along(_view(source.shape, source_pending), shape, last):
                    # an expensive value padded along the innermost axis: its loads and tests keep gcc
                    # from vectorizing the loop, so it is computed in a kernel of its own
                    parts[id(source)] = source
                    found[key] = results[0][:2] + (False,)
                    continue
                expensive = node.op.is_elementwise and _op_cost(node) > 1 and 2 * node.numel() >= positions
                costly = expensive or any(result[2] for result in results)
                if costly and node.op.is_elementwise and node.numel() >= OUT_OF_ORDER_STORE_MIN_ELEMENTS \
                        and _read_order(_view(node.shape, pending))[0] \
                        and self._recompute_cost_exceeds(node, OUT_OF_ORDER_WHOLE_MIN_COST):
                    wholes[id(node)] = node
                gathering = any(gathers and not interleaves for gathers, interleaves, _ in results)
                for (src, _), (gathers, interleaves, src_costly) in zip(sources, results):
                    if not node.op.is_elementwise or src.numel() < OUT_OF_ORDER_STORE_MIN_ELEMENTS:
                        continue
                    if (costly and (gathers or interleaves) and not src_costly) or (gathering and interleaves and not gathers):
                        parts[id(src)] = src
                found[key] = (any(result[0] for result in results), any(result[1] for result in results), costly)
            else:
                found[key] = (False, False, False)
        if not in_order and mixed_only:
            return []
        below = self._computed_below(list(wholes.values()))
        return [part for part in (parts | wholes).values() if id(part) not in below]

    def _computed_below(self, values: list[LazyBuffer]) -> set[int]:
        """The ids of the nodes that the kernels storing `values` would compute below them."""
        below, stack = set(), [src for value in values for src in value.srcs]
        while stack:
            node = stack.pop()
            if id(node) not in below and not self.is_leaf(node):
                below.add(id(node))
                stack.extend(node.srcs)
        return below

    def _reads_of(self, sources: list[LazyBuffer], reads: dict[int, set[int]]) -> set[int]:
        """The buffers a kernel reads to compute these sources: a stored one is one buffer."""
        total: set[int] = set()
        for src in sources:
            if self.is_leaf(src):
                total.add(id(src))
            elif len(sources) == 1:
                return reads[id(src)]  # shared, not copied: a chain of unary ops reads one set
            else:
                total |= reads[id(src)]
        return total

    def roots(self) -> list[LazyBuffer]:
        return [node for node in self.nodes if not node.realized and id(node) in self.materialized]

    def _sweep(self) -> None:
        """Decide every node once, users first (see the class)."""
        self.reduce_of_root: dict[int, LazyBuffer] = {}  # id(root) -> the reduce that joins its kernel
        self.readers: dict[int, int] = {}     # id(node) -> id of the root whose kernel computes it, or _SHARED
        self.paths: dict[int, set[tuple]] = {}  # id(node) -> the paths that reach it (see the class)
        self.declined: list[LazyBuffer] = []  # values read through an EXPAND in a reduce, not stored
        for node in reversed(self.nodes):
            if node.realized:
                continue
            if id(node) in self.materialized:
                self._start_kernel(node)
                continue
            reader = self.readers.get(id(node))
            if reader is None:  # below nothing this schedule computes (an unrealized ASSIGN target)
                continue
            paths = self.paths.pop(id(node))
            if self._breaks_contract(node, reader, paths):
                self.materialized.add(id(node))
                self._start_kernel(node)
                continue
            for src, path in self._source_paths(node, paths):
                self._reach(src, reader, path)

    def _start_kernel(self, root: LazyBuffer) -> None:
        """Pass a stored node's own kernel down to its sources: from the stored value (CONTIGUOUS,
        ASSIGN), from below its reduce, or from the node itself."""
        if root.op is Ops.COPY:
            return
        if root.op in (Ops.CONTIGUOUS, Ops.ASSIGN):
            self._reach(root.srcs[0], id(root), (True, False, False, False))
            return
        if _is_reduce(root):
            self.reduce_of_root[id(root)] = root
        for src, path in self._source_paths(root, {(True, False, False, False)}):
            self._reach(src, id(root), path)

    def _reach(self, node: LazyBuffer, reader: int, path: tuple) -> None:
        """Record that `reader`'s kernel computes `node` along `path` (nothing for a leaf)."""
        if node.realized or node.op is Ops.CONST or id(node) in self.materialized:
            return
        known = self.readers.get(id(node))
        if known is None:
            self.readers[id(node)] = reader
            self.paths[id(node)] = {path}
            return
        if known != reader:
            self.readers[id(node)] = _SHARED
        self.paths[id(node)].add(path)

    @staticmethod
    def _source_paths(node: LazyBuffer, paths: set[tuple]) -> list[tuple[LazyBuffer, tuple]]:
        """The paths on from a node computed in the kernel to its sources."""
        if _is_reduce(node):  # the kernel's one reduce: its source runs in the reduce loop
            under = SERIAL_REDUCE if node.numel() == 1 else True
            return [(node.srcs[0], (False, under, False, _vectorizes_outputs(node)))]
        if node.op is Ops.TAKE:  # (it starts its kernel) a reduce below it is stored, not fused
            return [(src, (False,) + path[1:]) for src in node.srcs for path in paths]
        if node.op.kind == MOVEMENT:
            return [(node.srcs[0], (reshapes_only and node.op is Ops.RESHAPE, under_reduce,
                                    through_expand or node.op is Ops.EXPAND, under_tiled_reduce))
                    for reshapes_only, under_reduce, through_expand, under_tiled_reduce in paths]
        if node.op is Ops.CAST and node.dtype in STORAGE_FLOATS:
            # a reduce below is stored in float32 and converted by a kernel of its own: a register
            # tile writes its sums as float vectors, which a conversion per element would break up
            # (a bfloat16 matmul of 1024 ran 16x slower than float32's in one kernel)
            return [(node.srcs[0], (False,) + path[1:]) for path in paths]
        return [(src, path) for src in node.srcs for path in paths]

    def _breaks_contract(self, node: LazyBuffer, reader: int, paths: set[tuple]) -> bool:
        """Whether `node`, computed by `reader`'s kernel (or several) along `paths`, must be stored
        instead. A reduce that may join the kernel is claimed for it."""
        if _is_reduce(node):
            if reader == _SHARED or any(not reshapes_only or under_reduce
                                        for reshapes_only, under_reduce, _, _ in paths):
                return True
            return self.reduce_of_root.setdefault(reader, node) is not node
        if node.op.is_elementwise:
            if any(under_reduce and through_expand for _, under_reduce, through_expand, _ in paths):
                if self.worth_storing(node):
                    return True
                self.declined.append(node)
            elif any(through_expand for _, _, through_expand, _ in paths) \
                    and (self.worth_storing_parameter_value(node) or self.worth_storing_broadcast(node)):
                return True
            if reader == _SHARED and node.numel() >= SERIAL_SHARED_STORE_MIN_ELEMENTS \
                    and any(under_reduce is SERIAL_REDUCE for _, under_reduce, _, _ in paths) and self.worth_storing(node):
                return True
            return reader == _SHARED and self.worth_storing_shared(node)
        if node.op is Ops.PAD:
            return any(under_reduce and through_expand and under_tiled_reduce for _, under_reduce, through_expand,
                       under_tiled_reduce in paths) and self.worth_storing_padded(node)
        return False


@functools.lru_cache(maxsize=1 << 14)
def _view(shape: tuple[int, ...], pending: tuple) -> ShapeTracker:
    """A node of `shape` read through the pending views (the outermost first), as one tracker. Cached:
    the kernels of an unrolled loop load many buffers of one shape through the same views."""
    tracker = ShapeTracker.from_shape(shape)
    for op, arg in reversed(pending):
        if op != GUARDED:
            tracker = tracker.apply(op, arg)
    return tracker


class _KernelBuilder:
    """Builds the AST of one kernel, pushing movement ops down to the loads as views. Several roots
    (siblings without a reduce, see _merge_siblings) share one builder, so a value or a load they
    have in common is computed once."""

    def __init__(self, roots: list[LazyBuffer], plan: _FusionPlan):
        self.roots, self.plan = roots, plan
        self.inputs: list[LazyBuffer] = []
        self.input_numbers: dict[int, int] = {}  # id(input) -> its buffer number
        self.memo: dict[tuple, KernelNode] = {}
        self.reduce = plan.reduce_of_root.get(id(roots[0]))
        assert self.reduce is None or len(roots) == 1, "a kernel with a reduce has one output"

    def build(self) -> tuple[Kernel, list[LazyBuffer]]:
        first = self.roots[0]
        if self.reduce is not None:
            full_shape, axes, out_shape = self.reduce.srcs[0].shape, self.reduce.arg, self.reduce.shape
        else:
            full_shape, axes, out_shape = first.shape, (), first.shape
        stores = []
        for number, root in enumerate(self.roots):
            value_node, top = (root.srcs[0], False) if root.op in (Ops.CONTIGUOUS, Ops.ASSIGN) else (root, True)
            pending = ((Ops.RESHAPE, out_shape),) if root.shape != out_shape else ()
            value = self.node(value_node, pending, top=top)
            store_view = ShapeTracker.from_shape(root.shape).reshape(out_shape)
            stores.append(KernelNode.make(Ops.STORE, root.dtype, (value,), (number, store_view)))
        ast = KernelNode.make(Ops.SINK, None, tuple(stores))
        dtypes = tuple(root.dtype for root in self.roots) + tuple(buffer.dtype for buffer in self.inputs)
        return Kernel(ast, tuple(full_shape), tuple(axes), dtypes), self.inputs

    def _needs_guard(self, node: LazyBuffer, pending: tuple) -> bool:
        """Whether the values below a PAD need one WHERE to be zero in its padding: some op there
        does not keep zero (exp(0) is 1), or some leaf is read the same at every position of a
        padded dim (a per-channel statistic), whose bounds the WHERE then makes unneeded. Else the
        masked loads alone give zeros there."""
        stack, seen = [(node, pending)], set()
        while stack:
            node, pending = stack.pop()
            if (id(node), pending) in seen:
                continue
            seen.add((id(node), pending))
            if self.plan.is_leaf(node) or node.op is Ops.CONST:
                tracker = _view(node.shape, pending)
                if tracker.without_broadcast_mask() != tracker:
                    return True
            elif node.op.kind == MOVEMENT:
                stack.append((node.srcs[0], pending + ((node.op, node.arg),)))
            elif not node.op.keeps_zero:
                return True
            else:
                stack.extend((src, pending) for src in node.srcs)
        return False

    def _padded_source(self, node: LazyBuffer, pending: tuple) -> tuple[LazyBuffer, tuple]:
        """A PAD reads its source through the padding. Where the source needs it (`_needs_guard`),
        the source is computed as if unpadded (`GUARDED` among its pending views) and `_make` puts
        one WHERE above it that zeroes the padding; below it a leaf drops its bounds on the dims it
        does not move along, so a per-channel value is loaded once per channel instead of tested per
        element (MobileNetV2's padded BatchNorm outputs). Loads that could leave their buffer keep
        theirs."""
        inner = pending + ((Ops.PAD, node.arg),)
        if self._needs_guard(node.srcs[0], inner):
            inner += ((GUARDED, None),)
        return node.srcs[0], inner

    def _sources(self, node: LazyBuffer, pending: tuple, top: bool) -> list[tuple[LazyBuffer, tuple]]:
        """The (source, pending views) pairs whose ASTs make this node's, in the order `_make` reads them."""
        if (not top and self.plan.is_leaf(node)) or node.op is Ops.CONST:
            return []
        kind = node.op.kind
        if node.op is Ops.PAD:
            return [self._padded_source(node, pending)]
        if kind == MOVEMENT:
            return [(node.srcs[0], pending + ((node.op, node.arg),))]
        if kind in (REDUCE, GATHER):  # a reduce or TAKE reads its sources in its own loops, unmoved
            return [(src, ()) for src in node.srcs]
        return [(src, pending) for src in node.srcs]

    def node(self, node: LazyBuffer, pending: tuple, top: bool = False) -> KernelNode:
        """The AST of `node` read through the `pending` views. Sources are built before their users
        from an explicit stack, in the order a recursive descent would visit them (which numbers the
        inputs): a fused elementwise chain can be thousands of ops deep."""
        stack = [(node, pending, top, None)]
        while stack:
            current, current_pending, current_top, sources = stack.pop()
            key = (id(current), current_pending)
            if key in self.memo:
                continue
            if sources is None:
                sources = self._sources(current, current_pending, current_top)
                stack.append((current, current_pending, current_top, sources))
                for src, src_pending in reversed(sources):
                    if (id(src), src_pending) not in self.memo:
                        stack.append((src, src_pending, False, None))
                continue
            values = [self.memo[(id(src), src_pending)] for src, src_pending in sources]
            self.memo[key] = self._make(current, current_pending, current_top, sources, values)
        return self.memo[(id(node), pending)]

    def _make(self, node: LazyBuffer, pending: tuple, top: bool, sources: list, values: list) -> KernelNode:
        """This node's AST from its sources' (`_sources`, built already: `values`)."""
        guarded = (GUARDED, None) in pending  # a PAD above zeroes its padding with a WHERE
        if not top and self.plan.is_leaf(node):
            number = self.input_numbers.get(id(node))
            if number is None:
                number = self.input_numbers[id(node)] = len(self.roots) + len(self.inputs)
                self.inputs.append(node)
            tracker = _view(node.shape, pending)
            if guarded:
                tracker = tracker.without_broadcast_mask()
            return KernelNode.make(Ops.LOAD, node.dtype, (), (number, tracker))
        if node.op is Ops.CONST:
            tracker = _view(node.shape, pending)
            if guarded:
                tracker = tracker.without_broadcast_mask()
            has_mask = any(view.mask is not None for view in tracker.views)
            return KernelNode.make(Ops.CONST, node.dtype, (), (node.arg, tracker if has_mask else None))
        kind = node.op.kind
        if node.op is Ops.PAD:
            source, inner = sources[0]
            if inner[-1][0] != GUARDED:
                return values[0]
            valid = KernelNode.make(Ops.VALID, dtypes.bool, (), _view(source.shape, inner[:-1]))
            zero = KernelNode.make(Ops.CONST, node.dtype, (), (node.dtype.np_type(0).item(), None))
            return KernelNode.make(Ops.WHERE, node.dtype, (valid, values[0], zero))
        if kind == MOVEMENT:
            return values[0]
        if kind == REDUCE:
            assert node is self.reduce and all(op is Ops.RESHAPE for op, _ in pending), "fusion plan broken"
            return KernelNode.make(node.op, node.dtype, tuple(values), node.arg)
        if kind == GATHER:  # stored, so at the top of its kernel: the source's views keep its last axis
            assert top and not pending, "fusion plan broken"
            return KernelNode.make(node.op, node.dtype, tuple(values), node.srcs[0].shape[-1])
        return KernelNode.make(node.op, node.dtype, tuple(values), node.arg)


_SCHEDULES: dict[tuple, list[tuple]] = {}  # graph structure -> items as positions in its walk
SCHEDULE_CACHE_LIMIT = 4096


def walk_with_structure(outputs: list[LazyBuffer]) -> tuple[list[LazyBuffer], tuple]:
    """walk(outputs), and a hashable description of that graph which determines its schedule, in
    one pass (this runs for every realize, so it is one loop, not a walk and then a second pass).

    The order is exactly lazy.walk's: sources before users, depth first, in order. The description
    is (a flat tuple of the nodes in that order, the outputs' positions). Flat because building a
    tuple per node costs more than the rest of the walk; it still reads back unambiguously:
      * an unrealized node is its op (a str), then its hash-consing key without its sources' ids
        (a tuple: argument as compared, dtype, shape, device), then one int per source: its position;
      * a realized node is one tuple (dtype, shape, device, position of the first node holding the
        same buffer), so ints only ever follow an unrealized node;
      * a broadcast constant made by LazyBuffer.const, none of whose nodes is realized or shared with
        an earlier part of the walk, is one tuple ("CONSTANT", value, dtype, shape, device) standing
        for its CONST, RESHAPE and EXPAND nodes (which it determines), placed in that order."""
    position: dict[int, int] = {}  # id(node) -> its index in `order`, once its sources are placed
    order: list[LazyBuffer] = []
    described = []
    first_holder: dict[int, int] = {}  # id(buffer) -> position of the first realized node holding it
    for root in outputs:
        if id(root) in position:
            continue
        # a node is on the stack at most once and only until it is placed: a source reached again
        # is either placed already or an ancestor of itself, which a DAG does not have
        stack = [(root, iter(root.srcs))]
        while stack:
            node, sources = stack[-1]
            for src in sources:
                if id(src) in position:
                    continue
                if src._constant is not None:
                    # a broadcast constant (LazyBuffer.const: CONST, RESHAPE, EXPAND), placed in one
                    # step and described by one entry, which determines its nodes, when none of them
                    # is realized or placed already (a CONST shared with another constant)
                    description, chain = src._constant
                    fresh = True
                    for link in chain:
                        if link.buffer is not None or id(link) in position:
                            fresh = False
                            break
                    if fresh:
                        for link in chain:
                            position[id(link)] = len(order)
                            order.append(link)
                        described.append(description)
                        continue
                stack.append((src, iter(src.srcs)))
                break
            else:
                stack.pop()
                index = len(order)
                position[id(node)] = index
                order.append(node)
                if node.buffer is None:
                    key = node._key  # (op, (argument as compared, dtype, shape, device), sources' ids...)
                    described.append(key[0])
                    described.append(key[1])
                    for src in node.srcs:
                        described.append(position[id(src)])
                else:
                    holder = first_holder.setdefault(id(node.buffer), index)
                    described.append((node.dtype, node.shape, node.device, holder))
    output_positions = tuple([position[id(node)] for node in outputs])
    return order, (tuple(described), output_positions)


def _items_at(cached: list[tuple], nodes: list[LazyBuffer]) -> list[ScheduleItem]:
    """The remembered items with the nodes of this walk at their positions (loops, not list
    comprehensions: each comprehension is a function call, and these lists hold one or two nodes)."""
    items = []
    for kernel, output_positions, input_positions, in_place in cached:
        outputs = []
        for index in output_positions:
            outputs.append(nodes[index])
        inputs = []
        for index in input_positions:
            inputs.append(nodes[index])
        items.append(ScheduleItem(kernel, outputs, inputs, list(in_place)))
    return items


def create_schedule(outputs: list[LazyBuffer], walked: tuple[list[LazyBuffer], tuple] | None = None) -> list[ScheduleItem]:
    """The kernels (and copies) that realize `outputs`, in dependency order. `walked`: what
    walk_with_structure(outputs) returned, where the caller walked the graph already."""
    nodes, key = walk_with_structure(outputs) if walked is None else walked
    cached = _SCHEDULES.get(key)
    if cached is not None:
        return _items_at(cached, nodes)
    items = _plan_schedule(outputs, nodes)
    position = {id(node): index for index, node in enumerate(nodes)}
    if len(_SCHEDULES) >= SCHEDULE_CACHE_LIMIT:
        _SCHEDULES.clear()
    _SCHEDULES[key] = [(item.kernel, [position[id(node)] for node in item.outputs],
                        [position[id(node)] for node in item.inputs], tuple(item.in_place)) for item in items]
    return items


def memoized_schedule(walked: tuple[list[LazyBuffer], tuple]) -> list[ScheduleItem] | None:
    """The schedule of the walked graph (walk_with_structure's nodes and key) if a graph of the same
    structure was scheduled before, else None (and nothing is planned): the engine's fast path for a
    loop realizing the same ops each step."""
    nodes, key = walked
    cached = _SCHEDULES.get(key)
    return None if cached is None else _items_at(cached, nodes)


def _plan_schedule(outputs: list[LazyBuffer], nodes: list[LazyBuffer]) -> list[ScheduleItem]:
    plan = _FusionPlan(outputs, nodes)
    items = []
    for root in plan.roots():
        if root.op is Ops.COPY:
            items.append(ScheduleItem(None, [root], [root.srcs[0]]))
            continue
        kernel, inputs = _KernelBuilder([root], plan).build()
        items.append(ScheduleItem(kernel, [root], inputs))
    items = _merge_siblings(_chain_reduces(items), plan)
    written: set[int] = set()
    for item in items:
        for number, output in enumerate(item.outputs):
            if output.op is Ops.ASSIGN and _can_write_in_place(item, number) and id(output.srcs[1].buffer) not in written:
                item.in_place[number] = True
                written.add(id(output.srcs[1].buffer))
    return _guard_in_place_selects(_order(items))


def _guard_in_place_selects(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """Each ASSIGN written in place whose value is `where(c, new, target)` (a KV cache's row put at a
    position held in a tensor, `x[mask] = v`) stores only where c holds (`Kernel.with_guarded_store`):
    the kernel writes the elements that change instead of reading and writing them all. Runs once
    the order is final, as that may still make a write out of place."""
    for item in items:
        for number, (output, in_place) in enumerate(zip(item.outputs, item.in_place)):
            if not in_place:
                continue
            target = output.srcs[1].buffer
            for index, node in enumerate(item.inputs):
                if node.realized and node.buffer is target:
                    guarded = item.kernel.with_guarded_store(number, len(item.outputs) + index)
                    item.kernel = guarded or item.kernel
    return items


def _is_reduce_kernel(item: ScheduleItem | None) -> bool:
    return item is not None and item.kernel is not None and bool(item.kernel.reduce_axes)


def _reads_only_per_position(reader: ScheduleItem, source: ScheduleItem) -> bool:
    """Whether `reader` reads each of source's outputs only at the output position it computes
    (broadcast along the reduce axes), the loops of both being the same."""
    kernel = reader.kernel
    views = {}
    for number, output in enumerate(source.outputs):
        stored = source.kernel.stores[number].arg[1]
        views[id(output)] = (stored, stored.expand(kernel.full_shape))
    for node in kernel.ast.walk():
        if node.op is Ops.LOAD:
            loaded = reader.inputs[node.arg[0] - len(reader.outputs)]
            if id(loaded) in views and node.arg[1] not in views[id(loaded)]:
                return False
    return True


def _renumbered(ast: KernelNode, numbers: dict[int, int], replacements: dict[int, KernelNode]) -> KernelNode:
    """The AST with buffer numbers mapped through `numbers`, and each load of a buffer number in
    `replacements` replaced by that value."""
    rebuilt: dict[KernelNode, KernelNode] = {}
    for node in ast.walk():
        if node.op is Ops.LOAD and node.arg[0] in replacements:
            rebuilt[node] = replacements[node.arg[0]]
            continue
        arg = (numbers[node.arg[0]], node.arg[1]) if node.op in (Ops.LOAD, Ops.STORE) else node.arg
        rebuilt[node] = KernelNode.make(node.op, node.dtype, tuple(rebuilt[src] for src in node.srcs), arg)
    return rebuilt[ast]


def _reduces_windows(kernel: Kernel) -> bool:
    """Whether the kernel reduces pooling windows over many outputs: two or more reduce axes, each
    shorter than codegen's SHORT_WINDOW, and at least WINDOWED_OUTPUTS outputs. Alone, such a reduce
    runs its outputs inside the window loops, vectorized (linearize.choose_inner_axes), which a
    kernel of several reduces cannot: a max pool's first maximum per window (its maximum, then the
    first position holding it, then that element: three reduces over 3x3 windows, 16x64x56x56
    outputs, 2 threads) took 55 ms as one kernel, 5 as three. Over fewer outputs one kernel costs
    less than three launches (the digits demo, whose pools have 32x16x4x4 outputs: 1865 launches an
    epoch chained, 1953 apart, and about 5% more images a second)."""
    sizes = [kernel.full_shape[axis] for axis in kernel.reduce_axes]
    outputs = math.prod(size for axis, size in enumerate(kernel.full_shape) if axis not in kernel.reduce_axes)
    return len(sizes) >= 2 and max(sizes) < SHORT_WINDOW and outputs >= WINDOWED_OUTPUTS


def _fits_one_kernel(source: ScheduleItem, reader: ScheduleItem) -> bool:
    """Whether `_chained(source, reader)` has at most MAX_KERNEL_BUFFERS buffers."""
    inputs = {id(node) for node in source.inputs} | {id(node) for node in reader.inputs}
    inputs -= {id(node) for node in source.outputs}
    return len(source.outputs) + len(reader.outputs) + len(inputs) <= MAX_KERNEL_BUFFERS


def _chained(source: ScheduleItem, reader: ScheduleItem) -> ScheduleItem:
    """One kernel computing source's reduces, then reader's, which uses their values by name."""
    outputs = source.outputs + reader.outputs
    inputs = list(source.inputs)
    for node in reader.inputs:
        if all(node is not other for other in inputs + source.outputs):
            inputs.append(node)
    position = {id(node): len(outputs) + index for index, node in enumerate(inputs)}
    source_numbers = {number: number for number in range(len(source.outputs))}
    source_numbers.update({len(source.outputs) + index: position[id(node)] for index, node in enumerate(source.inputs)})
    source_stores = [_renumbered(store, source_numbers, {}) for store in source.kernel.stores]
    stored_value = {id(output): store.srcs[0] for output, store in zip(source.outputs, source_stores)}
    reader_numbers = {0: len(source.outputs)}
    replacements = {}  # reader's loads of source's results -> the values source stores
    for index, node in enumerate(reader.inputs):
        number = len(reader.outputs) + index
        if id(node) in position:
            reader_numbers[number] = position[id(node)]
        else:
            replacements[number] = stored_value[id(node)]
    reader_store = _renumbered(reader.kernel.stores[0], reader_numbers, replacements)
    ast = KernelNode.make(Ops.SINK, None, tuple(source_stores) + (reader_store,))
    dtypes = tuple(node.dtype for node in outputs + inputs)
    kernel = Kernel(ast, reader.kernel.full_shape, reader.kernel.reduce_axes, dtypes)
    return ScheduleItem(kernel, outputs, inputs)


def _chain_reduces(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """Reduce kernels with the same loops (full shape and reduce axes) become one kernel that runs
    each reduce in turn over the same rows, storing every result:
      * a reduce that reads another's results only at the position it computes (broadcast along
        the reduce axes) runs after it and uses its value: softmax's row max and its sum of
        exponentials are one kernel, and so are layernorm's mean and variance. Not done when the
        reader also needs those results through another kernel (it would have to run in between);
      * reduces that read a common buffer and need nothing from each other run side by side (a
        row's sum and its sum of squares).
    Neither is done for a product that gets a register tile on its own (`_gets_register_tile`; for
    a chain, a sum of products of two loads, `_tiled_product`), which a kernel of several reduces has
    no tile for: the Q, K and V projections of one input side by side; ResNet-50's unstrided 1x1
    projection chained after the 1x1 convolution it is added to.
    At most MAX_KERNEL_OUTPUTS results per kernel."""
    original, items = items, list(items)
    producer = {id(item.outputs[0]): index for index, item in enumerate(items)}
    needs = [{producer[id(node)] for node in item.inputs if id(node) in producer} for item in items]
    readers: dict[tuple, int] = {}  # (loops, an input's id) -> the bit set of the reduce kernels reading it
    ancestors: list[int] = []  # per item, the bit set of the items it needs, directly or not
    for item_needs in needs:
        bits = 0
        for source in item_needs:
            bits |= (1 << source) | ancestors[source]
        ancestors.append(bits)

    def reaches(start: int, goal: int) -> bool:
        return start == goal or bool(ancestors[start] >> goal & 1)

    def partner(index: int, item: ScheduleItem) -> int | None:
        """An earlier reduce kernel this one can join, or None."""
        loops = (item.kernel.full_shape, item.kernel.reduce_axes)
        for source_index in sorted(needs[index]) if not _tiled_product(item.kernel) else ():
            source = items[source_index]  # a reduce whose result this one reads
            if _is_reduce_kernel(source) and (source.kernel.full_shape, source.kernel.reduce_axes) == loops \
                    and not _tiled_product(source.kernel) \
                    and not _reduces_windows(item.kernel) \
                    and len(source.outputs) < MAX_KERNEL_OUTPUTS and _fits_one_kernel(source, item) \
                    and _reads_only_per_position(item, source) \
                    and not any(reaches(other, source_index) for other in needs[index] if other != source_index):
                return source_index
        siblings = 0  # reduces reading a buffer this one reads, which this one does not need
        for node in item.inputs:
            siblings |= readers.get(loops + (id(node),), 0)
        siblings &= ~ancestors[index]
        if not siblings or _gets_register_tile(item.kernel):
            return None
        while siblings:  # the earliest first
            sibling_index = (siblings & -siblings).bit_length() - 1
            siblings &= siblings - 1
            sibling = items[sibling_index]
            if len(sibling.outputs) < MAX_KERNEL_OUTPUTS and _fits_one_kernel(sibling, item) \
                    and not _gets_register_tile(sibling.kernel):
                return sibling_index
        return None

    def merge(source_index: int, index: int) -> None:
        """Item `index` absorbed item `source_index`: whatever needed either needs it now."""
        needs[index] = (needs[index] | needs[source_index]) - {source_index}
        ancestors[index] = (ancestors[index] | ancestors[source_index]) & ~(1 << source_index)
        for other, other_needs in enumerate(needs):
            if other == index or items[other] is None:
                continue
            if source_index in other_needs:
                other_needs.discard(source_index)
                other_needs.add(index)
            if ancestors[other] >> source_index & 1 or ancestors[other] >> index & 1:
                ancestors[other] |= (1 << index) | ancestors[index]
        for key, bits in readers.items():
            if bits >> source_index & 1:
                readers[key] = bits & ~(1 << source_index) | (1 << index)

    for index, item in enumerate(items):
        if not _is_reduce_kernel(item) or len(item.outputs) != 1:
            continue
        source_index = partner(index, item)
        if source_index is None:
            for node in item.inputs:
                key = (item.kernel.full_shape, item.kernel.reduce_axes, id(node))
                readers[key] = readers.get(key, 0) | (1 << index)
            continue
        items[index], items[source_index] = _chained(items[source_index], item), None
        merge(source_index, index)
        for node in items[index].inputs:
            key = (item.kernel.full_shape, item.kernel.reduce_axes, id(node))
            readers[key] = readers.get(key, 0) | (1 << index)
    chained = [item for item in items if item is not None]
    order = _dependency_order(chained, extra_needs=None)  # a merged kernel runs where its later part did
    return original if order is None else [chained[index] for index in order]


@functools.lru_cache(maxsize=1 << 12)
def _gets_register_tile(kernel: Kernel) -> bool:
    """Whether the default opts give this one-reduce kernel a matmul's register tile. Merged side by
    side with another reduce it would have none: three projections of one input (attention's Q, K
    and V) ran at 2 GFLOP/s as one kernel, against a tile's 40 or more each. So too int32 sums of
    uint8 by int8 products, which get VNNI's tile or loops of their own (codegen/opts.py byte_dot_tile,
    byte_dot_product): a quantized ResNet-50's 1x1 convolution chained after the projection it is
    added to ran at 11 GOP/s, 25 ms, against 500-1000 GOP/s apart."""
    return bool(matmul_tile(merge_dims(kernel))) or byte_dot_operands(kernel) is not None


def _tiled_product(kernel: Kernel) -> bool:
    """Whether every reduce of the kernel sums products of two loads (a matmul, a convolution) and
    the default opts give it a register tile. A softmax's sum or a variance, which a tile may fit
    too (a broadcast mask or mean stays put along an axis), chains as before."""
    if byte_dot_operands(kernel) is not None:
        return True
    reduces = [node for node in kernel.ast.walk() if node.is_reduce]
    return all(node.op is Ops.SUM and node.srcs[0].op is Ops.MUL
               and all(src.op is Ops.LOAD for src in node.srcs[0].srcs) for node in reduces) \
        and _gets_register_tile(kernel)


def _mergeable(item: ScheduleItem) -> bool:
    return item.kernel is not None and not item.kernel.reduce_axes and item.outputs[0].numel() > 0


@dataclass
class _Siblings:
    """Kernels to merge into one: their positions in the schedule, the buffers their ASSIGNs would
    overwrite, and the buffers they read at other elements than the one each thread writes."""
    members: list[int]
    targets: set[int]
    shifted_reads: set[int]
    inputs: set[int]  # ids of the nodes the members read

    def admits(self, targets: set[int], shifted_reads: set[int], inputs: set[int]) -> bool:
        """Whether one more member keeps every ASSIGN of the group able to write in place (no
        thread may read an overwritten buffer at another thread's element) and the merged kernel's
        buffers within MAX_KERNEL_BUFFERS."""
        return len(self.members) < MAX_KERNEL_OUTPUTS and not targets & self.shifted_reads \
            and not self.targets & shifted_reads \
            and len(self.members) + 1 + len(self.inputs | inputs) <= MAX_KERNEL_BUFFERS


def _buffer_accesses(item: ScheduleItem) -> tuple[set[int], set[int]]:
    """(the realized buffers a one-output kernel's ASSIGN overwrites, the realized buffers it reads
    through another view than its store's)."""
    output = item.outputs[0]
    targets = {id(output.srcs[1].buffer)} if output.op is Ops.ASSIGN and output.srcs[1].realized else set()
    store_view = item.kernel.stores[0].arg[1]
    shifted = set()
    for node in item.kernel.ast.walk():
        if node.op is Ops.LOAD and node.arg[1] != store_view:
            source = item.inputs[node.arg[0] - 1]
            if source.realized:
                shifted.add(id(source.buffer))
    return targets, shifted


def _merge_siblings(items: list[ScheduleItem], plan: _FusionPlan) -> list[ScheduleItem]:
    """Elementwise kernels of the same shape that read a common buffer, where neither needs the
    other's result, become one kernel with several outputs: the shared loads and the arithmetic
    they have in common run once, and one launch replaces several (an optimizer's update of a
    parameter and of its state tensors is one kernel). A merge that would stop an ASSIGN from
    writing in place is not made."""
    producer = {id(output): index for index, item in enumerate(items) for output in item.outputs}
    groups: list[_Siblings] = []
    readers: dict[tuple, list[_Siblings]] = {}  # (shape, an input's id) -> groups of kernels reading it
    depends_on: list[int] = []  # per item, the bit set of the items it needs, directly or not
    for index, item in enumerate(items):  # items are in dependency order
        needed = 0
        for node in item.inputs:
            source = producer.get(id(node))
            if source is not None:
                needed |= (1 << source) | depends_on[source]
        depends_on.append(needed)
        if not _mergeable(item):
            groups.append(_Siblings([index], set(), set(), set()))
            continue
        shape = item.outputs[0].shape
        targets, shifted_reads = _buffer_accesses(item)
        candidates = (group for node in item.inputs for group in readers.get((shape, id(node)), ()))
        inputs = {id(node) for node in item.inputs}
        group = next((group for group in candidates if group.admits(targets, shifted_reads, inputs)
                      and not any(needed >> member & 1 for member in group.members)), None)
        if group is None:
            group = _Siblings([], set(), set(), set())
            groups.append(group)
        group.members.append(index)
        group.targets |= targets
        group.shifted_reads |= shifted_reads
        group.inputs |= inputs
        for node in item.inputs:
            keyed = readers.setdefault((shape, id(node)), [])
            if all(other is not group for other in keyed):
                keyed.append(group)
    if len(groups) == len(items):
        return items
    merged = []
    for group in groups:
        if len(group.members) == 1:
            merged.append(items[group.members[0]])
            continue
        roots = [items[index].outputs[0] for index in group.members]
        kernel, inputs = _KernelBuilder(roots, plan).build()
        merged.append(ScheduleItem(kernel, roots, inputs))
    # The checks above see each kernel's own dependencies, but a merged kernel waits for everything
    # its members wait for, which in rare graphs closes a cycle through a third kernel. The plain
    # kernels are always acyclic, so such a schedule keeps them.
    return merged if _dependency_order(merged, extra_needs=None) is not None else items


def _can_write_in_place(item: ScheduleItem, number: int) -> bool:
    """Whether output `number`, an ASSIGN, may overwrite its target: each thread reads the target's
    buffer only at the element it writes, so no thread sees another's result."""
    target = item.outputs[number].srcs[1]
    if not target.realized or target.numel() == 0:
        return False
    store_view = item.kernel.stores[number].arg[1]
    for node in item.kernel.ast.walk():
        if node.op is Ops.LOAD and item.inputs[node.arg[0] - len(item.outputs)].buffer is target.buffer:
            if item.kernel.reduce_axes or node.arg[1] != store_view:
                return False
    return True


def _dependency_order(items: list[ScheduleItem], extra_needs) -> list[int] | None:
    """Positions of items with every item after those it needs (its inputs' producers, and
    `extra_needs[index]` when given); the lowest position first among ready ones. None on a cycle."""
    producer = {id(output): index for index, item in enumerate(items) for output in item.outputs}
    needs = [{producer[id(node)] for node in item.inputs if id(node) in producer} for item in items]
    if extra_needs is not None:
        for index, extra in enumerate(extra_needs):
            needs[index] |= extra
    order = dependency_order(needs)
    return order if len(order) == len(items) else None


def _order(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """Items in dependency order, where an in-place write also waits for every other item reading
    the contents it overwrites. Writes that cannot wait (their readers need their result) are made
    out of place, and the order is computed again."""
    overwrites = [[output.srcs[1].buffer for output, in_place in zip(item.outputs, item.in_place) if in_place]
                  for item in items]
    readers: dict[int, set[int]] = {}  # id(buffer) -> the items reading it
    for index, item in enumerate(items):
        for node in item.inputs:
            if node.realized:
                readers.setdefault(id(node.buffer), set()).add(index)
    extra_needs = [set().union(*(readers.get(id(buffer), ()) for buffer in buffers)) - {index}
                   for index, buffers in enumerate(overwrites)]
    order = _dependency_order(items, extra_needs)
    if order is None:  # a cycle through an in-place write: make every such write out of place
        for item in [item for item, buffers in zip(items, overwrites) if buffers]:
            item.in_place = [False] * len(item.outputs)
        order = _dependency_order(items, extra_needs=None)
        assert order is not None, "schedule: a dependency cycle without an in-place write"
    return [items[index] for index in order]
