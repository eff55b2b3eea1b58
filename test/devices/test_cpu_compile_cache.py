"""The CPU device's compiled kernels go through the disk cache, which survives processes and damage."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lazygrad import Context, Tensor, stats

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
