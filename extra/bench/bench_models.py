"""Model benchmarks: ResNet-18, MobileNetV2 and a MiniLM-sized BERT through lazygrad.nn (plain and
jitted), lazygrad.onnx, ONNX Runtime and PyTorch, on the CPU at a chosen thread count.

    python extra/bench/bench_models.py                          # every case, every usable core, 5 timed calls
    python extra/bench/bench_models.py --threads 1,2 --quick    # one table per thread count
    python extra/bench/bench_models.py --only resnet18,bert --repeats 9 --kernels 10
    python extra/bench/bench_models.py --no-onnx                # lazygrad.nn and torch only

What is measured (float32; the models are extra/models', with random weights seeded by --seed)
  resnet18 b1   ResNet-18 inference on 1x3x224x224, BatchNorm in eval mode
  resnet18 b16  the same on 16x3x224x224
  mobilenet_v2  MobileNetV2 inference on 1x3x224x224
  bert          the BERT encoder of MiniLM-L6's size on 8x128 token ids whose rows end in padding
                (attention_mask 0), returning the last hidden state
  train r18     one training step of ResNet-18 on 16x3x224x224: forward (BatchNorm on batch
                statistics), cross entropy, backward and SGD with momentum 0.9
  train mbv2    one training step of MobileNetV2 (no dropout) on 16x3x112x112: forward (BatchNorm on
                batch statistics; depthwise convolutions, channels last), cross entropy, backward
                and SGD with momentum 0.9
  train gpt     one training step of a small GPT-2 (4 layers, width 256, 4 heads, a vocabulary of
                4096, no dropout) on 8 sequences of 128 tokens: next-token cross entropy over every
                position, backward and SGD with momentum 0.9
  train unet    one training step of a small U-Net denoiser (extra/models/unet.py: GroupNorm, SiLU,
                a stride-2 convolution down and a transposed one up) on 8x3x64x64 images: mean
                squared error against targets, backward and SGD with momentum 0.9

Routes (columns)
  lg eager      the lazygrad.nn model called plainly, under lazygrad.no_grad() (torch's column runs
                under inference_mode): builds the graph, schedules it (memoized after the first
                call) and runs the kernels
  lg jit        the same call under lazygrad.jit: the captured kernels replayed
  onnx, onnx jit  lazygrad.onnx.OnnxModel on the model exported with torch.onnx.export (dynamo,
                opset 20; it folds BatchNorm into the convolutions), plainly and under lazygrad.jit
                (a plain call replays the model's kernels itself from its fourth call with the
                same input shapes: lazygrad/onnx/replay.py)
  ort           ONNX Runtime's CPUExecutionProvider on that file
  torch         PyTorch eager, under inference_mode (training: a plain step)
PyTorch builds each model; its state dict is copied into the lazygrad model by name, so every route
computes the same function. BatchNorm statistics and affine parameters are set to realistic values
first (random scales, the statistics of one random batch), so activations keep their scale and the
check means something. Without torch only the lazygrad.nn routes run, on lazygrad's own random
initialization, and only jit is checked, against eager. The exported .onnx files are cached in
--onnx-dir under the case's name and a hash of torch's version, the model's source, the input
shapes and the weights.

How it is timed: each route is called three times first (compiling; capturing the jit; the first
replay, which is checked and counted); then each of --repeats rounds calls every route once, in
turn, so machine noise falls on all alike, and the median per route is reported. Every call
includes realizing its output. Before each timed lazygrad call, untimed, its input tensors are
written again in place, as a new batch would be: otherwise an eager call would keep the kernels
that read the unchanged inputs alone (ResNet-18's padded input) from its previous call. "best/ort" and "best/torch" are the fastest lazygrad route's time
over ORT's and torch's (above 1: lazygrad is slower). "kernels" are lazygrad launches per call for
lg eager / lg jit / onnx / onnx jit.

What is checked, once per route: the third call's output (for jit routes, the first replay)
against torch's, rtol and atol 1e-3 (ORT too, so a bad export shows as such). Training: the first
step's loss and two weight gradients (ResNet-18's conv1 and fc, MobileNetV2's first convolution and
its classifier, GPT's first MLP input projection and its embedding, which the output layer shares;
the U-Net's first convolution and its transposed one), and the third step's loss, against a float64
torch run from the same weights (float32 gradients through 20 training-mode BatchNorms are a few
1e-3 of their largest magnitude off in torch as well, and three steps amplify rounding, so a value
passes within 1e-3 of its magnitude or 3x torch float32's own error; the errors are printed below
the table). A
mismatch or a failing route prints a line and makes the exit status 1.

Threads: lazygrad's kernels use OpenMP and read OMP_NUM_THREADS once, when the first kernel loads,
so each thread count runs in a fresh copy of this script with OMP_NUM_THREADS (and
OPENBLAS_NUM_THREADS, for numpy's matmul) set; torch gets torch.set_num_threads(N) and ORT
intra_op_num_threads=N, inter_op_num_threads=1 and no spinning between runs (its spinning workers
slowed the route after it 1.7-2.5x). Started with OMP_NUM_THREADS already equal to a single
--threads value, the script runs in place.

Slowest kernels (--kernels K): five more jitted calls of the lazygrad.nn model (or training step),
replays, run under DEBUG=2; the per-kernel lines they print to stderr give each launch's median
time, and the K launches that took longest are printed with their GFLOP/s and GB/s as fractions of
the nominal fp32 peak (threads x clock x FMA flops per cycle, from /proc/cpuinfo; a 2048 matmul's
rate in torch, or numpy, is printed beside it and used where /proc/cpuinfo is unreadable) and of
numpy's one-thread copy bandwidth. Warm replays: the launches of a plain call also pay for first
touches of fresh buffers. Beside them, where ONNX Runtime runs, come its own profiler's time per op
type and its K slowest nodes, to set its layers beside lazygrad's kernels. lazygrad counts every
arithmetic op as a flop (comparisons and selects too), and DEBUG timing includes each launch's
ctypes call, so small kernels look slower than they are.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import hashlib
import inspect
import io
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # lazygrad and extra.models from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

import lazygrad  # noqa: E402
import lazygrad.nn  # noqa: E402
import lazygrad.nn.functional as F  # noqa: E402
from bench_core import bench_copy, cpu_model, median_seconds  # noqa: E402
from extra.models import bert_mini_lm, mobilenet_v2, resnet18, small_unet  # noqa: E402
from extra.models.gpt2 import GPT2Config, gpt2  # noqa: E402
from lazygrad import Context, Tensor, stats  # noqa: E402
from lazygrad.jit import jit  # noqa: E402
from lazygrad.nn.optim import SGD  # noqa: E402
from lazygrad.nn.state import get_parameters, load_state_dict  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
try:
    import onnxruntime
except ImportError:
    onnxruntime = None
try:
    from lazygrad.onnx import OnnxModel
except ImportError:  # the onnx package is missing
    OnnxModel = None

TOLERANCE = 1e-3
LEARNING_RATE = 0.01
MOMENTUM = 0.9
BERT_BATCH, BERT_TOKENS = 8, 128
ROUTES = ("lg eager", "lg jit", "onnx", "onnx jit", "ort", "torch")
LAZYGRAD_ROUTES = ("lg eager", "lg jit", "onnx", "onnx jit")


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    build: Callable                                        # build(nn) -> model, in training mode
    make_inputs: Callable[[np.random.Generator], dict]     # input name -> numpy array
    output_name: str
    training: bool = False
    loss: Callable | None = None          # training: loss(model, inputs as tensors, functional), torch's or lazygrad's
    checked: tuple[str, ...] = ()         # training: the parameters whose first gradients are checked
    prepare: Callable | None = None       # prepare(torch model, seed): its weights; realistic_batch_norms by default


def image_inputs(batch: int) -> Callable[[np.random.Generator], dict]:
    def make(rng: np.random.Generator) -> dict:
        return {"images": rng.standard_normal((batch, 3, 224, 224), dtype=np.float32)}
    return make


def training_inputs(rng: np.random.Generator) -> dict:
    images = rng.standard_normal((16, 3, 224, 224), dtype=np.float32)
    return {"images": images, "labels": rng.integers(0, 1000, 16, dtype=np.int64)}


def small_image_training_inputs(rng: np.random.Generator) -> dict:
    images = rng.standard_normal((16, 3, 112, 112), dtype=np.float32)
    return {"images": images, "labels": rng.integers(0, 1000, 16, dtype=np.int64)}


def mobilenet_v2_without_dropout(nn):
    return mobilenet_v2(nn, dropout=0.0)  # dropout draws differ between torch and lazygrad


def image_loss(model, inputs: dict, functional):
    return functional.cross_entropy(model(inputs["images"]), inputs["labels"])


GPT_CONFIG = GPT2Config(vocab_size=4096, n_positions=128, n_embd=256, n_layer=4, n_head=4, dropout=0.0)
GPT_BATCH, GPT_TOKENS = 8, 128


def small_gpt(nn):
    return gpt2(nn, GPT_CONFIG)


def token_inputs(rng: np.random.Generator) -> dict:
    """Sequences of random tokens, each position's target the next token."""
    tokens = rng.integers(0, GPT_CONFIG.vocab_size, (GPT_BATCH, GPT_TOKENS + 1), dtype=np.int64)
    return {"input_ids": np.ascontiguousarray(tokens[:, :-1]), "targets": np.ascontiguousarray(tokens[:, 1:])}


