"""The thinc shim that holds the ``elmo`` component's biLM and its settings (which the config holds: never saved)."""
import contextlib
import hashlib
import json
from typing import Any, Dict, Iterator, Optional

import srsly
import torch
from thinc.api import PyTorchShim, get_torch_default_device, xp2torch

from ..errors import ElmoWeightsError
from ..model.segment_encoder import SegmentEncoder
from ..runtime import BiLmSettings, ElmoRuntime
from ..formats.weights import storage_dtype, weights_to_bytes
from ..sources.load import SavedBiLm


class ElmoShim(PyTorchShim):
    """Holds the biLM's :class:`BiLmSettings` and, once the weights are loaded, the :class:`ElmoRuntime` built from
    them; thinc sees its module.

    The settings are the one copy: every runtime of the shim is built from them (from files by :meth:`load`, from
    saved bytes by :meth:`from_bytes`), and :meth:`configure` changes them and the loaded runtime together.

    Serialized as msgpack ``{"options": options.json text, "weights": hdf5 bytes, "sha256": of both}``; no pickle.
    The weights keep the dtype of the file they came from (:func:`~spacy_elmo.formats.weights.storage_dtype`): the
    embedded float16 models save at half the float32 size, and a fine-tuned biLM saves as float32.
    Loading puts the biLM on thinc's current device (checked first), so a pipeline saved on GPU loads on CPU.
    """

    def __init__(self, settings: BiLmSettings):
        super().__init__(None)
        self.settings = settings
        self.runtime: Optional[ElmoRuntime] = None

    @property
    def module(self) -> Optional[SegmentEncoder]:
        return self._model

    def configure(self, **changes: Any) -> None:
        """Change some settings (checked); a loaded biLM applies what changed at once."""
        self.settings = self.settings.replace(**changes)
        if self.runtime is not None:
            self.runtime.configure(self.settings)

    def load(self) -> ElmoRuntime:
        """(Re)load the biLM from the files the settings name (none: the embedded model), on thinc's device."""
        return self._set_runtime(ElmoRuntime.load(self.settings, get_torch_default_device()))

    def _set_runtime(self, runtime: ElmoRuntime) -> ElmoRuntime:
        self.runtime = runtime
        self._model = runtime.segment_encoder
        return runtime

    @property
    def device(self):
        return get_torch_default_device() if self._model is None else super().device

    def to_device(self, device_type: str, device_id: int) -> None:  # pragma: no cover (GPU)
        if self._model is not None:
            super().to_device(device_type, device_id)

    def finish_update(self, optimizer) -> None:
        """Apply the optimizer to the biLM (when fine-tuning) and drop state derived from old weights."""
        if self.runtime is not None:
            super().finish_update(optimizer)
            self.runtime.weights_changed()

    @contextlib.contextmanager
    def use_params(self, params: Dict[Any, Any]) -> Iterator[None]:
        """Run the block with ``params``' values of this biLM's parameters (the optimizer's averages, which thinc's
        optimizers key ``(shim.id, parameter name)`` as :meth:`finish_update` names them), and put the weights back
        after. State derived from the weights (token cache, warm state, converted weights) is dropped only if a
        parameter is swapped: a frozen biLM has no averages, so evaluation in ``spacy train`` keeps its cache.
        """
        swapped = {} if self._model is None else {
            key[1]: value for key, value in params.items() if isinstance(key, tuple) and key[0] == self.id
        }
        if not swapped:
            yield
            return
        parameters = dict(self._model.named_parameters())
        backup = {name: parameters[name].detach().clone() for name in swapped}
        self._copy_into(parameters, swapped)
        try:
            yield
        finally:
            self._copy_into(parameters, backup)

    def _copy_into(self, parameters: Dict[str, Any], values: Dict[str, Any]) -> None:
        """Overwrite the named parameters with ``values`` (xp arrays or tensors) and drop what was derived from them."""
        with torch.no_grad():
            for name, value in values.items():
                parameters[name].copy_(value if isinstance(value, torch.Tensor) else xp2torch(value))
        self.runtime.weights_changed()

    def to_bytes(self) -> bytes:
        if self._model is None:
            return srsly.msgpack_dumps({})
        bilm = self._model.encoder.bilm
        options, weights = json.dumps(bilm.options.to_dict()), weights_to_bytes(bilm, storage_dtype(bilm))
        return srsly.msgpack_dumps({"options": options, "weights": weights, "sha256": _sha256(options, weights)})

    def from_bytes(self, bytes_data: bytes) -> "ElmoShim":
        """Load saved options and weights; anything damaged raises :class:`ElmoWeightsError` and changes nothing."""
        msg = srsly.msgpack_loads(bytes_data)
        if msg:
            record = msg if isinstance(msg, dict) else {}
            text, weights = record.get("options"), record.get("weights")
            if not (isinstance(text, str) and isinstance(weights, bytes) and record.get("sha256") == _sha256(text, weights)):
                raise ElmoWeightsError("its options and hdf5 weights fail their SHA-256 check")
            self._set_runtime(ElmoRuntime.load(self.settings, get_torch_default_device(), SavedBiLm(text, weights)))
        return self


def _sha256(options: str, weights: bytes) -> str:
    return hashlib.sha256(options.encode("utf-8") + b"\0" + weights).hexdigest()
