"""``spacy_elmo.ElmoBiLm.v2`` holds the biLM's settings; the factory's 0.1.0 keys still set them."""
import numpy as np
import pytest
import spacy
from spacy.language import Language
from spacy.util import load_model_from_config, registry

from spacy_elmo import ElmoEmbedder

from .conftest import OPTIONS, WEIGHTS
from .test_handoff import TAGGER, examples

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
    assert {key: nlp.get_pipe("elmo").model.attrs[key] for key in SETTINGS} == SETTINGS


def test_the_factory_keys_of_0_1_0_map_into_the_model():
    old_style, new_style = spacy.blank("en"), spacy.blank("en")
    old_style.add_pipe("elmo", config=SETTINGS)
    new_style.add_pipe("elmo", config={"model": v2_block(**SETTINGS)})
    assert {key: old_style.get_pipe("elmo").model.attrs[key] for key in SETTINGS} == SETTINGS
    np.testing.assert_array_equal(vectors(old_style), vectors(new_style))
    # Windows of 4 tokens, as the embedder gives them for the two pieces of the sentence.
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS, initial_state="zeros")
    pieces = np.concatenate([x.mean(axis=0) for x in embedder.embed_batch([SENTENCE[:4], SENTENCE[4:]])])
    np.testing.assert_allclose(vectors(new_style), pieces, atol=1e-5)


def test_one_file_without_the_other_is_refused_by_the_architecture():
    with pytest.raises(ValueError, match="both options_file and weight_file"):
        registry.resolve({"m": v2_block(options_file=OPTIONS)})


def test_a_config_override_wins_over_the_settings_saved_with_the_model(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": v2_block(**SETTINGS)})
    nlp.to_disk(tmp_path / "saved")
    loaded = spacy.load(tmp_path / "saved", config={"components": {"elmo": {"model": {"max_sentence_tokens": 2}}}})
    assert loaded.get_pipe("elmo").model.attrs["max_sentence_tokens"] == 2


def test_replace_listeners_writes_the_settings_as_they_stand_and_the_config_rebuilds():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={**SETTINGS, "max_batch_tokens": 512})  # the 0.1.0 keys
    nlp.add_pipe("tagger", config=TAGGER)
    nlp.initialize(lambda: examples(nlp))
    nlp.replace_listeners("elmo", "tagger", ["model.tok2vec"])
    block = nlp.config["components"]["tagger"]["model"]["tok2vec"]
    assert block["@architectures"] == "spacy_elmo.ElmoEmbedding.v2"
    assert (block["frozen"], block["lang"]) == (True, "en")
    assert block["bilm"] == v2_block(**SETTINGS, stateful=False, max_batch_tokens=512)
    rebuilt = load_model_from_config(nlp.config, auto_fill=True)
    (bilm,) = [node for node in rebuilt.get_pipe("tagger").model.walk() if node.name == "elmo_bilm"]
    assert {key: bilm.attrs[key] for key in SETTINGS} == SETTINGS and bilm.attrs["max_batch_tokens"] == 512


def test_the_0_1_0_embedding_block_still_builds():
    old = {"@architectures": "spacy_elmo.ElmoEmbedding.v1", **SETTINGS, "stateful": False, "frozen": True, "lang": "en"}
    model = registry.resolve({"m": old})["m"]
    (bilm,) = [node for node in model.walk() if node.name == "elmo_bilm"]
    assert {key: bilm.attrs[key] for key in SETTINGS} == SETTINGS


def test_set_tensor_is_refused_where_a_tok2vec_feeds_listeners_through_doc_tensor():
    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec")
    listener = {"@architectures": "spacy.Tok2VecListener.v1", "width": 96, "upstream": "*"}
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": listener}})
    nlp.add_pipe("elmo", config={**SETTINGS, "set_tensor": True})
    with pytest.raises(ValueError, match="set_tensor = false"):
        nlp.initialize(lambda: examples(nlp))
