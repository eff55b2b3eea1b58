"""GPT-2 (extra/models/gpt2.py) with its KV caches: decoding token by token through a StaticCache
(eagerly and jitted) or a DynamicCache gives the logits of a full forward pass over the whole
sequence, greedy generation gives the tokens of greedy full passes, and with torch installed the
same weights give torch's logits and tokens."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import lazygrad.nn
from lazygrad import Context, Tensor, manual_seed, no_grad
from lazygrad.jit import jit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from ops_helpers import available_devices, device_params  # noqa: E402
from extra.models.gpt2 import (DynamicCache, GPT2Config, Generator, StaticCache, from_hugging_face,  # noqa: E402
                               generate, gpt2)

CONFIG = GPT2Config(vocab_size=97, n_positions=32, n_embd=48, n_layer=2, n_head=3)


def random_weights(model, seed=0) -> dict[str, np.ndarray]:
    """Weights large enough that greedy decoding does not repeat one token: layer norms near 1,
    everything else normal with a deviation of 0.3."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, value in model.state_dict().items():
        if ".ln_" in name or name.startswith("transformer.ln_f"):
            weights[name] = (1.0 if name.endswith("weight") else 0.0) + rng.normal(0, 0.1, value.shape)
        else:
            weights[name] = rng.normal(0, 0.3, value.shape)
    weights["lm_head.weight"] = weights["transformer.wte.weight"]
    return {name: value.astype(np.float32) for name, value in weights.items()}


@pytest.fixture(scope="module")
def model_and_weights():
    model = gpt2(lazygrad.nn, CONFIG).eval()
    weights = random_weights(model)
    model.load_state_dict({name: Tensor(value) for name, value in weights.items()})
    return model, weights


def full_logits(model, ids: np.ndarray) -> np.ndarray:
    with no_grad():
        return model(Tensor(ids)).numpy()


def test_the_lm_head_is_tied_to_the_token_embeddings(model_and_weights):
    model, _ = model_and_weights
    assert model.lm_head.weight is model.transformer.wte.weight


@pytest.mark.parametrize("cache_kind", ["static", "static jitted", "dynamic"])
def test_decoding_with_a_cache_gives_a_full_pass_s_logits(model_and_weights, cache_kind):
    model, _ = model_and_weights
    ids = np.random.default_rng(1).integers(0, CONFIG.vocab_size, (2, 11))
    expected = full_logits(model, ids)
    cache = StaticCache(CONFIG, 2, 16) if cache_kind.startswith("static") else DynamicCache(CONFIG, Tensor)

    def step(chunk, positions):
        return model(chunk, positions, cache).realize()

    one_token = jit(step) if cache_kind.endswith("jitted") else step
    # a prompt of 5, six tokens one at a time, then a chunk of 2 at an offset (the gathered write)
    with no_grad():
        got = [step(Tensor(ids[:, :5]), Tensor.arange(5)).numpy()]
        for position in range(5, 9):
            got.append(one_token(Tensor(ids[:, position:position + 1]), Tensor(np.array([position]))).numpy())
        got.append(step(Tensor(ids[:, 9:11]), Tensor.arange(9, 11)).numpy())
    np.testing.assert_allclose(np.concatenate(got, axis=1), expected, rtol=2e-4, atol=2e-4)


def test_a_static_cache_written_again_from_the_start_forgets_the_old_tokens(model_and_weights):
    model, _ = model_and_weights
    rng = np.random.default_rng(2)
    first, second = rng.integers(0, CONFIG.vocab_size, (1, 9)), rng.integers(0, CONFIG.vocab_size, (1, 4))
    cache = StaticCache(CONFIG, 1, 12)
    with no_grad():
        model(Tensor(first), Tensor.arange(9), cache).realize()
        again = model(Tensor(second), Tensor.arange(4), cache).numpy()  # slots 4..8 still hold `first`'s keys
    np.testing.assert_allclose(again, full_logits(model, second), rtol=2e-4, atol=2e-4)


def test_greedy_generation_gives_the_tokens_of_greedy_full_passes(model_and_weights):
    model, _ = model_and_weights
    prompt = np.random.default_rng(3).integers(0, CONFIG.vocab_size, (2, 4))
    tokens = generate(model, prompt, 10, max_length=20)
    assert tokens.shape == (2, 14) and tokens.dtype == np.int64
    np.testing.assert_array_equal(tokens[:, :4], prompt)
    assert len(np.unique(tokens[:, 4:])) > 3, "the check needs a model that does not repeat one token"
    np.testing.assert_array_equal(tokens, greedy_by_full_passes(model, prompt, 10))


def greedy_by_full_passes(model, prompt: np.ndarray, new_tokens: int) -> np.ndarray:
    sequence = prompt
    for _ in range(new_tokens):
        sequence = np.concatenate([sequence, full_logits(model, sequence)[:, -1:].argmax(-1)], axis=1)
    return sequence


