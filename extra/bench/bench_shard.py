"""A jitted training step on one device against the same step with its batch split over several
(Tensor.shard in one process), alternating the two, and what the split costs in copies.

    python extra/bench/bench_shard.py                          # CPU against CPU,CPU:1, both models
    python extra/bench/bench_shard.py --devices CPU,OPENCL --only digits --steps 10

Each model trains with SGD (momentum 0.9) on a fixed batch; the sharded step replicates every parameter and
buffer (`shard_`) and splits the batch along its first axis, so its gradients are all-reduced over
the devices inside the captured step. Reported per model: the median step time of each side over
rounds that alternate them, their ratio, the largest parameter difference after the same steps,
and the copies a sharded step makes (count and bytes, read from
the DEBUG=2 lines of one plain call). On one host the devices share its cores and run in turn, so
the split adds copies and launches without adding compute: this measures the overhead that a
split over real devices would pay for its communication, not a speedup.

The two sides compute the same step but add in another order, so they differ by float32 rounding,
which training can grow: a ReLU input within rounding of 0 takes its gradient or not. ResNet-18's
first step here has one such element; float64 computes that step with 1e-6 relative noise on the
input 1.9% off (`layer3.1.conv1.weight`'s gradient) and with 1e-7 noise within 1e-6, and float32
on one device lands on the other side of it from float32 split over two and from float64.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))           # lazygrad from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))           # extra/, for the models

MODELS = {
    # name: (description, batch, input shape of one image)
    "digits": ("digits CNN", 32, (1, 8, 8)),
    "resnet18": ("ResNet-18 32x32", 32, (3, 32, 32)),
}
COPY_LINE = re.compile(r"^  copy (\S+) -> (\S+)\s+(\d+) bytes$")


def build(name: str):
    import lazygrad.nn
    if name == "digits":
        from train_digits import build_model
        return build_model(8)
    from models.resnet import resnet18
    return resnet18(lazygrad.nn, num_classes=10)


def make_step(name: str, devices: tuple[str, ...] | None):
    """(jitted step, model) for one side: devices None trains on the default device."""
    import lazygrad
    import lazygrad.nn.functional as F
    from lazygrad.jit import jit
    from lazygrad.nn.optim import SGD
    from lazygrad.nn.state import get_parameters, get_state_dict
    lazygrad.manual_seed(0)
    model = build(name)
    if devices:
        for tensor in get_state_dict(model).values():
            tensor.shard_(devices)
    optimizer = SGD(get_parameters(model), lr=0.01, momentum=0.9)

    def step(x, y):
        if devices:
            x, y = x.shard(devices, 0), y.shard(devices, 0)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.to(devices[0]) if devices else loss
    return jit(step), step, model


def copies_per_step(step, x, y) -> tuple[int, int]:
    """(copies, bytes) that one plain call of the step makes, from its DEBUG=2 lines."""
    from lazygrad.knobs import Context
    captured = io.StringIO()
    with Context(DEBUG=2), contextlib.redirect_stderr(captured):
        step(x, y).item()
    sizes = [int(match[3]) for match in map(COPY_LINE.match, captured.getvalue().splitlines()) if match]
    return len(sizes), sum(sizes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="CPU,CPU:1", help="the sharded side's devices, e.g. CPU,CPU:1")
    parser.add_argument("--only", default=",".join(MODELS), help=f"models, from {','.join(MODELS)}")
    parser.add_argument("--steps", type=int, default=5, help="alternating rounds (the median is reported)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps of each side first (compiles, capture)")
    args = parser.parse_args()
    from lazygrad import Tensor
    from lazygrad.nn.state import get_state_dict
    devices = tuple(args.devices.split(","))
    print(f"{'model':<18} {'devices':<16} {'one device ms':>13} {'sharded ms':>11} {'ratio':>6} "
          f"{'max |diff|':>10} {'copies':>7} {'copy MB':>8}")
    for name in args.only.split(","):
        _, batch, image = MODELS[name]
        rng = np.random.default_rng(0)
        x, y = Tensor(rng.standard_normal((batch,) + image).astype(np.float32)), Tensor(rng.integers(0, 10, batch))
        sides = {"plain": make_step(name, None), "sharded": make_step(name, devices)}
        times: dict[str, list[float]] = {side: [] for side in sides}
        for number in range(args.warmup + args.steps):
            for side, (jitted, _, _) in sides.items():
                start = time.perf_counter()
                jitted(x, y).item()
                if number >= args.warmup:
                    times[side].append(time.perf_counter() - start)
        plain_state, sharded_state = (get_state_dict(model) for _, _, model in sides.values())
        difference = max(float(np.abs(plain_state[key].numpy() - sharded_state[key].numpy()).max())
                         for key in plain_state if plain_state[key].dtype.is_float)
        count, moved = copies_per_step(sides["sharded"][1], x, y)
        plain, sharded = statistics.median(times["plain"]), statistics.median(times["sharded"])
        print(f"{MODELS[name][0]:<18} {args.devices:<16} {plain * 1e3:>13.2f} {sharded * 1e3:>11.2f} "
              f"{sharded / plain:>6.2f} {difference:>10.2e} {count:>7} {moved / 1e6:>8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
