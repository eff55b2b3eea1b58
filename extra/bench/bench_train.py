"""One training epoch of the digits demo's CNN: lazygrad against PyTorch CPU eager (when installed).

    python extra/bench/bench_train.py                 # 2 timed epochs each after a warm-up epoch
    python extra/bench/bench_train.py --epochs 3 --batch-size 64 --device CPU

Both run the same model (extra/train_digits.py's build_model), the same batches of the 1,437
training images, Adam and cross entropy. The warm-up epoch is not timed: it includes lazygrad's
kernel compiles (or disk-cache loads). Reported: seconds per epoch (the median of the timed
epochs), images per second and, for lazygrad, kernels launched per training step, with the step
run eagerly and under lazygrad.jit.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))           # lazygrad from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))           # extra/, for train_digits

import lazygrad  # noqa: E402
import lazygrad.nn.functional as F  # noqa: E402
from lazygrad import Tensor, stats  # noqa: E402
from lazygrad.jit import jit  # noqa: E402
from lazygrad.nn.optim import Adam  # noqa: E402
from lazygrad.nn.state import get_parameters  # noqa: E402
from train_digits import CHANNELS, HIDDEN, build_model, load_digits_dataset  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


def batches(count: int, batch_size: int, seed: int) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(count)
    return [order[i * batch_size:(i + 1) * batch_size] for i in range(count // batch_size)]


def lazygrad_epoch_seconds(data, args, use_jit: bool) -> tuple[list[float], float]:
    """Seconds of each epoch after the warm-up, and kernels per training step; the step jitted or not."""
    lazygrad.manual_seed(args.seed)
    model = build_model(8, args.device)
    optimizer = Adam(get_parameters(model), lr=3e-3)

    def train_step(images: Tensor, labels: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss
    train_step = jit(train_step) if use_jit else train_step
    times, kernels_per_step = [], 0.0
    for epoch in range(args.epochs + 1):
        steps = batches(len(data.train_images), args.batch_size, args.seed + epoch)
        stats.reset()
        start = time.perf_counter()
        for batch in steps:
            loss = train_step(Tensor(data.train_images[batch], device=args.device),
                              Tensor(data.train_labels[batch], device=args.device))
            loss.item()
        if epoch > 0:
            times.append(time.perf_counter() - start)
            kernels_per_step = stats.kernels / len(steps)
    return times, kernels_per_step


def torch_epoch_seconds(data, args) -> list[float]:
    """The same model in PyTorch eager on the CPU, its own default initialization."""
    nn = torch.nn
    torch.manual_seed(args.seed)
    first, second = CHANNELS
    model = nn.Sequential(nn.Conv2d(1, first, 3, padding=1), nn.ReLU(), nn.Conv2d(first, second, 3, padding=1),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(second * 4 * 4, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, 10))
    reference = build_model(8, "NPY")  # so a change to the demo's model is noticed here
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in get_parameters(reference)), \
        "the PyTorch model no longer matches build_model(): update torch_epoch_seconds"
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    images, labels = torch.from_numpy(data.train_images), torch.from_numpy(data.train_labels)
    times = []
    for epoch in range(args.epochs + 1):
        steps = batches(len(images), args.batch_size, args.seed + epoch)
        start = time.perf_counter()
        for batch in steps:
            index = torch.from_numpy(batch)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(images[index]), labels[index])
            loss.backward()
            optimizer.step()
            loss.item()
        if epoch > 0:
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs (after one warm-up epoch)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.device = lazygrad.devices.canonical_device(args.device)
    data = load_digits_dataset(args.seed)
    images = len(data.train_images) // args.batch_size * args.batch_size
    print(f"one epoch of the digits CNN: {images} training images in batches of {args.batch_size}, Adam")

    for use_jit in (False, True):
        times, kernels_per_step = lazygrad_epoch_seconds(data, args, use_jit)
        seconds = statistics.median(times)
        print(f"  lazygrad {args.device:<6} {seconds:7.3f} s/epoch  {images / seconds:8.0f} images/s  "
              f"({kernels_per_step:.0f} kernels per step, {'jit' if use_jit else 'eager'})")
    if torch is None:
        print("  torch is not installed: no PyTorch CPU eager comparison (pip install torch)")
        return
    torch_seconds = statistics.median(torch_epoch_seconds(data, args))
    print(f"  torch    CPU    {torch_seconds:7.3f} s/epoch  {images / torch_seconds:8.0f} images/s  "
          f"(eager, {torch.get_num_threads()} thread(s), torch {torch.__version__})")
    print(f"  lazygrad / torch time: {seconds / torch_seconds:.2f}")


if __name__ == "__main__":
    main()
