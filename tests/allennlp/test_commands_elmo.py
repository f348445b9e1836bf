"""0.9's ``allennlp.commands.elmo`` names, as flair reads them: the default model's URLs stand for that model."""
import numpy as np
import pytest

from spacy_elmo.allennlp.commands.elmo import DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE, ElmoEmbedder
from spacy_elmo.errors import NotDownloadedError

# AllenNLP 0.9's values, as its source spells them.
ALLENNLP_09_OPTIONS = (
    "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_options.json"
)
ALLENNLP_09_WEIGHTS = (
    "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5"
)


def test_the_default_files_are_09s():
    assert (DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE) == (ALLENNLP_09_OPTIONS, ALLENNLP_09_WEIGHTS)


def test_the_default_files_load_the_downloaded_original_model(allennlp_files, downloaded_original):
    """flair: ``ElmoEmbedder(options_file=DEFAULT_OPTIONS_FILE, weight_file=DEFAULT_WEIGHT_FILE)``."""
    by_url = ElmoEmbedder(options_file=DEFAULT_OPTIONS_FILE, weight_file=DEFAULT_WEIGHT_FILE, cuda_device=-1)
    np.testing.assert_array_equal(by_url.embed_sentence(["a", "b"]), ElmoEmbedder(*allennlp_files).embed_sentence(["a", "b"]))


def test_the_default_files_without_the_download_say_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    with pytest.raises(NotDownloadedError, match="python -m spacy_elmo download original"):
        ElmoEmbedder(DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE)
