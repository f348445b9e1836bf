"""Settings changed on a loaded biLM reach it at once, and ``use_params`` that leaves a frozen biLM's derived state alone."""
from thinc.api import Adam

from spacy_elmo.pipeline.architectures import configure_bilm_model

from tests.pipeline.conftest import examples, tagger_pipeline


def test_evaluation_under_the_optimizers_averages_keeps_a_frozen_int8_biLMs_cache_and_weights(monkeypatch):
    """``spacy train`` evaluates inside ``nlp.use_params(optimizer.averages)``, which hold nothing of a frozen biLM:
    its token cache stays filled and its int8 weights are not converted again."""
    nlp = tagger_pipeline(precision="int8", cache_size=500)
    train = examples(nlp)
    optimizer = Adam(0.01)  # keeps averages, as spaCy's default optimizer does
    nlp.update(train, sgd=optimizer)
    assert optimizer.averages  # the tagger's averages: what use_params swaps in
    bilm = nlp.get_pipe("elmo").runtime.encoder
    nlp.evaluate(train)
    cached = len(bilm.cache)
    conversions = []
    refresh = bilm.bilm.refresh_precision
    monkeypatch.setattr(bilm.bilm, "refresh_precision", lambda: conversions.append(1) or refresh())
    with nlp.use_params(optimizer.averages):
        nlp.evaluate(train)
    assert cached > 0 and len(bilm.cache) == cached and conversions == []


def test_a_setting_changed_on_a_loaded_biLM_reaches_its_module_at_once(nlp):
    elmo = nlp.get_pipe("elmo")
    nlp("Load it .")
    configure_bilm_model(elmo.model, cache_size=7, frozen=False)
    encoder = elmo.runtime.encoder
    assert encoder.cache.capacity == 7 and all(p.requires_grad for p in encoder.parameters())
