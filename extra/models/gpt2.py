"""GPT-2 (Radford et al., "Language Models are Unsupervised Multitask Learners") for any PyTorch-style
`nn`, by default of the 124M model's size, and text generation (greedy or sampled) with a KV cache.

    model = gpt2(lazygrad.nn).eval()                   # or gpt2(torch.nn)
    logits = model(input_ids)                          # (batch, tokens, vocabulary)
    tokens = generate(model, prompt_ids, 32)           # the prompt and 32 greedy continuations
    tokens = generate(model, prompt_ids, 32, temperature=0.8)   # sampled (seed: lazygrad.manual_seed)
    generator = Generator(model, batch=1, max_length=256)        # lazygrad, to generate again and again:
    tokens = generator.generate(prompt_ids, 32)                  # its prompt and token steps stay captured

The layout and parameter names are Hugging Face's `GPT2LMHeadModel`: `transformer` holds `wte`
(token embeddings), `wpe` (position embeddings), blocks `h.N` of `ln_1`, `attn` (`c_attn` making
query, key and value in one matmul, `c_proj`), `ln_2` and `mlp` (`c_fc`, GELU's tanh form, `c_proj`),
each sublayer pre-normalized inside its residual add, then `ln_f`; `lm_head` shares `wte`'s weight.
Hugging Face stores c_attn, c_proj and c_fc as Conv1D, weight (in, out); here they are Linear, weight
(out, in): `from_hugging_face` transposes a GPT2LMHeadModel state dict for `load_state_dict`.

Generation keeps each layer's keys and values so that a new token attends to the earlier ones
without computing them again. Two caches, one interface (`update`):
  DynamicCache  grows by concatenation each call (Hugging Face's default; any namespace)
  StaticCache   lazygrad: buffers of max_length positions per layer, written in place at the call's
                positions (`assign` of a select, which the engine stores as one row, not a pass over
                the cache). Every call attends over all max_length positions, those not yet written
                masked, so shapes never change and a jitted decoding step replays.
A Generator keeps a StaticCache and its jitted steps across calls, prompts padded to a multiple of
32 tokens so that nearby lengths share a capture.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .bert import _creation_functions  # torch for torch.nn, lazygrad's Tensor for lazygrad.nn


@dataclass(frozen=True)
class GPT2Config:
    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    layer_norm_epsilon: float = 1e-5
    dropout: float = 0.1

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


class DynamicCache:
    """Each layer's keys and values of every token so far, (batch, heads, tokens, head size), grown
    by concatenation on every call: shapes change with each token."""

    def __init__(self, config: GPT2Config, creation):
        self.keys: list = [None] * config.n_layer
        self.values: list = [None] * config.n_layer
        self.creation = creation

    def update(self, layer: int, key, value, positions):
        """(keys, values, their positions) to attend over, this call's included."""
        if self.keys[layer] is not None:
            key = self.creation.cat([self.keys[layer], key], dim=2)
            value = self.creation.cat([self.values[layer], value], dim=2)
        if hasattr(key, "realize"):  # lazygrad: stored now, else each call's kernels read a chain of concatenations
            key, value = key.realize(), value.realize()
        self.keys[layer], self.values[layer] = key, value
        return key, value, self.creation.arange(key.shape[2], device=key.device)


class StaticCache:
    """Each layer's keys and values in realized buffers of `max_length` positions, written in place
    (lazygrad's `assign`) at the positions of each call, which must be consecutive. Positions past
    max_length are not written: `generate` checks the length first."""

    def __init__(self, config: GPT2Config, batch: int, max_length: int, device=None):
        from lazygrad import Tensor
        shape = (batch, config.n_head, max_length, config.head_size)
        self.keys = [Tensor.zeros(*shape, device=device).contiguous().realize() for _ in range(config.n_layer)]
        self.values = [Tensor.zeros(*shape, device=device).contiguous().realize() for _ in range(config.n_layer)]
        self.key_positions = Tensor.arange(max_length, device=device)
        self.max_length = max_length

    def update(self, layer: int, key, value, positions):
        tokens = key.shape[2]
        offset = self.key_positions - positions[:1]          # where each slot sits from the call's first position
        here = ((offset >= 0) & (offset < tokens)).reshape(1, 1, self.max_length, 1)
        if tokens > 1:                                        # slot j takes token j - first position
            index = offset.clip(0, tokens - 1)
            key, value = key[:, :, index], value[:, :, index]
        self.keys[layer].assign(here.where(key, self.keys[layer]))
        self.values[layer].assign(here.where(value, self.values[layer]))
        return self.keys[layer], self.values[layer], self.key_positions


