"""The loop program: what codegen (codegen/linearize.py) makes of a kernel and its opts, and what a
renderer prints (renderer/c.py, opencl.py, cuda.py) or codegen/interpret.py runs with numpy.

Loops, then straight-line statements, accumulators and stores, all typed values: no text. Each
statement assigns an expression tree to a variable (or to an accumulator, or an element of an
accumulator array); the leaves are loads, constants, validity checks and references to earlier
variables, the inner nodes the op table's ops (by name) and the few forms a loop body needs
besides them (vector lanes, fused multiply-adds, byte dot products, accumulator updates).
Indices are `Lin` expressions of the loop variables and validities `Condition`s, so two
statements computing the same value compare equal (linearize names such a value once).
Here, below both, so that a renderer reads it without importing codegen.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field, fields

import numpy as np

from lazygrad.dtype import DType
from lazygrad.ops import OpDef
from lazygrad.shape.symbolic import Condition, Lin

# ---- values: expression trees, frozen so that equal ones hash alike -------------------------------


def value(cls):
    """A frozen dataclass compared by its fields, whose hash is computed once: linearize hashes every
    value it names, and a value's hash hashes its operands."""
    cls = dataclass(frozen=True)(cls)
    compared = operator.attrgetter(*(item.name for item in fields(cls) if item.compare))

    def __hash__(self) -> int:
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(compared(self))
            object.__setattr__(self, "_hash", cached)
        return cached
    cls.__hash__ = __hash__
    return cls


@value
class Var:
    """A variable the program declared earlier (a statement's value or an accumulator)."""
    name: str


@value
class Element:
    """array[index]: an element of a buffer (a parameter) or of an accumulator array."""
    array: str
    index: Lin


@value
class Const:
    """A constant; equal to another of its dtype with the same bits there (0 and False agree, 0.0
    and -0.0 differ)."""
    value: object = field(compare=False)
    dtype: DType
    bits: bytes = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "bits", np.array(self.value, dtype=self.dtype.np).tobytes())


@value
class Load:
    """param[index] where `valid` holds, else 0. `splat`: one value read for every lane of a vector
    copy (a renderer may broadcast it from memory)."""
    param: str
    dtype: DType
    index: Lin
    valid: Condition | bool
    splat: bool = False


@value
class VectorLoad:
    """`width` consecutive elements from param[index], index a multiple of width."""
    param: str
    dtype: DType
    index: Lin
    width: int


@value
class Masked:
    """value where `valid` holds, else 0 (in every lane of a value of `width` lanes)."""
    value: "Expr"
    dtype: DType
    valid: Condition | bool
    width: int = 1


@value
class Valid:
    """The truth of a condition, as a bool value."""
    condition: Condition


@value
class Op:
    """An op of the op table (ops/table.py) on its operands; `width` > 1: on vectors of that many
    lanes, lane by lane."""
    op: OpDef
    src_dtypes: tuple[DType, ...]
    dtype: DType
    operands: tuple["Expr", ...]
    width: int = 1


@value
class Vector:
    """A vector of separately computed lanes (a gather)."""
    dtype: DType
    lanes: tuple["Expr", ...]


@value
class Lane:
    """One lane of a vector value."""
    value: "Expr"
    dtype: DType
    lane: int


@value
class Broadcast:
    """A scalar in every lane of a vector of `width` lanes."""
    dtype: DType
    width: int
    value: "Expr"


@value
class Accumulate:
    """accumulator updated with value by a reduce's op (SUM, PROD or MAX_REDUCE)."""
    op: OpDef
    dtype: DType
    accumulator: "Expr"
    value: "Expr"
    width: int = 1


@value
class Fma:
    """left * right + accumulator with one rounding."""
    dtype: DType
    left: "Expr"
    right: "Expr"
    accumulator: "Expr"
    width: int = 1


@value
class ByteDot:
    """The accumulator's int32 lanes plus, per lane, the dot product of the 4 uint8 from
    `activations` (the same for every lane) with that lane's 4 int8 from `weights` (lane-major):
    both are the address of the first byte."""
    accumulator: "Expr"
    activations: Element
    weights: Element
    width: int


@value
class InRange:
    """0 <= value < size, as a bool."""
    value: "Expr"
    size: int


