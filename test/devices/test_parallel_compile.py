"""A realize compiles every kernel it lacks before running any, side by side on the compile threads,
each distinct kernel once, and says so on a terminal (progress bar) and with DEBUG=1."""
import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from lazygrad import Context, Tensor
from lazygrad.devices import get_device
from lazygrad.devices.compile_pool import usable_cores
from lazygrad.progress import Progress

REPO = Path(__file__).resolve().parents[2]


def distinct_kernels(count: int, salt: float):
    """`count` lazy results whose kernels differ (each its own constant) and their numpy values;
    each reads its own input, so the scheduler does not merge them into one kernel."""
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    results = [(Tensor(base) * (salt + index)).sum(1) for index in range(count)]
    expected = [(base * np.float32(salt + index)).sum(1) for index in range(count)]
    return results, expected


@pytest.fixture
def compiles(monkeypatch):
    """Sources the CPU device compiles during the test, and the most compiling at one moment."""
    device = get_device("CPU")
    original = device.compile_cached
    record = {"sources": [], "peak": 0, "active": 0}
    lock = threading.Lock()

    def tracked(source):
        with lock:
            record["sources"].append(source)
            record["active"] += 1
            record["peak"] = max(record["peak"], record["active"])
        try:
            time.sleep(0.05)  # holds each compile open long enough for the next to start beside it
            return original(source)
        finally:
            with lock:
                record["active"] -= 1
    monkeypatch.setattr(device, "compile_cached", tracked)
    return record


def test_the_kernels_of_one_realize_compile_side_by_side(compiles):
    if usable_cores() < 2:
        pytest.skip("one usable core: the CPU device compiles one kernel at a time")
    results, expected = distinct_kernels(4, 1.618033)
    Tensor.realize(*results)
    assert len(compiles["sources"]) == 4
    assert compiles["peak"] >= 2
    for result, value in zip(results, expected):
        np.testing.assert_allclose(result.numpy(), value, rtol=1e-6)


def test_the_same_kernel_twice_in_one_realize_compiles_once(compiles):
    base = np.arange(12, dtype=np.float32)
    a, b = Tensor(base), Tensor(base[::-1].copy())
    first, second = (a * 2.7182818 + 1).exp(), (b * 2.7182818 + 1).exp()
    Tensor.realize(first, second)
    assert len(compiles["sources"]) == 1
    np.testing.assert_allclose(second.numpy(), np.exp(base[::-1] * np.float32(2.7182818) + 1), rtol=1e-5)


def test_debug_1_says_how_long_preparing_took(capfd):
    results, _ = distinct_kernels(2, 3.14159)
    with Context(DEBUG=1):
        Tensor.realize(*results)
    assert "prepared 2 program(s) for CPU in" in capfd.readouterr().err


class FakeTerminal(io.StringIO):
    def __init__(self, terminal: bool):
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


def test_the_progress_bar_draws_on_a_terminal_after_its_delay(monkeypatch):
    stream = FakeTerminal(True)
    monkeypatch.setattr("sys.stderr", stream)
    with Progress("compiling 3 kernels", 3, delay=0.0) as progress:
        for _ in range(3):
            progress.advance()
    text = stream.getvalue()
    assert "\rcompiling 3 kernels [" in text and "3/3" in text and text.endswith("\n")


@pytest.mark.parametrize("terminal, setting, delay", [(False, 1, 0.0), (True, 0, 0.0), (True, 1, 60.0)])
def test_the_progress_bar_stays_silent_off_a_terminal_when_turned_off_or_quick(monkeypatch, terminal, setting, delay):
    stream = FakeTerminal(terminal)
    monkeypatch.setattr("sys.stderr", stream)
    with Context(PROGRESS=setting):
        with Progress("compiling 2 kernels", 2, delay=delay) as progress:
            progress.advance()
            progress.advance()
    assert stream.getvalue() == ""


def test_past_its_bound_the_engine_forgets_the_least_recently_used_program_and_unloads_it(monkeypatch):
    import gc

    from lazygrad import realize
    from lazygrad.devices import cpu
    gc.collect()  # programs earlier tests dropped go first, unrecorded
    unloaded = []
    monkeypatch.setattr(cpu, "_unload", unloaded.append)
    monkeypatch.setattr(realize, "_PROGRAMS", {})
    monkeypatch.setattr(realize, "LOADED_PROGRAMS", 3)
    for salt in (0.1357, 0.2468, 0.3579, 0.4680, 0.5791):
        results, expected = distinct_kernels(1, salt)
        np.testing.assert_allclose(results[0].numpy(), expected[0], rtol=1e-6)
    assert len(realize._PROGRAMS) == 3
    del results
    gc.collect()
    assert len(unloaded) == 2  # the two forgotten programs, once nothing held them
    results, expected = distinct_kernels(1, 0.1357)  # the first again: loaded anew, still right
    np.testing.assert_allclose(results[0].numpy(), expected[0], rtol=1e-6)


UNLOAD_EVERY_PROGRAM = """
import gc, os, sys
import numpy as np
from lazygrad import Tensor, realize
x = Tensor(np.ones((512, 1024), np.float32))
assert (x * 3 + 1).numpy().min() == 4  # big enough for an OpenMP parallel loop
def runtime_mapped():
    with open("/proc/self/maps") as maps:
        return any(name in maps.read() for name in ("libgomp", "libomp", "libiomp"))
print(runtime_mapped())
realize._PROGRAMS.clear()
gc.collect()  # every kernel library unloaded
print(runtime_mapped())
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps (Linux only)")
def test_unloading_every_kernel_keeps_the_openmp_runtime_mapped(tmp_path):
    """The OpenMP runtime's idle worker threads outlive the kernels: unmapped with the last kernel
    that used it, the process segfaulted later at a random point."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "LAZYGRAD_CACHE": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", UNLOAD_EVERY_PROGRAM], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    loaded, still_loaded = result.stdout.split()
    if loaded == "False":
        pytest.skip("this C compiler builds kernels without OpenMP (one thread): no runtime to keep")
    assert still_loaded == "True"
