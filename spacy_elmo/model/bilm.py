"""The bidirectional language model: token layer, then separate forward and backward LSTM stacks."""
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import torch
from torch import nn

from ..errors import ElmoSettingsError
from .options import ElmoOptions
from .char_cnn import CharCNN
from .highway import Highway
from .lstm import LayerOutput, LstmWithProjection, Packing, StackedProducts, prepared_products, run_packed
from .precision import DEFAULT_PRECISION, LowPrecisionLinear, low_precision_linear
from .token_ids import TokenIds


# The parts of the biLM whose matrix products can run at a reduced precision.
PARTS = ("char_cnn", "highway", "projection", "lstm_input", "lstm_hidden", "lstm_projection")
# The parts each precision runs, chosen by measurement (BENCHMARKS.md, "Reduced precision"): int8 leaves the token
# projection in fp32, where per-row int8 costs the most fidelity (its input's rows span a wide range) and the least
# time (one small product per word type, skipped for cached words).
PRECISION_PARTS = {
    "int8": ("char_cnn", "highway", "lstm_input", "lstm_hidden", "lstm_projection"),
    "bf16": PARTS,
    "fp16": PARTS,
}


@dataclass
class BiLmState:
    """LSTM states of every layer and direction, one row per sentence.

    ``h``: ``(n_layers, 2, rows, projection_dim)``; ``c``: ``(n_layers, 2, rows, cell_dim)``;
    direction 0 is forward, 1 backward.
    """

    h: torch.Tensor
    c: torch.Tensor

    @classmethod
    def zeros(cls, options: ElmoOptions, rows: int, like: torch.Tensor) -> "BiLmState":
        shape = (options.n_layers, 2, rows)
        return cls(like.new_zeros(*shape, options.projection_dim), like.new_zeros(*shape, options.lstm_dim))

    @property
    def rows(self) -> int:
        return self.h.shape[2]

    def select(self, index: torch.Tensor) -> "BiLmState":
        return BiLmState(self.h.index_select(2, index), self.c.index_select(2, index))

    def expand(self, rows: int) -> "BiLmState":
        """A single-row state repeated for ``rows`` sentences."""
        return BiLmState(self.h.expand(-1, -1, rows, -1), self.c.expand(-1, -1, rows, -1))

    def detach(self) -> "BiLmState":
        return BiLmState(self.h.detach(), self.c.detach())


