"""Inverse trigonometric and hyperbolic functions, atan2, logaddexp and copysign of Tensor, composed from
elementwise methods.

Front-end layer, a mixin of lazygrad.tensor.Tensor. The trigonometric and hyperbolic functions are
computed in float64 and rounded once to the input's float dtype (as erf is), so float32 results are
correctly rounded or nearly so and float64 ones are within a few ulps. Each value is computed without
autograd and joined to the graph with PyTorch's derivative formula, which also gives PyTorch's
gradients at the edges (asin'(1) is inf, atan2's gradient at (0, 0) is 0).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lazygrad.dtype import dtypes
from lazygrad.tensor_methods.elementwise import _polynomial

if TYPE_CHECKING:  # only for annotations: tensor.py imports this module
    from lazygrad.tensor import Tensor

_INT_OF_SIZE = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
_HUGE = 2.0 ** 28  # above it, x*x no longer changes 1 + x*x in float64: asinh(x) = acosh(x) = log(2x)
_ATAN_TERMS = 13  # tan(pi/16) ** 26 / 27 is below float64's epsilon


class MathFunctionMethods:
    """atan, atan2, asin, acos, sinh, cosh, asinh, acosh, atanh, logaddexp and copysign."""
    __slots__ = ()

    def _in_float64(self, compute, slope) -> "Tensor":
        """compute(x) in float64, rounded to x's float dtype, with the gradient grad * slope(x)."""
        from lazygrad.tensor import no_grad
        x = self._to_float()
        with no_grad():
            out = compute(x.double()).cast(x.dtype)
        return out._with_gradient((x,), lambda grad, out, sources, rule: [grad * slope(sources[0])])

    def atan(self) -> "Tensor":
        return self._in_float64(lambda x: _atan2(x, x._const_like(1.0)), lambda x: (x * x + 1).reciprocal())

    def asin(self) -> "Tensor":
        return self._in_float64(lambda x: _atan2(x, _sqrt_one_minus_square(x)), lambda x: (1 - x * x).rsqrt())

    def acos(self) -> "Tensor":
        return self._in_float64(lambda x: _atan2(_sqrt_one_minus_square(x), x), lambda x: -(1 - x * x).rsqrt())

    def atan2(self, other) -> "Tensor":
        """The angle of the point (other, self) in [-pi, pi]: self is y, as in PyTorch. Signed zeros and
        infinities give C's atan2 (atan2(0.0, -0.0) is pi, atan2(inf, inf) is pi/4)."""
        from lazygrad.tensor import no_grad
        y, x = self._float_operands(other, "atan2")
        with no_grad():
            out = _atan2(y.double(), x.double()).cast(y.dtype)
        return out._with_gradient((y, x), _atan2_gradient)

    def sinh(self) -> "Tensor":
        return self._in_float64(_sinh, lambda x: x.cosh())

    def cosh(self) -> "Tensor":
        return self._in_float64(_cosh, lambda x: x.sinh())

    def asinh(self) -> "Tensor":
        return self._in_float64(_asinh, lambda x: (x * x + 1).rsqrt())

    def acosh(self) -> "Tensor":
        return self._in_float64(_acosh, lambda x: (x * x - 1).rsqrt())

    def atanh(self) -> "Tensor":
        return self._in_float64(_atanh, lambda x: (1 - x * x).reciprocal())

    def logaddexp(self, other) -> "Tensor":
        """log(exp(self) + exp(other)) as max + log1p(exp(-|self - other|)), which never overflows;
        equal infinities give themselves (logaddexp(-inf, -inf) is -inf)."""
        from lazygrad.tensor import no_grad
        x, y = self._float_operands(other, "logaddexp")
        with no_grad():
            out = x.maximum(y) + (-(x - y).abs()).exp().log1p()
            out = (x == y).logical_and(x.isinf()).where(x, out)

        def rule(grad, out, sources, _):
            x, y = sources
            return [grad / (1 + (y - x).exp()), grad / (1 + (x - y).exp())]
        return out._with_gradient((x, y), rule)

    def hypot(self, other) -> "Tensor":
        """sqrt(self^2 + other^2) without overflow or underflow in the squares: both scaled by the
        larger magnitude first; an infinite operand gives inf even beside a NaN, as IEEE 754 says."""
        x, y = self._float_operands(other, "hypot")
        a, b = x.abs(), y.abs()
        larger, smaller = a.maximum(b), a.minimum(b)
        ratio = (larger == 0).where(0.0, smaller / larger)
        scaled = larger * (1 + ratio * ratio).sqrt()
        return (a.isinf() | b.isinf()).where(math.inf, scaled)

    def copysign(self, other) -> "Tensor":
        """|self| with the sign bit of other: -0.0 and a negated NaN count as negative, as in C."""
        from lazygrad.tensor import no_grad
        x, y = self._float_operands(other, "copysign")
        with no_grad():
            out = _sign_bit(x).logical_xor(_sign_bit(y)).where(-x, x)

        def rule(grad, out, sources, _):  # PyTorch's: grad * out / self, 0 where self is 0; none for other
            x = sources[0]
            return [grad * (x == 0).where(0, out / x), grad.zeros_like()]
        return out._with_gradient((x, y), rule)


