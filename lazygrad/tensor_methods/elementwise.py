"""Elementwise methods of Tensor: arithmetic, logic, where, math functions and activations, composed from
the op table's unary, binary and ternary primitives.

Front-end layer, a mixin of lazygrad.tensor.Tensor; the operators (`+`, `<`, `&`, ...) and the dtype
promotion they share (`_operands`) stay in tensor.py.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from lazygrad.dtype import dtypes, least_float, result_type, scalar_dtype
from lazygrad.tensor_methods.helpers import _check_scalar_fits, broadcast_shapes, computes_in_float32
from lazygrad.ops import OpDef, Ops

if TYPE_CHECKING:  # only for annotations: tensor.py imports this module
    from lazygrad.tensor import Tensor


def _polynomial(x: "Tensor", coefficients) -> "Tensor":
    """coefficients[0] + coefficients[1] * x + ..., by Horner's rule."""
    result = x._const_like(coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        result = result * x + coefficient
    return result


# erf(x) = x * P(x*x) for |x| < 1, and erfc(a) = exp(-a*a) * t * Q(t) with t = 1 / (1 + a/2) for a >= 1.
# Fitted to 40-digit mpmath values (least squares on the relative error, reweighted towards
# minimax): relative error below 4e-11 for erf and 2e-10 for erfc over all x, so float32 results are
# within one ulp, float64 ones are not to full precision. test_api_elementwise.py checks against math.erf.
_ERF_NEAR_ZERO = (1.1283791670580225, -0.37612638434638757, 0.11283781973904389, -0.026865400030071238,
                  0.005220945398481868, -0.0008482828344822093, 0.00011256944292501075, -9.641505816282891e-06)
_ERFC_TAIL = (0.2820947917638943, 0.2820947970984638, 0.24683247590896681, 0.17632519402424715,
              0.08346664500713104, -0.0015146708057485827, -0.0755762448033353, 0.026396593396418543,
              -0.22480799463361842, 0.4329973187524891, -0.3073919253316566, 0.07791581069340037,
              0.0013050703974874034)
# erfc(a) = exp(-a*a) * t * R(t), t = 1 / (1 + a/2), for every a >= 0 (t in (0, 1]) to float32's precision:
# fitted to scipy's erfcx (least squares on the relative error, reweighted towards minimax), relative
# error below 1.1e-8. The gelu in float32 (_normal_cdf_float32) takes it on both sides of 0, one
# branch where _ERF_NEAR_ZERO and _ERFC_TAIL need two.
_ERFC_FLOAT32 = (0.28209479479770266, 0.28209385244574553, 0.24688059619553734, 0.17537667417385283,
                 0.09300179719662635, -0.05723775522910767, 0.12710317540366844, -0.4469991577512733,
                 0.4861993553207625, -0.23086823860998734, 0.04235489544045547)
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


# 2^(mantissa bits): from there on every float is an integer (Tensor._nearest_integer)
_ROUNDING_MAGIC = {dtypes.float32: 2.0 ** 23, dtypes.float64: 2.0 ** 52}


class ElementwiseMethods:
    """Arithmetic, logic and elementwise functions of Tensor."""
    __slots__ = ()

    # ---- arithmetic ---------------------------------------------------------------------------

    def add(self, other, reverse=False):
        return self._binary(Ops.ADD, other, reverse, "add")

    def mul(self, other, reverse=False):
        return self._binary(Ops.MUL, other, reverse, "mul")

    def sub(self, other, reverse=False):
        x, y = self._operands(other, "sub", reverse)
        if x.dtype == dtypes.bool:
            raise TypeError("sub: subtracting bool tensors is not supported; use logical_xor or cast first")
        return x._apply(Ops.ADD, y._apply(Ops.NEG))

    def div(self, other, reverse=False):
        """True division: integer inputs give the default float dtype (a number meets the tensor in
        that dtype, so int8_tensor / 1000 is 0.001, not 1 / 1000 in int8)."""
        x, y = self._float_operands(other, "div", reverse)
        return x._apply(Ops.DIV, y)

    def _float_operands(self, other, name: str, reverse=False) -> tuple["Tensor", "Tensor"]:
        """Both operands of a float-valued binary op (div, atan2, ...) in one float dtype and shape:
        integers give the default float dtype, which a number then meets instead of the integer one."""
        from lazygrad.tensor import Tensor
        x, y = (self if isinstance(other, Tensor) else self._to_float())._operands(other, name, reverse)
        return x._to_float(), y._to_float()

    @computes_in_float32
    def floordiv(self, other, reverse=False):
        """Python's //: the quotient rounded toward negative infinity."""
        x, y = self._operands(other, "floordiv", reverse)
        if x.dtype.is_bool:
            raise TypeError("floordiv: not supported for bool tensors")
        remainder = x._apply(Ops.MOD, y)
        off_by_one = (remainder != 0).logical_and((remainder < 0) != (y < 0))
        if not x.dtype.is_float:
            return x._apply(Ops.DIV, y) - off_by_one.cast(x.dtype)
        # floor(x / y) computed from the exact remainder, so 2.0 // 0.1 is 19 as in numpy, not 20
        quotient = (x - remainder) / y
        quotient = off_by_one.where(quotient - 1, quotient)
        floored = quotient.floor()
        floored = (quotient - floored > 0.5).where(floored + 1, floored)
        return (y == 0).where(x / y, floored)

    floor_divide = floordiv

    @computes_in_float32
    def remainder(self, other, reverse=False):
        """Python's %: the result takes the sign of the divisor."""
        x, y = self._operands(other, "remainder", reverse)
        if x.dtype.is_bool:
            raise TypeError("remainder: not supported for bool tensors")
        remainder = x._apply(Ops.MOD, y)
        wrong_sign = (remainder != 0).logical_and((remainder < 0) != (y < 0))
        return wrong_sign.where(remainder + y, remainder)

    @computes_in_float32
    def pow(self, exponent, reverse=False):
        """`self ** exponent` with C's pow semantics for floats (1**nan == 1, (-8)**(1/3) is nan).
        The gradient is PyTorch's formula, y x**(y-1) and x**y log(x), written out: derived through
        the special cases it would be 0 at x == 1 and NaN at x == 0."""
        from lazygrad.tensor import no_grad
        if isinstance(exponent, complex) or getattr(exponent, "_complex", False):  # a complex power of a real base
            x, y = self._operands(exponent, "pow", reverse)
            return x.pow(y)
        small_int = isinstance(exponent, int) and not isinstance(exponent, bool) and abs(exponent) <= 8
        if not reverse and small_int and (exponent >= 0 or self.dtype.is_float):
            if not self.dtype.is_float:
                return self._small_integer_pow(exponent)
            with no_grad():
                result = self._small_integer_pow(exponent)
            return result._with_gradient((self,), _small_integer_pow_gradient(exponent))
        x, y = self._operands(exponent, "pow", reverse)
        if x.dtype.is_bool:
            raise TypeError("pow: not supported for bool tensors")
        if not x.dtype.is_float:
            if isinstance(exponent, int) and not reverse and exponent < 0:
                raise ValueError(f"pow: integers to negative integer powers are not allowed (got {exponent})")
            return x._integer_pow(y)
        with no_grad():
            result = x._float_pow(y)
        return result._with_gradient((x, y), _pow_gradient)

    def _small_integer_pow(self, exponent: int) -> "Tensor":
        """self ** exponent by repeated multiplication (exact for integers), for |exponent| <= 8."""
        result = self._const_like(1)
        for _ in range(abs(exponent)):
            result = result * self
        return result.reciprocal() if exponent < 0 else result

    def _float_pow(self, y: "Tensor") -> "Tensor":
        """self ** y for float operands of one dtype and shape, through exp2 and log2 in float64."""
        x = self
        result_dtype = x.dtype
        x, y = x.double(), y.double()  # log2/exp2 in double keep float32 results correctly rounded
        magnitude = (y * x.abs().log2()).exp2()
        finite_y = y.abs() != math.inf
        odd_integer = finite_y.logical_and(y.remainder(2) == 1)
        negative_sign = (x < 0).logical_or((x == 0).logical_and(x.reciprocal() < 0))  # -0.0 counts
        result = negative_sign.logical_and(odd_integer).where(-magnitude, magnitude)
        fractional = finite_y.logical_and(y != y.trunc())
        negative_finite = (x < 0).logical_and(x != -math.inf)
        result = negative_finite.logical_and(fractional).where(math.nan, result)
        result = (x == -1).logical_and(finite_y.logical_not()).where(1.0, result)
        result = (y == 0).logical_or(x == 1).where(1.0, result)
        return result.cast(result_dtype)

    def _integer_pow(self, exponent: "Tensor") -> "Tensor":
        """Integer power by squaring over the exponent's bits; negative exponents give 0 unless the
        base is 1 or -1 (PyTorch's answer for tensors)."""
        result, base = self._const_like(1), self
        for bit in range(self.dtype.itemsize * 8 - 1):
            result = ((exponent & (1 << bit)) != 0).where(result * base, result)
            base = base * base
        if self.dtype.is_unsigned:  # no negative exponents
            return result
        negative = exponent < 0
        minus_one_result = (exponent.remainder(2) == 1).where(self._const_like(-1), self._const_like(1))
        special = (self == 1).where(self._const_like(1), (self == -1).where(minus_one_result, self._const_like(0)))
        return negative.where(special, result)

    def maximum(self, other):
        return self._binary(Ops.MAX, other, name="maximum")

    def minimum(self, other):
        x, y = self._operands(other, "minimum")
        if x.dtype.is_float:
            return -((-x).maximum(-y))
        return (x < y).where(x, y)

    # ---- comparisons: PyTorch's names for the operators defined in tensor.py ------------------

    def eq(self, other): return self == other
    def ne(self, other): return self != other
    def lt(self, other): return self < other
    def le(self, other): return self <= other
    def gt(self, other): return self > other
    def ge(self, other): return self >= other

    # ---- logic --------------------------------------------------------------------------------

    def logical_not(self) -> "Tensor":
        from lazygrad.tensor import Tensor
        return self.bool()._apply(Ops.XOR, Tensor.full(self.shape, True, dtypes.bool, self.device))

    def logical_and(self, other) -> "Tensor":
        from lazygrad.tensor import Tensor
        return self.bool()._bitwise(Ops.AND, other.bool() if isinstance(other, Tensor) else bool(other), "logical_and")

    def logical_or(self, other) -> "Tensor":
        from lazygrad.tensor import Tensor
        return self.bool()._bitwise(Ops.OR, other.bool() if isinstance(other, Tensor) else bool(other), "logical_or")

    def logical_xor(self, other) -> "Tensor":
        from lazygrad.tensor import Tensor
        return self.bool()._bitwise(Ops.XOR, other.bool() if isinstance(other, Tensor) else bool(other), "logical_xor")

    def where(self, if_true, if_false) -> "Tensor":
        """`self ? if_true : if_false` elementwise (self is the condition), broadcasting all three."""
        from lazygrad.tensor import Tensor
        condition = self.bool()
        if not isinstance(if_true, Tensor):
            if not isinstance(if_false, Tensor):
                dtype = result_type([], [], [scalar_dtype(if_true), scalar_dtype(if_false)])
                _check_scalar_fits(if_true, dtype, "where")
                _check_scalar_fits(if_false, dtype, "where")
                if_true = Tensor.full((), if_true, dtype, self.device)
            else:
                if_true, if_false = if_false._operands(if_true, "where", reverse=True, selects=True)
        x, y = if_true._operands(if_false, "where", selects=True)
        shape = broadcast_shapes("where", condition.shape, x.shape)
        condition, x, y = condition._broadcast_to(shape), x._broadcast_to(shape), y._broadcast_to(shape)
        return condition._apply(Ops.WHERE, x, y)

    # ---- elementwise functions ----------------------------------------------------------------

    def _unary_float(self, op: OpDef) -> "Tensor":
        return self._to_float()._apply(op)

    def neg(self) -> "Tensor":
        if self.dtype.is_bool:
            raise TypeError("neg: negating a bool tensor is not supported; use logical_not()")
        return self._apply(Ops.NEG)

    def exp2(self): return self._unary_float(Ops.EXP2)
    def log2(self): return self._unary_float(Ops.LOG2)
    def sqrt(self): return self._unary_float(Ops.SQRT)
    def sin(self): return self._unary_float(Ops.SIN)
    def reciprocal(self): return self._unary_float(Ops.RECIP)

    @computes_in_float32
    def exp(self): return self._in_float32(lambda x: (x * (1 / math.log(2))).exp2())
    @computes_in_float32
    def log(self): return self._in_float32(lambda x: x.log2() * math.log(2))

    def _in_float32(self, compute) -> "Tensor":
        """compute(x) for float x; a float16 x is computed in float32 and rounded once, since rounding
        the scaled intermediate (x * log2(e)) to float16 would cost several ulps (storage floats
        reach here as float32 already: computes_in_float32)."""
        x = self._to_float()
        if x.dtype == dtypes.float16:
            return compute(x.float()).cast(x.dtype)
        return compute(x)
    @computes_in_float32
    def rsqrt(self): return self.sqrt().reciprocal()
    def cos(self):
        # cos(x) = sin(pi/2 - x); the subtraction is done in float64 so it does not round x away
        x = self._to_float()
        return (math.pi / 2 - x.double()).sin().cast(x.dtype) if x.dtype != dtypes.float64 else (math.pi / 2 - x).sin()
    @computes_in_float32
    def tan(self): return self.sin() / self.cos()

    @computes_in_float32
    def sigmoid(self) -> "Tensor":
        # exp(-|x|) never overflows, so large |x| gives 0 or 1 and a finite gradient; the gradient,
        # out * (1 - out), reads the output, not x (see relu)
        from lazygrad.tensor import no_grad
        x = self._to_float()
        with no_grad():
            e = (-x.abs()).exp()
            out = (x >= 0).where(1, e) / (1 + e)
        return out._with_gradient((x,), lambda grad, out, sources, rule: [grad * out * (1 - out)])

    @computes_in_float32
    def tanh(self) -> "Tensor":
        # tanh(|x|) = -expm1(-2|x|) / (2 + expm1(-2|x|)): relative precision near 0, no overflow;
        # the gradient, 1 - out^2, reads the output, not x (see relu)
        from lazygrad.tensor import no_grad
        x = self._to_float()
        with no_grad():
            em = (-2 * x.abs()).expm1()
            magnitude = -em / (2 + em)
            out = (x == 0).where(x, (x < 0).where(-magnitude, magnitude))  # tanh(-0.0) is -0.0
        return out._with_gradient((x,), lambda grad, out, sources, rule: [grad * (1 - out * out)])

    def relu(self) -> "Tensor":
        """max(x, 0). Its gradient reads the output (grad where out > 0), not x: x is usually a
        matmul fused into this kernel and would be recomputed. When a gradient will be taken the
        forward pass stores the output, so the backward kernels read it as it is laid out; computed
        again there, it read a channels-last convolution's product, through its batch norm, across
        the channels (ResNet-18's training step at batch 16, 2 threads, jitted: 1267-1272 -> 1145-1163
        ms, with the max pool's padded input stored, nn/spatial.py)."""
        from lazygrad.tensor import no_grad
        with no_grad():
            out = self.maximum(0)
        out = self._kept_for_backward(out)
        return out._with_gradient((self,), lambda grad, out, sources, rule: [(out > 0).where(grad, 0)])
    def square(self): return self * self

    def abs(self) -> "Tensor":
        """|x|, with PyTorch's gradient sign(x): 0 at 0. (0 is selected as a constant there, so
        abs(-0.0) is 0.0 as well.)"""
        if self.dtype.is_bool or self.dtype.is_unsigned:
            return self
        return (self < 0).where(-self, (self == 0).where(0, self))

    def _with_zero_gradient(self, value: "Tensor") -> "Tensor":
        """`value` (computed from self without autograd) joined to self's graph with a zero gradient:
        PyTorch's gradient of sign, floor, ceil, trunc and round."""
        from lazygrad.tensor import Tensor
        if not (Tensor.grad_enabled and self.requires_grad):
            return value
        return Tensor.full(self.shape, False, dtypes.bool, self.device).where(self, value)

    def sign(self) -> "Tensor":
        from lazygrad.tensor import no_grad
        if self.dtype.is_bool:
            return self
        with no_grad():
            value = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
        return self._with_zero_gradient(value)

    def _nearest_integer(self) -> "Tensor":
        """Each float rounded to the nearest integer, ties to even, as the hardware's default rounding
        does it: a value below 2^23 (float32; 2^52 for float64) plus that power of two, signed like it,
        has no fraction bits left, so the addition rounds it; subtracting the power back is exact.
        Larger values, infinities and NaN are left as they are. Other floats (float16 and the storage
        floats) go through float32, which holds them and every integer they round to exactly. A few
        vector additions, where fmod (the C library's, one element at a time) made the rounding of an
        int8 quantization 45 ns an element. Without grad; the sign of a zero result is not kept."""
        magic = _ROUNDING_MAGIC.get(self.dtype)
        if magic is None:
            return self.float()._nearest_integer().cast(self.dtype)
        shift = (self < 0).where(-magic, magic)
        rounded = (self + shift) - shift  # two roundings the C compiler keeps: no -ffast-math (devices/cpu.py)
        return (self.abs() < magic).where(rounded, self)

    def trunc(self) -> "Tensor":
        from lazygrad.tensor import no_grad
        if not self.dtype.is_float:
            return self
        with no_grad():
            nearest = self._nearest_integer()
            whole = (nearest.abs() > self.abs()).where(nearest - self.sign(), nearest)
            whole = (whole == 0).where(self * 0, whole)  # a zero keeps x's sign: trunc(-0.3) is -0.0
        return self._with_zero_gradient(whole)

    def floor(self) -> "Tensor":
        from lazygrad.tensor import no_grad
        if not self.dtype.is_float:
            return self
        with no_grad():
            truncated = self.trunc()
            value = (self < truncated).where(truncated - 1, truncated)
        return self._with_zero_gradient(value)

    def ceil(self) -> "Tensor":
        from lazygrad.tensor import no_grad
        if not self.dtype.is_float:
            return self
        with no_grad():
            truncated = self.trunc()
            value = (self > truncated).where(truncated + 1, truncated)
        return self._with_zero_gradient(value)

    def round(self, decimals: int = 0) -> "Tensor":
        """Round half to even, as PyTorch (and numpy) do: 0.5 -> 0, 1.5 -> 2, -2.5 -> -2.
        With `decimals`, rounds x * 10**decimals (or x / 10**-decimals) and scales back, as PyTorch."""
        from lazygrad.tensor import no_grad
        if not self.dtype.is_float:
            return self
        if decimals > 0:
            return (self * 10.0 ** decimals).round() / 10.0 ** decimals
        if decimals < 0:
            return (self / 10.0 ** -decimals).round() * 10.0 ** -decimals
        with no_grad():
            value = self._nearest_integer()
            value = (value == 0).where(self * 0, value)  # a zero keeps x's sign: round(-0.3) is -0.0
        return self._with_zero_gradient(value)

    def clamp(self, min=None, max=None) -> "Tensor":
        """min, then max, as PyTorch (so min > max gives max everywhere), with PyTorch's gradients
        (its minimum-norm subgradients since 2.14): at a number bound x's gradient is 0, at a tensor
        bound x and the bound get half each, as a tie of maximum or minimum does."""
        from lazygrad.tensor import Tensor, no_grad
        if min is None and max is None:
            raise ValueError("clamp: at least one of min and max must be given")
        numbers = (int, float, np.generic)
        if Tensor.grad_enabled and self.requires_grad and isinstance(min, numbers) and isinstance(max, numbers) \
                and min <= max:
            # as relu: the gradient reads the output, which the forward pass stores, not x, which is
            # usually a batch norm of a channels-last convolution's product, computed again across the
            # channels in every backward kernel (MobileNetV2's ReLU6). The bounds give gradient 0;
            # NaN, outside neither, passes it, as before.
            with no_grad():
                out = self._clamped_with_gradient(min, True)._clamped_with_gradient(max, False)
            out = self._kept_for_backward(out)
            return out._with_gradient((self,), lambda grad, out, sources, rule: [
                ((out <= min) | (out >= max)).where(0, grad)])
        if Tensor.grad_enabled and any(isinstance(value, Tensor) and value.requires_grad for value in (self, min, max)):
            result = self
            for bound, below in ((min, True), (max, False)):
                if bound is not None:
                    result = result._clamped_with_gradient(bound, below)
            return result
        if isinstance(min, numbers) and isinstance(max, numbers) and min <= max:
            # numbers in order: both selects test x itself, not one the other's result; gcc vectorized
            # that chain poorly in a tile's epilogue (MobileNetV2's depthwise conv + Clip: 0.89 -> 0.54 ms)
            x, low = self._operands(min, "clamp")
            wide, high = x._operands(max, "clamp")
            if wide.dtype == x.dtype:
                return (x > high).where(high, (x < low).where(low, x))
        result = self
        if min is not None:
            x, low = result._operands(min, "clamp")
            result = (x < low).where(low, x)
        if max is not None:
            x, high = result._operands(max, "clamp")
            result = (x > high).where(high, x)
        return result

    clip = clamp

    def _clamped_with_gradient(self, bound, below: bool) -> "Tensor":
        """One side of clamp where a gradient is wanted: the bound past it, x inside; at a tie with a
        number bound, the bound (gradient 0); with a tensor bound, the mean of x and the bound (their
        value; gradient half each)."""
        from lazygrad.tensor import Tensor
        x, limit = self._operands(bound, "clamp")
        if not isinstance(bound, Tensor):
            return ((x <= limit) if below else (x >= limit)).where(limit, x)
        tie = (x == limit).where(x * 0.5 + limit * 0.5, x)
        return ((x < limit) if below else (x > limit)).where(limit, tie)

    def isnan(self) -> "Tensor":
        from lazygrad.tensor import Tensor
        return self != self if self.dtype.is_float else Tensor.full(self.shape, False, dtypes.bool, self.device)

    def isinf(self) -> "Tensor":
        from lazygrad.tensor import Tensor
        if not self.dtype.is_float:
            return Tensor.full(self.shape, False, dtypes.bool, self.device)
        return self.abs() == math.inf

    def isfinite(self) -> "Tensor":
        from lazygrad.tensor import Tensor
        if not self.dtype.is_float:
            return Tensor.full(self.shape, True, dtypes.bool, self.device)
        return self.abs() < math.inf  # False for NaN too

    @computes_in_float32
    def lerp(self, end, weight) -> "Tensor":
        """self + weight * (end - self), with PyTorch's formula (exact at weight 0 and 1)."""
        from lazygrad.tensor import Tensor
        start, end = self._operands(end, "lerp")
        if not start.dtype.is_float:
            raise TypeError(f"lerp: inputs must be floating point, got {start.dtype.name}")
        if not isinstance(weight, Tensor):
            diff = end - start
            return start + weight * diff if abs(weight) < 0.5 else end - diff * (1 - weight)
        shape = broadcast_shapes("lerp", start.shape, weight.shape)
        start, end = start._broadcast_to(shape), end._broadcast_to(shape)
        weight = weight.cast(start.dtype)._broadcast_to(shape)
        diff = end - start
        return (weight.abs() < 0.5).where(start + weight * diff, end - diff * (1 - weight))

    def clone(self) -> "Tensor":
        """A copy in new memory (when realized), differentiable like the original."""
        return self._apply(Ops.CONTIGUOUS)

    # ---- more accurate compositions: expm1, log1p, erf ----------------------------------------
    # Each uses a short series where the plain formula loses digits and the plain formula elsewhere;
    # the series only ever sees the inputs it is used for, so no branch produces inf or NaN and the
    # gradient through `where` stays finite.

    def expm1(self) -> "Tensor":
        """exp(x) - 1, accurate for small x."""
        x = self._to_float()
        small = x.abs() < 0.5
        near_zero = small.where(x, 0.0)
        terms = {dtypes.float16: 6, dtypes.float32: 9}.get(x.dtype, 15)  # 0.5**n / (n+1)! below the dtype's epsilon
        series = near_zero._const_like(1.0)
        for k in range(terms, 1, -1):  # x * (1 + x/2 * (1 + x/3 * (1 + ...)))
            series = 1 + near_zero * series * (1.0 / k)
        return small.where(near_zero * series, x.exp() - 1)

    def log1p(self) -> "Tensor":
        """log(1 + x), accurate for small x."""
        x = self._to_float()
        small = x.abs() < 0.25
        near_zero = small.where(x, 0.0)
        # log(1 + x) = 2 atanh(s) = 2 (s + s**3/3 + s**5/5 + ...) with s = x / (2 + x), |s| < 1/7
        s = near_zero / (2 + near_zero)
        terms = {dtypes.float16: 3, dtypes.float32: 5}.get(x.dtype, 10)
        series = _polynomial(s * s, [1.0 / (2 * k + 1) for k in range(terms)])
        return small.where(2 * s * series, (1 + x).log())

    def _erf_pieces(self) -> tuple["Tensor", "Tensor", "Tensor", "Tensor"]:
        """In float64: (x, |x| < 1, erf(x) where |x| < 1, erfc(|x|) where |x| >= 1)."""
        x = self.double()
        a = x.abs()
        small = a < 1
        inner = small.where(x, 0.0)
        outer = small.where(1.0, a)
        t = (1 + 0.5 * outer).reciprocal()
        tail = (-(outer * outer)).exp() * t * _polynomial(t, _ERFC_TAIL)
        return x, small, inner * _polynomial(inner * inner, _ERF_NEAR_ZERO), tail

    @computes_in_float32
    def erf(self) -> "Tensor":
        """The error function; computed in float64, relative error below 4e-11 (see _ERF_NEAR_ZERO)."""
        x, small, near_zero, tail = self._erf_pieces()
        return small.where(near_zero, (x < 0).where(tail - 1, 1 - tail)).cast(least_float(self.dtype))

    @computes_in_float32
    def erfc(self) -> "Tensor":
        """1 - erf(x), with relative precision in the tail (erfc(10) is 2.1e-45, not 0)."""
        x, small, near_zero, tail = self._erf_pieces()
        return small.where(1 - near_zero, (x < 0).where(2 - tail, tail)).cast(least_float(self.dtype))

    # ---- activations --------------------------------------------------------------------------

    def relu6(self) -> "Tensor":
        return self.hardtanh(0, 6)

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> "Tensor":
        """clamp(min_val, max_val) (gradient 0 at the bounds, as PyTorch's hardtanh, relu6, hardsigmoid
        and hardswish have)."""
        if min_val > max_val:
            raise ValueError(f"hardtanh: min_val ({min_val}) must not be greater than max_val ({max_val})")
        return self.clamp(min_val, max_val)

    def leaky_relu(self, negative_slope: float = 0.01) -> "Tensor":
        x = self._to_float()
        return (x > 0).where(x, x * negative_slope)

    @computes_in_float32
    def elu(self, alpha: float = 1.0) -> "Tensor":
        """Its gradient at 0 is alpha, as in PyTorch (x.minimum(0) would halve it there)."""
        x = self._to_float()
        positive = x > 0
        return positive.where(x, alpha * positive.where(0, x).expm1())

    @computes_in_float32
    def selu(self) -> "Tensor":
        return _SELU_SCALE * self.elu(_SELU_ALPHA)

    def _kept_for_backward(self, value: "Tensor | None" = None) -> "Tensor":
        """`value` (default this tensor), stored by the forward pass when this tensor's gradient will
        be taken, since the backward pass reads it. An activation's input is usually a matmul fused
        into the activation's kernel: without this, every backward kernel reading it would compute
        the matmul again. It is stored in the order in which its kernel reads a computed value (a
        channels-last convolution's product, through a batch norm) and viewed as asked, so that
        kernel writes in order and the backward kernels compute in that order too (lazy.py
        `_common_stored_order`; MobileNetV2's training step at batch 16, jitted: 110 -> 95 ms)."""
        from lazygrad.tensor import Tensor
        value = self if value is None else value
        if Tensor.grad_enabled and self.requires_grad and not value.lazydata.realized:
            order = value.lazydata.order_read()
            if order is not None:  # stored in the order of what it reads (channels last), viewed as asked
                return value.permute(order).contiguous().permute([order.index(axis) for axis in range(len(order))])
            return value.contiguous()
        return value

    @computes_in_float32
    def gelu(self, approximate: str = "none") -> "Tensor":
        """x * Phi(x); approximate='tanh' uses 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3))).
        The gradient is written out (Phi(x) + x phi(x), or the tanh form's derivative) and reads x,
        which the forward pass stores when a gradient is needed."""
        from lazygrad.tensor import no_grad
        if approximate not in ("none", "tanh"):
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        x = self._to_float()._kept_for_backward()
        with no_grad():
            out = x * _gelu_gate(x, approximate)
        return out._with_gradient((x,), lambda grad, out, sources, rule: [grad * _gelu_slope(sources[0], approximate)])

    @computes_in_float32
    def silu(self) -> "Tensor":
        """x * sigmoid(x); its gradient s (1 + x (1 - s)) reads x, stored by the forward pass when
        a gradient is needed."""
        from lazygrad.tensor import no_grad
        x = self._to_float()._kept_for_backward()
        with no_grad():
            out = x * x.sigmoid()

        def slope(grad, out, sources, rule):
            gate = sources[0].sigmoid()
            return [grad * gate * (1 + sources[0] * (1 - gate))]
        return out._with_gradient((x,), slope)

    swish = silu

    @computes_in_float32
    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> "Tensor":
        """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (as PyTorch)."""
        x = self._to_float()
        scaled = x * beta
        linear = scaled > threshold
        return linear.where(x, linear.where(0.0, scaled).exp().log1p() / beta)

    @computes_in_float32
    def logsigmoid(self) -> "Tensor":
        """log(sigmoid(x)) as min(x, 0) - log1p(exp(-|x|)), which neither overflows nor rounds to
        log(0); the gradient is PyTorch's, sigmoid(-x)."""
        from lazygrad.tensor import no_grad
        x = self._to_float()
        with no_grad():
            out = x.minimum(0) - (-x.abs()).exp().log1p()
        return out._with_gradient((x,), lambda grad, out, sources, rule: [grad * (-sources[0]).sigmoid()])

    @computes_in_float32
    def mish(self) -> "Tensor":
        return self * self.softplus().tanh()

    @computes_in_float32
    def softsign(self) -> "Tensor":
        x = self._to_float()
        return x / (1 + x.abs())

    @computes_in_float32
    def hardsigmoid(self) -> "Tensor":
        return (self._to_float() + 3).relu6() / 6

    @computes_in_float32
    def hardswish(self) -> "Tensor":
        x = self._to_float()
        return x * (x + 3).relu6() / 6


def _pow_gradient(grad, out, sources, rule):
    """PyTorch's gradients of x ** y: 0 for x where y == 0, 0 for y where x == 0 and y >= 0."""
    x, y = sources
    x_grad = (y == 0).where(0, grad * y * x.pow(y - 1))
    y_grad = (x == 0).logical_and(y >= 0).where(0, grad * out * x.log())
    return [x_grad, y_grad]


def _small_integer_pow_gradient(exponent: int):
    """The gradient rule of x ** exponent for a small int: exponent * x ** (exponent - 1), or 0."""
    def rule(grad, out, sources, _):
        if exponent == 0:
            return [grad.zeros_like()]
        return [grad * exponent * sources[0]._small_integer_pow(exponent - 1)]
    return rule


def _gelu_gate(x, approximate: str):
    """Phi(x), or its tanh approximation 0.5 (1 + tanh(u)) = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)."""
    if approximate == "none":
        if x.dtype == dtypes.float64:
            return 0.5 * (x * -math.sqrt(0.5)).erfc()
        return _normal_cdf_float32(x.float()).cast(x.dtype)
    return (2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).sigmoid()


def _normal_cdf_float32(x):
    """Phi(x) = erfc(-x / sqrt 2) / 2 in float32 arithmetic: erfc(|x| / sqrt 2) by one formula
    (_ERFC_FLOAT32), taken as it is or as 1 - it. With erf's two polynomials (_ERF_NEAR_ZERO inside
    |x| < sqrt 2, _ERFC_TAIL outside), both computed for every lane of a vector, BERT's FFN with its
    gelu epilogue took 13.2 ms a layer on one thread, 12.6 with one (10.6 without the gelu). The tail's exp(-x*x/2) is taken from x itself, not
    from the rounded x / sqrt 2, whose rounding, squared, would cost ~x*x/2 ulp. Within 7 (1 + x*x/2)
    ulp of the exact value (test_api_elementwise.py); Phi(x) < 1e-15 beyond |x| = 8, where x rounded
    to float32 costs as much. In float64 (erf's way) the whole gelu ran 3-4x slower, BERT's FFN 6.7 ms
    a layer."""
    z = x * -math.sqrt(0.5)
    t = (1 + 0.5 * z.abs()).reciprocal()
    tail = (x * x * -0.5).exp() * t * _polynomial(t, _ERFC_FLOAT32)  # erfc(|z|)
    return (z < 0).where(1 - 0.5 * tail, 0.5 * tail)


def _gelu_slope(x, approximate: str):
    """d/dx of x * gate(x): gate + x * gate'."""
    gate = _gelu_gate(x, approximate)
    if approximate == "none":
        return gate + x * (x * x * -0.5).exp() * (1 / math.sqrt(2 * math.pi))
    inner = 2 * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x * x)
    return gate + x * gate * (1 - gate) * inner
