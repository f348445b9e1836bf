"""Listeners get the biLM layers without anything but a mark left on the Docs (``LayerHandoff``): any number of
reads, the same Doc twice, copies; bounded, and nothing held for listeners that do not run."""
import gc
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc

from spacy_elmo import ElmoListenerWarning
from spacy_elmo.pipeline.handoff import LayerHandoff

from tests.pipeline.conftest import PROBES, examples, tagger_pipeline, train_losses
from tests.conftest import ROUNDING

LAYERS = np.zeros((3, 2, 4), dtype=np.float32)  # the layers of a two-token Doc


def tag_scores(nlp, docs):
    return [np.asarray(x) for x in nlp.get_pipe("tagger").model.predict(docs)]


def test_a_doc_of_a_listener_pipeline_holds_no_layers_and_serializes_without_warning():
    nlp = tagger_pipeline()
    doc = nlp("The cat sat on the mat .")
    assert [t.tag_ for t in doc] and all(t.tag_ for t in doc)  # the tagger did read layers
    assert not doc.user_hooks and list(doc.user_data.values()) == [{}] and doc.tensor.size == 0
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


def test_a_doc_read_again_or_twice_in_a_batch_or_copied_gets_the_layers_it_got_first():
    nlp = tagger_pipeline()
    train_losses(nlp, 5)
    elmo = nlp.get_pipe("elmo")
    doc = elmo(nlp.make_doc("Dogs bark at night ."))
    first = tag_scores(nlp, [doc])[0]  # the handoff's layers, let go after this read
    assert len(elmo.handoff) == 0
    other = elmo(nlp.make_doc("She sat ."))
    with pytest.warns(ElmoListenerWarning, match="ran the biLM again"):
        again = tag_scores(nlp, [doc, other, doc, doc.copy()])  # doc's layers: from the biLM again, said
    for scores in (again[0], again[2], again[3]):
        np.testing.assert_allclose(scores, first, **ROUNDING)
    np.testing.assert_allclose(again[1], tag_scores(nlp, [elmo(nlp.make_doc("She sat ."))])[0], **ROUNDING)


def test_the_same_doc_twice_in_a_batch_is_tagged_twice_as_it_is_alone():
    nlp = tagger_pipeline()
    train_losses(nlp, 5)
    doc, other = nlp.make_doc("Dogs bark at night ."), nlp.make_doc("She sat .")
    alone = [t.tag_ for t in nlp(nlp.make_doc(doc.text))]
    tagged = list(nlp.pipe([doc, other, doc]))
    assert tagged[0] is tagged[2] and [t.tag_ for t in tagged[0]] == alone


def test_a_listener_that_lets_layers_expire_is_not_waited_for_until_it_reads_again():
    handoff = LayerHandoff()
    handoff.link(7)
    doc, other = spacy.blank("en")("two words"), spacy.blank("en")("two more")
    assert handoff.begin_batch()
    handoff.put([doc], [LAYERS])
    assert not handoff.begin_batch()  # the batch before went unread: listener 7 is not running
    handoff.put([other], [LAYERS])
    assert len(handoff) == 0
    assert handoff.take(other, 7) is None  # it reads (the biLM runs again for it): waited for from now on
    assert handoff.begin_batch()


def test_evaluating_after_training_and_threads_sharing_the_pipeline_run_the_bilm_once_per_doc():
    nlp = tagger_pipeline()
    train_losses(nlp, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElmoListenerWarning)  # a listener running the biLM again says so
        nlp.evaluate(examples(nlp), batch_size=2)
        with ThreadPoolExecutor(4) as pool:
            tagged = list(pool.map(nlp, PROBES * 8))
    assert all(token.tag_ for doc in tagged for token in doc)
    assert len(nlp.get_pipe("elmo").handoff) == 0


def test_layers_wait_for_the_next_batch_of_their_own_thread_only():
    handoff = LayerHandoff()
    handoff.link(7)
    nlp = spacy.blank("en")
    docs = [nlp("two words") for _ in range(3)]
    handoff.begin_batch()
    handoff.put([docs[0]], [LAYERS])

    def other_thread_batch():
        handoff.begin_batch()
        handoff.put([docs[1]], [LAYERS])

    thread = threading.Thread(target=other_thread_batch)
    thread.start()
    thread.join()
    assert handoff.take(docs[0], 7) is LAYERS  # another thread's batch let nothing of this thread's go
    handoff.begin_batch()
    handoff.put([docs[2]], [LAYERS])
    assert handoff.take(docs[1], 7) is LAYERS and handoff.take(docs[2], 7) is LAYERS
    assert len(handoff) == 0


def test_layers_go_only_to_their_doc_while_its_tokens_are_those_the_bilm_saw():
    handoff = LayerHandoff()
    handoff.link(7)
    handoff.link(8)
    nlp = spacy.blank("en")
    doc, twin = (Doc(nlp.vocab, words=["two", "words"], spaces=[False, False]) for _ in range(2))
    handoff.begin_batch()
    handoff.put([doc], [LAYERS])
    assert handoff.take(twin, 7) is None and handoff.take(doc.copy(), 7) is None  # other Docs, same tokens
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    assert handoff.take(doc, 7) is None
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[0], ["two", "words"], heads=[(doc[0], 1), doc[0]])
    assert handoff.take(doc, 8) is LAYERS  # the very tokens again


def test_the_layers_held_stay_within_the_budget_the_oldest_going_first():
    handoff = LayerHandoff(max_bytes=2 * LAYERS.nbytes)
    handoff.link(7)
    nlp = spacy.blank("en")
    docs = [nlp("two words") for _ in range(3)]
    handoff.begin_batch()
    handoff.put(docs, [LAYERS] * 3)
    assert handoff.nbytes == 2 * LAYERS.nbytes
    assert handoff.take(docs[0], 7) is None and handoff.take(docs[2], 7) is LAYERS


def test_an_unread_entry_goes_with_its_doc_and_its_listener_is_still_waited_for():
    handoff = LayerHandoff()
    handoff.link(7)
    doc = spacy.blank("en")("two words")
    handoff.begin_batch()
    handoff.put([doc], [LAYERS])
    assert len(handoff) == 1
    del doc
    gc.collect()
    assert handoff.begin_batch()  # a Doc the user dropped says nothing about the listener
    assert len(handoff) == 0


def test_listeners_predict_what_a_copy_of_the_biLM_in_the_tagger_predicts():
    nlp = tagger_pipeline()
    train_losses(nlp, 10)
    expected = [[t.tag_ for t in doc] for doc in nlp.pipe(PROBES)]
    assert len({tag for tags in expected for tag in tags}) > 1  # trained: the tags depend on the input
    scores = nlp.get_pipe("tagger").model.predict(list(nlp.get_pipe("elmo").pipe(nlp.make_doc(t) for t in PROBES)))
    nlp.replace_listeners("elmo", "tagger", ["model.tok2vec"])  # the tagger now runs its own biLM: no handoff
    assert not nlp.get_pipe("elmo").handoff.begin_batch()  # nothing listens: the vectors-only path
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
