"""An LSTM layer with a projection and clipping, in TensorFlow's ``LSTMCell`` semantics.

Per step: ``z = x W_in + h W_rec + b`` split into gates ``i, j, f, o`` (TF order);
``c = sigmoid(f + 1) c + sigmoid(i) tanh(j)`` clipped to ``±cell_clip``;
``h = (sigmoid(o) tanh(c)) W_proj`` clipped to ``±proj_clip``. The ``+1`` on the forget gate is
added at run time, as TensorFlow does, so the stored bias is the file's bias bit for bit.

``tanh(x)`` is computed as ``2 sigmoid(2x) - 1`` (equal up to float32 rounding): torch 2.13's CPU ``tanh`` was
measured 10x slower than its ``sigmoid`` (5 ns an element), and with ``j``'s weights and bias doubled when the
products are built (exact: a power of two) one ``sigmoid`` covers all four gates. The steps carry the cell state
doubled, ``2c`` (exact too), which is what ``tanh(c)`` needs: a step is then 12 tensor operations instead of 15, none
with a Python number to wrap, which matters where a step's rows are few (one sentence per call: 10 us of its 150).
"""
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from .precision import LowPrecisionLinear, Scratch, low_precision_linear, stacked_linear


# Packed rows per input product in :func:`run_packed`.
BLOCK_ROWS = 256
# Rows of the steps' inputs and gradients that a deferred weight gradient sums in one product (_PendingGradient).
GRADIENT_ROWS = 512


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
        forget = torch.tensor([0.0, 0.0, 1.0, 0.0]).repeat_interleave(cell_dim)  # per gate: i, j, f, o
        self.register_buffer("_forget_offset", forget, persistent=False)
        gate_scale = torch.tensor([1.0, 2.0, 1.0, 1.0]).repeat_interleave(cell_dim)  # j: tanh(j) = 2 sigmoid(2j) - 1
        self.register_buffer("_gate_scale", gate_scale, persistent=False)
        # Products at a reduced precision, by name ("input", "hidden", "projection"); see :meth:`set_precision`.
        self.low_precision: Dict[str, LowPrecisionLinear] = {}
        self.reset_parameters()

    def set_precision(self, precision: str, products: Sequence[str]) -> None:
        """Run ``products`` (of "input", "hidden", "projection") at ``precision`` from now on, the rest in fp32.

        The weights are converted here, once; call again after the weights change.
        """
        weights = {"input": self.w_input * self._gate_scale, "hidden": self.w_hidden * self._gate_scale, "projection": self.w_proj}
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
        out, h, c = run_packed(prepared_products([self], {}, 0), packing.pack(x, 1), packing.active, h0, c0)
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
        self.batch, self.steps, self.lengths = len(lengths_np), steps, lengths_np
        # (2, n_packed): each packed position's row and its step in that row, forward and backward.
        self.rows, self.times = rows, np.stack((t, lengths_np[rows] - 1 - t))
        self.positions = rows * steps + self.times  # in the flattened batch
        self.order = torch.from_numpy(order).to(device)
        self.unsort = torch.from_numpy(np.argsort(order, kind="stable")).to(device)
        self._index = torch.from_numpy(self.positions).to(device)

    def pack(self, x: torch.Tensor, directions: int) -> torch.Tensor:
        """``(batch, steps, dim)`` to ``(directions, n_packed, dim)``."""
        flat = x.reshape(self.batch * self.steps, x.shape[-1])
        return flat.index_select(0, self._index[:directions].reshape(-1)).view(directions, -1, x.shape[-1])

    def destinations(self, starts: np.ndarray, skip: int) -> np.ndarray:
        """Each packed position's token in a result where row ``r``'s tokens begin at ``starts[r]``, its first and
        last ``skip`` steps left out (-1: no place); ``(2, n_packed)``."""
        kept = (self.times >= skip) & (self.times < self.lengths[self.rows] - skip)
        return np.where(kept, starts[self.rows] + self.times - skip, -1)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """``(directions, n_packed, dim)`` to ``(batch, steps, directions * dim)``, zero past each row's end."""
        directions, _, dim = packed.shape
        out = LayerOutput(packed, 1, self.batch * self.steps, dim, directions)
        tokens = self.destinations(np.arange(self.batch) * self.steps, 0)[:directions]
        out.write(0, out.index(tokens), packed)
        return out.layers()[0].view(self.batch, self.steps, directions * dim)


