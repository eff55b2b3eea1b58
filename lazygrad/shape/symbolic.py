"""Integer index expressions with known bounds, simplified as they are built; used to render views.

A view turns loop variables into a memory index and a validity condition. Written naively those
are long chains of `*`, `//` and `%`; knowing each variable's range lets most of it fold away:
`(i*4 + j) // 4` is `i` when `0 <= j < 4`, and `(i*4 + j) % 4` is `j`.

Everything is a `Lin`: a constant plus integer multiples of atoms, where an atom is a loop
variable, a floor division or a floor modulo by a positive constant. Division and modulo follow
Python's floor semantics; renderers emit plain `/` and `%` only where the operand is provably
non-negative (where C's truncation agrees).
"""
from __future__ import annotations

import math


class Atom:
    """A variable, or `inner // divisor`, or `inner % divisor`."""
    __slots__ = ("kind", "name", "inner", "divisor", "min", "max", "_key", "_hash")

    def __init__(self, kind: str, name: str = "", inner: "Lin | None" = None, divisor: int = 1,
                 lo: int = 0, hi: int = 0):
        self.kind, self.name, self.inner, self.divisor = kind, name, inner, divisor
        self.min, self.max = lo, hi
        self._key = (kind, name, inner.identity() if inner is not None else None, divisor)
        self._hash = hash(self._key)  # atoms key every Lin's terms: hashed far more often than made

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, Atom) and self._key == other._key

    def evaluate(self, values: dict[str, int]) -> int:
        if self.kind == "var":
            return values[self.name]
        inner = self.inner.evaluate(values)
        return inner // self.divisor if self.kind == "div" else inner % self.divisor

    def narrowed(self, bounds: dict[str, tuple[int, int]]) -> "Lin":
        """This atom rebuilt with the variables in `bounds` ranging over their narrower bounds."""
        if self.kind == "var":
            lo, hi = bounds.get(self.name, (self.min, self.max))
            return Lin({Atom("var", name=self.name, lo=lo, hi=hi): 1}, 0)
        inner = self.inner.narrowed(bounds)
        return inner // self.divisor if self.kind == "div" else inner % self.divisor

    def render(self, renderer) -> str:
        if self.kind == "var":
            return self.name
        inner = self.inner.render(renderer)
        if len(self.inner.terms) + (self.inner.const != 0) > 1:
            inner = f"({inner})"
        non_negative = self.inner.min >= 0
        if self.kind == "div":
            return f"({inner}/{self.divisor})" if non_negative else renderer.floordiv(inner, self.divisor)
        return f"({inner}%{self.divisor})" if non_negative else renderer.floormod(inner, self.divisor)


