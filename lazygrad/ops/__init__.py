"""The op vocabulary: every primitive lazygrad computes with, each defined once in `OPS` (by name) and
reachable as an object, `Ops.ADD`, which is what the kernel AST and everything below it hold."""
from lazygrad.ops.table import (OPS, OpDef, Ops, ELEMENTWISE, UNARY, BINARY, TERNARY, REDUCE, MOVEMENT,
                                SOURCE, GATHER, KERNEL, reduce_identity)

__all__ = ["OPS", "OpDef", "Ops", "ELEMENTWISE", "UNARY", "BINARY", "TERNARY", "REDUCE", "MOVEMENT", "SOURCE",
           "GATHER", "KERNEL", "reduce_identity"]