def denoising_inputs(rng: np.random.Generator) -> dict:
    return {"images": rng.standard_normal((8, 3, 64, 64), dtype=np.float32),
            "targets": rng.standard_normal((8, 3, 64, 64), dtype=np.float32)}


def denoising_loss(model, inputs: dict, functional):
    return functional.mse_loss(model(inputs["images"]), inputs["targets"])


def next_token_loss(model, inputs: dict, functional):
    logits = model(inputs["input_ids"])
    return functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), inputs["targets"].reshape(-1))


def bert_inputs(rng: np.random.Generator) -> dict:
    """Token ids in the vocabulary's ordinary range; each row keeps a random number of tokens (the
    first all 128), then padding: id 0 and attention_mask 0."""
    lengths = rng.integers(BERT_TOKENS // 4, BERT_TOKENS + 1, BERT_BATCH)
    lengths[0] = BERT_TOKENS
    mask = (np.arange(BERT_TOKENS)[None, :] < lengths[:, None]).astype(np.int64)
    input_ids = rng.integers(1000, 30000, (BERT_BATCH, BERT_TOKENS), dtype=np.int64) * mask
    return {"input_ids": input_ids, "attention_mask": mask}


CASES = {
    "resnet18": [Case("resnet18 b1", resnet18, image_inputs(1), "logits"),
                 Case("resnet18 b16", resnet18, image_inputs(16), "logits")],
    "mobilenet_v2": [Case("mobilenet_v2", mobilenet_v2, image_inputs(1), "logits")],
    "bert": [Case("bert", bert_mini_lm, bert_inputs, "last_hidden_state")],
    "train": [Case("train r18", resnet18, training_inputs, "loss", training=True, loss=image_loss,
                   checked=("conv1.weight", "fc.weight")),
              Case("train mbv2", mobilenet_v2_without_dropout, small_image_training_inputs, "loss", training=True,
                   loss=image_loss, checked=("features.0.0.weight", "classifier.1.weight")),
              Case("train gpt", small_gpt, token_inputs, "loss", training=True, loss=next_token_loss,
                   checked=("transformer.h.0.mlp.c_fc.weight", "transformer.wte.weight"),
                   prepare=lambda model, seed: gpt2_initialization(model, seed)),
              Case("train unet", small_unet, denoising_inputs, "loss", training=True, loss=denoising_loss,
                   checked=("inc.0.weight", "up.0.weight"))],
}


# ---------------------------------------------------------------------------------------------
# Models and weights
# ---------------------------------------------------------------------------------------------

def realistic_batch_norms(model, seed: int) -> None:
    """Give every BatchNorm2d of a torch model random affine parameters and the running statistics
    of one random batch, so eval-mode activations keep a sensible scale through the network."""
    norms = [module for module in model.modules() if isinstance(module, torch.nn.BatchNorm2d)]
    if not norms:
        return
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for norm in norms:
            norm.weight.copy_(torch.rand(norm.num_features, generator=generator) + 0.5)
            norm.bias.copy_(torch.rand(norm.num_features, generator=generator) * 0.5 - 0.25)
            norm.momentum = 1.0     # the next training forward's statistics replace the running ones
        model.train()
        model(torch.randn(4, 3, 224, 224, generator=generator))
        for norm in norms:
            norm.momentum = 0.1
            norm.num_batches_tracked.zero_()


def gpt2_initialization(model, seed: int) -> None:
    """GPT-2's initialization of a torch model: every Linear and Embedding weight from N(0, 0.02),
    biases zero (torch's defaults give the embeddings, which the output layer shares, unit variance:
    logits in the tens and a loss that SGD sends past 100 in three steps)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * 0.02)
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.zero_()


def torch_reference(case: Case, seed: int):
    """The torch model of a case with its weights set; None without torch."""
    if torch is None:
        return None
    torch.manual_seed(seed)
    model = case.build(torch.nn)
    (case.prepare or realistic_batch_norms)(model, seed)
    return model.train(case.training)


def lazygrad_model(case: Case, reference, seed: int):
    """The lazygrad.nn model of a case, holding the reference's weights when there is one."""
    lazygrad.manual_seed(seed)
    model = case.build(lazygrad.nn)
    if reference is not None:
        load_state_dict(model, {name: Tensor(value.detach().numpy().copy())
                                for name, value in reference.state_dict().items()})
    return model.train(case.training)


def onnx_file(case: Case, reference, inputs: dict, directory: Path) -> Path:
    """The reference model exported to ONNX, cached under its name and a hash of everything that
    shapes the file: torch's version, the model's source, the input shapes and the weights."""
    digest = hashlib.sha256(torch.__version__.encode())
    digest.update(inspect.getsource(inspect.getmodule(case.build)).encode())
    for name, array in inputs.items():
        digest.update(f"{name}{array.shape}{array.dtype}".encode())
    for name, value in reference.state_dict().items():
        digest.update(name.encode())
        digest.update(value.detach().numpy().tobytes())
    path = directory / f"{case.name.replace(' ', '_')}-{digest.hexdigest()[:16]}.onnx"
    if path.exists():
        return path
    directory.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    example = tuple(torch.from_numpy(array) for array in inputs.values())
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)  # its notes on torchvision operators it skips
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):  # and its progress lines
            warnings.simplefilter("ignore")
            torch.onnx.export(reference, example, str(partial), input_names=list(inputs),
                              output_names=[case.output_name], dynamo=True, external_data=False, verbose=False)
    finally:
        exporter_log.setLevel(level)
    os.replace(partial, path)
    return path


