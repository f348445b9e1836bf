"""An LSTM layer with a projection and clipping, in TensorFlow's ``LSTMCell`` semantics.

Per step: ``z = x W_in + h W_rec + b`` split into gates ``i, j, f, o`` (TF order);
``c = sigmoid(f + 1) c + sigmoid(i) tanh(j)`` clipped to ``±cell_clip``;
``h = (sigmoid(o) tanh(c)) W_proj`` clipped to ``±proj_clip``. The ``+1`` on the forget gate is
added at run time, as TensorFlow does, so the stored bias is the file's bias bit for bit.
"""
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn


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
        self.reset_parameters()

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
    Returns the packed outputs ``(n_lstms, n_packed, projection_dim)`` and each row's final state.
    When gradients are needed, :class:`_PackedLstm` runs it with a hand-written backward through time.
    """
    first = lstms[0]
    w_input = torch.stack([lstm.w_input for lstm in lstms])
    w_hidden = torch.stack([lstm.w_hidden for lstm in lstms])
    w_proj = torch.stack([lstm.w_proj for lstm in lstms])
    bias = (torch.stack([lstm.bias for lstm in lstms]) + first._forget_offset).unsqueeze(1)
    clips = (first.cell_clip, first.proj_clip)
    weights = (x, w_input, bias, w_hidden, w_proj, h0, c0)
    if torch.is_grad_enabled() and any(t.requires_grad for t in weights):
        return _PackedLstm.apply(active, clips, *weights)
    return _run_steps(active, clips, *weights)


class _Saved:
    """Per packed row, what the backward pass needs of each step (filled by :func:`_run_steps`)."""

    def __init__(self, x: torch.Tensor, cell_dim: int, projection_dim: int):
        n_lstms, n_packed, _ = x.shape
        self.gates = x.new_empty(n_lstms, n_packed, 4 * cell_dim)  # sigmoid(i), tanh(j), sigmoid(f), sigmoid(o)
        self.c_prev = x.new_empty(n_lstms, n_packed, cell_dim)
        self.c_new = x.new_empty(n_lstms, n_packed, cell_dim)  # before clipping
        self.tanh_c = x.new_empty(n_lstms, n_packed, cell_dim)
        self.h_prev = x.new_empty(n_lstms, n_packed, projection_dim)
        self.h_new = x.new_empty(n_lstms, n_packed, projection_dim)  # before clipping
        self.m = x.new_empty(n_lstms, n_packed, cell_dim)  # sigmoid(o) * tanh(c), the projection's input


def _run_steps(
    active: List[int],
    clips: Tuple[float, float],
    x: torch.Tensor,
    w_input: torch.Tensor,
    bias: torch.Tensor,
    w_hidden: torch.Tensor,
    w_proj: torch.Tensor,
    h0: torch.Tensor,
    c0: torch.Tensor,
    saved: Optional[_Saved] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The forward recurrence; with ``saved``, also records each step's intermediate values there.

    The input product runs over blocks of about ``BLOCK_ROWS`` packed rows (large products, small enough
    to stay in cache); each step then does one batched product per matrix for all the LSTMs, over the
    rows still running.
    """
    cell_clip, proj_clip = clips
    h, c = h0, c0
    final_h: List[torch.Tensor] = []
    final_c: List[torch.Tensor] = []
    outputs: List[torch.Tensor] = []
    blocks = _blocks(active, BLOCK_ROWS)
    row = 0
    for sizes, x_block in zip(blocks, x.split([sum(b) for b in blocks], dim=1)):
        for n, step_in in zip(sizes, torch.baddbmm(bias, x_block, w_input).split(sizes, dim=1)):
            if n < h.shape[1]:
                final_h.append(h[:, n:])
                final_c.append(c[:, n:])
                h, c = h[:, :n], c[:, :n]
            i, j, f, o = torch.baddbmm(step_in, h, w_hidden).chunk(4, dim=2)
            i, j, f, o = torch.sigmoid(i), torch.tanh(j), torch.sigmoid(f), torch.sigmoid(o)
            c_new = f * c + i * j
            c_out = c_new.clamp(-cell_clip, cell_clip) if cell_clip else c_new
            tanh_c = torch.tanh(c_out)
            m = o * tanh_c
            h_new = torch.bmm(m, w_proj)
            h_out = h_new.clamp(-proj_clip, proj_clip) if proj_clip else h_new
            if saved is not None:
                rows = slice(row, row + n)
                saved.gates[:, rows] = torch.cat((i, j, f, o), dim=2)
                saved.c_prev[:, rows], saved.c_new[:, rows], saved.tanh_c[:, rows] = c, c_new, tanh_c
                saved.h_prev[:, rows], saved.h_new[:, rows], saved.m[:, rows] = h, h_new, m
            h, c = h_out, c_out
            outputs.append(h)
            row += n
    final_h.append(h)
    final_c.append(c)
    out = torch.cat(outputs, dim=1) if outputs else x.new_zeros(x.shape[0], 0, w_proj.shape[2])
    return out, torch.cat(final_h[::-1], dim=1), torch.cat(final_c[::-1], dim=1)


