"""Views: how a movement op changes the way a buffer is read, without copying it.

A `View` maps an index in its shape to a memory offset: `offset + sum(index[d] * strides[d])`,
valid only where every `mask[d][0] <= index[d] < mask[d][1]` (outside the mask the value is 0,
which is how PAD works). A `ShapeTracker` is a stack of views for reshapes that one view cannot
express (a reshape of a transposed or padded view): the last view is what the kernel indexes,
and each earlier view reads the flat index the next one produces.

The scheduler applies every movement op of a fused chain to a ShapeTracker; renderers ask it for
an index expression and a validity condition over their loop variables (`index_and_valid`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from lazygrad.shape.symbolic import Lin, narrower_bounds


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running if size != 1 else 0)
        running *= size
    return tuple(reversed(strides))


@dataclass(frozen=True)
class View:
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0
    mask: tuple[tuple[int, int], ...] | None = None

    @staticmethod
    def contiguous(shape: tuple[int, ...]) -> "View":
        return View(tuple(shape), contiguous_strides(tuple(shape)))

    @property
    def is_contiguous(self) -> bool:
        return self.offset == 0 and self.mask is None and self.strides == contiguous_strides(self.shape)

    @property
    def is_empty_mask(self) -> bool:
        return self.mask is not None and any(lo >= hi for lo, hi in self.mask)

    def _canonical(self, shape, strides, offset, mask) -> "View":
        """Drop strides of size-1 dims and masks that cover everything."""
        strides = tuple(0 if size == 1 else stride for size, stride in zip(shape, strides))
        if mask is not None:
            if any(lo >= hi for lo, hi in mask):
                mask = tuple((0, 0) for _ in shape)
                strides, offset = tuple(0 for _ in shape), 0
            elif all(lo == 0 and hi == size for (lo, hi), size in zip(mask, shape)):
                mask = None
        return View(tuple(shape), strides, offset, mask)

    def permute(self, order: tuple[int, ...]) -> "View":
        mask = tuple(self.mask[axis] for axis in order) if self.mask else None
        return self._canonical(tuple(self.shape[axis] for axis in order),
                               tuple(self.strides[axis] for axis in order), self.offset, mask)

    def expand(self, new_shape: tuple[int, ...]) -> "View":
        strides = tuple(stride if old == new else 0
                        for old, new, stride in zip(self.shape, new_shape, self.strides))
        mask = None
        if self.mask is not None:
            mask = tuple(m if old == new else ((0, new) if m[1] > m[0] else (0, 0))
                         for m, old, new in zip(self.mask, self.shape, new_shape))
        return self._canonical(new_shape, strides, self.offset, mask)

    def pad(self, padding: tuple[tuple[int, int], ...]) -> "View":
        offset = self.offset - sum(lo * stride for (lo, _), stride in zip(padding, self.strides))
        old_mask = self.mask or tuple((0, size) for size in self.shape)
        mask = tuple((lo + mlo, lo + mhi) for (lo, _), (mlo, mhi) in zip(padding, old_mask))
        shape = tuple(size + lo + hi for size, (lo, hi) in zip(self.shape, padding))
        return self._canonical(shape, self.strides, offset, mask)

    def shrink(self, bounds: tuple[tuple[int, int], ...]) -> "View":
        offset = self.offset + sum(start * stride for (start, _), stride in zip(bounds, self.strides))
        mask = None
        if self.mask is not None:
            mask = tuple((min(max(mlo - start, 0), end - start), min(max(mhi - start, 0), end - start))
                         for (start, end), (mlo, mhi) in zip(bounds, self.mask))
        shape = tuple(end - start for start, end in bounds)
        return self._canonical(shape, self.strides, offset, mask)

    def without_broadcast_mask(self) -> "View":
        """This view with the mask's bounds dropped on the dims it does not move along (stride 0):
        the index there is the one of a position inside the bounds, so it never leaves the buffer."""
        if self.mask is None or self.is_empty_mask:
            return self
        mask = tuple((0, size) if stride == 0 else bounds for bounds, size, stride in zip(self.mask, self.shape, self.strides))
        return self._canonical(self.shape, self.strides, self.offset, mask)

    def flip(self, axes: tuple[int, ...]) -> "View":
        strides, offset, mask = list(self.strides), self.offset, list(self.mask) if self.mask else None
        for axis in axes:
            size = self.shape[axis]
            if size == 0:
                continue
            offset += (size - 1) * strides[axis]
            strides[axis] = -strides[axis]
            if mask is not None:
                lo, hi = mask[axis]
                mask[axis] = (size - hi, size - lo)
        return self._canonical(self.shape, tuple(strides), offset, tuple(mask) if mask else None)

    def reshape(self, new_shape: tuple[int, ...]) -> "View | None":
        """The same data seen in new_shape as one view, or None when that needs a second view."""
        new_shape = tuple(new_shape)
        if new_shape == self.shape:
            return self
        if self.is_empty_mask and not new_shape:
            return None  # a 0-d view has no dim to carry "nothing is valid": keep this view below
        if 0 in self.shape or self.is_empty_mask:
            mask = tuple((0, 0) for _ in new_shape) if self.is_empty_mask else None
            return View(new_shape, tuple(0 for _ in new_shape), 0, mask)
        if self.is_contiguous:
            return View.contiguous(new_shape)
        # Group the old dims (size 1 dims dropped) into runs that are contiguous with each other;
        # a masked dim is a run of its own. Every new dim must then split exactly one run.
        old = [(size, stride, self.mask[axis] if self.mask else (0, size))
               for axis, (size, stride) in enumerate(zip(self.shape, self.strides)) if size != 1]
        runs: list[list] = []  # each: [size, inner stride, mask or None]
        for size, stride, (lo, hi) in old:
            masked = (lo, hi) != (0, size)
            if runs and not masked and runs[-1][2] is None and runs[-1][1] == stride * size:
                runs[-1][0] *= size
                runs[-1][1] = stride
            else:
                runs.append([size, stride, (lo, hi) if masked else None])
        new_strides, new_mask = [], []
        run_index, remaining = 0, None
        for size in new_shape:
            if size == 1:
                new_strides.append(0)
                new_mask.append((0, 1))
                continue
            if run_index >= len(runs):
                return None
            run_size, run_stride, run_mask = runs[run_index]
            if remaining is None:
                remaining = run_size
            if remaining % size != 0:
                return None
            outermost, remaining = remaining == run_size, remaining // size
            if run_mask is not None and outermost:
                # a masked run splits only where its bounds fall between whole inner blocks
                if run_mask[0] % remaining or run_mask[1] % remaining:
                    return None
                new_mask.append((run_mask[0] // remaining, run_mask[1] // remaining))
            else:
                new_mask.append((0, size))
            new_strides.append(run_stride * remaining)
            if remaining == 1:
                run_index, remaining = run_index + 1, None
        if run_index != len(runs):
            return None
        mask = tuple(new_mask) if self.mask is not None else None
        return self._canonical(new_shape, tuple(new_strides), self.offset, mask)

    def index_and_valid(self, indices: list[Lin]) -> tuple[Lin, list[tuple[Lin, int, int]]]:
        """The memory offset for per-dim indices, and the conditions under which it is valid."""
        offset = Lin.of(self.offset)
        for index, stride in zip(indices, self.strides):
            if stride:
                offset = offset + index * stride
        conditions = []
        if self.mask is not None:
            for index, (lo, hi), size in zip(indices, self.mask, self.shape):
                if (lo, hi) != (0, size):
                    conditions.append((index, lo, hi))
        return offset, conditions


def unravel(flat: Lin, shape: tuple[int, ...]) -> list[Lin]:
    """Per-dim indices of a row-major flat index."""
    indices = []
    for axis in range(len(shape)):
        inner = math.prod(shape[axis + 1:])
        index = flat // inner if inner else Lin.of(0)
        indices.append(index % shape[axis] if axis > 0 and shape[axis] else index)
    return indices


def _flat_steps(shape: tuple[int, ...]) -> tuple[int, ...]:
    """How far a row-major flat index moves per step of each dim (size-1 dims included)."""
    steps, running = [], 1
    for size in reversed(shape):
        steps.append(running)
        running *= size
    return tuple(reversed(steps))


def _stepped_dim(stride: int, shape: tuple[int, ...], steps: tuple[int, ...]) -> tuple[int, int] | None:
    """The dim of `shape` a positive flat stride moves along, and by how many of its steps (None if
    the stride is no whole number of that dim's steps)."""
    for dim, size in enumerate(shape):
        if size > 1 and stride >= steps[dim]:
            return (dim, stride // steps[dim]) if stride % steps[dim] == 0 else None
    return None


def _first_valid(outer: View, inner_shape: tuple[int, ...]) -> tuple[tuple[tuple[int, int], ...], list[int]] | None:
    """outer's valid range per dim, and the index into inner_shape that its first valid element
    reads (None when that lies outside inner_shape, or nothing is valid)."""
    bounds = outer.mask or tuple((0, size) for size in outer.shape)
    base = outer.offset + sum(lo * stride for (lo, _), stride in zip(bounds, outer.strides))
    if 0 in inner_shape or 0 in outer.shape or outer.is_empty_mask or not 0 <= base < math.prod(inner_shape):
        return None
    return bounds, [base // step % size for step, size in zip(_flat_steps(inner_shape), inner_shape)]


def merge_views(outer: View, inner: View) -> View | None:
    """One view reading what `outer` reads through `inner` (outer indexes inner's elements in
    row-major order), when each dim of outer moves along a single dim of inner without ever carrying
    into the next one: the second half of a channel shuffle (a transposed reshape, then split)
    read as channel pairs. None otherwise."""
    first = None if inner.is_empty_mask else _first_valid(outer, inner.shape)
    if first is None:
        return None
    bounds, start = first
    steps = _flat_steps(inner.shape)
    reach, movers, strides = list(start), [[] for _ in inner.shape], []
    for dim, (stride, (lo, hi)) in enumerate(zip(outer.strides, bounds)):
        if stride == 0 or hi - lo <= 1:
            strides.append(0)
            continue
        moved = _stepped_dim(stride, inner.shape, steps) if stride > 0 else None
        if moved is None:
            return None
        inner_dim, multiple = moved
        reach[inner_dim] += multiple * (hi - lo - 1)
        movers[inner_dim].append((dim, multiple))
        strides.append(multiple * inner.strides[inner_dim])
    if any(last >= size for last, size in zip(reach, inner.shape)):
        return None
    mask = list(bounds)
    for inner_dim, (lo, hi) in enumerate(inner.mask or ()):
        if not movers[inner_dim]:
            if not lo <= start[inner_dim] < hi:
                return None
            continue
        if (lo, hi) == (0, inner.shape[inner_dim]):
            continue
        if len(movers[inner_dim]) != 1 or movers[inner_dim][0][1] != 1:
            return None
        dim = movers[inner_dim][0][0]
        shift = mask[dim][0] - start[inner_dim]  # outer index mask[dim][0] reads inner index start
        mask[dim] = (max(mask[dim][0], lo + shift), min(mask[dim][1], hi + shift))
    offset = inner.offset + sum(index * stride for index, stride in zip(start, inner.strides))
    offset -= sum(lo * stride for (lo, _), stride in zip(bounds, strides))
    return outer._canonical(outer.shape, tuple(strides), offset, tuple(mask))


def split_along(outer: View, inner_shape: tuple[int, ...]) -> tuple[int, ...]:
    """outer's shape with each dim that carries from one dim of inner_shape into the next split at
    the carry, where that can be done evenly (116 channels two apart over inner dims (116, 2) become
    58 x 2; a masked dim only where its bounds fall between the pieces), so that `merge_views` can
    then make the two views one."""
    first = _first_valid(outer, inner_shape)
    if first is None:
        return outer.shape
    (bounds, start), steps = first, _flat_steps(inner_shape)
    finer: list[int] = []
    for size, stride, (lo, hi) in zip(outer.shape, outer.strides, bounds):
        pieces, span = [], hi - lo  # span: the valid steps of the part not yet split off
        while stride > 0 and span > 1:
            moved = _stepped_dim(stride, inner_shape, steps)
            if moved is None:
                break
            inner_dim, multiple = moved
            if start[inner_dim] + multiple * (span - 1) < inner_shape[inner_dim]:
                break
            piece = inner_shape[inner_dim] // multiple
            block = piece * math.prod(pieces)
            if piece <= 1 or piece * multiple != inner_shape[inner_dim] or size % block or lo % block or hi % block \
                    or start[inner_dim] + multiple * (piece - 1) >= inner_shape[inner_dim]:
                pieces = []
                break
            pieces.insert(0, piece)
            span //= piece
            stride *= piece
        finer += [size // math.prod(pieces)] + pieces
    return tuple(finer)


@dataclass(frozen=True)
class ShapeTracker:
    views: tuple[View, ...]

    @staticmethod
    def from_shape(shape: tuple[int, ...]) -> "ShapeTracker":
        return ShapeTracker((View.contiguous(tuple(shape)),))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.views[-1].shape

    @property
    def is_contiguous(self) -> bool:
        return len(self.views) == 1 and self.views[0].is_contiguous

    def _replace_last(self, view: View) -> "ShapeTracker":
        below = self.views[:-1]
        while below and (merged := merge_views(view, below[-1])) is not None:
            below, view = below[:-1], merged
        return ShapeTracker(below + (view,))

    def permute(self, order) -> "ShapeTracker":
        return self._replace_last(self.views[-1].permute(tuple(order)))

    def expand(self, new_shape) -> "ShapeTracker":
        return self._replace_last(self.views[-1].expand(tuple(new_shape)))

    def pad(self, padding) -> "ShapeTracker":
        return self._replace_last(self.views[-1].pad(tuple(padding)))

    def shrink(self, bounds) -> "ShapeTracker":
        return self._replace_last(self.views[-1].shrink(tuple(bounds)))

    def flip(self, axes) -> "ShapeTracker":
        return self._replace_last(self.views[-1].flip(tuple(axes)))

    def reshape(self, new_shape) -> "ShapeTracker":
        if len(self.views) > 1 and self.views[-1].is_contiguous and tuple(new_shape) == self.views[-2].shape:
            return ShapeTracker(self.views[:-1])  # back to the view below: the last one only reshaped it
        view = self.views[-1].reshape(tuple(new_shape))
        if view is not None:
            return self._replace_last(view)
        return ShapeTracker(self.views + (View.contiguous(tuple(new_shape)),))

    def without_broadcast_mask(self) -> "ShapeTracker":
        """See View.without_broadcast_mask; a stack of views keeps its masks."""
        return self if len(self.views) > 1 else ShapeTracker((self.views[0].without_broadcast_mask(),))

    def apply(self, op, arg) -> "ShapeTracker":
        """Apply a movement op (its op-table record, `Ops.RESHAPE`)."""
        return getattr(self, op.name.lower())(arg)

    def index_and_valid(self, indices: list[Lin]) -> tuple[Lin, list[tuple[Lin, int, int]]]:
        """The memory offset for per-dim indices, and the conditions under which it is valid. The
        offset is only read where the conditions hold, so a condition that confines a loop variable
        (`i < 111` of a padded view) narrows that variable's range for the rest: the divisions and
        modulos of the views below fold with it ((i + 1) // 112 is 0), and the conditions it
        implies drop out (ResNet-18's max pool backward at batch 16: six divisions and remainders
        fewer per load, 236 -> 190 ms)."""
        offset, conditions = self._index_and_valid(indices)
        confining: list[tuple[Lin, int, int]] = []
        for _ in range(len(indices)):  # each round confines at least one more variable
            bounds = narrower_bounds(conditions)
            if not bounds:
                break
            if any(lo > hi for lo, hi in bounds.values()):
                return offset, [(Lin.of(0), 0, 0)]  # contradicting conditions: never valid
            confining += [condition for condition in conditions if len(condition[0].terms) == 1
                          and next(iter(condition[0].terms)).name in bounds]
            indices = [index.narrowed(bounds) for index in indices]
            offset, conditions = self._index_and_valid(indices)
            conditions = [(expr, lo, hi) for expr, lo, hi in conditions if expr.min < lo or expr.max >= hi]
        return offset, confining + conditions

    def _index_and_valid(self, indices: list[Lin]) -> tuple[Lin, list[tuple[Lin, int, int]]]:
        offset, conditions = self.views[-1].index_and_valid(indices)
        for view in reversed(self.views[:-1]):
            inner_offset, inner_conditions = view.index_and_valid(unravel(offset, view.shape))
            offset, conditions = inner_offset, conditions + inner_conditions
        return offset, conditions
