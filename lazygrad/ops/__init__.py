"""The op vocabulary: every primitive lazygrad computes with, each defined once in `OPS` (by name); the
lazy graph, the kernel AST and everything below them hold the records themselves, `Ops.ADD`."""
from lazygrad.ops.table import (OPS, OpDef, Ops, ELEMENTWISE, UNARY, BINARY, TERNARY, REDUCE, MOVEMENT,
                                SOURCE, GATHER, KERNEL, reduce_identity)

__all__ = ["OPS", "OpDef", "Ops", "ELEMENTWISE", "UNARY", "BINARY", "TERNARY", "REDUCE", "MOVEMENT", "SOURCE",
           "GATHER", "KERNEL", "reduce_identity"]