def _sign_bit(x: "Tensor") -> "Tensor":
    """True where x's sign bit is set: negative numbers, -0.0 and negative NaNs."""
    return x.bitcast(_INT_OF_SIZE[x.dtype.itemsize]) < 0


def _with_sign_of(magnitude: "Tensor", x: "Tensor") -> "Tensor":
    """magnitude (never negative) with x's sign, so that f(-0.0) is -0.0 for odd f."""
    return _sign_bit(x).where(-magnitude, magnitude)


def _sqrt_one_minus_square(x: "Tensor") -> "Tensor":
    """sqrt(1 - x*x), as sqrt((1 - x)(1 + x)): exact factors near |x| = 1; NaN for |x| > 1."""
    return ((1 - x) * (1 + x)).sqrt()


def _atan_of_ratio(ratio: "Tensor") -> "Tensor":
    """atan(r) for float64 0 <= r <= 1: two half-angle steps, atan(t) = 2 atan(t / (1 + sqrt(1 + t*t))),
    bring r below tan(pi/16) = 0.199, where the Taylor series t - t^3/3 + t^5/5 - ... converges fast."""
    t = ratio
    for _ in range(2):
        t = t / (1 + (1 + t * t).sqrt())
    return 4 * t * _polynomial(t * t, [(-1) ** k / (2 * k + 1) for k in range(_ATAN_TERMS)])


def _atan2(y: "Tensor", x: "Tensor") -> "Tensor":
    """C's atan2 for float64 y and x: the angle of (|x|, |y|) from the smaller over the larger of them,
    then moved to x's half-plane and given y's sign."""
    ax, ay = x.abs(), y.abs()
    steep = ay > ax
    smaller, larger = steep.where(ax, ay), steep.where(ay, ax)
    ratio = (smaller == math.inf).where(1.0, smaller / larger)  # two infinities make 45 degrees
    ratio = (larger == 0).where(0.0, ratio)
    angle = _atan_of_ratio(ratio)
    angle = steep.where(math.pi / 2 - angle, angle)
    angle = _sign_bit(x).where(math.pi - angle, angle)
    angle = x.isnan().logical_or(y.isnan()).where(math.nan, angle)
    return _with_sign_of(angle, y)


def _atan2_gradient(grad, out, sources, rule):
    """PyTorch's: (x, -y) / (x*x + y*y), and 0 where that denominator is 0 (at the origin)."""
    y, x = sources
    inverse = (y * y + x * x).reciprocal()
    inverse = (inverse == math.inf).where(0, inverse)
    return [grad * x * inverse, grad * -y * inverse]


def _sinh(x: "Tensor") -> "Tensor":
    """From expm1 below |x| = 1, where exp(x) - exp(-x) would cancel, and from exp(|x|/2) above,
    so sinh(710) is finite though exp(710) is not."""
    magnitude = x.abs()
    small = magnitude.expm1()
    half = (0.5 * magnitude).exp()
    value = (magnitude < 1).where(0.5 * (small + small / (small + 1)), 0.5 * half * half - 0.5 / half / half)
    return _with_sign_of(value, x)


def _cosh(x: "Tensor") -> "Tensor":
    """From exp(|x|/2), so cosh(710) is finite though exp(710) is not."""
    half = (0.5 * x.abs()).exp()
    return 0.5 * half * half + 0.5 / half / half


def _asinh(x: "Tensor") -> "Tensor":
    """log1p(|x| + x^2 / (1 + sqrt(1 + x^2))), which keeps its precision near 0, with x's sign."""
    magnitude = x.abs()
    square = magnitude * magnitude
    moderate = (magnitude + square / (1 + (1 + square).sqrt())).log1p()
    return _with_sign_of((magnitude > _HUGE).where(magnitude.log() + math.log(2), moderate), x)


def _acosh(x: "Tensor") -> "Tensor":
    """log1p(t + sqrt(2t + t^2)) with t = x - 1, exact near x = 1; NaN below 1."""
    t = x - 1
    moderate = (t + (2 * t + t * t).sqrt()).log1p()
    return (x < 1).where(math.nan, (x > _HUGE).where(x.log() + math.log(2), moderate))


def _atanh(x: "Tensor") -> "Tensor":
    """0.5 log1p(2|x| / (1 - |x|)) with x's sign: inf at |x| = 1, NaN beyond."""
    magnitude = x.abs()
    return _with_sign_of(0.5 * (2 * magnitude / (1 - magnitude)).log1p(), x)
