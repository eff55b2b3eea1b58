"""Movement of Tensor: reshape, permute, expand, pad, shrink, flip and what is built from them (squeeze,
flatten, narrow, movedim, unfold, diagonal, roll, repeat, ...), plus joining and splitting (cat, stack, split, chunk,
unbind).

Front-end layer, a mixin of lazygrad.tensor.Tensor. Composed from the RESHAPE/PERMUTE/EXPAND/PAD/SHRINK/FLIP
primitives, so these are views and never copy (cat places its pieces with `where`).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lazygrad.dtype import dtypes, result_type
from lazygrad.tensor_methods.helpers import _int_argument, _normalize_axis, _pick_axis, _shape_argument
from lazygrad.ops import Ops

if TYPE_CHECKING:  # only for annotations: tensor.py imports this module
    from lazygrad.tensor import Tensor


def _tensor_list_and_dim(first, others: tuple, dim, axis, op: str) -> tuple[list, int]:
    """The tensors and dim of `x.cat(y, z, dim=1)` and of `Tensor.cat([x, y, z], 1)` alike (called through
    the class, the list arrives as `self`)."""
    from lazygrad.tensor import Tensor
    if isinstance(first, (list, tuple)):
        tensors = list(first)
        if len(others) == 1 and isinstance(others[0], int):
            dim = others[0]
        elif others:
            raise TypeError(f"{op}: expected {op}(tensors, dim), got extra arguments {others}")
    else:
        tensors = [first, *others]
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty list of tensors")
    for number, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: expected Tensors, got {type(t).__name__} at entry {number}")
    return tensors, _pick_axis(axis, dim, op, 0)


def _shape_of(other, op: str) -> tuple[int, ...]:
    """The shape reshape_as and view_as take from `other`."""
    from lazygrad.tensor import Tensor
    if not isinstance(other, Tensor):
        raise TypeError(f"{op}: expected a Tensor to take the shape of, got {type(other).__name__}")
    return other.shape


def _dim_list(dims, argument: str) -> list[int]:
    """movedim's source or destination: one int or a sequence of ints."""
    if isinstance(dims, (tuple, list)):
        return [_int_argument(d, "movedim", f"{argument}[{i}]") for i, d in enumerate(dims)]
    return [_int_argument(dims, "movedim", argument)]


def _int_pair(pair, function: str, argument: str, index: int) -> tuple[int, int]:
    """A (before, after) or (start, end) pair of ints, `argument[index]` of `function` (named only
    in an error: a padding or a slice builds these for every dim)."""
    if type(pair) is tuple and len(pair) == 2 and type(pair[0]) is int and type(pair[1]) is int:
        return pair
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise TypeError(f"{function}: {argument}[{index}] must be a pair of ints, got {pair!r}")
    return (_int_argument(pair[0], function, f"{argument}[{index}][0]"),
            _int_argument(pair[1], function, f"{argument}[{index}][1]"))


