"""Fixed mixes of the biLM layers: ``"average"``, ``"top"`` or one weight per layer.

Used where the weights are a setting, not learned: the ``elmo`` component's ``Doc._.elmo`` and
the ``embed`` command's ``--layers``. (The three mixes, this, a listener's and AllenNLP's, and how they differ:
docs/api.md, "Layer mixes".)
"""
from typing import Literal, Sequence, Union, get_args

import numpy as np

from ..errors import ElmoSettingsError
from ..util.numbers import is_number

MixName = Literal["average", "top"]
MixSpec = Union[MixName, Sequence[float]]
MIX_NAMES = get_args(MixName)
DEFAULT_MIX = "top"


def check_mix_spec(spec: MixSpec) -> None:
    """Reject a ``mix`` setting that no biLM could use (the layer count is checked once weights load)."""
    if spec not in MIX_NAMES if isinstance(spec, str) else not isinstance(spec, (list, tuple)) or not all(map(is_number, spec)):
        raise ElmoSettingsError(f"mix must be one of {MIX_NAMES} or a list of one weight per layer, found {spec!r}")
    if not isinstance(spec, str) and len(spec) == 0:
        raise ElmoSettingsError("mix is an empty list; give one weight per biLM layer, or 'average' / 'top'")


def check_mix_fits(spec: MixSpec, n_layers: int) -> None:
    """Refuse a list of weights whose length is not the biLM's ``n_layers`` (names fit any biLM)."""
    if not isinstance(spec, str) and len(spec) != n_layers:
        raise ElmoSettingsError(
            f"mix gives {len(spec)} weights, but this biLM has {n_layers} layers (the token layer and "
            f"{n_layers - 1} LSTM layers); give {n_layers} weights, or 'average' / 'top'"
        )


def fixed_mix_weights(spec: MixSpec, n_layers: int) -> np.ndarray:
    """The weights of ``spec``: ``"average"`` (1/n each), ``"top"`` (the last layer) or as given."""
    if spec == "average":
        return np.full(n_layers, 1.0 / n_layers, dtype=np.float32)
    if spec == "top":
        return np.eye(n_layers, dtype=np.float32)[-1]
    check_mix_fits(spec, n_layers)
    return np.asarray(spec, dtype=np.float32)


def mix_layers(weights: Sequence[float], layers: np.ndarray) -> np.ndarray:
    """``sum_j weights[j] * layers[j]`` of host layers ``(n_layers, ..., dim)``, float32: the fixed mix of layers
    that were computed whole (a biLM run asked only for the mix accumulates it as each layer is made, and never
    holds the layers: ``MixOutput`` in ``lstm.py``)."""
    return np.tensordot(np.asarray(weights, dtype=np.float32), layers, axes=1).astype(np.float32, copy=False)
