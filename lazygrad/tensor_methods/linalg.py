"""Linear algebra of Tensor: matmul (and @), mm, bmm, dot, outer and einsum, composed as a broadcast multiply and a SUM.

Front-end layer, a mixin of lazygrad.tensor.Tensor.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lazygrad.devices import device_kind, lead_device
from lazygrad.dtype import result_type
from lazygrad.lazy import last_axis_strided
from lazygrad.multi import first_shard
from lazygrad.ops import MOVEMENT, Ops
from lazygrad.tensor_methods.helpers import broadcast_shapes, computes_in_float32

if TYPE_CHECKING:  # only for annotations: tensor.py imports this module
    from lazygrad.tensor import Tensor


def _parse_einsum(equation: str, ndims: list[int]) -> tuple[list[list[str]], list[str]]:
    """Labels of each operand and of the output; "..." becomes one label per dim it covers ("0", "1", ..
    right-aligned across operands, so they broadcast as in numpy)."""
    text = equation.replace(" ", "")
    if text.count("->") > 1:
        raise ValueError(f"einsum: equation {equation!r} has more than one '->'")
    input_text, output_text = text.split("->") if "->" in text else (text, None)
    terms = input_text.split(",")
    if len(terms) != len(ndims):
        raise ValueError(f"einsum: equation {equation!r} has {len(terms)} operand(s) but {len(ndims)} tensor(s) "
                         "were given")

    def letters(term: str, what: str) -> list[str]:
        if term.count("...") > 1 or term.replace("...", "").count("."):
            raise ValueError(f"einsum: {what} {term!r} of {equation!r} has a '.' that is not part of one '...'")
        for char in term.replace("...", ""):
            if not (char.isascii() and char.isalpha()):
                raise ValueError(f"einsum: invalid subscript {char!r} in {equation!r}; use letters a-z, A-Z")
        return list(term.replace("...", ""))

    ellipsis_dims = 0
    for number, (term, ndim) in enumerate(zip(terms, ndims)):
        count = len(letters(term, "operand"))
        if ("..." not in term and count != ndim) or count > ndim:
            raise ValueError(f"einsum: operand {number} has {ndim} dims but subscripts {term!r} in {equation!r}")
        if "..." in term:
            ellipsis_dims = max(ellipsis_dims, ndim - count)

    def expand(term: str, covered: int) -> list[str]:
        if "..." not in term:
            return list(term)
        before, after = term.split("...")
        return list(before) + [str(ellipsis_dims - covered + i) for i in range(covered)] + list(after)

    inputs = [expand(term, ndim - len(letters(term, "operand"))) for term, ndim in zip(terms, ndims)]
    seen = [label for labels in inputs for label in labels]
    if output_text is None:
        once = sorted(label for label in set(seen) if label.isalpha() and seen.count(label) == 1)
        return inputs, [str(i) for i in range(ellipsis_dims)] + once
    output_letters = letters(output_text, "output")
    for label in output_letters:
        if label not in seen:
            raise ValueError(f"einsum: output label {label!r} does not appear in the inputs of {equation!r}")
        if output_letters.count(label) > 1:
            raise ValueError(f"einsum: output label {label!r} appears more than once in {equation!r}")
    if "..." not in output_text and ellipsis_dims and any("..." in term for term in terms):
        raise ValueError(f"einsum: the inputs of {equation!r} have '...' but its output does not")
    return inputs, expand(output_text, ellipsis_dims)


def _einsum_diagonals(operand: "Tensor", labels: list[str], equation: str) -> tuple["Tensor", list[str]]:
    """Take the diagonal over every label repeated within one operand ("ii->i")."""
    while len(set(labels)) < len(labels):
        label = next(label for label in labels if labels.count(label) > 1)
        first = labels.index(label)
        second = labels.index(label, first + 1)
        if operand.shape[second] != operand.shape[first]:
            raise ValueError(f"einsum: label {label!r} is repeated in one operand of {equation!r} with sizes "
                             f"{operand.shape[first]} and {operand.shape[second]}")
        operand = operand.diagonal(0, first, second)
        labels = [labels[d] for d in range(len(labels)) if d not in (first, second)] + [label]
    return operand, labels


def _check_operands(x: "Tensor", other, ndim: int, op: str, what: str) -> None:
    """Both operands of mm or bmm have `ndim` dims and agree on the summed one."""
    from lazygrad.tensor import Tensor
    if not isinstance(other, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(other).__name__}")
    if x.ndim != ndim or other.ndim != ndim:
        raise ValueError(f"{op}: expects {what}, got shapes {x.shape} and {other.shape}; use matmul or @ for "
                         "other shapes")
    if x.shape[-1] != other.shape[-2]:
        raise ValueError(f"{op}: shapes {x.shape} and {other.shape} are not aligned: {x.shape[-1]} (dim {ndim - 1}) "
                         f"!= {other.shape[-2]} (dim {ndim - 2})")


def _align_labels(operand: "Tensor", labels: list[str], order: list[str]) -> "Tensor":
    """operand's dims permuted into `order`, with size-1 dims for the labels it lacks."""
    present = [label for label in order if label in labels]
    moved = operand.permute([labels.index(label) for label in present])
    return moved.reshape(tuple(moved.shape[present.index(label)] if label in labels else 1 for label in order))


