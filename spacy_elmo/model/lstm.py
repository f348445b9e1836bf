"""An LSTM layer with a projection and clipping, in TensorFlow's ``LSTMCell`` semantics.

Per step: ``z = x W_in + h W_rec + b`` split into gates ``i, j, f, o`` (TF order);
``c = sigmoid(f + 1) c + sigmoid(i) tanh(j)`` clipped to ``±cell_clip``;
``h = (sigmoid(o) tanh(c)) W_proj`` clipped to ``±proj_clip``. The ``+1`` on the forget gate is
added at run time, as TensorFlow does, so the stored bias is the file's bias bit for bit.
"""
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from .precision import LowPrecisionLinear, low_precision_linear, stacked_linear


# Packed rows per input product in :func:`run_packed`.
BLOCK_ROWS = 256


class LstmWithProjection(nn.Module):
    """One direction of one biLM layer."""

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
        # Products at a reduced precision, by name ("input", "hidden", "projection"); see :meth:`set_precision`.
        self.low_precision: Dict[str, LowPrecisionLinear] = {}
        self.reset_parameters()

    def set_precision(self, precision: str, products: Sequence[str]) -> None:
        """Run ``products`` (of "input", "hidden", "projection") at ``precision`` from now on, the rest in fp32.

        The weights are converted here, once; call again after the weights change.
        """
        weights = {"input": self.w_input, "hidden": self.w_hidden, "projection": self.w_proj}
        self.low_precision = {name: low_precision_linear(weights[name], None, precision) for name in products}

    def reset_parameters(self) -> None:
        fan_in = self.input_dim + self.projection_dim
        for w, fan in ((self.w_input, fan_in), (self.w_hidden, fan_in), (self.w_proj, self.cell_dim)):
            nn.init.uniform_(w, -((3.0 / fan) ** 0.5), (3.0 / fan) ** 0.5)
        nn.init.zeros_(self.bias)

    def forward(
        self, x: torch.Tensor, lengths: Sequence[int], h0: torch.Tensor, c0: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run over ``x`` ``(batch, time, input_dim)`` whose rows have the given ``lengths``.

        Returns the outputs ``(batch, time, projection_dim)`` (zero past each row's end) and each
        row's state after its last real step.
        """
        packing = Packing(lengths, x.shape[1], x.device)
        h0, c0 = h0.index_select(0, packing.order)[None], c0.index_select(0, packing.order)[None]
        out, h, c = run_packed([self], packing.pack(x, 1), packing.active, h0, c0)
        return packing.unpack(out), h[0].index_select(0, packing.unsort), c[0].index_select(0, packing.unsort)


class Packing:
    """Where each real position of a padded ``(batch, steps)`` batch goes when packed step by step.

    Rows are taken longest first (``order``; ``unsort`` undoes it), so step ``t`` of the packed
    sequence holds the ``active[t]`` rows still running and a recurrent layer shrinks its batch as
    rows end. Direction 0 reads each row forward, direction 1 reads its real positions backward.
    """

    def __init__(self, lengths: Sequence[int], steps: int, device: torch.device):
        lengths_np = np.asarray(lengths, dtype=np.int64)
        order = np.argsort(-lengths_np, kind="stable")
        t, r = np.nonzero(np.arange(steps)[:, None] < lengths_np[order][None, :])  # step-major, longest rows first
        self.active: List[int] = [int(n) for n in np.bincount(t, minlength=steps) if n > 0]
        rows = order[r]
        index = np.stack((rows * steps + t, rows * steps + lengths_np[rows] - 1 - t))
        self.batch, self.steps = len(lengths_np), steps
        self.order = torch.from_numpy(order).to(device)
        self.unsort = torch.from_numpy(np.argsort(order, kind="stable")).to(device)
        self._index = torch.from_numpy(index).to(device)  # (2, n_packed) positions in the flattened batch

    def pack(self, x: torch.Tensor, directions: int) -> torch.Tensor:
        """``(batch, steps, dim)`` to ``(directions, n_packed, dim)``."""
        flat = x.reshape(self.batch * self.steps, x.shape[-1])
        return flat.index_select(0, self._index[:directions].reshape(-1)).view(directions, -1, x.shape[-1])

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """``(directions, n_packed, dim)`` to ``(batch, steps, directions * dim)``, zero past each row's end."""
        directions, n, dim = packed.shape
        index = self._index[:directions] * directions + torch.arange(directions, device=packed.device)[:, None]
        flat = packed.new_zeros(self.batch * self.steps * directions, dim)
        flat = flat.index_copy(0, index.reshape(-1), packed.reshape(directions * n, dim))
        return flat.view(self.batch, self.steps, directions * dim)


def run_packed(
    lstms: Sequence[LstmWithProjection], x: torch.Tensor, active: List[int], h0: torch.Tensor, c0: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run several LSTMs of the same shape and clipping side by side, one per leading index of ``x``.

    ``x``: packed inputs ``(n_lstms, n_packed, input_dim)`` (see :class:`Packing`); ``h0``, ``c0``:
    ``(n_lstms, rows, dim)`` in packing order.
    The input product runs over blocks of about ``BLOCK_ROWS`` packed rows (large products, small enough
    to stay in cache); each step then does one batched product per matrix for all the LSTMs, over the
    rows still running.
    Returns the packed outputs ``(n_lstms, n_packed, projection_dim)`` and each row's final state.
    """
    first = lstms[0]
    products = StackedProducts(lstms)
    h, c = h0, c0
    final_h: List[torch.Tensor] = []
    final_c: List[torch.Tensor] = []
    outputs: List[torch.Tensor] = []
    blocks = _blocks(active, BLOCK_ROWS)
    for sizes, x_block in zip(blocks, x.split([sum(b) for b in blocks], dim=1)):
        for n, step_in in zip(sizes, products.inputs(x_block).split(sizes, dim=1)):
            if n < h.shape[1]:
                final_h.append(h[:, n:])
                final_c.append(c[:, n:])
                h, c = h[:, :n], c[:, :n]
            i, j, f, o = products.recurrent(step_in, h).chunk(4, dim=2)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(j)
            if first.cell_clip:
                c = c.clamp(-first.cell_clip, first.cell_clip)
            h = products.project(torch.sigmoid(o) * torch.tanh(c))
            if first.proj_clip:
                h = h.clamp(-first.proj_clip, first.proj_clip)
            outputs.append(h)
    final_h.append(h)
    final_c.append(c)
    out = torch.cat(outputs, dim=1) if outputs else x.new_zeros(len(lstms), 0, first.projection_dim)
    return out, torch.cat(final_h[::-1], dim=1), torch.cat(final_c[::-1], dim=1)


class StackedProducts:
    """The three matrix products of several LSTMs side by side, each in fp32 or at the LSTMs' reduced precision.

    fp32 products run as one batched product over the stacked weights; reduced ones as one product per LSTM.
    """

    def __init__(self, lstms: Sequence[LstmWithProjection]):
        self.low = {name: [lstm.low_precision[name] for lstm in lstms] for name in lstms[0].low_precision}
        self.w = {
            name: torch.stack([getattr(lstm, attr) for lstm in lstms])
            for name, attr in (("input", "w_input"), ("hidden", "w_hidden"), ("projection", "w_proj"))
            if name not in self.low
        }
        self.bias = (torch.stack([lstm.bias for lstm in lstms]) + lstms[0]._forget_offset).unsqueeze(1)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """Gate inputs with the bias (and the forget gate's +1): ``bias + x W_in``."""
        if "input" in self.low:
            return stacked_linear(self.low["input"], x, self.bias)
        return torch.baddbmm(self.bias, x, self.w["input"])

    def recurrent(self, step_in: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """``step_in + h W_rec``."""
        if "hidden" in self.low:
            return stacked_linear(self.low["hidden"], h, step_in)
        return torch.baddbmm(step_in, h, self.w["hidden"])

    def project(self, cell_out: torch.Tensor) -> torch.Tensor:
        """``cell_out W_proj``."""
        if "projection" in self.low:
            return stacked_linear(self.low["projection"], cell_out)
        return torch.bmm(cell_out, self.w["projection"])


def _blocks(active: List[int], max_rows: int) -> List[List[int]]:
    """Consecutive steps grouped so that each group holds at most ``max_rows`` rows (or one step)."""
    blocks: List[List[int]] = []
    rows = max_rows
    for n in active:
        if rows + n > max_rows:
            blocks.append([])
            rows = 0
        blocks[-1].append(n)
        rows += n
    return blocks
