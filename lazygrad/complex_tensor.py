"""Complex Tensors: complex64 and complex128 values as (real, imaginary) pairs of floats.

Front-end layer, beside tensor.py. A ComplexTensor is a Tensor whose lazy buffer holds each value's
real and imaginary parts along one more, last axis of 2, in float32 (complex64) or float64
(complex128). That is numpy's memory layout for complex arrays, so data moves in and out as it is,
and every device computes complex values with the real kernels it already has: the parts of an
expression fuse like any other elementwise chain, and complex matmuls are real ones.

`_apply`, the door every Tensor method goes through, maps the primitives onto the parts: the
movement ops, NEG, SUM and TAKE act on each part alike, MUL, DIV and CMPNE combine them, PROD halves
each axis with complex multiplies; a primitive with no complex meaning (an ordering, a bitwise op,
EXP2...) raises.
So a method composed of the first kind (sub, square, mean, matmul, reshape, indexing, cat) works on
complex Tensors as it stands. The functions whose real composition does not carry over (exp, log,
sqrt, the trigonometric and hyperbolic functions and their inverses, abs, sign, pow) are methods
here, written from the parts, with the special values C99's Annex G gives them (the array API
standard's special cases). Complex Tensors carry no gradients yet: making one from a Tensor that
wants a gradient raises.
"""
from __future__ import annotations

import inspect
import math

import numpy as np

from lazygrad.dtype import COMPLEX_OF, COMPLEX_PARTS, DType, dtypes, promote_types
from lazygrad.ops import MOVEMENT, Ops
from lazygrad.tensor import Tensor
from lazygrad.tensor_methods.math_functions import _sign_bit


