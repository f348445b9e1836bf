"""Token sequences through an :class:`ElmoEncoder`, batch by batch, their layers packed on one token axis."""
from typing import Callable, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from .options import ElmoOptions
from .bilm import BiLmState
from .encoder import ElmoEncoder
from .lstm import LayerOutput, MixOutput


class SegmentEncoder(nn.Module):
    """Runs an :class:`ElmoEncoder` over a batch of segments (planned by the runtime's request batcher) and packs
    the results along one token axis. It carries nothing from batch to batch: the stateful mode's state is the
    runtime's, which gives each batch the state its rows start from and keeps the state they end in."""

    def __init__(self, encoder: ElmoEncoder):
        super().__init__()
        self.encoder = encoder

    @property
    def options(self) -> ElmoOptions:
        return self.encoder.options

    def forward(
        self,
        segments: Sequence[Sequence[str]],
        initial: Optional[BiLmState] = None,
        mix: Optional[torch.Tensor] = None,
        pause: Optional[Callable[[], None]] = None,
    ) -> Tuple[torch.Tensor, BiLmState]:
        """The segments' layers, ``(n_layers + 1, total_tokens, dim)``, segment after segment, from one biLM batch
        whose rows start from ``initial`` (None: the initial state), and each row's final state.

        With ``mix`` (one weight per layer) the layers are summed with these weights as each is produced and
        ``(total_tokens, dim)`` comes back, so the layers themselves are never stored. The batch writes its tokens'
        rows straight into the output. ``pause`` is called between its steps (see :meth:`ElmoEncoder.encode`).
        """
        starts = np.concatenate(([0], np.cumsum([len(s) for s in segments], dtype=np.int64)))
        n, like, dim = int(starts[-1]), self.encoder.bilm.w_proj, self.options.projection_dim
        out = LayerOutput(like, self.options.n_output_layers, n, dim, zeros=False) if mix is None else MixOutput(like, mix, n, dim)
        final = self.encoder.encode(segments, initial, out, starts[:-1], pause)
        return out.layers(), final
