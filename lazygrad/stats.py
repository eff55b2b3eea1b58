"""Counters of the work lazygrad did: kernels launched, FLOPs, bytes moved, compiles, cache hits.

Foundation layer. The engine and the devices add to the one shared `stats` object
(`stats.kernels += 1`); users and tests read it, and `stats.reset()` starts counting afresh:

    stats.reset()
    loss.backward()
    print(stats)    # Stats(kernels=5, flops=..., bytes=..., compiles=2, cache_hits=3)
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(slots=True)
class Stats:
    """Running totals since the last reset(); plain attributes, cheap to update."""
    kernels: int = 0        # kernels launched
    flops: int = 0          # floating-point (and integer) operations those kernels performed
    bytes: int = 0          # memory traffic of those kernels: bytes read plus bytes written
    compiles: int = 0       # compiler invocations (kernels not found in the disk cache)
    cache_hits: int = 0     # compiled binaries taken from the disk cache instead of compiling
    host_steps: int = 0     # steps run on the host between kernels (lazygrad.distributed's collectives)
    host_seconds: float = 0.0  # time those steps took (a collective's: its communication and waiting)

    def reset(self) -> None:
        """Sets every counter back to zero."""
        for field in fields(self):
            setattr(self, field.name, field.default)


stats = Stats()