class ComplexTensor(Tensor):
    """A Tensor of dtype complex64 or complex128 (see the module's docstring)."""
    __slots__ = ()
    _complex = True

    # ---- making and taking apart -------------------------------------------------------------

    @staticmethod
    def _of_pairs(pairs: Tensor) -> "ComplexTensor":
        out = ComplexTensor.__new__(ComplexTensor)
        Tensor.__init__(out, pairs.lazydata)
        out._parts = None
        return out

    @staticmethod
    def from_parts(real: Tensor, imag: Tensor) -> "ComplexTensor":
        """The complex Tensor real + imag*j from two real float Tensors of one dtype and shape."""
        if Tensor.grad_enabled and (real.requires_grad or imag.requires_grad):
            raise TypeError("complex tensors carry no gradients yet: detach() the real tensor, or build the "
                            "complex one under no_grad()")
        out = ComplexTensor.__new__(ComplexTensor)
        Tensor.__init__(out, Tensor.stack([real, imag], dim=-1).lazydata)
        out._parts = (real, imag)
        return out

    @staticmethod
    def full(shape: tuple[int, ...], value, dtype: DType, device) -> "ComplexTensor":
        value = complex(value)
        part = COMPLEX_PARTS[dtype]
        return ComplexTensor.from_parts(Tensor.full(shape, value.real, part, device),
                                        Tensor.full(shape, value.imag, part, device))

    def _split(self) -> tuple[Tensor, Tensor]:
        """The real and imaginary parts: the Tensors it was made of, while it is not realized (taking
        them back out of the pairs would put both parts' graphs into each, and a chain of complex ops
        would grow as 2^depth), else views of the pairs' buffer."""
        if self._parts is not None and not self.lazydata.realized:
            return self._parts
        shape = self.shape
        pairs = Tensor(self.lazydata)
        return tuple(pairs._apply(Ops.SHRINK, arg=tuple((0, size) for size in shape) + ((index, index + 1),))
                     ._apply(Ops.RESHAPE, arg=shape) for index in (0, 1))

    @property
    def real(self) -> Tensor:
        return self._split()[0]

    @property
    def imag(self) -> Tensor:
        return self._split()[1]

    def conj(self) -> "ComplexTensor":
        return ComplexTensor.from_parts(self.real, -self.imag)

    def conj_physical(self) -> "ComplexTensor":
        return self.conj()

    def angle(self) -> Tensor:
        return self.imag.atan2(self.real)

    # ---- the Tensor's view of it --------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self.lazydata.shape[:-1]

    @property
    def ndim(self) -> int:
        return len(self.lazydata.shape) - 1

    @property
    def dtype(self) -> DType:
        return COMPLEX_OF[self.lazydata.dtype]

    def is_complex(self) -> bool:
        return True

    def numpy(self) -> np.ndarray:
        pairs = np.ascontiguousarray(Tensor(self.lazydata).numpy())
        return pairs.view(self.dtype.np).reshape(self.shape)

    def __float__(self):
        raise TypeError(f"float(): a {self.dtype.name} tensor has no float value; take .real or .abs() first")

    def __int__(self):
        raise TypeError(f"int(): a {self.dtype.name} tensor has no int value; take .real or .abs() first")

    def detach(self) -> "ComplexTensor":
        return self

    def _with_gradient(self, sources, rule) -> "ComplexTensor":
        if Tensor.grad_enabled and any(source.requires_grad for source in sources):
            raise TypeError(f"a {self.dtype.name} result carries no gradient yet: detach() the inputs, or compute "
                            "it under no_grad()")
        return self

    def requires_grad_(self, requires_grad: bool = True) -> "ComplexTensor":
        if requires_grad:
            raise TypeError(f"requires_grad_: {self.dtype.name} tensors carry no gradients yet")
        return self

    def shard(self, devices, axis: int | None = None):
        raise TypeError(f"shard: {self.dtype.name} tensors cannot be sharded yet; shard the .real and .imag parts")

    def assign(self, value):
        raise TypeError(f"assign: {self.dtype.name} tensors cannot be assigned in place yet")

    def __setitem__(self, indices, value) -> None:
        """`z[indices] = value`, written into each part (see Tensor.__setitem__)."""
        value = value if isinstance(value, Tensor) else Tensor.full((), value, self.dtype, self.device)
        value = value.cast(self.dtype)
        re, im = self._split()
        re, im = Tensor(re.lazydata), Tensor(im.lazydata)
        value_re, value_im = value._split()
        re[indices], im[indices] = value_re, value_im
        self.lazydata = Tensor.stack([re, im], dim=-1).lazydata
        self._parts = (re, im)

    def cast(self, dtype) -> Tensor:
        """To another complex dtype: its parts converted. To bool: whether the value is nonzero. To a
        real dtype: the real part, the imaginary one dropped (as PyTorch and numpy do)."""
        dtype = dtypes.from_any(dtype)
        if dtype == self.dtype:
            return self
        if dtype.is_complex:
            re, im = self._split()
            return _make(re.cast(COMPLEX_PARTS[dtype]), im.cast(COMPLEX_PARTS[dtype]))
        if dtype.is_bool:
            return (self.real != 0) | (self.imag != 0)
        return self.real.cast(dtype)

    def bitcast(self, dtype):
        raise TypeError(f"bitcast: {self.dtype.name} tensors cannot be bitcast")

    # ---- the primitives ----------------------------------------------------------------------

    def _apply(self, op, *others: Tensor, arg=None) -> Tensor:
        if op is Ops.CONTIGUOUS or op is Ops.COPY:  # one buffer of pairs
            return ComplexTensor._of_pairs(Tensor(self.lazydata)._apply(op, arg=arg))
        re, im = self._split()
        if op.kind == MOVEMENT or op is Ops.NEG or op is Ops.SUM or op is Ops.TAKE:
            return _make(re._apply(op, *others, arg=arg), im._apply(op, *others, arg=arg))
        if op is Ops.ADD:
            other_re, other_im = others[0]._split()
            return _make(re + other_re, im + other_im)
        if op is Ops.MUL:
            return _multiply(self, others[0])
        if op is Ops.DIV:
            return _divide(self, others[0])
        if op is Ops.RECIP:
            return _divide(ComplexTensor.full(self.shape, 1, self.dtype, self.device), self)
        if op is Ops.CMPNE:
            other_re, other_im = others[0]._split()
            return (re != other_re) | (im != other_im)
        if op is Ops.PROD:
            return _product(self, arg)
        if op is Ops.CMPLT or op is Ops.MAX or op is Ops.MAX_REDUCE:
            raise TypeError(f"comparing by size (<, >, max, min, sort): not defined for {self.dtype.name} tensors, "
                            "complex numbers have no order; compare their .abs() or .real")
        raise TypeError(f"{op.name.lower()}: not defined for {self.dtype.name} tensors (no bits to operate on, or "
                        "no complex version in lazygrad yet)")

    @staticmethod
    def _select(condition: Tensor, if_true: "ComplexTensor", if_false: "ComplexTensor") -> "ComplexTensor":
        """WHERE with complex values: the condition picks both parts."""
        (true_re, true_im), (false_re, false_im) = if_true._split(), if_false._split()
        return _make(condition._apply(Ops.WHERE, true_re, false_re), condition._apply(Ops.WHERE, true_im, false_im))

    def matmul(self, other) -> "ComplexTensor":
        return complex_matmul(self, other)

    # ---- elementwise functions ----------------------------------------------------------------

    def abs(self) -> Tensor:
        return self.real.hypot(self.imag)

    def sgn(self) -> "ComplexTensor":
        """z / |z|, 0 at 0 (torch.sgn, the array API's sign); an infinite part gives a NaN, as |z| is inf."""
        a, b = self.real, self.imag
        magnitude = a.hypot(b)
        zero = magnitude == 0
        safe = zero.where(1, magnitude)
        re, im = zero.where(0.0, a / safe), zero.where(0.0, b / safe)
        undefined = re.isnan() | im.isnan()  # a NaN or an infinite part: NaN + NaN j, as numpy
        return _make(undefined.where(math.nan, re), undefined.where(math.nan, im))

    def sign(self) -> "ComplexTensor":
        return self.sgn()

    def round(self, decimals: int = 0) -> "ComplexTensor":
        return _make(self.real.round(decimals), self.imag.round(decimals))

    def square(self) -> "ComplexTensor":
        return self * self

    def isnan(self) -> Tensor:
        return self.real.isnan() | self.imag.isnan()

    def isinf(self) -> Tensor:
        return self.real.isinf() | self.imag.isinf()

    def isfinite(self) -> Tensor:
        return self.real.isfinite() & self.imag.isfinite()

    def exp(self) -> "ComplexTensor":
        return _exp(self.real, self.imag, minus_one=False)

    def expm1(self) -> "ComplexTensor":
        return _exp(self.real, self.imag, minus_one=True)

    def log(self) -> "ComplexTensor":
        """log|z| + j arg z; near |z| = 1, log|z| as log1p((m - 1)(m + 1) + n^2) / 2 (m the larger
        part, n the smaller), which keeps the digits log(|z|) loses there."""
        a, b = self.real, self.imag
        magnitude = a.hypot(b)
        larger, smaller = a.abs().maximum(b.abs()), a.abs().minimum(b.abs())
        near_one = (magnitude > 0.5) & (magnitude < 2)
        accurate = ((larger - 1) * (larger + 1) + smaller * smaller).log1p() * 0.5
        return _make(near_one.where(accurate, magnitude.log()), b.atan2(a))

    def log2(self) -> "ComplexTensor":
        return _scaled(self.log(), 1 / math.log(2))

    def log10(self) -> "ComplexTensor":
        return _scaled(self.log(), 1 / math.log(10))

    def log1p(self) -> "ComplexTensor":
        """log(1 + z), accurate for small z: the real part is log1p(2a + a^2 + b^2) / 2 there."""
        a, b = self.real, self.imag
        one_plus = a + 1
        small = (a.abs() < 0.5) & (b.abs() < 0.5)
        accurate = (a * (a + 2) + b * b).log1p() * 0.5
        return _make(small.where(accurate, one_plus.hypot(b).log()), b.atan2(one_plus))

    def sqrt(self) -> "ComplexTensor":
        """The principal square root (Kahan's: no cancellation, no overflow in the sum)."""
        a, b = self.real, self.imag
        t = (a.abs() * 0.5 + a.hypot(b) * 0.5).sqrt()
        t_safe = (t == 0).where(1, t)
        re = (a >= 0).where(t, b.abs() / (t_safe * 2))
        im = (a >= 0).where(b / (t_safe * 2), t.copysign(b))
        zero = (a == 0) & (b == 0)
        re, im = zero.where(a.abs(), re), zero.where(b, im)
        infinite_b = b.isinf()
        return _make(infinite_b.where(math.inf, re), infinite_b.where(b, im))

    def rsqrt(self) -> "ComplexTensor":
        return self.sqrt().reciprocal()

    def pow(self, exponent, reverse: bool = False) -> "ComplexTensor":
        """exp(exponent * log(base)), with 0 ** w = 0 for w of positive real part (1 for w = 0)."""
        base, power = self._operands(exponent, "pow", reverse)
        result = (power * base.log()).exp()
        zero_base = (base.real == 0) & (base.imag == 0)
        zero_power = (power.real == 0) & (power.imag == 0)
        one, zero = (ComplexTensor.full(base.shape, value, base.dtype, base.device) for value in (1, 0))
        result = (zero_base & (power.real > 0)).where(zero, result)
        return zero_power.where(one, result)

    def sinh(self) -> "ComplexTensor":
        return _sinh(self.real, self.imag)

    def cosh(self) -> "ComplexTensor":
        return _cosh(self.real, self.imag)

    def tanh(self) -> "ComplexTensor":
        return _tanh(self.real, self.imag)

    def sin(self) -> "ComplexTensor":
        return _times_minus_i(_sinh(-self.imag, self.real))  # sin z = -i sinh(iz)

    def cos(self) -> "ComplexTensor":
        return _cosh(-self.imag, self.real)  # cos z = cosh(iz)

    def tan(self) -> "ComplexTensor":
        return _times_minus_i(_tanh(-self.imag, self.real))  # tan z = -i tanh(iz)

    def asinh(self) -> "ComplexTensor":
        return _asinh(self.real, self.imag)

    def asin(self) -> "ComplexTensor":
        return _times_minus_i(_asinh(-self.imag, self.real))  # asin z = -i asinh(iz)

    def atanh(self) -> "ComplexTensor":
        return _atanh(self.real, self.imag)

    def atan(self) -> "ComplexTensor":
        return _times_minus_i(_atanh(-self.imag, self.real))  # atan z = -i atanh(iz)

    def acos(self) -> "ComplexTensor":
        return _acos(self.real, self.imag)

    def acosh(self) -> "ComplexTensor":
        return _acosh(self.real, self.imag)


