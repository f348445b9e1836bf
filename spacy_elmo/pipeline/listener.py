"""``spacy_elmo.ElmoListener.v1``: the ``tok2vec`` of a downstream component, fed by the ``elmo`` component.

The listener is ``elmo_scalar_mix(listener layer)``, optionally concatenated with the task's own
token embedding. The listener layer (:func:`build_listener_layer`) is the node the ``elmo``
component finds and feeds (spaCy's listener protocol); the mix above it holds the task's own layer
weights. It is a plain thinc ``Model`` whose listening state is in its attrs (:data:`UPSTREAM`,
:data:`STATE`), as spacy-curated-transformers keeps its listeners' state: ``Model.copy()`` rebuilds
every node as a plain ``Model``, so state kept on a subclass would be lost on the copy.

During training the ``elmo`` component's ``update`` hands every listener the batch's layers and their backprop
(:func:`send_training_batch`). Otherwise a listener reads each Doc's layers (:func:`read_layers`: from the component's
:class:`~spacy_elmo.pipeline.handoff.LayerHandoff`, ``Doc._.elmo_layers`` or the biLM again), and zeros, with one
warning, for a Doc no ``elmo`` component annotated.

A copy of a listening model (``model.copy()``, ``copy.deepcopy``, pickle) is a listener of the same
upstream with nothing in flight and no links: the ``elmo`` component links it, as any listener, when
spaCy links the pipeline (``nlp.add_pipe``, ``initialize``, ``spacy.load``...) or when its
``find_listeners`` is given the component that now holds the copy.

``nlp.replace_listeners`` swaps the listener layer for a copy of the component's biLM model; the
config becomes ``spacy_elmo.ElmoEmbedding.v2`` with the same mix settings and the biLM's settings as they stand.
"""
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from spacy.errors import Errors
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, concatenate, deserialize_attr, serialize_attr
from thinc.layers.concatenate import init as concatenate_init
from thinc.types import Floats2d, Floats3d

from ..errors import ElmoListenerWarning, ElmoPipelineError
from .architectures import DEFAULTS, configure_bilm_model, doc_layers, frozen_backprop, runtime_of
from .config_types import DropoutRate, Penalty, Threads, TokenCount, WaitMilliseconds, config_error
from .doc_rows import LAYERS, annotated, doc_rows
from .handoff import LayerHandoff
from .listener_mix import build_listener_mix

TokVecModel = Model[List[Doc], List[Floats2d]]
LISTENER_NAME = "elmo-listener"
UPSTREAM = "elmo_upstream"  # attr: the name of the ``elmo`` component listened to, or "*" (saved with the model)
STATE = "elmo_listener_state"  # attr: the node's :class:`ListenerState` (never saved; a copy starts afresh)
NOT_LINKED = (
    "This ELMo listener is not linked to an 'elmo' component, so it has no layers to read: a listening model "
    "that was copied, or built outside a pipeline, is linked when spaCy links the pipeline (nlp.add_pipe, "
    "nlp.initialize, spacy.load) or by nlp.get_pipe('elmo').find_listeners(component) for the component that "
    "now holds it"
)
NOT_RUN = (
    "An ELMo listener (upstream {upstream!r}) got Docs that no 'elmo' component ran on, and reads zeros for them: "
    "enable the 'elmo' component, or run the Docs through it first (said once per listener)"
)
RUN_AGAIN = (
    "An ELMo listener (upstream {upstream!r}) ran the biLM again for Docs its 'elmo' component had already run on, "
    "which held no layers for it: its component was disabled, or not linked, when 'elmo' ran (from the next batch on "
    "'elmo' keeps layers for it), it reads in larger batches than 'elmo' (give both the same batch_size), or the "
    "Docs' tokens changed since (said once per listener)"
)


