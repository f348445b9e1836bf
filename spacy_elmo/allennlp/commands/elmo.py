"""AllenNLP 0.9's ``allennlp.commands.elmo`` module, as programs built on it read it (flair takes the default model's
files from here): ``ElmoEmbedder``, ``DEFAULT_OPTIONS_FILE``, ``DEFAULT_WEIGHT_FILE`` and ``DEFAULT_BATCH_SIZE``.

The two files are 0.9's: the URLs of the published ``original`` model. Given to ``ElmoEmbedder`` or ``Elmo`` they
stand for that model, read from spacy-elmo's model cache once downloaded (``python -m spacy_elmo download
original``); nothing is fetched on the fly.
"""
from ...sources.catalog import CATALOG
from ..embedder import DEFAULT_BATCH_SIZE, DEFAULT_MODEL, ElmoEmbedder

DEFAULT_OPTIONS_FILE = CATALOG[DEFAULT_MODEL].urls["options"]
DEFAULT_WEIGHT_FILE = CATALOG[DEFAULT_MODEL].urls["weights"]

__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_OPTIONS_FILE", "DEFAULT_WEIGHT_FILE", "ElmoEmbedder"]
