"""The ``elmo`` pipeline component: ELMo vectors on Docs, and biLM layers for listening components."""
import functools
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Union

import srsly
from spacy import util as spacy_util
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example, validate_examples
from spacy.vocab import Vocab
from thinc.api import Model, Optimizer
from thinc.types import Floats2d, Floats3d

from ..errors import ElmoSettingsError
from ..model.fixed_mix import DEFAULT_MIX, MixSpec, check_mix_fits, check_mix_spec, fixed_mix_weights, mix_layers
from ..runtime import BiLmSettings, ElmoRuntime, MixWeights
from .architectures import (
    DEFAULT_MODEL,
    DEFAULTS,
    OWNER_SETTINGS,
    bilm_settings,
    check_owner_settings,
    configure_bilm_model,
    doc_mixes,
    is_loaded,
    load_bilm_bytes,
    load_bilm_file,
    load_bilm_weights,
    published_bilm_model,
    runtime_of,
    set_layer_cache,
)
from .config_types import CacheMegabytes, Mix, ModelName, Threads, TokenCount, WaitMilliseconds, check_cache_mb, check_config_setting
from .extensions import in_spacy_worker, install_extensions, set_vector_hooks, tensor_use
from .doc_rows import SPARE_COLUMNS, put_rows
from .handoff import LayerHandoff
from .listener import link, listener_nodes, send_training_batch, set_listener_dims, unlink


class ElmoPrediction(NamedTuple):
    """What :meth:`ElmoComponent.predict` found for one Doc: its layers (on the biLM's device) and/or its mixed vectors
    (numpy), each an array of its own."""

    layers: Optional[Floats3d]
    vectors: Optional[Floats2d]


@Language.factory(
    "elmo",
    assigns=["doc._.elmo", "doc._.elmo_layers"],
    default_config={
        "model": DEFAULT_MODEL,
        "mix": DEFAULT_MIX,
        "store_vectors": True,
        "store_layers": False,
        "set_tensor": True,
        "vector_hooks": True,
        "train_cache_mb": 1024,
        "listener_cache_mb": 1024,
        **{key: getattr(DEFAULTS, key) for key in OWNER_SETTINGS},
    },
)
def make_elmo(
    nlp: Language,
    name: str,
    model: Union[ModelName, Model[List[Doc], List[Floats3d]]],
    mix: Mix,
    store_vectors: bool,
    store_layers: bool,
    set_tensor: bool,
    vector_hooks: bool,
    train_cache_mb: CacheMegabytes,
    listener_cache_mb: CacheMegabytes,
    frozen: bool,
    threads: Optional[Threads],
    batch_requests: bool,
    batch_wait_ms: WaitMilliseconds,
    shared_batch_tokens: TokenCount,
) -> "ElmoComponent":
    """Build the ``elmo`` component; see :class:`ElmoComponent` for the settings.

    ``model`` is the biLM with its settings (``spacy_elmo.ElmoBiLm.v2``), or the name of a downloaded
    published model (``config={"model": "original"}``, ``python -m spacy_elmo list``): the default
    architecture with that model's files.
    """
    return ElmoComponent(
        nlp.vocab, published_bilm_model(model) if isinstance(model, str) else model, name, mix=mix,
        store_vectors=store_vectors, store_layers=store_layers, set_tensor=set_tensor, vector_hooks=vector_hooks,
        train_cache_mb=train_cache_mb, listener_cache_mb=listener_cache_mb, frozen=frozen, threads=threads, batch_requests=batch_requests,
        batch_wait_ms=batch_wait_ms, shared_batch_tokens=shared_batch_tokens,
    )