def _make(real: Tensor, imag: Tensor) -> ComplexTensor:
    return ComplexTensor.from_parts(real, imag)


def _scaled(z: ComplexTensor, factor: float) -> ComplexTensor:
    return _make(z.real * factor, z.imag * factor)


def _times_minus_i(z: ComplexTensor) -> ComplexTensor:
    return _make(z.imag, -z.real)


def _either(mask: Tensor, if_true: float, if_false: float, like: Tensor) -> Tensor:
    """if_true where mask holds, if_false elsewhere, in like's dtype (a select of two numbers alone
    would be float32)."""
    return mask.where(Tensor.full(like.shape, if_true, like.dtype, like.device), if_false)


def _unit(x: Tensor) -> Tensor:
    """+1 or -1 by x's sign bit (-0.0 and negative NaNs give -1)."""
    return _sign_bit(x).where(-1.0, 1.0).cast(x.dtype)


def _multiply(x: ComplexTensor, y: ComplexTensor) -> ComplexTensor:
    (a, b), (c, d) = x._split(), y._split()
    return _make(a * c - b * d, a * d + b * c)


def _divide(x: ComplexTensor, y: ComplexTensor) -> ComplexTensor:
    """x / y by Smith's method: the divisor's smaller part is scaled by its larger, so no square
    overflows; a zero divisor gives inf or NaN parts (numpy gives NaN + NaN j)."""
    (a, b), (c, d) = x._split(), y._split()
    wide = c.abs() >= d.abs()
    ratio = wide.where(d / c, c / d)
    denominator = wide.where(c + d * ratio, c * ratio + d)
    re = wide.where(a + b * ratio, a * ratio + b) / denominator
    im = wide.where(b - a * ratio, b * ratio - a) / denominator
    zero = (c == 0) & (d == 0)  # a / 0: each part divided by the real zero (the standard's a/c + (b/c)j)
    re, im = zero.where(a / c, re), zero.where(b / c, im)
    return _make(re, im)


