import numpy as np
import pytest
import spacy

from spacy_elmo import ElmoEmbedder
from tests.conftest import ROUNDING


def test_shapes_and_order(allennlp_files):
    embedder = ElmoEmbedder(*allennlp_files)
    one = embedder.embed_sentence(["The", "cat", "sat"])
    assert one.shape == (3, 3, 32) and one.dtype == np.float32
    batch = embedder.embed_batch([["A", "b"], ["C"]])
    assert [b.shape for b in batch] == [(3, 2, 32), (3, 1, 32)]
    streamed = list(embedder.embed_sentences([["A", "b"], ["C"]], batch_size=1))
    for a, b in zip(batch, streamed):
        np.testing.assert_allclose(a, b, **ROUNDING)


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


WORDS = ["The", "cat", "sat", "on", "the", "mat", "."]  # spaCy's English tokens of the text below


def test_a_doc_a_span_and_spacy_tokens_give_the_vectors_of_their_texts(allennlp_files):
    embedder = ElmoEmbedder(*allennlp_files, initial_state="zeros")
    doc = spacy.blank("en")("The cat sat on the mat.")
    span = doc[1:4]
    want = embedder.embed_batch([WORDS, ["cat", "sat", "on"], ["a", "b"]])
    for got, expected in zip(embedder.embed_batch([doc, span, ["a", "b"]]), want):
        np.testing.assert_array_equal(got, expected)
    # Compared with the same call on the texts, the very same computation: another batch would change the rounding.
    streamed = embedder.embed_sentences(iter([doc, span, list(doc[:2])]))
    for got, expected in zip(streamed, embedder.embed_sentences(iter([WORDS, WORDS[1:4], WORDS[:2]]))):
        np.testing.assert_array_equal(got, expected)
    single = embedder.embed_sentence(WORDS)
    np.testing.assert_array_equal(embedder.embed_sentence(doc), single)
    np.testing.assert_array_equal(embedder.embed_sentence(list(doc)), single)  # a list of Tokens


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda e: e.embed_batch([[["a", "b"]]]), r"token 0 of sentence 0 of the batch is a list \(\['a', 'b'\]\); tokens must be str .*nested one level too deep"),
        (lambda e: e.embed_sentence([["a", "b"]]), r"token 0 of sentence 0 of the batch is a list .*nested one level too deep"),
        (lambda e: e.embed_sentence(["a", 5]), r"token 1 of sentence 0 of the batch is an int \(5\); tokens must be str"),
        (lambda e: e.embed_batch([["a"], ["b", None]]), r"token 1 of sentence 1 of the batch is None; tokens must be str"),
        (lambda e: list(e.embed_sentences([["a"], ["b"], [1.5]])), r"token 0 of sentence 2 of the batch is a float \(1.5\)"),
        (lambda e: e.embed_batch([["a"], 3]), r"sentence 1 of the batch is an int \(3\); expected a list of str tokens or a spaCy Doc"),
        (lambda e: e.embed_sentence(None), r"sentence 0 of the batch is None; expected a list of str tokens"),
        (lambda e: e.embed_batch(None), r"takes a batch as a list of sentences, found None"),
        (lambda e: e.embed_batch(spacy.blank("en")("A cat.")), r"list of sentences, found a Doc \(A cat.\).*embed_sentence\(doc\)"),
    ],
)
def test_a_wrong_shape_is_a_one_line_type_error_naming_it(allennlp_files, call, message):
    with pytest.raises(TypeError, match=message) as raised:
        call(ElmoEmbedder(*allennlp_files))
    assert "\n" not in str(raised.value)


def test_a_batch_given_as_a_generator_is_embedded_whole(allennlp_files):
    embedder = ElmoEmbedder(*allennlp_files, initial_state="zeros")
    batch = [["A", "b"], ["C"], ["d", "e", "f"]]
    got = embedder.embed_batch(sentence for sentence in batch)
    assert [g.shape for g in got] == [(3, 2, 32), (3, 1, 32), (3, 3, 32)]
    for a, b in zip(got, embedder.embed_batch(batch)):
        np.testing.assert_array_equal(a, b)
