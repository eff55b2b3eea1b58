"""Text generation benchmark: GPT-2 (124M, extra/models/gpt2.py, random weights) decoding greedily,
lazygrad against PyTorch eager, on the CPU at a chosen thread count.

    python extra/bench/bench_generate.py                        # 2 threads, prompt 32, 64 new tokens
    python extra/bench/bench_generate.py --threads 1 --prompt 128 --tokens 32 --rounds 3

Routes (columns)
  lg jit      extra/models/gpt2.generate: a StaticCache of prompt + tokens positions, the prompt in
              one eager call, then one jitted call per token (the token and its position are its
              arguments; every shape is fixed, so the capture replays)
  lg kept     a gpt2.Generator kept from round to round (as a server would keep it): its prompt
              step and its token step are captured once and replayed in every later round
  lg eager    the same calls through a StaticCache, each token's step run plainly: the graph is
              built and its schedule looked up every token (the memo hits: the shapes never change)
  lg dynamic  a DynamicCache, plainly: the cache grows by concatenation, so each token's attention
              kernels have new shapes and compile (only --dynamic-tokens tokens: it is slow)
  torch       PyTorch eager under inference_mode with a DynamicCache (Hugging Face's default)
  lg int8     lg kept on the model after lazygrad.quantize.quantize (every Linear, the tied head
              included, with int8 weights per output channel and int8 inputs per call)
  torch int8  torch on the model after torch.ao.quantization.quantize_dynamic (the same scheme on
              its Linears; deprecated in torch 2.10+, skipped where it fails)

What is timed: "prompt" is the first call (the prompt's forward pass and its first token), warm
(each route runs once untimed first, compiling); "per token" is the median time of the calls after
it, each producing one token, read back to the host. Rounds alternate the routes so machine noise
falls on all alike; medians over rounds are printed. Checked: every float32 route produces torch's
tokens (with torch installed; else lg jit's), and the prompt's last logits agree with torch's within
1e-3; the int8 routes' share of the same tokens is printed, not checked (rounding may change a choice).
ONNX Runtime is not a column: running GPT-2 there with a KV cache needs an export with the cache as
graph inputs and outputs of growing shape, which this repository does not make.

Threads: lazygrad's kernels read OMP_NUM_THREADS once, so the script runs itself again with it set
when it differs from --threads; torch gets torch.set_num_threads.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # lazygrad and extra.models from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

import lazygrad.nn  # noqa: E402
import lazygrad.quantize  # noqa: E402
from bench_core import cpu_model  # noqa: E402
from extra.models.gpt2 import DynamicCache, GPT2Config, Generator, StaticCache, generate, gpt2, torch_steps  # noqa: E402
from lazygrad import Tensor, no_grad  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


def timed_tokens(steps, count: int) -> tuple[list[float], np.ndarray]:
    """Seconds for each of `count` next() calls of a token generator, and the tokens."""
    times, tokens = [], []
    for _ in range(count):
        start = time.perf_counter()
        tokens.append(next(steps))
        times.append(time.perf_counter() - start)
    return times, np.concatenate(tokens, axis=1)


def plain_steps(model, prompt: np.ndarray, max_length: int, dynamic: bool = False):
    """Token by token as a Generator steps, each call run plainly (no jit), through a StaticCache or
    a DynamicCache."""
    cache = DynamicCache(model.config, Tensor) if dynamic else StaticCache(model.config, prompt.shape[0], max_length)
    ids, start = prompt, 0
    while True:
        with no_grad():
            positions = Tensor.arange(start, start + ids.shape[1])
            ids = model(Tensor(ids), positions, cache, last_only=True).argmax(-1).numpy().astype(np.int64)
        start += positions.shape[0]
        yield ids


def torch_int8(reference):
    """torch's dynamically quantized copy of the model (int8 Linears), or None where torch lacks it."""
    import warnings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.ao.quantization import quantize_dynamic
            return quantize_dynamic(copy.deepcopy(reference), {torch.nn.Linear}, dtype=torch.qint8)
    except Exception as error:  # removed or unsupported in this torch build
        print(f"torch int8 skipped: {type(error).__name__}: {error}")
        return None


