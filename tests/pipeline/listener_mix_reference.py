"""A torch scalar mix, ``gamma * sum_j softmax(s)_j * h_j`` (Peters et al. 2018, eq. 1), as bilm-tf computes it.

The tests' reference for the listener's mix (``spacy_elmo.pipeline.listener_mix``), written apart from the
package's (``spacy_elmo.model.learned_mix``): a stacked tensor and a masked layer norm with bilm-tf's eps.
"""
from typing import Optional, Sequence

import torch
from torch import nn


class ScalarMix(nn.Module):
    """Mixes ``n_layers`` tensors of equal shape with softmax-normalised weights and a scale ``gamma``.

    ``initial_weights`` are the pre-softmax scalars (default zeros: the plain mean). With
    ``trainable=False`` weights and gamma are fixed. ``layer_norm`` normalises each layer over its
    unpadded positions (``mask``) before mixing, as bilm-tf does (eps 1e-12, no affine).
    """

    def __init__(
        self,
        n_layers: int,
        initial_weights: Optional[Sequence[float]] = None,
        gamma: float = 1.0,
        trainable: bool = True,
        layer_norm: bool = False,
    ):
        super().__init__()
        weights = torch.zeros(n_layers) if initial_weights is None else torch.tensor(list(initial_weights), dtype=torch.float32)
        if weights.shape != (n_layers,):
            raise ValueError(f"ScalarMix: {n_layers} layers but {weights.numel()} initial weights")
        self.scalars = nn.Parameter(weights, requires_grad=trainable)
        self.gamma = nn.Parameter(torch.tensor(float(gamma)), requires_grad=trainable)
        self.layer_norm = layer_norm

    @property
    def n_layers(self) -> int:
        return self.scalars.numel()

    def weights(self) -> torch.Tensor:
        """The normalised layer weights ``softmax(s)``."""
        return torch.softmax(self.scalars, dim=0)

    def forward(self, layers: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``layers``: ``(n_layers, ..., dim)``; ``mask``: ``layers.shape[1:-1]`` booleans, True where real."""
        if layers.shape[0] != self.n_layers:
            raise ValueError(f"ScalarMix expects {self.n_layers} layers, got {layers.shape[0]}")
        if self.layer_norm:
            layers = _masked_layer_norm(layers, mask)
        weights = self.weights().to(layers.dtype).view(-1, *([1] * (layers.dim() - 1)))
        return self.gamma * (weights * layers).sum(dim=0)


def _masked_layer_norm(layers: torch.Tensor, mask: Optional[torch.Tensor], eps: float = 1e-12) -> torch.Tensor:
    """Normalise each layer by the mean and variance over its unpadded positions and all dims."""
    if mask is None:
        mask = torch.ones(layers.shape[1:-1], dtype=torch.bool, device=layers.device)
    m = mask.to(layers.dtype).unsqueeze(-1)
    count = m.sum() * layers.shape[-1]
    dims = tuple(range(1, layers.dim()))
    mean = (layers * m).sum(dim=dims, keepdim=True) / count
    var = (((layers - mean) * m) ** 2).sum(dim=dims, keepdim=True) / count
    return (layers - mean) / torch.sqrt(var + eps) * m
