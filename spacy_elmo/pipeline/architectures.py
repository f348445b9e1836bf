"""The thinc model inside the ``elmo`` component: Docs in, all biLM layers of every token out.

``spacy_elmo.ElmoBiLm.v2`` holds the biLM's settings (docs/api.md), as spaCy's and spacy-transformers' architectures
hold their models' hyper-parameters; spaCy's config validation checks their types and values. The block becomes one
:class:`~spacy_elmo.runtime.BiLmSettings`, owned by the model's :class:`ElmoShim`, which the model's owner completes
with what is its own (:data:`OWNER_SETTINGS` and ``lang``) through :func:`configure_bilm_model`. Which settings are
whose is declared in ``runtime/settings.py``.

The biLM itself is an :class:`~spacy_elmo.runtime.ElmoRuntime` built by the shim from those settings, loaded lazily:
by ``initialize()``, by ``from_bytes`` / ``from_disk``, or on the first call. Each Doc is cut into windows
(``doc_windows.py``), and the windows of all Docs of a call go through the runtime together, batched by length
under a cap on padded tokens. The output of a Doc is its windows' layers side by side, in an array of its own,
``(n_layers + 1, len(doc), 2 * projection_dim)``.

The settings are not saved with the model's bytes: a saved pipeline's config holds them, so the config always wins
over what was saved. A copy of the model (e.g. made by ``nlp.replace_listeners``) copies its shim, settings included,
and keeps working on its own.
"""
import difflib
import functools
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from spacy.tokens import Doc
from spacy.util import registry
import torch
from thinc.api import Model, torch2xp, xp2torch
from thinc.types import Floats2d, Floats3d, FloatsXd

from ..errors import ElmoPipelineError, ElmoSettingsError, ElmoWeightsError
from ..runtime import BiLmSettings, ElmoRuntime, MixWeights
from ..runtime.settings import BILM_BLOCK, COMPONENT, EMBEDDING, PIPELINE_DEFAULTS as DEFAULTS, settings_in
from ..sources.download import resolve_model
from ..util.windows import join_windows, windows_per_sequence
from .config_types import CacheSize, InitialState, ModelSource, Precision, TokenCount, config_error
from .doc_windows import doc_windows
from .elmo_shim import ElmoShim
from .layer_cache import LayerCache

ARCHITECTURE = "spacy_elmo.ElmoBiLm.v2"
# The settings an ``ElmoBiLm.v2`` block takes (the rest of BiLmSettings is the owner's).
BILM_SETTINGS = settings_in(BILM_BLOCK)
# The settings the owner of an ``ElmoBiLm.v2`` model gives it, as its own config keys (the ``elmo`` component's,
# ``ElmoEmbedding.v2``'s); with ``lang`` (the pipeline's language) they complete its BiLmSettings.
OWNER_SETTINGS = settings_in(COMPONENT)
# The model attrs in which version 0.2 kept the settings, saved with the weights: a model read from bytes drops them.
LEGACY_SETTING_ATTRS = (
    "options_file", "weight_file", "initial_state", "stateful", "max_batch_tokens", "max_sentence_tokens",
    "precision", "cache_size", "frozen", "lang",
)
LAYER_CACHE = "elmo_layer_cache"  # attr: the model's LayerCache of training sentences' layers (none: budget 0)

DEFAULT_MODEL = {"@architectures": ARCHITECTURE}  # the config block of the default biLM model


