"""The CPU device's compiled kernels go through the disk cache, which survives processes and damage."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lazygrad import Context, Tensor, stats
from lazygrad.devices import get_device

REPO = Path(__file__).resolve().parents[2]

# A kernel no other test builds (the odd constant keeps its source unique).
PROGRAM = """
import sys
import numpy as np
from lazygrad import Tensor, stats
x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
value = ((x * 1.2345678 + 0.5).sum(1)).numpy()
np.testing.assert_allclose(value, (np.arange(12, dtype=np.float32).reshape(3, 4) * 1.2345678 + 0.5).sum(1), rtol=1e-6)
print(stats.compiles, stats.cache_hits)
"""


def run_program(cache_dir: Path, extra_env=None) -> tuple[int, int]:
    env = {key: value for key, value in os.environ.items() if key != "DISABLE_CACHE"}
    env.update({"LAZYGRAD_CACHE": str(cache_dir), "PYTHONPATH": str(REPO), **(extra_env or {})})
    result = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    compiles, hits = result.stdout.split()
    return int(compiles), int(hits)


def cache_entries(cache_dir: Path) -> list[Path]:
    return [path for path in (cache_dir / "compile_cpu").rglob("*") if path.is_file()]


def test_a_second_process_takes_the_binary_from_the_cache(tmp_path):
    assert run_program(tmp_path) == (1, 0)
    assert run_program(tmp_path) == (0, 1)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_entry_is_recompiled(tmp_path, damage):
    run_program(tmp_path)
    (entry,) = cache_entries(tmp_path)
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2] if damage == "truncate" else os.urandom(len(data)))
    assert run_program(tmp_path) == (1, 0)
    assert run_program(tmp_path) == (0, 1)


def test_two_processes_compiling_the_same_kernel_at_once_both_succeed(tmp_path):
    env = {**os.environ, "LAZYGRAD_CACHE": str(tmp_path), "PYTHONPATH": str(REPO)}
    processes = [subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    assert run_program(tmp_path) == (0, 1)


def test_an_unwritable_cache_warns_once_and_still_computes(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory should be")
    env = {**os.environ, "LAZYGRAD_CACHE": str(blocker / "cache"), "PYTHONPATH": str(REPO)}
    program = PROGRAM + "\ny = (Tensor([1.0, 2.0]) * 3.25).numpy()\n"
    result = subprocess.run([sys.executable, "-W", "always", "-c", program], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("RuntimeWarning") == 1


def test_disable_cache_compiles_every_process(tmp_path):
    assert run_program(tmp_path, {"DISABLE_CACHE": "1"}) == (1, 0)
    assert run_program(tmp_path, {"DISABLE_CACHE": "1"}) == (1, 0)
    assert not (tmp_path / "compile_cpu").exists()


def test_a_missing_compiler_says_what_to_install():
    with Context(CC="/nonexistent/cc-lazygrad", DISABLE_CACHE=1):
        with pytest.raises(RuntimeError, match="no C compiler found.*install one.*CC="):
            (Tensor([1.0, 2.0]) * 7.123).numpy()


def test_the_same_kernel_is_compiled_once_per_process(tmp_path):
    with Context(LAZYGRAD_CACHE=str(tmp_path)):
        stats.reset()
        x = Tensor(np.ones(5, dtype=np.float32))
        for _ in range(3):
            (x * 9.87654).numpy()
        assert stats.compiles + stats.cache_hits == 1
        assert stats.kernels == 3


def test_an_entry_with_a_sound_checksum_that_does_not_load_is_compiled_again(tmp_path):
    from lazygrad.diskcache import _encode_entry
    run_program(tmp_path)
    (entry,) = cache_entries(tmp_path)
    entry.write_bytes(_encode_entry(b"\x7fELF but not a library"))
    assert run_program(tmp_path) == (1, 1)  # read from the cache, failed to load, compiled
    assert run_program(tmp_path) == (0, 1)  # the entry was replaced by a good one


def test_the_native_target_is_part_of_the_key(tmp_path, monkeypatch):
    device = get_device("CPU")
    source = "void lg_target_probe(float* restrict out) { out[0] = 2.5f; }\n"
    with Context(LAZYGRAD_CACHE=str(tmp_path)):
        assert "march" in device.compiler.native_target or device.compiler.native_target
        stats.reset()
        device.compile_cached(source)
        device.compile_cached(source)
        assert (stats.compiles, stats.cache_hits) == (1, 1)
        monkeypatch.setattr(device.compiler, "native_target", "-march=some-other-cpu")
        device.compile_cached(source)
        assert stats.compiles == 2


def fake_compiler(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-cc"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return str(script)


def compile_with(compiler: str, tmp_path: Path):
    from lazygrad.devices.cpu import Compiler
    return Compiler(compiler).compile("void lg_probe(float* restrict out) { out[0] = 1.0f; }\n")


def test_a_compiler_that_succeeds_without_writing_a_library_is_an_error(tmp_path):
    from lazygrad.devices.cpu import CompileError
    compiler = fake_compiler(tmp_path, 'cat > /dev/null; for last; do :; done\n'
                                       'case "$last" in *.so) echo garbage > "$last";; esac; exit 0\n')
    with pytest.raises(CompileError, match="wrote no shared library"):
        compile_with(compiler, tmp_path)


def test_a_hung_compiler_is_stopped(tmp_path, monkeypatch):
    import lazygrad.devices.cpu as cpu
    monkeypatch.setattr(cpu, "COMPILE_TIMEOUT", 1)
    compiler = fake_compiler(tmp_path, 'case "$1" in --version) echo fake-cc 1.0; exit 0;; esac\nexec sleep 30\n')
    with pytest.raises(cpu.CompileError, match="did not finish compiling a kernel in 1 s"):
        compile_with(compiler, tmp_path)


def test_a_compiler_that_hangs_when_asked_its_version_is_stopped(tmp_path, monkeypatch):
    import lazygrad.devices.cpu as cpu
    monkeypatch.setattr(cpu, "COMPILE_TIMEOUT", 1)
    compiler = fake_compiler(tmp_path, "exec sleep 30\n")
    with pytest.raises(cpu.CompileError, match="did not answer --version in 1 s"):
        compile_with(compiler, tmp_path)


def test_a_compiler_without_openmp_falls_back_to_one_thread(tmp_path):
    import shutil
    real = shutil.which("gcc") or shutil.which("cc")
    if real is None:
        pytest.skip("no gcc or cc to stand behind the fake compiler")
    compiler = fake_compiler(tmp_path, 'for arg; do [ "$arg" = -fopenmp ] && '
                                       '{ echo "clang: error: unsupported option \'-fopenmp\'" >&2; exit 1; }; done\n'
                                       f'exec {real} "$@"\n')
    assert compile_with(compiler, tmp_path).startswith(b"\x7fELF")


def test_files_left_by_a_killed_compile_are_removed_by_the_next_process(tmp_path):
    from lazygrad.devices.cpu import remove_orphaned_work_files
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid now names no process (reused only after the pid counter wraps)
    orphan_folder = tmp_path / f"lazygrad-{dead.pid}-abc123"
    orphan_folder.mkdir()
    (orphan_folder / "kernel.so").write_bytes(b"half written")
    orphan_file = tmp_path / f"lazygrad-{dead.pid}-xyz.so"
    orphan_file.write_bytes(b"")
    ours = tmp_path / f"lazygrad-{os.getpid()}-live"
    ours.mkdir()
    unrelated = tmp_path / "lazygrad-notapid-x"
    unrelated.mkdir()
    remove_orphaned_work_files(str(tmp_path))
    assert not orphan_folder.exists() and not orphan_file.exists()
    assert ours.exists() and unrelated.exists()