# ---------------------------------------------------------------------------------------------
# Routes
# ---------------------------------------------------------------------------------------------

@dataclass
class Route:
    name: str
    call: Callable[[], object]              # one call, output realized
    to_numpy: Callable[[object], dict]      # the call's result -> {"output" or check name: array}
    seconds: list[float] = field(default_factory=list)
    kernels: int | None = None
    before: Callable[[], object] | None = None  # run untimed before each timed call (new input contents)
    node_times: Callable[[], list[NodeTime]] | None = None  # ONNX Runtime's: its profiler's times per node


def rewritten(tensors: list[Tensor], arrays: list[np.ndarray]) -> Callable[[], None]:
    """Writes each array into its tensor's buffer again, as a caller with a new batch would: the
    buffers' versions move, so an eager call cannot keep kernels that read the inputs alone from
    its previous call (derived_values keeps those that read only unchanged buffers)."""
    def rewrite() -> None:
        for tensor, array in zip(tensors, arrays):
            tensor.assign(array).realize()
    return rewrite


def lazygrad_output(tensor: Tensor) -> dict:
    return {"output": tensor.numpy()}


def inference_routes(case: Case, inputs: dict, reference, args, problems: list[str]) -> list[Route]:
    """The routes that can run here, in ROUTES order; a route that cannot be set up is left out
    with a line in problems."""
    names = list(inputs)
    tensors = [Tensor(array).realize() for array in inputs.values()]
    model = lazygrad_model(case, reference, args.seed)
    infer = lazygrad.no_grad()(lambda *arguments: model(*arguments))  # as torch's inference_mode
    fresh = rewritten(tensors, list(inputs.values()))
    routes = [Route("lg eager", lambda: infer(*tensors).realize(), lazygrad_output, before=fresh)]
    jitted = jit(infer)
    routes.append(Route("lg jit", lambda: jitted(*tensors).realize(), lazygrad_output, before=fresh))
    if reference is not None and not args.no_onnx:
        try:
            path = onnx_file(case, reference, inputs, Path(args.onnx_dir))
        except Exception as error:  # an exporter failure costs the ONNX columns, not the run
            problems.append(f"{case.name}: torch.onnx.export failed: {type(error).__name__}: {error}")
            path = None
        if path is not None and OnnxModel is not None:
            try:
                onnx_model = OnnxModel(str(path))
                output = case.output_name
                routes.append(Route("onnx", lambda: onnx_model.run(dict(zip(names, tensors)))[output].realize(),
                                    lazygrad_output, before=fresh))
                onnx_jitted = jit(lambda *arguments: onnx_model.run(dict(zip(names, arguments)))[output])
                routes.append(Route("onnx jit", lambda: onnx_jitted(*tensors).realize(), lazygrad_output,
                                    before=fresh))
            except Exception as error:
                problems.append(f"{case.name}: lazygrad.onnx could not load {path.name}: "
                                f"{type(error).__name__}: {error}")
        if path is not None and onnxruntime is not None:
            threads = args.threads[0]
            try:
                session = onnxruntime.InferenceSession(str(path), ort_options(threads), providers=["CPUExecutionProvider"])
                routes.append(Route("ort", lambda: session.run(None, inputs)[0], lambda out: {"output": out},
                                    node_times=lambda: ort_node_times(path, threads, inputs)))
            except Exception as error:
                problems.append(f"{case.name}: ONNX Runtime could not load {path.name}: "
                                f"{type(error).__name__}: {error}")
    if reference is not None:
        reference.eval()
        torch_inputs = [torch.from_numpy(array) for array in inputs.values()]

        def torch_call():
            with torch.inference_mode():
                return reference(*torch_inputs)
        routes.append(Route("torch", torch_call, lambda out: {"output": out.numpy()}))
    return routes


