"""spaCy integration: the ``elmo`` component, the listener architecture and the Doc attributes."""
from .architectures import build_bilm_model_v2
from .component import ElmoComponent, make_elmo
from .extensions import install_extensions, install_vector_hooks, with_vector_hooks
from .listener import ListenerState, build_elmo_embedding_v2, build_elmo_listener

__all__ = [
    "ElmoComponent",
    "ListenerState",
    "build_bilm_model_v2",
    "build_elmo_embedding_v2",
    "build_elmo_listener",
    "install_extensions",
    "install_vector_hooks",
    "make_elmo",
    "with_vector_hooks",
]