class MovementMethods:
    """Shape-changing views of Tensor, and joining and splitting along a dim."""
    __slots__ = ()

    # ---- movement -----------------------------------------------------------------------------

    def reshape(self, *shape) -> "Tensor":
        return self._reshaped(shape, "reshape")

    def view(self, *shape) -> "Tensor":
        return self._reshaped(shape, "view")

    def _reshaped(self, shape: tuple, function: str) -> "Tensor":
        shape = _shape_argument(shape, function, "shape", minus_one="(once) for the size the others leave")
        if shape.count(-1) > 1:
            raise ValueError(f"{function}: only one dimension can be -1, got {shape}")
        if -1 in shape:
            known = math.prod(size for size in shape if size != -1)
            if known == 0 or self.numel() % known:
                raise ValueError(f"{function}: cannot reshape tensor of shape {self.shape} ({self.numel()} elements) "
                                 f"into shape {shape}")
            shape = tuple(self.numel() // known if size == -1 else size for size in shape)
        if math.prod(shape) != self.numel():
            raise ValueError(f"{function}: cannot reshape tensor of shape {self.shape} ({self.numel()} elements) "
                             f"into shape {shape}")
        return self if shape == self.shape else self._apply(Ops.RESHAPE, arg=shape)

    def reshape_as(self, other: "Tensor") -> "Tensor":
        return self._reshaped((_shape_of(other, "reshape_as"),), "reshape_as")

    def view_as(self, other: "Tensor") -> "Tensor":
        return self._reshaped((_shape_of(other, "view_as"),), "view_as")

    def permute(self, *order) -> "Tensor":
        order = tuple(order[0]) if len(order) == 1 and isinstance(order[0], (tuple, list)) else tuple(order)
        ndim = self.ndim
        for axis in order:  # the common case first: plain dims in range (every permute nn builds)
            if type(axis) is not int or axis < 0:
                break
        else:
            if sorted(order) == list(range(ndim)):
                return self._apply(Ops.PERMUTE, arg=order)
        normalized = tuple([_normalize_axis(axis, ndim, "permute") for axis in order])
        if sorted(normalized) != list(range(ndim)):
            raise ValueError(f"permute: {order} is not a permutation of the {ndim} dims of shape {self.shape}")
        return self._apply(Ops.PERMUTE, arg=normalized)

    def transpose(self, dim0: int = -2, dim1: int = -1) -> "Tensor":
        if self.ndim < 2 and dim0 in (-2, 0) and dim1 in (-1, 0):
            return self
        order = list(range(self.ndim))
        first, second = _normalize_axis(dim0, self.ndim, "transpose"), _normalize_axis(dim1, self.ndim, "transpose")
        order[first], order[second] = order[second], order[first]
        return self.permute(order)

    def swapaxes(self, axis0: int, axis1: int) -> "Tensor":
        return self.transpose(axis0, axis1)

    def swapdims(self, dim0: int, dim1: int) -> "Tensor":
        return self.transpose(dim0, dim1)

    @property
    def T(self) -> "Tensor":
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> "Tensor":
        """The last two dims swapped (a batch of transposed matrices)."""
        if self.ndim < 2:
            raise ValueError(f"mT: needs a matrix or a batch of matrices (at least 2 dims), got shape {self.shape}; "
                             "use .T or .unsqueeze() for fewer dims")
        return self.transpose(-2, -1)

    def movedim(self, source, destination) -> "Tensor":
        """The dims in source (an int or a sequence) moved to the positions in destination; the other
        dims keep their order (torch.movedim)."""
        sources, destinations = _dim_list(source, "source"), _dim_list(destination, "destination")
        if len(sources) != len(destinations):
            raise ValueError(f"movedim: source {sources} and destination {destinations} must name as many dims")
        sources = [_normalize_axis(d, self.ndim, "movedim") for d in sources]
        destinations = [_normalize_axis(d, self.ndim, "movedim") for d in destinations]
        for name, dims in (("source", sources), ("destination", destinations)):
            if len(set(dims)) != len(dims):
                raise ValueError(f"movedim: {name} {dims} repeats a dim")
        rest = iter(d for d in range(self.ndim) if d not in sources)
        placed = dict(zip(destinations, sources))
        return self.permute([placed[d] if d in placed else next(rest) for d in range(self.ndim)])

    def moveaxis(self, source, destination) -> "Tensor":
        return self.movedim(source, destination)

    def unfold(self, dimension: int, size: int, step: int) -> "Tensor":
        """Every slice of `size` elements along dimension, `step` apart, as torch.Tensor.unfold: that
        dim becomes the number of slices and a new last dim of `size` holds each one. A view (the
        windows convolutions read, nn/spatial.py pool_windows)."""
        from lazygrad.nn.spatial import pool_windows
        if self.ndim == 0:  # PyTorch: the one slice of a 0-d tensor, shape (size,)
            _normalize_axis(dimension, 1, "unfold")
            return self.reshape(1).unfold(0, size, step).reshape(size)
        dim = _normalize_axis(dimension, self.ndim, "unfold")
        length = self.shape[dim]
        for name, value in (("size", size), ("step", step)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"unfold: {name} must be an int, got {type(value).__name__}")
        if step < 1:
            raise ValueError(f"unfold: step must be positive, got {step}")
        if not 0 <= size <= length:
            raise ValueError(f"unfold: size {size} does not fit dim {dim} of shape {self.shape} (length {length})")
        if size == 0:  # length // step + 1 empty slices
            moved = self.movedim(dim, -1)
            return moved[..., :0].reshape(moved.shape[:-1] + (length // step + 1, 0)).movedim(-2, dim)
        windows = pool_windows(self.movedim(dim, -1), (size,), (step,), (1,))  # (..., count, size)
        return windows.movedim(-2, dim)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> "Tensor":
        """Elements [i, i + offset] of dims dim1 and dim2 (below the main diagonal for a negative offset),
        in a new last dim; the other dims keep their order (torch.diagonal). A view."""
        if self.ndim < 2:
            raise ValueError(f"diagonal: needs at least 2 dims, got shape {self.shape}")
        offset = _int_argument(offset, "diagonal", "offset")
        first, second = _normalize_axis(dim1, self.ndim, "diagonal"), _normalize_axis(dim2, self.ndim, "diagonal")
        if first == second:
            raise ValueError(f"diagonal: dim1 and dim2 must differ, both are dim {first} of shape {self.shape}")
        others = [d for d in range(self.ndim) if d not in (first, second)]
        moved = self.permute(others + [first, second])
        outer, (rows, columns) = moved.shape[:-2], moved.shape[-2:]
        row_start, column_start = min(max(-offset, 0), rows), min(max(offset, 0), columns)
        size = min(rows - row_start, columns - column_start)
        square = moved.shrink((None,) * len(outer) + ((row_start, row_start + size),
                                                      (column_start, column_start + size)))
        # rows of size + 1 over the flattened square: element (i, 0) is (i, i)
        flat = square.reshape(outer + (size * size,)).pad(((0, 0),) * len(outer) + ((0, size),))
        return flat.reshape(outer + (size, size + 1))[..., 0]

    def expand(self, *shape) -> "Tensor":
        shape = _shape_argument(shape, "expand", "shape", minus_one="to keep a dim's size")
        if len(shape) < self.ndim:
            raise ValueError(f"expand: shape {shape} has fewer dims than the tensor's shape {self.shape}")
        new_dims = len(shape) - self.ndim
        if -1 in shape[:new_dims]:
            raise ValueError(f"expand: shape {shape} has -1 (keep the size) at index {shape.index(-1)}, a dim the "
                             f"tensor of shape {self.shape} does not have; give its size")
        current = (1,) * new_dims + self.shape
        target = tuple(old if new == -1 else new for old, new in zip(current, shape))
        for old, new in zip(current, target):
            if old != new and old != 1:
                raise ValueError(f"expand: cannot expand shape {self.shape} to {shape}")
        return self._broadcast_to(target)

    def pad(self, padding, value=0.0, mode: str = "constant") -> "Tensor":
        """padding: one (before, after) pair per dim, or PyTorch's flat list starting at the last dim.
        mode: "constant" (value), "reflect" (mirror without the edge), "replicate" (repeat the edge),
        "circular" (wrap around). Negative constant padding crops."""
        from lazygrad.tensor import Tensor
        if mode != "constant":
            return self._pad_with_mode(padding, value, mode)
        pairs = self._padding_pairs(padding)
        if not any(lo or hi for lo, hi in pairs):
            return self  # as reshape to its own shape: nothing to record
        value = 0.0 if value is None else value
        result = self
        if any(lo < 0 or hi < 0 for lo, hi in pairs):  # negative padding crops
            result = result.shrink(tuple((-min(lo, 0), size + min(hi, 0)) for (lo, hi), size in zip(pairs, self.shape)))
            pairs = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
        padded = result._apply(Ops.PAD, arg=tuple(pairs))
        if value == 0:
            return padded
        inside = Tensor.full(result.shape, True, dtypes.bool, self.device)._apply(Ops.PAD, arg=tuple(pairs))
        return inside.where(padded, self._filled(padded.shape, value, "pad"))

    def _padding_pairs(self, padding) -> list[tuple[int, int]]:
        """One (before, after) pair per dim from either form pad() accepts."""
        padding = list(padding)
        if padding and not any(p is None or isinstance(p, (tuple, list)) for p in padding):
            widths = [_int_argument(p, "pad", f"padding[{i}]") for i, p in enumerate(padding)]
            if len(widths) % 2 or len(widths) // 2 > self.ndim:
                raise ValueError(f"pad: flat padding {widths} needs an even length of at most {2 * self.ndim}")
            pairs = [(widths[i], widths[i + 1]) for i in range(0, len(widths), 2)]
            return [(0, 0)] * (self.ndim - len(pairs)) + list(reversed(pairs))
        if len(padding) != self.ndim:
            raise ValueError(f"pad: got {len(padding)} (before, after) pairs for a tensor of shape {self.shape}")
        return [(0, 0) if p is None else _int_pair(p, "pad", "padding", i) for i, p in enumerate(padding)]

    def _pad_with_mode(self, padding, value, mode: str) -> "Tensor":
        from lazygrad.tensor import Tensor
        if mode not in ("reflect", "replicate", "circular"):
            raise ValueError(f"pad: unknown mode {mode!r}; expected 'constant', 'reflect', 'replicate' or 'circular'")
        if value not in (None, 0):
            raise ValueError(f"pad: mode {mode!r} takes no value (got {value})")
        pairs = self._padding_pairs(padding)
        result = self
        for dim, (before, after) in enumerate(pairs):
            if before == 0 and after == 0:
                continue
            size = self.shape[dim]
            limit = {"reflect": size - 1, "replicate": math.inf if size else 0, "circular": size}[mode]
            if min(before, after) < 0 or max(before, after) > limit:
                raise ValueError(f"pad: {mode} padding {(before, after)} of dim {dim} needs values between 0 and "
                                 f"{limit} for shape {self.shape}")
            if mode == "reflect":
                parts = (result.narrow(dim, 1, before).flip(dim), result,
                         result.narrow(dim, size - 1 - after, after).flip(dim))
            elif mode == "replicate":
                edge_shape = lambda count: result.shape[:dim] + (count,) + result.shape[dim + 1:]  # noqa: E731
                parts = (result.narrow(dim, 0, 1).expand(edge_shape(before)), result,
                         result.narrow(dim, size - 1, 1).expand(edge_shape(after)))
            else:
                parts = (result.narrow(dim, size - before, before), result, result.narrow(dim, 0, after))
            result = Tensor.cat(parts, dim=dim)
        return result

    def shrink(self, bounds) -> "Tensor":
        shape, pairs, whole = self.shape, [], True
        if len(bounds) != len(shape):
            raise ValueError(f"shrink: got {len(bounds)} bounds for a tensor of shape {shape}; give one (start, "
                             "end) pair, or None for the whole dim, per dim")
        for index, (bound, size) in enumerate(zip(bounds, shape)):  # one loop: every slice and window shrinks
            pair = (0, size) if bound is None else _int_pair(bound, "shrink", "bounds", index)
            start, end = pair
            if not 0 <= start <= end <= size:
                raise ValueError(f"shrink: bounds {tuple(bounds)} do not fit shape {shape}")
            whole = whole and start == 0 and end == size
            pairs.append(pair)
        if whole:
            return self  # as reshape to its own shape: nothing to record
        return self._apply(Ops.SHRINK, arg=tuple(pairs))

    def flip(self, *axis) -> "Tensor":
        axis = tuple(axis[0]) if len(axis) == 1 and isinstance(axis[0], (tuple, list)) else tuple(axis)
        return self._apply(Ops.FLIP, arg=tuple(_normalize_axis(a, self.ndim, "flip") for a in axis))

    def contiguous(self) -> "Tensor":
        return self._apply(Ops.CONTIGUOUS)

    def squeeze(self, dim=None) -> "Tensor":
        if dim is None:
            return self.reshape(tuple(size for size in self.shape if size != 1))
        dim = _normalize_axis(dim, self.ndim, "squeeze")
        if self.ndim == 0 or self.shape[dim] != 1:
            return self
        return self.reshape(self.shape[:dim] + self.shape[dim + 1:])

    def unsqueeze(self, dim: int) -> "Tensor":
        dim = _normalize_axis(dim, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        if self.ndim == 0:
            return self.reshape(1)
        start, end = _normalize_axis(start_dim, self.ndim, "flatten"), _normalize_axis(end_dim, self.ndim, "flatten")
        return self.reshape(self.shape[:start] + (math.prod(self.shape[start:end + 1]),) + self.shape[end + 1:])

    def expand_as(self, other: "Tensor") -> "Tensor":
        return self.expand(other.shape)

    def unflatten(self, dim: int, sizes) -> "Tensor":
        dim = _normalize_axis(dim, self.ndim, "unflatten")
        sizes = _shape_argument((sizes,), "unflatten", "sizes", minus_one="(once) for the size the others leave")
        size = self.shape[dim]
        if sizes.count(-1) > 1:
            raise ValueError(f"unflatten: only one size can be -1, got {sizes}")
        if -1 in sizes:
            known = math.prod(s for s in sizes if s != -1)
            sizes = tuple(size // known if s == -1 and known else s for s in sizes)
        if math.prod(sizes) != size or any(s < 0 for s in sizes):
            raise ValueError(f"unflatten: sizes {sizes} do not multiply to the size {size} of dim {dim} "
                             f"of shape {self.shape}")
        return self.reshape(self.shape[:dim] + sizes + self.shape[dim + 1:])

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        """The `length` elements from `start` along dim (a view)."""
        if self.ndim == 0:
            raise ValueError("narrow: cannot narrow a 0-d tensor")
        dim = _normalize_axis(dim, self.ndim, "narrow")
        size = self.shape[dim]
        start, length = _int_argument(start, "narrow", "start"), _int_argument(length, "narrow", "length")
        if not -size <= start <= size:
            raise IndexError(f"narrow: start {start} is out of range for dim {dim} of size {size} "
                             f"(expected to be in range of [{-size}, {size}])")
        start = start + size if start < 0 else start
        if length < 0 or start + length > size:
            raise ValueError(f"narrow: start ({start}) + length ({length}) exceeds dim {dim} of size {size}")
        return self.shrink(tuple((start, start + length) if d == dim else None for d in range(self.ndim)))

    def _tiled(self, dim: int, copies: int) -> "Tensor":
        """`copies` copies of self one after another along dim, as a view (expand, then reshape)."""
        shape = self.shape
        expanded = self.unsqueeze(dim).expand(shape[:dim] + (copies,) + shape[dim:])
        return expanded.reshape(shape[:dim] + (copies * shape[dim],) + shape[dim + 1:])

    def roll(self, shifts, dims=None) -> "Tensor":
        """Shift elements along dims, wrapping around; with no dims, over the flattened tensor."""
        shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
        shifts = tuple(_int_argument(shift, "roll", f"shifts[{i}]") for i, shift in enumerate(shifts))
        if dims is None:
            if len(shifts) != 1:
                raise ValueError(f"roll: without dims, shifts must be one int, got {shifts}")
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shifts) != len(dims):
            raise ValueError(f"roll: shifts {shifts} and dims {dims} must have the same length")
        result = self
        for shift, dim in zip(shifts, dims):
            dim = _normalize_axis(dim, self.ndim, "roll")
            size = self.shape[dim] if self.ndim else 1
            if size == 0 or shift % size == 0:
                continue
            result = result._tiled(dim, 2).narrow(dim, size - shift % size, size)
        return result

    def repeat(self, *sizes) -> "Tensor":
        """Tile self `sizes[d]` times along each dim; extra leading sizes add dims (PyTorch's repeat)."""
        sizes = _shape_argument(sizes, "repeat", "repeats")
        if len(sizes) < self.ndim:
            raise ValueError(f"repeat: got {len(sizes)} repeat sizes {sizes}, fewer than the {self.ndim} dims of "
                             f"shape {self.shape}")
        shape = (1,) * (len(sizes) - self.ndim) + self.shape
        singles = tuple(size for dim_size in shape for size in (1, dim_size))
        repeated = tuple(size for count, dim_size in zip(sizes, shape) for size in (count, dim_size))
        return self.reshape(singles).expand(repeated).reshape(tuple(c * s for c, s in zip(sizes, shape)))

    def tile(self, *dims) -> "Tensor":
        dims = _shape_argument(dims, "tile", "dims")
        return self.repeat((1,) * (self.ndim - len(dims)) + dims)

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> "Tensor":
        """Each element `repeats` times in a row along dim (flattened when dim is None).
        Only an int `repeats`: per-element counts would give a shape that depends on the data."""
        from lazygrad.tensor import Tensor
        if isinstance(repeats, Tensor):
            if repeats.numel() != 1:
                raise TypeError(f"repeat_interleave: repeats must be an int (per-element repeats of shape "
                                f"{repeats.shape} are not supported)")
            repeats = repeats.item()
        repeats = _int_argument(repeats, "repeat_interleave", "repeats")
        if repeats < 0:
            raise ValueError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
        source = self.flatten() if dim is None else self
        dim = 0 if dim is None else _normalize_axis(dim, self.ndim, "repeat_interleave")
        if source.ndim == 0:
            source = source.reshape(1)
        return source.unsqueeze(dim + 1)._tiled(dim + 1, repeats).reshape(
            source.shape[:dim] + (source.shape[dim] * repeats,) + source.shape[dim + 1:])

    # ---- joining and splitting ----------------------------------------------------------------

    def cat(self, *others, dim: int | None = None, axis: int | None = None) -> "Tensor":
        """Join tensors along dim: `x.cat(y, z, dim=1)` or `Tensor.cat([x, y, z], dim=1)` (torch.cat).
        Each tensor is padded to the full size and placed with `where`: one kernel, any count."""
        from lazygrad.tensor import Tensor
        tensors, dim = _tensor_list_and_dim(self, others, dim, axis, "cat")
        tensors = [t for t in tensors if t.shape != (0,)] or tensors[:1]  # PyTorch skips legacy empty 1-d tensors
        first = tensors[0]
        if first.ndim == 0:
            raise ValueError("cat: zero-dimensional tensors cannot be concatenated; unsqueeze them or use stack")
        dim = _normalize_axis(dim, first.ndim, "cat")
        for number, t in enumerate(tensors):
            if t.device != first.device:
                raise ValueError(f"cat: tensor {number} is on {t.device}, tensor 0 on {first.device}")
            if t.ndim != first.ndim or any(a != b for d, (a, b) in enumerate(zip(t.shape, first.shape)) if d != dim):
                raise ValueError(f"cat: shapes must match except in dim {dim}: tensor 0 has shape {first.shape}, "
                                 f"tensor {number} has shape {t.shape}")
        dtype = result_type([t.dtype for t in tensors], [], [])
        total = sum(t.shape[dim] for t in tensors)
        result, offset = None, 0
        for t in tensors:
            size = t.shape[dim]
            padding = tuple((offset, total - offset - size) if d == dim else (0, 0) for d in range(first.ndim))
            placed = t.cast(dtype).pad(padding)
            if result is None:
                result = placed
            elif size:
                inside = Tensor.full(t.shape, True, dtypes.bool, t.device).pad(padding)
                result = inside.where(placed, result)
            offset += size
        return result

    def stack(self, *others, dim: int | None = None, axis: int | None = None) -> "Tensor":
        """Join equally shaped tensors along a new dim: `x.stack(y, dim=0)` or `Tensor.stack([x, y])`."""
        from lazygrad.tensor import Tensor
        tensors, dim = _tensor_list_and_dim(self, others, dim, axis, "stack")
        for number, t in enumerate(tensors):
            if t.shape != tensors[0].shape:
                raise ValueError(f"stack: expects tensors of equal shape, got {tensors[0].shape} at entry 0 and "
                                 f"{t.shape} at entry {number}")
        dim = _normalize_axis(dim, tensors[0].ndim + 1, "stack")
        return Tensor.cat([t.unsqueeze(dim) for t in tensors], dim=dim)

    def split(self, split_size_or_sections, dim: int = 0) -> tuple["Tensor", ...]:
        """Views of consecutive pieces along dim: an int gives pieces of that size (the last may be
        smaller), a list gives the size of each piece."""
        dim = _normalize_axis(dim, self.ndim, "split")
        size = self.shape[dim]
        if not isinstance(split_size_or_sections, (tuple, list)):
            piece = _int_argument(split_size_or_sections, "split", "split_size")
            if piece <= 0 and not (piece == 0 and size == 0):
                raise ValueError(f"split: split_size must be positive, got {piece}")
            sizes = [min(piece, size - start) for start in range(0, size, piece)] if size else [0]
        else:
            sizes = [_int_argument(s, "split", f"sections[{i}]") for i, s in enumerate(split_size_or_sections)]
            if sum(sizes) != size or any(s < 0 for s in sizes):
                raise ValueError(f"split: sizes {sizes} must be non-negative and add up to the size {size} "
                                 f"of dim {dim}")
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return tuple(self.narrow(dim, start, piece) for start, piece in zip(starts, sizes))

    def chunk(self, chunks: int, dim: int = 0) -> tuple["Tensor", ...]:
        """Split into `chunks` pieces of ceil(size / chunks) (so possibly fewer pieces, as in PyTorch)."""
        chunks = _int_argument(chunks, "chunk", "chunks")
        if chunks <= 0:
            raise ValueError(f"chunk: chunks must be positive, got {chunks}")
        size = self.shape[_normalize_axis(dim, self.ndim, "chunk")]
        return self.split(max(-(-size // chunks), 1) if size else 0, dim)

    def unbind(self, dim: int = 0) -> tuple["Tensor", ...]:
        dim = _normalize_axis(dim, self.ndim, "unbind")
        return tuple(self[(slice(None),) * dim + (i,)] for i in range(self.shape[dim]))