Expr = (Var | Element | Const | Load | VectorLoad | Masked | Valid | Op | Vector | Lane | Broadcast | Accumulate
        | Fma | ByteDot | InRange)


# ---- the program ------------------------------------------------------------------------------


@dataclass
class Loop:
    var: str
    size: int
    reduce: bool


@dataclass
class Statement:
    target: Var | Element        # the variable declared, or the accumulator (or its element) assigned
    dtype: DType
    expr: Expr
    declare: bool = True         # False: an assignment to an existing variable (an accumulator)
    width: int = 1               # lanes of a vector value; 1 for a scalar


@dataclass
class Store:
    param: str
    index: Lin
    value: Expr                  # a vector of `width` lanes when that exceeds 1 (one vector store)
    guard: Expr | None = None    # stored only where this bool is true (a guarded STORE; scalar programs only)
    width: int = 1


@dataclass
class Accumulator:
    name: str
    op: OpDef                    # Ops.SUM, Ops.PROD or Ops.MAX_REDUCE
    dtype: DType
    width: int = 1               # lanes of a vector accumulator; 1 for a scalar


@dataclass
class ReduceStage:
    """One reduce of a kernel with several (earlier reduces feed later ones, as softmax's row max
    feeds its sum of exponentials): accumulators, the loop body over the reduce loops, and the
    folding of unrolled accumulators after them."""
    accumulators: list[Accumulator]
    inner: list[Statement]
    combine: list[Statement]
    results: list[Accumulator] = field(default_factory=list)  # per output, the accumulator holding the
    #                                                           result after `combine` (what a GROUP folds)
    reduces: int = 1  # how many reduces (of one op and dtype, none reading another) share this pass


@dataclass
class LoopProgram:
    name: str
    params: list[tuple[str, DType, bool]]        # (name, dtype, is_output)
    global_loops: list[Loop]
    reduce_loops: list[Loop]
    inner: list[Statement]                       # inside the reduce loops, ending in accumulator updates
    accumulators: list[Accumulator]              # one per output of an iteration (several when upcast)
    outer: list[Statement]                       # after the reduce, per iteration of the global loops
    stores: list[Store]
    full_shape: tuple[int, ...] = ()
    inner_loops: list[Loop] = field(default_factory=list)  # output loops run inside the reduce, one
    #                                                        accumulator each (an array, see accumulator_index)
    parallel: bool = False       # split the outer loop over CPU cores
    threads: int | None = None   # how many (a THREADS opt); None: OpenMP's default, every core
    vectorize: bool = False      # mark the innermost reduce loop as a SIMD reduction
    opts: tuple = ()             # the Opts applied (upcast and unrolled axes are expanded in place)
    block_loop: Loop | None = None  # BLOCK: a reduce loop around everything, partial results in the output
    partial_stores: list[Store] = field(default_factory=list)  # per output: where its partial result
    #                                                        lives, and the accumulator holding it
    combine: list[Statement] = field(default_factory=list)  # after the reduce loops: fold the accumulators of
    #                                                        unrolled steps into each output's first one
    raw_stores: list[Store] = field(default_factory=list)  # sums stored before the epilogue, which
    #                                                        reads them back
    prior_stages: list[ReduceStage] = field(default_factory=list)  # reduces run before this one, each over
    #                                                        the same reduce loops, in order
    local_loops: list[Loop] = field(default_factory=list)  # LOCAL axes, then the GROUP lane: the work-items of
    #                                                        one group, the last loop varying fastest
    group_lane: Loop | None = None  # GROUP: the lane axis (also in local_loops); each lane reduces every n-th step
    results: list[Accumulator] = field(default_factory=list)  # per output, the accumulator holding the last
    #                                                        reduce's result after `combine`
    reduces: int = 1             # reduces sharing the last pass over the reduce loops (ReduceStage.reduces)
    vector_width: int = 1        # > 1: the copies of the body are vectors of this many lanes
    select_only_loads: bool = False  # some load is used only as a value a WHERE chooses (see renderer/c.py)
    masked_reads: bool = False   # some load reads through a mask: padding (see renderer/c.py)

    @property
    def stages(self) -> list[ReduceStage]:
        """Every reduce in the order they run (empty without a reduce)."""
        if not self.accumulators:
            return []
        return self.prior_stages + [ReduceStage(self.accumulators, self.inner, self.combine, self.results, self.reduces)]