class ListenerState:
    """What a listener node holds between calls: the training batch it received, and the handoffs it reads.

    Not state to keep: a copy (``Model.copy``, ``copy.deepcopy``, pickle) starts with no batch and no links,
    and saving writes nothing for it.
    """

    def __init__(self) -> None:
        self.batch_id: Optional[int] = None
        self.outputs: Optional[List[Floats3d]] = None
        self.backprop: Optional[Callable] = None
        self.handoffs: List[LayerHandoff] = []
        self.warned: Set[str] = set()  # the warnings given (NOT_RUN, RUN_AGAIN): each once
        self.samples: "weakref.WeakSet[Doc]" = weakref.WeakSet()  # Docs of thinc's shape inference: no warning

    def __reduce__(self) -> Tuple[type, Tuple]:
        return ListenerState, ()

    def link(self, handoff: LayerHandoff) -> None:
        if all(h is not handoff for h in self.handoffs):
            self.handoffs.append(handoff)

    def unlink(self, handoff: LayerHandoff) -> None:
        self.handoffs = [h for h in self.handoffs if h is not handoff]

    def receive(self, batch_id: int, outputs: List[Floats3d], backprop: Callable) -> None:
        """Hold a training batch's layers and backprop until the listener's forward pass takes them."""
        self.batch_id, self.outputs, self.backprop = batch_id, outputs, backprop

    def clear_batch(self) -> None:
        """Let go of the training batch (its layers and the backprop that holds the biLM's graph)."""
        self.batch_id = self.outputs = self.backprop = None


@serialize_attr.register(ListenerState)
def _serialize_state(_: ListenerState, value: ListenerState, name: str, model: Model) -> bytes:
    return b""


@deserialize_attr.register(ListenerState)
def _deserialize_state(default: ListenerState, value: bytes, name: str, model: Model) -> ListenerState:
    return default  # loading weights keeps the node's links


def build_listener_layer(upstream_name: str) -> Model[List[Doc], List[Floats3d]]:
    """The node that receives the biLM layers of an upstream ``elmo`` component (``"*"``: any of them).

    Dims ``nL`` (layers) and ``nO`` (width) are set by the component when it links the listener.
    """
    return Model(
        LISTENER_NAME,
        _listener_forward,
        init=_listener_init,
        dims={"nO": None, "nL": None},
        attrs={UPSTREAM: upstream_name, STATE: ListenerState()},
    )


def is_listener(node: Model) -> bool:
    """Whether ``node`` is an ELMo listener layer (also after ``Model.copy``, which makes every node a plain Model)."""
    return isinstance(node.attrs.get(STATE), ListenerState)


def listener_state(node: Model) -> ListenerState:
    return node.attrs[STATE]


def upstream_name(node: Model) -> str:
    return node.attrs[UPSTREAM]


def listener_nodes(model: Any, upstream: str) -> List[Model]:
    """The listener nodes in ``model`` (a component's model, or None) that listen to the ``elmo`` component named
    ``upstream`` (theirs: that name or ``"*"``)."""
    nodes = model.walk() if isinstance(model, Model) else []
    return [node for node in nodes if is_listener(node) and upstream_name(node) in ("*", upstream)]


def batch_id(docs: List[Doc]) -> int:
    """A content hash of a batch, to check that the listener is asked about the batch it received."""
    return sum(sum(token.orth for token in doc) for doc in docs)


def link(node: Model, handoff: LayerHandoff) -> None:
    """Let ``node`` read the prediction-time layers of ``handoff`` (that of an ``elmo`` component it listens to)."""
    listener_state(node).link(handoff)
    handoff.link(node.id)


def unlink(node: Model, handoff: LayerHandoff) -> None:
    listener_state(node).unlink(handoff)
    handoff.unlink(node.id)


def read_layers(node: Model, docs: List[Doc]) -> List[Optional[Floats3d]]:
    """This listener's layers of each Doc (None where no ``elmo`` component annotated the Doc).

    From the handoffs, else from ``Doc._.elmo_layers`` (``store_layers``) where every token has its row; else a Doc an
    ``elmo`` component annotated (or a piece or copy of one) goes through the biLM again, from its initial state (a
    stateful biLM's carried state is left as it is), with one warning.
    """
    handoffs = listener_state(node).handoffs
    by_doc: Dict[int, Optional[Floats3d]] = {}
    for doc in docs:
        if id(doc) not in by_doc:
            layers = next((x for x in (h.take(doc, node.id) for h in handoffs) if x is not None), None)
            if layers is None:
                found = doc_rows(doc, LAYERS)
                layers = found.rows if found is not None and found.present.all() else None
            by_doc[id(doc)] = layers
    again = list({id(doc): doc for doc in docs if by_doc[id(doc)] is None and annotated(doc)}.values())
    if again and handoffs:
        _warn_once(node, RUN_AGAIN)
        by_doc.update(zip(map(id, again), doc_layers(handoffs[0].source, again, fresh=True)))
    return [by_doc[id(doc)] for doc in docs]


