import numpy as np
import pytest

from spacy_elmo import ElmoEmbedder


def test_shapes_and_order(allennlp_files):
    embedder = ElmoEmbedder(*allennlp_files)
    one = embedder.embed_sentence(["The", "cat", "sat"])
    assert one.shape == (3, 3, 32) and one.dtype == np.float32
    batch = embedder.embed_batch([["A", "b"], ["C"]])
    assert [b.shape for b in batch] == [(3, 2, 32), (3, 1, 32)]
    streamed = list(embedder.embed_sentences([["A", "b"], ["C"]], batch_size=1))
    for a, b in zip(batch, streamed):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_warm_start_differs_from_zeros_but_is_fixed(allennlp_files):
    zeros = ElmoEmbedder(*allennlp_files, initial_state="zeros").embed_sentence(["a", "b"])
    warm = ElmoEmbedder(*allennlp_files, initial_state="warm")
    first = warm.embed_sentence(["a", "b"])
    assert np.abs(first[1:] - zeros[1:]).max() > 1e-3
    np.testing.assert_array_equal(first, warm.embed_sentence(["a", "b"]))


def test_bad_arguments(allennlp_files):
    with pytest.raises(ValueError, match="initial_state"):
        ElmoEmbedder(*allennlp_files, initial_state="random")
    with pytest.raises(ValueError, match="both"):
        ElmoEmbedder(allennlp_files[0])


def test_a_string_is_refused_not_embedded_character_by_character(allennlp_files):
    embedder = ElmoEmbedder(*allennlp_files)
    for call in (
        lambda: embedder.embed_sentence("The cat sat"),
        lambda: embedder.embed_batch("The cat sat"),
        lambda: embedder.embed_batch(["The", "cat", "sat"]),  # one sentence's tokens given as a batch
        lambda: list(embedder.embed_sentences(["The cat sat"])),
    ):
        with pytest.raises(TypeError, match="list of tokens"):
            call()
    assert embedder.embed_sentence("The cat sat".split()).shape == (3, 3, 32)
