"""The biLM against the reference implementations' own fixtures (see tests/fixtures/elmo/README.md)."""
import json

import h5py
import numpy as np
import pytest
import torch

from spacy_elmo import ElmoEmbedder
from spacy_elmo.model.options import preset
from spacy_elmo.formats.weights import layout
from tests.conftest import ALLENNLP, BILM_TF, ROUNDING


def _stateful_top_layers_match(options_file, weight_file, folder, sentences_file):
    sentences = json.loads((folder / sentences_file).read_text())
    expected = [h5py.File(folder / f"lm_embeddings_{k}.hdf5", "r") for k in range(3)]
    embedder = ElmoEmbedder(options_file, weight_file, stateful=True)
    for i in range(10):
        out = embedder.embed_batch([sentences[k][i].split() for k in range(3)])
        for k in range(3):
            want = expected[k][str(i)][()]
            want = np.concatenate([want[0], want[1]], axis=-1)
            assert out[k].shape == (3, want.shape[0], 32)
            np.testing.assert_allclose(out[k][2], want, atol=1e-6, rtol=1e-5)


def test_allennlp_fixture_stateful_sequence(allennlp_files):
    _stateful_top_layers_match(*allennlp_files, ALLENNLP, "sentences.json")


def test_bilm_tf_fixture_without_skip_connections(bilm_tf_files):
    _stateful_top_layers_match(*bilm_tf_files, BILM_TF, "lm_embeddings_sentences.json")


def test_context_free_token_vectors(allennlp_files):
    words = (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    expected = h5py.File(ALLENNLP / "elmo_token_embeddings.hdf5", "r")["embedding"][()]
    embedder = ElmoEmbedder(*allennlp_files)
    with torch.no_grad():
        got = embedder.encoder.token_vectors(words).numpy()
    assert len(words) == 458
    np.testing.assert_allclose(got, expected, **ROUNDING)


def test_layer_zero_is_the_token_vector_twice(allennlp_files):
    embedder = ElmoEmbedder(*allennlp_files)
    layers = embedder.embed_sentence(["<S>", "word"])
    with torch.no_grad():
        token = embedder.encoder.token_vectors(["<S>", "word"]).numpy()
    # The sentence runs 3 types (<S>, </S>, word) through the token layer, this call 2: another product shape,
    # so float32 rounding may differ by a few ulps of these values (|x| < 1).
    np.testing.assert_allclose(layers[0], np.concatenate([token, token], axis=1), **ROUNDING)


def _sentences(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    words = (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    return [[words[j] for j in rng.integers(0, len(words), rng.integers(0, 40))] for _ in range(n)]


@pytest.mark.parametrize("initial_state", ["zeros", "warm"])
def test_stateless_vectors_do_not_depend_on_the_batch(allennlp_files, initial_state):
    embedder = ElmoEmbedder(*allennlp_files, initial_state=initial_state, max_batch_tokens=10_000)
    sentences = _sentences(64)
    batched = embedder.embed_batch(sentences)
    for i in (0, 7, 63):
        alone = embedder.embed_sentence(sentences[i])
        assert np.abs(alone - batched[i]).max(initial=0) <= 1e-5
    again = embedder.embed_batch(sentences[::-1])[::-1]
    assert max(np.abs(a - b).max(initial=0) for a, b in zip(again, batched)) <= 1e-5


def test_stateless_zeros_equals_reference_first_batch(allennlp_files):
    sentences = _sentences(5, seed=1)
    stateless = ElmoEmbedder(*allennlp_files, initial_state="zeros").embed_batch(sentences)
    stateful = ElmoEmbedder(*allennlp_files, initial_state="zeros", stateful=True).embed_batch(sentences)
    for a, b in zip(stateless, stateful):
        np.testing.assert_allclose(a, b, **ROUNDING)


def test_stateful_mode_depends_on_history_and_resets(allennlp_files):
    embedder = ElmoEmbedder(*allennlp_files, initial_state="zeros", stateful=True)
    sentence = ["The", "cat", "sat", "."]
    first = embedder.embed_sentence(sentence)
    second = embedder.embed_sentence(sentence)
    embedder.reset_states()
    third = embedder.embed_sentence(sentence)
    assert np.abs(first - second).max() > 1e-3
    np.testing.assert_array_equal(first, third)


def test_stateful_smaller_batch_leaves_later_rows_untouched(allennlp_files):
    a = ElmoEmbedder(*allennlp_files, initial_state="zeros", stateful=True)
    b = ElmoEmbedder(*allennlp_files, initial_state="zeros", stateful=True)
    s = _sentences(3, seed=2)
    a.embed_batch(s)
    a.embed_batch(s[:2])
    b.embed_batch(s)
    np.testing.assert_array_equal(a.embed_batch(s)[2], b.embed_batch(s)[2])


def test_empty_sentence_gives_zero_rows(allennlp_files):
    out = ElmoEmbedder(*allennlp_files).embed_batch([[], ["a"]])
    assert out[0].shape == (3, 0, 32) and out[1].shape == (3, 1, 32)


@pytest.mark.parametrize("name,millions", [("small", 13.6), ("medium", 28.0), ("original", 93.6)])
def test_published_parameter_counts(name, millions):
    count = sum(int(np.prod(entry.shape)) for entry in layout(preset(name)).values())
    assert round(count / 1e6, 1) == millions
