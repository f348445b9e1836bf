"""The component's biLM model: segments, batch order, stateful mode, gradients when fine-tuning."""
import numpy as np
import spacy
import torch
from spacy.tokens import Doc

from spacy_elmo import ElmoEmbedder
from spacy_elmo.pipeline.architectures import frozen_backprop
from spacy_elmo.pipeline.doc_windows import doc_windows
from spacy_elmo.util.windows import Window

from tests.pipeline.conftest import OPTIONS, WEIGHTS, make_nlp


def test_segments_follow_sentences_then_windows():
    vocab = spacy.blank("en").vocab
    plain = Doc(vocab, words=list("abcdefg"))
    sentenced = Doc(vocab, words=list("abcdefg"), sent_starts=[True, False, False, False, False, True, False])
    empty = Doc(vocab, words=[])
    windows, words = doc_windows([plain, empty, sentenced], 3)
    assert windows == [
        Window(0, 0, 3), Window(0, 3, 6), Window(0, 6, 7),
        Window(2, 0, 3), Window(2, 3, 5), Window(2, 5, 7),
    ]  # fmt: skip
    assert words[:2] == [list("abc"), list("def")] and words[4] == list("de")


def test_stateful_mode_carries_state_like_the_embedder():
    nlp = make_nlp(stateful=True)
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS, initial_state="zeros", stateful=True)
    for text in ["The first sentence .", "Then a second one", "The first sentence ."]:
        doc = nlp(text)
        expected = embedder.embed_sentence([t.text for t in doc])[-1]
        np.testing.assert_allclose(doc._.elmo, expected, atol=1e-5)
    nlp.get_pipe("elmo").reset_states()
    embedder.reset_states()
    doc = nlp("Then a second one")
    np.testing.assert_allclose(doc._.elmo, embedder.embed_sentence([t.text for t in doc])[-1], atol=1e-5)


def test_gradients_reach_the_biLM_only_when_not_frozen():
    for frozen in (True, False):
        nlp = make_nlp(frozen=frozen)
        elmo = nlp.get_pipe("elmo")
        docs = [nlp.make_doc("Gradients flow"), nlp.make_doc("or not")]
        layers, backprop = elmo.model.begin_update(docs)
        assert (backprop is frozen_backprop) == frozen
        backprop([np.ones_like(x) for x in layers])
        grads = [p.grad for p in elmo.runtime.encoder.parameters()]
        if frozen:
            assert all(g is None for g in grads)
        else:
            assert any(g is not None and torch.count_nonzero(g) > 0 for g in grads)


def test_fine_tuning_s_forward_gives_the_vectors_of_prediction_stateful_mode_included():
    """Two calls of three Docs each, batches of a few tokens (a call spans several); the second call continues the
    state the first left in the stateful mode, the same way in the forward pass of fine-tuning and at prediction."""
    texts = [["The cat sat on the mat .", "Dogs bark .", "A long day ends at night ."], ["She reads .", "It rains ."]]
    for stateful in (False, True):
        nlp = make_nlp(stateful=stateful, frozen=False, max_batch_tokens=12)
        model = nlp.get_pipe("elmo").model
        calls = [[nlp.make_doc(text) for text in call] for call in texts]
        predicted = [model.predict(docs) for docs in calls]
        nlp.get_pipe("elmo").reset_states()
        trained = [model.begin_update(docs)[0] for docs in calls]
        for expected, found in zip(predicted, trained):
            for x, y in zip(expected, found):
                np.testing.assert_allclose(y, x, atol=1e-5)