def training_checks(case: Case) -> tuple[str, ...]:
    """The names of what a training case's first step is checked by."""
    return ("loss", *(f"{name} grad" for name in case.checked))


def parameter(model, name: str):
    """The parameter of a torch or lazygrad.nn model at a state-dict name ("h.0.mlp.c_fc.weight")."""
    return functools.reduce(lambda owner, part: owner[int(part)] if part.isdigit() else getattr(owner, part),
                            name.split("."), model)


def training_outputs(case: Case, loss, model) -> dict:
    """What a training route's first step is checked by: its loss and the checked weight gradients."""
    return {"loss": loss.numpy(), **{f"{name} grad": parameter(model, name).grad.numpy() for name in case.checked}}


def float64_steps(case: Case, reference, inputs: dict) -> tuple[dict, float]:
    """The loss and gradients of the first step of a float64 copy of the torch model, and its loss at
    the third step (the same batch, SGD as the routes): the exact values the float32 routes
    approximate."""
    model = copy.deepcopy(reference).double().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    wide = {name: torch.from_numpy(array.astype(np.float64) if array.dtype.kind == "f" else array)
            for name, array in inputs.items()}
    for step in range(3):
        optimizer.zero_grad()
        loss = case.loss(model, wide, torch.nn.functional)
        loss.backward()
        if step == 0:
            first = {name: value.astype(np.float64) for name, value in training_outputs(case, loss.detach(), model).items()}
        optimizer.step()
    return first, float(loss.detach())


