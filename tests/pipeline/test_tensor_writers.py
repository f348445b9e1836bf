"""``elmo`` beside spaCy's ``tok2vec``, the other writer of ``doc.tensor``: the components listening to ``tok2vec``
predict as without ``elmo`` and ``elmo``'s rows are its own, in every order spaCy allows; an order in which ``elmo``'s
rows would undo ``tok2vec``'s, or ``tok2vec``'s ``elmo``'s, is refused when spaCy links the pipeline."""
from typing import List

import numpy as np
import pytest
import spacy
from thinc.api import fix_random_seed

from spacy_elmo import ElmoSettingsError

from tests.pipeline.conftest import TAGGER, TRAIN, elmo_config, examples

TOK2VEC_TAGGER = {
    "model": {
        "@architectures": "spacy.Tagger.v2",
        "tok2vec": {"@architectures": "spacy.Tok2VecListener.v1", "width": 96, "upstream": "tok2vec"},
    }
}
BOTH = {"model": {**TAGGER["model"], "tok2vec": {**TAGGER["model"]["tok2vec"], "embed": TOK2VEC_TAGGER["model"]["tok2vec"]}}}
TEXTS = [text for text, _ in TRAIN] + ["The dog sat on a book .", "She barks ."]


@pytest.fixture(scope="module")
def trained():
    """``tok2vec`` and a tagger listening to it, trained until the tags depend on the input."""
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec")
    nlp.add_pipe("tagger", config=TOK2VEC_TAGGER)
    optimizer = nlp.initialize(lambda: examples(nlp))
    for _ in range(30):
        nlp.update(examples(nlp), sgd=optimizer)
    return nlp


def tags(nlp) -> List[List[str]]:
    return [[t.tag_ for t in doc] for doc in nlp.pipe(TEXTS)]


def test_elmo_after_the_tagger_leaves_its_predictions_and_keeps_its_rows_after_tok2vec_s(trained):
    expected = tags(trained)
    assert len({tag for doc_tags in expected for tag in doc_tags}) > 1
    tok2vec_rows = [doc.tensor.copy() for doc in trained.pipe(TEXTS)]
    trained.add_pipe("elmo", config=elmo_config())
    try:
        assert tags(trained) == expected
        alone = spacy.blank("en", vocab=trained.vocab)
        alone.add_pipe("elmo", config=elmo_config())
        for doc, rows, text in zip(trained.pipe(TEXTS), tok2vec_rows, TEXTS):
            np.testing.assert_array_equal(doc.tensor[:, :96], rows)  # tok2vec's columns, as it left them
            np.testing.assert_allclose(doc._.elmo, alone(text)._.elmo, rtol=1e-5, atol=1e-6)
            piece = doc[1:3].as_doc()
            np.testing.assert_array_equal(piece._.elmo, doc._.elmo[1:3])
    finally:
        trained.remove_pipe("elmo")


def test_elmo_before_a_tok2vec_listener_is_refused_naming_the_order_that_works(trained):
    with pytest.raises(ElmoSettingsError, match="put 'elmo' after 'tagger', or set set_tensor = false"):
        trained.add_pipe("elmo", before="tagger", config=elmo_config())
    trained.remove_pipe("elmo")
    with pytest.raises(ElmoSettingsError, match="'tok2vec' after it replaces doc.tensor"):
        trained.add_pipe("elmo", first=True, config=elmo_config())
    trained.remove_pipe("elmo")
    assert trained.pipe_names == ["tok2vec", "tagger"]


def test_a_tagger_listening_to_both_is_told_to_keep_the_rows_in_user_data():
    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec")
    nlp.add_pipe("elmo", config=elmo_config())
    with pytest.raises(ElmoSettingsError, match="'tagger' after it reads doc.tensor .*: set set_tensor = false"):
        nlp.add_pipe("tagger", config=BOTH)


@pytest.mark.parametrize("setting", [{"set_tensor": False}, {"store_vectors": False}])
def test_with_nothing_in_doc_tensor_elmo_may_come_before_the_tagger(trained, setting):
    expected = tags(trained)
    trained.add_pipe("elmo", before="tagger", config=elmo_config(**setting))
    try:
        assert tags(trained) == expected
        doc = next(trained.pipe(TEXTS))
        assert doc.tensor.shape[1] == 96
        assert (doc._.elmo is not None) == setting.get("store_vectors", True)
    finally:
        trained.remove_pipe("elmo")


def test_a_tagger_listening_to_both_trains_and_predicts_with_the_rows_in_user_data():
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec")
    nlp.add_pipe("elmo", config=elmo_config(set_tensor=False))
    nlp.add_pipe("tagger", config=BOTH)
    optimizer = nlp.initialize(lambda: examples(nlp))
    losses = [nlp.update(examples(nlp), sgd=optimizer)["tagger"] for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0]
    docs = list(nlp.pipe(TEXTS))
    assert all(doc.tensor.shape[1] == 96 and doc._.elmo is not None for doc in docs)
