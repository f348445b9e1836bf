"""Many token sequences through an :class:`ElmoEncoder` in capped batches, their layers packed on one token axis."""
from typing import List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from .options import ElmoOptions
from .batching import length_batches
from .carried_state import CarriedState
from .encoder import ElmoEncoder


class BatchEncoder(nn.Module):
    """Runs an :class:`ElmoEncoder` over many segments and packs the results along one token axis.

    Batches are formed by :func:`length_batches` (sorted by length, ``max_batch_tokens`` padded
    tokens at most). With ``stateful`` the batches keep the segments' order instead and each
    batch row starts from the state the same row ended in on the previous batch, as in AllenNLP.
    """

    def __init__(self, encoder: ElmoEncoder, stateful: bool = False):
        super().__init__()
        self.encoder = encoder
        self.stateful = stateful
        self.carried = CarriedState()

    @property
    def options(self) -> ElmoOptions:
        return self.encoder.options

    def forward(
        self, segments: Sequence[Sequence[str]], max_batch_tokens: int, mix: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """All segments' layers, ``(n_layers + 1, total_tokens, dim)``, segment after segment.

        With ``mix`` (one weight per layer) the layers are summed with these weights batch by
        batch and ``(total_tokens, dim)`` comes back, so the full layers never exist at once.
        """
        lengths = [len(s) for s in segments]
        offsets = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64))).tolist()
        shape = (offsets[-1], self.options.output_dim)
        if mix is None:
            shape = (self.options.n_output_layers,) + shape
        out = self.encoder.bilm.w_proj.new_zeros(shape)
        for batch in length_batches(lengths, max_batch_tokens, keep_order=self.stateful):
            start = self.carried.start(self.encoder, len(batch)) if self.stateful else None
            layers, _, final = self.encoder([segments[i] for i in batch], start)
            if self.stateful:
                self.carried.update(final)
            if mix is not None:
                layers = torch.tensordot(mix.to(layers.dtype), layers, dims=1)
            for row, i in enumerate(batch):
                out[..., offsets[i] : offsets[i + 1], :] = layers[..., row, : lengths[i], :]
        return out

    def per_sentence(self, segments: Sequence[Sequence[str]], max_batch_tokens: int) -> List[torch.Tensor]:
        """Each segment's layers, ``(n_layers + 1, len(segment), dim)``, in the order given (views of one tensor)."""
        return list(self.forward(segments, max_batch_tokens).split([len(s) for s in segments], dim=1))
