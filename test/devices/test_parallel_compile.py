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
from lazygrad.dtype import dtypes
from lazygrad.devices import compile_pool
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
def compiles(monkeypatch, tmp_path):
    """The successful compiler runs of the CPU device during the test (the kernels each compiled), and the
    most running at one moment; the test has a disk cache of its own."""
    compiler = get_device("CPU").compiler
    original = compiler.compile
    record = {"runs": [], "sources": [], "peak": 0, "active": 0}
    lock = threading.Lock()

    def tracked(source, extra=None):
        with lock:
            record["active"] += 1
            record["peak"] = max(record["peak"], record["active"])
        try:
            time.sleep(0.05)  # holds each compile open long enough for the next to start beside it
            binary = original(source, extra)
            record["runs"].append(max(1, source.count("#undef ")))  # runs that succeeded
            record["sources"].append(source)
            return binary
        finally:
            with lock:
                record["active"] -= 1
    monkeypatch.setattr(compiler, "compile", tracked)
    with Context(LAZYGRAD_CACHE=str(tmp_path)):
        yield record


def test_the_kernels_of_one_realize_compile_side_by_side(compiles):
    if usable_cores() < 2:
        pytest.skip("one usable core: the CPU device compiles one kernel at a time")
    results, expected = distinct_kernels(4, 1.618033)
    Tensor.realize(*results)
    assert sum(compiles["runs"]) == 4
    assert compiles["peak"] >= 2
    for result, value in zip(results, expected):
        np.testing.assert_allclose(result.numpy(), value, rtol=1e-6)


def test_the_same_kernel_twice_in_one_realize_compiles_once(compiles):
    base = np.arange(12, dtype=np.float32)
    a, b = Tensor(base), Tensor(base[::-1].copy())
    first, second = (a * 2.7182818 + 1).exp(), (b * 2.7182818 + 1).exp()
    Tensor.realize(first, second)
    assert compiles["runs"] == [1]
    np.testing.assert_allclose(second.numpy(), np.exp(base[::-1] * np.float32(2.7182818) + 1), rtol=1e-5)


def test_small_kernels_of_one_realize_compile_several_to_a_compiler_run(compiles):
    """Elementwise kernels and reduces alike share compiler runs."""
    base = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
    results = [(Tensor(base) * (2.2360679 + index)).exp() for index in range(6)]  # own inputs: 12 kernels
    results += [(Tensor(base) * (2.2360679 + index)).sum(1) for index in range(6)]
    expected = [np.exp(base * np.float32(2.2360679 + index)) for index in range(6)]
    expected += [(base * np.float32(2.2360679 + index)).sum(1) for index in range(6)]
    Tensor.realize(*results)
    assert sum(compiles["runs"]) == 12
    assert len(compiles["runs"]) < 12
    assert any(source.count("#undef ") >= 2 and "#define r_" in source for source in compiles["sources"])
    for result, value in zip(results, expected):
        np.testing.assert_allclose(result.numpy(), value, rtol=1e-5)


def test_kernels_sharing_a_name_compiled_in_one_run_each_compute_their_own(compiles, monkeypatch):
    """Elementwise kernels over 12 elements are all named E_12: a run renames each. Two compile
    workers, so the four share runs whatever the machine's core count (with 16 each got its own)."""
    monkeypatch.setattr(compile_pool, "compile_workers", lambda device: 2)
    base = np.linspace(-2, 2, 12, dtype=np.float32)
    functions = [(lambda t: (t * 1.0471975).exp(), lambda a: np.exp(a * np.float32(1.0471975))),
                 (lambda t: (t * 0.5772156).sin(), lambda a: np.sin(a * np.float32(0.5772156))),
                 (lambda t: (t + 2.4142135).sqrt(), lambda a: np.sqrt(a + np.float32(2.4142135))),
                 (lambda t: (t * 0.6931471) - 3, lambda a: a * np.float32(0.6931471) - 3)]
    results = [function(Tensor(base)) for function, _ in functions]  # own inputs: four kernels
    Tensor.realize(*results)
    assert max(compiles["runs"]) >= 2
    for result, (_, reference) in zip(results, functions):
        np.testing.assert_allclose(result.numpy(), reference(base), rtol=1e-6)