@functools.cache
def _classes(nn):
    """The GPT2LMHeadModel classes built on `nn` (lazygrad.nn or torch.nn), once per namespace."""
    creation = _creation_functions(nn)

    class GPT2Attention(nn.Module):
        def __init__(self, config: GPT2Config, layer: int):
            super().__init__()
            self.layer, self.n_head, self.head_size = layer, config.n_head, config.head_size
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd)
            self.attn_dropout = nn.Dropout(config.dropout)
            self.resid_dropout = nn.Dropout(config.dropout)

        def forward(self, hidden, positions, cache):
            batch, tokens, width = hidden.shape
            query, key, value = [part.reshape(batch, tokens, self.n_head, self.head_size).transpose(1, 2)
                                 for part in self.c_attn(hidden).split(width, dim=-1)]
            key_positions = positions
            if cache is not None:
                key, value, key_positions = cache.update(self.layer, key, value, positions)
            # causal: a query attends to the keys at its position and before (and never to a cache
            # slot not yet written, whose position is later)
            allowed = key_positions.reshape(1, -1) <= positions.reshape(-1, 1)
            scores = (query @ key.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_size))
            scores = scores.masked_fill(allowed.logical_not(), float("-inf"))
            context = self.attn_dropout(scores.softmax(-1)) @ value
            return self.resid_dropout(self.c_proj(context.transpose(1, 2).reshape(batch, tokens, width)))

    class GPT2MLP(nn.Module):
        def __init__(self, config: GPT2Config):
            super().__init__()
            self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
            self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
            self.act = nn.GELU(approximate="tanh")
            self.dropout = nn.Dropout(config.dropout)

        def forward(self, hidden):
            return self.dropout(self.c_proj(self.act(self.c_fc(hidden))))

    class GPT2Block(nn.Module):
        def __init__(self, config: GPT2Config, layer: int):
            super().__init__()
            self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
            self.attn = GPT2Attention(config, layer)
            self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
            self.mlp = GPT2MLP(config)

        def forward(self, hidden, positions, cache):
            hidden = hidden + self.attn(self.ln_1(hidden), positions, cache)
            return hidden + self.mlp(self.ln_2(hidden))

    class GPT2Model(nn.Module):
        def __init__(self, config: GPT2Config):
            super().__init__()
            self.wte = nn.Embedding(config.vocab_size, config.n_embd)
            self.wpe = nn.Embedding(config.n_positions, config.n_embd)
            self.drop = nn.Dropout(config.dropout)
            self.h = nn.ModuleList([GPT2Block(config, layer) for layer in range(config.n_layer)])
            self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

        def forward(self, input_ids, positions, cache):
            hidden = self.drop(self.wte(input_ids) + self.wpe(positions))
            for block in self.h:
                hidden = block(hidden, positions, cache)
            return self.ln_f(hidden)

    class GPT2LMHeadModel(nn.Module):
        def __init__(self, config: GPT2Config):
            super().__init__()
            self.config = config
            self.transformer = GPT2Model(config)
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.lm_head.weight = self.transformer.wte.weight   # tied, as GPT-2 is trained

        def forward(self, input_ids, positions=None, cache=None, last_only: bool = False):
            """Logits (batch, tokens, vocabulary), or (batch, 1, vocabulary) for the last token
            with last_only. positions: the tokens' consecutive positions, a (tokens,) integer
            tensor, 0.. by default; cache: a DynamicCache or StaticCache to read and extend."""
            if positions is None:
                positions = creation.arange(input_ids.shape[1], device=input_ids.device)
            hidden = self.transformer(input_ids, positions, cache)
            return self.lm_head(hidden[:, -1:] if last_only else hidden)

    return GPT2LMHeadModel


