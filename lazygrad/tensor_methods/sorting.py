"""sort, argsort and topk of Tensor, composed from comparisons and reduces.

Front-end layer, a mixin of lazygrad.tensor.Tensor. Sorting has no primitive of its own: each
element's rank along the dim is the number of elements that come before it (smaller, or equal and at
a lower index: a stable order), one reduce over a broadcast comparison; the sorted values and their
indices are then gathered by rank, one more reduce each. That is n * n comparisons per row of n: fine
for the rows models sort (scores, a few thousand classes), slow for a million elements. The order is
PyTorch's: NaN is larger than every number (last ascending, first descending), ties keep their
original order, and the values' gradient goes back to where each value came from.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.tensor_methods.helpers import _normalize_axis
from lazygrad.tensor_methods.reduce import ValuesIndices

if TYPE_CHECKING:  # only for annotations: tensor.py imports this module
    from lazygrad.tensor import Tensor


def _comes_before(a: "Tensor", b: "Tensor", descending: bool) -> "Tensor":
    """Whether a sorts before b (strictly), NaN being the largest value."""
    if not a.dtype.is_float:
        return a > b if descending else a < b
    a_nan, b_nan = a != a, b != b
    if descending:
        return (a > b).logical_or(a_nan.logical_and(b_nan.logical_not()))
    return (a < b).logical_or(b_nan.logical_and(a_nan.logical_not()))


def _ties(a: "Tensor", b: "Tensor") -> "Tensor":
    if not a.dtype.is_float:
        return a == b
    return (a == b).logical_or((a != a).logical_and(b != b))


def _lowest(dtype):
    if dtype.is_bool:
        return False
    return -np.inf if dtype.is_float else int(np.iinfo(dtype.np).min)


class SortingMethods:
    """sort, argsort and topk along one dim."""
    __slots__ = ()

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:
        """ValuesIndices(values, indices) of the elements along dim in order (ascending unless
        descending), as PyTorch, NaN the largest; always stable (`stable` is accepted for PyTorch's
        signature)."""
        return self._ordered(dim, descending, None, "sort")

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> "Tensor":
        """The int64 indices that sort the elements along dim (see sort)."""
        return self._ordered(dim, descending, None, "argsort").indices

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:
        """ValuesIndices of the k largest (or smallest) elements along dim, always in order (`sorted`
        is accepted for PyTorch's signature); of equal elements the first ones (PyTorch leaves that
        choice open)."""
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"topk: k must be an int, got {type(k).__name__}")
        size = self.shape[_normalize_axis(dim, self.ndim, "topk")] if self.ndim else 1
        if not 0 <= k <= size:
            raise ValueError(f"topk: k={k} is out of range for dim {dim} of size {size} (shape {self.shape})")
        return self._ordered(dim, largest, k, "topk")

    def _ordered(self, dim: int, descending: bool, count: int | None, name: str) -> ValuesIndices:
        """The first `count` (all when None) elements along dim in order, with their indices."""
        from lazygrad.tensor import Tensor, no_grad
        if self.ndim == 0:  # one element along dim 0 or -1, as in PyTorch
            _normalize_axis(dim, 1, name)
            values, indices = self.reshape(1)._ordered(0, descending, count, name)
            return ValuesIndices(values.reshape(()), indices.reshape(())) if count != 0 else ValuesIndices(values, indices)
        dim = _normalize_axis(dim, self.ndim, name)
        x = self.transpose(dim, -1) if dim != self.ndim - 1 else self
        size = x.shape[-1]
        count = size if count is None else count
        if count == 0 or x.numel() == 0:
            values = x[..., :count]
            indices = Tensor.zeros(values.shape, dtype=dtypes.int64, device=self.device)
            return ValuesIndices(values.transpose(dim, -1), indices.transpose(dim, -1))
        key = x.detach().cast(dtypes.int8) if x.dtype.is_bool else x.detach()
        positions = Tensor.arange(size, device=self.device)
        # rank of element i: the elements j that come before it, or tie with it at a lower index
        row, column = key.unsqueeze(-1), key.unsqueeze(-2)   # element i along dim -2, element j along -1
        earlier = positions.reshape(1, size) < positions.reshape(size, 1)
        before = _comes_before(column, row, descending).logical_or(_ties(column, row).logical_and(earlier))
        ranks = before.cast(dtypes.int64).sum(-1)            # (..., size)
        # slot r of the result holds the element whose rank is r
        hit = ranks.unsqueeze(-2) == Tensor.arange(count, device=self.device).reshape(count, 1)  # (..., r, i)
        indices = hit.where(positions, 0).sum(-1)
        with no_grad():
            values = hit.where(x.unsqueeze(-2), _lowest(x.dtype)).max(axis=-1)
        values = values._with_gradient((x,), lambda grad, out, sources, rule: [hit.where(grad.unsqueeze(-1), 0).sum(-2)])
        if dim != self.ndim - 1:
            values, indices = values.transpose(dim, -1), indices.transpose(dim, -1)
        return ValuesIndices(values, indices)
