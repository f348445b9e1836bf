"""A drop-in for AllenNLP's ELMo classes, without AllenNLP (only torch, numpy and h5py are imported): change the
import, keep the code. Which import replaces which, what differs and the opt-ins: docs/migrating.md.
"""
from .scalar_mix import ScalarMix
from .elmo import ConfigurationError, Elmo, ElmoBiLm, _ElmoBiLm, _ElmoCharacterEncoder, batch_to_ids
from .embedder import ElmoEmbedder

__all__ = [
    "ConfigurationError", "Elmo", "ElmoBiLm", "ElmoEmbedder", "ScalarMix", "_ElmoBiLm", "_ElmoCharacterEncoder",
    "batch_to_ids",
]
