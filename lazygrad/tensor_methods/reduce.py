"""Reductions of Tensor: sum, prod, max, min, amax, amin, mean, var, std, any, all, argmax, argmin,
logsumexp, softmax and cumsum and cumprod, composed from the SUM/MAX_REDUCE/PROD primitives.

Front-end layer, a mixin of lazygrad.tensor.Tensor.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple


from lazygrad.dtype import DType, dtypes, finfo
from lazygrad.tensor_methods.helpers import _normalize_axis, _pick_axis, computes_in_float32
from lazygrad.ops import OpDef, Ops

if TYPE_CHECKING:  # only for annotations: tensor.py imports this module
    from lazygrad.tensor import Tensor


class ValuesIndices(NamedTuple):
    """What max(dim) and min(dim) return, as PyTorch's torch.return_types.max: a tuple of the values
    and the int64 indices, also readable as `.values` and `.indices`."""
    values: "Tensor"
    indices: "Tensor"


def _all_dims_if_empty(dim):
    """PyTorch's amax and amin read an empty dim tuple as all dims."""
    return None if isinstance(dim, (tuple, list)) and len(dim) == 0 else dim


def _integer_total(dtype: DType) -> DType:
    """The dtype a sum or product of bool or integers is computed in: int64, as PyTorch's, except for
    uint64, which int64 cannot hold (numpy's and the array API's uint64)."""
    return dtypes.uint64 if dtype == dtypes.uint64 else dtypes.int64


