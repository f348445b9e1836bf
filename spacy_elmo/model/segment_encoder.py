"""Token sequences through an :class:`ElmoEncoder`, batch by batch, their layers packed on one token axis."""
from typing import Callable, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from .options import ElmoOptions
from .bilm import BiLmState
from .carried_state import CarriedState
from .encoder import ElmoEncoder
from .lstm import LayerOutput, MixOutput


class SegmentEncoder(nn.Module):
    """Runs an :class:`ElmoEncoder` over a batch of segments (planned by the runtime's request batcher) and packs
    the results along one token axis.

    With ``stateful`` each batch row starts from the state the same row ended in on the batch before, as in
    AllenNLP (a batch run with ``carry=False`` starts from the initial state and leaves that state as it is).
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
        mix: Optional[torch.Tensor] = None,
        pause: Optional[Callable[[], None]] = None,
        carry: Optional[bool] = None,
    ) -> torch.Tensor:
        """The segments' layers, ``(n_layers + 1, total_tokens, dim)``, segment after segment, from one biLM batch.

        With ``mix`` (one weight per layer) the layers are summed with these weights as each is produced and
        ``(total_tokens, dim)`` comes back, so the layers themselves are never stored. The batch writes its tokens'
        rows straight into the output. ``pause`` is called between its steps (see :meth:`ElmoEncoder.encode`). In
        the stateful mode (``carry``: this batch's, by default the module's) the carried state changes only when the
        batch has run, so an interrupted one leaves it as it was.
        """
        carry = self.stateful if carry is None else carry
        layers, final = self.run(segments, self.carried.start(self.encoder, len(segments)) if carry else None, mix, pause)
        if carry:
            self.carried.update(final)
        return layers

    def start_state(self, rows: int) -> BiLmState:
        """The state the rows of a batch start from: the carried one in the stateful mode, else the initial one."""
        return self.carried.start(self.encoder, rows) if self.stateful else self.encoder.start_state(rows)

    def run(
        self,
        segments: Sequence[Sequence[str]],
        initial: Optional[BiLmState],
        mix: Optional[torch.Tensor] = None,
        pause: Optional[Callable[[], None]] = None,
    ) -> Tuple[torch.Tensor, BiLmState]:
        """:meth:`forward`'s layers from one biLM batch whose rows start from ``initial`` (None: the initial state),
        and each row's final state; nothing carried changes."""
        starts = np.concatenate(([0], np.cumsum([len(s) for s in segments], dtype=np.int64)))
        n, like, dim = int(starts[-1]), self.encoder.bilm.w_proj, self.options.projection_dim
        out = LayerOutput(like, self.options.n_output_layers, n, dim, zeros=False) if mix is None else MixOutput(like, mix, n, dim)
        final = self.encoder.encode(segments, initial, out, starts[:-1], pause)
        return out.layers(), final

