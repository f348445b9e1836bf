"""Many token sequences through an :class:`ElmoEncoder` in capped batches, their layers packed on one token axis."""
from typing import List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from .options import ElmoOptions
from .batching import length_batches
from .bilm import BiLmState
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
        lengths = np.array([len(s) for s in segments], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        layers = self.encoder.layer_output(int(offsets[-1])) if mix is None else None
        mixed = None if mix is None else self.encoder.bilm.w_proj.new_zeros(int(offsets[-1]), self.options.output_dim)
        for batch in length_batches(lengths.tolist(), max_batch_tokens, keep_order=self.stateful):
            start = self.carried.start(self.encoder, len(batch)) if self.stateful else None
            sentences = [segments[i] for i in batch]
            if mix is None:
                final = self.encoder.encode(sentences, start, layers, offsets[batch])
            else:
                final = self._encode_mixed(sentences, start, mix, mixed, offsets[batch])
            if self.stateful:
                self.carried.update(final)
        return layers.layers() if mix is None else mixed

    def _encode_mixed(
        self, sentences: List[Sequence[str]], start: Optional[BiLmState], mix: torch.Tensor, out: torch.Tensor,
        starts: np.ndarray,
    ) -> BiLmState:
        """One batch's layers summed with the weights ``mix`` into ``out`` ``(total_tokens, dim)``, sentence ``i``
        from row ``starts[i]`` on; returns the batch's final state."""
        lengths = np.array([len(s) for s in sentences], dtype=np.int64)
        within = np.concatenate(([0], np.cumsum(lengths)[:-1]))  # each sentence's first token in the batch
        layers = self.encoder.layer_output(int(lengths.sum()))
        final = self.encoder.encode(sentences, start, layers, within)
        rows = torch.from_numpy(np.repeat(starts - within, lengths) + np.arange(int(lengths.sum()))).to(out.device)
        out.index_copy_(0, rows, torch.tensordot(mix.to(out.dtype), layers.layers(), dims=1))
        return final

    def per_sentence(self, segments: Sequence[Sequence[str]], max_batch_tokens: int) -> List[torch.Tensor]:
        """Each segment's layers, ``(n_layers + 1, len(segment), dim)``, in the order given (views of one tensor)."""
        return list(self.forward(segments, max_batch_tokens).split([len(s) for s in segments], dim=1))
