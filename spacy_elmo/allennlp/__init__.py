"""A drop-in for AllenNLP's ELMo classes, without AllenNLP: change the import, keep the code.

``from spacy_elmo.allennlp import Elmo, batch_to_ids`` for ``allennlp.modules.elmo``, ``ScalarMix`` for
``allennlp.modules.scalar_mix``, ``ElmoEmbedder`` for 0.9's (stateful; not ``spacy_elmo.ElmoEmbedder``), also at
``spacy_elmo.allennlp.commands.elmo``, with 0.9's ``DEFAULT_OPTIONS_FILE`` and ``DEFAULT_WEIGHT_FILE``, and
``ConfigurationError`` for ``allennlp.common.checks``. Only torch, numpy and h5py are imported: no spaCy, no
thinc. docs/migrating.md says what differs (nothing by default) and what the opt-ins give.
"""
from .scalar_mix import ScalarMix
from .elmo import ConfigurationError, Elmo, ElmoBiLm, _ElmoBiLm, _ElmoCharacterEncoder, batch_to_ids
from .embedder import ElmoEmbedder

__all__ = [
    "ConfigurationError", "Elmo", "ElmoBiLm", "ElmoEmbedder", "ScalarMix", "_ElmoBiLm", "_ElmoCharacterEncoder",
    "batch_to_ids",
]