def _product(x: ComplexTensor, axes: tuple[int, ...]) -> ComplexTensor:
    """PROD over axes (kept as size 1), by halving each axis: log2(n) complex multiplies."""
    for axis in axes:
        while x.shape[axis] > 1:
            size = x.shape[axis]
            half = size // 2
            product = x.narrow(axis, 0, half) * x.narrow(axis, half, half)
            x = product if size % 2 == 0 else product.cat(x.narrow(axis, size - 1, 1), dim=axis)
        if x.shape[axis] == 0:
            shape = tuple(1 if i == axis else s for i, s in enumerate(x.shape))
            x = ComplexTensor.full(shape, 1, x.dtype, x.device)
    return x


def complex_matmul(x: Tensor, y) -> ComplexTensor:
    """x @ y where either is complex: four real matmuls of the parts (three would lose accuracy to
    cancellation)."""
    y = y if isinstance(y, Tensor) else Tensor(y, device=x.device)
    dtype = promote_types(x.dtype, y.dtype)
    x, y = x.cast(dtype), y.cast(dtype)
    a, b, c, d = x.real, x.imag, y.real, y.imag
    return _make(a.matmul(c) - b.matmul(d), a.matmul(d) + b.matmul(c))


def _exp(a: Tensor, b: Tensor, minus_one: bool) -> ComplexTensor:
    """exp(a + bj), or exp(a + bj) - 1 accurately near 0, with Annex G's values where a part is
    infinite or NaN."""
    grows = a.expm1() if minus_one else a.exp()
    scale = a.exp()
    cos, sin = b.cos(), b.sin()
    if minus_one:  # expm1(a) cos b + (cos b - 1), the second as -2 sin^2(b/2)
        half = (b * 0.5).sin()
        re = grows * cos - half * half * 2
    else:
        re = scale * cos
    im = scale * sin
    real_b = b == 0  # exp(a + 0j) is exp(a) + 0j, inf and NaN a included
    re, im = real_b.where(grows, re), real_b.where(b, im)
    not_finite_b = ~b.isfinite()
    low = (a == -math.inf)  # exp(-inf + bj) = 0 cis(b): its parts are zeros even for b inf or NaN
    re = low.where(-1.0 if minus_one else 0.0, re)
    if minus_one:  # expm1(-0 + 0j) is +0 + 0j, as the standard says
        re = ((a == 0) & (b == 0)).where(0.0, re)
    im = low.where(not_finite_b.where(0.0, im), im)
    high = (a == math.inf) & not_finite_b  # exp(+inf + inf j) or (+inf + NaN j): inf + NaN j
    return _make(high.where(math.inf, re), high.where(math.nan, im))