class LinalgMethods:
    """Products of Tensors."""
    __slots__ = ()

    # ---- linear algebra -----------------------------------------------------------------------

    @computes_in_float32
    def matmul(self, other: "Tensor") -> "Tensor":
        from lazygrad.tensor import Tensor
        if not isinstance(other, Tensor):
            other = Tensor(other, device=self.device)
        if other._complex:
            from lazygrad.complex_tensor import complex_matmul
            return complex_matmul(self, other)
        x, w = self, other
        if x.ndim == 0 or w.ndim == 0:
            raise ValueError(f"matmul: both arguments need at least 1 dimension, got shapes {x.shape} and {w.shape}")
        x_vector, w_vector = x.ndim == 1, w.ndim == 1
        if x_vector:
            x = x.reshape(1, x.shape[0])
        if w_vector:
            w = w.reshape(w.shape[0], 1)
        if x.shape[-1] != w.shape[-2]:
            raise ValueError(f"matmul: shapes {self.shape} and {other.shape} are not aligned: "
                             f"{x.shape[-1]} (dim {self.ndim - 1}) != {w.shape[-2]} (dim {max(other.ndim - 2, 0)})")
        try:
            broadcast_shapes("matmul", x.shape[:-2], w.shape[:-2])
        except ValueError:
            raise ValueError(f"matmul: the batch dims of shapes {self.shape} and {other.shape} "
                             "cannot be broadcast together") from None
        m, k, n = x.shape[-2], x.shape[-1], w.shape[-1]
        if x.ndim > 2 and w.ndim == 2:
            # x's batch dims join its rows (nn.Linear on (batch, tokens, width)): a 2-D product, whose
            # gradients are matmuls too, with their own tiles; derived op by op through the panels
            # they were reduces over the panels' layout (GPT-2's MLP input gradients, 1024x256 @
            # 256x1024: 31 ms untiled against 1.1 ms)
            product = x.reshape(math.prod(x.shape[:-1]), k).matmul(w)
            result = product.reshape(x.shape[:-1] + (n,))
            return result.reshape(result.shape[:-1]) if w_vector else result
        sources = (x, w)
        dtype = result_type([x.dtype, w.dtype], [], [])
        if packs_operands(x.device, m, k, n, constant_right=_constant_kind(w)):
            result = _panel_product(x.cast(dtype), w.cast(dtype))
        else:
            if (m >= 8 and _walks_k_contiguously(w)) or _strided_columns(w, m, k, n):
                # x @ W.T (nn.Linear), q @ k.transpose(-1, -2) (attention): w's rows are contiguous
                # along k, so the kernel would be a set of dot products; a contiguous copy (n*k
                # elements, against m*n*k multiply-adds) lets it tile along n instead, several times
                # faster (BERT's attention scores, 8x12 heads of 128x32 @ 32x128, AVX2: 5.0 -> 2.2 ms)
                from lazygrad.parameter_values import kept_copy
                w = kept_copy("matmul copy", w, Tensor.contiguous, ())
            if _gathered_left(x, m, k, n):
                x = x.contiguous()
            left = x.cast(dtype).reshape(x.shape[:-2] + (m, 1, k))
            right = w.cast(dtype).transpose(-1, -2).reshape(w.shape[:-2] + (1, n, k))
            result = (left * right)._reduce(Ops.SUM, -1, False, "matmul")
        result = result._with_gradient(sources, _matmul_gradient)
        if x_vector:
            result = result.reshape(result.shape[:-2] + (n,))
        if w_vector:
            result = result.reshape(result.shape[:-1])
        return result

    def dot(self, other: "Tensor") -> "Tensor":
        return self.matmul(other)

    def mm(self, other: "Tensor") -> "Tensor":
        """Matrix product of two 2-d tensors; no broadcasting (use matmul or @ for that)."""
        _check_operands(self, other, 2, "mm", "2-d matrices")
        return self.matmul(other)

    def bmm(self, other: "Tensor") -> "Tensor":
        """Batched matrix product of (b, n, m) and (b, m, p) tensors; no broadcasting (use matmul or @)."""
        _check_operands(self, other, 3, "bmm", "3-d batches of matrices")
        if self.shape[0] != other.shape[0]:
            raise ValueError(f"bmm: batch sizes differ: shapes {self.shape} and {other.shape} "
                             f"({self.shape[0]} != {other.shape[0]}); use matmul to broadcast")
        return self.matmul(other)

    def outer(self, other: "Tensor") -> "Tensor":
        from lazygrad.tensor import Tensor
        if self.ndim != 1 or not isinstance(other, Tensor) or other.ndim != 1:
            raise ValueError(f"outer: expects two 1-d tensors, got shapes {self.shape} and "
                             f"{other.shape if isinstance(other, Tensor) else type(other).__name__}")
        return self.reshape(-1, 1) * other.reshape(1, -1)

    @staticmethod
    def einsum(equation: str, *operands) -> "Tensor":
        """Einstein summation, as torch.einsum: "ij,jk->ik", implicit outputs ("ij,jk" sums j and
        keeps the labels seen once, sorted), "..." for leading dims, repeated labels in one operand
        for diagonals and traces ("ii->i", "ii"). Size-1 dims broadcast. Operands are combined
        left to right, each label summed as soon as no later operand or the output needs it."""
        from lazygrad.tensor import Tensor
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        for number, operand in enumerate(operands):
            if not isinstance(operand, Tensor):
                raise TypeError(f"einsum: operand {number} is a {type(operand).__name__}, not a Tensor")
        inputs, output = _parse_einsum(equation, [operand.ndim for operand in operands])
        sizes: dict[str, int] = {}
        for number, (labels, operand) in enumerate(zip(inputs, operands)):
            for label, size in zip(labels, operand.shape):
                known = sizes.setdefault(label, size)
                if size != known and 1 not in (size, known):
                    raise ValueError(f"einsum: label {label!r} has size {size} in operand {number} but size "
                                     f"{known} in an earlier one ({equation!r})")
                if known == 1:
                    sizes[label] = size
        terms = [_einsum_diagonals(operand, list(labels), equation) for operand, labels in zip(operands, inputs)]
        result, labels = terms[0]
        for position in range(1, len(terms) + 1):
            later = {label for _, term_labels in terms[position:] for label in term_labels} | set(output)
            if position < len(terms):
                other, other_labels = terms[position]
                combined = labels + [label for label in other_labels if label not in labels]
            else:
                other, combined = None, labels
            kept = [label for label in combined if label in later]
            order = kept + [label for label in combined if label not in later]  # summed labels last
            result = _align_labels(result, labels, order)
            if other is not None:
                result = result * _align_labels(other, other_labels, order)
            if len(kept) < len(order):
                result = result._reduce(Ops.SUM, tuple(range(len(kept), len(order))), False, "einsum")
            labels = kept
        return result.permute([labels.index(label) for label in output]) if labels else result


