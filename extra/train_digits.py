"""Train a small CNN on scikit-learn's handwritten digits (or on MNIST from local IDX files).

    python extra/train_digits.py                       # digits: 1,797 8x8 images bundled with scikit-learn
    python extra/train_digits.py --epochs 5 --device NPY
    python extra/train_digits.py --mnist ~/data/mnist  # the same training on MNIST's IDX files
    mpiexec -n 2 python extra/train_digits.py --ddp    # data-parallel: each rank half of every batch

What it does: split the images into a training set and a held-out test set (20%, stratified),
train Conv-ReLU-Conv-ReLU-MaxPool-Flatten-Linear-ReLU-Linear with Adam and a cosine learning-rate
schedule, and after each epoch print the test accuracy and one line of kernel statistics. Then it
saves a safetensors checkpoint, loads it into a freshly built model and checks that model's test
accuracy is the same, and draws training loss and test accuracy per epoch into a PNG.
With --ddp under mpiexec, every rank trains on its share of each batch (lazygrad.distributed's
DistributedDataParallel averages the gradients), rank 0 alone prints, saves and plots, and the run
fails unless every rank ends with the same parameters.

`train(...)` does the training loop and can be called on a small subset (the tests do).
Exit status 1 when the test accuracy stays below --min-accuracy or the reloaded model disagrees.
"""
from __future__ import annotations

import argparse
import gzip
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import lazygrad  # noqa: E402
import lazygrad.nn.functional as F  # noqa: E402
from lazygrad import Tensor, dtypes, no_grad, stats  # noqa: E402
from lazygrad.jit import jit  # noqa: E402
from lazygrad.nn import Conv2d, Flatten, Linear, MaxPool2d, ReLU, Sequential  # noqa: E402
from lazygrad.nn.optim import Adam, CosineAnnealingLR  # noqa: E402
from lazygrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save  # noqa: E402

HERE = Path(__file__).resolve().parent
EVAL_BATCH = 200  # evaluation runs in chunks of this many images (the last one padded): one set of kernels


# ---- data ----------------------------------------------------------------------------------------

@dataclass
class Dataset:
    """Images (N, 1, H, W) float32 and labels (N,) int64, split into train and test. The loaders
    standardize the pixels (see `standardized`); pixel_mean and pixel_std undo that."""
    name: str
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    pixel_mean: float = 0.0
    pixel_std: float = 1.0


def standardized(name: str, train_images, train_labels, test_images, test_labels) -> Dataset:
    """A Dataset whose pixels (given in [0, 1]) are shifted and scaled by the training images' mean
    and standard deviation: the network starts learning several times faster than on raw pixels."""
    mean, std = float(train_images.mean()), float(train_images.std())
    return Dataset(name, ((train_images - mean) / std).astype(np.float32), train_labels,
                   ((test_images - mean) / std).astype(np.float32), test_labels, mean, std)


def load_digits_dataset(seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's 1,797 8x8 digits (pixel values 0..16), split stratified by label."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    labels = digits.target.astype(np.int64)
    train_x, test_x, train_y, test_y = train_test_split(images, labels, test_size=test_fraction,
                                                        random_state=seed, stratify=labels)
    return standardized("digits", train_x, train_y, test_x, test_y)


IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
             0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def load_idx(path: str | os.PathLike) -> np.ndarray:
    """An array from an IDX file (MNIST's format), gzipped or not: two zero bytes, a type code, the
    number of dims, each dim as a big-endian uint32, then the data in big-endian order."""
    with open(path, "rb") as file:
        raw = file.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] not in IDX_TYPES:
        raise ValueError(f"{path}: not an IDX file (expected two zero bytes and a type code, got {raw[:4]!r})")
    dtype, ndim = np.dtype(IDX_TYPES[raw[2]]), raw[3]
    header_size = 4 + 4 * ndim
    if len(raw) < header_size:
        raise ValueError(f"{path}: truncated IDX header ({len(raw)} bytes, {header_size} needed for {ndim} dims)")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expected = math.prod(shape) * dtype.itemsize
    if len(raw) - header_size != expected:
        raise ValueError(f"{path}: an IDX array of shape {shape} and type {dtype} needs {expected} bytes of data, "
                         f"the file has {len(raw) - header_size}")
    return np.frombuffer(raw, dtype=dtype, offset=header_size).reshape(shape).astype(dtype.newbyteorder("="))


