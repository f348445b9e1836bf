"""Token sequences through an :class:`ElmoEncoder`, batch by batch, their layers packed on one token axis."""
from typing import Callable, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from .options import ElmoOptions
from .batch_cost import length_batches
from .carried_state import CarriedState
from .encoder import ElmoEncoder
from .lstm import LayerOutput, MixOutput


class SegmentEncoder(nn.Module):
    """Runs an :class:`ElmoEncoder` over many segments and packs the results along one token axis.

    Given ``max_batch_tokens``, the segments are one call's, cut into batches by :func:`length_batches` (longest
    first, that many padded tokens at most); without it they are one batch already planned (the runtime's request
    batcher plans every batch it runs), run as given. With ``stateful`` the batches keep the segments' order and
    each batch row starts from the state the same row ended in on the previous batch, as in AllenNLP.
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
        self,
        segments: Sequence[Sequence[str]],
        max_batch_tokens: Optional[int] = None,
        mix: Optional[torch.Tensor] = None,
        pause: Optional[Callable[[], None]] = None,
    ) -> torch.Tensor:
        """All segments' layers, ``(n_layers + 1, total_tokens, dim)``, segment after segment.

        With ``mix`` (one weight per layer) the layers are summed with these weights as each is produced and
        ``(total_tokens, dim)`` comes back, so the layers themselves are never stored. Every batch writes its
        tokens' rows straight into the one output. ``pause`` is called between the steps of each batch (see
        :meth:`ElmoEncoder.encode`). In the stateful mode the carried state changes only when the whole call has
        run, so an interrupted call leaves it as it was.
        """
        lengths = np.array([len(s) for s in segments], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        out = self._output(int(offsets[-1]), mix)
        carried = self.carried.copy() if self.stateful else None
        if max_batch_tokens is None:
            batches = [list(range(len(segments)))]
        else:
            batches = length_batches(lengths.tolist(), max_batch_tokens, keep_order=self.stateful)
        for batch in batches:
            start = carried.start(self.encoder, len(batch)) if carried is not None else None
            final = self.encoder.encode([segments[i] for i in batch], start, out, offsets[batch], pause)
            if carried is not None:
                carried.update(final)
        if carried is not None:
            self.carried = carried
        return out.layers()

    def _output(self, n_tokens: int, mix: Optional[torch.Tensor]) -> Union[LayerOutput, MixOutput]:
        """Where the layers of ``n_tokens`` packed tokens go: every layer, or their mix with the weights ``mix``."""
        options, like = self.options, self.encoder.bilm.w_proj
        if mix is None:
            return LayerOutput(like, options.n_output_layers, n_tokens, options.projection_dim, zeros=False)
        return MixOutput(like, mix, n_tokens, options.projection_dim)
