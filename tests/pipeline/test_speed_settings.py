"""The biLM block's ``cache_size`` and ``precision`` in the ``elmo`` component: exact cache, faithful precision,
kept by saving and loading, and downstream training on a reduced-precision frozen biLM."""
import numpy as np
import pytest
import spacy

from spacy_elmo import ElmoEmbedder

from tests.pipeline.conftest import OPTIONS, WEIGHTS, make_nlp, tagger_pipeline, train_losses
from tests.conftest import BATCH_INDEPENDENCE, ROUNDING, shared_data

TEXTS = ["The cat sat on the mat .", "Dogs bark at the cat at night .", "The the the cat ."]


def encoder_of(nlp):
    return nlp.get_pipe("elmo").runtime.encoder


def vectors(nlp, texts=TEXTS):
    return [doc._.elmo for doc in nlp.pipe(texts)]


def test_the_token_cache_is_on_by_default_and_exact():
    cached, uncached = make_nlp(), make_nlp(cache_size=0)
    reference = vectors(uncached)
    first = vectors(cached)  # fills the cache
    again = vectors(cached)  # reads it
    assert len(encoder_of(cached).cache) == len({w for t in TEXTS for w in t.split()}) + 2  # and <S>, </S>
    assert encoder_of(uncached).cache is None
    for a, b, c in zip(reference, first, again):
        np.testing.assert_allclose(b, a, **ROUNDING)
        np.testing.assert_array_equal(c, b)


def test_the_cache_fills_from_a_word_list_and_stops_when_full():
    nlp = make_nlp(cache_size=3)
    nlp.get_pipe("elmo").fill_token_cache(["the", "cat", "sat", "on"])
    assert list(encoder_of(nlp).cache.slots) == ["the", "cat", "sat"]
    np.testing.assert_allclose(vectors(nlp)[0], vectors(make_nlp(cache_size=0))[0], **ROUNDING)


def test_int8_in_the_architecture_block_stays_close_to_fp32():
    fp32, int8 = vectors(make_nlp()), vectors(make_nlp(precision="int8"))
    for a, b in zip(fp32, int8):
        cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        assert cosine.min() > 0.999 and np.abs(a - b).max() > 0  # close, and really int8


def default_nlp(precision: str) -> spacy.language.Language:
    """A pipeline with the default model and settings (the token cache on) at ``precision``."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy_elmo.ElmoBiLm.v2", "precision": precision}})
    return nlp


@pytest.mark.slow
def test_int8_vectors_do_not_depend_on_the_texts_before_them_or_their_batch():
    """The first 1,000 sentences of UD English-EWT's dev set one by one (the token cache's history makes most calls
    compute one or two new words), against all of them through ``nlp.pipe``, each on a fresh pipeline."""
    conllu = shared_data("ud_english_ewt") / "en_ewt-ud-dev.conllu"
    lines = conllu.read_text(encoding="utf-8").splitlines()
    texts = [line[len("# text = ") :] for line in lines if line.startswith("# text = ")][:1000]
    serial_nlp = default_nlp("int8")
    serial = [serial_nlp(text)._.elmo for text in texts]
    batched = [doc._.elmo for doc in default_nlp("int8").pipe(texts)]
    assert max(float(np.abs(a - b).max()) for a, b in zip(serial, batched)) <= BATCH_INDEPENDENCE


def test_precision_and_cache_size_survive_saving_and_loading(tmp_path):
    nlp = make_nlp(precision="int8", cache_size=77)
    expected = vectors(nlp)
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    vectors_loaded = vectors(loaded)
    encoder = encoder_of(loaded)
    assert (encoder.precision, encoder.cache.capacity) == ("int8", 77)
    for a, b in zip(expected, vectors_loaded):
        np.testing.assert_allclose(b, a, **ROUNDING)


def test_a_config_override_changes_the_precision_of_a_saved_pipeline(tmp_path):
    make_nlp(precision="int8").to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline", config={"components": {"elmo": {"model": {"precision": "fp32"}}}})
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS, initial_state="zeros")
    np.testing.assert_allclose(vectors(loaded)[0], embedder.embed_sentence(TEXTS[0].split())[-1], atol=1e-5)
    assert encoder_of(loaded).precision == "fp32"


def test_a_tagger_trains_on_an_int8_frozen_bilm_as_on_fp32():
    trained = {}
    for precision in ("fp32", "int8"):
        nlp = tagger_pipeline(precision=precision)
        losses = train_losses(nlp, 30)
        assert encoder_of(nlp).precision == precision and losses[-1] < 0.5 * losses[0]
        trained[precision] = (losses[-1], [t.tag_ for t in nlp("The cat sat on the mat .")])
    assert trained["int8"][0] == pytest.approx(trained["fp32"][0], rel=0.05)
    assert trained["int8"][1] == trained["fp32"][1]


def test_fine_tuning_at_a_reduced_precision_is_refused():
    with pytest.raises(ValueError, match="precision 'int8' is for a frozen biLM"):
        make_nlp(precision="int8", frozen=False)