def _find_idx(directory: Path, stem: str) -> Path:
    """MNIST's files go by a few names: train-images-idx3-ubyte, train-images.idx3-ubyte, with .gz."""
    dotted = stem.replace("-idx", ".idx")
    for name in (stem, stem + ".gz", dotted, dotted + ".gz"):
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"{directory}: no {stem} (or {stem}.gz) file: expected MNIST's four IDX files "
                            "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
                            "t10k-labels-idx1-ubyte")


def load_mnist_dataset(directory: str | os.PathLike) -> Dataset:
    """MNIST from its four IDX files in directory (its own train/test split)."""
    directory = Path(directory).expanduser()
    arrays = {}
    for split in ("train", "t10k"):
        images = load_idx(_find_idx(directory, f"{split}-images-idx3-ubyte"))
        labels = load_idx(_find_idx(directory, f"{split}-labels-idx1-ubyte"))
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(f"{directory}: {split} images of shape {images.shape} do not match labels of shape "
                             f"{labels.shape}")
        arrays[split] = ((images.astype(np.float32) / 255.0)[:, None], labels.astype(np.int64))
    return standardized("mnist", *arrays["train"], *arrays["t10k"])


def shift_randomly(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each image moved by -1, 0 or 1 pixels along each axis (the edge pixels, background, repeat):
    a cheap augmentation that keeps a small network from memorizing where strokes sit."""
    height, width = images.shape[-2:]
    padded = np.pad(images, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge")
    rows, columns = rng.integers(0, 3, size=(2, len(images)))
    return np.stack([padded[i, :, r:r + height, c:c + width] for i, (r, c) in enumerate(zip(rows, columns))])


# ---- model and training --------------------------------------------------------------------------

CHANNELS = (16, 32)
HIDDEN = 64


def build_model(image_size: int = 8, device: str | None = None, dtype=None) -> Sequential:
    """Two 3x3 convolutions, a 2x2 max-pool and two linear layers; 10 classes; parameters of `dtype`
    (float32 by default)."""
    pooled = image_size // 2
    first, second = CHANNELS
    return Sequential(
        Conv2d(1, first, 3, padding=1, device=device, dtype=dtype), ReLU(),
        Conv2d(first, second, 3, padding=1, device=device, dtype=dtype), ReLU(),
        MaxPool2d(2), Flatten(),
        Linear(second * pooled * pooled, HIDDEN, device=device, dtype=dtype), ReLU(),
        Linear(HIDDEN, 10, device=device, dtype=dtype),
    )


def evaluate(model, images: np.ndarray, labels: np.ndarray, device: str | None = None, dtype=None) -> float:
    """Accuracy on images, in chunks of EVAL_BATCH (the last one padded with zeros, so every chunk
    runs the same kernels). The model is evaluated in eval mode and left in the mode it was in."""
    was_training = model.training
    model.eval()
    correct = 0
    with no_grad():
        for start in range(0, len(images), EVAL_BATCH):
            chunk = images[start:start + EVAL_BATCH]
            padded = np.zeros((EVAL_BATCH,) + images.shape[1:], dtype=np.float32)
            padded[:len(chunk)] = chunk
            logits = model(Tensor(padded, device=device).cast(dtype or dtypes.float32)).float().numpy()[:len(chunk)]
            correct += int((logits.argmax(1) == labels[start:start + EVAL_BATCH]).sum())
    model.train(was_training)
    return correct / max(len(images), 1)


@dataclass
class EpochRecord:
    epoch: int
    loss: float              # mean training loss over the epoch's batches
    train_accuracy: float    # on the training batches, as they were seen
    test_accuracy: float
    seconds: float           # training time of the epoch (evaluation excluded)
    images_per_second: float
    kernels: int             # kernels launched during the epoch, evaluation included
    compiles: int
    cache_hits: int


@dataclass
class TrainResult:
    model: Sequential
    history: list[EpochRecord] = field(default_factory=list)


def train(data: Dataset, epochs: int = 8, batch_size: int = 32, lr: float = 3e-3, seed: int = 0,
          device: str | None = None, augment: bool = True, progress: bool = True, log=print,
          dtype=None, distributed: bool = False) -> TrainResult:
    """Train build_model() on data with Adam and a per-epoch cosine schedule; returns the model and
    one EpochRecord per epoch. Batches are shuffled with `seed`; a last partial batch is dropped, so
    every step runs the same kernels. `dtype` (float32 by default, or bfloat16) is the parameters',
    the optimizer state's and the images'. With `distributed` (lazygrad.distributed initialized),
    rank r of n trains on images r, r + n, ... of each batch, the same batches as one process."""
    from tqdm import tqdm
    lazygrad.manual_seed(seed)
    dtype = dtype or dtypes.float32
    model = build_model(data.train_images.shape[-1], device, dtype)
    optimizer = Adam(get_parameters(model), lr=lr)
    rank, ranks, forward = 0, 1, model
    if distributed:
        import lazygrad.distributed as dist
        rank, ranks, forward = dist.rank(), dist.world_size(), dist.DistributedDataParallel(model)
        if batch_size % ranks:
            raise ValueError(f"train: batch size {batch_size} does not split evenly over {ranks} ranks")
    scheduler = CosineAnnealingLR(optimizer, T_max=epochs)
    rng = np.random.default_rng(seed)
    steps = len(data.train_images) // batch_size
    if steps == 0:
        raise ValueError(f"train: {len(data.train_images)} training images are fewer than one batch of {batch_size}")
    result = TrainResult(model)

    @jit
    def train_step(images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """One Adam step; from the third call on, its recorded kernels replay (lazygrad.jit)."""
        optimizer.zero_grad()
        logits = forward(images)
        loss = F.cross_entropy(logits, labels)
        loss.backward()  # with DistributedDataParallel, the gradients come back averaged over the ranks
        logits.realize()  # before the step overwrites the weights it reads
        optimizer.step()
        if distributed:
            dist.all_reduce(loss, "mean")  # the whole batch's loss, as one process reports it
        return loss, logits

    for epoch in range(1, epochs + 1):
        stats.reset()
        order = rng.permutation(len(data.train_images))
        losses, correct = [], 0
        start = time.perf_counter()
        bar = tqdm(range(steps), desc=f"epoch {epoch:2d}/{epochs}", unit="batch", disable=not progress or rank > 0,
                   leave=True, dynamic_ncols=True, mininterval=0.5, file=sys.stderr)
        for step in bar:
            batch = order[step * batch_size:(step + 1) * batch_size]
            batch_images = shift_randomly(data.train_images[batch], rng) if augment else data.train_images[batch]
            images = Tensor(batch_images[rank::ranks], device=device).cast(dtype)
            labels = Tensor(data.train_labels[batch][rank::ranks], device=device)
            loss, logits = train_step(images, labels)
            losses.append(loss.item())
            correct += int((logits.float().numpy().argmax(1) == data.train_labels[batch][rank::ranks]).sum())
            seen = (step + 1) * batch_size  # by every rank; this one's accuracy is on its share
            bar.set_postfix(loss=f"{np.mean(losses):.4f}", acc=f"{correct * ranks / seen:.3f}",
                            img_s=f"{seen / (time.perf_counter() - start):.0f}")
        seconds = time.perf_counter() - start
        bar.close()
        if distributed:  # every rank's share of the epoch's training batches
            correct = int(dist.all_reduce(Tensor([correct]), "sum").item())
        scheduler.step()
        test_accuracy = evaluate(model, data.test_images, data.test_labels, device, dtype)
        record = EpochRecord(epoch, float(np.mean(losses)), correct / (steps * batch_size), test_accuracy, seconds,
                             steps * batch_size / seconds, stats.kernels, stats.compiles, stats.cache_hits)
        result.history.append(record)
        log(f"epoch {epoch:2d}: loss {record.loss:.4f}, train accuracy {record.train_accuracy:.2%}, "
            f"test accuracy {record.test_accuracy:.2%}, {record.seconds:.2f} s "
            f"({record.images_per_second:.0f} images/s) | kernels {record.kernels} launched, "
            f"{record.compiles} compiled, {record.cache_hits} from disk cache")
    return result


# ---- results -------------------------------------------------------------------------------------

def plot_history(history: list[EpochRecord], path: str | os.PathLike, title: str, target: float = 0.97) -> None:
    """Training loss, and test accuracy against the target, per epoch, side by side, as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    epochs = [record.epoch for record in history]
    figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(9, 3.6))
    loss_axes.plot(epochs, [record.loss for record in history], marker="o", color="tab:blue")
    loss_axes.set(title="training loss (mean over the epoch)", xlabel="epoch", ylabel="cross entropy", ylim=(0, None))
    test = [100 * record.test_accuracy for record in history]
    accuracy_axes.plot(epochs, test, marker="o", color="tab:green", label="test")
    accuracy_axes.plot(epochs, [100 * record.train_accuracy for record in history], linestyle="--",
                       color="tab:gray", label="training batches (shifted)")
    accuracy_axes.axhline(100 * target, color="tab:red", linewidth=0.8, linestyle=":", label=f"{target:.0%} target")
    accuracy_axes.set(title=f"accuracy (final test accuracy {test[-1]:.1f}%)", xlabel="epoch", ylabel="%")
    accuracy_axes.legend(loc="lower right")
    for axes in (loss_axes, accuracy_axes):
        axes.grid(True, alpha=0.3)
        axes.set_xticks(epochs)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def shown(path: Path) -> str:
    """path relative to the working directory when it is below it, else absolute."""
    relative = os.path.relpath(path)
    return path.as_posix() if relative.startswith("..") else relative


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="CPU (default), NPY, OPENCL, ...; default: DEV or CPU")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's initial learning rate (cosine decay)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="of the parameters, the optimizer state and the images")
    parser.add_argument("--mnist", metavar="DIR", help="train on MNIST's IDX files in DIR instead of the digits")
    parser.add_argument("--out", metavar="DIR", default=str(HERE), help="where the checkpoint and plot go")
    parser.add_argument("--min-accuracy", type=float, default=0.97, help="exit 1 below this test accuracy")
    parser.add_argument("--ddp", action="store_true",
                        help="data-parallel over the ranks of `mpiexec -n N` (lazygrad.distributed, needs mpi4py)")
    return parser.parse_args(argv)