class _PackedLstm(torch.autograd.Function):
    """:func:`_run_steps` with its backward through time written out.

    Autograd would compute each step's weight gradients as a separate small product (as many rows
    as the step has); here the gate gradients of all steps are collected first and every weight
    gradient is one large product over all packed rows, which on a CPU is several times faster.
    """

    @staticmethod
    def forward(ctx, active, clips, x, w_input, bias, w_hidden, w_proj, h0, c0):  # type: ignore[override]
        saved = _Saved(x, w_hidden.shape[2] // 4, w_proj.shape[2])
        out, h_n, c_n = _run_steps(active, clips, x, w_input, bias, w_hidden, w_proj, h0, c0, saved)
        ctx.active, ctx.clips, ctx.saved = active, clips, saved
        ctx.save_for_backward(x, w_input, w_hidden, w_proj)
        return out, h_n, c_n

    @staticmethod
    def backward(ctx, d_out, d_h_n, d_c_n):  # type: ignore[override]
        x, w_input, w_hidden, w_proj = ctx.saved_tensors
        saved: _Saved = ctx.saved
        cell_clip, proj_clip = ctx.clips
        active: List[int] = ctx.active
        cell_dim = saved.c_new.shape[2]
        d_z = torch.empty_like(saved.gates)  # gradient of the pre-activation gates, per packed row
        d_h_new = torch.empty_like(saved.h_new)
        d_h = d_h_n.new_zeros(d_h_n.shape[0], 0, d_h_n.shape[2])  # carried to the step before, rows running then
        d_c = d_c_n.new_zeros(d_c_n.shape[0], 0, d_c_n.shape[2])
        end = saved.gates.shape[1]
        for n in reversed(active):
            rows = slice(end - n, end)
            end -= n
            # Rows whose last step this is take their gradient from the final state.
            d_h = torch.cat((d_h, d_h_n[:, d_h.shape[1] : n]), dim=1) + d_out[:, rows]
            d_c = torch.cat((d_c, d_c_n[:, d_c.shape[1] : n]), dim=1)
            if proj_clip:
                d_h = d_h * (saved.h_new[:, rows].abs() <= proj_clip)
            d_h_new[:, rows] = d_h
            d_m = torch.bmm(d_h, w_proj.transpose(1, 2))
            i, j, f, o = saved.gates[:, rows].split(cell_dim, dim=2)
            tanh_c = saved.tanh_c[:, rows]
            d_c = d_c + d_m * o * (1 - tanh_c * tanh_c)
            if cell_clip:
                d_c = d_c * (saved.c_new[:, rows].abs() <= cell_clip)
            d_z_rows = d_z[:, rows]
            d_z_rows[..., :cell_dim] = d_c * j * i * (1 - i)
            d_z_rows[..., cell_dim : 2 * cell_dim] = d_c * i * (1 - j * j)
            d_z_rows[..., 2 * cell_dim : 3 * cell_dim] = d_c * saved.c_prev[:, rows] * f * (1 - f)
            d_z_rows[..., 3 * cell_dim :] = d_m * tanh_c * o * (1 - o)
            d_h = torch.bmm(d_z_rows, w_hidden.transpose(1, 2))
            d_c = d_c * f
        # Rows that never ran (length 0) pass their final-state gradient straight to their start.
        d_h = torch.cat((d_h, d_h_n[:, d_h.shape[1] :]), dim=1)
        d_c = torch.cat((d_c, d_c_n[:, d_c.shape[1] :]), dim=1)
        d_x = torch.bmm(d_z, w_input.transpose(1, 2))
        d_w_input = torch.bmm(x.transpose(1, 2), d_z)
        d_bias = d_z.sum(dim=1, keepdim=True)
        d_w_hidden = torch.bmm(saved.h_prev.transpose(1, 2), d_z)
        d_w_proj = torch.bmm(saved.m.transpose(1, 2), d_h_new)
        return None, None, d_x, d_w_input, d_bias, d_w_hidden, d_w_proj, d_h, d_c


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
