"""The settings of a running biLM: the one declaration of each, and one frozen value of them, checked when made.

:class:`BiLmSettings` is what every entry point gives the runtime: ``ElmoEmbedder``'s arguments, the ``elmo``
component's config (its ``spacy_elmo.ElmoBiLm.v2`` block and its own keys), ``spacy_elmo.ElmoEmbedding.v2``'s, the
``embed`` command's options and the AllenNLP classes' keywords all become one. A change is a new value
(:meth:`BiLmSettings.replace`, which checks what changes), which the runtime compares with the one it runs to apply
only what changed. Each field declares a setting (:func:`setting`): its type, default, check and the places that
take it (:data:`PLACES`), whose names derive from here (:func:`settings_in`); tests/runtime/test_settings.py checks
that their signatures agree.

The defaults here are the only ones, but for the token cache's: a runtime keeps none unless asked
(``cache_size`` 0: ``ElmoEmbedder`` and ``embed`` compute every token's vector), while the spaCy pipeline's biLM
(``spacy_elmo.ElmoBiLm.v2``) keeps :data:`DEFAULT_PIPELINE_CACHE_SIZE`, whose reasons are below.
"""
import copy
import dataclasses
import difflib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, TypeVar

from ..errors import ElmoSettingsError
from ..model.batch_cost import DEFAULT_MAX_BATCH_TOKENS
from ..model.encoder import DEFAULT_INITIAL_STATE, check_initial_state
from ..model.precision import DEFAULT_PRECISION, check_precision_name
from ..model.token_cache import check_cache_size
from ..sources.resolve import DEFAULT_LANG, check_model_files
from ..util.numbers import is_number
from ..util.windows import DEFAULT_MAX_SENTENCE_TOKENS

# torch CPU threads while the biLM runs: one is never slow on a busy machine (docs/limits.md, "Threads").
DEFAULT_THREADS = 1
# After a batch that merged several calls, how long the next may wait for as many calls to join; a lone caller never
# waits (measured: 8 threads calling nlp(text) reach 0.54x of nlp.pipe's words/s with it, 0.43x without).
DEFAULT_BATCH_WAIT_MS = 1.0
# A biLM run shared by several calls: about 20 sentences, short enough that a short call behind a long one waits a
# few of its own durations (measured: p95 within 1-4x of the short calls' own with 512, 20-38x with 4,096).
DEFAULT_SHARED_BATCH_TOKENS = 512
# Token vectors the spaCy pipeline's biLM keeps by default: 10 MB for the 128-wide models (40 MB for `original`'s 512),
# more word types than UD-EWT's whole training set holds (19,674); BENCHMARKS.md measures what the cache gains.
DEFAULT_PIPELINE_CACHE_SIZE = 20_000

# Where settings are given (a setting's ``places``): the keys of a config block, or a function's keywords.
BILM_BLOCK = "bilm"  # the ``spacy_elmo.ElmoBiLm.v2`` block
COMPONENT = "component"  # the ``elmo`` component's own keys, which complete its model's (the biLM's owner)
EMBEDDING = "embedding"  # ``spacy_elmo.ElmoEmbedding.v2``: a component's own biLM, what replace_listeners makes
EMBEDDER = "embedder"  # ``ElmoEmbedder``'s keywords
EMBED = "embed"  # the ``embed`` command's options (each a setting's ``option``)
ALLENNLP = "allennlp"  # the keywords AllenNLP's ``Elmo``, ``ElmoBiLm`` and 0.9's ``ElmoEmbedder`` take beyond its own
PLACES = (BILM_BLOCK, COMPONENT, EMBEDDING, EMBEDDER, EMBED, ALLENNLP)

T = TypeVar("T")


def check_token_count(value: Any, name: str = "a number of tokens") -> None:
    """Refuse a number of tokens (a batch's, a window's) below 1."""
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ElmoSettingsError(f"{name} must be a positive number of tokens, found {value!r}")


