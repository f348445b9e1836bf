"""A copied listening model is still a listener (its state is in attrs), and a listener keeps no batch after backprop."""
import copy
import pickle
from typing import List

import numpy as np
import pytest
from spacy.language import Language
from thinc.api import Model

from spacy_elmo.pipeline.listener import NOT_LINKED, is_listener, listener_state

from tests.pipeline.conftest import PROBES, tagger_pipeline, train_losses

COPIES = {"Model.copy": lambda model: model.copy(), "copy.deepcopy": copy.deepcopy}


def listener_nodes(model: Model) -> List[Model]:
    return [node for node in model.walk() if is_listener(node)]


def tags(nlp: Language) -> List[List[str]]:
    return [[token.tag_ for token in doc] for doc in nlp.pipe(PROBES)]


@pytest.fixture(scope="module")
def trained() -> Language:
    nlp = tagger_pipeline()
    train_losses(nlp, 10)
    return nlp


@pytest.mark.parametrize("make_copy", COPIES.values(), ids=list(COPIES))
def test_a_copied_tagger_model_is_linked_and_predicts_like_the_original(make_copy):
    nlp = tagger_pipeline()
    train_losses(nlp, 10)
    tagger, elmo = nlp.get_pipe("tagger"), nlp.get_pipe("elmo")
    expected = tags(nlp)
    scores = tagger.model.predict(list(elmo.pipe(nlp.make_doc(text) for text in PROBES)))
    tagger.model = make_copy(tagger.model)
    (node,) = listener_nodes(tagger.model)
    elmo.find_listeners(tagger)
    assert elmo.listener_map["tagger"] == [node]  # the copy's node, and no longer the original's
    assert tags(nlp) == expected
    for found, want in zip(tagger.model.predict(list(elmo.pipe(nlp.make_doc(text) for text in PROBES))), scores):
        np.testing.assert_array_equal(found, want)


def test_a_copied_tagger_model_receives_the_training_layers_and_learns_as_the_original():
    nlp = tagger_pipeline()
    tagger = nlp.get_pipe("tagger")
    tagger.model = tagger.model.copy()
    nlp.get_pipe("elmo").find_listeners(tagger)
    copied = train_losses(nlp, 10)  # a listener that received nothing would raise on the first update
    np.testing.assert_allclose(copied, train_losses(tagger_pipeline(), 10), rtol=1e-5)  # as the original learns


def test_a_copy_used_before_it_is_linked_says_how_to_link_it(trained):
    copied = trained.get_pipe("tagger").model.copy()
    with pytest.raises(ValueError, match="not linked to an 'elmo' component") as error:
        copied.predict([trained.make_doc(PROBES[0])])
    assert str(error.value) == NOT_LINKED


@pytest.mark.parametrize("make_copy", [copy.deepcopy, lambda nlp: pickle.loads(pickle.dumps(nlp))], ids=["deepcopy", "pickle"])
def test_a_copied_pipeline_predicts_like_the_original(trained, make_copy):
    assert tags(make_copy(trained)) == tags(trained)


def test_saving_writes_nothing_for_the_listener_state(trained):
    node = listener_nodes(trained.get_pipe("tagger").model)[0]
    listener_state(node).receive(1, [np.zeros((3, 1, 32), dtype="f")], lambda d: [])  # a batch in flight
    copied = trained.get_pipe("tagger").model.copy().from_bytes(trained.get_pipe("tagger").model.to_bytes())
    listener_state(node).clear_batch()
    assert listener_state(listener_nodes(copied)[0]).outputs is None


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "fine-tuned"])
def test_the_listener_holds_no_batch_after_backprop(frozen):
    nlp = tagger_pipeline(frozen=frozen)
    train_losses(nlp, 1)
    state = listener_state(listener_nodes(nlp.get_pipe("tagger").model)[0])
    assert (state.batch_id, state.outputs, state.backprop) == (None, None, None)