def test_a_generator_reused_across_prompts_replays_its_captured_steps(model_and_weights):
    model, _ = model_and_weights
    generator = Generator(model, 2, max_length=24, prompt_bucket=8)
    rng = np.random.default_rng(9)
    for length in (5, 7, 3, 12, 6):  # all but 12 padded to 8 tokens: one capture serves them
        prompt = rng.integers(0, CONFIG.vocab_size, (2, length))
        np.testing.assert_array_equal(generator.generate(prompt, 6), greedy_by_full_passes(model, prompt, 6))
    assert generator.steps[(8, 0.0)].replay is not None and generator.steps[(1, 0.0)].replay is not None
    assert set(generator.steps) == {(8, 0.0), (16, 0.0), (1, 0.0)}
    with pytest.raises(ValueError, match="3 rows; this Generator's cache holds 2"):
        generator.generate(np.zeros((3, 4)), 1)


def test_sampling_draws_from_the_softmax_of_the_logits_over_the_temperature(model_and_weights):
    model, _ = model_and_weights
    prompt = np.repeat(np.random.default_rng(6).integers(0, CONFIG.vocab_size, (1, 4)), 4000, axis=0)
    manual_seed(0)
    drawn = generate(model, prompt, 1, temperature=1.5)[:, -1]
    logits = full_logits(model, prompt[:1])[0, -1].astype(np.float64) / 1.5
    probabilities = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    frequencies = np.bincount(drawn, minlength=CONFIG.vocab_size) / len(drawn)
    assert probabilities.max() < 0.5, "the check needs a spread distribution"
    np.testing.assert_allclose(frequencies, probabilities, atol=0.03)  # 6 standard deviations at most


def test_sampling_follows_the_seed_on_every_replayed_step(model_and_weights):
    model, _ = model_and_weights
    prompt = np.random.default_rng(7).integers(0, CONFIG.vocab_size, (2, 3))
    runs = []
    for seed in (1, 1, 2):
        manual_seed(seed)
        runs.append(generate(model, prompt, 12, temperature=2.0))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])
    assert len(np.unique(runs[0][:, 6:])) > 4, "the replayed steps draw new uniforms each call"
    with pytest.raises(ValueError, match="temperature must be 0 .* got -1"):
        generate(model, prompt, 1, temperature=-1)


@pytest.mark.parametrize("device", device_params([device for device in available_devices() if device != "CPU"]))
def test_generation_on_another_device_gives_the_cpu_s_tokens(model_and_weights, device):
    model, weights = model_and_weights
    with Context(DEV=device):
        elsewhere = gpt2(lazygrad.nn, CONFIG).eval()
        elsewhere.load_state_dict({name: Tensor(value) for name, value in weights.items()})
    assert elsewhere.lm_head.weight.device.startswith(device)
    prompt = np.random.default_rng(10).integers(0, CONFIG.vocab_size, (2, 4))
    np.testing.assert_array_equal(generate(elsewhere, prompt, 8), generate(model, prompt, 8))


def test_generation_checks_its_length():
    model = gpt2(lazygrad.nn, CONFIG).eval()
    with pytest.raises(ValueError, match=r"4 prompt tokens and 10 new ones exceed max_length 12"):
        generate(model, np.zeros((1, 4)), 10, max_length=12)
    with pytest.raises(ValueError, match="exceed max_length 40 .*32 positions"):
        generate(model, np.zeros((1, 30)), 10, max_length=40)
    with pytest.raises(ValueError, match=r"\(batch, tokens\).*\(5,\)"):
        generate(model, np.zeros(5), 1)


def test_a_hugging_face_state_dict_loads_transposed():
    model = gpt2(lazygrad.nn, CONFIG)
    ours = random_weights(model, seed=4)
    theirs = {name: value.T if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")) else value
              for name, value in ours.items()}
    theirs["transformer.h.0.attn.bias"] = np.tril(np.ones((1, 1, 32, 32), np.float32))  # older checkpoints' mask
    converted = from_hugging_face(theirs)
    assert converted.keys() == ours.keys()
    for name, value in ours.items():
        np.testing.assert_array_equal(converted[name], value)
    # the hub's checkpoint: GPT2Model's names, no head
    hub = {name.removeprefix("transformer."): value for name, value in theirs.items() if name != "lm_head.weight"}
    converted = from_hugging_face(hub)
    assert converted.keys() == ours.keys()
    np.testing.assert_array_equal(converted["lm_head.weight"], ours["transformer.wte.weight"])
    model.load_state_dict({name: Tensor(value) for name, value in converted.items()})
    np.testing.assert_array_equal(model.transformer.h[1].mlp.c_fc.weight.numpy(), ours["transformer.h.1.mlp.c_fc.weight"])


def test_against_torch(model_and_weights):
    torch = pytest.importorskip("torch", reason="torch is not installed: GPT-2 is not cross-checked")
    model, weights = model_and_weights
    reference = gpt2(torch.nn, CONFIG).eval()
    reference.load_state_dict({name: torch.from_numpy(value) for name, value in weights.items()})
    ids = np.random.default_rng(5).integers(0, CONFIG.vocab_size, (2, 9))
    with torch.inference_mode():
        expected = reference(torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(full_logits(model, ids), expected, rtol=2e-4, atol=2e-4)
    prompt = ids[:, :3]
    np.testing.assert_array_equal(generate(model, prompt, 8), generate(reference, prompt, 8))
    sampled = []
    for _ in range(2):  # torch's stream: reproducible with its seed
        torch.manual_seed(3)
        sampled.append(generate(reference, prompt, 8, temperature=1.0))
    np.testing.assert_array_equal(sampled[0], sampled[1])
    assert sampled[0].min() >= 0 and sampled[0].max() < CONFIG.vocab_size
