import numpy as np
import torch

from spacy_elmo.model.encoder import ElmoEncoder, length_batches
from spacy_elmo.weights import load_files
from tests.conftest import ALLENNLP


def _encoder(cache_size: int) -> ElmoEncoder:
    return ElmoEncoder(load_files(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"), cache_size=cache_size)


def test_cached_token_vectors_equal_the_char_cnn(allennlp_files):
    words = (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    plain, cached = _encoder(0), _encoder(100)
    cached.fill_cache(words[:80])
    sentences = [words[i : i + 30] for i in range(0, 400, 30)] + [["unseen-word", "another"]]
    with torch.no_grad():
        want = plain.embed_sentences(sentences)
        got = cached.embed_sentences(sentences)
    assert len(cached.cache) == 100  # pre-filled 80, then filled while running, and bounded
    assert max((a - b).abs().max().item() for a, b in zip(want, got) if a.numel()) <= 1e-6


def test_length_batches_respect_the_token_cap():
    lengths = [5, 30, 2, 30, 7, 1, 0]
    batches = length_batches(lengths, max_batch_tokens=64)
    assert sorted(i for b in batches for i in b) == list(range(7))
    for b in batches:
        assert len(b) == 1 or len(b) * (max(lengths[i] for i in b) + 2) <= 64