class Lin:
    """`const + sum(coefficient * atom)`, immutable."""
    __slots__ = ("terms", "const", "min", "max", "_identity")

    def __init__(self, terms: dict, const: int):
        # one loop (the renderer builds tens of thousands of these per model): drop zero terms, bound
        kept, lo, hi = {}, const, const
        for atom, coeff in terms.items():
            if coeff > 0:
                kept[atom] = coeff
                lo += coeff * atom.min
                hi += coeff * atom.max
            elif coeff < 0:
                kept[atom] = coeff
                lo += coeff * atom.max
                hi += coeff * atom.min
        self.terms, self.const, self.min, self.max = kept, const, lo, hi
        self._identity = None

    def identity(self) -> tuple:
        """What makes two expressions equal, whatever the order of their terms (an Atom's key)."""
        if self._identity is None:
            self._identity = frozenset((atom._key, coeff) for atom, coeff in self.terms.items()), self.const
        return self._identity

    # equal when they compute the same: a loop program's statements compare their indices so
    # (codegen/linearize.py names a load once however many copies of the body read it)
    def __eq__(self, other) -> bool:
        return isinstance(other, Lin) and self.identity() == other.identity()

    def __hash__(self) -> int:
        return hash(self.identity())

    @staticmethod
    def of(value: "Lin | int") -> "Lin":
        return value if isinstance(value, Lin) else Lin({}, int(value))

    @property
    def is_const(self) -> bool:
        return not self.terms

    def __add__(self, other: "Lin | int") -> "Lin":
        other = Lin.of(other)
        terms = dict(self.terms)
        recombine = False
        for atom, coeff in other.terms.items():
            terms[atom] = terms.get(atom, 0) + coeff
            recombine = recombine or atom.kind != "var"
        if recombine:
            return _recombined(terms, self.const + other.const)
        return Lin(terms, self.const + other.const)

    __radd__ = __add__

    def __mul__(self, factor: int) -> "Lin":
        assert isinstance(factor, int), "index expressions only scale by integers"
        return Lin({atom: coeff * factor for atom, coeff in self.terms.items()}, self.const * factor)

    __rmul__ = __mul__

    def __sub__(self, other: "Lin | int") -> "Lin":
        return self + Lin.of(other) * -1

    def __floordiv__(self, divisor: int) -> "Lin":
        assert divisor > 0
        if divisor == 1:
            return self
        if self.min // divisor == self.max // divisor:  # one quotient over the whole range
            return Lin.of(self.min // divisor)
        # (divisor*q + r) // divisor == q + r // divisor for every integer r (floor semantics)
        quotient, rest = self._split_multiples(divisor)
        if rest.min // divisor == rest.max // divisor:
            return quotient + rest.min // divisor
        factored = rest._common_factor(divisor)
        if factored is not None:  # (g*b + s) // (g*m) == b // m when 0 <= s < g
            factor, big, _ = factored
            return quotient + big // (divisor // factor)
        if len(rest.terms) == 1 and rest.const == 0:
            (atom, coeff), = rest.terms.items()
            if atom.kind == "div" and coeff == 1:
                return quotient + Lin({Atom("div", inner=atom.inner, divisor=atom.divisor * divisor,
                                            lo=atom.inner.min // (atom.divisor * divisor),
                                            hi=atom.inner.max // (atom.divisor * divisor)): 1}, 0)
        return quotient + Lin({Atom("div", inner=rest, divisor=divisor, lo=rest.min // divisor,
                                    hi=rest.max // divisor): 1}, 0)

    def __mod__(self, divisor: int) -> "Lin":
        assert divisor > 0
        if divisor == 1:
            return Lin.of(0)
        if self.min // divisor == self.max // divisor:  # one quotient over the whole range
            return self - divisor * (self.min // divisor)
        # (divisor*q + r) % divisor == r % divisor
        _, rest = self._split_multiples(divisor)
        if rest.min // divisor == rest.max // divisor:
            return rest - divisor * (rest.min // divisor)
        factored = rest._common_factor(divisor)
        if factored is not None:  # (g*b + s) % (g*m) == (b % m)*g + s when 0 <= s < g
            factor, big, small = factored
            return (big % (divisor // factor)) * factor + small
        if len(rest.terms) == 1 and rest.const == 0:
            (atom, coeff), = rest.terms.items()
            if atom.kind == "mod" and coeff == 1 and atom.divisor % divisor == 0:
                return atom.inner % divisor
        lo, hi = (rest.min, rest.max) if rest.min >= 0 and rest.max < divisor else (0, divisor - 1)
        return Lin({Atom("mod", inner=rest, divisor=divisor, lo=lo, hi=hi): 1}, 0)

    def _common_factor(self, divisor: int) -> "tuple[int, Lin, Lin] | None":
        """(g, b, s) with self == g*b + s, g > 1 dividing divisor, and 0 <= s < g: the largest such g
        among the coefficients' common factors with divisor, or None. Then a division or modulo by
        divisor works on b alone: (1600*i + 400*j + k) // 25600 is i // 16 when 400*j + k < 1600,
        (56*i + 111 + k) // 112 is (i + 2) // 2 when 1 <= k <= 56."""
        candidates = sorted({math.gcd(coeff, divisor) for coeff in self.terms.values()} - {1}, reverse=True)
        for factor in candidates:
            big = {atom: coeff // factor for atom, coeff in self.terms.items() if coeff % factor == 0}
            small = Lin({atom: coeff for atom, coeff in self.terms.items() if coeff % factor}, 0)
            whole = (self.const + small.min) // factor  # the constant's multiples of g that b takes
            small = small + (self.const - whole * factor)
            if big and 0 <= small.min and small.max < factor:
                return factor, Lin(big, whole), small
        return None

    def _split_multiples(self, divisor: int) -> tuple["Lin", "Lin"]:
        """Split into (the whole multiples of divisor, divided by it) and the remainder part: each
        coefficient gives its whole multiples away, so (19*i + j) % 18 becomes (i + j) % 18."""
        quotient_terms, rest_terms = {}, {}
        for atom, coeff in self.terms.items():
            whole = abs(coeff) // divisor * (1 if coeff > 0 else -1)
            quotient_terms[atom] = whole
            rest_terms[atom] = coeff - whole * divisor
        const_quotient, const_rest = divmod(self.const, divisor)
        return Lin(quotient_terms, const_quotient), Lin(rest_terms, const_rest)

    def shifted(self, amount: int) -> "Lin":
        """self + amount, its terms and their bounds taken as they are."""
        moved = Lin.__new__(Lin)
        moved.terms, moved.const = self.terms, self.const + amount
        moved.min, moved.max, moved._identity = self.min + amount, self.max + amount, None
        return moved

    def mentions(self, names: set[str]) -> bool:
        """Whether a variable of `names` appears anywhere in this expression, inside a division or
        remainder too."""
        for atom in self.terms:
            if atom.name in names if atom.kind == "var" else atom.inner.mentions(names):
                return True
        return False

    def narrowed(self, bounds: dict[str, tuple[int, int]]) -> "Lin":
        """This expression rebuilt with the variables in `bounds` ranging over their narrower bounds,
        so its divisions and modulos fold again."""
        result = Lin.of(self.const)
        for atom, coeff in self.terms.items():
            result = result + atom.narrowed(bounds) * coeff
        return result

    def evaluate(self, values: dict[str, int]) -> int:
        """The value for given variable values (used by tests and debugging)."""
        return self.const + sum(coeff * atom.evaluate(values) for atom, coeff in self.terms.items())

    def render(self, renderer=None) -> str:
        renderer = renderer or _PLAIN
        parts = []
        for atom, coeff in sorted(self.terms.items(), key=lambda item: -abs(item[1])):
            text = atom.render(renderer)
            parts.append(text if coeff == 1 else f"{text}*{coeff}")
        if self.const or not parts:
            parts.append(str(self.const))
        return "+".join(parts).replace("+-", "-")

    def __repr__(self) -> str:
        return f"<{self.render()} in [{self.min}, {self.max}]>"


class FloorSyntax:
    """Floor division and modulo of a possibly negative index, in C-family syntax (the renderers'
    helpers lg_floordiv/lg_floormod); renderers inherit it and may override."""
    @staticmethod
    def floordiv(text: str, divisor: int) -> str:
        return f"lg_floordiv({text}, {divisor})"

    @staticmethod
    def floormod(text: str, divisor: int) -> str:
        return f"lg_floormod({text}, {divisor})"


_PLAIN = FloorSyntax()


def _recombined(terms: dict, const: int) -> Lin:
    """terms + const with each `k*c*(x // c) + k*(x % c)` pair folded back into `k*x` (a view that
    splits an axis and a later one that merges it again: ResNet-18's max pool gradient indexed
    `(i/64)*802816 + (i%64)*12544`, i*12544, so gcc loaded the same element twice)."""
    for atom, coeff in list(terms.items()):
        if atom.kind != "mod" or atom not in terms or coeff == 0:
            continue
        quotient = Atom("div", inner=atom.inner, divisor=atom.divisor)
        if terms.get(quotient, 0) == coeff * atom.divisor:
            del terms[atom], terms[quotient]
            inner = atom.inner * coeff
            for inner_atom, inner_coeff in inner.terms.items():
                terms[inner_atom] = terms.get(inner_atom, 0) + inner_coeff
            const += inner.const
    return Lin(terms, const)


def var(name: str, lo: int, hi: int) -> Lin:
    """A loop variable ranging over [lo, hi] inclusive."""
    return Lin({Atom("var", name=name, lo=lo, hi=hi): 1}, 0)


def narrower_bounds(conditions: list[tuple[Lin, int, int]]) -> dict[str, tuple[int, int]]:
    """The variables that conditions of the form `lo <= a*v + c < hi` confine to a narrower range
    than their own: name -> (lo, hi) inclusive, possibly empty (lo > hi) when the conditions
    contradict each other."""
    bounds: dict[str, tuple[int, int]] = {}
    for expr, lo, hi in conditions:
        if len(expr.terms) != 1:
            continue
        (atom, coeff), = expr.terms.items()
        if atom.kind != "var":
            continue
        low, high = bounds.get(atom.name, (atom.min, atom.max))
        if coeff > 0:  # lo - c <= a*v <= hi - 1 - c
            low, high = max(low, -((expr.const - lo) // coeff)), min(high, (hi - 1 - expr.const) // coeff)
        else:
            low, high = max(low, -((hi - 1 - expr.const) // -coeff)), min(high, (expr.const - lo) // -coeff)
        if (low, high) != (atom.min, atom.max):
            bounds[atom.name] = (low, high)
    return bounds


class Condition:
    """The checks of a validity the bounds leave undecided, all of which must hold: `expr >= bound`
    (`at_least` True) or `expr < bound`. Equal when the checks are."""
    __slots__ = ("checks",)

    def __init__(self, checks: tuple[tuple[Lin, bool, int], ...]):
        self.checks = checks

    def __eq__(self, other) -> bool:
        return isinstance(other, Condition) and self.checks == other.checks

    def __hash__(self) -> int:
        return hash(self.checks)

    def render(self) -> str:
        """C-family text (plain floor syntax)."""
        return "&&".join(f"({expr.render()}{'>=' if at_least else '<'}{bound})" for expr, at_least, bound in self.checks)

    def evaluate(self, values: dict):
        """The truth for given variable values (numpy arrays evaluate element by element)."""
        result = True
        for expr, at_least, bound in self.checks:
            value = expr.evaluate(values)
            result = result & ((value >= bound) if at_least else (value < bound))
        return result

    def __repr__(self) -> str:
        return f"<{self.render()}>"


def condition(conditions: list[tuple[Lin, int, int]]) -> Condition | bool:
    """`lo <= expr < hi` for each entry, as the checks the bounds leave undecided; True/False when
    the bounds alone decide."""
    checks = []
    for expr, lo, hi in conditions:
        if expr.max < lo or expr.min >= hi or lo >= hi:
            return False
        if expr.min < lo:
            checks.append((expr, True, lo))
        if expr.max >= hi:
            checks.append((expr, False, hi))
    return Condition(tuple(checks)) if checks else True


def render_condition(conditions: list[tuple[Lin, int, int]]) -> str | bool:
    """Render `lo <= expr < hi` for each entry; True/False when decided by the bounds alone."""
    decided = condition(conditions)
    return decided if isinstance(decided, bool) else decided.render()
