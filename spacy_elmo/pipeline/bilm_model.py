"""The thinc model inside the ``elmo`` component: Docs in, all biLM layers of every token out.

Each Doc is cut into segments (its sentences when it has sentence boundaries, else the whole
Doc), and segments longer than ``max_sentence_tokens`` into consecutive windows. The segments
of all Docs of a call are batched together by length under a cap on padded tokens, so one
long Doc never becomes one huge biLM batch. The output of a Doc is its segments' layers put
back side by side, ``(n_layers + 1, len(doc), 2 * projection_dim)``.

The biLM lives in a :class:`ElmoShim` (a ``PyTorchShim`` that saves options as JSON and
weights as hdf5, never pickles) and is loaded lazily: by ``initialize()``, by ``from_bytes`` /
``from_disk``, or on the first call. Settings are plain model attrs, so a copy of the model
(e.g. made by ``nlp.replace_listeners``) keeps working on its own.
"""
import contextlib
import hashlib
import json
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import srsly
import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import ArgsKwargs, Model, PyTorchShim, get_torch_default_device, torch2xp, xp2torch
from thinc.types import Floats2d, Floats3d, FloatsXd
from torch import nn

from ..default_model import DEFAULT_LANG, default_model_files
from ..embedder import DEFAULT_INITIAL_STATE
from ..errors import ElmoWeightsError
from ..model.carried_state import CarriedState
from ..model.encoder import INITIAL_STATES, ElmoEncoder, length_batches
from ..options import ElmoOptions
from ..weights import bilm_from_bytes, load_files, weights_to_bytes

DEFAULT_SETTINGS: Dict[str, Any] = {
    "options_file": None,
    "weight_file": None,
    "initial_state": DEFAULT_INITIAL_STATE,
    "stateful": False,
    "max_batch_tokens": 4096,
    "max_sentence_tokens": 256,
    "frozen": True,
}
# Not a component setting but the pipeline's language: it picks the embedded model when no files are given.
MODEL_ATTRS: Dict[str, Any] = {**DEFAULT_SETTINGS, "lang": DEFAULT_LANG}


class Segment(NamedTuple):
    """Tokens ``start:end`` of Doc number ``doc``: one biLM input sequence."""

    doc: int
    start: int
    end: int


class SegmentEncoder(nn.Module):
    """Runs an :class:`ElmoEncoder` over many segments and packs the results along one token axis.

    Batches are formed by :func:`length_batches` (sorted by length, ``max_batch_tokens`` padded
    tokens at most). With ``stateful`` the batches keep the segments' order instead and each
    batch row starts from the state the same row ended in on the previous batch, as in AllenNLP.
    """

    def __init__(self, encoder: ElmoEncoder, stateful: bool = False):
        super().__init__()
        self.encoder = encoder
        self.stateful = stateful
        self.carried = CarriedState()

    @property
    def options(self) -> ElmoOptions:
        return self.encoder.options

    def forward(
        self, segments: Sequence[Sequence[str]], max_batch_tokens: int, mix: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """All segments' layers, ``(n_layers + 1, total_tokens, dim)``, segment after segment.

        With ``mix`` (one weight per layer) the layers are summed with these weights batch by
        batch and ``(total_tokens, dim)`` comes back, so the full layers never exist at once.
        """
        lengths = [len(s) for s in segments]
        offsets = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64))).tolist()
        shape = (offsets[-1], self.options.output_dim)
        if mix is None:
            shape = (self.options.n_output_layers,) + shape
        out = self.encoder.bilm.w_proj.new_zeros(shape)
        batches = _ordered_batches(lengths, max_batch_tokens) if self.stateful else length_batches(lengths, max_batch_tokens)
        for batch in batches:
            start = self.carried.start(self.encoder, len(batch)) if self.stateful else None
            layers, _, final = self.encoder([segments[i] for i in batch], start)
            if self.stateful:
                self.carried.update(final)
            if mix is not None:
                layers = torch.tensordot(mix.to(layers.dtype), layers, dims=1)
            for row, i in enumerate(batch):
                out[..., offsets[i] : offsets[i + 1], :] = layers[..., row, : lengths[i], :]
        return out


def _ordered_batches(lengths: Sequence[int], max_batch_tokens: int) -> List[List[int]]:
    """Consecutive indices in their given order, each group's ``size * longest`` within the cap."""
    batches: List[List[int]] = []
    current: List[int] = []
    longest = 0
    for i, n in enumerate(lengths):
        if current and (len(current) + 1) * max(longest, n + 2) > max_batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n + 2)
    if current:
        batches.append(current)
    return batches