def training_routes(case: Case, inputs: dict, reference, args) -> list[Route]:
    """One SGD step per call, on the same batch every time, each route with its own copy of the
    weights."""
    names = list(inputs)
    tensors = [Tensor(array).realize() for array in inputs.values()]

    def lazygrad_route(name: str, use_jit: bool) -> Route:
        model = lazygrad_model(case, reference, args.seed)
        optimizer = SGD(get_parameters(model), lr=LEARNING_RATE, momentum=MOMENTUM)

        def train_step(*values: Tensor) -> Tensor:
            optimizer.zero_grad()
            loss = case.loss(model, dict(zip(names, values)), F)
            loss.backward()
            optimizer.step()
            return loss
        step = jit(train_step) if use_jit else train_step
        return Route(name, lambda: step(*tensors).realize(), lambda loss: training_outputs(case, loss, model),
                     before=rewritten(tensors, list(inputs.values())))

    routes = [lazygrad_route("lg eager", False), lazygrad_route("lg jit", True)]
    if reference is not None:
        model = reference.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
        torch_inputs = {name: torch.from_numpy(array) for name, array in inputs.items()}

        def torch_step():
            optimizer.zero_grad()
            loss = case.loss(model, torch_inputs, torch.nn.functional)
            loss.backward()
            optimizer.step()
            return loss.detach()
        routes.append(Route("torch", torch_step, lambda loss: training_outputs(case, loss, model)))
    return routes


# ---------------------------------------------------------------------------------------------
# Checking, timing, per-kernel times
# ---------------------------------------------------------------------------------------------