class LayerOutput:
    """Layers ``(n_layers, n_tokens, directions * dim)`` filled by scattering packed rows into place.

    Each packed row is written once, straight to its place. One spare ``dim``-row past the layers takes the
    packed rows that have no place (a sentence's ``<S>`` and ``</S>``), so dropping them costs no pass of its own.
    ``zeros``: start from zeros, for layouts with rows no packed row fills (padding); a packed layout, where every
    token is written, starts uninitialised.
    """

    def __init__(self, like: torch.Tensor, n_layers: int, n_tokens: int, dim: int, directions: int = 2, zeros: bool = True):
        self.shape = (n_layers, n_tokens, directions * dim)
        self.directions = directions
        size = (n_layers * n_tokens * directions + 1, dim)
        self._rows = like.new_zeros(size) if zeros else like.new_empty(size)

    def index(self, tokens: np.ndarray) -> torch.Tensor:
        """Rows of the storage, ``(n_layers, directions * n_packed)``, for packed positions whose tokens are
        ``tokens`` ``(directions, n_packed)`` (-1: the spare row), layer by layer."""
        n_layers, n_tokens, _ = self.shape
        layer = np.arange(n_layers)[:, None, None] * n_tokens
        rows = (layer + tokens[None]) * self.directions + np.arange(self.directions)[None, :, None]
        spare = self._rows.shape[0] - 1
        return torch.from_numpy(np.where(tokens[None] >= 0, rows, spare).reshape(n_layers, -1)).to(self._rows.device)

    def write(self, layer: int, index: torch.Tensor, packed: torch.Tensor) -> None:
        """Put layer ``layer``'s ``packed`` ``(directions, n_packed, dim)`` at its row of :meth:`index`."""
        self._rows.index_copy_(0, index[layer], packed.reshape(-1, packed.shape[-1]))

    def layers(self) -> torch.Tensor:
        """The layers written so far (a view of the storage)."""
        return self._rows[:-1].view(self.shape)


class MixOutput:
    """``sum_k weights[k] * layer_k`` ``(n_tokens, directions * dim)``, accumulated as each layer is written, so the
    layers themselves are never stored. Same interface as :class:`LayerOutput`. A layer of weight 0 is not read; the
    first layer of non-zero weight sets each token's row and the later ones add to it (the biLM writes its layers in
    order), so ``"top"`` is one copy of the top layer."""

    def __init__(self, like: torch.Tensor, weights: torch.Tensor, n_tokens: int, dim: int, directions: int = 2):
        self._base = LayerOutput(like, 1, n_tokens, dim, directions, zeros=False)
        self.weights = weights.tolist()
        self._first = next((k for k, w in enumerate(self.weights) if w != 0), 0)

    def index(self, tokens: np.ndarray) -> torch.Tensor:
        return self._base.index(tokens)[0]

    def write(self, layer: int, index: torch.Tensor, packed: torch.Tensor) -> None:
        weight = self.weights[layer]
        if layer < self._first or (weight == 0 and layer > self._first):
            return
        rows = packed.reshape(-1, packed.shape[-1])
        if layer == self._first:
            self._base._rows.index_copy_(0, index, rows if weight == 1 else rows * weight)
        else:
            self._base._rows.index_add_(0, index, rows, alpha=weight)

    def layers(self) -> torch.Tensor:
        """The mix ``(n_tokens, directions * dim)`` (a view of the storage)."""
        return self._base.layers()[0]


