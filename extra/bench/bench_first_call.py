"""First calls: how long a model's first call takes in a new process, with an empty disk cache
(everything compiles) and with the cache the first run left (nothing compiles), against a warm call.

    python extra/bench/bench_first_call.py                        # every case, 3 rounds
    python extra/bench/bench_first_call.py --only mobilenet_v2 --rounds 1 --threads 2

Cases (lazygrad.nn models of extra/models/, random weights, float32; inference in eval mode under
lazygrad.no_grad())
  resnet18      ResNet-18 on 1x3x224x224
  mobilenet_v2  MobileNetV2 on 1x3x224x224
  bert          the BERT encoder of MiniLM-L6's size on 8x128 token ids (the model benchmark's)
  train_mobilenet_v2  one SGD step (momentum 0.9) of MobileNetV2 in training mode, 16x3x112x112,
                cross entropy over 1000 classes (bench_models.py's `train mbv2`), eagerly
  train_resnet18      the same for ResNet-18 on 16x3x224x224 (`train r18`)

Each round runs every case twice in a fresh Python process: once with an empty LAZYGRAD_CACHE
("cold"), then once more on the cache that run filled ("cached"). A process times building the
model, its first call (graph, schedule, render, compile or cache load, run) and the median of three
further calls ("warm"). Reported: medians over the rounds, "cached - warm" (what a first call with a
filled cache adds), and the compiles of the cold run. The cases run one after another, never side
by side; the machine's load (uptime) is printed first, since a busy machine slows compiles most.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CASES = ("resnet18", "mobilenet_v2", "bert", "train_mobilenet_v2", "train_resnet18")


def build_case(name: str):
    """(model call returning a Tensor) for a case, built with lazygrad.nn."""
    import numpy as np

    import lazygrad.nn as nn
    from lazygrad import Tensor
    from extra.models.bert import bert_mini_lm
    from extra.models.mobilenet import mobilenet_v2
    from extra.models.resnet import resnet18
    rng = np.random.default_rng(0)
    if name.startswith("train_"):
        return training_step(name[len("train_"):], rng)
    if name == "bert":
        model = bert_mini_lm(nn).train(False)
        lengths = rng.integers(32, 129, 8)
        mask = (np.arange(128)[None, :] < lengths[:, None]).astype(np.int64)
        ids = Tensor(rng.integers(1000, 30000, (8, 128)) * mask)
        attention = Tensor(mask)
        return lambda: model(ids, attention)
    model = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}[name](nn).train(False)
    images = Tensor(rng.standard_normal((1, 3, 224, 224), dtype=np.float32))
    return lambda: model(images)


def training_step(name: str, rng):
    """One eager training step of a model (a call returning its loss), as bench_models.py times it."""
    import numpy as np

    import lazygrad.nn as nn
    from lazygrad import Tensor
    from lazygrad.nn.optim import SGD
    from lazygrad.nn.state import get_parameters
    from extra.models.mobilenet import mobilenet_v2
    from extra.models.resnet import resnet18
    model = mobilenet_v2(nn, dropout=0.0) if name == "mobilenet_v2" else resnet18(nn)
    size = 112 if name == "mobilenet_v2" else 224
    images = Tensor(rng.standard_normal((16, 3, size, size), dtype=np.float32))
    labels = Tensor(rng.integers(0, 1000, 16))
    optimizer = SGD(get_parameters(model), lr=0.01, momentum=0.9)

    def step():
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss
    return step


def child(name: str) -> None:
    """Runs in the fresh process: prints the timings as JSON. Inference as a user runs it, under
    no_grad (no graph is kept for a backward pass); a training step with gradients."""
    sys.path.insert(0, str(REPO))
    import lazygrad
    from lazygrad import stats
    start = time.perf_counter()
    call = build_case(name)
    built = time.perf_counter() - start
    with lazygrad.no_grad() if not name.startswith("train_") else contextlib.nullcontext():
        start = time.perf_counter()
        call().realize()
        first = time.perf_counter() - start
        compiles = stats.compiles
        warm = []
        for _ in range(3):
            start = time.perf_counter()
            call().realize()
            warm.append(time.perf_counter() - start)
    print(json.dumps({"build": built, "first": first, "warm": statistics.median(warm), "compiles": compiles}))


def run_child(name: str, cache_dir: str, threads: int | None) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in ("DISABLE_CACHE", "DEBUG")}
    env.update({"LAZYGRAD_CACHE": cache_dir, "PYTHONPATH": str(REPO), "PROGRESS": "0"})
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    result = subprocess.run([sys.executable, __file__, "--child", name], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the runs (default: unset)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in names if name not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; cases are {', '.join(CASES)}")
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}, "
          f"{os.cpu_count()} cores, threads {args.threads or 'unset'}")
    results = {name: {"cold": [], "cached": []} for name in names}
    for _ in range(args.rounds):
        for name in names:
            with tempfile.TemporaryDirectory(prefix="lazygrad-first-call-") as cache_dir:
                results[name]["cold"].append(run_child(name, cache_dir, args.threads))
                results[name]["cached"].append(run_child(name, cache_dir, args.threads))
    print(f"{'case':<20}{'cold first':>12}{'cached first':>14}{'warm':>10}{'cached - warm':>15}{'compiles':>10}{'build':>8}")
    for name, runs in results.items():
        def median(kind: str, field: str) -> float:
            return statistics.median(run[field] for run in runs[kind])
        cold, cached, warm = median("cold", "first"), median("cached", "first"), median("cached", "warm")
        print(f"{name:<20}{cold:>10.2f} s{cached:>12.2f} s{warm * 1e3:>7.0f} ms{(cached - warm) * 1e3:>12.0f} ms"
              f"{int(median('cold', 'compiles')):>10}{median('cold', 'build'):>7.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
