"""The character CNN: char embeddings, convolutions of several widths, max over positions, activation."""
from typing import Sequence, Tuple

import torch
from torch import nn

from .chars import PAD_CHAR


class CharCNN(nn.Module):
    """Maps ``(n_tokens, max_chars)`` character ids to ``(n_tokens, sum of channels)`` features.

    All filter widths run as one matrix product over windows of the widest filter (narrower
    filters get zero weights beyond their width, and their windows that would run past the end
    are masked out). Positions past a token's end hold only the padding character, so every
    window made of padding alone gives the same value; computing windows up to one such window
    gives the same maximum as all ``max_chars`` positions. Tokens are therefore sorted by length
    and each chunk is cut to the positions that can matter. The result is exactly that of the
    full-width convolution.
    """

    def __init__(
        self,
        filters: Sequence[Tuple[int, int]],
        n_characters: int = 262,
        embedding_dim: int = 16,
        max_chars: int = 50,
        activation: str = "relu",
        chunk_size: int = 2048,
    ):
        super().__init__()
        self.filters = [(int(w), int(n)) for w, n in filters]
        self.max_chars = max_chars
        self.max_width = max(w for w, _ in self.filters)
        self.activation = activation
        self.chunk_size = chunk_size
        self.embedding = nn.Embedding(n_characters, embedding_dim, padding_idx=0)
        self.weights = nn.ParameterList(
            nn.Parameter(torch.empty(n, embedding_dim, w)) for w, n in self.filters
        )
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(n)) for _, n in self.filters)
        widths = torch.cat([torch.full((n,), w) for w, n in self.filters])
        self.register_buffer("_widths", widths, persistent=False)
        self.reset_parameters()

    @property
    def output_dim(self) -> int:
        return sum(n for _, n in self.filters)

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.embedding.weight, -1.0, 1.0)
        with torch.no_grad():
            self.embedding.weight[0].zero_()
        for weight in self.weights:
            fan_in = weight.shape[1] * weight.shape[2]
            nn.init.normal_(weight, 0.0, (1.0 / fan_in) ** 0.5)
        for bias in self.biases:
            nn.init.zeros_(bias)

    def _stacked_weight(self) -> torch.Tensor:
        """All filters as one ``(max_width * dim, channels)`` matrix, zero beyond each filter's width."""
        dim = self.embedding.embedding_dim
        blocks = []
        for weight in self.weights:
            n, _, w = weight.shape
            padded = nn.functional.pad(weight, (0, self.max_width - w))  # (n, dim, max_width)
            blocks.append(padded.permute(2, 1, 0).reshape(self.max_width * dim, n))
        return torch.cat(blocks, dim=1)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        n_tokens = char_ids.shape[0]
        if n_tokens == 0:
            return char_ids.new_zeros((0, self.output_dim), dtype=self.embedding.weight.dtype)
        weight = self._stacked_weight()
        bias = torch.cat(list(self.biases))
        lengths = (char_ids != PAD_CHAR).sum(dim=1)
        order = torch.argsort(lengths)
        pieces = []
        for start in range(0, n_tokens, self.chunk_size):
            rows = order[start : start + self.chunk_size]
            used = min(self.max_chars, int(lengths[rows].max()) + self.max_width)
            pieces.append(self._convolve(char_ids[rows, :used], weight))
        features = torch.cat(pieces)
        out = features.new_empty(features.shape).index_copy(0, order, features) + bias
        return torch.relu(out) if self.activation == "relu" else torch.tanh(out)

    def _convolve(self, char_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Max over valid window positions of all filters, for ids cut to ``used`` positions."""
        n, used = char_ids.shape
        x = self.embedding(char_ids)  # (n, used, dim)
        x = nn.functional.pad(x, (0, 0, 0, self.max_width - 1))
        windows = x.unfold(1, self.max_width, 1)  # (n, used, dim, max_width)
        windows = windows.transpose(2, 3).reshape(n, used, -1)
        conv = torch.matmul(windows, weight)  # (n, used, channels)
        starts = torch.arange(used, device=conv.device).unsqueeze(1)
        invalid = starts > (used - self._widths).unsqueeze(0)  # window runs past the last position
        conv = conv.masked_fill(invalid, float("-inf"))
        return conv.max(dim=1).values
