"""The thinc model inside the ``elmo`` component: Docs in, all biLM layers of every token out.

``spacy_elmo.ElmoBiLm.v2`` holds the biLM's settings, as spaCy's and spacy-transformers'
architectures hold their models' hyper-parameters: which files (both ``options_file`` and
``weight_file``, or neither for the model embedded for the pipeline's language), where the
LSTMs start (``initial_state``, ``stateful``), how much goes through the biLM at once
(``max_batch_tokens``, ``max_sentence_tokens``), the precision of its products (``precision``) and
how many token vectors it keeps (``cache_size``). This block is the only place they are set; spaCy's
config validation checks their types and values. Two settings belong to the model's owner, not the
architecture: ``frozen`` (whether it trains) and ``lang``.

Each Doc is cut into windows (``doc_windows.py``), and the windows of all Docs of a call are
batched together by length under a cap on padded tokens, so one long Doc never becomes one huge
biLM batch. The output of a Doc is its segments' layers put back side by side,
``(n_layers + 1, len(doc), 2 * projection_dim)``.

The biLM lives in an :class:`ElmoShim` and is loaded lazily: by ``initialize()``, by
``from_bytes`` / ``from_disk``, or on the first call. Settings are plain model attrs, so a copy
of the model (e.g. made by ``nlp.replace_listeners``) keeps working on its own.
"""
from typing import Any, Callable, Dict, Iterable, List, Literal, Optional, Sequence, Tuple

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import ArgsKwargs, Model, torch2xp, xp2torch
from thinc.types import Floats2d, Floats3d, FloatsXd

from ..sources.resolve import DEFAULT_LANG, check_model_files, model_files
from ..model.encoder import DEFAULT_INITIAL_STATE, ElmoEncoder, check_initial_state
from ..model.token_cache import check_cache_size
from ..model.precision import DEFAULT_PRECISION, check_precision_name
from ..model.batch_encoder import BatchEncoder
from ..model.batching import DEFAULT_MAX_BATCH_TOKENS
from ..model.options import ElmoOptions
from ..formats.weights import load_files
from ..errors import ElmoSettingsError
from .config_types import CacheSize, ModelSource, TokenCount, check_token_count
from .elmo_shim import ElmoShim
from ..util.windows import DEFAULT_MAX_SENTENCE_TOKENS, join_windows
from .doc_windows import doc_windows, window_words

ARCHITECTURE = "spacy_elmo.ElmoBiLm.v2"
# The settings an ``ElmoBiLm.v2`` block takes.
BILM_SETTINGS = (
    "options_file",
    "weight_file",
    "initial_state",
    "stateful",
    "max_batch_tokens",
    "max_sentence_tokens",
    "precision",
    "cache_size",
)
# The settings the model's owner gives it (the ``elmo`` component, or ``ElmoEmbedding``), with their defaults.
OWNER_SETTINGS: Dict[str, Any] = {"frozen": True, "lang": DEFAULT_LANG}
# Token vectors kept by default: 10 MB for the 128-wide models (40 MB for `original`'s 512), more word types than
# UD-EWT's whole training set holds (19,674); see BENCHMARKS.md, "The component: nlp.pipe with the token cache".
DEFAULT_CACHE_SIZE = 20_000

InitialState = Literal["auto", "zeros", "warm"]
Precision = Literal["fp32", "bf16", "int8", "fp16"]


