"""``spacy_elmo.ElmoListener.v1`` in a trained NER: learning, frozen vs fine-tuned biLM, caching, replace_listeners."""
from typing import Dict, List

import numpy as np
import pytest
import spacy
import torch
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Model, fix_random_seed

from spacy_elmo.pipeline.architectures import layer_cache

from tests.pipeline.conftest import conll_train, elmo_config, read_conll
from tests.conftest import ROUNDING

NER_CONFIG = {
    "model": {
        "@architectures": "spacy.TransitionBasedParser.v2",
        "state_type": "ner",
        "extra_state_tokens": False,
        "hidden_width": 64,
        "maxout_pieces": 2,
        "use_upper": True,
        "nO": None,
        "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v1", "upstream": "*", "dropout": 0.1, "l2": 0.001},
    }
}
N_SENTENCES, BATCH, STEPS = 48, 16, 45


def ner_pipeline(**elmo_overrides) -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(store_vectors=False, **elmo_overrides))
    nlp.add_pipe("ner", config=NER_CONFIG)
    return nlp


def conll_examples(nlp: Language) -> List[Example]:
    examples = []
    for sentence in read_conll(conll_train(), N_SENTENCES):
        words, tags = [w for w, _ in sentence], [t for _, t in sentence]
        examples.append(Example(Doc(nlp.vocab, words=words), Doc(nlp.vocab, words=words, ents=tags)))
    return examples


def mix_node(nlp: Language) -> Model:
    (node,) = [n for n in nlp.get_pipe("ner").model.walk() if n.name == "elmo_scalar_mix"]
    return node


def bilm_state(nlp: Language) -> Dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in nlp.get_pipe("elmo").runtime.encoder.state_dict().items()}


def train(nlp: Language, examples: List[Example], steps: int, **update_kwargs) -> List[float]:
    fix_random_seed(0)
    optimizer = nlp.initialize(lambda: examples)
    losses = []
    for step in range(steps):
        start = (step * BATCH) % len(examples)
        losses.append(nlp.update(examples[start : start + BATCH], sgd=optimizer, drop=0.1, **update_kwargs)["ner"])
    return losses


@pytest.fixture(scope="module")
def trained():
    nlp = ner_pipeline()
    examples = conll_examples(nlp)
    nlp.initialize(lambda: examples)
    before = bilm_state(nlp)
    losses = train(nlp, examples, STEPS)
    return nlp, examples, before, losses


def test_the_listener_is_linked_with_the_biLM_size(trained):
    nlp, _, _, _ = trained
    elmo = nlp.get_pipe("elmo")
    assert elmo.listening_components == ["ner"]
    assert (elmo.listeners[0].get_dim("nL"), elmo.listeners[0].get_dim("nO")) == (3, 32)


def test_frozen_biLM_training_lowers_the_loss_and_moves_only_the_mix(trained):
    nlp, _, before, losses = trained
    cycle = N_SENTENCES // BATCH  # the same batches come back in this order
    assert np.mean(losses[-cycle:]) < 0.5 * np.mean(losses[:cycle])
    scalars = mix_node(nlp).get_param("scalars")
    assert np.abs(scalars).max() > 1e-3  # started at zeros (equal weights)
    after = bilm_state(nlp)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_cached_layers_equal_fresh_ones_and_are_reused(trained):
    nlp, examples, _, _ = trained
    elmo = nlp.get_pipe("elmo")
    cache = layer_cache(elmo.model)
    assert cache.hits > 0 and len(cache) > 0
    docs = [eg.predicted for eg in examples[:8]]
    hits = cache.hits
    for cached, fresh in zip(elmo.model.begin_update(docs)[0], elmo.model.predict(docs)):
        np.testing.assert_allclose(cached, fresh, **ROUNDING)
    assert cache.hits > hits


def test_fine_tuning_changes_the_biLM_weights():
    nlp = ner_pipeline(frozen=False)
    examples = conll_examples(nlp)[:BATCH]
    nlp.initialize(lambda: examples)
    before = bilm_state(nlp)
    losses = train(nlp, examples, 3)
    after = bilm_state(nlp)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(np.isfinite(losses))


def test_frozen_annotating_elmo_feeds_the_listener_from_the_docs():
    nlp = ner_pipeline()
    examples = conll_examples(nlp)[:BATCH]
    losses = train(nlp, examples, 4, exclude=["elmo"], annotates=["elmo"])
    assert all(np.isfinite(losses)) and np.abs(mix_node(nlp).get_param("scalars")).max() > 0


def test_a_listener_without_layers_in_training_explains_itself():
    nlp = ner_pipeline()
    examples = conll_examples(nlp)[:4]
    nlp.initialize(lambda: examples)
    with pytest.raises(ValueError, match="elmo"):
        nlp.update(examples, exclude=["elmo"])


def test_replace_listeners_gives_the_same_predictions_standalone(trained, tmp_path):
    nlp, examples, _, _ = trained
    nlp.to_disk(tmp_path / "trained")
    copy = spacy.load(tmp_path / "trained")
    texts = [eg.reference.text for eg in examples[:6]]
    docs = list(copy.pipe(texts))
    unread = list(copy.get_pipe("elmo").pipe(copy.make_doc(text) for text in texts))  # layers no listener took yet
    expected = copy.get_pipe("ner").model.get_ref("tok2vec").predict(unread)

    copy.replace_listeners("elmo", "ner", ["model.tok2vec"])
    assert copy.get_pipe("elmo").listening_components == []
    assert copy.get_pipe_config("ner")["model"]["tok2vec"]["@architectures"] == "spacy_elmo.ElmoEmbedding.v2"
    copy.remove_pipe("elmo")
    bare = [copy.make_doc(text) for text in texts]  # no elmo component left: the NER runs its own biLM copy
    for a, b in zip(copy.get_pipe("ner").model.get_ref("tok2vec").predict(bare), expected):
        np.testing.assert_allclose(a, b, **ROUNDING)

    copy.to_disk(tmp_path / "replaced")
    reloaded = spacy.load(tmp_path / "replaced")
    assert reloaded.pipe_names == ["ner"]
    assert [[(e.start, e.end, e.label_) for e in d.ents] for d in reloaded.pipe(texts)] == [
        [(e.start, e.end, e.label_) for e in d.ents] for d in docs
    ]
