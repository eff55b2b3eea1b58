"""Writes extra/minilm_reference.npz: sentence-transformers' own embeddings of the 50 sentences of
extra/minilm_sentences.txt with all-MiniLM-L6-v2, which test/models/test_minilm.py compares lazygrad's
with when sentence-transformers is not installed. Run once where it is (it needs torch too):

    pip install sentence-transformers && python extra/make_minilm_reference.py
"""
import sys
from pathlib import Path

import numpy as np
from sentence_transformers import SentenceTransformer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from minilm import SAMPLE, model_directory  # noqa: E402


def main() -> None:
    sentences = SAMPLE.read_text(encoding="utf-8").splitlines()
    model = SentenceTransformer(str(model_directory()), device="cpu")
    embeddings = model.encode(sentences, batch_size=16, convert_to_numpy=True, normalize_embeddings=False)
    np.savez(HERE / "minilm_reference.npz", sentences=np.array(sentences), embeddings=embeddings.astype(np.float32))


if __name__ == "__main__":
    main()
