"""Published models' URLs (as AllenNLP programs pass them) resolve to the downloaded model of that name."""

import pytest

from spacy_elmo.errors import ElmoSettingsError, NotDownloadedError
from spacy_elmo.sources.catalog import CATALOG
from spacy_elmo.sources.resolve import model_files, published_name
from tests.conftest import ALLENNLP

# AllenNLP 0.9's DEFAULT_OPTIONS_FILE / DEFAULT_WEIGHT_FILE, as its source spells them.
ALLENNLP_09 = (
    "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_options.json",
    "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5",
)
# The same files at AllenNLP's other S3 address, which flair uses.
WEST = tuple(url.replace("allennlp.s3.amazonaws.com/", "s3-us-west-2.amazonaws.com/allennlp/") for url in ALLENNLP_09)


@pytest.mark.parametrize("urls", [ALLENNLP_09, WEST], ids=["allennlp-0.9", "us-west-2"])
def test_the_original_models_urls_name_it(urls):
    assert published_name(*urls) == "original"


def test_the_pubmed_weights_with_the_originals_options_name_pubmed():
    """flair gives the contributed PubMed weights with options of the same architecture."""
    assert published_name(ALLENNLP_09[0], CATALOG["pubmed"].urls["weights"]) == "pubmed"


def test_paths_are_not_urls():
    assert published_name(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5") is None


def test_urls_of_a_downloaded_model_give_its_files(downloaded_original):
    folder = downloaded_original / "original"
    assert model_files(*ALLENNLP_09) == (folder / "options.json", folder / "weights.hdf5")


def test_urls_of_a_model_not_downloaded_say_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    with pytest.raises(NotDownloadedError, match="python -m spacy_elmo download original$") as error:
        model_files(*ALLENNLP_09)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "options, weights, message",
    [
        ("https://example.org/options.json", "https://example.org/weights.hdf5", "download the file and give its local path"),
        (ALLENNLP_09[0], str(ALLENNLP / "lm_weights.hdf5"), "both as URLs"),
        (CATALOG["small"].urls["options"], ALLENNLP_09[1], "not the options of the published model 'original'"),
    ],
    ids=["unknown", "url-and-path", "other-architecture"],
)
def test_urls_that_name_no_published_model_are_one_line_errors(options, weights, message):
    with pytest.raises(ElmoSettingsError, match=message) as error:
        model_files(options, weights)
    assert "\n" not in str(error.value)
