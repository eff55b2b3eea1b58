"""Data-parallel training steps per second at 1 and more MPI ranks, and their communication time.

    python extra/bench/bench_ddp.py                        # 1 and 2 ranks, both models
    python extra/bench/bench_ddp.py --ranks 1,2 --steps 20 --only digits

Each rank count runs as its own job, `mpiexec -n R` on this script with `--worker`, every rank
taking cores / R OpenMP threads. Each model trains with lazygrad.distributed's
DistributedDataParallel around a jitted step (forward, backward with the gradients averaged over
the ranks, Adam) on a fixed global batch that the ranks split; at 1 rank the same code runs
(DistributedDataParallel in a world of one, no messages). Reported per model and rank count: the
median step time over the timed steps, steps per second, the speedup over 1 rank, and the time the
step spent in collectives (lazygrad.stats.host_seconds: the all-reduces of the gradient buckets and
of the loss, waiting for the slower rank included).

Models: the digits demo's CNN (batch 32 of 8x8 images, 0.03 M parameters) and ResNet-18 (batch 32
of 3x32x32 images, 11.7 M parameters: 47 MB of gradients a step). Needs the `mpi` extra.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))           # lazygrad from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))           # extra/, for the models

MODELS = {
    # name: (description, global batch, input shape of one image)
    "digits": ("digits CNN", 32, (1, 8, 8)),
    "resnet18": ("ResNet-18 32x32", 32, (3, 32, 32)),
}


def build(name: str):
    import lazygrad.nn
    if name == "digits":
        from train_digits import build_model
        return build_model(8)
    from models.resnet import resnet18
    return resnet18(lazygrad.nn, num_classes=10)


def worker(name: str, steps: int, warmup: int) -> None:
    """One rank of the job: time `steps` jitted data-parallel steps after `warmup` untimed ones."""
    import lazygrad
    import lazygrad.distributed as dist
    import lazygrad.nn.functional as F
    from lazygrad import Tensor, stats
    from lazygrad.jit import jit
    from lazygrad.nn.optim import Adam
    from lazygrad.nn.state import get_parameters
    dist.init()
    rank, ranks = dist.rank(), dist.world_size()
    _, batch, image = MODELS[name]
    lazygrad.manual_seed(0)
    model = build(name)
    parallel = dist.DistributedDataParallel(model)
    optimizer = Adam(get_parameters(model), lr=1e-3)

    @jit
    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(parallel(x), y)
        loss.backward()
        optimizer.step()
        return dist.all_reduce(loss, "mean")
    rng = np.random.default_rng(0)
    images = rng.standard_normal((batch,) + image).astype(np.float32)
    labels = rng.integers(0, 10, batch)
    x, y = Tensor(images[rank::ranks]), Tensor(labels[rank::ranks])
    times, communication = [], []
    for number in range(warmup + steps):
        stats.reset()
        start = time.perf_counter()
        step(x, y).item()
        if number >= warmup:
            times.append(time.perf_counter() - start)
            communication.append(stats.host_seconds)
    if rank == 0:
        print(json.dumps({"step": statistics.median(times), "communication": statistics.median(communication),
                          "threads": os.environ.get("OMP_NUM_THREADS"), "buckets": len(parallel.buckets)}))


def run_job(name: str, ranks: int, steps: int, warmup: int) -> dict:
    mpiexec = Path(sys.executable).parent / "mpiexec"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    environment = dict(os.environ, OMP_NUM_THREADS=str(max(1, cores // ranks)))
    command = [str(mpiexec) if mpiexec.exists() else "mpiexec", "-n", str(ranks), sys.executable, __file__,
               "--worker", name, "--steps", str(steps), "--warmup", str(warmup)]
    result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="1,2", help="rank counts, e.g. 1,2")
    parser.add_argument("--only", default=",".join(MODELS), help=f"models, from {','.join(MODELS)}")
    parser.add_argument("--steps", type=int, default=20, help="timed steps (the median is reported)")
    parser.add_argument("--warmup", type=int, default=4, help="untimed steps first (compiles, jit capture)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.warmup)
        return 0
    print(f"{'model':<18} {'ranks':>5} {'threads/rank':>12} {'step ms':>9} {'steps/s':>8} {'speedup':>8} "
          f"{'comm ms':>8} {'comm %':>7}")
    for name in args.only.split(","):
        first = None
        for ranks in (int(count) for count in args.ranks.split(",")):
            measured = run_job(name, ranks, args.steps, args.warmup)
            first = first or measured["step"]
            print(f"{MODELS[name][0]:<18} {ranks:>5} {measured['threads']:>12} {measured['step'] * 1e3:>9.2f} "
                  f"{1 / measured['step']:>8.1f} {first / measured['step']:>8.2f} "
                  f"{measured['communication'] * 1e3:>8.2f} {100 * measured['communication'] / measured['step']:>6.1f}%",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