@registry.architectures(ARCHITECTURE)
def build_bilm_model_v2(
    options_file: Optional[ModelSource] = None,
    weight_file: Optional[str] = None,
    initial_state: InitialState = DEFAULT_INITIAL_STATE,
    stateful: bool = False,
    max_batch_tokens: TokenCount = DEFAULT_MAX_BATCH_TOKENS,
    max_sentence_tokens: TokenCount = DEFAULT_MAX_SENTENCE_TOKENS,
    precision: Precision = DEFAULT_PRECISION,
    cache_size: CacheSize = DEFAULT_CACHE_SIZE,
) -> Model[List[Doc], List[Floats3d]]:
    """The biLM network of the ``elmo`` component.

    options_file, weight_file: AllenNLP/bilm-tf ``options.json`` and weights ``.hdf5``; both None
        means the model embedded in spacy-elmo for the pipeline's language. Read by
        ``initialize()``, else on first use; a saved pipeline carries the weights.
    initial_state, stateful: where each sequence's LSTMs start, as for ``ElmoEmbedder``.
    max_batch_tokens: padded tokens per biLM batch.
    max_sentence_tokens: longest biLM input; longer sentences (or Docs without sentence
        boundaries) are cut into windows of this many tokens.
    precision: the biLM's matrix products, as for ``ElmoEmbedder``: "fp32" (exact), "int8", "bf16"
        (CPUs with native bf16), "fp16" (GPUs). Inference only: a biLM that is fine-tuned runs in fp32.
    cache_size: context-free token vectors kept, so frequent words skip the char CNN (0: none); the same vectors up to
        float32 rounding.
    """
    model = Model(
        "elmo_bilm",
        forward,
        init=init,
        shims=[ElmoShim()],
        dims={"nO": None, "nL": None},
        attrs=dict(OWNER_SETTINGS),
    )
    configure_bilm_model(
        model,
        options_file=options_file,
        weight_file=weight_file,
        initial_state=initial_state,
        stateful=stateful,
        max_batch_tokens=max_batch_tokens,
        max_sentence_tokens=max_sentence_tokens,
        precision=precision,
        cache_size=cache_size,
    )
    return model


def configure_bilm_model(model: Model, **settings: Any) -> None:
    """Set some of the model's settings (:data:`BILM_SETTINGS` and :data:`OWNER_SETTINGS`), checking them."""
    unknown = set(settings) - set(BILM_SETTINGS) - set(OWNER_SETTINGS)
    if unknown:
        raise ElmoSettingsError(f"Unknown ELMo biLM settings {sorted(unknown)}; known: {sorted((*BILM_SETTINGS, *OWNER_SETTINGS))}")
    merged = {**model.attrs, **settings}
    check_initial_state(merged["initial_state"])
    check_model_files(merged["options_file"], merged["weight_file"])
    for key in ("max_batch_tokens", "max_sentence_tokens"):
        check_token_count(merged[key], key)
    check_cache_size(merged["cache_size"])
    check_precision_name(merged["precision"])
    if merged["precision"] != DEFAULT_PRECISION and not merged["frozen"]:
        raise ElmoSettingsError(
            f"precision {merged['precision']!r} is for a frozen biLM: fine-tuning (frozen = false) trains fp32 "
            f"weights. Set precision = \"fp32\" to fine-tune, or frozen = true"
        )
    model.attrs.update(settings)
    if is_loaded(model):
        _sync_module(model)


def bilm_settings(model: Model) -> Dict[str, Any]:
    """All the model's settings as they stand, for :func:`configure_bilm_model`."""
    return {key: model.attrs[key] for key in (*BILM_SETTINGS, *OWNER_SETTINGS)}


def bilm_config(settings: Dict[str, Any]) -> Dict[str, Any]:
    """The ``ElmoBiLm.v2`` config block of a model with ``settings`` (as :func:`bilm_settings` gives them)."""
    return {"@architectures": ARCHITECTURE, **{key: settings[key] for key in BILM_SETTINGS}}


def load_bilm_weights(model: Model) -> None:
    """(Re)load the biLM from the model's ``options_file``/``weight_file`` (both None: the embedded model)."""
    bilm = load_files(*model_files(model.attrs["options_file"], model.attrs["weight_file"], model.attrs["lang"]))
    model.shims[0].set_module(BatchEncoder(ElmoEncoder(bilm)))
    _sync_module(model)


def is_loaded(model: Model) -> bool:
    """Whether the model holds a biLM (it is built lazily)."""
    return model.shims[0].module is not None


