"""A trained pipeline saved with ``store_vectors = false`` (as the example configs train it) gives Docs no vectors;
loading it with the setting switched on gives the vectors the README promises."""
import numpy as np
import spacy

from spacy_elmo import ElmoEmbedder

from tests.pipeline.conftest import OPTIONS, WEIGHTS, make_nlp

WORDS = ["They", "sat", "on", "the", "bank", "."]


def test_saved_pipeline_without_stored_vectors_gives_them_when_loaded_with_store_vectors(tmp_path):
    make_nlp(store_vectors=False).to_disk(tmp_path / "pipeline")
    assert spacy.load(tmp_path / "pipeline")(" ".join(WORDS))._.elmo is None

    nlp = spacy.load(tmp_path / "pipeline", config={"components": {"elmo": {"store_vectors": True}}})
    layers = ElmoEmbedder(OPTIONS, WEIGHTS, initial_state="zeros").embed_sentence(WORDS)
    np.testing.assert_allclose(nlp(" ".join(WORDS))._.elmo, layers[-1], atol=1e-5)