def gpt2(nn, config: GPT2Config | None = None):
    """A GPT2LMHeadModel in the namespace `nn` (lazygrad.nn or torch.nn), of the 124M model's size
    unless `config` says otherwise (12 layers, width 768, 12 heads, 1024 positions), in training
    mode as built."""
    return _classes(nn)(config or GPT2Config())


CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def from_hugging_face(state: dict) -> dict:
    """A Hugging Face GPT-2 state dict (numpy arrays, or tensors with `.numpy()`: torch's, or
    lazygrad's from `safe_load("model.safetensors")`) as numpy arrays for this model's
    `load_state_dict`: Conv1D weights transposed, the attention's constant `bias` masks dropped,
    GPT2Model's names (the hub checkpoint's `h.0.attn...`) under `transformer.`, and the head tied
    to the token embeddings where the checkpoint leaves it out."""
    converted = {}
    for name, value in state.items():
        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
            continue
        if not name.startswith(("transformer.", "lm_head.")):
            name = "transformer." + name
        converted[name] = array.T.copy() if name.endswith(CONV1D_WEIGHTS) else array
    converted.setdefault("lm_head.weight", converted["transformer.wte.weight"])
    return converted


def _is_torch(model) -> bool:
    return type(model.lm_head.weight).__module__.startswith("torch")


def next_tokens(logits, temperature: float, creation):
    """The next token of each row of logits (batch, 1, vocabulary), (batch, 1): the most likely one
    at temperature 0, else one drawn from softmax(logits / temperature) by the Gumbel-max trick
    (argmax of logits / temperature plus -log(-log(u)) for uniform u): no sort or cumulative sum over
    the vocabulary, and under lazygrad's jit the uniforms are drawn anew on every replay."""
    if temperature == 0:
        return logits.argmax(-1)
    uniform = creation.rand(*logits.shape, device=logits.device)
    return (logits / temperature - (-uniform.log()).log()).argmax(-1)


def _checked_prompt(prompt_ids, new_tokens: int, temperature: float, max_length: int, positions: int) -> np.ndarray:
    prompt = np.asarray(prompt_ids, dtype=np.int64)
    if prompt.ndim != 2 or prompt.shape[1] == 0:
        raise ValueError(f"generate: prompt_ids must be (batch, tokens) with at least one token, got shape {prompt.shape}")
    if not temperature >= 0:
        raise ValueError(f"generate: temperature must be 0 (greedy) or positive, got {temperature}")
    if prompt.shape[1] + new_tokens > min(max_length, positions):
        raise ValueError(f"generate: {prompt.shape[1]} prompt tokens and {new_tokens} new ones exceed max_length "
                         f"{max_length} (the model has {positions} positions)")
    return prompt


def generate(model, prompt_ids, new_tokens: int, max_length: int | None = None, temperature: float = 0.0) -> np.ndarray:
    """The prompt (batch, tokens) of token ids followed by `new_tokens` continuations, as an int64
    array: greedy at temperature 0, else sampled (`next_tokens`; seeded by lazygrad.manual_seed or
    torch.manual_seed). On lazygrad: a Generator with a StaticCache of max_length positions (the
    prompt and the new tokens by default), used once; on torch: a DynamicCache under inference_mode.
    To generate again and again on lazygrad, keep a Generator: its steps stay captured."""
    total = np.shape(prompt_ids)[-1] + new_tokens if np.ndim(prompt_ids) == 2 else 1
    max_length = total if max_length is None else max_length
    if not _is_torch(model):
        batch = np.shape(prompt_ids)[0] if np.ndim(prompt_ids) == 2 else 1
        return Generator(model, batch, max_length, prompt_bucket=1).generate(prompt_ids, new_tokens, temperature)
    prompt = _checked_prompt(prompt_ids, new_tokens, temperature, max_length, model.config.n_positions)
    steps = torch_steps(model, prompt, temperature)
    return np.concatenate([prompt] + [next(steps) for _ in range(new_tokens)], axis=1)


