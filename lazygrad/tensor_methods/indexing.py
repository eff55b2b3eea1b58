"""Indexing of Tensor: x[...], x[...] = value, gather, index_select, take, nonzero, masked_select, scatter,
masked_fill, tril, triu and one_hot.

Front-end layer, a mixin of lazygrad.tensor.Tensor. Built from movement ops, and from a one-hot
comparison and a sum where integer Tensors index, so indexing stays lazy, fuses and differentiates.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.realize import record_data_dependence
from lazygrad.tensor_methods.helpers import _extreme_value, _normalize_axis, _zero_of, broadcast_shapes
from lazygrad.ops import Ops

if TYPE_CHECKING:  # only for annotations: tensor.py imports this module
    from lazygrad.tensor import Tensor


SCATTER_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _is_scalar_bool(index) -> bool:
    """True or False as an index: a Python or numpy bool, or a 0-d bool Tensor (no import here:
    every x[...] asks this of each index)."""
    if type(index) in _PLAIN_INDICES:
        return False
    return isinstance(index, (bool, np.bool_)) or (getattr(index, "dtype", None) is dtypes.bool and index.ndim == 0)


_PLAIN_INDICES = (int, slice, type(None), type(Ellipsis))


class IndexingMethods:
    """Reading and writing parts of a Tensor by position."""
    __slots__ = ()

    # ---- indexing -----------------------------------------------------------------------------

    def _slice_dim(self, dim: int, index: slice) -> "Tensor":
        size = self.shape[dim]
        start, stop, step = index.indices(size)
        count = len(range(start, stop, step))
        if count == 0:
            return self.shrink(tuple((0, 0) if d == dim else None for d in range(self.ndim)))
        first, last = start, start + (count - 1) * step
        low, high = min(first, last), max(first, last)
        result = self.shrink(tuple((low, high + 1) if d == dim else None for d in range(self.ndim)))
        if step < 0:
            result = result.flip(dim)
        stride = abs(step)
        if stride > 1:
            # pad to count*stride, split the dim into (count, stride) and keep column 0
            length = result.shape[dim]
            result = result.pad(tuple((0, count * stride - length) if d == dim else (0, 0) for d in range(self.ndim)))
            split = result.shape[:dim] + (count, stride) + result.shape[dim + 1:]
            result = result.reshape(split).shrink(
                tuple((0, 1) if d == dim + 1 else None for d in range(self.ndim + 1)))
            result = result.reshape(result.shape[:dim + 1] + result.shape[dim + 2:])
        return result

    def _normalized_indices(self, indices, op: str) -> tuple:
        """The index as a tuple with one entry per dim of self (plus the Nones), Ellipsis expanded.
        Python lists and numpy arrays become Tensors; a boolean mask Tensor of k dims becomes the k
        integer Tensors of its True positions (its data decides the shape, so it is realized first,
        as PyTorch does)."""
        from lazygrad.tensor import Tensor
        if not isinstance(indices, tuple):
            indices = (indices,)
        if any(isinstance(index, (list, np.ndarray)) for index in indices):
            indices = tuple(Tensor(np.asarray(index), device=self.device) if isinstance(index, (list, np.ndarray))
                            else index for index in indices)
        for index in indices:
            if isinstance(index, Tensor):
                continue
            if not (index is None or index is Ellipsis or isinstance(index, (int, slice, np.integer))) \
                    or isinstance(index, bool):
                raise TypeError(f"{op}: index {index!r}: only ints, slices, None, ..., lists and Tensors "
                                "are supported here")
        if sum(index is Ellipsis for index in indices) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        consumed = sum(index.ndim if isinstance(index, Tensor) and index.dtype.is_bool else 1
                       for index in indices if index is not None and index is not Ellipsis)
        if consumed > self.ndim:
            raise IndexError(f"too many indices for tensor of dimension {self.ndim}")
        if any(index is Ellipsis for index in indices):  # not `in`: == on a Tensor index compares elements
            at = next(i for i, index in enumerate(indices) if index is Ellipsis)
            indices = indices[:at] + (slice(None),) * (self.ndim - consumed) + indices[at + 1:]
        else:
            indices = indices + (slice(None),) * (self.ndim - consumed)
        if any(isinstance(index, Tensor) and index.dtype.is_bool for index in indices):
            return self._masks_as_positions(indices)
        return indices

    def _masks_as_positions(self, indices: tuple) -> tuple:
        """Each boolean mask index replaced by one int64 Tensor per dim it covers: its True positions."""
        from lazygrad.tensor import Tensor
        result, dim = [], 0
        for index in indices:
            if isinstance(index, Tensor) and index.dtype.is_bool:
                record_data_dependence("a boolean mask index has a shape that its data decides")
                if index.ndim == 0:
                    raise IndexError("index: a 0-d boolean index is not supported; write x[None] for x[True]")
                covered = self.shape[dim:dim + index.ndim]
                if index.shape != covered:
                    raise IndexError(f"index: a boolean mask of shape {index.shape} does not match the dims "
                                     f"{dim}..{dim + index.ndim - 1} of shape {self.shape} it indexes ({covered})")
                result += [Tensor(p.astype(np.int64), device=self.device) for p in np.nonzero(index.numpy())]
                dim += index.ndim
                continue
            result.append(index)
            dim += index is not None
        return tuple(result)

    def __getitem__(self, indices) -> "Tensor":
        """Indexing as in PyTorch: ints, slices (any step), None, Ellipsis, integer Tensors, Python
        lists and numpy arrays, and boolean masks (realized first: their data decides the shape).

        Integer Tensor indices gather: several broadcast together like numpy's advanced indexing, and
        their broadcast dims replace the indexed dims when those are adjacent, else come first. As in
        PyTorch (not numpy), an int among Tensor indices selects first and so does not count in that
        adjacency. Tensor index values are not bounds-checked (that would need their data): an
        out-of-range value reads 0. Gathering is a one-hot comparison and a sum, so it stays lazy,
        fuses and differentiates.
        """
        from lazygrad.tensor import Tensor
        if any(map(_is_scalar_bool, indices if isinstance(indices, tuple) else (indices,))):
            return self._index_with_scalar_bools(indices)
        indices = self._normalized_indices(indices, "index")
        # every int and unit-step slice is one range of one shrink; other steps are sliced after it
        dim, final_shape, gathers, bounds, stepped = 0, [], [], [], []
        for index in indices:
            if index is None:
                final_shape.append(1)
                continue
            size = self.shape[dim]
            if isinstance(index, Tensor):
                gathers.append((len(final_shape), index))
                final_shape.append(size)
                bounds.append((0, size))
            elif isinstance(index, slice):
                start, stop, step = index.indices(size)
                if step == 1:
                    bounds.append((start, max(start, stop)))
                else:
                    bounds.append((0, size))
                    stepped.append((dim, index))
                final_shape.append(len(range(start, stop, step)))
            else:
                position = int(index)
                if not -size <= position < size:
                    raise IndexError(f"index {position} is out of bounds for dimension {dim} with size {size}")
                position %= size
                bounds.append((position, position + 1))
            dim += 1
        result = self.shrink(bounds)
        for dim, index in stepped:
            result = result._slice_dim(dim, index)
        result = result.reshape(tuple(final_shape))
        return result._gather_dims(gathers) if gathers else result

    def _index_with_scalar_bools(self, indices) -> "Tensor":
        """Indexing with True or False (a Python, numpy or 0-d Tensor bool) among basic indices, as
        numpy and PyTorch: the bools add one dim together, of size 1 if all are True, else 0, in their
        place when they are next to each other, else first. A Tensor's value is read first."""
        from lazygrad.tensor import Tensor
        indices = indices if isinstance(indices, tuple) else (indices,)
        if any(isinstance(index, (Tensor, list, np.ndarray)) and not _is_scalar_bool(index) for index in indices):
            raise IndexError("index: a boolean scalar index cannot be combined with Tensor or list indices")
        at = [position for position, index in enumerate(indices) if _is_scalar_bool(index)]
        values = []
        for position in at:
            index = indices[position]
            if isinstance(index, Tensor):
                record_data_dependence("a 0-d boolean index has a shape that its data decides")
                index = index.item()
            values.append(bool(index))
        plain = indices[:at[0]] + (None,) + tuple(index for position, index in enumerate(indices)
                                                   if position > at[0] and position not in at)
        normalized = self._normalized_indices(plain, "index")
        result = self[normalized]
        # the new dim's place in the result: every None and slice of the index makes one dim
        axis, nones_before = 0, sum(index is None for index in plain[:at[0]])
        for index in normalized:
            if index is None:
                if nones_before == 0:
                    break
                nones_before -= 1
            axis += index is None or isinstance(index, slice)
        if not all(values):
            result = result.shrink(tuple((0, 0) if d == axis else None for d in range(result.ndim)))
        if at != list(range(at[0], at[0] + len(at))):
            result = result.movedim(axis, 0)
        return result

    def _gather_dims(self, gathers: list[tuple[int, "Tensor"]]) -> "Tensor":
        """Advanced indexing of the dims in `gathers` ((dim, integer index tensor) pairs)."""
        positions = [dim for dim, _ in gathers]
        for _, index in gathers:
            if not index.dtype.is_int:
                raise IndexError(f"tensors used as indices must be integer tensors, got {index.dtype.name}")
            if index.device != self.device:
                raise ValueError(f"index: index tensor is on {index.device}, the indexed tensor on {self.device}")
        try:
            index_shape = broadcast_shapes("index", *[index.shape for _, index in gathers])
        except ValueError:
            shapes = ", ".join(str(index.shape) for _, index in gathers)
            raise IndexError(f"shape mismatch: index tensors of shapes {shapes} cannot be broadcast together") from None
        # one flat index into the indexed dims, negative values counting from the end
        flat = None
        for dim, index in gathers:
            size = self.shape[dim]
            index = index.cast(dtypes.int64)
            index = (index < 0).where(index + size, index)
            flat = index if flat is None else flat * size + index
        count = math.prod(self.shape[dim] for dim in positions)
        rest = [d for d in range(self.ndim) if d not in positions]
        adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
        before = [d for d in rest if adjacent and d < positions[0]]
        after = [d for d in rest if d not in before]
        before_shape = tuple(self.shape[d] for d in before)
        after_shape = tuple(self.shape[d] for d in after)
        out_shape = before_shape + index_shape + after_shape
        source = self.permute(before + after + positions).reshape(
            before_shape + (1,) * len(index_shape) + after_shape + (count,))
        flat = flat._broadcast_to(index_shape).reshape((1,) * len(before) + index_shape + (1,) * len(after))
        return source._take(flat, out_shape)

    def gather(self, dim: int, index: "Tensor") -> "Tensor":
        """out[i][j][k] = self[i][index[i][j][k]][k] for dim=1 (torch.gather); index has self's ndim and
        is no larger than self outside dim. Index values are not bounds-checked: out of range reads 0."""
        from lazygrad.tensor import Tensor
        dim = _normalize_axis(dim, self.ndim, "gather")
        if not isinstance(index, Tensor) or not index.dtype.is_int:
            raise TypeError(f"gather: index must be an integer Tensor, got "
                            f"{index.dtype.name if isinstance(index, Tensor) else type(index).__name__}")
        if self.ndim == 0:
            return self.reshape(1).gather(0, index.reshape(1)).reshape(index.shape)
        if index.ndim != self.ndim or any(i > s for d, (i, s) in enumerate(zip(index.shape, self.shape)) if d != dim):
            raise ValueError(f"gather: index of shape {index.shape} must have the {self.ndim} dims of the input "
                             f"{self.shape} and be no larger outside dim {dim}")
        source = self.shrink(tuple(None if d == dim else (0, i) for d, i in enumerate(index.shape)))
        # source: index's shape with `size` at dim; move dim last and let index's dim broadcast over it
        source = source.unsqueeze(-1).transpose(dim, -1)  # size 1 at dim, `size` last
        return source._take(index, index.shape)

    def index_select(self, dim: int, index: "Tensor") -> "Tensor":
        """The entries of dim at the positions in index (a 1-d, or 0-d, integer Tensor), in its order
        (torch.index_select). As for x[index], values are not bounds-checked: negative ones count from
        the end and out-of-range ones read 0."""
        from lazygrad.tensor import Tensor
        dim = _normalize_axis(dim, self.ndim, "index_select")
        if not isinstance(index, Tensor) or not index.dtype.is_int:
            raise TypeError(f"index_select: index must be an integer Tensor, got "
                            f"{index.dtype.name if isinstance(index, Tensor) else type(index).__name__}")
        if index.ndim > 1:
            raise ValueError(f"index_select: index must be 1-d (or 0-d), got shape {index.shape}")
        if self.ndim == 0:
            if index.numel() != 1:
                raise ValueError(f"index_select: a 0-d tensor takes one index, got shape {index.shape}")
            return self.reshape(1).index_select(0, index).reshape(())
        return self._gather_dims([(dim, index.reshape(-1))])

    def take(self, index: "Tensor") -> "Tensor":
        """self read as 1-d at the positions in index, in index's shape (torch.take). As for x[index],
        negative values count from the end and out-of-range ones read 0 (PyTorch raises)."""
        from lazygrad.tensor import Tensor
        if not isinstance(index, Tensor) or not index.dtype.is_int:
            raise TypeError(f"take: index must be an integer Tensor, got "
                            f"{index.dtype.name if isinstance(index, Tensor) else type(index).__name__}")
        return self.reshape(-1)._gather_dims([(0, index)])

    def nonzero(self, *, as_tuple: bool = False):
        """The int64 indices of the nonzero elements, (count, ndim) in row-major order, or with
        as_tuple one 1-d Tensor per dim (torch.nonzero). Their number depends on the data: self is
        realized first, as PyTorch does."""
        from lazygrad.tensor import Tensor
        record_data_dependence("nonzero has a shape that its data decides")
        positions = np.nonzero(self.numpy().reshape(self.shape) if self.ndim else self.numpy().reshape(1))
        if as_tuple:
            return tuple(Tensor(p.astype(np.int64), device=self.device) for p in positions[:max(self.ndim, 1)])
        stacked = np.stack(positions, axis=1).astype(np.int64) if self.ndim else np.zeros((len(positions[0]), 0), np.int64)
        return Tensor(stacked, device=self.device)

    def masked_select(self, mask: "Tensor") -> "Tensor":
        """The elements where mask (broadcast with self) is True, as a 1-d Tensor in row-major order
        (torch.masked_select); differentiable in self. The mask is realized first: its data decides the
        length."""
        from lazygrad.tensor import Tensor
        if not isinstance(mask, Tensor) or not mask.dtype.is_bool:
            raise TypeError(f"masked_select: mask must be a bool Tensor, got "
                            f"{mask.dtype.name if isinstance(mask, Tensor) else type(mask).__name__}")
        record_data_dependence("masked_select has a shape that its data decides")
        shape = broadcast_shapes("masked_select", self.shape, mask.shape)
        flat = np.flatnonzero(np.broadcast_to(mask.numpy(), shape)).astype(np.int64)
        return self._broadcast_to(shape).reshape(-1)._gather_dims([(0, Tensor(flat, device=self.device))])

    def _take(self, index: "Tensor", shape: tuple[int, ...]) -> "Tensor":
        """self[..., index[...]] along the last axis, of the given shape: TAKE, an indexed load, 0 for
        an index outside [0, n). self's leading dims and index broadcast to `shape` first."""
        source = self._broadcast_to(tuple(shape) + (self.shape[-1],))
        return source._apply(Ops.TAKE, index._broadcast_to(tuple(shape)))

    def scatter(self, dim: int, index: "Tensor", src, reduce: str | None = None) -> "Tensor":
        """A copy of self with self[index[i][j]][j] = src[i][j] for dim=0 (torch.scatter, not in place);
        reduce="add" or "multiply" combines instead of replacing. src may be a number. With repeated
        indices and no reduce (undefined in PyTorch), the values written to one place are added."""
        if reduce not in (None, "add", "multiply"):
            raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
        if self.ndim == 0:
            return self._scatter_as_vector(index, src, lambda x, i, v: x.scatter(0, i, v, reduce))
        hit, values, padding = self._spread(dim, index, src, "scatter")
        if reduce == "multiply":
            factor = hit.where(values, values._const_like(1))._reduce(Ops.PROD, -1, False, "scatter")
            return self * factor.pad(padding, value=1)
        total = hit.where(values, _zero_of(self.dtype))._reduce(Ops.SUM, -1, False, "scatter").pad(padding)
        if reduce == "add":
            return self + total
        written = hit.any(-1).pad(padding)
        return written.where(total, self)

    def scatter_reduce(self, dim: int, index: "Tensor", src, reduce: str, *, include_self: bool = True) -> "Tensor":
        """A copy of self where the values of src that index sends to one place (as in scatter) are
        combined by reduce, "sum", "prod", "mean", "amax" or "amin", with self's value there unless
        include_self is False (torch.scatter_reduce, not in place). Places no index reaches keep
        self's value. An integer "mean" rounds down, as PyTorch's; "amax" and "amin" propagate NaN."""
        if reduce not in SCATTER_REDUCES:
            raise ValueError(f"scatter_reduce: reduce must be one of {', '.join(map(repr, SCATTER_REDUCES))}, got {reduce!r}")
        if self.ndim == 0:
            return self._scatter_as_vector(index, src, lambda x, i, v: x.scatter_reduce(0, i, v, reduce, include_self=include_self))
        hit, values, padding = self._spread(dim, index, src, "scatter_reduce")
        written = hit.any(-1).pad(padding)
        if reduce in ("amax", "amin"):
            combined = hit.where(values, values._const_like(_extreme_value(self.dtype, reduce == "amin")))
            combined = (combined.amax(-1) if reduce == "amax" else combined.amin(-1)).pad(padding)
            if include_self:
                combined = self.maximum(combined) if reduce == "amax" else self.minimum(combined)
            return written.where(combined, self)
        if reduce == "prod":
            combined = hit.where(values, values._const_like(1))._reduce(Ops.PROD, -1, False, "scatter_reduce").pad(padding, value=1)
            return written.where(combined * self if include_self else combined, self)
        combined = hit.where(values, _zero_of(self.dtype))._reduce(Ops.SUM, -1, False, "scatter_reduce").pad(padding)
        if include_self:
            combined = combined + self
        if reduce == "sum":
            return written.where(combined, self)
        count = hit.cast(dtypes.int64).sum(-1).pad(padding) + int(include_self)
        mean = combined / count.cast(self.dtype) if self.dtype.is_float else combined // count.cast(self.dtype)
        return written.where(mean, self)

    def _scatter_as_vector(self, index, src, scatter) -> "Tensor":
        """A scatter of a 0-d tensor, done as one of its 1-element vector."""
        from lazygrad.tensor import Tensor
        if not isinstance(index, Tensor):
            raise TypeError("scatter: index must be an integer Tensor")
        src = src.reshape(1) if isinstance(src, Tensor) else src
        return scatter(self.reshape(1), index.reshape(1), src).reshape(())

    def _spread(self, dim: int, index: "Tensor", src, name: str):
        """For a scatter along dim: (hit, values, padding). hit and values have index's shape with dim
        sized as self's and one more (last) axis, one step per element of index along dim: hit says
        whether that element's index is the place, values is src there; padding widens a result
        of index's shape to self's."""
        from lazygrad.tensor import Tensor
        dim = _normalize_axis(dim, self.ndim, name)
        if not isinstance(index, Tensor) or not index.dtype.is_int:
            raise TypeError(f"{name}: index must be an integer Tensor")
        shape = index.shape
        if index.ndim != self.ndim or any(i > s for d, (i, s) in enumerate(zip(shape, self.shape)) if d != dim):
            raise ValueError(f"{name}: index of shape {shape} must have the {self.ndim} dims of the input "
                             f"{self.shape} and be no larger outside dim {dim}")
        if isinstance(src, Tensor):
            if src.ndim != self.ndim or any(i > s for i, s in zip(shape, src.shape)):
                raise ValueError(f"{name}: index of shape {shape} must be no larger than src {src.shape}")
            src = src.shrink(tuple((0, i) for i in shape)).cast(self.dtype)
        else:
            src = self._filled(shape, src, name)
        size = self.shape[dim]

        def spread(t: "Tensor") -> "Tensor":  # position p along dim gets every element s (new last axis)
            moved = t.unsqueeze(-1).transpose(dim, -1)  # (.., 1 at dim, .., k)
            return moved.expand(moved.shape[:dim] + (size,) + moved.shape[dim + 1:])
        positions = Tensor.arange(size, device=self.device).reshape(
            tuple(size if d == dim else 1 for d in range(self.ndim)) + (1,))
        padding = tuple((0, 0) if d == dim else (0, s - i) for d, (i, s) in enumerate(zip(shape, self.shape)))
        return spread(index) == positions, spread(src), padding

    def masked_fill(self, mask: "Tensor", value) -> "Tensor":
        """value where mask is True (mask broadcasts to self's shape; value takes self's dtype)."""
        from lazygrad.tensor import Tensor
        if not isinstance(mask, Tensor) or not mask.dtype.is_bool:
            raise TypeError(f"masked_fill: mask must be a bool Tensor, got "
                            f"{mask.dtype.name if isinstance(mask, Tensor) else type(mask).__name__}")
        if broadcast_shapes("masked_fill", self.shape, mask.shape) != self.shape:
            raise ValueError(f"masked_fill: mask of shape {mask.shape} does not broadcast to the input's {self.shape}")
        if isinstance(value, Tensor):
            if value.ndim:
                raise ValueError(f"masked_fill: value must be a number or a 0-d tensor, got shape {value.shape}")
            value = value.cast(self.dtype)._broadcast_to(self.shape)
        else:
            value = self._filled(self.shape, value, "masked_fill")
        return mask.where(value, self)

    def _triangle(self, keep_below: bool, diagonal: int, name: str) -> "Tensor":
        from lazygrad.tensor import Tensor
        if self.ndim < 2:
            raise ValueError(f"{name}: input must have at least 2 dims, got shape {self.shape}")
        rows, columns = self.shape[-2:]
        offset = Tensor.arange(columns, device=self.device).reshape(1, columns) - \
            Tensor.arange(rows, device=self.device).reshape(rows, 1)  # column - row
        keep = offset <= diagonal if keep_below else offset >= diagonal
        return keep.where(self, _zero_of(self.dtype))

    def tril(self, diagonal: int = 0) -> "Tensor":
        """Zeros above the `diagonal`-th diagonal of the last two dims."""
        return self._triangle(True, diagonal, "tril")

    def triu(self, diagonal: int = 0) -> "Tensor":
        """Zeros below the `diagonal`-th diagonal of the last two dims."""
        return self._triangle(False, diagonal, "triu")

    def one_hot(self, num_classes: int = -1) -> "Tensor":
        """int64 one-hot vectors in a new last dim. num_classes=-1 reads the max (realizes self).
        Values outside [0, num_classes) give a row of zeros (PyTorch raises)."""
        from lazygrad.tensor import Tensor
        if not self.dtype.is_int:
            raise TypeError(f"one_hot: expects an integer tensor, got {self.dtype.name}")
        if num_classes == -1:
            if self.numel() == 0:
                raise ValueError("one_hot: cannot infer num_classes of an empty tensor; pass num_classes")
            num_classes = int(self.max().item()) + 1
        return (self.unsqueeze(-1) == Tensor.arange(num_classes, device=self.device)).cast(dtypes.int64)

    def _put_along(self, dim: int, index: "Tensor", value: "Tensor") -> "Tensor":
        """self with its positions `index` along dim replaced by value (self[..., index, ...]'s shape);
        where index repeats a position the last value written there wins, as in numpy. Each position
        along dim finds the last element of index naming it, then gathers that slice of value."""
        from lazygrad.tensor import Tensor
        if not index.dtype.is_int:
            raise IndexError(f"tensors used as indices must be integer tensors, got {index.dtype.name}")
        size, count = self.shape[dim], index.numel()
        if count == 0:
            return Tensor(self.lazydata)
        flat = index.cast(dtypes.int64).reshape(count)
        flat = (flat < 0).where(flat + size, flat)
        value = value.reshape(self.shape[:dim] + (count,) + self.shape[dim + 1:])
        hit = flat.reshape(1, count) == Tensor.arange(size, device=self.device).reshape(size, 1)
        last = hit.where(Tensor.arange(count, device=self.device).reshape(1, count), -1).max(axis=-1)
        chosen = value[(slice(None),) * dim + (last.maximum(0),)]
        written = (last >= 0).reshape((size,) + (1,) * (self.ndim - dim - 1))
        return written.where(chosen, Tensor(self.lazydata))

    def _embed_dim(self, dim: int, index, size: int) -> "Tensor":
        """The inverse of indexing dim with `index` (an int or slice) on a dim of `size`: self's values
        where the index selects, zeros elsewhere. Only movement ops."""
        def pad_dim(t: "Tensor", before: int, after: int) -> "Tensor":
            return t.pad(tuple((before, after) if d == dim else (0, 0) for d in range(t.ndim)))
        if not isinstance(index, slice):
            position = int(index) % size
            return pad_dim(self, position, size - position - 1)
        start, stop, step = index.indices(size)
        count = len(range(start, stop, step))
        if count == 0:
            return pad_dim(self, 0, size)
        result, low = self, start
        if step < 0:
            result, low, step = result.flip(dim), start + (count - 1) * step, -step
        if step > 1:  # element k goes to k * step: give each element step - 1 zeros after it
            shape = result.shape
            spread = result.unsqueeze(dim + 1).pad(
                tuple((0, step - 1) if d == dim + 1 else (0, 0) for d in range(result.ndim + 1)))
            result = spread.reshape(shape[:dim] + (count * step,) + shape[dim + 1:])
            result = result.narrow(dim, 0, (count - 1) * step + 1)
        return pad_dim(result, low, size - low - result.shape[dim])

    def __setitem__(self, indices, value) -> None:
        """`x[indices] = value` for basic indexing (ints, slices, None, ...), value broadcasting to
        x[indices]; or for a boolean mask of x's leading dims, one value (a scalar or x's trailing
        dims) for every True position.

        Functional underneath: x's node becomes `where(indexed region, value, old x)`, so it stays lazy
        and fuses. Differences from PyTorch: tensors made by indexing are not views, so `x[0][1] = 5`
        leaves x unchanged (write `x[0, 1] = 5`); and a tensor that requires grad can only be assigned
        to under no_grad (earlier uses of it would otherwise get wrong gradients).
        """
        from lazygrad.tensor import Tensor
        if isinstance(indices, Tensor) and indices.dtype.is_bool and indices.shape == self.shape[:indices.ndim] \
                and not (isinstance(value, Tensor) and value.ndim > self.ndim - indices.ndim):
            # x[mask] = value, the value one for every True position (a scalar, or the trailing dims):
            # no data-dependent shape, a where() over x
            mask = indices.reshape(indices.shape + (1,) * (self.ndim - indices.ndim))
            return self.__setitem__(Ellipsis, mask.where(value if isinstance(value, Tensor) else
                                                         self._filled(self.shape, value, "setitem"), Tensor(self.lazydata)))
        indices = self._normalized_indices(indices, "setitem")
        tensor_dims = [dim for dim, index in enumerate(indices) if isinstance(index, Tensor)]
        if tensor_dims and (len(tensor_dims) > 1 or any(
                not isinstance(index, Tensor) and index != slice(None) for index in indices)):
            raise TypeError("setitem: an integer Tensor or list index is supported alone, with `:` for the other "
                            "dims (x[rows] = value, x[:, columns] = value), or a boolean mask of x's leading "
                            "dims; use scatter() for the rest")
        if Tensor.grad_enabled and self.requires_grad:
            raise RuntimeError("setitem: cannot assign into a tensor that requires grad; do it under "
                               "`with no_grad():` or build the new value with where() or masked_fill()")
        target_shape = self[indices].shape
        if isinstance(value, Tensor):
            if value.device != self.device:
                raise ValueError(f"setitem: value is on {value.device}, the tensor on {self.device}")
            if broadcast_shapes("setitem", value.shape, target_shape) != target_shape:
                raise ValueError(f"setitem: value of shape {value.shape} cannot be broadcast to the indexed "
                                 f"shape {target_shape}")
            value = value.cast(self.dtype)._broadcast_to(target_shape)
        else:
            value = self._filled(target_shape, value, "setitem")
        if tensor_dims:
            result = self._put_along(tensor_dims[0], indices[tensor_dims[0]], value)
            self.lazydata = result.lazydata
            return None
        # one dim per dim of self: the Nones (size 1) go, each int-indexed dim comes back as size 1
        consuming = [index for index in indices if index is not None]
        per_dim_shape = tuple(1 if not isinstance(index, slice) else len(range(*index.indices(size)))
                              for index, size in zip(consuming, self.shape))
        placed = value.reshape(per_dim_shape)
        inside = Tensor.full(per_dim_shape, True, dtypes.bool, self.device)
        for dim, (index, size) in enumerate(zip(consuming, self.shape)):
            placed, inside = placed._embed_dim(dim, index, size), inside._embed_dim(dim, index, size)
        result = inside.where(placed, Tensor(self.lazydata))
        self.lazydata = result.lazydata
        if result._ctx is not None:
            self._ctx, self.requires_grad = result._ctx, True