def _sinh(a: Tensor, b: Tensor) -> ComplexTensor:
    re = a.sinh() * b.cos()
    im = a.cosh() * b.sin()
    real_b = b == 0
    re, im = real_b.where(a.sinh(), re), real_b.where(b, im)
    undefined = ((a == 0) | a.isinf()) & ~b.isfinite()  # sinh(0 + inf j) is 0 + NaN j, sinh(inf + inf j) inf + NaN j
    return _make(undefined.where(a, re), undefined.where(math.nan, im))


def _cosh(a: Tensor, b: Tensor) -> ComplexTensor:
    re = a.cosh() * b.cos()
    im = a.sinh() * b.sin()
    real_b = b == 0  # cosh(a + 0j) is cosh a + 0j, the zero's sign sign(a) sign(b) (inf * 0 would give NaN)
    re, im = real_b.where(a.cosh(), re), real_b.where(a.isnan().where(b, _unit(a) * b), im)
    zero_a = (a == 0) & ~b.isfinite()  # cosh(0 + inf j) is NaN + 0j
    re, im = zero_a.where(math.nan, re), zero_a.where(0.0, im)
    infinite_a = a.isinf() & ~b.isfinite()  # cosh(inf + inf j) is inf + NaN j
    return _make(infinite_a.where(math.inf, re), infinite_a.where(math.nan, im))


def _tanh(a: Tensor, b: Tensor) -> ComplexTensor:
    """(sinh 2a + j sin 2b) / (cosh 2a + cos 2b), and +-1 + 0j once |a| is so large that tanh a
    rounds to +-1 (where cosh 2a would overflow)."""
    twice_a, twice_b = a * 2, b * 2
    denominator = twice_a.cosh() + twice_b.cos()
    re = twice_a.sinh() / denominator
    im = twice_b.sin() / denominator
    large = (a.abs() > 20) & b.isfinite()  # tanh(20) is 1 in float64; the imaginary part e^-40 sin 2b
    im_large = (b.sin() * b.cos() * 4) * (a.abs() * -2).exp()
    re, im = large.where(_unit(a), re), large.where(im_large, im)
    real_b = b == 0
    re, im = real_b.where(a.tanh(), re), real_b.where(b, im)
    infinite_a = a.isinf()  # tanh(+-inf + bj) is +-1 + 0j, the 0 with sin 2b's sign where b is finite
    re = infinite_a.where(_unit(a), re)
    im = infinite_a.where(_unit(b) * 0.0, im)  # the standard's 1 + 0j (Annex G would take sin 2b's sign)
    zero_a = (a == 0) & ~b.isfinite()  # tanh(0 + inf j) is 0 + NaN j
    return _make(zero_a.where(a, re), zero_a.where(math.nan, im))