@registry.architectures(ARCHITECTURE)
def build_bilm_model_v2(
    options_file: Optional[ModelSource] = DEFAULTS.options_file,
    weight_file: Optional[str] = DEFAULTS.weight_file,
    initial_state: InitialState = DEFAULTS.initial_state,
    stateful: bool = DEFAULTS.stateful,
    max_batch_tokens: TokenCount = DEFAULTS.max_batch_tokens,
    max_sentence_tokens: TokenCount = DEFAULTS.max_sentence_tokens,
    precision: Precision = DEFAULTS.precision,
    cache_size: CacheSize = DEFAULTS.cache_size,
) -> Model[List[Doc], List[Floats3d]]:
    """The biLM network of the ``elmo`` component, with the settings of its block (docs/api.md describes each).

    The files are read by ``initialize()``, else on first use; a saved pipeline carries the weights.
    """
    settings = BiLmSettings(
        options_file=options_file, weight_file=weight_file, initial_state=initial_state, stateful=stateful,
        max_batch_tokens=max_batch_tokens, max_sentence_tokens=max_sentence_tokens, precision=precision,
        cache_size=cache_size,
    )
    model = Model(
        "elmo_bilm",
        forward,
        init=init,
        shims=[ElmoShim(settings)],
        dims={"nO": None, "nL": None},
        attrs={LAYER_CACHE: LayerCache(0)},
    )
    offer_replace_listeners(model)
    return model


def published_bilm_model(name: str) -> Model[List[Doc], List[Floats3d]]:
    """The default biLM model with the files of the downloaded published model ``name`` (``python -m spacy_elmo
    list``); a name that is not downloaded is an error saying how to get it."""
    options_file, weight_file = resolve_model(name)
    return build_bilm_model_v2(options_file=options_file, weight_file=weight_file)


def _shim(model: Model) -> ElmoShim:
    return model.shims[0]


def bilm_settings(model: Model) -> BiLmSettings:
    """The model's settings as they stand (its shim's)."""
    return _shim(model).settings


def configure_bilm_model(model: Model, **changes: Any) -> None:
    """Change some of the model's settings (checked); a loaded biLM applies what changed at once, and what
    ``replace_listeners`` makes of a listener of the model follows (:func:`offer_replace_listeners`).

    New files are read by :func:`load_bilm_weights` (``initialize``), not here: a loaded pipeline names the files it
    was trained from, which need not exist where it runs.
    """
    _shim(model).configure(**changes)
    offer_replace_listeners(model)


def offer_replace_listeners(model: Model) -> None:
    """Give ``Language.replace_listeners``, which swaps a listener of ``model`` (an ``elmo`` component's biLM model)
    for a copy of it, the copy's config block with the model's settings as they stand: called whenever they change."""
    model.attrs["replace_listener_cfg"] = functools.partial(replace_listener_cfg, bilm_settings(model))


def replace_listener_cfg(
    settings: BiLmSettings, component_model_cfg: Dict[str, Any], listener_cfg: Dict[str, Any]
) -> Dict:
    """``Language.replace_listeners`` hook: the ``ElmoListener.v1`` block as ``ElmoEmbedding.v2``.

    ``settings`` are the component's biLM model's settings as they stand (bound by :func:`offer_replace_listeners`
    whenever they change), so a path given to ``initialize`` reaches the new block's ``bilm``, and the component's
    own settings (``frozen``, ``threads``...) the new block's.
    """
    if listener_cfg.get("@architectures") != "spacy_elmo.ElmoListener.v1":
        raise ElmoPipelineError(
            f"replace_listeners: expected a 'spacy_elmo.ElmoListener.v1' block, found {listener_cfg.get('@architectures')!r}"
        )
    return {
        **{key: value for key, value in listener_cfg.items() if key not in ("@architectures", "upstream")},
        "@architectures": "spacy_elmo.ElmoEmbedding.v2",
        "bilm": {"@architectures": ARCHITECTURE, **{key: getattr(settings, key) for key in BILM_SETTINGS}},
        **{key: getattr(settings, key) for key in settings_in(EMBEDDING)},
    }


