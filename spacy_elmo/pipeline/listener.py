"""``spacy_elmo.ElmoListener.v1``: the ``tok2vec`` of a downstream component, fed by the ``elmo`` component.

The listener is ``elmo_scalar_mix(ElmoListenerLayer)``, optionally concatenated with the task's own
token embedding. :class:`ElmoListenerLayer` is the node the ``elmo`` component finds and feeds
(spaCy's listener protocol); the mix above it holds the task's own layer weights.

During training the ``elmo`` component's ``update`` hands every listener the batch's layers
with a backprop callback (or :func:`frozen_backprop` when the biLM is frozen). At prediction,
and when the ``elmo`` component is frozen but annotating, each Doc's layers come from the
component's :class:`~spacy_elmo.pipeline.handoff.LayerHandoff`, which lets them go once every
listener has read them.

``nlp.replace_listeners`` swaps the :class:`ElmoListenerLayer` for a copy of the component's
biLM model; the config becomes ``spacy_elmo.ElmoEmbedding.v2`` with the same mix settings.
"""
from typing import Any, Callable, Dict, List, Optional, Tuple

from spacy.errors import Errors
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, concatenate
from thinc.types import Floats2d, Floats3d

from ..default_model import DEFAULT_LANG
from .bilm_model import bilm_config, configure_bilm_model, frozen_backprop
from .handoff import LayerHandoff
from .mix import build_scalar_mix

TokVecModel = Model[List[Doc], List[Floats2d]]


class ElmoListenerLayer(Model):
    """Receives the biLM layers of a batch from an upstream ``elmo`` component.

    ``upstream_name`` is that component's name, or ``"*"`` for any ``elmo`` component.
    Dims ``nL`` (layers) and ``nO`` (width) are set by the component when it links the listener.
    """

    name = "elmo-listener"

    def __init__(self, upstream_name: str):
        Model.__init__(self, name=self.name, forward=_listener_forward, dims={"nO": None, "nL": None})
        self.upstream_name = upstream_name
        self._batch_id: Optional[int] = None
        self._outputs: Optional[List[Floats3d]] = None
        self._backprop: Optional[Callable] = None
        self._handoffs: List[LayerHandoff] = []

    def link(self, handoff: LayerHandoff) -> None:
        """Read prediction-time layers from ``handoff`` (that of an ``elmo`` component this listens to)."""
        if all(h is not handoff for h in self._handoffs):
            self._handoffs.append(handoff)

    def unlink(self, handoff: LayerHandoff) -> None:
        self._handoffs = [h for h in self._handoffs if h is not handoff]

    def release_layers(self, doc: Doc) -> None:
        """Let the ``elmo`` components stop holding ``doc``'s layers for this listener, unread."""
        for handoff in self._handoffs:
            handoff.release(doc, self)

    def take_layers(self, doc: Doc) -> Optional[Floats3d]:
        """This listener's read of the layers an ``elmo`` component left for ``doc`` (None if none)."""
        for handoff in self._handoffs:
            layers = handoff.take(doc, self)
            if layers is not None:
                return layers
        return None

    @classmethod
    def get_batch_id(cls, docs: List[Doc]) -> int:
        """A content hash of a batch, to check that the listener is asked about the batch it received."""
        return sum(sum(token.orth for token in doc) for doc in docs)

    def receive(self, batch_id: int, outputs: List[Floats3d], backprop: Callable) -> None:
        self._batch_id, self._outputs, self._backprop = batch_id, outputs, backprop

    def verify_inputs(self, docs: List[Doc]) -> None:
        batch_id = self.get_batch_id(docs)
        if batch_id != self._batch_id:
            raise ValueError(Errors.E953.format(id1=batch_id, id2=self._batch_id))