# On the CPU device, a matmul with at least PANEL_MIN_ROWS rows and a right operand of at least
# PANEL_MIN_ELEMENTS elements first copies its right operand into panels (_panel_product), and its
# left one where its rows fill no whole tile; from PANEL_MIN_ROWS_CONSTANT rows when the right operand
# is a stored weight no gradient is recorded for (`_constant_kind`); a smaller right operand too
# where the product has PANEL_MIN_PRODUCT multiply-adds and takes no register tile in place, and one
# computed from stored weights of PANEL_MIN_ELEMENTS_CONSTANT elements (more than L1 holds) there.
PANEL_MIN_ROWS = 64
PANEL_MIN_ROWS_CONSTANT = 8
PANEL_MIN_ELEMENTS = 1 << 17
PANEL_MIN_ELEMENTS_CONSTANT = 1 << 14
PANEL_MIN_PRODUCT = 1 << 20
PANEL_MAX_ELEMENTS_DERIVED = 1 << 22


def packs_operands(device: str, m: int, k: int, n: int, constant_right: str | None = None) -> bool:
    """Whether an (m, k) @ (k, n) matmul on the device copies its right operand into panels (so a
    copy of it made just for the matmul would be a second one; the left one too where its rows fill
    no whole tile or it is a transposed view, `_panel_product`). The GPU dialects tile each
    work-item otherwise (codegen/opts.py) and read the operands in place.

    A product of PANEL_MIN_PRODUCT multiply-adds per matrix or more that takes no register tile read
    in place (`_fills_no_tile`) is packed whatever its right operand's size: padded to whole tiles
    it is tiled, where in place the heuristic left it untiled (ViT's attention over 197 tokens, 12
    heads of 197x64 @ 64x197, 2 threads, AVX-512: 45 -> 148 GFLOP/s).

    A constant right operand (`_constant_kind`, "stored" or "derived") is packed from fewer rows:
    its panels are a value of unchanged buffers, which an eager call keeps (derived_values) and a
    jit replay skips, so only the product runs, and in panels it runs 1.3-1.6x faster (2 threads,
    AVX-512, x @ W.T with W 3072x768: 32 rows 1.87 -> 1.32 ms, 16 rows 1.27 -> 0.78; GPT-2's
    32-token prompt's kernels 164 -> 91 ms). A smaller derived one too, in a product of
    PANEL_MIN_PRODUCT multiply-adds: stored for the product in any case, it is stored in panels
    instead, once; read in place, its rows a power of two apart share a few cache sets (Winograd's
    16 products of a 3x3 convolution's transformed input by its transformed weight, ResNet-50's
    14x14 stage, 16 x 49x256 @ 256x256, 2 threads, kernel alone: 3.3-4.2 -> 2.6-3.5 ms; its 28x28
    stage's 16 x 196x128 @ 128x128 1.84 -> 1.77). A jit replay skips the copy into panels with the
    transform; an eager call keeps the transform but copies it again (derived_values keeps values
    that read stored buffers directly: taking kernels that read kept values too would keep every
    step of a chain from a call's own input).
    A derived one of more than PANEL_MAX_ELEMENTS_DERIVED elements is a call's own activations (a
    convolution's weight gradient reads the windows of the input it saved): copied into panels every
    call for few rows, the copy cost more than the product (a U-Net's 8 x 64 x 64 positions by
    64 x 4 x 4, 2 threads: 90 ms against 9).
    Below 8 rows the product is a set of dot products over W's rows, which read it in place."""
    if device_kind(device) != "CPU":
        return False
    if constant_right == "derived" and k * n > PANEL_MAX_ELEMENTS_DERIVED:
        constant_right = None  # a call's own activations (a weight gradient's windows), packed anew each call
    if constant_right == "derived" and m >= PANEL_MIN_ROWS_CONSTANT and k * n >= PANEL_MIN_ELEMENTS_CONSTANT \
            and m * k * n >= PANEL_MIN_PRODUCT:
        return True
    if k * n < PANEL_MIN_ELEMENTS and not (m * k * n >= PANEL_MIN_PRODUCT and _fills_no_tile(m, n)):
        return False
    return m >= PANEL_MIN_ROWS or (constant_right is not None and m >= PANEL_MIN_ROWS_CONSTANT)


