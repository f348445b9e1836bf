"""Pipelines saved by earlier versions load and give what they gave when they were saved."""
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc

FIXTURES = Path(__file__).parent / "fixtures"
PROBES = ["A dog sat on the book .", "Night falls ."]  # as in fixtures/make_saved_v1.py


@pytest.fixture(scope="module")
def loaded_v1():
    nlp = spacy.load(FIXTURES / "saved_v1")
    docs = [nlp(Doc(nlp.vocab, words=text.split())) for text in PROBES]
    return nlp, docs, np.load(FIXTURES / "saved_v1_expected.npz")


def annotated_by_elmo(nlp, texts):
    """Docs that the ``elmo`` component annotated and no listener read yet."""
    return [nlp.get_pipe("elmo")(Doc(nlp.vocab, words=text.split())) for text in texts]


def test_v1_pipeline_gives_the_vectors_it_gave_when_saved(loaded_v1):
    _, docs, expected = loaded_v1
    for i, doc in enumerate(docs):
        np.testing.assert_allclose(doc._.elmo, expected[f"elmo_{i}"], rtol=1e-5, atol=1e-6)


def test_v1_pipeline_tags_as_it_did_when_saved(loaded_v1):
    nlp, docs, expected = loaded_v1
    scores = nlp.get_pipe("tagger").model.predict(annotated_by_elmo(nlp, PROBES))
    for i, doc in enumerate(docs):
        np.testing.assert_allclose(scores[i], expected[f"tag_scores_{i}"], rtol=1e-5, atol=1e-6)
        assert [t.tag_ for t in doc] == expected[f"tags_{i}"].tolist()


def test_v1_pipeline_replaces_its_listener_with_its_own_settings():
    nlp = spacy.load(FIXTURES / "saved_v1")
    nlp.replace_listeners("elmo", "tagger", ["model.tok2vec"])
    bilm = nlp.config["components"]["tagger"]["model"]["tok2vec"]["bilm"]
    assert bilm["@architectures"] == "spacy_elmo.ElmoBiLm.v2"
    saved = nlp.config["components"]["elmo"]  # the 0.1.0 keys, as make_saved_v1.py gave them
    assert {key: bilm[key] for key in ("initial_state", "max_sentence_tokens", "max_batch_tokens")} == {
        "initial_state": saved["initial_state"],
        "max_sentence_tokens": saved["max_sentence_tokens"],
        "max_batch_tokens": saved["max_batch_tokens"],
    }
    expected = np.load(FIXTURES / "saved_v1_expected.npz")
    docs = [nlp.make_doc(text) for text in PROBES]
    for i, scores in enumerate(nlp.get_pipe("tagger").model.predict(docs)):
        np.testing.assert_allclose(scores, expected[f"tag_scores_{i}"], rtol=1e-5, atol=1e-6)