def _listener_forward(model: ElmoListenerLayer, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    if is_train and model._batch_id is not None:
        model.verify_inputs(docs)
        for doc in docs:  # an annotating upstream component also left them per Doc: this batch came by receive()
            model.release_layers(doc)
        outputs, upstream_backprop = model._outputs, model._backprop
        if upstream_backprop is frozen_backprop:
            return outputs, frozen_backprop

        def backprop(d_layers: List[Floats3d]) -> Any:
            model._batch_id = model._outputs = model._backprop = None  # free the batch once used
            return upstream_backprop(d_layers)

        return outputs, backprop
    outputs = []
    for doc in docs:
        layers = model.take_layers(doc)
        if layers is None:
            if is_train:  # the upstream component is frozen and not annotating, so nothing reached us
                raise ValueError(Errors.E203.format(name="elmo"))
            # No layers (e.g. shape inference at initialization): zeros of the right shape.
            layers = model.ops.alloc3f(model.get_dim("nL"), len(doc), model.get_dim("nO"))
        outputs.append(model.ops.asarray(layers))
    return outputs, frozen_backprop


def _mix_head(
    source: Model, layer_norm: bool, dropout: float, l2: float, embed: Optional[TokVecModel]
) -> TokVecModel:
    mixed = build_scalar_mix(source, layer_norm=layer_norm, dropout=dropout, l2=l2)
    return mixed if embed is None else concatenate(mixed, embed)


@registry.architectures("spacy_elmo.ElmoListener.v1")
def build_elmo_listener(
    upstream: str = "*",
    layer_norm: bool = False,
    dropout: float = 0.0,
    l2: float = 0.0,
    embed: Optional[TokVecModel] = None,
) -> TokVecModel:
    """Token vectors for a downstream component: its own scalar mix of an upstream ``elmo`` component's layers.

    upstream: name of the ``elmo`` component to listen to, or ``"*"`` for any.
    layer_norm: normalise each layer over the Doc's tokens before mixing.
    dropout: dropout rate on the mixed vectors during training (kept as set, not spaCy's training dropout).
    l2: L2 penalty on the mix's (pre-softmax) layer weights; > 0 pulls them towards the average.
    embed: an optional embedding of the task's own (e.g. ``spacy.MultiHashEmbed.v2``), concatenated.
    """
    return _mix_head(ElmoListenerLayer(upstream), layer_norm, dropout, l2, embed)


@registry.architectures("spacy_elmo.ElmoEmbedding.v2")
def build_elmo_embedding_v2(
    bilm: Model[List[Doc], List[Floats3d]],
    frozen: bool = True,
    lang: str = DEFAULT_LANG,
    layer_norm: bool = False,
    dropout: float = 0.0,
    l2: float = 0.0,
    embed: Optional[TokVecModel] = None,
) -> TokVecModel:
    """A component's own biLM with its scalar mix: what ``replace_listeners`` turns a listener into.

    bilm: the biLM model (``spacy_elmo.ElmoBiLm.v2``). frozen: keep its weights fixed. lang: the
    pipeline's language, whose embedded model is used when ``bilm`` names no files. The rest as
    in ``ElmoListener.v1``.
    """
    configure_bilm_model(bilm, frozen=frozen, lang=lang)
    return _mix_head(bilm, layer_norm, dropout, l2, embed)


def replace_listener(bilm_copy: Model, listener: ElmoListenerLayer, pipe: Any) -> Model:
    """``Language.replace_listeners`` hook: the listener node becomes the copy of the component's biLM model."""
    return bilm_copy


def replace_listener_cfg(
    settings: Dict[str, Any], component_model_cfg: Dict[str, Any], listener_cfg: Dict[str, Any]
) -> Dict:
    """``Language.replace_listeners`` hook: the ``ElmoListener.v1`` block as ``ElmoEmbedding.v2``.

    ``settings`` are the component's biLM model's settings as they stand (bound with
    ``functools.partial``), so a path given to ``initialize`` reaches the new block's ``bilm``.
    """
    if listener_cfg.get("@architectures") != "spacy_elmo.ElmoListener.v1":
        raise ValueError(
            f"replace_listeners: expected a 'spacy_elmo.ElmoListener.v1' block, found {listener_cfg.get('@architectures')!r}"
        )
    new_cfg = {key: value for key, value in listener_cfg.items() if key not in ("@architectures", "upstream")}
    new_cfg.update(
        {
            "@architectures": "spacy_elmo.ElmoEmbedding.v2",
            "bilm": bilm_config(settings),
            "frozen": settings["frozen"],
            "lang": settings["lang"],
        }
    )
    return new_cfg
