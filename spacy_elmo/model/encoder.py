"""Sentences in, ELMo layers out: tokens to char ids, the token layer (with its cache), the biLM, batching."""
import itertools
import warnings
from typing import Callable, Iterable, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from .bilm import PRECISION_PARTS, BiLm, BiLmState
from ..errors import ElmoSettingsError, TokenTruncationWarning
from .chars import TokenBatch, first_truncated, n_bytes
from .lstm import LayerOutput, Packing
from .precision import DEFAULT_PRECISION, check_precision
from .token_ids import TokenIds
from .token_cache import TokenCache, check_cache_size

# A short, plain text whose final LSTM state is the "warm" starting state (see ``ElmoEncoder``).
WARM_UP_TEXT = (
    "This is a short text .",
    "It is used to put the language model in a typical state before it reads a sentence .",
    "The weather was fine and people went about their day .",
    "Then they came home , had dinner and talked about what had happened .",
)

INITIAL_STATES = ("auto", "zeros", "warm")
DEFAULT_INITIAL_STATE = "auto"

# Key of ``options.json`` that names the start state a model was trained from (see ``ElmoEncoder.start_state``).
TRAINING_START_KEY = "training_initial_state"


def check_initial_state(initial_state: str, name: str = "initial_state") -> None:
    """Refuse a start state that is none of :data:`INITIAL_STATES` (``name``: the setting, for the message)."""
    if initial_state not in INITIAL_STATES:
        raise ElmoSettingsError(f"{name} must be one of {', '.join(INITIAL_STATES)}, found {initial_state!r}")


