"""Listeners get the biLM layers without anything left on the Docs (``LayerHandoff``)."""
import gc
import warnings

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc

from spacy_elmo.errors import LayersAlreadyReadError
from spacy_elmo.pipeline.handoff import LayerHandoff

from tests.pipeline.conftest import PROBES, tagger_pipeline, train_losses
from tests.conftest import ROUNDING

def test_a_doc_of_a_listener_pipeline_holds_no_layers_and_serializes_without_warning():
    nlp = tagger_pipeline()
    doc = nlp("The cat sat on the mat .")
    assert [t.tag_ for t in doc] and all(t.tag_ for t in doc)  # the tagger did read layers
    assert not doc.user_hooks and not doc.user_data and doc.tensor.size == 0
    assert len(nlp.get_pipe("elmo").handoff) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # spaCy's W109 ("Unable to save user hooks") would raise here
        Doc(nlp.vocab).from_bytes(doc.to_bytes())


def test_layers_wait_for_every_listening_component_then_go():
    nlp = tagger_pipeline(taggers=("tagger", "tagger2"))
    handoff = nlp.get_pipe("elmo").handoff
    doc = nlp.get_pipe("elmo")(nlp.make_doc("Dogs bark at night ."))
    assert len(handoff) == 1
    nlp.get_pipe("tagger")(doc)
    assert len(handoff) == 1
    nlp.get_pipe("tagger2")(doc)
    assert len(handoff) == 0


def test_a_listener_reads_a_doc_s_layers_once_and_a_second_read_says_why_it_fails():
    nlp = tagger_pipeline()
    doc = nlp.get_pipe("elmo")(nlp.make_doc("Dogs bark ."))
    nlp.get_pipe("tagger")(doc)
    with pytest.raises(LayersAlreadyReadError, match="run the Doc through the 'elmo' component again"):
        nlp.get_pipe("tagger")(doc)
    nlp.get_pipe("tagger")(nlp.get_pipe("elmo")(doc))  # annotated again: read again


def test_an_unread_entry_goes_with_its_doc():
    handoff = LayerHandoff()
    doc = spacy.blank("en")("two words")
    handoff.put([doc], [np.zeros((3, 2, 4), dtype=np.float32)], ["reader"])
    assert len(handoff) == 1
    del doc
    gc.collect()
    assert len(handoff) == 0


def test_listeners_predict_what_a_copy_of_the_biLM_in_the_tagger_predicts():
    nlp = tagger_pipeline()
    train_losses(nlp, 10)
    expected = [[t.tag_ for t in doc] for doc in nlp.pipe(PROBES)]
    assert len({tag for tags in expected for tag in tags}) > 1  # trained: the tags depend on the input
    scores = nlp.get_pipe("tagger").model.predict(list(nlp.get_pipe("elmo").pipe(nlp.make_doc(t) for t in PROBES)))
    nlp.replace_listeners("elmo", "tagger", ["model.tok2vec"])  # the tagger now runs its own biLM: no handoff
    assert [[t.tag_ for t in doc] for doc in nlp.pipe(PROBES)] == expected
    docs = [nlp.make_doc(text) for text in PROBES]
    for found, want in zip(nlp.get_pipe("tagger").model.predict(docs), scores):
        np.testing.assert_allclose(found, want, **ROUNDING)


def test_training_through_an_annotating_elmo_learns_as_through_receive_alone_and_keeps_nothing():
    nlp = tagger_pipeline()
    annotating = train_losses(nlp, 20, annotates=["elmo"])
    assert annotating[-1] < 0.5 * annotating[0]
    assert len(nlp.get_pipe("elmo").handoff) == 0  # the listener let go of what the annotating elmo left
    np.testing.assert_allclose(annotating, train_losses(tagger_pipeline(), 20), rtol=1e-5)