def torch_steps(model, prompt: np.ndarray, temperature: float = 0.0):
    """Each next token (batch, 1), computed by torch with a DynamicCache."""
    import torch
    cache = DynamicCache(model.config, torch)
    ids, start = torch.from_numpy(prompt), 0
    while True:
        with torch.inference_mode():  # per call: a generator must not hold a mode across its yields
            positions = torch.arange(start, start + ids.shape[1])
            ids = next_tokens(model(ids, positions, cache, last_only=True), temperature, torch)
        start += positions.shape[0]
        yield ids.numpy()


class Generator:
    """Generation on lazygrad that keeps one StaticCache and its jitted steps from call to call.

        generator = Generator(model, batch=1, max_length=256)
        tokens = generator.generate(prompt_ids, 32)            # again and again, any prompt length

    Each new token is one call of a jitted step (arguments: the token, its position, and which row
    of the hidden states to read); a prompt is one call too, padded with zeros to a multiple of
    `prompt_bucket` tokens, so prompts of nearby lengths share its capture (the jit runs a step
    plainly, captures the second call and replays from the third). The padding's keys land in cache
    slots after the prompt: no query attends to a slot after its own position, and each new token
    writes its slot before attending, so they are never read."""

    def __init__(self, model, batch: int, max_length: int | None = None, prompt_bucket: int = 32):
        self.model, self.batch = model, batch
        self.max_length = model.config.n_positions if max_length is None else max_length
        self.prompt_bucket = prompt_bucket
        self.device = model.lm_head.weight.device
        self.cache = StaticCache(model.config, batch, self.max_length, device=self.device)
        self.steps: dict = {}  # (tokens per call, temperature) -> its jitted step

    def _step(self, tokens: int, temperature: float):
        key = (tokens, temperature)
        if key not in self.steps:
            from lazygrad import Tensor
            from lazygrad.jit import jit

            def step(ids, positions, last):  # last: (1,), the row whose logits choose the next token
                hidden = self.model.transformer(ids, positions, self.cache)
                logits = self.model.lm_head(hidden[:, last])
                return next_tokens(logits, temperature, Tensor).realize()
            self.steps[key] = jit(step)
        return self.steps[key]

    def _call(self, ids: np.ndarray, start: int, last: int, temperature: float):
        from lazygrad import Tensor, no_grad
        tokens = ids.shape[1]
        with no_grad():
            return self._step(tokens, temperature)(
                Tensor(ids, device=self.device), Tensor(np.arange(start, start + tokens), device=self.device),
                Tensor(np.array([last]), device=self.device))

    def stream(self, prompt_ids, temperature: float = 0.0):
        """Each next token (batch, 1) after the prompt (batch, tokens), one per `next()`, for as
        long as the cache has room."""
        prompt = _checked_prompt(prompt_ids, 0, temperature, self.max_length, self.model.config.n_positions)
        if prompt.shape[0] != self.batch:
            raise ValueError(f"generate: prompt_ids has {prompt.shape[0]} rows; this Generator's cache holds {self.batch}")
        length = prompt.shape[1]
        padded = min(-(-length // self.prompt_bucket) * self.prompt_bucket, self.max_length)
        ids = np.zeros((self.batch, padded), np.int64)
        ids[:, :length] = prompt
        token = self._call(ids, 0, length - 1, temperature).numpy().astype(np.int64)
        for position in range(length, self.max_length):
            yield token
            token = self._call(token, position, 0, temperature).numpy().astype(np.int64)
        yield token

    def generate(self, prompt_ids, new_tokens: int, temperature: float = 0.0) -> np.ndarray:
        """The prompt followed by `new_tokens` tokens, as `generate` returns them."""
        prompt = _checked_prompt(prompt_ids, new_tokens, temperature, self.max_length, self.model.config.n_positions)
        steps = self.stream(prompt, temperature)
        return np.concatenate([prompt] + [next(steps) for _ in range(new_tokens)], axis=1)
