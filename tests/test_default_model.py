"""The English model shipped in the package (MODEL_CARD.md)."""
import numpy as np

from spacy_elmo import ElmoEmbedder
from spacy_elmo.default_model import default_model_files
from spacy_elmo.model.encoder import TRAINING_START_KEY
from spacy_elmo.options import ElmoOptions, preset


def test_embedded_model_is_the_tiny_architecture_trained_from_zeros_and_small():
    options_file, weight_file = default_model_files()
    options = ElmoOptions.from_file(options_file)
    assert options == preset("tiny")
    assert options.extra[TRAINING_START_KEY] == "zeros"
    assert weight_file.stat().st_size <= 25 * 2**20


def test_no_arguments_use_the_embedded_model_from_the_zero_state():
    sentence = ["The", "bank", "of", "the", "river", "."]
    default = ElmoEmbedder().embed_sentence(sentence)
    explicit = ElmoEmbedder(*default_model_files(), initial_state="zeros").embed_sentence(sentence)
    assert default.shape == (3, 6, 256) and default.dtype == np.float32 and np.isfinite(default).all()
    np.testing.assert_array_equal(default, explicit)