def same_on_every_rank(model) -> bool:
    """Whether every rank of the job holds model's parameters bit for bit."""
    import lazygrad.distributed as dist
    flat = np.concatenate([parameter.float().numpy().reshape(-1) for parameter in get_parameters(model)])
    gathered = dist.all_gather(Tensor(flat)).numpy()
    return bool((gathered == gathered[0]).all())


def main(argv=None) -> int:
    args = parse_args(argv)
    rank = 0
    if args.ddp:
        import lazygrad.distributed as dist
        dist.init()  # before the first kernel: the ranks on this machine split its cores
        rank = dist.rank()
    say = print if rank == 0 else (lambda *_, **__: None)  # rank 0 speaks for the job
    device = lazygrad.devices.canonical_device(args.device)
    data = load_mnist_dataset(args.mnist) if args.mnist else load_digits_dataset(args.seed)
    say(f"{data.name}: {len(data.train_images)} training and {len(data.test_images)} test images of "
          f"{data.train_images.shape[-2]}x{data.train_images.shape[-1]} on {device}; {args.epochs} epochs, "
          f"batch size {args.batch_size}, Adam lr {args.lr} with cosine decay")
    started = time.perf_counter()
    dtype = dtypes.from_any(args.dtype)
    result = train(data, args.epochs, args.batch_size, args.lr, args.seed, device, dtype=dtype, log=say,
                   distributed=args.ddp)
    final = result.history[-1]
    say(f"trained in {time.perf_counter() - started:.1f} s: test accuracy {final.test_accuracy:.2%}, "
          f"last epoch {final.seconds:.2f} s ({final.images_per_second:.0f} images/s)")
    if args.ddp:
        same = same_on_every_rank(result.model)
        say(f"{dist.world_size()} ranks: parameters {'identical on every rank' if same else 'DIFFER between ranks'}")
        if not same:
            return 1
        if rank > 0:  # rank 0 writes the checkpoint and the plot and checks them
            return 0 if final.test_accuracy >= args.min_accuracy else 1

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / f"train_{data.name}.safetensors"
    safe_save(get_state_dict(result.model), checkpoint, metadata={"dataset": data.name, "epochs": str(args.epochs)})
    reloaded = build_model(data.train_images.shape[-1], device, dtype)
    load_state_dict(reloaded, safe_load(checkpoint, device))
    reloaded_accuracy = evaluate(reloaded, data.test_images, data.test_labels, device, dtype)
    same = reloaded_accuracy == final.test_accuracy
    say(f"checkpoint {shown(checkpoint)}: reloaded into a fresh model, test accuracy {reloaded_accuracy:.2%} "
          f"({'the same' if same else 'DIFFERENT from ' + format(final.test_accuracy, '.2%')})")

    plot = out / f"train_{data.name}.png"
    plot_history(result.history, plot, f"{data.name}: {len(data.train_images)} training images, lazygrad on {device}",
                 args.min_accuracy)
    say(f"plot of training loss and test accuracy: {shown(plot)}")
    if not same:
        return 1
    if final.test_accuracy < args.min_accuracy:
        say(f"test accuracy {final.test_accuracy:.2%} is below --min-accuracy {args.min_accuracy:.0%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
