"""A biLM read from where it comes from: its files, a downloaded model's name, or the model embedded for a language.

The runtime and the AllenNLP module read their biLM here, so that resolving the source, reading its formats and
checking the device happen in one order, in one place. (Pretraining, which starts from files it was given, reads
them with ``formats.weights.load_files``.)
"""
from typing import Optional, Union

import torch

from ..formats.weights import load_files
from ..model.devices import check_device
from ..model.encoder import ElmoEncoder
from ..util.files import PathLike
from .resolve import DEFAULT_LANG, model_files


def load_encoder(
    options_file: Optional[PathLike],
    weight_file: Optional[PathLike],
    lang: str = DEFAULT_LANG,
    device: Union[str, torch.device, None] = None,
) -> ElmoEncoder:
    """The biLM of an ``options.json`` and weights ``.hdf5`` (or a downloaded model's name as ``options_file``, or
    neither: the model embedded for ``lang``) on ``device`` (checked first; default the CPU)."""
    target = check_device(str(device or "cpu"))
    return ElmoEncoder(load_files(*model_files(options_file, weight_file, lang))).to(target)
