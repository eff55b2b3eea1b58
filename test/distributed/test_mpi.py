"""lazygrad.distributed in real MPI jobs: each test launches `mpiexec -n 2` on mpi_cases.py (or the
digits demo) and reads what every rank printed. Skipped, with the reason, where mpi4py or mpiexec is
missing (`pip install 'lazygrad[mpi]'` brings both; `make test` installs them)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "ops"))

from ops_helpers import available_devices, device_params  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).resolve().parent / "mpi_cases.py"
RANKS = 2


def _mpiexec() -> str | None:
    """The mpiexec beside this Python (the mpich wheel's), else one on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def _missing() -> str | None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install 'lazygrad[mpi]')"
    if _mpiexec() is None:
        return "no mpiexec beside this Python or on PATH (pip install mpich)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


def run_job(*arguments: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """`mpiexec -n RANKS python ARGUMENTS`, from the repository root; stdout and stderr together."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run([_mpiexec(), "-n", str(RANKS), sys.executable, *arguments], cwd=ROOT, env=environment,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)


def assert_every_rank_passed(result: subprocess.CompletedProcess, case: str) -> None:
    passed = set(re.findall(rf"ok {case} rank (\d+)", result.stdout))  # the ranks' lines may interleave
    assert result.returncode == 0 and len(passed) == RANKS, result.stdout[-4000:]


@pytest.mark.parametrize("device", device_params(available_devices()))
@pytest.mark.parametrize("case", ["collectives", "errors", "data_parallel"])
def test_case_passes_on_every_rank(case, device):
    """Collectives on every dtype and on 0-d, empty and transposed tensors against numpy; errors that
    name the ranks; DistributedDataParallel under the jit against one process on the whole batch."""
    assert_every_rank_passed(run_job(str(CASES), case, device), case)


@pytest.mark.parametrize("case, says", [
    ("timeout", "DistributedTimeout: all_reduce"),    # rank 1 hangs: rank 0 stops after CASE_TIMEOUT
    ("raises", "rank 1 failed on purpose"),           # rank 1's exception ends the job at once
    ("dies", "signal 9"),                             # rank 1 is killed: mpiexec ends the job
])
def test_a_rank_that_fails_stops_the_job(case, says):
    started = time.monotonic()
    result = run_job(str(CASES), case, "CPU", timeout=120, env={"CASE_TIMEOUT": "3"})
    assert result.returncode != 0 and says in result.stdout, f"exit status {result.returncode}:\n{result.stdout[-4000:]}"
    assert not re.search(r"ok \w+ rank \d", result.stdout)
    assert time.monotonic() - started < 60, "the job should stop within seconds of the failure, not hang"


def test_digits_demo_trains_data_parallel(tmp_path):
    """`mpiexec -n 2 python extra/train_digits.py --ddp`: the demo's accuracy, the same parameters on
    both ranks, a checkpoint that reloads."""
    result = run_job("extra/train_digits.py", "--ddp", "--out", str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stdout[-4000:]
    assert "2 ranks: parameters identical on every rank" in result.stdout
    assert (tmp_path / "train_digits.safetensors").exists()


def test_a_world_of_one_without_mpiexec():
    """Without mpiexec the program is rank 0 of 1 and every collective returns its input."""
    program = ("import lazygrad.distributed as dist; from lazygrad import Tensor; dist.init();"
               "t = dist.all_reduce(Tensor([1.5, 2.0]), 'mean');"
               "print(dist.rank(), dist.world_size(), t.numpy().tolist(), dist.all_gather(Tensor([3])).numpy().tolist())")
    result = subprocess.run([sys.executable, "-c", program], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "0 1 [1.5, 2.0] [[3]]", result.stdout + result.stderr