def run_packed(
    products: "StackedProducts",
    x: torch.Tensor,
    active: List[int],
    h0: torch.Tensor,
    c0: torch.Tensor,
    pause: Optional[Callable[[], None]] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run several LSTMs of the same shape and clipping side by side (their ``products``), one per leading index of
    ``x``.

    ``x``: packed inputs ``(n_lstms, n_packed, input_dim)`` (see :class:`Packing`); ``h0``, ``c0``:
    ``(n_lstms, rows, dim)`` in packing order.
    The input product runs over blocks of about ``BLOCK_ROWS`` packed rows (large products, small enough
    to stay in cache); each step then does one batched product per matrix for all the LSTMs, over the
    rows still running.
    ``pause``: called before each step, where the run may give way to other work (a service's newly arrived
    requests) and go on afterwards unchanged.
    Returns the packed outputs ``(n_lstms, n_packed, projection_dim)`` and each row's final state.
    """
    first = products.lstms[0]
    cell_clip, proj_clip = 2.0 * (first.cell_clip or 0.0), first.proj_clip
    h, c2 = h0, c0 * 2.0  # c2: the cell state doubled
    scratch: Scratch = {}  # the reduced-precision products' buffers, shared by this call's steps
    final_h: List[torch.Tensor] = []
    final_c2: List[torch.Tensor] = []
    outputs: List[torch.Tensor] = []
    blocks = _blocks(active, BLOCK_ROWS)
    for sizes, x_block in zip(blocks, x.split([sum(b) for b in blocks], dim=1)):
        for n, step_in in zip(sizes, products.inputs(x_block, scratch).split(sizes, dim=1)):
            if pause is not None:
                pause()
            if n < h.shape[1]:
                final_h.append(h[:, n:])
                final_c2.append(c2[:, n:])
                h, c2 = h[:, :n], c2[:, :n]
            i, j, f, o = products.recurrent(step_in, h, scratch).sigmoid_().chunk(4, dim=2)  # j: sigmoid(2j)
            # 2c = f 2c + 2 i tanh(j) = f 2c + 4 i sigmoid(2j) - 2 i
            c2 = torch.mul(f, c2).addcmul_(i, j, value=4.0).sub_(i, alpha=2.0)
            if cell_clip:
                c2 = c2.clamp(-cell_clip, cell_clip)
            h = products.project(torch.addcmul(torch.neg(o), o, torch.sigmoid(c2), value=2.0), scratch)  # o tanh(c)
            if proj_clip:
                h = h.clamp(-proj_clip, proj_clip)
            outputs.append(h)
    final_h.append(h)
    final_c2.append(c2)
    out = torch.cat(outputs, dim=1) if outputs else x.new_zeros(len(products.lstms), 0, first.projection_dim)
    return out, torch.cat(final_h[::-1], dim=1), torch.cat(final_c2[::-1], dim=1) * 0.5


class _PendingGradient:
    """A deferred product's weight gradient: the steps' (input, output gradient) pairs, summed into it by one product
    each time they hold :data:`GRADIENT_ROWS` rows, and at the end; few large products, in bounded memory."""

    def __init__(self) -> None:
        self.pairs: List[Tuple[torch.Tensor, torch.Tensor]] = []
        self.rows = 0
        self.total: Optional[torch.Tensor] = None

    def add(self, x: torch.Tensor, grad: torch.Tensor) -> None:
        self.pairs.append((x, grad))
        self.rows += x.shape[1]
        if self.rows >= GRADIENT_ROWS:
            self._sum()

    def take(self) -> Optional[torch.Tensor]:
        """The gradient summed so far (float32), and start again (a graph kept by ``retain_graph`` adds anew)."""
        self._sum()
        total, self.total = self.total, None
        return total

    def _sum(self) -> None:
        if not self.pairs:
            return
        grads = torch.cat([g for _, g in self.pairs], dim=1)
        inputs = torch.cat([x for x, _ in self.pairs], dim=1).to(grads.dtype)  # bf16 under autocast, as the step ran
        part = torch.bmm(inputs.transpose(1, 2), grads).float()
        self.total = part if self.total is None else self.total.add_(part)
        self.pairs, self.rows = [], 0


class _StepWeights(torch.autograd.Function):
    """Stacked weights, unchanged, for the :class:`_StepProduct` of every LSTM step. Autograd runs its backward
    after every step's, and adds the gradient the steps left in their :class:`_PendingGradient`: a few products over
    many steps' rows, where autograd alone would run one small weight-gradient product per step."""

    @staticmethod
    def forward(ctx: Any, weights: torch.Tensor, pending: _PendingGradient) -> torch.Tensor:
        ctx.pending = pending
        return weights.view_as(weights)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
        total = ctx.pending.take()
        return (grad if total is None else grad + total.to(grad.dtype)), None


class _StepProduct(torch.autograd.Function):
    """``x @ weights`` (batched) for one LSTM step; its backward gives ``x`` its gradient and leaves the pair
    (``x``, output gradient) to the weights' :class:`_PendingGradient`."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weights: torch.Tensor, pending: _PendingGradient) -> torch.Tensor:
        ctx.save_for_backward(x, weights)
        ctx.pending = pending
        return torch.bmm(x, weights)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], None, None]:
        x, weights = ctx.saved_tensors
        ctx.pending.add(x, grad)
        if not ctx.needs_input_grad[0]:
            return None, None, None
        return torch.bmm(grad, weights.transpose(1, 2).to(grad.dtype)), None, None  # autograd casts it to x's type


class StackedProducts:
    """The three matrix products of several LSTMs side by side, each in fp32 or at the LSTMs' reduced precision.

    fp32 products run as one batched product over the stacked weights; reduced ones as one product per LSTM.
    Built from the LSTMs' weights as they are: :func:`prepared_products` keeps one until the biLM is told they
    changed (:meth:`~spacy_elmo.model.bilm.BiLm.weights_changed`). While the weights learn (``learning``), each
    step's recurrent and projection products leave their weight gradients to a few products over many steps
    (:class:`_StepWeights`): a step of `original`'s shape ran 1.22x as fast (BENCHMARKS.md, "The AllenNLP drop-in").
    """

    def __init__(self, lstms: Sequence[LstmWithProjection], learning: bool = False):
        self.lstms = tuple(lstms)
        self.low = {name: [lstm.low_precision[name] for lstm in lstms] for name in lstms[0].low_precision}
        scale = lstms[0]._gate_scale
        self.w = {
            name: torch.stack([getattr(lstm, attr) for lstm in lstms])
            for name, attr in (("input", "w_input"), ("hidden", "w_hidden"), ("projection", "w_proj"))
            if name not in self.low
        }
        for name in {"input", "hidden"} & set(self.w):
            self.w[name] = self.w[name] * scale
        self.bias = ((torch.stack([lstm.bias for lstm in lstms]) + lstms[0]._forget_offset) * scale).unsqueeze(1)
        # Each deferred product's weight gradient, filled by the backward pass.
        self.pending: Dict[str, _PendingGradient] = {}
        if learning:
            for name in {"hidden", "projection"} & set(self.w):
                self.pending[name] = _PendingGradient()
                self.w[name] = _StepWeights.apply(self.w[name], self.pending[name])

    def inputs(self, x: torch.Tensor, scratch: Scratch) -> torch.Tensor:
        """Gate inputs with the bias (and the forget gate's +1): ``bias + x W_in``."""
        if "input" in self.low:
            return stacked_linear(self.low["input"], x, self.bias, scratch)
        return torch.baddbmm(self.bias, x, self.w["input"])

    def recurrent(self, step_in: torch.Tensor, h: torch.Tensor, scratch: Scratch) -> torch.Tensor:
        """``step_in + h W_rec``."""
        if "hidden" in self.low:
            return stacked_linear(self.low["hidden"], h, step_in, scratch)
        if "hidden" in self.pending:
            return step_in + _StepProduct.apply(h, self.w["hidden"], self.pending["hidden"])
        return torch.baddbmm(step_in, h, self.w["hidden"])

    def project(self, cell_out: torch.Tensor, scratch: Scratch) -> torch.Tensor:
        """``cell_out W_proj``."""
        if "projection" in self.low:
            return stacked_linear(self.low["projection"], cell_out, scratch=scratch)
        if "projection" in self.pending:
            return _StepProduct.apply(cell_out, self.w["projection"], self.pending["projection"])
        return torch.bmm(cell_out, self.w["projection"])


def prepared_products(lstms: Sequence[LstmWithProjection], kept: Dict[int, StackedProducts], key: int) -> StackedProducts:
    """The products of ``lstms``: ``kept[key]``, else built anew and kept there (the owner empties ``kept`` when
    the weights or their precision change).

    While the weights learn (autograd on, weights requiring grad) they are stacked per call and not kept, so that
    gradients reach each LSTM's own parameters. Otherwise they are stacked once, as plain tensors outside autograd
    and inference mode, usable in any later call.
    """
    if torch.is_grad_enabled() and any(p.requires_grad for lstm in lstms for p in lstm.parameters()):
        return StackedProducts(lstms, learning=True)
    products = kept.get(key)
    if products is None:
        with torch.inference_mode(False), torch.no_grad():
            products = kept[key] = StackedProducts(lstms)
    return products


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
