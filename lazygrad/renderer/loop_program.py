"""The loop program: what codegen (codegen/linearize.py) makes of a kernel and its opts, and what a
renderer prints (renderer/c.py, opencl.py, cuda.py). Loops, then straight-line statements whose
expressions the renderer already wrote (linearize asks it for each), accumulators and stores.
Here, below both, so that a renderer reads it without importing codegen.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lazygrad.dtype import DType


@dataclass
class Loop:
    var: str
    size: int
    reduce: bool


@dataclass
class Statement:
    name: str
    dtype: DType
    expr: str
    declare: bool = True         # False: an assignment to an existing variable (an accumulator)
    width: int = 1               # lanes of a vector value; 1 for a scalar


@dataclass
class Accumulator:
    name: str
    op: str                      # SUM, PROD or MAX_REDUCE
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


@dataclass
class LoopProgram:
    name: str
    params: list[tuple[str, DType, bool]]        # (name, dtype, is_output)
    global_loops: list[Loop]
    reduce_loops: list[Loop]
    inner: list[Statement]                       # inside the reduce loops, ending in accumulator updates
    accumulators: list[Accumulator]              # one per output of an iteration (several when upcast)
    outer: list[Statement]                       # after the reduce, per iteration of the global loops
    stores: list[tuple[str, str, str]]           # (param name, index text, value name)
    full_shape: tuple[int, ...] = ()
    inner_loops: list[Loop] = field(default_factory=list)  # output loops run inside the reduce, one
    #                                                        accumulator each (an array, see accumulator_index)
    parallel: bool = False       # split the outer loop over CPU cores
    threads: int | None = None   # how many (a THREADS opt); None: OpenMP's default, every core
    vectorize: bool = False      # mark the innermost reduce loop as a SIMD reduction
    opts: tuple = ()             # the Opts applied (upcast and unrolled axes are expanded in place)
    block_loop: Loop | None = None  # BLOCK: a reduce loop around everything, partial results in the output
    partial_stores: list[tuple[str, str, str]] = field(default_factory=list)  # (param, index, accumulator)
    #                                                        per output: where its partial result lives
    combine: list[Statement] = field(default_factory=list)  # after the reduce loops: fold the accumulators of
    #                                                        unrolled steps into each output's first one
    raw_stores: list[tuple[str, str, str]] = field(default_factory=list)  # (param, index, accumulator): sums
    #                                                        stored before the epilogue, which reads them back
    prior_stages: list[ReduceStage] = field(default_factory=list)  # reduces run before this one, each over
    #                                                        the same reduce loops, in order
    local_loops: list[Loop] = field(default_factory=list)  # LOCAL axes, then the GROUP lane: the work-items of
    #                                                        one group, the last loop varying fastest
    group_lane: Loop | None = None  # GROUP: the lane axis (also in local_loops); each lane reduces every n-th step
    results: list[Accumulator] = field(default_factory=list)  # per output, the accumulator holding the last
    #                                                        reduce's result after `combine`
    vector_width: int = 1        # > 1: every stored value is a vector of this many lanes (a vector store)
    select_only_loads: bool = False  # some load is used only as a value a WHERE chooses (see renderer/c.py)

    @property
    def stages(self) -> list[ReduceStage]:
        """Every reduce in the order they run (empty without a reduce)."""
        if not self.accumulators:
            return []
        return self.prior_stages + [ReduceStage(self.accumulators, self.inner, self.combine, self.results)]