class ElmoShim(PyTorchShim):
    """Holds the :class:`SegmentEncoder` (or nothing before the weights are loaded).

    Serialized as msgpack ``{"options": options.json text, "weights": hdf5 bytes, "sha256": of both}``; no pickle.
    Loading puts the biLM on thinc's current device, so a pipeline saved on GPU loads on CPU.
    """

    def __init__(self, module: Optional[SegmentEncoder] = None):
        super().__init__(module)

    @property
    def module(self) -> Optional[SegmentEncoder]:
        return self._model

    def set_module(self, module: SegmentEncoder) -> None:
        self._model = module.to(get_torch_default_device())

    @property
    def device(self):
        return get_torch_default_device() if self._model is None else super().device

    def to_device(self, device_type: str, device_id: int) -> None:  # pragma: no cover (GPU)
        if self._model is not None:
            super().to_device(device_type, device_id)

    def finish_update(self, optimizer) -> None:
        """Apply the optimizer to the biLM (when fine-tuning) and drop state derived from old weights."""
        if self._model is not None:
            super().finish_update(optimizer)
            self._model.encoder.weights_changed()

    @contextlib.contextmanager
    def use_params(self, params) -> Iterator[None]:
        if self._model is None:
            yield
            return
        with super().use_params(params):
            self._model.encoder.weights_changed()
            yield
        self._model.encoder.weights_changed()

    def to_bytes(self) -> bytes:
        if self._model is None:
            return srsly.msgpack_dumps({})
        bilm = self._model.encoder.bilm
        options, weights = json.dumps(bilm.options.to_dict()), weights_to_bytes(bilm)
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
            self.set_module(SegmentEncoder(ElmoEncoder(bilm_from_bytes(options, weights))))
        return self


def _sha256(options: str, weights: bytes) -> str:
    return hashlib.sha256(options.encode("utf-8") + b"\0" + weights).hexdigest()


@registry.architectures("spacy_elmo.ElmoBiLm.v1")
def build_bilm_model() -> Model[List[Doc], List[Floats3d]]:
    """The biLM network of the ``elmo`` component; its settings are the component's config."""
    return Model(
        "elmo_bilm",
        forward,
        init=init,
        shims=[ElmoShim()],
        dims={"nO": None, "nL": None},
        attrs=dict(MODEL_ATTRS),
    )


def configure_bilm_model(model: Model, **settings: Any) -> None:
    """Set the model's settings (keys of :data:`MODEL_ATTRS`), checking their values."""
    unknown = set(settings) - set(MODEL_ATTRS)
    if unknown:
        raise ValueError(f"Unknown ELMo biLM settings {sorted(unknown)}; known: {sorted(MODEL_ATTRS)}")
    if settings.get("initial_state", DEFAULT_INITIAL_STATE) not in INITIAL_STATES:
        raise ValueError(f"initial_state must be one of {INITIAL_STATES}, found {settings['initial_state']!r}")
    for key in ("max_batch_tokens", "max_sentence_tokens"):
        if key in settings and settings[key] < 1:
            raise ValueError(f"{key} must be a positive number of tokens, found {settings[key]}")
    if ("options_file" in settings) != ("weight_file" in settings) or (
        (settings.get("options_file") is None) != (settings.get("weight_file") is None)
    ):
        raise ValueError(
            "Give both options_file and weight_file (AllenNLP options.json and weights .hdf5), or neither to use "
            "the ELMo model embedded in spacy-elmo"
        )
    model.attrs.update(settings)


def load_bilm_weights(model: Model) -> None:
    """(Re)load the biLM from the model's ``options_file``/``weight_file`` (both None: the embedded model)."""
    options_file, weight_file = model.attrs["options_file"], model.attrs["weight_file"]
    if options_file is None:
        options_file, weight_file = default_model_files(model.attrs["lang"])
    bilm = load_files(options_file, weight_file)
    model.shims[0].set_module(SegmentEncoder(ElmoEncoder(bilm)))
    _apply_settings(model)


def is_loaded(model: Model) -> bool:
    """Whether the model holds a biLM (it is built lazily)."""
    return model.shims[0].module is not None


def init(model: Model, X: Optional[List[Doc]] = None, Y: Optional[Any] = None) -> None:
    """Thinc's initialization: read the weight files unless weights were loaded already."""
    if not is_loaded(model):
        load_bilm_weights(model)


