"""AllenNLP 0.9's ``allennlp.commands.elmo`` module, as programs built on it read it (flair takes the default model's
files from here): ``ElmoEmbedder``, ``DEFAULT_OPTIONS_FILE``, ``DEFAULT_WEIGHT_FILE`` and ``DEFAULT_BATCH_SIZE``.

The two files are 0.9's URLs of the published ``original`` model, which stand for its download
(:func:`~spacy_elmo.sources.resolve.published_name`).
"""
from ...sources.catalog import CATALOG
from ..embedder import DEFAULT_BATCH_SIZE, DEFAULT_MODEL, ElmoEmbedder

DEFAULT_OPTIONS_FILE = CATALOG[DEFAULT_MODEL].urls["options"]
DEFAULT_WEIGHT_FILE = CATALOG[DEFAULT_MODEL].urls["weights"]

__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_OPTIONS_FILE", "DEFAULT_WEIGHT_FILE", "ElmoEmbedder"]