def _warn_once(node: Model, message: str) -> None:
    state = listener_state(node)
    if message not in state.warned:
        state.warned.add(message)
        warnings.warn(message.format(upstream=upstream_name(node)), ElmoListenerWarning, stacklevel=3)


def set_listener_dims(listener: Model, bilm: Model) -> None:
    """Tell ``listener`` the size of the loaded biLM ``bilm``: its width ``nO`` and number of layers ``nL``."""
    for dim in ("nO", "nL"):
        listener.set_dim(dim, bilm.get_dim(dim), force=True)


def send_training_batch(
    listeners: Sequence[Model],
    docs: List[Doc],
    layers: List[Floats3d],
    backprop: Callable,
    losses: Dict[str, float],
    name: str,
    finish: Optional[Callable[[], None]] = None,
) -> None:
    """Give every listener a training batch's layers and the way back to the biLM (of the component ``name``).

    A frozen biLM's :func:`frozen_backprop` goes to each as it is, and their backprop stops at their mixes. For a
    biLM being fine-tuned the listeners' gradients are summed, each adding its squared norm to ``losses[name]``; the
    last listener's backprop then runs ``backprop`` on the sum, and ``finish`` (the optimizer's step) after it.
    """
    batch = batch_id(docs)
    if backprop is frozen_backprop:
        for listener in listeners:
            listener_state(listener).receive(batch, layers, frozen_backprop)
        return
    d_layers = [listeners[-1].ops.alloc(x.shape, dtype=x.dtype) for x in layers]

    def accumulate(one_d_layers: List[Floats3d]) -> List[Doc]:
        for total, part in zip(d_layers, one_d_layers):
            total += part
            losses[name] += float((part**2).sum())
        return []

    def backprop_all(one_d_layers: List[Floats3d]) -> List[Doc]:
        accumulate(one_d_layers)
        backprop(d_layers)
        if finish is not None:
            finish()
        return []

    for listener in listeners[:-1]:
        listener_state(listener).receive(batch, layers, accumulate)
    listener_state(listeners[-1]).receive(batch, layers, backprop_all)


def _listener_init(model: Model, X: Optional[List[Doc]] = None, Y: Any = None) -> None:
    """Learn the biLM's size from the ``elmo`` component the listener is linked to (loading its weights if nothing
    did yet), as spaCy's own initialisation orders need: ``nlp.initialize``, or the models' ``initialize`` in turn.

    A listener that no ``elmo`` component feeds is a config error: at ``nlp.initialize`` spaCy has linked every
    listener to the components before it, so an unlinked one has a wrong ``upstream`` or no ``elmo`` component
    before it in ``[nlp] pipeline``.
    """
    state = listener_state(model)
    if not state.handoffs:
        raise config_error(unlinked_message(upstream_name(model)))
    state.samples.update(X or [])
    if not (model.has_dim("nO") and model.has_dim("nL")):
        source = state.handoffs[0].source
        runtime_of(source)
        set_listener_dims(model, source)


def unlinked_message(upstream: str) -> str:
    """What to fix when no ``elmo`` component feeds a listener of ``upstream`` (``"*"``: any)."""
    if upstream == "*":
        return (
            'ELMo listener with upstream = "*": no \'elmo\' component comes before it in [nlp] pipeline; add "elmo" '
            'there, before the component that listens (its block [components.elmo] has factory = "elmo")'
        )
    return (
        f'ELMo listener with upstream = "{upstream}": no \'elmo\' component of that name comes before it in [nlp] '
        f'pipeline; add "{upstream}" there (factory = "elmo"), or set upstream to the name of one, or to "*"'
    )


