"""The biLM's settings, one value the model holds: changes reach a loaded biLM at once, a biLM read from bytes runs
with them, the component's own settings survive saving and ``replace_listeners``, and ``use_params`` leaves a frozen
biLM's derived state alone."""
import pytest
import spacy
import torch
from thinc.api import Adam

import spacy_elmo.pipeline.elmo_shim
from spacy_elmo.errors import ElmoSettingsError
from spacy_elmo.pipeline.architectures import bilm_settings, build_bilm_model_v2, configure_bilm_model

from tests.pipeline.conftest import OPTIONS, WEIGHTS, examples, make_nlp, tagger_pipeline

# The component's own biLM settings, none at its default (threads None: torch's setting is left alone).
SERVING = {"threads": None, "batch_requests": False, "batch_wait_ms": 5.0, "shared_batch_tokens": 64}


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


def _saved_biLM() -> bytes:
    model = build_bilm_model_v2(options_file=OPTIONS, weight_file=WEIGHTS)
    model.initialize()
    return model.to_bytes()


def test_a_biLM_read_from_bytes_runs_with_the_models_settings_at_once():
    model = build_bilm_model_v2(options_file=OPTIONS, weight_file=WEIGHTS, cache_size=7, max_batch_tokens=64)
    model.from_bytes(_saved_biLM())
    runtime = model.shims[0].runtime
    assert runtime.encoder.cache.capacity == 7 and runtime.batcher.policy.max_batch_tokens == 64


def test_a_biLM_read_from_bytes_onto_a_device_this_machine_lacks_is_a_one_line_error(monkeypatch):
    data = _saved_biLM()
    monkeypatch.setattr(spacy_elmo.pipeline.elmo_shim, "get_torch_default_device", lambda: torch.device("cuda:7"))
    model = build_bilm_model_v2(options_file=OPTIONS, weight_file=WEIGHTS)
    with pytest.raises(ElmoSettingsError, match="'cuda:7' is not available here") as caught:
        model.from_bytes(data)
    assert "\n" not in str(caught.value)


def test_the_components_own_settings_survive_to_disk_and_from_disk(tmp_path):
    make_nlp(**SERVING).to_disk(tmp_path / "nlp")
    loaded = spacy.load(tmp_path / "nlp").get_pipe("elmo")
    assert {key: getattr(loaded.settings, key) for key in SERVING} == SERVING
    assert loaded.runtime.batcher.policy.shared_batch_tokens == 64 and loaded.runtime.batcher.policy.batch_wait_ms == 5.0


def test_the_components_own_settings_survive_replace_listeners_and_saving(tmp_path):
    nlp = tagger_pipeline(frozen=False, **SERVING)
    nlp.replace_listeners("elmo", "tagger", ["model.tok2vec"])
    nlp.to_disk(tmp_path / "nlp")
    tagger = spacy.load(tmp_path / "nlp").get_pipe("tagger")
    bilm = next(node for node in tagger.model.walk() if node.name == "elmo_bilm")
    assert {key: getattr(bilm_settings(bilm), key) for key in SERVING} == SERVING and not bilm_settings(bilm).frozen
    assert bilm.shims[0].runtime.batcher.policy.shared_batch_tokens == 64


def test_a_setting_changed_on_the_components_model_reaches_the_block_replace_listeners_writes():
    """``replace_listeners`` writes the settings as they stand, whoever changed them."""
    nlp = tagger_pipeline()
    configure_bilm_model(nlp.get_pipe("elmo").model, max_sentence_tokens=9, threads=3)
    nlp.replace_listeners("elmo", "tagger", ["model.tok2vec"])
    block = nlp.config["components"]["tagger"]["model"]["tok2vec"]
    assert block["bilm"]["max_sentence_tokens"] == 9 and block["threads"] == 3
