"""Per-op overhead and small training steps: eager against jitted, against numpy and torch.

    python extra/bench/bench_overhead.py            # everything
    python extra/bench/bench_overhead.py --quick    # fewer repeats

Prints, for `y = x + 1` on 16 elements, microseconds per realized op (eager) and per replayed call
(jit), and for one Adam training step of two MLPs, milliseconds per step eager and jitted, next to
PyTorch CPU eager when torch is installed. Medians and minimums of the repeats.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # lazygrad from the checkout

from lazygrad import Tensor  # noqa: E402
from lazygrad.jit import jit  # noqa: E402
from lazygrad.nn import Linear, ReLU, Sequential, functional as F  # noqa: E402
from lazygrad.nn.optim import Adam  # noqa: E402
from lazygrad.nn.state import get_parameters  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


def median_seconds(function, repeats: int, inner: int = 1) -> tuple[float, float]:
    """(median, minimum) over `repeats` of the time per call of `inner` back-to-back calls. Both,
    because a shared VM's speed drifts: the minimum is the least disturbed measurement."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            function()
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times), min(times)


def bench_add(repeats: int) -> None:
    x_np = np.ones(16, np.float32)
    x = Tensor(x_np)

    @jit
    def add_one(value):
        return value + 1
    for _ in range(3):
        add_one(x)
    rows = [("numpy", median_seconds(lambda: x_np + 1, repeats, 1000)),
            ("lazygrad eager", median_seconds(lambda: (x + 1).realize(), repeats, 1000)),
            ("lazygrad jit (1 kernel)", median_seconds(lambda: add_one(x), repeats, 1000))]
    if torch is not None:
        x_torch = torch.ones(16)
        rows.append(("torch eager", median_seconds(lambda: x_torch + 1, repeats, 1000)))
    print("y = x + 1 on 16 float32 elements, 1,000 calls (median, min)")
    for name, (median, minimum) in rows:
        print(f"  {name:<26} {median * 1e6:9.1f} us per call {minimum * 1e6:9.1f} us")


def lazygrad_step(sizes: tuple[int, ...], batch: int, use_jit: bool):
    layers = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        layers += [Linear(fan_in, fan_out), ReLU()]
    model = Sequential(*layers[:-1])
    optimizer = Adam(get_parameters(model), lr=1e-3)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((batch, sizes[0])).astype(np.float32))
    y = Tensor(rng.integers(0, sizes[-1], batch))

    def step(inputs, labels):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        return loss
    step = jit(step) if use_jit else step
    return lambda: step(x, y).item()


def torch_step(sizes: tuple[int, ...], batch: int):
    layers = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch, sizes[0])
    y = torch.randint(0, sizes[-1], (batch,))

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def bench_training(repeats: int) -> None:
    for sizes, batch in (((64, 128, 10), 128), ((784, 512, 512, 10), 256)):
        print(f"Adam step, MLP {'-'.join(map(str, sizes))}, batch {batch}")
        rows = []
        for name, use_jit in (("lazygrad eager", False), ("lazygrad jit", True)):
            step = lazygrad_step(sizes, batch, use_jit)
            for _ in range(3):
                step()
            rows.append((name, median_seconds(step, repeats)))
        if torch is not None:
            step = torch_step(sizes, batch)
            for _ in range(3):
                step()
            rows.append(("torch eager", median_seconds(step, repeats)))
        for name, (median, minimum) in rows:
            print(f"  {name:<26} {median * 1e3:9.2f} ms per step {minimum * 1e3:9.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else 7
    if torch is None:
        print("torch is not installed: no torch column (pip install torch==2.13.0 adds it)")
    else:
        torch.set_num_threads(2)
    bench_add(repeats)
    bench_training(repeats * 3)


if __name__ == "__main__":
    main()