def compare(name: str, actual: np.ndarray, expected: np.ndarray) -> str | None:
    """None when they agree within rtol and atol TOLERANCE, else a one-line description."""
    if actual.shape != expected.shape:
        return f"{name}: shape {actual.shape}, expected {expected.shape}"
    bad = ~np.isclose(actual, expected, rtol=TOLERANCE, atol=TOLERANCE)
    if not bad.any():
        return None
    first = np.unravel_index(np.argmax(bad), bad.shape)
    difference = np.abs(actual.astype(np.float64) - expected)
    return (f"{name}: {int(bad.sum())}/{bad.size} elements differ, max abs diff {np.nanmax(difference):.3g}, "
            f"first at {tuple(int(i) for i in first)}: {actual[first]!r} vs {expected[first]!r}")


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| over max |expected|."""
    return float(np.abs(actual.astype(np.float64) - expected).max() / max(np.abs(expected).max(), 1e-30))


def check_inference(case: Case, results: dict) -> list[str]:
    """Every route's warm-up output against torch's (against lg eager's without torch); one line
    per mismatch. ORT is checked too, so a wrong export shows as such, not as a lazygrad.onnx bug."""
    reference_name = "torch" if "torch" in results else "lg eager"
    if reference_name not in results:
        return [f"{case.name}: nothing to check against: {reference_name} did not run"]
    mismatches = []
    for name, outputs in results.items():
        if name == reference_name:
            continue
        for key, array in outputs.items():
            problem = compare(key, array, results[reference_name][key])
            if problem:
                mismatches.append(f"{case.name}: {name} vs {reference_name}: MISMATCH {problem}")
    return mismatches


def check_training(case: Case, first: dict, third: dict, exact: tuple[dict, float] | None) -> tuple[list[str], list[str]]:
    """(mismatches, notes) for the training step. The first step's loss and gradients, and the third
    step's loss (a jit replay), are compared with a float64 torch run from the same weights: float32
    gradients through 20 training-mode BatchNorms are a few 1e-3 of their largest magnitude off in
    torch too, and three steps of MobileNetV2 amplify float32 rounding to a few 1e-3 of the loss
    (torch float32 6.5427 against float64's 6.5563), so a value passes when its error (max abs
    difference over max magnitude) is within TOLERANCE or 3x torch float32's own; the first loss
    within TOLERANCE relative. Without torch, both are compared with lg eager's."""
    against = "float64 torch"
    if exact is None:
        if "lg eager" not in first:
            return [f"{case.name}: nothing to check against: lg eager did not run"], []
        against, exact = "lg eager", (first["lg eager"], third["lg eager"]["loss"] if "lg eager" in third else None)
        first = {name: outputs for name, outputs in first.items() if name != "lg eager"}
        third = {name: outputs for name, outputs in third.items() if name != "lg eager"}
    exact_first, exact_third = exact
    errors = {name: {key: relative_error(array, exact_first[key]) for key, array in outputs.items()}
              for name, outputs in first.items()}
    mismatches, notes = [], []
    for key in training_checks(case):
        allowed = max(TOLERANCE, 3 * errors["torch"][key]) if "torch" in errors and key != "loss" else TOLERANCE
        for name in errors:
            if errors[name][key] > allowed:
                mismatches.append(f"{case.name}: {name} vs {against}: MISMATCH step 1 {key}: error "
                                  f"{errors[name][key]:.2e} of its largest magnitude, allowed {allowed:.2e}")
        notes.append(f"{case.name}: step 1 {key} error vs {against}: "
                     + ", ".join(f"{name} {errors[name][key]:.1e}" for name in errors))
    if exact_third is not None:
        later = {name: relative_error(outputs["loss"], np.float64(exact_third)) for name, outputs in third.items()}
        allowed = max(TOLERANCE, 3 * later["torch"]) if "torch" in later else TOLERANCE
        for name, error in later.items():
            if error > allowed:
                mismatches.append(f"{case.name}: {name} vs {against}: MISMATCH step 3 loss {float(third[name]['loss']):.6g}, "
                                  f"expected {float(exact_third):.6g} (error {error:.1e}, allowed {allowed:.1e})")
        notes.append(f"{case.name}: step 3 loss: {against} {float(exact_third):.6f}, "
                     + ", ".join(f"{name} {float(outputs['loss']):.6f}" for name, outputs in third.items()))
    return mismatches, notes


@dataclass
class KernelTime:
    index: int          # launch number within the call
    name: str
    global_size: str
    ms: float
    gflops: float
    gbs: float


DEBUG_KERNEL_LINE = re.compile(r"^  (?P<name>\S.*?)\s+global (?P<size>\[[^\]]*\])\s+(?P<ms>[\d.]+) ms\s+"
                               r"(?P<gflops>[\d.]+) GFLOP/s\s+(?P<gbs>[\d.]+) GB/s\s*$")


KERNEL_TIMED_CALLS = 5


def per_kernel_times(call: Callable[[], object]) -> list[KernelTime]:
    """Every kernel one call launches, with its median time over KERNEL_TIMED_CALLS calls, read from
    the lines DEBUG=2 prints to stderr (lazygrad has no programmatic per-kernel timing); a jit replay
    prints the same lines. One call alone is not enough here: a launch can take 1.5-3x its usual
    time once, on a shared machine."""
    calls = [_kernel_lines(call) for _ in range(KERNEL_TIMED_CALLS)]
    if any([kernel.name for kernel in launches] != [kernel.name for kernel in calls[0]] for launches in calls):
        return calls[0]                      # different launches each call: no launch to match up
    return [replace(kernel, ms=statistics.median(launches[kernel.index].ms for launches in calls),
                    gflops=statistics.median(launches[kernel.index].gflops for launches in calls),
                    gbs=statistics.median(launches[kernel.index].gbs for launches in calls))
            for kernel in calls[0]]


def _kernel_lines(call: Callable[[], object]) -> list[KernelTime]:
    captured = io.StringIO()
    with Context(DEBUG=2), contextlib.redirect_stderr(captured):
        call()
    kernels = []
    for line in captured.getvalue().splitlines():
        match = DEBUG_KERNEL_LINE.match(line)
        if match:
            kernels.append(KernelTime(len(kernels), match["name"], match["size"], float(match["ms"]),
                                      float(match["gflops"]), float(match["gbs"])))
    return kernels


@dataclass
class NodeTime:
    name: str
    op: str
    shape: str
    ms: float


ORT_PROFILED_RUNS = 10


def ort_options(threads: int):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # ORT's idle workers otherwise spin after each run, taking the cores from the next route:
    # measured here, torch's MobileNetV2 20 -> 50 ms and lazygrad's 61 -> 102 ms right after ORT
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def ort_node_times(path: Path, threads: int, inputs: dict) -> list[NodeTime]:
    """ONNX Runtime's own time for each node of the model, the median over ORT_PROFILED_RUNS runs
    of a session with its profiler on (a session of its own: profiling slows the timed one), in
    the order the nodes first ran; to set beside lazygrad's kernels layer by layer."""
    with tempfile.TemporaryDirectory() as directory:
        options = ort_options(threads)
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(directory) / "ort")
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for _ in range(ORT_PROFILED_RUNS):
            session.run(None, inputs)
        events = json.loads(Path(session.end_profiling()).read_text())
    times: dict[str, list[float]] = {}
    described: dict[str, tuple[str, str]] = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            name = event["name"][:-len("_kernel_time")]
            times.setdefault(name, []).append(event["dur"] / 1e3)
            arguments = event.get("args", {})
            shapes = [str(list(shape.values())[0]) for shape in arguments.get("output_type_shape", [])]
            described[name] = (arguments.get("op_name", "?"), " ".join(shapes))
    return [NodeTime(name, *described[name], statistics.median(runs)) for name, runs in times.items()]


@dataclass
class CaseResult:
    case: Case
    routes: list[Route]
    problems: list[str]
    notes: list[str] = field(default_factory=list)
    kernel_times: list[KernelTime] = field(default_factory=list)
    node_times: list[NodeTime] = field(default_factory=list)