class BiLm(nn.Module):
    """ELMo's biLM. Returns all ``n_layers + 1`` layers, each ``(batch, time, 2 * projection_dim)``.

    Layer 0 is the context-free token vector repeated for both halves; layer ``k`` is
    ``[forward_k, backward_k]``. Inputs are token vectors from :meth:`token_layer` with the
    begin/end-of-sentence tokens already in place, so the positions include them.
    """

    def __init__(self, options: ElmoOptions):
        super().__init__()
        self.options = options
        self.char_cnn = CharCNN(
            options.filters,
            n_characters=options.n_characters if options.char_vocabulary is not None else 262,
            embedding_dim=options.char_embedding_dim,
            max_chars=options.max_characters_per_token,
            activation=options.activation,
            pad_char=TokenIds(options).pad_char,
        )
        self.highway = Highway(options.n_filters, options.n_highway)
        # Models with word vectors (ELMoForManyLangs) project [word vector, char features] together.
        self.word_embedding = (
            nn.Embedding(len(options.word_embedding["words"]), options.word_dim) if options.word_dim else None
        )
        width = options.word_dim + options.n_filters
        self.w_proj = nn.Parameter(torch.empty(width, options.projection_dim))
        self.b_proj = nn.Parameter(torch.zeros(options.projection_dim))
        nn.init.normal_(self.w_proj, 0.0, (1.0 / width) ** 0.5)
        p, h = options.projection_dim, options.lstm_dim

        def stack() -> nn.ModuleList:
            return nn.ModuleList(
                LstmWithProjection(p, h, p, options.cell_clip, options.proj_clip) for _ in range(options.n_layers)
            )

        self.forward_lstms = stack()
        self.backward_lstms = stack()
        self.precision = DEFAULT_PRECISION
        self.precision_parts: Tuple[str, ...] = ()  # the parts at ``precision``
        self._low_proj: Optional[LowPrecisionLinear] = None
        self.weights_dtype = "float32"  # of the file the weights came from (set by weights.load_bilm)
        self._products: Dict[int, StackedProducts] = {}  # per layer, kept until the weights change
        self.register_load_state_dict_post_hook(_weights_loaded)

    def _apply(self, fn, *args, **kwargs):  # moved weights: the kept products would hold the old ones
        self._products = {}
        return super()._apply(fn, *args, **kwargs)

    def weights_changed(self) -> None:
        """Forget what was derived from the weights (the LSTMs' stacked products, the reduced-precision copies).
        Call after changing them in place or replacing them (an optimizer step, ``.data``); loading a state dict
        and moving the module do it themselves."""
        self._products = {}
        if self.precision != DEFAULT_PRECISION:
            self.refresh_precision()

    def set_precision(self, precision: str, parts: Sequence[str] = ()) -> None:
        """Run ``parts`` (see :data:`PARTS`) at ``precision`` and the rest in fp32; ``"fp32"`` undoes it.

        The weights are converted here, once, for inference: call again after they change. Checking that
        the device can run ``precision`` is the caller's (:func:`~spacy_elmo.model.precision.check_precision`).
        """
        unknown = set(parts) - set(PARTS)
        if unknown:
            raise ElmoSettingsError(f"unknown biLM parts {sorted(unknown)}; known: {', '.join(PARTS)}")
        chosen = () if precision == DEFAULT_PRECISION else tuple(parts)
        self.precision, self.precision_parts = precision, chosen
        self._products = {}  # built from the LSTMs' products at the precision before
        for name, part in (("char_cnn", self.char_cnn), ("highway", self.highway)):
            part.low_precision = []
            if name in chosen:
                part.set_precision(precision)
        kept = precision if "projection" in chosen else DEFAULT_PRECISION  # int8 keeps it in (row-exact) fp32
        self._low_proj = low_precision_linear(self.w_proj, self.b_proj, kept) if chosen else None
        lstm_products = [name for name in ("input", "hidden", "projection") if f"lstm_{name}" in chosen]
        for lstm in (*self.forward_lstms, *self.backward_lstms):
            lstm.set_precision(precision, lstm_products)

    def refresh_precision(self) -> None:
        """Convert the weights again at the precision set (after they changed or moved)."""
        self.set_precision(self.precision, self.precision_parts)

    def token_layer(self, char_ids: torch.Tensor, word_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Context-free token vectors ``(n_tokens, projection_dim)`` from ``(n_tokens, max_chars)`` ids
        (and ``(n_tokens,)`` word ids for a model with word vectors; see :class:`TokenIds`)."""
        x = self.highway(self.char_cnn(char_ids))
        if self.word_embedding is not None:
            x = torch.cat((self.word_embedding(word_ids), x), dim=1)
        return torch.addmm(self.b_proj, x, self.w_proj) if self._low_proj is None else self._low_proj(x)

    def forward(
        self, tokens: torch.Tensor, lengths: Sequence[int], state: Optional[BiLmState] = None
    ) -> Tuple[List[torch.Tensor], BiLmState]:
        """Run both LSTM stacks over ``tokens`` ``(batch, time, projection_dim)``.

        ``lengths`` count the boundary tokens; ``state`` gives each row's starting state (zeros if
        None). Returns the layers and each row's final state (after ``</S>`` going forward, after
        ``<S>`` going backward).
        """
        batch, steps, dim = tokens.shape
        packing = Packing(lengths, steps, tokens.device)
        out = LayerOutput(tokens, self.options.n_layers + 1, batch * steps, dim)
        final = self.run(packing.pack(tokens, 2), packing, state, out, packing.destinations(np.arange(batch) * steps, 0))
        return list(out.layers().view(-1, batch, steps, 2 * dim).unbind(0)), final

    def run(
        self,
        inputs: torch.Tensor,
        packing: Packing,
        state: Optional[BiLmState],
        out: LayerOutput,
        tokens: np.ndarray,
        pause: Optional[Callable[[], None]] = None,
    ) -> BiLmState:
        """Both LSTM stacks over packed ``inputs`` ``(2, n_packed, projection_dim)`` (each row read forward and
        backward, see :class:`Packing`), every layer written into ``out`` at ``tokens`` (each packed position's
        token there, -1: none; from :meth:`Packing.destinations`); ``pause`` called before each LSTM step (see
        :func:`run_packed`). Returns each row's final state."""
        if state is None:
            state = BiLmState.zeros(self.options, packing.batch, inputs)
        start = state.select(packing.order)
        index = out.index(tokens)
        out.write(0, index, inputs)
        final_h, final_c = [], []
        for k, lstms in enumerate(zip(self.forward_lstms, self.backward_lstms)):
            products = prepared_products(lstms, self._products, k)
            layer, h_n, c_n = run_packed(products, inputs, packing.active, start.h[k], start.c[k], pause)
            if k > 0 and self.options.use_skip_connections:
                layer.add_(inputs)  # ``layer`` is the LSTM's own new output: adding in place changes nothing else
            out.write(k + 1, index, layer)
            final_h.append(h_n)
            final_c.append(c_n)
            inputs = layer
        return BiLmState(torch.stack(final_h), torch.stack(final_c)).select(packing.unsort)


def _weights_loaded(bilm: BiLm, _keys) -> None:
    """After a state dict is loaded into ``bilm`` (a module-level function: a module with it pickles)."""
    bilm.weights_changed()