def _apply_settings(model: Model) -> SegmentEncoder:
    """The loaded module, brought in line with the model's attrs and dims."""
    module = model.shims[0].module
    if module is None:
        load_bilm_weights(model)
        return model.shims[0].module
    attrs = model.attrs
    if module.encoder.initial_state != attrs["initial_state"]:
        module.encoder.initial_state = attrs["initial_state"]
        module.encoder.weights_changed()
    if module.stateful != attrs["stateful"]:
        module.stateful = attrs["stateful"]
        module.carried.reset()
    trainable = not attrs["frozen"]
    for param in module.parameters():
        if param.requires_grad != trainable:
            param.requires_grad_(trainable)
    model.set_dim("nO", module.options.output_dim, force=True)
    model.set_dim("nL", module.options.n_output_layers, force=True)
    return module


def bilm_options(model: Model) -> ElmoOptions:
    """The loaded biLM's options (loading it first if needed)."""
    return _apply_settings(model).options


def reset_state(model: Model) -> None:
    """Forget the state carried between calls in stateful mode."""
    if is_loaded(model):
        model.shims[0].module.carried.reset()


def doc_segments(docs: Sequence[Doc], max_tokens: int) -> List[Segment]:
    """Sentences of Docs with sentence boundaries, whole Docs otherwise, cut into windows of ``max_tokens``."""
    segments: List[Segment] = []
    for i, doc in enumerate(docs):
        spans = [(s.start, s.end) for s in doc.sents] if doc.has_annotation("SENT_START") else [(0, len(doc))]
        for start, end in spans:
            segments.extend(Segment(i, s, min(s + max_tokens, end)) for s in range(start, end, max_tokens))
    return segments


def segment_words(docs: Sequence[Doc], segments: Sequence[Segment]) -> List[List[str]]:
    """The token texts of each segment."""
    texts = [[token.text for token in doc] for doc in docs]
    return [texts[s.doc][s.start : s.end] for s in segments]


def frozen_backprop(d_layers: Any) -> List[Doc]:
    """The backprop of a frozen biLM: no work at all. Layers that receive it skip their input gradients."""
    return []


def encode_segments(
    model: Model, words: Sequence[Sequence[str]], *, is_train: bool, mix: Optional[FloatsXd] = None
) -> Tuple[FloatsXd, Callable[[FloatsXd], None]]:
    """The packed layers of ``words`` (see :meth:`SegmentEncoder.forward`) as an xp array, and their backprop.

    The biLM gets gradients only with ``is_train`` on a model that is not ``frozen``; otherwise
    it runs without autograd and the backprop is :func:`frozen_backprop`.
    """
    _apply_settings(model)
    shim = model.shims[0]
    mix_tensor = None if mix is None else xp2torch(model.ops.asarray1f(mix), device=shim.device)
    inputs = ArgsKwargs(args=(list(words), model.attrs["max_batch_tokens"]), kwargs={"mix": mix_tensor})
    if not is_train or model.attrs["frozen"]:
        return torch2xp(shim.predict(inputs)), frozen_backprop
    output, backprop_torch = shim.begin_update(inputs)

    def backprop(d_output: FloatsXd) -> None:
        backprop_torch(ArgsKwargs(args=((output,),), kwargs={"grad_tensors": (xp2torch(d_output, device=output.device),)}))

    return torch2xp(output), backprop


def encode_docs(
    model: Model, docs: Sequence[Doc], *, is_train: bool, mix: Optional[FloatsXd] = None
) -> Tuple[List[FloatsXd], Callable]:
    """Per Doc, its layers ``(n_layers + 1, len(doc), dim)`` (or with ``mix`` its mixed ``(len(doc), dim)``)."""
    segments = doc_segments(docs, model.attrs["max_sentence_tokens"])
    packed, backprop_packed = encode_segments(model, segment_words(docs, segments), is_train=is_train, mix=mix)
    ends = np.cumsum([len(doc) for doc in docs]).tolist()
    outputs = [packed[..., start:end, :] for start, end in zip([0] + ends[:-1], ends)]
    if backprop_packed is frozen_backprop:
        return outputs, frozen_backprop

    def backprop(d_outputs: List[FloatsXd]) -> List[Doc]:
        backprop_packed(model.ops.xp.concatenate(d_outputs, axis=-2))
        return []

    return outputs, backprop


def forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    """Per Doc, all its layers; see :func:`encode_docs`."""
    return encode_docs(model, docs, is_train=is_train)


def mix_docs(model: Model, docs: Sequence[Doc], weights: FloatsXd) -> List[Floats2d]:
    """Per Doc, ``sum_j weights[j] * layer_j`` computed batch by batch without keeping all layers."""
    outputs, _ = encode_docs(model, docs, is_train=False, mix=weights)
    return outputs
