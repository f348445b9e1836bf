"""Listening components at prediction: one pipeline shared by threads, a stateful biLM run again for a listener, and a
fine-tuned biLM evaluated with the optimizer's averages."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import spacy
import torch
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Adam, fix_random_seed

from tests.pipeline.conftest import TAGGER, TRAIN, elmo_config, examples
from tests.conftest import ROUNDING

TEXTCAT = {
    "model": {
        "@architectures": "spacy.TextCatReduce.v1",
        "exclusive_classes": True,
        "use_reduce_first": False,
        "use_reduce_last": False,
        "use_reduce_max": False,
        "use_reduce_mean": True,
        "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v1"},
    }
}
WORDS = "the cat dog sat ran on under a mat book night she reads barks long".split()


def texts(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 12)))) for _ in range(n)]


def tagger_and_textcat() -> Language:
    """``elmo`` (nothing stored on Docs) with a tagger and a textcat that both listen to it, trained a little."""
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(store_vectors=False))
    nlp.add_pipe("tagger", config=TAGGER)
    nlp.add_pipe("textcat", config=TEXTCAT)
    train = []
    for i, (text, tags) in enumerate(TRAIN):
        words = text.split()
        reference = Doc(nlp.vocab, words=words, tags=tags.split())
        reference.cats = {"A": float(i % 2 == 0), "B": float(i % 2 == 1)}
        train.append(Example(Doc(nlp.vocab, words=words), reference))
    optimizer = nlp.initialize(lambda: train)
    for _ in range(5):
        nlp.update(train, sgd=optimizer)
    return nlp


def annotations(doc: Doc):
    return [t.tag_ for t in doc], [doc.cats["A"], doc.cats["B"]]


def test_eight_threads_sharing_a_pipeline_get_what_one_thread_gets():
    nlp = tagger_and_textcat()
    per_thread = [texts(6, seed) for seed in range(8)]
    alone = [[annotations(nlp(text)) for text in own] for own in per_thread]
    assert len({round(cats[0], 6) for own in alone for _, cats in own}) > 10  # the scores depend on the layers
    with ThreadPoolExecutor(8) as pool:
        shared = list(pool.map(lambda own: [annotations(nlp(text)) for text in own], per_thread))
    for own_alone, own_shared in zip(alone, shared):
        for (tags, cats), (tags2, cats2) in zip(own_alone, own_shared):
            assert tags == tags2
            np.testing.assert_allclose(cats2, cats, **ROUNDING)


def stateful_tagger_pipeline() -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(stateful=True))
    nlp.add_pipe("tagger", config=TAGGER)
    fix_random_seed(0)
    nlp.initialize(lambda: examples(nlp))
    return nlp


def test_a_listener_running_a_stateful_biLM_again_leaves_its_carried_state_as_it_was():
    sentences = ["The cat sat on the mat .", "Dogs bark at night .", "She reads a long book ."]
    reference = stateful_tagger_pipeline()
    expected = [reference(text)._.elmo for text in sentences]
    nlp = stateful_tagger_pipeline()
    first = nlp(sentences[0])
    with first.retokenize() as retokenizer:
        retokenizer.merge(first[0:2])
    nlp.get_pipe("tagger")(first)  # its tokens changed: the tagger's layers come from the biLM again
    for text, want in zip(sentences[1:], expected[1:]):
        np.testing.assert_allclose(nlp(text)._.elmo, want, **ROUNDING)  # two pipelines: their token caches differ


def fine_tuned_tagger_pipeline() -> Language:
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(frozen=False))
    nlp.add_pipe("tagger", config=TAGGER)
    nlp.initialize(lambda: examples(nlp))
    return nlp


def test_use_params_swaps_in_the_averaged_biLM_weights_and_restores_them():
    nlp = fine_tuned_tagger_pipeline()
    optimizer = Adam(0.01, use_averages=True)
    for _ in range(3):
        nlp.update(examples(nlp), sgd=optimizer)
    text = "The dog sat on a book ."
    before = nlp(text)._.elmo
    shim = nlp.get_pipe("elmo").model.shims[0]
    averaged = {name: value for (key, name), value in optimizer.averages.items() if key == shim.id}
    assert averaged  # the biLM's parameters were averaged
    name, value = next(iter(averaged.items()))
    with nlp.use_params(optimizer.averages):
        inside = nlp(text)._.elmo
        parameter = dict(shim._model.named_parameters())[name]
        np.testing.assert_array_equal(parameter.detach().numpy(), np.asarray(value))
    assert not np.allclose(inside, before, **ROUNDING)
    np.testing.assert_array_equal(nlp(text)._.elmo, before)
    assert not torch.equal(dict(shim._model.named_parameters())[name].detach(), torch.as_tensor(np.asarray(value)))


def test_the_layers_reach_the_listener_in_the_buffer_the_biLM_filled_on_its_device(monkeypatch):
    """On a GPU a trip through the host is two copies; on the CPU this checks that there is no copy at all: the runtime
    is asked for tensors on the biLM's device, and the listener reads their memory."""
    from spacy_elmo.runtime import ElmoRuntime
    from spacy_elmo.pipeline.listener import is_listener

    nlp = tagger_and_textcat()
    made = []
    layers = ElmoRuntime.layers

    def recording(self, *args, **kwargs):
        found = layers(self, *args, **kwargs)
        made.extend(found)
        return found

    monkeypatch.setattr(ElmoRuntime, "layers", recording)
    doc = nlp.get_pipe("elmo")(nlp.make_doc("Dogs bark at night ."))
    (tensor,) = made
    assert isinstance(tensor, torch.Tensor) and tensor.device == nlp.get_pipe("elmo").runtime.device
    (node,) = [n for n in nlp.get_pipe("tagger").model.walk() if is_listener(n)]
    (read,) = node.predict([doc])
    assert np.shares_memory(read, tensor.numpy())
