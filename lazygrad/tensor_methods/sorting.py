"""sort, argsort, topk, kthvalue, median, mode, cummax and cummin of Tensor, composed from comparisons
and reduces.

Front-end layer, a mixin of lazygrad.tensor.Tensor. Sorting has no primitive of its own: each
element's rank along the dim is the number of elements that come before it (smaller, or equal and at
a lower index: a stable order), one reduce over a broadcast comparison; the sorted values and their
indices are then gathered by rank, one more reduce each. That is n * n comparisons per row of n: fine
for the rows models sort (scores, a few thousand classes), slow for a million elements. The order is
PyTorch's: NaN is larger than every number (last ascending, first descending), ties keep their
original order, and the values' gradient goes back to where each value came from. mode counts each
element's equals the same way, and cummax and cummin find the index of their running extreme among
the elements so far (a running max first, one reduce, then one comparison per pair).
"""
from __future__ import annotations

from typing import TYPE_CHECKING


from lazygrad.dtype import dtypes
from lazygrad.tensor_methods.helpers import _extreme_value, _normalize_axis, _pick_axis
from lazygrad.tensor_methods.reduce import ValuesIndices
from lazygrad.ops import Ops

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


class SortingMethods:
    """sort, argsort, topk, kthvalue and median along one dim."""
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
        size = self._sorted_dim_size(dim, "topk")
        if not 0 <= k <= size:
            raise ValueError(f"topk: k={k} is out of range for dim {dim} of size {size} (shape {self.shape})")
        return self._ordered(dim, largest, k, "topk")

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
        """ValuesIndices of the k-th smallest element along dim (k from 1), as PyTorch."""
        size = self._sorted_dim_size(dim, "kthvalue")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= size:
            raise ValueError(f"kthvalue: k must be an int from 1 to {size} (dim {dim} of shape {self.shape}), got {k!r}")
        return self._at_rank(lambda x: _rank_per_row(x, k - 1), dim, keepdim, "kthvalue")

    def median(self, dim: int | None = None, keepdim: bool = False):
        """The lower median, as PyTorch: of all elements when dim is None (a Tensor), else
        ValuesIndices along dim; NaN where a row holds NaN (the first NaN's index)."""
        if dim is None:
            return self.reshape(-1).median(0).values.reshape((1,) * self.ndim if keepdim else ())
        size = self._sorted_dim_size(dim, "median")
        if size == 0:
            raise ValueError(f"median: dim {dim} of shape {self.shape} is empty")

        def rank(x):
            lower = _rank_per_row(x, (size - 1) // 2)
            if not x.dtype.is_float:
                return lower
            nans = (x != x).detach().cast(dtypes.int64).sum(-1, keepdim=True)
            return (nans > 0).where(size - nans, lower)  # NaN sorts last: the first NaN
        return self._at_rank(rank, dim, keepdim, "median")

    def mode(self, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
        """ValuesIndices of the most frequent value along dim, as PyTorch: of several equally frequent
        ones the smallest, with the index of its last occurrence; NaNs count as equal to each other
        and larger than every number. The values' gradient goes to that element."""
        from lazygrad.tensor import Tensor
        if self.ndim == 0:
            _normalize_axis(dim, 1, "mode")
            values, indices = self.reshape(1).mode(0)
            return ValuesIndices(values.reshape(()), indices.reshape(()))
        if self._sorted_dim_size(dim, "mode") == 0:
            raise ValueError(f"mode: dim {dim} of shape {self.shape} is empty")
        dim = _normalize_axis(dim, self.ndim, "mode")
        x = self.transpose(dim, -1) if dim != self.ndim - 1 else self
        size = x.shape[-1]
        key = x.detach().cast(dtypes.int8) if x.dtype.is_bool else x.detach()
        row, column = key.unsqueeze(-1), key.unsqueeze(-2)   # element i along dim -2, element j along -1
        same = _ties(column, row)
        counts = same.cast(dtypes.int64).sum(-1)
        candidate = counts == counts.max(axis=-1, keepdim=True)
        positions = Tensor.arange(size, device=self.device)
        later = positions.reshape(1, size) > positions.reshape(size, 1)
        # j beats i when both are most frequent and j's value is smaller, or the same and later
        beaten = candidate.unsqueeze(-2).logical_and(_comes_before(column, row, False).logical_or(same.logical_and(later)))
        winner = candidate.logical_and(beaten.any(-1).logical_not())
        indices = winner.where(positions, 0).sum(-1, keepdim=True)
        values = x.gather(-1, indices)
        if dim != self.ndim - 1:
            values, indices = values.transpose(dim, -1), indices.transpose(dim, -1)
        if keepdim:
            return ValuesIndices(values, indices)
        return ValuesIndices(values.squeeze(dim), indices.squeeze(dim))

    def cummax(self, dim: int | None = None, *, axis=None) -> ValuesIndices:
        """ValuesIndices of the running maximum along dim, as PyTorch: each index is the last element
        so far equal to it (NaN propagates, with the index of the latest NaN), and the values' gradient
        goes to that element."""
        return self._running_extreme(_pick_axis(axis, dim, "cummax", 0), True, "cummax")

    def cummin(self, dim: int | None = None, *, axis=None) -> ValuesIndices:
        """cummax's counterpart: the running minimum and its index."""
        return self._running_extreme(_pick_axis(axis, dim, "cummin", 0), False, "cummin")

    def _running_extreme(self, dim: int, largest: bool, name: str) -> ValuesIndices:
        from lazygrad.tensor import Tensor
        if self.ndim == 0:
            _normalize_axis(dim, 1, name)
            values, indices = self.reshape(1)._running_extreme(0, largest, name)
            return ValuesIndices(values.reshape(()), indices.reshape(()))
        dim = _normalize_axis(dim, self.ndim, name)
        x = self.transpose(dim, -1) if dim != self.ndim - 1 else self
        size = x.shape[-1]
        if x.numel() == 0:
            return ValuesIndices(self, Tensor.zeros(self.shape, dtype=dtypes.int64, device=self.device))
        key = x.detach().cast(dtypes.int8) if x.dtype.is_bool else x.detach()
        if not largest:  # the order reversed: a running max of it is the running min
            key = -key if key.dtype.is_float else ~key
        lowest = _extreme_value(key.dtype, False)
        running = key._cumulative(Ops.MAX_REDUCE, -1, lowest, name)
        # row i of the windows holds the elements up to i, right-aligned: column k is element i + k - (size - 1)
        windows = key._sliding_windows(lowest)
        steps = Tensor.arange(size, device=self.device)
        positions = steps.reshape(size, 1) + steps.reshape(1, size) - (size - 1)
        found = _ties(windows, running.unsqueeze(-1)).logical_and(positions >= 0)
        indices = found.where(positions, -1).max(axis=-1)
        values = x.gather(-1, indices)
        if dim != self.ndim - 1:
            values, indices = values.transpose(dim, -1), indices.transpose(dim, -1)
        return ValuesIndices(values, indices)

    def _sorted_dim_size(self, dim: int, name: str) -> int:
        if self.ndim == 0:  # one element along dim 0 or -1, as in PyTorch
            _normalize_axis(dim, 1, name)
            return 1
        return self.shape[_normalize_axis(dim, self.ndim, name)]

    def _at_rank(self, rank, dim: int, keepdim: bool, name: str) -> ValuesIndices:
        """The element whose ascending rank along dim is rank(x) (x with dim moved last; one int64
        per row, shape (..., 1)), with its index."""
        if self.ndim == 0:
            _normalize_axis(dim, 1, name)
            values, indices = self.reshape(1)._at_rank(rank, 0, False, name)
            return ValuesIndices(values.reshape(()), indices.reshape(()))
        dim = _normalize_axis(dim, self.ndim, name)
        x = self.transpose(dim, -1) if dim != self.ndim - 1 else self
        values, indices = _gathered(x, _ranks(x, False), rank(x))
        if dim != self.ndim - 1:
            values, indices = values.transpose(dim, -1), indices.transpose(dim, -1)
        if keepdim:
            return ValuesIndices(values, indices)
        return ValuesIndices(values.squeeze(dim), indices.squeeze(dim))

    def _ordered(self, dim: int, descending: bool, count: int | None, name: str) -> ValuesIndices:
        """The first `count` (all when None) elements along dim in order, with their indices."""
        from lazygrad.tensor import Tensor
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
        values, indices = _gathered(x, _ranks(x, descending), Tensor.arange(count, device=self.device))
        if dim != self.ndim - 1:
            values, indices = values.transpose(dim, -1), indices.transpose(dim, -1)
        return ValuesIndices(values, indices)


def _rank_per_row(x: "Tensor", rank: int) -> "Tensor":
    """The same rank for every row of x along its last dim, shape (..., 1)."""
    from lazygrad.tensor import Tensor
    return Tensor.full(x.shape[:-1] + (1,), rank, dtype=dtypes.int64, device=x.device)


def _ranks(x: "Tensor", descending: bool) -> "Tensor":
    """Each element's place along the last dim in order: the elements that come before it, or tie
    with it at a lower index (int64, x's shape)."""
    from lazygrad.tensor import Tensor
    size = x.shape[-1]
    key = x.detach().cast(dtypes.int8) if x.dtype.is_bool else x.detach()
    positions = Tensor.arange(size, device=x.device)
    row, column = key.unsqueeze(-1), key.unsqueeze(-2)   # element i along dim -2, element j along -1
    earlier = positions.reshape(1, size) < positions.reshape(size, 1)
    before = _comes_before(column, row, descending).logical_or(_ties(column, row).logical_and(earlier))
    return before.cast(dtypes.int64).sum(-1)


def _gathered(x: "Tensor", ranks: "Tensor", wanted: "Tensor") -> ValuesIndices:
    """The elements of x whose rank along the last dim is each of `wanted` (the last dim of its
    shape, broadcast against x's others), with their indices; the values' gradient goes back to them."""
    from lazygrad.tensor import Tensor, no_grad
    hit = ranks.unsqueeze(-2) == wanted.unsqueeze(-1)     # (..., wanted, element)
    indices = hit.where(Tensor.arange(x.shape[-1], device=x.device), 0).sum(-1)
    with no_grad():
        values = hit.where(x.unsqueeze(-2), _extreme_value(x.dtype, False)).max(axis=-1)
    values = values._with_gradient((x,), lambda grad, out, sources, rule: [hit.where(grad.unsqueeze(-1), 0).sum(-2)])
    return ValuesIndices(values, indices)