def run_case(case: Case, args) -> CaseResult:
    rng = np.random.default_rng(args.seed)
    inputs = case.make_inputs(rng)
    reference = torch_reference(case, args.seed)
    problems: list[str] = []
    if case.training:
        exact = float64_steps(case, reference, inputs) if reference is not None else None
        routes = training_routes(case, inputs, reference, args)
    else:
        routes = inference_routes(case, inputs, reference, args, problems)
    first_outputs, third_outputs, working = {}, {}, []
    for route in routes:
        try:
            first_outputs[route.name] = route.to_numpy(route.call())   # compiles; a jit runs plainly
            route.call()                                               # a jit captures
            stats.reset()
            output = route.call()                                      # a jit replays
            if route.name in LAZYGRAD_ROUTES:
                route.kernels = stats.kernels
            third_outputs[route.name] = route.to_numpy(output)
            working.append(route)
        except Exception as error:
            problems.append(f"{case.name}: {route.name} failed: {type(error).__name__}: {error}")
            first_outputs.pop(route.name, None)
    notes = []
    if case.training:
        mismatches, notes = check_training(case, first_outputs, third_outputs, exact)
        problems += mismatches
    else:
        problems += check_inference(case, third_outputs)
    for _ in range(args.repeats):
        for route in working:
            if route.before is not None:
                route.before()
            start = time.perf_counter()
            route.call()
            route.seconds.append(time.perf_counter() - start)
    result = CaseResult(case, working, problems, notes)
    jitted = next((route for route in working if route.name == "lg jit"), None)
    if args.kernels and jitted is not None:
        result.kernel_times = per_kernel_times(jitted.call)
        if not result.kernel_times:
            problems.append(f"{case.name}: no per-kernel lines found in DEBUG=2 output (has its format changed?)")
    ort = next((route for route in working if route.node_times is not None), None)
    if args.kernels and ort is not None:
        result.node_times = ort.node_times()
    return result


# ---------------------------------------------------------------------------------------------
# Machine peak and printing
# ---------------------------------------------------------------------------------------------

def measured_matmul_gflops(threads: int) -> tuple[float, str]:
    """fp32 GFLOP/s of a 2048 matmul (torch when installed, else numpy), the median of 3 runs."""
    n = 2048
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    if torch is not None:
        ta = torch.from_numpy(a)
        seconds, _ = median_seconds(lambda: ta @ ta, 3)
        library = "torch"
    else:
        seconds, _ = median_seconds(lambda: a @ a, 3)
        library = "numpy"
    return 2 * n ** 3 / seconds / 1e9, f"a {library} {n}x{n} matmul, {threads} thread(s)"


def nominal_peak_gflops(threads: int) -> tuple[float, str] | None:
    """threads x clock x fp32 flops per cycle, from /proc/cpuinfo's clock and vector flags (two FMA
    pipes of 16 lanes with AVX-512, 8 with AVX2); None where it cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        flags = set(re.search(r"^flags\s*:(.*)$", text, re.M).group(1).split())
        megahertz = float(re.search(r"^cpu MHz\s*:\s*([\d.]+)", text, re.M).group(1))
    except (OSError, AttributeError):
        return None
    lanes, vectors = (16, "AVX-512") if "avx512f" in flags else (8, "AVX2") if {"avx2", "fma"} <= flags else (4, "SSE")
    flops_per_cycle = 2 * 2 * lanes  # two pipes, a multiply and an add per lane
    return (threads * megahertz / 1e3 * flops_per_cycle,
            f"{threads} x {megahertz / 1e3:.2f} GHz x {flops_per_cycle} flop/cycle, {vectors} FMA")


def print_table(results: list[CaseResult]) -> None:
    header = f"{'case':<14}" + "".join(f"{name:>10}" for name in ROUTES) + \
             f"{'best/ort':>10}{'best/torch':>11}  {'kernels e/j/o/oj':<18}check"
    print("times in ms (median of the timed calls)")
    print(header)
    print("-" * len(header))
    for result in results:
        median = {route.name: statistics.median(route.seconds) * 1e3 for route in result.routes if route.seconds}
        line = f"{result.case.name:<14}" + "".join(f"{median[name]:>10.2f}" if name in median else f"{'-':>10}"
                                                   for name in ROUTES)
        lazygrad_times = [median[name] for name in LAZYGRAD_ROUTES if name in median]
        best = min(lazygrad_times) if lazygrad_times else None
        for other, width in (("ort", 10), ("torch", 11)):
            line += f"{best / median[other]:>{width}.2f}" if best and other in median else f"{'-':>{width}}"
        kernels = {route.name: route.kernels for route in result.routes}
        line += "  " + f"{'/'.join(str(kernels.get(name, '-')) for name in LAZYGRAD_ROUTES):<18}"
        line += "MISMATCH" if any("MISMATCH" in problem for problem in result.problems) else \
            ("ERROR" if result.problems else "OK")
        print(line)
    for result in results:
        for line in result.problems + result.notes:
            print(f"  {line}")


def print_worst_kernels(results: list[CaseResult], peak_gflops: float, copy_gbs: float, count: int) -> None:
    print(f"\nslowest {count} kernel launches per case, median of {KERNEL_TIMED_CALLS} jit replays of the lazygrad.nn model under DEBUG=2 "
          f"(% of fp32 peak {peak_gflops:.0f} GFLOP/s and of copy bandwidth {copy_gbs:.1f} GB/s)")
    for result in results:
        if not result.kernel_times:
            continue
        total_ms = sum(kernel.ms for kernel in result.kernel_times)
        print(f"{result.case.name}: {len(result.kernel_times)} launches, {total_ms:.2f} ms in kernels")
        print(f"  {'#':>4} {'kernel':<34}{'global size':<20}{'ms':>9}{'share':>7}{'GFLOP/s':>9}{'peak':>6}"
              f"{'GB/s':>8}{'copy':>6}")
        for kernel in sorted(result.kernel_times, key=lambda kernel: -kernel.ms)[:count]:
            print(f"  {kernel.index:>4} {kernel.name:<34}{kernel.global_size:<20}{kernel.ms:>9.3f}"
                  f"{100 * kernel.ms / total_ms:>6.0f}%{kernel.gflops:>9.1f}{100 * kernel.gflops / peak_gflops:>5.0f}%"
                  f"{kernel.gbs:>8.1f}{100 * kernel.gbs / copy_gbs:>5.0f}%")
        if result.node_times:
            print_ort_nodes(result.node_times, count)


def print_ort_nodes(nodes: list[NodeTime], count: int) -> None:
    """ONNX Runtime's profile of the same model: its time per op type, then its slowest nodes."""
    total_ms = sum(node.ms for node in nodes)
    by_op: dict[str, float] = {}
    for node in nodes:
        by_op[node.op] = by_op.get(node.op, 0.0) + node.ms
    ops = ", ".join(f"{op} {ms:.2f}" for op, ms in sorted(by_op.items(), key=lambda item: -item[1]) if ms >= 0.01)
    print(f"  ONNX Runtime, its profiler ({ORT_PROFILED_RUNS} runs, median per node): {len(nodes)} nodes, "
          f"{total_ms:.2f} ms in them; by op (ms): {ops}")
    order = {id(node): index for index, node in enumerate(nodes)}
    for node in sorted(nodes, key=lambda node: -node.ms)[:count]:
        print(f"  {order[id(node)]:>4} {node.op:<22}{node.shape:<32.32}{node.ms:>9.3f}{100 * node.ms / total_ms:>6.0f}%"
              f"  {node.name}")


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------

