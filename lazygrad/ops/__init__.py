"""The op vocabulary: every primitive lazygrad computes with, each defined once in `OPS`."""
from lazygrad.ops.table import (OPS, OpDef, ELEMENTWISE, UNARY, BINARY, TERNARY, REDUCE, MOVEMENT,
                                SOURCE, GATHER, reduce_identity)

__all__ = ["OPS", "OpDef", "ELEMENTWISE", "UNARY", "BINARY", "TERNARY", "REDUCE", "MOVEMENT", "SOURCE", "GATHER",
           "reduce_identity"]