def check_owner_settings(keys: Iterable[str], owner: str, own: Sequence[str]) -> None:
    """Refuse, in one line, a key among the settings ``owner`` (a component of the model, whose own settings are
    ``own``) gives its model that is not one of :data:`OWNER_SETTINGS`: where it belongs if it is one of the biLM's,
    else the closest setting it may mean.

    Only reached where spacy-elmo's code sees the key (``Elmo(...)`` built in Python): spaCy 3.8 checks a factory's
    keys against its signature (confection's "unexpected argument") before calling it and offers no hook, so
    ``nlp.add_pipe`` and ``spacy train`` report such a key themselves, naming it.
    """
    model = f"[components.{owner}.model] ({ARCHITECTURE})"
    for key in (key for key in keys if key not in OWNER_SETTINGS):
        if key in BILM_SETTINGS:
            raise config_error(f"'{key}' is a setting of the biLM, not of the {owner!r} component: it belongs in {model}")
        guess = difflib.get_close_matches(key, [*own, *BILM_SETTINGS], n=1)
        if guess:
            where = model if guess[0] in BILM_SETTINGS else f"[components.{owner}]"
            raise config_error(
                f"Unknown setting '{key}' for the {owner!r} component; did you mean '{guess[0]}'? It belongs in {where}"
            )
        raise config_error(
            f"Unknown setting '{key}' for the {owner!r} component; it takes {', '.join(own)}, and its biLM, in "
            f"{model}, {', '.join(BILM_SETTINGS)}"
        )


def layer_cache(model: Model) -> LayerCache:
    """The model's store of training sentences' layers."""
    return model.attrs[LAYER_CACHE]


def set_layer_cache(model: Model, max_bytes: int) -> None:
    """Give the model an empty store of training sentences' layers of ``max_bytes`` (0: none)."""
    model.attrs[LAYER_CACHE] = LayerCache(max_bytes)


def load_bilm_weights(model: Model) -> ElmoRuntime:
    """(Re)load the biLM from the files its settings name (none: the embedded model), on thinc's device; cached
    layers of other weights go."""
    runtime = _shim(model).load()
    _weights_loaded(model)
    return runtime


def load_bilm_bytes(model: Model, data: bytes, source: str) -> None:
    """Read the biLM from its saved bytes (run with the model's settings, on thinc's device); if they are damaged,
    raise, naming ``source``, and leave the model as it was. Cached layers of other weights go."""
    try:
        model.from_bytes(data)
    except ElmoSettingsError:  # a device this machine lacks
        raise
    except (ValueError, TypeError, KeyError) as err:  # includes ElmoWeightsError and ElmoOptionsError
        raise ElmoWeightsError(f"The saved ELMo biLM in {source} is damaged ({err}); save the pipeline again") from None
    for key in LEGACY_SETTING_ATTRS:
        model.attrs.pop(key, None)
    _weights_loaded(model)


def load_bilm_file(model: Model, path: Path) -> None:
    """:func:`load_bilm_bytes` of the file ``path`` (a saved pipeline's), which must exist."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ElmoWeightsError(
            f"Cannot read the saved ELMo biLM {path} ({err.strerror}): the saved pipeline is incomplete; save it again"
        ) from None
    load_bilm_bytes(model, data, str(path))


def is_loaded(model: Model) -> bool:
    """Whether the model holds a biLM (it is loaded lazily)."""
    return _shim(model).runtime is not None


def runtime_of(model: Model) -> ElmoRuntime:
    """The model's runtime, loading the biLM first if needed."""
    runtime = _shim(model).runtime
    return load_bilm_weights(model) if runtime is None else runtime


def _weights_loaded(model: Model) -> None:
    """After new weights: cached layers of other weights go, and the model's dims (``nO`` width, ``nL`` layers)
    become its biLM's, if it holds one."""
    layer_cache(model).clear()
    if is_loaded(model):
        options = _shim(model).runtime.options
        model.set_dim("nO", options.output_dim, force=True)
        model.set_dim("nL", options.n_output_layers, force=True)


def init(model: Model, X: Optional[List[Doc]] = None, Y: Optional[Any] = None) -> None:
    """Thinc's initialization: read the weight files unless weights were loaded already."""
    runtime_of(model)


def frozen_backprop(d_layers: Any) -> List[Doc]:
    """The backprop of a frozen biLM: no work at all. Layers that receive it skip their input gradients."""
    return []


