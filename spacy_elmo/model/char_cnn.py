"""The character CNN: char embeddings, convolutions of several widths, max over positions, activation."""
from typing import List, Sequence, Tuple

import torch
from torch import nn

from .chars import PAD_CHAR
from .precision import LowPrecisionLinear, low_precision_linear


class CharCNN(nn.Module):
    """Maps ``(n_tokens, max_chars)`` character ids to ``(n_tokens, sum of channels)`` features.

    Each filter width runs as one matrix product over all windows of a chunk of tokens. Positions
    past a token's end hold only the padding character, so every window made of padding alone
    gives the same value; computing the windows up to the first such window gives the same
    maximum as all ``max_chars`` positions. Tokens are therefore sorted by length and each chunk
    is cut to the positions that can matter. The result is that of the full-width convolution.
    ``pad_char``: the id that fills positions past a token's end (a table's own id for models with
    a character table).
    """

    def __init__(
        self,
        filters: Sequence[Tuple[int, int]],
        n_characters: int = 262,
        embedding_dim: int = 16,
        max_chars: int = 50,
        activation: str = "relu",
        chunk_size: int = 256,
        pad_char: int = PAD_CHAR,
    ):
        super().__init__()
        self.pad_char = pad_char
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
        # Per filter width at a reduced precision: windows ``(n, dim * width)`` @ ``(dim * width, channels)``.
        self.low_precision: List[LowPrecisionLinear] = []
        self.reset_parameters()

    def set_precision(self, precision: str) -> None:
        """Run the convolutions' products at ``precision`` from now on (weights converted here, once)."""
        self.low_precision = [
            low_precision_linear(weight.view(weight.shape[0], -1).t(), None, precision) for weight in self.weights
        ]

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

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        n_tokens = char_ids.shape[0]
        if n_tokens == 0:
            return char_ids.new_zeros((0, self.output_dim), dtype=self.embedding.weight.dtype)
        lengths = (char_ids != self.pad_char).sum(dim=1)
        order = torch.argsort(lengths)
        sorted_lengths = lengths[order].tolist()
        pieces = []
        for start in range(0, n_tokens, self.chunk_size):
            end = min(start + self.chunk_size, n_tokens)
            pieces.append(self._convolve(char_ids[order[start:end]], sorted_lengths[end - 1]))
        features = torch.cat(pieces)
        out = features.new_empty(features.shape).index_copy(0, order, features) + torch.cat(list(self.biases))
        return torch.relu(out) if self.activation == "relu" else torch.tanh(out)

    def _convolve(self, char_ids: torch.Tensor, longest: int) -> torch.Tensor:
        """Max over window positions of every filter (no bias) for tokens of at most ``longest`` real ids."""
        n = char_ids.shape[0]
        x = self.embedding(char_ids[:, : min(self.max_chars, longest + self.max_width)])  # (n, positions, dim)
        maxima = []
        for k, weight in enumerate(self.weights):
            channels, dim, width = weight.shape
            # Windows starting at 0..longest: the last one (if it fits) is padding only.
            windows = x[:, : min(self.max_chars, longest + width)].unfold(1, width, 1)  # (n, starts, dim, width)
            starts = windows.shape[1]
            flat = windows.reshape(n * starts, dim * width)
            if self.low_precision:
                conv = self.low_precision[k](flat)
            else:
                conv = torch.mm(flat, weight.view(channels, dim * width).t())
            maxima.append(conv.view(n, starts, channels).amax(dim=1))
        return torch.cat(maxima, dim=1)
