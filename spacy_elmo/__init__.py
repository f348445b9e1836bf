"""spacy-elmo: ELMo contextual word vectors for spaCy, on a PyTorch biLM that reads AllenNLP/bilm-tf weights.

The names below import what they need when first used: ``import spacy_elmo`` alone loads neither spaCy nor
torch, so that the torch-only layers (``spacy_elmo.model``, ``spacy_elmo.pretrain``) and the command line start
without them. spaCy finds the ``elmo`` factory and the architectures through the package's entry points.
"""
import warnings
from importlib import import_module
from typing import TYPE_CHECKING, Any, List

from .about import __version__
from .errors import (ElmoError, ElmoListenerWarning, ElmoOptionsError, ElmoPipelineError, ElmoSettingsError,
                     ElmoThreadsWarning, ElmoWeightsError, TokenTruncationWarning)

if TYPE_CHECKING:  # what type checkers see: the lazy names below, with their real types (py.typed ships)
    from .embedder import ElmoEmbedder
    from .model.options import ElmoOptions
    from .pipeline import ElmoComponent, install_vector_hooks, with_vector_hooks
    from .serving.cancel import CallCancelled, CancelHandle
    from .sources.resolve import embedded_model_files

# name -> the module that defines it, imported on first use
_LAZY = {
    "CallCancelled": ".serving.cancel",
    "CancelHandle": ".serving.cancel",
    "ElmoComponent": ".pipeline",
    "ElmoEmbedder": ".embedder",  # stateless by default; AllenNLP 0.9's, stateful, is spacy_elmo.allennlp's
    "ElmoOptions": ".model.options",
    "embedded_model_files": ".sources.resolve",
    "install_vector_hooks": ".pipeline",
    "with_vector_hooks": ".pipeline",
}

__all__ = [
    "__version__", "CallCancelled", "CancelHandle", "ElmoComponent", "ElmoEmbedder", "ElmoError",
    "ElmoListenerWarning", "ElmoOptions", "ElmoOptionsError", "ElmoPipelineError", "ElmoSettingsError",
    "ElmoThreadsWarning", "ElmoWeightsError", "TokenTruncationWarning", "embedded_model_files", "install_vector_hooks",
    "with_vector_hooks",
]


def __getattr__(name: str) -> Any:
    """Import a lazy name's module on first use (PEP 562) and keep the name here."""
    if name == "Elmo":  # the component class's former name, which AllenNLP's Elmo (spacy_elmo.allennlp) shares
        warnings.warn(
            "spacy_elmo.Elmo is now spacy_elmo.ElmoComponent (the elmo component's class); AllenNLP's Elmo module is "
            "spacy_elmo.allennlp.Elmo", DeprecationWarning, stacklevel=2,
        )
        return __getattr__("ElmoComponent")
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
