"""The bidirectional language model: token layer, then separate forward and backward LSTM stacks."""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from ..options import ElmoOptions
from .char_cnn import CharCNN
from .highway import Highway
from .lstm import LstmWithProjection


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
        n = options.n_layers
        return cls(
            h=like.new_zeros(n, 2, rows, options.projection_dim),
            c=like.new_zeros(n, 2, rows, options.lstm_dim),
        )

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
            n_characters=262,
            embedding_dim=options.char_embedding_dim,
            max_chars=options.max_characters_per_token,
            activation=options.activation,
        )
        self.highway = Highway(options.n_filters, options.n_highway)
        self.w_proj = nn.Parameter(torch.empty(options.n_filters, options.projection_dim))
        self.b_proj = nn.Parameter(torch.zeros(options.projection_dim))
        nn.init.normal_(self.w_proj, 0.0, (1.0 / options.n_filters) ** 0.5)
        p, h = options.projection_dim, options.lstm_dim

        def stack() -> nn.ModuleList:
            return nn.ModuleList(
                LstmWithProjection(p, h, p, options.cell_clip, options.proj_clip) for _ in range(options.n_layers)
            )

        self.forward_lstms = stack()
        self.backward_lstms = stack()

    def token_layer(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Context-free token vectors ``(n_tokens, projection_dim)`` from ``(n_tokens, max_chars)`` ids."""
        x = self.highway(self.char_cnn(char_ids))
        return torch.addmm(self.b_proj, x, self.w_proj)

    def forward(
        self, tokens: torch.Tensor, lengths: Sequence[int], state: Optional[BiLmState] = None
    ) -> Tuple[List[torch.Tensor], BiLmState]:
        """Run both LSTM stacks over ``tokens`` ``(batch, time, projection_dim)``.

        ``lengths`` count the boundary tokens; ``state`` gives each row's starting state (zeros if
        None). Returns the layers and each row's final state (after ``</S>`` going forward, after
        ``<S>`` going backward).
        """
        batch, steps, _ = tokens.shape
        if state is None:
            state = BiLmState.zeros(self.options, batch, tokens)
        lengths_np = np.asarray(lengths, dtype=np.int64)
        order_np = np.argsort(-lengths_np, kind="stable")
        sorted_lengths = lengths_np[order_np].tolist()
        order = torch.from_numpy(order_np).to(tokens.device)
        x = tokens.index_select(0, order)
        start = state.select(order)
        mask = (torch.arange(steps, device=tokens.device)[None, :] < torch.tensor(sorted_lengths, device=tokens.device)[:, None])
        x = x * mask.unsqueeze(-1).to(x.dtype)
        reverse = _reverse_index(sorted_lengths, steps, tokens.device)
        directions = []
        final_h, final_c = [], []
        for d, lstms in enumerate((self.forward_lstms, self.backward_lstms)):
            inputs = x if d == 0 else _flip(x, reverse)
            outputs, hs, cs = [], [], []
            for k, lstm in enumerate(lstms):
                out, h_n, c_n = lstm(inputs, sorted_lengths, start.h[k, d], start.c[k, d])
                if k > 0 and self.options.use_skip_connections:
                    out = out + inputs
                outputs.append(out if d == 0 else _flip(out, reverse))
                hs.append(h_n)
                cs.append(c_n)
                inputs = out
            directions.append(outputs)
            final_h.append(torch.stack(hs))
            final_c.append(torch.stack(cs))
        layers = [torch.cat((x, x), dim=-1)]
        layers += [torch.cat((fw, bw), dim=-1) for fw, bw in zip(*directions)]
        unsort = torch.from_numpy(np.argsort(order_np, kind="stable")).to(tokens.device)
        layers = [layer.index_select(0, unsort) for layer in layers]
        final = BiLmState(torch.stack(final_h, dim=1), torch.stack(final_c, dim=1)).select(unsort)
        return layers, final


def _reverse_index(lengths: Sequence[int], steps: int, device: torch.device) -> torch.Tensor:
    """Per row, the time index that reverses the row's first ``length`` positions and keeps the rest."""
    t = np.arange(steps)[None, :]
    lengths_np = np.asarray(lengths, dtype=np.int64)[:, None]
    index = np.where(t < lengths_np, lengths_np - 1 - t, t)
    return torch.from_numpy(index).to(device)


def _flip(x: torch.Tensor, reverse: torch.Tensor) -> torch.Tensor:
    return x.gather(1, reverse.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