def _patched(re: Tensor, im: Tensor, cases) -> ComplexTensor:
    """re + j im with Annex G's values where they apply: `cases` lists (where, real, imaginary), a
    part None where it stays, later cases over earlier ones."""
    for where, real, imaginary in cases:
        re = re if real is None else where.where(real, re)
        im = im if imaginary is None else where.where(imaginary, im)
    return _make(re, im)


# Kahan's formulas for the inverse functions ("Branch cuts for complex elementary functions", 1987):
# written with square roots of 1 - z, 1 + z, z - 1 and z + 1, each formed part by part (1 - z is
# 1 - a - bj, never 1 + 0j - z, whose zero would lose its sign), they give the principal values on
# both sides of each branch cut from the sign of a zero imaginary part, and lose no digits near 0
# and near +-1.

def _roots(a: Tensor, b: Tensor, sign: float) -> tuple[ComplexTensor, ComplexTensor]:
    """sqrt(1 - z) and sqrt(1 + z) (sign -1: sqrt(z - 1) and sqrt(z + 1))."""
    if sign > 0:
        return _make(1 - a, -b).sqrt(), _make(1 + a, b).sqrt()
    return _make(a - 1, b).sqrt(), _make(a + 1, b).sqrt()


def _asinh(a: Tensor, b: Tensor) -> ComplexTensor:
    """asinh z = -i asin(iz), asin(x + yj) = atan(x / Re(sqrt(1 - w) sqrt(1 + w))) + j asinh(Im(conj(
    sqrt(1 - w)) sqrt(1 + w))) at w = iz = -b + aj."""
    x, y = -b, a
    down, up = _roots(x, y, 1)
    asin_re = x.atan2((down * up).real)
    asin_im = (down.conj() * up).imag.asinh()
    re, im = asin_im, -asin_re  # -i (asin_re + j asin_im)
    inf_a, inf_b, nan_a = a.isinf(), b.isinf(), a.isnan()
    return _patched(re, im, [
        (inf_b & a.isfinite(), _unit(a) * math.inf, _unit(b) * (math.pi / 2)),
        (inf_a & b.isfinite(), a, _unit(b) * 0.0),
        (inf_a & inf_b, a, _unit(b) * (math.pi / 4)),
        (inf_a & b.isnan(), a, math.nan),
        (nan_a & (b == 0), math.nan, b),
        (nan_a & inf_b, math.inf, math.nan),
        ((a == 0) & (b == 0), a, b),
    ])


def _acos(a: Tensor, b: Tensor) -> ComplexTensor:
    """acos z = 2 atan(Re sqrt(1 - z) / Re sqrt(1 + z)) + j asinh(Im(conj(sqrt(1 + z)) sqrt(1 - z)))."""
    down, up = _roots(a, b, 1)
    re = down.real.atan2(up.real) * 2
    im = (up.conj() * down).imag.asinh()
    inf_a, inf_b, nan_a, nan_b = a.isinf(), b.isinf(), a.isnan(), b.isnan()
    negative_a = _sign_bit(a)
    return _patched(re, im, [
        (inf_b & a.isfinite(), math.pi / 2, -b),
        (inf_a & b.isfinite(), _either(negative_a, math.pi, 0.0, a), _unit(b) * -math.inf),
        (inf_a & inf_b, _either(negative_a, 3 * math.pi / 4, math.pi / 4, a), -b),
        (inf_a & nan_b, math.nan, math.inf),  # the imaginary part's sign is unspecified
        (nan_a & inf_b, math.nan, -b),
        ((a == 0) & nan_b, math.pi / 2, math.nan),
        ((a == 0) & (b == 0), math.pi / 2, -b),
    ])