class ElmoEncoder(nn.Module):
    """Runs a :class:`BiLm` over tokenised sentences and returns their layers without ``<S>``/``</S>``.

    ``initial_state`` says where every sentence's LSTMs start when no carried state is given:
    ``"zeros"`` (the reference right after ``reset_states()``), ``"warm"`` (the state left by
    :data:`WARM_UP_TEXT`, the same for every sentence) or ``"auto"`` (the default): the start the model was
    trained from (see :meth:`start_state`). Either way a sentence's vectors depend on
    nothing but the sentence.

    It starts with no token cache and fp32 products; :class:`~spacy_elmo.runtime.ElmoRuntime` gives it the
    settings of a :class:`~spacy_elmo.runtime.BiLmSettings` (:meth:`set_cache_size`, :meth:`set_precision`:
    ``"fp32"``, ``"bf16"``, ``"int8"``; ``"fp16"`` on a GPU; see :mod:`.precision`). Moving the encoder keeps its
    precision.

    Stateless calls are safe from several threads at once (the token cache locks itself; the warm state is the
    same whoever computes it); carried state is the caller's (:class:`CarriedState` is not shared safely).
    """

    def __init__(self, bilm: BiLm):
        super().__init__()
        self.bilm = bilm
        self.initial_state = DEFAULT_INITIAL_STATE
        self.cache: Optional[TokenCache] = None
        self._warm: Optional[BiLmState] = None
        self._truncation_reported = False
        self._token_ids = TokenIds(bilm.options)

    @property
    def options(self):
        return self.bilm.options

    @property
    def device(self) -> torch.device:
        return self.bilm.w_proj.device

    @property
    def precision(self) -> str:
        return self.bilm.precision

    def set_precision(self, precision: str) -> None:
        """Run the biLM's products at ``precision`` (one of :data:`~.precision.PRECISIONS`; a reduced one checked
        against the device, which every device runs fp32 on) and forget what fp32 gave."""
        if precision != DEFAULT_PRECISION:
            check_precision(precision, self.device)
        self.bilm.set_precision(precision, PRECISION_PARTS.get(precision, ()))
        self._forget_derived()

    def set_cache_size(self, cache_size: int) -> None:
        """Keep up to ``cache_size`` token vectors (0: no cache); an existing cache is emptied."""
        check_cache_size(cache_size)
        self.cache = TokenCache(cache_size, self.options.projection_dim, device=self.device) if cache_size > 0 else None

    def _apply(self, fn, *args, **kwargs):  # moving the module moves the cache and forgets the warm state
        result = super()._apply(fn, *args, **kwargs)
        if self.cache is not None:
            self.cache.vectors = fn(self.cache.vectors)
        if self.bilm.precision != DEFAULT_PRECISION:
            check_precision(self.bilm.precision, self.device)
            self.bilm.refresh_precision()  # the converted weights follow the parameters
        self._warm = None
        return result

    def weights_changed(self) -> None:
        """Forget everything derived from the weights (call after loading or training them)."""
        self.bilm.weights_changed()
        self._forget_derived()

    def _forget_derived(self) -> None:
        """Empty the token cache and forget the warm state: both were computed from the weights as they were."""
        if self.cache is not None:
            self.cache.clear()
        self._warm = None

    def token_vectors(self, types: Sequence[str]) -> torch.Tensor:
        """Context-free vectors of distinct tokens, ``(len(types), projection_dim)``."""
        if self.cache is None or (torch.is_grad_enabled() and self.bilm.w_proj.requires_grad):
            return self._token_layer(types)
        return self.cache.vectors_of(types, self._token_layer)

    def _token_layer(self, types: Sequence[str]) -> torch.Tensor:
        """The token layer of ``types``, from their character ids (and word ids, for models with words)."""
        self.report_truncation(types)
        char_ids, word_ids = self._token_ids(types)
        words = None if word_ids is None else torch.from_numpy(word_ids).to(self.device)
        return self.bilm.token_layer(torch.from_numpy(char_ids).to(self.device), words)

    def report_truncation(self, tokens: Iterable[str]) -> None:
        """Warn, in one line and once per encoder, of the first token longer than the model reads (a limit in bytes,
        not characters: docs/limits.md, "Long tokens"); models that read a character table are not cut."""
        if self._truncation_reported or self.options.char_vocabulary is not None:
            return
        token = first_truncated(tokens, self.options.max_characters_per_token)
        if token is None:
            return
        self._truncation_reported = True
        shown = token if len(token) <= 30 else token[:30] + "..."
        warnings.warn(
            f"the token {shown!r} is {n_bytes(token)} bytes long in UTF-8, and this ELMo model reads the first "
            f"{self.options.max_token_units} bytes of a token (its max_characters_per_token); the rest is ignored "
            f"(said once per model; docs/limits.md, \"Long tokens\")", TokenTruncationWarning, stacklevel=2,
        )

    def fill_cache(self, words: Iterable[str], batch_size: int = 4096) -> None:
        """Pre-fill the token cache from a word list, most frequent first, until it is full."""
        if self.cache is None:
            raise ElmoSettingsError("This encoder has no token cache; create it with cache_size > 0")
        words = iter(words)
        with torch.inference_mode():
            while not self.cache.full and (batch := list(itertools.islice(words, batch_size))):
                self.token_vectors(batch)

    def start_state(self, rows: int, stateful: bool = False) -> BiLmState:
        """The state every sentence starts from when none is carried over (``stateful``: new rows of that mode).

        ``"auto"`` is the start the model was trained from: "zeros" if ``options.json`` says so (models made by
        ``pretrain``), else "warm" (the published models were trained with state carried across batches); in the
        stateful mode "zeros", exactly as the references do."""
        auto = "zeros" if stateful or self.options.extra.get(TRAINING_START_KEY) == "zeros" else "warm"
        if (auto if self.initial_state == "auto" else self.initial_state) == "zeros":
            return BiLmState.zeros(self.options, rows, self.bilm.w_proj)
        warm = self._warm  # read once: another thread may reset it; two threads computing it get the same state
        if warm is None:
            with torch.no_grad():
                state = BiLmState.zeros(self.options, 1, self.bilm.w_proj)
                for sentence in WARM_UP_TEXT:
                    _, _, state = self.forward([sentence.split()], state)
            warm = self._warm = state.detach()
        return warm.expand(rows)

    def forward(
        self, sentences: Sequence[Sequence[str]], state: Optional[BiLmState] = None
    ) -> Tuple[torch.Tensor, torch.Tensor, BiLmState]:
        """One biLM pass over a batch.

        Returns ``layers`` ``(n_layers + 1, batch, max_len, 2 * projection_dim)`` (zero past each
        sentence's end), the token ``mask`` ``(batch, max_len)`` and each row's final state.
        """
        lengths = np.array([len(s) for s in sentences], dtype=np.int64)
        width = int(lengths.max()) if len(lengths) else 0
        out = LayerOutput(self.bilm.w_proj, self.options.n_output_layers, len(sentences) * width, self.options.projection_dim)
        final = self.encode(sentences, state, out, np.arange(len(sentences)) * width)
        mask = torch.from_numpy(np.arange(width)[None, :] < lengths[:, None]).to(self.device)
        layers = out.layers().view(self.options.n_output_layers, len(sentences), width, self.options.output_dim)
        return layers, mask, final

    def encode(
        self,
        segments: Sequence[Sequence[str]],
        state: Optional[BiLmState],
        out: LayerOutput,
        starts: np.ndarray,
        pause: Optional[Callable[[], None]] = None,
    ) -> BiLmState:
        """One biLM pass over a batch, segment ``i``'s layers written into ``out`` from token ``starts[i]`` on, its
        ``<S>`` and ``</S>`` left out. ``state``: each row's start (None: :meth:`start_state`); ``pause``: called
        before each LSTM step, where the pass may give way to other work. Returns each row's final state.

        The token vectors go straight from the table of distinct tokens to the packed LSTM inputs, both readings
        of every segment, and each layer straight from the packed rows to ``out``: no padded copy in between.
        """
        batch = TokenBatch(segments)
        if state is None:
            state = self.start_state(batch.batch_size)
        table = self.token_vectors(batch.types)
        packing = Packing(batch.lengths, batch.index.shape[1], self.device)
        types = torch.from_numpy(batch.index.reshape(-1)[packing.positions].reshape(-1)).to(self.device)
        inputs = table.index_select(0, types).view(2, -1, table.shape[1])
        return self.bilm.run(inputs, packing, state, out, packing.destinations(starts, 1), pause)
