"""The thinc shim that holds the biLM of the ``elmo`` component: saved as JSON options and hdf5 weights, never pickled."""
import contextlib
import hashlib
import json
from typing import Iterator, Optional

import srsly
from thinc.api import PyTorchShim, get_torch_default_device

from ..errors import ElmoWeightsError
from ..model.encoder import ElmoEncoder
from ..model.segment_encoder import SegmentEncoder
from ..model.options import ElmoOptions
from ..runtime import BiLmSettings, ElmoRuntime
from ..formats.weights import bilm_from_bytes, storage_dtype, weights_to_bytes


class ElmoShim(PyTorchShim):
    """Holds the biLM's :class:`ElmoRuntime` (or nothing before the weights are loaded); thinc sees its module.

    Serialized as msgpack ``{"options": options.json text, "weights": hdf5 bytes, "sha256": of both}``; no pickle.
    The weights keep the dtype of the file they came from (:func:`~spacy_elmo.formats.weights.storage_dtype`): the
    embedded float16 models save at half the float32 size, and a fine-tuned biLM saves as float32.
    Loading puts the biLM on thinc's current device, so a pipeline saved on GPU loads on CPU. A runtime read from
    bytes runs with default settings until the model gives it its own (on first use).
    """

    def __init__(self, runtime: Optional[ElmoRuntime] = None):
        super().__init__(None if runtime is None else runtime.segment_encoder)
        self.runtime = runtime

    @property
    def module(self) -> Optional[SegmentEncoder]:
        return self._model

    def set_runtime(self, runtime: ElmoRuntime) -> None:
        self.runtime = runtime
        self._model = runtime.segment_encoder

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
    def use_params(self, params) -> Iterator[None]:
        """Run the block with ``params``' values of this biLM's parameters (the optimizer's averages); state derived
        from the weights (token cache, warm state, converted weights) is dropped only if a parameter is swapped.

        A frozen biLM has no averages, so evaluation in ``spacy train`` keeps its cache and converted weights.
        """
        prefix = f"pytorch_{self.id}_"
        if self._model is None or not any(isinstance(key, str) and key.startswith(prefix) for key in params):
            yield
            return
        with super().use_params(params):
            self.runtime.weights_changed()
            yield
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
            options = ElmoOptions.from_dict(json.loads(text), source="serialized ELMo options")
            encoder = ElmoEncoder(bilm_from_bytes(options, weights)).to(get_torch_default_device())
            self.set_runtime(ElmoRuntime(encoder, BiLmSettings()))
        return self


def _sha256(options: str, weights: bytes) -> str:
    return hashlib.sha256(options.encode("utf-8") + b"\0" + weights).hexdigest()
