"""The pretraining objective: forward and backward next-word prediction over the biLM's top layer.

Both directions share the token layer and one softmax (as in the paper), torch's adaptive softmax (Grave et al.
2017); their LSTMs are separate. Why adaptive, and the zero start state: docs/pretraining.md, "Objective".
"""
from typing import NamedTuple, Sequence

import numpy as np
import torch
from torch import nn

from ..model.bilm import BiLm
from ..model.chars import TokenBatch, tokens_to_ids
from ..model.options import ElmoOptions
from .vocab import Vocab


class LmLoss(NamedTuple):
    """Summed negative log-likelihoods (nats) of each direction, the number of targets per direction, and how many
    targets fell in each of the softmax's tail clusters."""

    forward_nll: torch.Tensor
    backward_nll: torch.Tensor
    n_targets: int
    tail_targets: torch.Tensor

    @property
    def mean(self) -> torch.Tensor:
        """The training loss: mean NLL over both directions' targets."""
        return (self.forward_nll + self.backward_nll) / (2 * self.n_targets)


class BiLanguageModel(nn.Module):
    """A :class:`BiLm` plus the shared adaptive softmax over ``vocab``."""

    def __init__(self, options: ElmoOptions, vocab: Vocab, cutoffs: Sequence[int], div_value: float, dropout: float):
        super().__init__()
        self.vocab = vocab
        self.bilm = BiLm(options)
        # A vocabulary smaller than the first cutoff gets a near-full softmax (one tiny tail cluster).
        cutoffs = [c for c in cutoffs if c < len(vocab) - 1] or [max(1, len(vocab) - 2)]
        self.softmax = nn.AdaptiveLogSoftmaxWithLoss(options.projection_dim, len(vocab), cutoffs, div_value)
        self.dropout = nn.Dropout(dropout)

    def forward(self, sentences: Sequence[Sequence[str]]) -> LmLoss:
        options = self.bilm.options
        batch = TokenBatch(sentences)
        char_ids = torch.from_numpy(tokens_to_ids(batch.types, options.max_characters_per_token))
        table = self.bilm.token_layer(char_ids.to(self.bilm.w_proj.device))
        table = torch.cat((table, table.new_zeros(1, table.shape[1])))
        tokens = self.dropout(table[torch.from_numpy(batch.index).to(table.device)])
        layers, _ = self.bilm(tokens, batch.lengths.tolist())
        top = self.dropout(layers[-1])
        p = options.projection_dim
        inputs, targets, n = _prediction_pairs(top[..., :p], top[..., p:], batch, self.vocab)
        log_probs = self.softmax(inputs, targets).output.float()  # bf16 under autocast: sum (and log) in fp32
        # Every tail cluster takes part in every step, adding 0 where no target falls in it, so that DDP needs no
        # search for unused parameters; the trainer drops those clusters' zero gradients (Trainer.train_step).
        idle = sum(cluster(inputs[:0]).sum() for cluster in self.softmax.tail)
        return LmLoss(-log_probs[:n].sum() + idle, -log_probs[n:].sum(), n, self._tail_targets(targets))

    def _tail_targets(self, targets: torch.Tensor) -> torch.Tensor:
        """How many of ``targets`` fall in each tail cluster of the softmax."""
        bounds = self.softmax.cutoffs
        return torch.stack([((targets >= low) & (targets < high)).sum() for low, high in zip(bounds, bounds[1:])])


def _prediction_pairs(forward: torch.Tensor, backward: torch.Tensor, batch: TokenBatch, vocab: Vocab):
    """Rows of the top layer with the word each must predict: the next word going forward, the previous going back."""
    word_ids = np.asarray(vocab.encode(batch.types) + [0], dtype=np.int64)[batch.index]  # (B, T)
    has_next = np.arange(batch.index.shape[1])[None, :] < (batch.lengths[:, None] - 1)  # positions 0 .. len-2
    rows_fw = torch.from_numpy(has_next).to(forward.device)
    rows_bw = torch.from_numpy(np.roll(has_next, 1, axis=1)).to(forward.device)  # positions 1 .. len-1
    target_fw = torch.from_numpy(word_ids[:, 1:][has_next[:, :-1]])
    target_bw = torch.from_numpy(word_ids[:, :-1][has_next[:, :-1]])
    inputs = torch.cat((forward[rows_fw], backward[rows_bw]))
    targets = torch.cat((target_fw, target_bw)).to(forward.device)
    return inputs, targets, int(target_fw.numel())
