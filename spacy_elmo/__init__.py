"""spacy-elmo: ELMo contextual word vectors for spaCy, on a PyTorch biLM that reads AllenNLP/bilm-tf weights.

The names below are imported when first used, so that the parts which need no spaCy (``spacy_elmo.model``,
``spacy_elmo.allennlp``) can be imported by a PyTorch program without importing spaCy and thinc.
"""
import importlib
from typing import Any

from .about import __version__
from .errors import ElmoError, ElmoOptionsError, ElmoPipelineError, ElmoSettingsError, ElmoWeightsError, TokenTruncationWarning

# Public name -> the module that defines it, imported on first access.
_LAZY = {
    "BiLm": ".model.bilm",
    "Elmo": ".pipeline",
    "ElmoEmbedder": ".embedder",
    "ElmoEncoder": ".model.encoder",
    "ElmoOptions": ".model.options",
    "install_vector_hooks": ".pipeline",
    "with_vector_hooks": ".pipeline",
}

__all__ = [
    "__version__",
    "BiLm",
    "Elmo",
    "ElmoEmbedder",
    "ElmoEncoder",
    "ElmoError",
    "ElmoOptions",
    "ElmoOptionsError",
    "ElmoPipelineError",
    "ElmoSettingsError",
    "ElmoWeightsError",
    "TokenTruncationWarning",
    "install_vector_hooks",
    "with_vector_hooks",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'spacy_elmo' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
