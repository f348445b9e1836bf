"""The biLM of the AllenNLP-compatible classes: from files, or from a downloaded model's name."""
from typing import Optional

from ..formats.weights import load_files
from ..model.encoder import ElmoEncoder
from ..sources.resolve import model_files
from ..util.files import PathLike


def load_encoder(options_file: Optional[PathLike], weight_file: Optional[PathLike], initial_state: str) -> ElmoEncoder:
    """An :class:`ElmoEncoder` on the CPU for an ``options.json`` and weights ``.hdf5``, or for a downloaded model's
    name given as ``options_file`` alone."""
    return ElmoEncoder(load_files(*model_files(options_file, weight_file)), initial_state=initial_state)
