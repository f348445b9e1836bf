"""The settings of a running biLM, as one frozen value checked once, when it is made.

:class:`BiLmSettings` is what every entry point gives the runtime: ``ElmoEmbedder``'s arguments, the ``elmo``
component's config (its ``spacy_elmo.ElmoBiLm.v2`` block and its own ``frozen`` / ``threads`` / ``batch_requests``
/ ``batch_wait_ms`` / ``shared_batch_tokens``) and the ``embed`` command's options all become one of these. A changed
setting is a new value (:meth:`BiLmSettings.replace`), which the runtime compares with the one it runs to apply only
what changed.

The defaults here are the only ones, but for the token cache's: a runtime keeps none unless asked
(``cache_size`` 0: ``ElmoEmbedder`` and ``embed`` compute every token's vector), while the spaCy pipeline's biLM
(``spacy_elmo.ElmoBiLm.v2``) keeps :data:`DEFAULT_PIPELINE_CACHE_SIZE`, whose reasons are below.
"""
import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

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


def _path_text(value: Any) -> Optional[str]:
    return None if value is None else str(value) if isinstance(value, Path) else value


@dataclass(frozen=True)
class BiLmSettings:
    """Which biLM runs, and how.

    options_file, weight_file: the biLM's ``options.json`` and ``.hdf5`` (both None: the model embedded for
        ``lang``; ``options_file`` alone may name a downloaded published model).
    lang: the language whose embedded model is used when no files are given.
    initial_state, stateful: where each sequence's LSTMs start (see ``ElmoEmbedder``).
    max_batch_tokens: padded tokens per biLM batch; max_sentence_tokens: the longest biLM input (longer sequences
        are cut into windows).
    precision: of the biLM's matrix products ("fp32", "int8", "bf16", "fp16"); anything but fp32 needs ``frozen``.
    cache_size: context-free token vectors kept (0: none).
    frozen: the biLM's weights do not train.
    threads: torch CPU threads for the biLM (None: torch's own setting).
    batch_requests, batch_wait_ms: calls from several threads merged into one biLM run, and how long a call may wait
        for others after a merged batch.
    shared_batch_tokens: padded tokens (rows times the longest row) per biLM run while calls of several threads
        wait: a long call is cut into pieces that take turns with the short ones. A call alone runs batches of
        ``max_batch_tokens`` until calls first meet; after that it keeps to this size while traffic goes on and for
        2 s after (``util/scheduler.py``), then grows back to ``max_batch_tokens``.
    """

    options_file: Optional[str] = None
    weight_file: Optional[str] = None
    lang: str = DEFAULT_LANG
    initial_state: str = DEFAULT_INITIAL_STATE
    stateful: bool = False
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
    max_sentence_tokens: int = DEFAULT_MAX_SENTENCE_TOKENS
    precision: str = DEFAULT_PRECISION
    cache_size: int = 0
    frozen: bool = True
    threads: Optional[int] = DEFAULT_THREADS
    batch_requests: bool = True
    batch_wait_ms: float = DEFAULT_BATCH_WAIT_MS
    shared_batch_tokens: int = DEFAULT_SHARED_BATCH_TOKENS

    def __post_init__(self) -> None:
        object.__setattr__(self, "options_file", _path_text(self.options_file))
        object.__setattr__(self, "weight_file", _path_text(self.weight_file))
        check_model_files(self.options_file, self.weight_file)
        check_initial_state(self.initial_state)
        check_token_count(self.max_batch_tokens, "max_batch_tokens")
        check_token_count(self.max_sentence_tokens, "max_sentence_tokens")
        check_token_count(self.shared_batch_tokens, "shared_batch_tokens")
        check_precision_name(self.precision)
        check_cache_size(self.cache_size)
        check_threads(self.threads)
        check_wait_ms(self.batch_wait_ms)
        if self.precision != DEFAULT_PRECISION and not self.frozen:
            raise ElmoSettingsError(
                f"precision {self.precision!r} is for a frozen biLM: fine-tuning (frozen = false) trains fp32 "
                f"weights. Set precision = \"fp32\" to fine-tune, or frozen = true"
            )

    def replace(self, **changes: Any) -> "BiLmSettings":
        """These settings with ``changes`` (checked); unknown names are an error naming the known ones."""
        known = [field.name for field in dataclasses.fields(self)]
        for key in sorted(set(changes) - set(known)):
            guess = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {guess[0]!r}?" if guess else f"known: {', '.join(known)}"
            raise ElmoSettingsError(f"Unknown ELMo biLM setting {key!r}; {hint}")
        return dataclasses.replace(self, **changes)
