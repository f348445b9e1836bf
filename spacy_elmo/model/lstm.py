"""An LSTM layer with a projection and clipping, in TensorFlow's ``LSTMCell`` semantics.

Per step: ``z = x W_in + h W_rec + b`` split into gates ``i, j, f, o`` (TF order);
``c = sigmoid(f + 1) c + sigmoid(i) tanh(j)`` clipped to ``±cell_clip``;
``h = (sigmoid(o) tanh(c)) W_proj`` clipped to ``±proj_clip``. The ``+1`` on the forget gate is
added at run time, as TensorFlow does, so the stored bias is the file's bias bit for bit.
"""
from typing import List, Sequence, Tuple

import numpy as np
import torch
from torch import nn


class LstmWithProjection(nn.Module):
    """One direction of one biLM layer, run over a batch sorted by decreasing length."""

    def __init__(self, input_dim: int, cell_dim: int, projection_dim: int, cell_clip: float, proj_clip: float):
        super().__init__()
        self.input_dim = input_dim
        self.cell_dim = cell_dim
        self.projection_dim = projection_dim
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.w_input = nn.Parameter(torch.empty(input_dim, 4 * cell_dim))
        self.w_hidden = nn.Parameter(torch.empty(projection_dim, 4 * cell_dim))
        self.bias = nn.Parameter(torch.zeros(4 * cell_dim))
        self.w_proj = nn.Parameter(torch.empty(cell_dim, projection_dim))
        forget = torch.zeros(4 * cell_dim)
        forget[2 * cell_dim : 3 * cell_dim] = 1.0
        self.register_buffer("_forget_offset", forget, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        fan_in = self.input_dim + self.projection_dim
        for w, fan in ((self.w_input, fan_in), (self.w_hidden, fan_in), (self.w_proj, self.cell_dim)):
            nn.init.uniform_(w, -((3.0 / fan) ** 0.5), (3.0 / fan) ** 0.5)
        nn.init.zeros_(self.bias)

    def forward(
        self, x: torch.Tensor, lengths: Sequence[int], h0: torch.Tensor, c0: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run over ``x`` ``(batch, time, input_dim)`` whose rows are sorted by decreasing ``lengths``.

        Returns the outputs ``(batch, time, projection_dim)`` (zero past each row's end) and each
        row's state after its last real step. Rows that have ended drop out of the batch, so no
        work is spent on padding.
        """
        batch, steps = x.shape[0], x.shape[1]
        bias = self.bias + self._forget_offset
        gates_in = torch.addmm(bias, x.reshape(batch * steps, -1), self.w_input).view(batch, steps, -1)
        active = _active_rows(lengths, steps)
        h, c = h0, c0
        final_h: List[torch.Tensor] = []
        final_c: List[torch.Tensor] = []
        outputs: List[torch.Tensor] = []
        for t, step_in in enumerate(gates_in.unbind(1)):
            n = active[t]
            if n == 0:
                break
            if n < h.shape[0]:
                final_h.append(h[n:])
                final_c.append(c[n:])
                h, c = h[:n], c[:n]
            z = torch.addmm(step_in[:n], h, self.w_hidden)
            i, j, f, o = z.chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(j)
            if self.cell_clip:
                c = c.clamp(-self.cell_clip, self.cell_clip)
            h = torch.mm(torch.sigmoid(o) * torch.tanh(c), self.w_proj)
            if self.proj_clip:
                h = h.clamp(-self.proj_clip, self.proj_clip)
            outputs.append(h)
        final_h.append(h)
        final_c.append(c)
        out = _unpack(outputs, active, batch, steps, self.projection_dim, x)
        return out, torch.cat(final_h[::-1]), torch.cat(final_c[::-1])


def _active_rows(lengths: Sequence[int], steps: int) -> List[int]:
    """For each time step, how many leading rows (sorted by decreasing length) are still running."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return (np.arange(steps)[:, None] < lengths[None, :]).sum(axis=1).tolist()


def _unpack(
    outputs: List[torch.Tensor], active: List[int], batch: int, steps: int, dim: int, like: torch.Tensor
) -> torch.Tensor:
    """Place per-step outputs of shrinking batches into a zero-padded ``(batch, steps, dim)`` tensor."""
    if not outputs:
        return like.new_zeros(batch, steps, dim)
    flat = torch.cat(outputs)
    positions = torch.cat(
        [torch.arange(n, device=like.device) * steps + t for t, n in enumerate(active[: len(outputs)])]
    )
    padded = like.new_zeros(batch * steps, dim)
    return padded.index_copy(0, positions, flat).view(batch, steps, dim)