def _listener_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    state = listener_state(model)
    if is_train and state.batch_id is not None:
        if (found := batch_id(docs)) != state.batch_id:  # not the batch it received
            raise ElmoPipelineError(Errors.E953.format(id1=found, id2=state.batch_id))
        for doc in docs:  # this batch came by receive(): let go, unread, the layers an annotating upstream left per Doc
            for handoff in state.handoffs:
                handoff.take(doc, model.id)
        outputs, upstream_backprop = state.outputs, state.backprop
        if upstream_backprop is frozen_backprop:
            state.clear_batch()  # nothing flows back to a frozen biLM: the batch is the mix's from here on
            return outputs, frozen_backprop

        def backprop(d_layers: List[Floats3d]) -> Any:
            state.clear_batch()  # free the batch once used
            return upstream_backprop(d_layers)

        return outputs, backprop
    if not state.handoffs:
        raise ElmoPipelineError(NOT_LINKED)
    outputs = []
    for doc, layers in zip(docs, read_layers(model, docs)):
        if layers is None:
            if is_train:  # the upstream component is frozen and not annotating, so nothing reached us
                raise ElmoPipelineError(Errors.E203.format(name="elmo"))
            if doc not in state.samples:  # not thinc's shape inference
                _warn_once(model, NOT_RUN)
            layers = model.ops.alloc3f(model.get_dim("nL"), len(doc), model.get_dim("nO"))
        outputs.append(model.ops.asarray(layers))
    return outputs, frozen_backprop


def _mix_head(
    source: Model, layer_norm: bool, dropout: float, l2: float, embed: Optional[TokVecModel]
) -> TokVecModel:
    mixed = build_listener_mix(source, layer_norm=layer_norm, dropout=dropout, l2=l2)
    if embed is None:
        return mixed
    head = concatenate(mixed, embed)
    head.init = _init_head
    return head


def _init_head(model: Model, X: Optional[List[Doc]] = None, Y: Any = None) -> None:
    """``concatenate``'s initialisation without the labels ``Y``. Shape inference hands a component's labels to a
    layer whose width is not yet known, as the mix's is not until it is linked; they would reach the task's own
    ``embed``, where static vectors read them as their width."""
    concatenate_init(model, X=X)


@registry.architectures("spacy_elmo.ElmoListener.v1")
def build_elmo_listener(
    upstream: str = "*",
    layer_norm: bool = False,
    dropout: DropoutRate = 0.0,
    l2: Penalty = 0.0,
    embed: Optional[TokVecModel] = None,
) -> TokVecModel:
    """Token vectors for a downstream component: its own scalar mix of an upstream ``elmo`` component's layers.

    upstream: name of the ``elmo`` component to listen to, or ``"*"`` for any.
    layer_norm: normalise each layer over the Doc's tokens before mixing.
    dropout: dropout rate on the mixed vectors during training (kept as set, not spaCy's training dropout).
    l2: L2 penalty on the mix's (pre-softmax) layer weights; > 0 pulls them towards the average.
    embed: an optional embedding of the task's own (e.g. ``spacy.MultiHashEmbed.v2``), concatenated.
    """
    return _mix_head(build_listener_layer(upstream), layer_norm, dropout, l2, embed)


@registry.architectures("spacy_elmo.ElmoEmbedding.v2")
def build_elmo_embedding_v2(
    bilm: Model[List[Doc], List[Floats3d]],
    frozen: bool = DEFAULTS.frozen,
    lang: str = DEFAULTS.lang,
    layer_norm: bool = False,
    dropout: DropoutRate = 0.0,
    l2: Penalty = 0.0,
    embed: Optional[TokVecModel] = None,
    threads: Optional[Threads] = DEFAULTS.threads,
    batch_requests: bool = DEFAULTS.batch_requests,
    batch_wait_ms: WaitMilliseconds = DEFAULTS.batch_wait_ms,
    shared_batch_tokens: TokenCount = DEFAULTS.shared_batch_tokens,
) -> TokVecModel:
    """A component's own biLM (``bilm``, a ``spacy_elmo.ElmoBiLm.v2`` block) with its scalar mix: what
    ``replace_listeners`` turns a listener into. Its owner's settings are the ``elmo`` component's (docs/api.md);
    the rest as in ``ElmoListener.v1``.
    """
    configure_bilm_model(
        bilm, frozen=frozen, lang=lang, threads=threads, batch_requests=batch_requests, batch_wait_ms=batch_wait_ms,
        shared_batch_tokens=shared_batch_tokens,
    )
    return _mix_head(bilm, layer_norm, dropout, l2, embed)