SEVERAL_KERNELS = """
import numpy as np
from lazygrad import Tensor, stats
base = np.arange(24, dtype=np.float32).reshape(4, 6)
results = [(Tensor(base) * (0.3183098 + index)).sum(1) for index in range(4)]
results += [(Tensor(base) * (0.3183098 + index)).exp() for index in range(4)]
Tensor.realize(*results)
for index, result in enumerate(results[:4]):
    np.testing.assert_allclose(result.numpy(), (base * np.float32(0.3183098 + index)).sum(1), rtol=1e-6)
for index, result in enumerate(results[4:]):
    np.testing.assert_allclose(result.numpy(), np.exp(base * np.float32(0.3183098 + index)), rtol=1e-5)
print(stats.compiles, stats.cache_hits)
"""


def test_kernels_compiled_in_one_run_are_each_found_in_the_cache_by_the_next_process(tmp_path):
    env = {**os.environ, "LAZYGRAD_CACHE": str(tmp_path), "PYTHONPATH": str(REPO)}
    env.pop("DISABLE_CACHE", None)
    counts = []
    for _ in range(2):
        result = subprocess.run([sys.executable, "-c", SEVERAL_KERNELS], env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr
        counts.append(tuple(int(word) for word in result.stdout.split()))
    assert counts == [(8, 0), (0, 8)]


def test_a_run_that_fails_compiles_its_kernels_alone_and_only_the_broken_one_fails():
    from lazygrad.devices.compile_pool import CompileBatch
    from lazygrad.devices.cpu import CompileError
    device = get_device("CPU")
    good = [(f"lg_batch_probe_{index}", f"void lg_batch_probe_{index}(float* restrict out) {{ out[0] = {index}.5f; }}\n")
            for index in range(3)]
    broken = ("lg_batch_broken", "void lg_batch_broken(float* restrict out) { out[0] = not_declared; }\n")
    with Context(DISABLE_CACHE=1):
        batch = CompileBatch(device)
        futures = [batch.submit(name, source) for name, source in good + [broken]]
        batch.close()
        with pytest.raises(CompileError, match="not_declared"):
            futures[-1].result(timeout=120)
        alone = CompileBatch(device)
        broken_alone = alone.submit(*broken)
        alone.close()
        with pytest.raises(CompileError, match="not_declared"):
            broken_alone.result(timeout=120)
        for (name, _), future in zip(good, futures):
            program = device.load(name, future.result(timeout=120), 1)
            out = device.alloc(dtypes.float32, 1)
            program(out)
            assert out.numpy()[0] == float(name[-1]) + 0.5


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
    with Context(PROGRESS=1), Progress("compiling 3 kernels", 3, delay=0.0) as progress:  # whatever the environment says
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


def test_kernels_compiled_in_one_run_share_one_loaded_library(monkeypatch, tmp_path):
    """compile_together's kernels lie in one library: loaded once for all of them (from the disk
    cache a process loads every kernel's binary apart), and unloaded once, after the last of them."""
    import ctypes
    import gc

    from lazygrad.devices import cpu
    device = get_device("CPU")
    source = ("void {name}(float* restrict data0, const float* restrict data1) "
              "{{ for (long i = 0; i < 4; i++) data0[i] = data1[i] * {factor}.0f; }}")
    kernels = [(f"scale_{index}", source.format(name=f"scale_{index}", factor=index + 2)) for index in range(3)]
    opened, unloaded, load = [], [], ctypes.CDLL
    monkeypatch.setattr(cpu, "_unload", unloaded.append)
    monkeypatch.setattr(ctypes, "CDLL", lambda path, *args, **kwargs: opened.append(path) or load(path, *args, **kwargs))
    with Context(LAZYGRAD_CACHE=str(tmp_path)):
        binaries = device.compile_together(kernels)
    programs = [device.load(name, bytes(binary), 2) for (name, _), binary in zip(kernels, binaries)]
    assert len([path for path in opened if os.path.basename(path).startswith(cpu.work_prefix())]) == 1
    for index, program in enumerate(programs):
        out, x = device.alloc(dtypes.float32, 4), device.alloc(dtypes.float32, 4).copyin(np.arange(4, dtype=np.float32))
        program(out, x)
        np.testing.assert_array_equal(out.array, np.arange(4, dtype=np.float32) * (index + 2))
    del programs[:2]
    gc.collect()
    assert unloaded == []  # the last program still calls into the library
    del programs, program
    gc.collect()
    assert len(unloaded) == 1
