"""`shallow_stack()`: runs a block with Python's recursion limit cut to just above the current stack
depth, for tests that pin that a walk over a deep graph keeps no frame per node (code recursing once
per node of a 10,000-node chain needs about 10,000 frames; with this, a few hundred raise)."""
import contextlib
import sys

HEADROOM = 200  # frames the code under test may nest (realize -> schedule -> compile -> subprocess ...)


def stack_depth() -> int:
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


@contextlib.contextmanager
def shallow_stack(headroom: int = HEADROOM):
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(stack_depth() + headroom)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)