def init(model: Model, X: Optional[List[Doc]] = None, Y: Optional[Any] = None) -> None:
    """Thinc's initialization: read the weight files unless weights were loaded already."""
    if not is_loaded(model):
        load_bilm_weights(model)


def _loaded_module(model: Model) -> BatchEncoder:
    """The biLM module, read from its files first if needed; one that came without the model's settings (loaded from
    bytes, whose attrs thinc restores directly) gets them once."""
    shim = model.shims[0]
    if shim.module is None:
        load_bilm_weights(model)
    elif not shim.in_sync:
        _sync_module(model)
    return shim.module


def _sync_module(model: Model) -> None:
    """Give the loaded module the model's settings and the model the module's dims: the one writer of the module's
    settings, called when a setting or the module changes (never per call: it walks every parameter)."""
    shim = model.shims[0]
    module, attrs = shim.module, model.attrs
    if module.encoder.initial_state != attrs["initial_state"]:
        module.encoder.initial_state = attrs["initial_state"]
        module.encoder.weights_changed()
    if module.stateful != attrs["stateful"]:
        module.stateful = attrs["stateful"]
        module.carried.reset()
    cache = module.encoder.cache
    if (0 if cache is None else cache.capacity) != attrs["cache_size"]:
        module.encoder.set_cache_size(attrs["cache_size"])
    if module.encoder.precision != attrs["precision"]:
        module.encoder.set_precision(attrs["precision"])
    trainable = not attrs["frozen"]
    for param in module.parameters():
        if param.requires_grad != trainable:
            param.requires_grad_(trainable)
    model.set_dim("nO", module.options.output_dim, force=True)
    model.set_dim("nL", module.options.n_output_layers, force=True)
    shim.in_sync = True


def bilm_options(model: Model) -> ElmoOptions:
    """The loaded biLM's options (loading it first if needed)."""
    return _loaded_module(model).options


def fill_token_cache(model: Model, words: Iterable[str]) -> None:
    """Pre-fill the biLM's token cache (``cache_size`` > 0) from ``words``, most frequent first, until it is full."""
    _loaded_module(model).encoder.fill_cache(words)


def reset_state(model: Model) -> None:
    """Forget the state carried between calls in stateful mode."""
    if is_loaded(model):
        model.shims[0].module.carried.reset()


def frozen_backprop(d_layers: Any) -> List[Doc]:
    """The backprop of a frozen biLM: no work at all. Layers that receive it skip their input gradients."""
    return []


def encode_segments(
    model: Model, words: Sequence[Sequence[str]], *, is_train: bool, mix: Optional[FloatsXd] = None
) -> Tuple[FloatsXd, Callable[[FloatsXd], None]]:
    """The packed layers of ``words`` (see :meth:`BatchEncoder.forward`) as an xp array, and their backprop.

    The biLM gets gradients only with ``is_train`` on a model that is not ``frozen``; otherwise
    it runs without autograd and the backprop is :func:`frozen_backprop`.
    """
    _loaded_module(model)
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
    windows = doc_windows(docs, model.attrs["max_sentence_tokens"])
    packed, backprop_packed = encode_segments(model, window_words(docs, windows), is_train=is_train, mix=mix)
    outputs = join_windows(windows, packed, len(docs))
    if backprop_packed is frozen_backprop:
        return outputs, frozen_backprop

    def backprop(d_outputs: List[FloatsXd]) -> List[Doc]:
        backprop_packed(model.ops.xp.concatenate(d_outputs, axis=-2))  # the packed order is the Docs' tokens in order
        return []

    return outputs, backprop


def forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    """Per Doc, all its layers; see :func:`encode_docs`."""
    return encode_docs(model, docs, is_train=is_train)


def mix_docs(model: Model, docs: Sequence[Doc], weights: FloatsXd) -> List[Floats2d]:
    """Per Doc, ``sum_j weights[j] * layer_j`` computed batch by batch without keeping all layers."""
    outputs, _ = encode_docs(model, docs, is_train=False, mix=weights)
    return outputs
