"""A one-line progress bar on stderr, for waits the user should understand (a first run compiling).

The engine opens one around each batch of compiles (realize.prepare_programs). It draws nothing
for waits shorter than `delay` seconds, and nothing at all when stderr is not a terminal or
`PROGRESS=0` (DEBUG=0 given in the environment also turns it off), so logs and pipes stay clean:

    compiling 45 kernels [##########..........] 22/45 2.1 s

`advance` may be called from worker threads (compiles finish there).
"""
from __future__ import annotations

import sys
import threading
import time

from lazygrad.knobs import knobs

BAR_WIDTH = 20


class Progress:
    def __init__(self, label: str, total: int, delay: float = 1.0):
        self.label, self.total, self.delay = label, total, delay
        self.done = 0
        self.start = time.perf_counter()
        self.shown = False
        self.enabled = knobs.progress and sys.stderr.isatty()
        self.lock = threading.Lock()

    def advance(self) -> None:
        with self.lock:
            self.done += 1
            if self.enabled and time.perf_counter() - self.start >= self.delay:
                self._draw()

    def close(self) -> None:
        """Ends the line, if a bar was drawn."""
        with self.lock:
            if self.shown:
                self._draw()
                sys.stderr.write("\n")
                sys.stderr.flush()
                self.shown = False

    def _draw(self) -> None:
        filled = BAR_WIDTH * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        elapsed = time.perf_counter() - self.start
        sys.stderr.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {elapsed:.1f} s")
        sys.stderr.flush()
        self.shown = True

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