def check_threads(threads: Optional[int]) -> None:
    """Refuse a thread count that is not a positive int or None (None: torch's own setting, left as it is)."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ElmoSettingsError(f"threads must be a positive integer, or None to keep torch's own setting; found {threads!r}")


def check_wait_ms(wait_ms: Any) -> None:
    """Refuse a wait that is not a number of milliseconds >= 0 (0: merge only the calls already waiting)."""
    if not is_number(wait_ms) or not wait_ms >= 0:
        raise ElmoSettingsError(f"batch_wait_ms must be a number of milliseconds >= 0 (0: no waiting), found {wait_ms!r}")


def setting(
    default: T, *places: str, check: Optional[Callable[[Any], None]] = None, option: Optional[str] = None
) -> T:
    """A field of :class:`BiLmSettings`: its ``default``, the ``places`` that take it, the ``check`` of its value
    alone (run once, when a value is made) and, when the ``embed`` command takes it, its ``option``."""
    return field(default=default, metadata={"places": places, "check": check, "option": option})


@dataclass(frozen=True)
class BiLmSettings:
    """Which biLM runs, and how. docs/api.md describes each setting where users give it: ``ElmoEmbedder``'s table
    (all but two), ``spacy_elmo.ElmoBiLm.v2``'s (``max_sentence_tokens``) and the ``elmo`` factory's (``frozen``).
    A precision other than fp32 needs ``frozen``.
    """

    options_file: Optional[str] = setting(None, BILM_BLOCK, EMBEDDER, EMBED, option="--options")
    weight_file: Optional[str] = setting(None, BILM_BLOCK, EMBEDDER, EMBED, option="--weights")
    lang: str = setting(DEFAULT_LANG, EMBEDDING, EMBEDDER, EMBED, option="--lang")
    initial_state: str = setting(
        DEFAULT_INITIAL_STATE, BILM_BLOCK, EMBEDDER, EMBED, ALLENNLP, check=check_initial_state, option="--initial-state"
    )
    stateful: bool = setting(False, BILM_BLOCK, EMBEDDER, ALLENNLP)
    max_batch_tokens: int = setting(
        DEFAULT_MAX_BATCH_TOKENS, BILM_BLOCK, EMBEDDER, ALLENNLP,
        check=functools.partial(check_token_count, name="max_batch_tokens"),
    )
    max_sentence_tokens: int = setting(
        DEFAULT_MAX_SENTENCE_TOKENS, BILM_BLOCK, EMBED, option="--max-tokens",
        check=functools.partial(check_token_count, name="max_sentence_tokens"),
    )
    precision: str = setting(
        DEFAULT_PRECISION, BILM_BLOCK, EMBEDDER, EMBED, ALLENNLP, check=check_precision_name, option="--precision"
    )
    cache_size: int = setting(0, BILM_BLOCK, EMBEDDER, check=check_cache_size)
    frozen: bool = setting(True, COMPONENT, EMBEDDING)
    threads: Optional[int] = setting(DEFAULT_THREADS, COMPONENT, EMBEDDING, EMBEDDER, ALLENNLP, check=check_threads)
    batch_requests: bool = setting(True, COMPONENT, EMBEDDING, EMBEDDER)
    batch_wait_ms: float = setting(DEFAULT_BATCH_WAIT_MS, COMPONENT, EMBEDDING, EMBEDDER, check=check_wait_ms)
    shared_batch_tokens: int = setting(
        DEFAULT_SHARED_BATCH_TOKENS, COMPONENT, EMBEDDING, EMBEDDER,
        check=functools.partial(check_token_count, name="shared_batch_tokens"),
    )

    def __post_init__(self) -> None:
        self._settle([item.name for item in dataclasses.fields(self)])

    def _settle(self, names: Iterable[str]) -> None:
        """Make the file paths text and run the checks of the settings ``names``, the others' being checked already,
        then those of settings together that involve one of them."""
        names = set(names)
        for name in names & {"options_file", "weight_file"}:
            value = getattr(self, name)
            object.__setattr__(self, name, str(value) if isinstance(value, Path) else value)
        for item in dataclasses.fields(self):
            if item.name in names and item.metadata["check"] is not None:
                item.metadata["check"](getattr(self, item.name))
        if names & {"options_file", "weight_file"}:
            check_model_files(self.options_file, self.weight_file)
        if names & {"precision", "frozen"} and self.precision != DEFAULT_PRECISION and not self.frozen:
            raise ElmoSettingsError(
                f"precision {self.precision!r} is for a frozen biLM: fine-tuning (frozen = false) trains fp32 "
                f"weights. Set precision = \"fp32\" to fine-tune, or frozen = true"
            )

    def replace(self, **changes: Any) -> "BiLmSettings":
        """These settings with ``changes``, of which only the changes are checked; unknown names are an error naming
        the known ones."""
        known = [field.name for field in dataclasses.fields(self)]
        for key in sorted(set(changes) - set(known)):
            guess = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {guess[0]!r}?" if guess else f"known: {', '.join(known)}"
            raise ElmoSettingsError(f"Unknown ELMo biLM setting {key!r}; {hint}")
        changed = copy.copy(self)
        for key, value in changes.items():
            object.__setattr__(changed, key, value)
        changed._settle(changes)
        return changed


# The settings of a biLM when none is given; in a spaCy pipeline, with a token cache.
DEFAULTS = BiLmSettings()
PIPELINE_DEFAULTS = DEFAULTS.replace(cache_size=DEFAULT_PIPELINE_CACHE_SIZE)


def settings_in(place: str) -> Tuple[str, ...]:
    """The names of the settings ``place`` (one of :data:`PLACES`) takes, in :class:`BiLmSettings`' order."""
    return tuple(item.name for item in dataclasses.fields(BiLmSettings) if place in item.metadata["places"])


def embed_options() -> Dict[str, str]:
    """The ``embed`` command's options that set the biLM, and the setting each gives (``{"--lang": "lang", ...}``)."""
    return {item.metadata["option"]: item.name for item in dataclasses.fields(BiLmSettings) if item.metadata["option"]}