def _acosh(a: Tensor, b: Tensor) -> ComplexTensor:
    """acosh z = asinh(Re(conj(sqrt(z - 1)) sqrt(z + 1))) + 2j atan(Im sqrt(z - 1) / Re sqrt(z + 1))."""
    down, up = _roots(a, b, -1)
    re = (down.conj() * up).real.asinh()
    im = down.imag.atan2(up.real) * 2
    inf_a, inf_b, nan_a, nan_b = a.isinf(), b.isinf(), a.isnan(), b.isnan()
    negative_a = _sign_bit(a)
    return _patched(re, im, [
        (inf_b & a.isfinite(), math.inf, _unit(b) * (math.pi / 2)),
        (inf_a & b.isfinite(), math.inf, _unit(b) * _either(negative_a, math.pi, 0.0, a)),
        (inf_a & inf_b, math.inf, _unit(b) * _either(negative_a, 3 * math.pi / 4, math.pi / 4, a)),
        (inf_a & nan_b, math.inf, math.nan),
        (nan_a & inf_b, math.inf, math.nan),
        ((a == 0) & nan_b, math.nan, math.pi / 2),
        ((a == 0) & (b == 0), 0.0, _unit(b) * (math.pi / 2)),
    ])


def _atanh(a: Tensor, b: Tensor) -> ComplexTensor:
    """atanh z = log1p(4a / ((1 - a)^2 + b^2)) / 4 + j atan2(2b, (1 - a)(1 + a) - b^2) / 2, which
    keeps its digits near 0 and far from it; 1/z + j pi/2 where the squares would overflow."""
    re = (a * 4 / ((1 - a) * (1 - a) + b * b)).log1p() * 0.25
    near_one = ((1 - a.abs()).abs() < 0.5) & (b.abs() < 0.5)  # where (1 - a)^2 + b^2 may underflow
    re = near_one.where(((1 + a).hypot(b).log() - (1 - a).hypot(b).log()) * 0.5, re)
    im = (b * 2).atan2((1 - a) * (1 + a) - b * b) * 0.5
    huge = math.sqrt(np.finfo(a.dtype.np).max) / 4
    large = a.abs().maximum(b.abs()) > huge
    z = _make(a, b)
    inverse = ComplexTensor.full(z.shape, 1, z.dtype, z.device) / z
    re, im = large.where(inverse.real, re), large.where(_unit(b) * (math.pi / 2), im)
    inf_a, inf_b, nan_a, nan_b = a.isinf(), b.isinf(), a.isnan(), b.isnan()
    return _patched(re, im, [
        ((inf_a | inf_b) & ~nan_a & ~nan_b, _unit(a) * 0.0, _unit(b) * (math.pi / 2)),
        (inf_a & nan_b, _unit(a) * 0.0, math.nan),
        (nan_a & inf_b, 0.0, _unit(b) * (math.pi / 2)),
        ((a.abs() == 1) & (b == 0), a * math.inf, b),
        ((a == 0) & nan_b, a, math.nan),
        ((a == 0) & (b == 0), a, b),
    ])


# The Tensor methods that hold for complex values as they are composed (movement, indexing, joins,
# sums, products, selects), beside those ComplexTensor defines itself. Every other public method of
# Tensor raises on a complex Tensor: one written for real numbers (clamp, sort, relu, max) would
# otherwise compare or round the parts and give a wrong answer rather than an error.
_INHERITED = frozenset("""
    add sub mul div neg reciprocal sum prod mean eq ne where masked_fill
    reshape view view_as reshape_as flatten unflatten squeeze unsqueeze expand expand_as permute
    transpose swapaxes swapdims moveaxis movedim flip roll shrink narrow pad cat stack split chunk
    unbind repeat repeat_interleave tile tril triu diagonal take index_select gather
    dot mm bmm outer
    bool logical_not logical_and logical_or logical_xor any all nonzero cumsum
    contiguous clone realize to to_device numpy tolist item size numel full_like zeros_like ones_like
    empty_like register_post_accumulate_grad_hook backward
""".split())


def _refusing(name: str):
    def refuse(self, *args, **kwargs):
        raise TypeError(f"{name}: not supported for {self.dtype.name} tensors (lazygrad's complex tensors have the "
                        "arithmetic, exp, log, sqrt, pow, the trigonometric and hyperbolic functions, abs, sign, "
                        "sums, products, matmul, and the movement and indexing methods)")
    refuse.__name__ = name
    return refuse


for _name in dir(Tensor):
    _static = inspect.getattr_static(Tensor, _name)
    if _name.startswith("_") or _name in _INHERITED or _name in ComplexTensor.__dict__ or \
            isinstance(_static, (staticmethod, property)) or not callable(_static):
        continue
    setattr(ComplexTensor, _name, _refusing(_name))
