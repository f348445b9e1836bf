"""spacy-elmo: ELMo contextual word vectors for spaCy, on a PyTorch biLM that reads AllenNLP/bilm-tf weights."""
from .about import __version__
from .embedder import ElmoEmbedder
from .errors import ElmoError, ElmoOptionsError, ElmoPipelineError, ElmoSettingsError, ElmoWeightsError, TokenTruncationWarning
from .model.bilm import BiLm
from .model.encoder import ElmoEncoder
from .model.options import ElmoOptions
from .pipeline import Elmo, install_vector_hooks, with_vector_hooks

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