def _fills_no_tile(m: int, n: int) -> bool:
    """Whether an (m, k) @ (k, n) product read in place takes no register tile (codegen/opts.py
    `matmul_tile`): no row count of a tile divides its rows (a prime above them, ViT's 197 tokens)
    or no vector of 8 its columns. Winograd's products over 74x74 tiles (5476 rows) take 4 rows
    in place; padded, their left operand's copy cost more than they gained (Inception-v3)."""
    from lazygrad.codegen.opts import MATMUL_ROW_CHOICES, ODD_ROW_CHOICES
    return n % 8 != 0 or all(m % rows for rows in MATMUL_ROW_CHOICES + ODD_ROW_CHOICES)


def panel_shape(device: str) -> tuple[int, int]:
    """(rows, columns) of the panels `_panel_product` packs into on the device: its register tile,
    which follows the CPU's vector registers (codegen/opts.py `panel_tile`: 6 x 16 with AVX2, 8 x 32
    with AVX-512)."""
    from lazygrad.codegen.opts import panel_tile
    from lazygrad.realize import renderer_for
    return panel_tile(renderer_for(lead_device(device)))


def _panel_product(x: "Tensor", w: "Tensor") -> "Tensor":
    """x @ w with w first copied into panels, as BLAS libraries pack them: panels of `width`
    columns, shape (n / width, k, width), the last padded with zeros (the product's extra columns
    are cut off again: ResNet-18's stem weight gradient, 147 columns, at batch 16 133 -> 45 ms,
    where it read its operands in place). Read in place, consecutive rows of w lie n elements
    apart, a stride that maps them onto the same few cache sets; in panels the kernel's register
    tile (rows by width, `panel_shape`) reads each panel as one stream.

    x is read in place, row by row, where its rows fill whole tiles of `rows` or one fewer (7 for
    MobileNetV2's 7x7 and 14x14 positions); computed or read through a view, it is stored row-major
    first. One thread, products alone, packed -> in place, copies included (ms): 196x576 @ 576x96
    0.233 -> 0.199, 49x960 @ 960x320 0.319 -> 0.266 (no padding rows to 56), 1024x1536 @ 1536x384
    10.95 -> 10.83, 784x512 @ 512x256 1.90 -> 1.81; the product alone within 1.5% either way up
    to k = 2048. Rows that fill no whole tile are padded with zero rows to whole tiles in a row-major
    copy (ViT's 197 tokens, 12x197x64: 0.23 ms into panels, 0.06 so); its transposed view (a weight
    gradient's x.T) is copied into panels of `rows` rows instead, (m / rows, k, rows), padded with
    zeros. An x computed with expensive ops is stored before either copy (BERT's gelu, packed where
    computed, ran one element at a time; softmax's division in a padded copy was not vectorized), a
    cheap one is computed in it."""
    from lazygrad.parameter_values import kept_copy
    width = panel_shape(x.device)[1]
    return product_with_panels(x, kept_copy("matmul panels", w, right_panels, (width,)), w.shape[-1])