def doc_layers(model: Model, docs: Sequence[Doc], fresh: bool = False) -> List[Floats3d]:
    """Per Doc, its layers ``(n_layers + 1, len(doc), dim)``, each an array of its own on the biLM's device (cupy on
    GPU: the layers reach a listener there without a trip through the host), computed by the runtime without
    autograd (``fresh``: a stateful biLM from its initial state, its carried state left as it is)."""
    runtime, words, per_doc = _doc_segments(model, docs)
    return [torch2xp(x) for x in runtime.layers(words, per_doc, fresh, on_device=True)]


def doc_mixes(model: Model, docs: Sequence[Doc], weights: MixWeights, spare_columns: int = 0) -> List[Floats2d]:
    """Per Doc, ``sum_j weights[j] * layer_j``, ``(len(doc), dim)``, summed as the biLM makes each layer, so that the
    layers are never held (what the ``elmo`` component stores when no listener reads layers); ``spare_columns`` as in
    :meth:`~spacy_elmo.runtime.ElmoRuntime.mixed`."""
    runtime, words, per_doc = _doc_segments(model, docs)
    return runtime.mixed(words, weights, per_doc, spare_columns)


def _doc_segments(model: Model, docs: Sequence[Doc]) -> Tuple[ElmoRuntime, List[List[str]], List[int]]:
    """The model's runtime, the biLM inputs of ``docs`` (their windows' words) and how many belong to each Doc."""
    runtime = runtime_of(model)
    windows, words = doc_windows(docs, runtime.settings.max_sentence_tokens)
    return runtime, words, windows_per_sequence(windows, len(docs))


def _trained_layers(model: Model, docs: Sequence[Doc]) -> Tuple[List[FloatsXd], Callable]:
    """Per Doc, its layers with autograd through the biLM, and their backprop (a biLM being fine-tuned).

    The call's windows run as one biLM batch, through the runtime (its settings apply), as a stateful call does at
    prediction (row ``r`` continues row ``r`` of the call before); a stateless biLM gives the same vectors in any
    batch.
    """
    runtime = runtime_of(model)
    windows, words = doc_windows(docs, runtime.settings.max_sentence_tokens)
    output = runtime.trained_layers(words)
    outputs = join_windows(windows, torch2xp(output), len(docs))

    def backprop(d_outputs: List[FloatsXd]) -> List[Doc]:
        d_packed = model.ops.xp.concatenate(d_outputs, axis=-2)  # the packed order is the Docs' tokens in order
        torch.autograd.backward(output, grad_tensors=xp2torch(d_packed, device=output.device))
        return []

    return outputs, backprop


def _cached_layers(model: Model, docs: Sequence[Doc]) -> List[Floats3d]:
    """Each Doc's layers, assembled from per-sentence layers kept in (or added to) the model's layer cache."""
    runtime, cache = runtime_of(model), layer_cache(model)
    windows, words = doc_windows(docs, runtime.settings.max_sentence_tokens)
    found = [cache.get(tuple(w)) for w in words]
    missing = [i for i, layers in enumerate(found) if layers is None]
    for i, layers in zip(missing, runtime.layers([words[i] for i in missing])):
        found[i] = layers
        cache.add(tuple(words[i]), layers)
    if not found:
        options = runtime.options
        return [model.ops.alloc3f(options.n_output_layers, 0, options.output_dim) for _ in docs]
    return join_windows(windows, model.ops.xp.concatenate(found, axis=1), len(docs))


def forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    """Per Doc, all its layers: with autograd while a biLM that is not frozen trains; else computed by the runtime,
    in training from the layer cache where it can be (a frozen, stateless biLM is a function of the sentence)."""
    settings = bilm_settings(model)
    if is_train and not settings.frozen:
        return _trained_layers(model, docs)
    if is_train and not settings.stateful and layer_cache(model).max_bytes > 0:
        return _cached_layers(model, docs), frozen_backprop
    return [model.ops.asarray(x) for x in doc_layers(model, docs)], frozen_backprop