class ElmoComponent(TrainablePipe):
    """Runs the biLM over each Doc's sentences (or windows) and shares the layers.

    The biLM and its settings (which files, start state, batching) are the ``model`` (``spacy_elmo.ElmoBiLm.v2``);
    the component's own biLM settings (``**bilm``: :data:`~spacy_elmo.pipeline.architectures.OWNER_SETTINGS`,
    ``frozen`` and how calls are served) complete them, with :class:`~spacy_elmo.runtime.BiLmSettings`' defaults.
    The rest concern Docs (``doc_rows.py``, ``extensions.py``) and the layers kept of training sentences
    (``train_cache_mb``) or for the listeners (``listener_cache_mb``, :class:`LayerHandoff`): docs/api.md ("The elmo
    factory") describes each.
    """

    def __init__(
        self,
        vocab: Vocab,
        model: Model[List[Doc], List[Floats3d]],
        name: str = "elmo",
        *,
        mix: MixSpec = DEFAULT_MIX,
        store_vectors: bool = True,
        store_layers: bool = False,
        set_tensor: bool = True,
        vector_hooks: bool = True,
        train_cache_mb: float = 1024,
        listener_cache_mb: float = 1024,
        **bilm: Any,
    ):
        own = [setting for setting in Language.get_factory_meta("elmo").default_config if setting != "model"]
        check_owner_settings(bilm, name, own)
        check_mix_spec(mix)
        check_cache_mb(train_cache_mb)
        check_cache_mb(listener_cache_mb, "listener_cache_mb")
        install_extensions()
        self.vocab = vocab
        self.model = model
        self.name = name
        self.handoff = LayerHandoff(model, int(listener_cache_mb * 2**20))
        self.listener_map = {}
        self.cfg: Dict[str, Any] = {}
        self.mix = mix
        self.store_vectors = store_vectors
        self.store_layers = store_layers
        self.set_tensor = set_tensor
        self.vector_hooks = vector_hooks
        set_layer_cache(model, int(train_cache_mb * 2**20))
        self._mix_weights: Optional[MixWeights] = None  # decided when the biLM's layers are known
        configure_bilm_model(model, lang=vocab.lang, **bilm)

    @property
    def settings(self) -> BiLmSettings:
        """The biLM's settings as they stand (its architecture block, completed by this component's)."""
        return bilm_settings(self.model)

    @property
    def frozen(self) -> bool:
        return self.settings.frozen

    @property
    def runtime(self) -> ElmoRuntime:
        """The biLM and its settings (loaded on first use)."""
        return runtime_of(self.model)

    def __setstate__(self, state: Any) -> None:
        """A pickled or copied component links its listeners (copied with it) to its own handoff."""
        super().__setstate__(state)
        for listener in self.listeners:
            link(listener, self.handoff)

    # --- spaCy's listener protocol (spacy.ty.ListenedToComponent) ---

    @property
    def listener_map(self) -> Dict[str, List[Model]]:
        """The listeners spaCy registered, by component: those of the enabled components after this one when it last
        linked the pipeline. At prediction the layers also reach the listeners it left out (a component enabled
        since), from the first Doc they read (:class:`~spacy_elmo.pipeline.handoff.LayerHandoff`)."""
        return self._listener_map

    @listener_map.setter
    def listener_map(self, value: Dict[str, List[Model]]) -> None:
        """spaCy links the pipeline again by emptying the map, then finding the listeners of the enabled components."""
        self._listener_map = value
        self.handoff.relink()

    @property
    def listeners(self) -> List[Model]:
        return [listener for name in self.listening_components for listener in self.listener_map[name]]

    @property
    def listening_components(self) -> List[str]:
        return list(self.listener_map)

    def add_listener(self, listener: Model, component_name: str) -> None:
        """Register a downstream listener and tell it the biLM's size if the weights are loaded."""
        listeners = self.listener_map.setdefault(component_name, [])
        if listener not in listeners:
            listeners.append(listener)
        link(listener, self.handoff)
        if is_loaded(self.model):
            set_listener_dims(listener, self.model)

    def remove_listener(self, listener: Model, component_name: str) -> bool:
        listeners = self.listener_map.get(component_name, [])
        if listener not in listeners:
            return False
        listeners.remove(listener)
        unlink(listener, self.handoff)
        if not listeners:
            del self.listener_map[component_name]
        return True

    def find_listeners(self, component: Any) -> None:
        """Link the listener nodes of ``component`` whose upstream is ``"*"`` or this name, as its model has them now.

        Nodes it no longer holds (e.g. its model was replaced by a copy) are unlinked, so that no layers wait for them.
        """
        name = getattr(component, "name", None)
        if name is None:  # a function component: no model, no listeners
            return
        found = listener_nodes(getattr(component, "model", None), self.name)
        self._refuse_tensor_use(component, name, listens=bool(found))
        for old in list(self.listener_map.get(name, [])):
            if all(old is not node for node in found):
                self.remove_listener(old, name)
        for node in found:
            self.add_listener(node, name)

    def _refuse_tensor_use(self, component: Any, name: str, listens: bool) -> None:
        """spaCy links the components after this one: none may replace ``doc.tensor`` or read it as a ``tok2vec``'s
        output while this one keeps its rows there (``listens``: ``component`` listens to this one too)."""
        use = tensor_use(component) if self.set_tensor and (self.store_vectors or self.store_layers) else None
        if use is None:
            return
        order = "" if listens else f"put {self.name!r} after {name!r}, or "
        raise ElmoSettingsError(
            f"{self.name!r} keeps its vectors in doc.tensor (set_tensor = true), but {name!r} after it {use}: "
            f"{order}set set_tensor = false in [components.{self.name}] (the vectors then stay in doc.user_data, "
            f"which only whole Docs read)"
        )

    # --- prediction ---

    def predict(self, docs: Iterable[Doc]) -> List[ElmoPrediction]:
        """The model's layers of each Doc (for running listeners and ``store_layers``) and/or their fixed mix; nothing
        if nothing is stored or listens."""
        docs = list(docs)
        need_layers = self.handoff.begin_batch() or self.store_layers
        if not docs or not (need_layers or self.store_vectors):
            return [ElmoPrediction(None, None) for _ in docs]
        if not need_layers:
            spare = SPARE_COLUMNS if self.set_tensor else 0  # doc.tensor's mark column, without a copy
            return [ElmoPrediction(None, vectors) for vectors in doc_mixes(self.model, docs, self.mix_weights, spare)]
        to_numpy, weights = self.model.ops.to_numpy, self.mix_weights
        layers = self.model.predict(docs)
        return [ElmoPrediction(x, mix_layers(weights, to_numpy(x)) if self.store_vectors else None) for x in layers]

    @property
    def mix_weights(self) -> MixWeights:
        """The weight of each biLM layer in ``Doc._.elmo``, decided once for the mix and the biLM."""
        if self._mix_weights is None:
            n_layers = self.runtime.options.n_output_layers
            self._mix_weights = tuple(float(w) for w in fixed_mix_weights(self.mix, n_layers))
        return self._mix_weights

    def set_annotations(self, docs: Sequence[Doc], outputs: Sequence[ElmoPrediction]) -> None:
        """Leave what :meth:`predict` computed on each Doc (``doc_rows.py``; a record with no rows still says that
        the component ran on it), and hand the layers to the listeners."""
        # Hooks read the stored vectors; a worker of nlp.pipe(n_process > 1) sends its Docs back as bytes, which drop
        # hooks (spaCy warns W109 for each worker), so it does not install them.
        hooks = self.vector_hooks and self.store_vectors and not in_spacy_worker()
        with_layers = [(doc, output.layers) for doc, output in zip(docs, outputs) if output.layers is not None]
        self.handoff.put([doc for doc, _ in with_layers], [x for _, x in with_layers])
        for doc, (layers, vectors) in zip(docs, outputs):
            stored_layers = self.model.ops.to_numpy(layers) if self.store_layers else None
            put_rows(doc, vectors if self.store_vectors else None, stored_layers, in_tensor=self.set_tensor)
            if hooks and vectors is not None:
                set_vector_hooks(doc, vectors.shape[1])

    def reset_states(self) -> None:
        """Forget the LSTM state carried between calls (``stateful = true``)."""
        if is_loaded(self.model):
            self.runtime.reset_states()

    def fill_token_cache(self, words: Iterable[str]) -> None:
        """Pre-fill the biLM's token cache from a word list, most frequent first (it also fills as text runs)."""
        self.runtime.fill_cache(words)

    # --- training ---

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        """Give every listener this batch's layers (:func:`~spacy_elmo.pipeline.listener.send_training_batch`).

        Frozen biLM: the layers come without autograd (from the layer cache where possible) and the listeners'
        backprop stops at their mixes. Fine-tuning: the last listener's backprop runs the biLM's backward pass on the
        sum of the listeners' gradients; the loss recorded is the squared norm of those gradients.
        """
        losses = {} if losses is None else losses
        validate_examples(examples, "ElmoComponent.update")
        losses.setdefault(self.name, 0.0)
        if self.listeners:
            docs = [eg.predicted for eg in examples]
            layers, backprop = self.model.begin_update(docs)
            finish = None if sgd is None else functools.partial(self.finish_update, sgd)
            send_training_batch(self.listeners, docs, layers, backprop, losses, self.name, finish)
        return losses

    def finish_update(self, sgd: Optimizer) -> None:
        """Update the biLM when fine-tuning; a frozen biLM is left alone."""
        if not self.frozen:
            self.model.finish_update(sgd)

    def get_loss(self, examples: Iterable[Example], scores: Any) -> None:
        """The ``elmo`` component has no loss of its own; listeners bring the gradients."""
        return None

    def initialize(
        self,
        get_examples: Optional[Callable[[], Iterable[Example]]] = None,
        *,
        nlp: Optional[Language] = None,
        options_file: Optional[str] = None,
        weight_file: Optional[str] = None,
    ) -> None:
        """Load the pretrained biLM: ``options_file``/``weight_file`` given here (``[initialize.components]``)
        replace those of the component's config. A training token longer than the model reads is said here, before
        ``spacy train`` prints its table (once per model: not again while it trains)."""
        if options_file is not None or weight_file is not None:
            configure_bilm_model(self.model, options_file=options_file, weight_file=weight_file)
        load_bilm_weights(self.model)
        check_config_setting(f"components.{self.name}.mix", check_mix_fits, self.mix, self.runtime.options.n_output_layers)
        self._after_load()
        if get_examples is not None:
            self.runtime.encoder.report_truncation(token.text for example in get_examples() for token in example.reference)

    # --- serialization: the model's bytes hold the weights (saving reads the weight files first if nothing did yet,
    # so that a saved pipeline carries them); the config holds the settings ---

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        runtime_of(self.model)
        return super().to_bytes(exclude=exclude)

    def to_disk(self, path: Any, *, exclude: Iterable[str] = tuple()) -> None:
        runtime_of(self.model)
        super().to_disk(path, exclude=exclude)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "ElmoComponent":
        """As ``TrainablePipe.from_bytes`` (the bytes are decoded once), with the biLM read by ``load_bilm_bytes``.

        (spaCy's version first checks that a subclass set ``vocab`` and ``model``; ``__init__`` always sets both.)
        """
        deserializers = {
            "cfg": lambda b: self.cfg.update(srsly.json_loads(b)),
            "vocab": lambda b: self.vocab.from_bytes(b, exclude=exclude),
            "model": lambda b: load_bilm_bytes(self.model, b, f"the serialized {self.name!r} component"),
        }
        spacy_util.from_bytes(bytes_data, deserializers, exclude)
        self._after_load()
        return self

    def from_disk(self, path: Any, *, exclude: Iterable[str] = tuple()) -> "ElmoComponent":
        super().from_disk(path, exclude=[*exclude, "model"])
        if "model" not in exclude:
            load_bilm_file(self.model, Path(path) / "model")
        self._after_load()
        return self

    def _after_load(self) -> None:
        """The mix is decided again for the biLM just loaded (if it is), whose size the listeners are told."""
        self._mix_weights = None
        if is_loaded(self.model):
            for listener in self.listeners:
                set_listener_dims(listener, self.model)

