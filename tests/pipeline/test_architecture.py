"""``spacy_elmo.ElmoBiLm.v2`` holds the biLM's settings, once: the component's config has no copy of them."""
import re

import numpy as np
import pytest
import spacy
from confection import ConfigValidationError
from spacy.cli.init_config import fill_config
from spacy.language import Language
from spacy.util import load_model_from_config, registry
from thinc.api import Config

from spacy_elmo import ElmoEmbedder
from spacy_elmo.pipeline.architectures import BILM_SETTINGS, bilm_settings
from spacy_elmo.runtime.settings import DEFAULT_PIPELINE_CACHE_SIZE

from tests.pipeline.conftest import OPTIONS, TAGGER, WEIGHTS, examples

SENTENCE = "The cat sat on the mat .".split()
SETTINGS = {"options_file": OPTIONS, "weight_file": WEIGHTS, "initial_state": "zeros", "max_sentence_tokens": 4}


def v2_block(**settings) -> dict:
    return {"@architectures": "spacy_elmo.ElmoBiLm.v2", **settings}


def vectors(nlp: Language) -> np.ndarray:
    return nlp(spacy.tokens.Doc(nlp.vocab, words=SENTENCE))._.elmo


def test_a_new_pipeline_names_the_v2_architecture_with_its_settings():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": v2_block(**SETTINGS)})
    block = nlp.config["components"]["elmo"]["model"]
    assert block["@architectures"] == "spacy_elmo.ElmoBiLm.v2"
    assert {key: block[key] for key in SETTINGS} == SETTINGS
    assert {key: getattr(nlp.get_pipe("elmo").settings, key) for key in SETTINGS} == SETTINGS


def test_windows_of_max_sentence_tokens_are_embedded_as_separate_pieces():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": v2_block(**SETTINGS)})
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS, initial_state="zeros")
    pieces = np.concatenate([x[-1] for x in embedder.embed_batch([SENTENCE[:4], SENTENCE[4:]])])
    np.testing.assert_allclose(vectors(nlp), pieces, atol=1e-5)


def test_a_bilm_setting_at_the_component_level_is_a_config_error():
    with pytest.raises(ConfigValidationError, match="options_file"):
        spacy.blank("en").add_pipe("elmo", config={"options_file": OPTIONS, "weight_file": WEIGHTS})


@pytest.mark.parametrize("key, value", [("initial_state", "zero"), ("precision", "int4"), ("stateful", "yes")])
def test_a_bad_choice_is_a_config_error_naming_the_key(key, value):
    with pytest.raises(ConfigValidationError, match=key):
        spacy.blank("en").add_pipe("elmo", config={"model": v2_block(**{**SETTINGS, key: value})})


@pytest.mark.parametrize("key, value", [("max_batch_tokens", 0), ("max_sentence_tokens", -3), ("cache_size", -1)])
def test_an_out_of_range_number_is_refused_naming_the_key(key, value):
    with pytest.raises(ConfigValidationError, match=rf"{key}\s+at root: {value} is not a number"):
        spacy.blank("en").add_pipe("elmo", config={"model": v2_block(**{**SETTINGS, key: value})})


def test_fill_config_writes_each_bilm_setting_once(tmp_path):
    config = tmp_path / "in.cfg"
    config.write_text('[nlp]\nlang = "en"\npipeline = ["elmo"]\n\n[components]\n\n[components.elmo]\nfactory = "elmo"\n')
    out = tmp_path / "out.cfg"
    fill_config(out, config)
    text = out.read_text()
    for key in BILM_SETTINGS:
        assert len(re.findall(rf"^{key} = ", text, flags=re.M)) == 1, key
    filled = Config().from_str(text)
    assert set(BILM_SETTINGS) <= set(filled["components"]["elmo"]["model"])
    assert not set(BILM_SETTINGS) & set(filled["components"]["elmo"])


def test_one_file_without_the_other_is_refused_by_the_architecture():
    with pytest.raises(ValueError, match="both options_file and weight_file"):
        registry.resolve({"m": v2_block(options_file=OPTIONS)})


def test_a_config_override_wins_over_the_settings_saved_with_the_model(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": v2_block(**SETTINGS)})
    nlp.to_disk(tmp_path / "saved")
    loaded = spacy.load(tmp_path / "saved", config={"components": {"elmo": {"model": {"max_sentence_tokens": 2}}}})
    assert loaded.get_pipe("elmo").settings.max_sentence_tokens == 2


def test_replace_listeners_writes_the_settings_as_they_stand_and_the_config_rebuilds():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": v2_block(**SETTINGS, max_batch_tokens=512)})
    nlp.add_pipe("tagger", config=TAGGER)
    nlp.initialize(lambda: examples(nlp))
    nlp.replace_listeners("elmo", "tagger", ["model.tok2vec"])
    block = nlp.config["components"]["tagger"]["model"]["tok2vec"]
    assert block["@architectures"] == "spacy_elmo.ElmoEmbedding.v2"
    assert (block["frozen"], block["lang"]) == (True, "en")
    assert block["bilm"] == v2_block(**SETTINGS, stateful=False, max_batch_tokens=512, precision="fp32",
                                     cache_size=DEFAULT_PIPELINE_CACHE_SIZE)
    rebuilt = load_model_from_config(nlp.config, auto_fill=True)
    (bilm,) = [node for node in rebuilt.get_pipe("tagger").model.walk() if node.name == "elmo_bilm"]
    settings = bilm_settings(bilm)
    assert {key: getattr(settings, key) for key in SETTINGS} == SETTINGS and settings.max_batch_tokens == 512