def thread_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--threads expects positive counts like 1,2, got {text!r}")
    return counts


def run_per_thread_count(counts: list[int]) -> int:
    """Run this script once per thread count, each with OMP_NUM_THREADS set before anything loads."""
    worst = 0
    for count in counts:
        environment = dict(os.environ, OMP_NUM_THREADS=str(count), OPENBLAS_NUM_THREADS=str(count))
        command = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:], "--threads", str(count)]
        worst = max(worst, subprocess.run(command, env=environment).returncode)
        print(flush=True)
    return worst


def main() -> int:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(CASES), help=f"cases to run, from {','.join(CASES)}")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per route (median)")
    parser.add_argument("--quick", action="store_true", help="2 timed calls per route (overrides --repeats)")
    parser.add_argument("--threads", type=thread_counts, default=[usable],
                        help=f"CPU threads, or a list such as 1,2 for one run each (default {usable}: every "
                             "usable core)")
    parser.add_argument("--kernels", type=int, default=5, help="slowest kernels to list per case (0: none)")
    parser.add_argument("--no-onnx", action="store_true", help="skip the onnx, onnx jit and ort routes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--onnx-dir", default=str(Path(tempfile.gettempdir()) / "lazygrad_bench_models"),
                        help="where exported .onnx files are cached")
    args = parser.parse_args()
    unknown = [name for name in args.only.split(",") if name not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if len(args.threads) > 1 or os.environ.get("OMP_NUM_THREADS") != str(args.threads[0]):
        return run_per_thread_count(args.threads)
    if args.quick:
        args.repeats = 2
    threads = args.threads[0]
    if torch is not None:
        torch.set_num_threads(threads)

    print(f"machine : {cpu_model()}, {usable} usable cores; {threads} thread(s) (OMP_NUM_THREADS={threads})")
    print(f"versions: torch {torch.__version__ if torch else 'not installed'}, onnxruntime "
          f"{onnxruntime.__version__ if onnxruntime else 'not installed'}, lazygrad.onnx "
          f"{'available' if OnnxModel else 'unavailable (pip install onnx)'}")
    matmul_gflops, matmul_how = measured_matmul_gflops(threads)
    nominal = nominal_peak_gflops(threads)
    copy_gbs = bench_copy(args.repeats)
    if nominal is not None:
        peak_gflops = nominal[0]
        print(f"fp32 peak: {peak_gflops:.0f} GFLOP/s nominal ({nominal[1]}); {matmul_how} reaches {matmul_gflops:.0f}")
    else:
        peak_gflops = matmul_gflops
        print(f"fp32 peak: {peak_gflops:.0f} GFLOP/s measured ({matmul_how}); /proc/cpuinfo unreadable")
    print(f"memory  : {copy_gbs:.1f} GB/s (numpy copy of 64 MiB, one thread)")
    print(f"timing  : 3 untimed calls per route, then the median of {args.repeats} rounds of every route in turn\n",
          flush=True)
    results = []
    for name in args.only.split(","):
        for case in CASES[name]:
            print(f"  running {case.name} ...", file=sys.stderr, flush=True)
            results.append(run_case(case, args))
    print_table(results)
    if args.kernels:
        print_worst_kernels(results, peak_gflops, copy_gbs, args.kernels)
    return 1 if any(result.problems for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
