"""The one loader of a biLM for every runtime, :func:`load_encoder` (pretraining reads files with ``load_files``)."""
import json
from typing import NamedTuple, Optional, Union

import torch

from ..formats.weights import bilm_from_bytes, load_files
from ..model.devices import check_device
from ..model.encoder import ElmoEncoder
from ..model.options import ElmoOptions
from ..util.files import PathLike
from .resolve import DEFAULT_LANG, model_files


# A biLM saved as bytes: its options.json text and its hdf5 weights.
SavedBiLm = NamedTuple("SavedBiLm", [("options", str), ("weights", bytes)])


def load_encoder(
    options_file: Optional[PathLike],
    weight_file: Optional[PathLike],
    lang: str = DEFAULT_LANG,
    device: Union[str, torch.device, None] = None,
    saved: Optional[SavedBiLm] = None,
) -> ElmoEncoder:
    """The biLM of ``saved`` bytes, else of an ``options.json`` and weights ``.hdf5`` (or a downloaded model's name as
    ``options_file``, or neither: the model embedded for ``lang``), on ``device`` (checked first; default the CPU)."""
    target = check_device(str(device or "cpu"))
    if saved is not None:
        options = ElmoOptions.from_dict(json.loads(saved.options), source="serialized ELMo options")
        return ElmoEncoder(bilm_from_bytes(options, saved.weights)).to(target)
    return ElmoEncoder(load_files(*model_files(options_file, weight_file, lang))).to(target)