class ReduceMethods:
    """Reductions over axes, softmax and running (cumulative) reductions of Tensor."""
    __slots__ = ()

    # ---- reductions ---------------------------------------------------------------------------

    def _reduce_axes(self, axis, op: str) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        normalized = tuple(_normalize_axis(a, self.ndim, op) for a in axes)
        if self.ndim == 0:
            return ()  # a 0-d tensor accepts dim 0 and -1, as in PyTorch, and has nothing to reduce
        if len(set(normalized)) != len(normalized):
            raise ValueError(f"{op}: axis {axis} repeats a dimension")
        return normalized

    def _reduce(self, op: OpDef, axis, keepdim: bool, name: str) -> "Tensor":
        axes = self._reduce_axes(axis, name)
        if self.ndim == 0:
            return self
        reduced = self._apply(op, arg=axes)
        if keepdim:
            return reduced
        return reduced.reshape(tuple(size for a, size in enumerate(self.shape) if a not in axes))

    def sum(self, axis=None, keepdim: bool = False, dtype=None, *, dim=None) -> "Tensor":
        axis = dim if dim is not None else axis
        source = self.cast(dtype) if dtype is not None else (
            self.cast(_integer_total(self.dtype)) if self.dtype.category < 2 else self)
        return source._reduce(Ops.SUM, axis, keepdim, "sum")

    def prod(self, axis=None, keepdim: bool = False, dtype=None, *, dim=None) -> "Tensor":
        axis = dim if dim is not None else axis
        source = self.cast(dtype) if dtype is not None else (
            self.cast(_integer_total(self.dtype)) if self.dtype.category < 2 else self)
        return source._reduce(Ops.PROD, axis, keepdim, "prod")

    def _check_not_empty(self, axis, name: str) -> None:
        axes = self._reduce_axes(axis, name)
        if any(self.shape[a] == 0 for a in axes) or (axis is None and self.numel() == 0):
            raise ValueError(f"{name}: cannot reduce over an empty dimension of a tensor of shape {self.shape}")

    def max(self, dim=None, keepdim: bool = False, *, axis=None):
        """As in PyTorch: max() is the largest element; max(dim) (one int) is ValuesIndices(values,
        indices) along dim, the index of the first maximum (NaN counts as the maximum), the values'
        gradient going to that element alone; max(other_tensor) is the elementwise maximum. tinygrad's
        spelling, max(axis=...) or a tuple of dims, gives the values alone, ties sharing the gradient
        (as amax)."""
        return self._extreme(dim, keepdim, axis, "max")

    def min(self, dim=None, keepdim: bool = False, *, axis=None):
        """max's counterpart (see max)."""
        return self._extreme(dim, keepdim, axis, "min")

    def _extreme(self, dim, keepdim: bool, axis, name: str):
        from lazygrad.tensor import Tensor
        largest = name == "max"
        if isinstance(dim, Tensor):
            return self.maximum(dim) if largest else self.minimum(dim)
        if axis is not None or dim is None or isinstance(dim, (tuple, list)):
            return (self._largest if largest else self._smallest)(axis if axis is not None else dim, keepdim, name)
        return self._extreme_with_index(dim, keepdim, largest, name)

    def _extreme_with_index(self, dim: int, keepdim: bool, largest: bool, name: str) -> ValuesIndices:
        from lazygrad.tensor import Tensor, no_grad
        self._check_not_empty(dim, name)
        dim = _normalize_axis(dim, self.ndim, name)
        kept_indices = (self.argmax if largest else self.argmin)(dim, keepdim=True)
        with no_grad():
            values = (self._largest if largest else self._smallest)(dim, True, name)

        def to_the_index(grad, out, sources, rule):
            if self.ndim == 0:
                return [grad]
            positions = Tensor.arange(self.shape[dim], device=self.device).reshape(
                tuple(size if axis == dim else 1 for axis, size in enumerate(self.shape)))
            return [(positions == kept_indices).where(grad, 0.0)]
        values = values._with_gradient((self,), to_the_index)
        if keepdim or self.ndim == 0:
            return ValuesIndices(values, kept_indices)
        return ValuesIndices(values.squeeze(dim), kept_indices.squeeze(dim))

    def amax(self, dim=None, keepdim: bool = False, *, axis=None) -> "Tensor":
        """max over dim (an int or a tuple; None or () for all dims), ties sharing the gradient, as in
        PyTorch's amax (lazygrad's max does the same)."""
        return self._largest(_all_dims_if_empty(_pick_axis(axis, dim, "amax")), keepdim, "amax")

    def amin(self, dim=None, keepdim: bool = False, *, axis=None) -> "Tensor":
        return self._smallest(_all_dims_if_empty(_pick_axis(axis, dim, "amin")), keepdim, "amin")

    def _largest(self, axis, keepdim: bool, name: str) -> "Tensor":
        self._check_not_empty(axis, name)
        return self._reduce(Ops.MAX_REDUCE, axis, keepdim, name)

    def _smallest(self, axis, keepdim: bool, name: str) -> "Tensor":
        self._check_not_empty(axis, name)
        if self.dtype.is_float:
            return -((-self)._largest(axis, keepdim, name))
        return ~((~self)._largest(axis, keepdim, name))  # ~ reverses the order of integers without overflow

    @computes_in_float32
    def mean(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        axis = dim if dim is not None else axis
        if self.dtype.category < 2:
            raise TypeError(f"mean: input dtype must be floating point or complex, got {self.dtype.name}")
        axes = self._reduce_axes(axis, "mean")
        count = math.prod(self.shape[a] for a in axes)
        total = self.sum(axis, keepdim)
        return total / count if count else total * float("nan")

    @computes_in_float32
    def var(self, axis=None, unbiased: bool | None = None, keepdim: bool = False, *, correction=None,
            dim=None) -> "Tensor":
        """Sum of squared deviations / (N - correction); correction=1 (Bessel's) by default, as PyTorch."""
        axis = _pick_axis(axis, dim, "var")
        if not self.dtype.is_float:
            raise TypeError(f"var: input dtype must be floating point, got {self.dtype.name}")
        if unbiased is not None and correction is not None:
            raise ValueError("var: pass either unbiased or correction, not both")
        if correction is None:
            correction = 0 if unbiased is False else 1
        axes = self._reduce_axes(axis, "var")
        count = math.prod(self.shape[a] for a in axes)
        centered = self - self.mean(axis, keepdim=True)
        return centered.square().sum(axis, keepdim) / max(count - correction, 0)  # N <= correction: inf or NaN

    @computes_in_float32
    def std(self, axis=None, unbiased: bool | None = None, keepdim: bool = False, *, correction=None,
            dim=None) -> "Tensor":
        return self.var(axis, unbiased, keepdim, correction=correction, dim=dim).sqrt()

    def any(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        return self.bool()._reduce(Ops.MAX_REDUCE, _pick_axis(axis, dim, "any"), keepdim, "any")

    def all(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        return self.logical_not().any(_pick_axis(axis, dim, "all"), keepdim).logical_not()

    def argmax(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        """Index (int64) of the first maximum; NaN counts as the maximum, as in PyTorch. With no axis,
        the index into the flattened tensor."""
        return self.detach()._first_max_index(_pick_axis(axis, dim, "argmax"), keepdim, "argmax")

    def argmin(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        """Index (int64) of the first minimum; NaN counts as the minimum, as in PyTorch."""
        x = self.detach()
        if x.dtype.is_float:
            reversed_order = -x
        elif x.dtype.is_bool:
            reversed_order = x.logical_not()
        else:
            reversed_order = ~x  # reverses the order of integers without overflow
        return reversed_order._first_max_index(_pick_axis(axis, dim, "argmin"), keepdim, "argmin")

    def _first_max_index(self, axis, keepdim: bool, name: str) -> "Tensor":
        from lazygrad.tensor import Tensor
        self._check_not_empty(axis, name)
        if axis is None:
            index = self.reshape(-1)._first_max_index(0, False, name)
            return index.reshape((1,) * self.ndim) if keepdim else index
        axis = _normalize_axis(axis, self.ndim, name)
        if self.ndim == 0:
            return Tensor.zeros((), dtype=dtypes.int64, device=self.device)
        size = self.shape[axis]
        is_max = self == self._largest(axis, True, name)
        if self.dtype.is_float:
            is_max = is_max.logical_or(self != self)
        # the largest of (size - index) over the maxima is the first maximum
        countdown = Tensor.arange(size, 0, -1, device=self.device).reshape(
            tuple(size if d == axis else 1 for d in range(self.ndim)))
        return size - is_max.where(countdown, 0)._reduce(Ops.MAX_REDUCE, axis, keepdim, name)

    @computes_in_float32
    def logsumexp(self, axis=None, keepdim: bool = False, *, dim=None) -> "Tensor":
        """log(sum(exp(x))), shifted by the max so it neither overflows nor underflows."""
        axis = _pick_axis(axis, dim, "logsumexp")
        x = self._to_float()
        axes = x._reduce_axes(axis, "logsumexp")
        if any(x.shape[a] == 0 for a in axes):
            return x.sum(axis, keepdim).log()  # -inf, as in PyTorch
        top = x.detach()._largest(axis, True, "logsumexp")  # any shift gives the same value and gradient
        top = top.isinf().where(0.0, top)
        total = (x - top).exp().sum(axis, keepdim=True).log() + top
        return total if keepdim else total.reshape(tuple(s for a, s in enumerate(x.shape) if a not in axes))

    # ---- softmax and cumulative reductions ----------------------------------------------------

    def _shifted_by_max(self, axis, dtype, name: str) -> tuple["Tensor", int]:
        """self minus its max along axis (softmax is unchanged by the shift, and exp cannot overflow)."""
        x = self.cast(dtype) if dtype is not None else self
        if not x.dtype.is_float:
            raise TypeError(f"{name}: input dtype must be floating point, got {x.dtype.name}; pass dtype=")
        axis = _normalize_axis(axis, x.ndim, name)
        if x.numel() == 0:
            return x, axis
        return x - x.detach()._largest(axis, True, name), axis

    @computes_in_float32
    def softmax(self, axis: int | None = None, dtype=None, *, dim=None) -> "Tensor":
        """exp(x) / sum(exp(x)) along axis (default the last, as in tinygrad): 2 kernels (the row max and
        the sum of exponentials in one, then the division).

        A weight below the dtype's smallest normal number (x more than ~87 below its row's max in
        float32) is 0, not a subnormal: next to a largest weight of 1 it is lost in any sum, and on
        x86 every operation on a subnormal takes a microcode assist. A mask of -100 on attention
        scores (Swin's shifted windows) made each product of weights and values 60x slower (Swin-T's
        at 14x14: 4 -> 0.06 ms per layer) and its softmax 3x."""
        shifted, axis = self._shifted_by_max(_pick_axis(axis, dim, "softmax", -1), dtype, "softmax")
        lowest = math.log(finfo(shifted.dtype).tiny)  # exp's inputs clamped too: exp2 computes through subnormals
        e = (shifted < lowest).where(0.0, shifted.maximum(lowest).exp())
        return e / e.sum(axis, keepdim=True)

    @computes_in_float32
    def log_softmax(self, axis: int | None = None, dtype=None, *, dim=None) -> "Tensor":
        shifted, axis = self._shifted_by_max(_pick_axis(axis, dim, "log_softmax", -1), dtype, "log_softmax")
        return shifted - shifted.exp().sum(axis, keepdim=True).log()

    def _sliding_windows(self, pad_value) -> "Tensor":
        """(..., n) -> (..., n, n) where row i holds the first i + 1 elements of the last dim, right-aligned
        after n - 1 - i copies of pad_value. A view (pad, expand, reshape, shrink): nothing is copied.

        padded = n - 1 pad values, then x (length L = 2n - 1). n + 1 copies of it, flattened and read
        back in rows of L + 1, start one element later on each row: row i, column j is padded[i + j]."""
        n, batch = self.shape[-1], self.shape[:-1]
        length = 2 * n - 1
        padded = self.pad(((0, 0),) * len(batch) + ((n - 1, 0),), value=pad_value)
        repeated = padded.unsqueeze(-2).expand(batch + (n + 1, length)).reshape(batch + ((n + 1) * length,))
        rows = repeated[..., :n * (length + 1)].reshape(batch + (n, length + 1))
        return rows[..., :n]

    def _cumulative(self, op: OpDef, axis, pad_value, name: str) -> "Tensor":
        """A running reduce along axis: one reduce over a windowed view, so one kernel, no loop."""
        axis = _normalize_axis(axis, self.ndim, name)
        if self.ndim == 0 or self.numel() == 0 or self.shape[axis] == 1:
            return self
        # windows along the last dim, then the output dim back in place before reducing: a permute
        # after the reduce would cost a second kernel
        windows = self.transpose(axis, -1)._sliding_windows(pad_value).transpose(axis, -2)
        return windows._reduce(op, -1, False, name)

    def cumsum(self, axis: int | None = None, dtype=None, *, dim=None) -> "Tensor":
        source = self.cast(dtype if dtype is not None else self.dtype if self.dtype.category >= 2 else _integer_total(self.dtype))
        return source._cumulative(Ops.SUM, _pick_axis(axis, dim, "cumsum", 0), 0, "cumsum")

    def cumprod(self, axis: int | None = None, dtype=None, *, dim=None) -> "Tensor":
        """Running product; its gradient at a zero is the product of the others, as in PyTorch."""
        source = self.cast(dtype if dtype is not None else self.dtype if self.dtype.category >= 2 else _integer_total(self.dtype))
        return source._cumulative(Ops.PROD, _pick_axis(axis, dim, "cumprod", 0), 1, "cumprod")