def product_with_panels(x: "Tensor", panels: "Tensor", n: int) -> "Tensor":
    """x @ w from w's panels, `right_panels(w, width)`, and its column count n (`_panel_product`)."""
    m, k = x.shape[-2], x.shape[-1]
    rows, width = panel_shape(x.device)
    columns = panels.shape[-3] * width
    tile = next((t for t in (rows, rows - 1) if m % t == 0), None)
    transposed = _walks_k_contiguously(x)
    if tile is not None and not transposed:
        rows, padded = tile, m
        left = _stored_by_rows(x)
    else:
        padded = -(-m // rows) * rows
        if _has_expensive_op(first_shard(x.lazydata)):
            if transposed:  # stored in the order it is computed, not as the transposed view reads it,
                order = first_shard(x.lazydata).arg  # which computes each element from reads across rows
                x = x.permute([order.index(axis) for axis in range(x.ndim)]).contiguous().permute(order)
            else:
                x = x.contiguous()
        if padded != m:
            x = x.pad(((0, 0),) * (x.ndim - 2) + ((0, padded - m), (0, 0)))
        if transposed:
            left_panels = x.reshape(x.shape[:-2] + (padded // rows, rows, k)).transpose(-1, -2).contiguous()
            left = left_panels.transpose(-1, -2)  # (..., m / rows, rows, k), a view of the panels
        else:
            left = x.contiguous()  # zero rows to whole tiles, stored row by row
    left = left.reshape(x.shape[:-2] + (padded // rows, rows, 1, 1, k))
    right = panels.transpose(-1, -2).reshape(panels.shape[:-3] + (1, 1, columns // width, width, k))
    result = (left * right)._reduce(Ops.SUM, -1, False, "matmul")  # (..., m / rows, rows, n / width, width)
    result = result.reshape(result.shape[:-4] + (padded, columns))
    return result if (padded, columns) == (m, n) else result[..., :m, :n]


def right_panels(w: "Tensor", width: int) -> "Tensor":
    """w (..., k, n) copied into panels of `width` columns, (..., n / width, k, width), the last
    padded with zero columns."""
    k, n = w.shape[-2], w.shape[-1]
    columns = -(-n // width) * width
    if columns != n:  # a computed w is stored first: panels of a padded view of windows index slowly
        w = (w if _is_stored_or_its_transpose(w) else w.contiguous()).pad(((0, 0),) * (w.ndim - 1) + ((0, columns - n),))
    return w.reshape(w.shape[:-2] + (k, columns // width, width)).transpose(-3, -2).contiguous()


def _is_stored_or_its_transpose(w: "Tensor") -> bool:
    """Whether w is a stored buffer or a permuted view of one (`W.T`: GPT-2's output layer, 50257
    columns that panels of 32 do not divide, packed from the weight it shares with the embedding, which
    a transposed copy first took 92 ms a training step to make, 2 threads)."""
    node = first_shard(w.lazydata)
    return node.realized or (node.op is Ops.PERMUTE and node.srcs[0].realized)


def _stored_by_rows(x: "Tensor") -> "Tensor":
    """x itself where it reads a stored buffer row by row (through reshapes only), else x stored."""
    node = first_shard(x.lazydata)
    while node.op is Ops.RESHAPE and not node.realized:
        node = node.srcs[0]
    return x if node.realized else x.contiguous()


def matmul_in_panels(x: "Tensor", w: "Tensor") -> "Tensor":
    """x @ w for 2-D operands whose caller knows panels pay (a 1x1 convolution over few positions,
    nn/spatial.py), whatever the thresholds above say."""
    assert x.ndim == 2 and w.ndim == 2, "matmul_in_panels: 2-D operands"
    return _panel_product(x, w)._with_gradient((x, w), _matmul_gradient)


EXPENSIVE_WALK_NODES = 64


def _has_expensive_op(node) -> bool:
    """Whether computing a node from stored values takes, for each of its elements, an op the
    scheduler counts as expensive (its cost in ops/table.py above 1: exp2, log2, sin, sqrt, division).
    A reduce below is a stored value (the scheduler stores it for the reads across its rows), and
    an op on fewer elements, broadcast (a batch norm's per-channel scale), is stored once too. The
    walk stops after EXPENSIVE_WALK_NODES nodes (it runs on every matmul call, and a residual
    stream's chain reaches back through every layer: BERT's, uncapped, cost 6 ms of its 57 ms
    graph building); what lies farther down is a shared value the scheduler stores once it costs
    more than its SHARED_RECOMPUTE_LIMIT, not something the pack recomputes per element."""
    stack, seen, size = [node], set(), node.numel()
    while stack:
        current = stack.pop()
        if id(current) in seen or current.realized or current.op is Ops.CONST:
            continue
        seen.add(id(current))
        if len(seen) > EXPENSIVE_WALK_NODES:
            return False
        if current.op.cost > 1 and current.numel() >= size:
            return True
        if current.op.is_elementwise or current.op.kind == MOVEMENT:
            stack.extend(current.srcs)
    return False


def _matmul_gradient(grad, out, sources, arg) -> list:
    """Gradients of x @ w as matmuls, so each gets matmul's tiles and transposed-operand copy
    (derived op by op they are reduces over other axes, several times slower: attention's g @ v.T
    and its scores' gradient by the keys took 4x4 tiles of dot products, GPT-2's 8x4 heads of
    128x64 by 64x128, 2 threads: 1.2 ms each). For w a transposed view (nn.Linear's W.T, attention's
    k.transpose(-1, -2)) the gradient is computed in w's source's layout, g.T @ x, and handed back
    transposed: the two transposes cancel in the graph, so the source's gradient is that matmul's
    result. Batch dims an operand was broadcast along are summed."""
    x, w = sources  # detached; a gradient built for one that needs none is never realized
    grad_w = grad.mT.matmul(x).mT if _is_transposed_view(w) else x.mT.matmul(grad)
    return [_summed_to(grad.matmul(w.mT), x.shape), _summed_to(grad_w, w.shape)]


def _summed_to(gradient, shape: tuple[int, ...]):
    """A gradient of a batched product summed over the batch dims its operand of `shape` was
    broadcast along."""
    if gradient.shape == shape:
        return gradient
    extra = gradient.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(extra + axis for axis, size in enumerate(shape)
                                       if size == 1 and gradient.shape[extra + axis] != 1)
    return gradient.sum(axis=axes).reshape(shape)


# Nodes `_constant_kind` walks at most (each matmul of a computed right operand walks them: 64 cost
# 57 us a call on a deep chain, 16 about 15; Winograd's transformed weight is 6).
CONSTANT_WALK_NODES = 16


def _constant_kind(tensor) -> str | None:
    """"stored" where tensor is a stored buffer or a view of one (a layer's weight in inference,
    `x @ W.T`), "derived" where it is computed from stored buffers and constants alone, within
    CONSTANT_WALK_NODES nodes (Winograd's transformed weight), else None; None too where its
    gradient is being recorded. Either stays the same from call to call: a jit replay skips the
    copies made of it, and an eager call those of a stored one (derived_values makes them again
    after a write to a buffer they read; see packs_operands for a derived one). A value computed
    within those nodes from a call's own stored input counts as "derived" too: it is then packed
    anew each call, a copy of k x n elements for a product of m x k x n (time, not correctness)."""
    from lazygrad.tensor import Tensor
    if Tensor.grad_enabled and tensor.requires_grad:
        return None
    node = first_shard(tensor.lazydata)
    while not node.realized and node.op.kind == MOVEMENT:
        node = node.srcs[0]
    if node.realized:
        return "stored"
    stack, seen = [node], set()
    while stack:
        node = stack.pop()
        if id(node) in seen or node.realized or node.op is Ops.CONST:
            continue
        seen.add(id(node))
        if len(seen) > CONSTANT_WALK_NODES or not node.srcs:
            return None
        stack.extend(node.srcs)
    return "derived"


def _walks_k_contiguously(tensor) -> bool:
    """Whether tensor is a permuted view whose second-last dim is its source's last (contiguous) one:
    `w.T`, and attention's keys `k.transpose(1, 2).transpose(-1, -2)`, one permute (0, 2, 3, 1)."""
    node = first_shard(tensor.lazydata)
    return node.op is Ops.PERMUTE and tensor.ndim >= 2 and node.arg[-2] == tensor.ndim - 1


def _strided_columns(w, m: int, k: int, n: int) -> bool:
    """Whether a CPU product of PANEL_MIN_PRODUCT multiply-adds or more, with PANEL_MIN_ROWS rows,
    reads its right operand in place with its columns apart (a weight gradient's activations stored
    channels first, viewed as (positions, channels)): its tile then has no vector along them and
    runs scalar, so a contiguous copy first costs less than 1/PANEL_MIN_ROWS of the product
    (MobileNetV2's last 1x1 convolution's weight gradient at batch 16 of 112x112, 1280 x 256 @ 256 x
    320, 2 threads: 3.1 -> 0.4 ms; its training step's kernels 107.7 -> 102.9 ms)."""
    return device_kind(w.device) == "CPU" and m >= PANEL_MIN_ROWS and m * k * n >= PANEL_MIN_PRODUCT \
        and last_axis_strided(first_shard(w.lazydata))


def _gathered_left(x, m: int, k: int, n: int) -> bool:
    """Whether a CPU product of PANEL_MIN_PRODUCT multiply-adds or more, of fewer than
    PANEL_MIN_ROWS_CONSTANT rows (a set of dot products over w's rows) and at least as many columns,
    reads its left operand in place with its k values apart (a
    flatten of a channels-last activation: VGG's 512 x 7x7 into its first Linear, each value at a
    division and a remainder of its position): each column's dot product reads them so again, where
    a contiguous copy of m*k values lets every one stream them (VGG-11's 25088 -> 4096 layer at batch
    1, 2 threads: 89 -> 9 ms)."""
    return device_kind(x.device) == "CPU" and m < PANEL_MIN_ROWS_CONSTANT <= n and m * k * n >= PANEL_MIN_PRODUCT \
        and last_axis_strided(first_shard(x.lazydata))


def _is_transposed_view(tensor) -> bool:
    """Whether tensor is its source with the last two dims swapped (`w.T`, `w.transpose(-1, -2)`)."""
    node = first_shard(tensor.lazydata)
    if node.op is not Ops.PERMUTE or tensor.ndim < 2:
        return False
    order = node.arg
    return order[-2:] == (tensor.ndim - 1, tensor.ndim - 2) and order[:-2] == tuple(range(tensor.ndim - 2))