def build_models(seed: int):
    """The lazygrad model, its int8 copy and, with torch, the torch model with the same weights
    (normal with a deviation of 0.02 for matrices and embeddings, as GPT-2 was initialized)."""
    config = GPT2Config()
    model = gpt2(lazygrad.nn, config).eval()
    rng = np.random.default_rng(seed)
    weights = {}
    for name, value in model.state_dict().items():
        if name == "lm_head.weight":
            continue
        if value.ndim == 1:
            weights[name] = np.ones(value.shape, np.float32) if ".ln_" in name or "ln_f.weight" in name else \
                np.zeros(value.shape, np.float32)
        else:
            weights[name] = rng.normal(0, 0.02, value.shape).astype(np.float32)
    if "transformer.ln_f.weight" in weights:
        weights["transformer.ln_f.weight"] = np.ones_like(weights["transformer.ln_f.weight"])
    weights["lm_head.weight"] = weights["transformer.wte.weight"]
    model.load_state_dict({name: Tensor(value) for name, value in weights.items()})
    quantized = gpt2(lazygrad.nn, config).eval()
    quantized.load_state_dict({name: Tensor(value) for name, value in weights.items()})
    lazygrad.quantize.quantize(quantized)
    reference = None
    if torch is not None:
        reference = gpt2(torch.nn, config).eval()
        reference.load_state_dict({name: torch.from_numpy(value) for name, value in weights.items()})
    return model, quantized, reference


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens (batch 1)")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per route and round")
    parser.add_argument("--dynamic-tokens", type=int, default=8, help="new tokens of the lg dynamic route (0: skip it)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if os.environ.get("OMP_NUM_THREADS") != str(args.threads):
        environment = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
        return subprocess.call([sys.executable, *sys.argv], env=environment)
    if torch is not None:
        torch.set_num_threads(args.threads)
    print(f"machine : {cpu_model()}, {args.threads} thread(s); load average {os.getloadavg()[0]:.2f}")
    print(f"case    : GPT-2 124M, batch 1, prompt {args.prompt} tokens, {args.tokens} new tokens, greedy")
    model, quantized, reference = build_models(args.seed)
    prompt = np.random.default_rng(args.seed + 1).integers(0, 50257, (1, args.prompt))
    length = args.prompt + args.tokens
    kept = Generator(model, 1, length)
    routes = {
        "lg jit": lambda count: Generator(model, 1, length, prompt_bucket=1).stream(prompt),  # generate()'s path
        "lg kept": lambda count: kept.stream(prompt),
        "lg eager": lambda count: plain_steps(model, prompt, length),
    }
    if args.dynamic_tokens:
        routes["lg dynamic"] = lambda count: plain_steps(model, prompt, length, dynamic=True)
    if reference is not None:
        routes["torch"] = lambda count: torch_steps(reference, prompt)
    kept_int8 = Generator(quantized, 1, length)
    routes["lg int8"] = lambda count: kept_int8.stream(prompt)
    reference_int8 = torch_int8(reference) if reference is not None else None
    if reference_int8 is not None:
        reference_int8.config = reference.config
        routes["torch int8"] = lambda count: torch_steps(reference_int8, prompt)
    counts = {name: args.dynamic_tokens if name == "lg dynamic" else args.tokens for name in routes}

    failures = 0
    expected = generate(reference if reference is not None else model, prompt, args.tokens)[:, args.prompt:]
    if reference is not None:
        with no_grad():
            ours = model(Tensor(prompt), last_only=True).numpy()
        with torch.inference_mode():
            theirs = reference(torch.from_numpy(prompt), last_only=True).numpy()
        if not np.allclose(ours, theirs, rtol=1e-3, atol=1e-3):
            print(f"MISMATCH prompt logits: largest difference {np.abs(ours - theirs).max():.3g}")
            failures += 1
    for _ in range(2):  # untimed: compiles every route's kernels (and captures the kept Generator's prompt)
        for name, start in routes.items():
            timed_tokens(start(counts[name]), min(counts[name], 3))
    prompts: dict[str, list[float]] = {name: [] for name in routes}
    per_token: dict[str, list[float]] = {name: [] for name in routes}
    agreement: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, start in routes.items():
            times, tokens = timed_tokens(start(counts[name]), counts[name] + 1)
            prompts[name].append(times[0])
            per_token[name].append(statistics.median(times[1:]))
            if name.endswith("int8"):
                agreement[name] = float((tokens[:, :counts[name]] == expected[:, :counts[name]]).mean())
            elif not np.array_equal(tokens[:, :counts[name]], expected[:, :counts[name]]):
                print(f"MISMATCH {name}: its tokens differ from {'torch' if reference is not None else 'lg jit'}'s")
                failures += 1

    print(f"\n{'route':<12}{'prompt ms':>12}{'ms/token':>12}{'tokens/s':>12}{'vs torch':>10}")
    torch_token = statistics.median(per_token["torch"]) if "torch" in routes else None
    for name in routes:
        token = statistics.median(per_token[name])
        ratio = f"{token / torch_token:.2f}" if torch_token else "-"
        print(f"{name:<12}{1000 * statistics.median(prompts[name]):>12.1f}{1000 * token:>12.2f}{1 / token:>12.1f}{ratio:>10}")
    print("(vs torch: ms/token over torch's float32 route; above 1 the route is slower)")
    for name, share in agreement.items():
        print(f"{name}: {100 * share:.0f}% of its tokens are the float32 route's")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
