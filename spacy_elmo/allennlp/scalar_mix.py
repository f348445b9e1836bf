"""AllenNLP's ``ScalarMix`` (``allennlp.modules.scalar_mix``): a trainable mix of the biLM's layers in torch.

``gamma * sum_k softmax(s)_k * L_k`` (Peters et al., 2018, eq. 1). With ``do_layer_norm`` every layer is first
normalised by one mean and one variance taken over all unmasked (position, dimension) pairs of the whole batch,
without a learned scale or shift, ``(L - mean) / sqrt(var + LAYER_NORM_EPS)``. Padded positions are normalised
with the same numbers (they are not zeroed), as in AllenNLP. How it differs from the fixed mix and the listener's: docs/api.md, "Layer mixes".
"""
from typing import Optional, Sequence

import torch
from torch import nn

from ..errors import ElmoSettingsError

# AllenNLP's ``tiny_value_of_dtype`` for float32, added to the variance.
LAYER_NORM_EPS = 1e-13


class ScalarMix(nn.Module):
    """Mixes ``mixture_size`` tensors of the same shape with softmax-normalised weights and a scale ``gamma``.

    ``initial_scalar_parameters``: the weights before the softmax (default all 0: the average); ``trainable``:
    whether the weights and ``gamma`` (starting at 1) learn. Parameter names follow AllenNLP
    (``scalar_parameters.K``, ``gamma``).
    """

    def __init__(
        self,
        mixture_size: int,
        do_layer_norm: bool = False,
        initial_scalar_parameters: Optional[Sequence[float]] = None,
        trainable: bool = True,
    ):
        super().__init__()
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * mixture_size
        if len(initial_scalar_parameters) != mixture_size:
            raise ElmoSettingsError(
                f"initial_scalar_parameters gives {len(initial_scalar_parameters)} weights, but mixture_size is "
                f"{mixture_size}; give one weight per tensor to mix"
            )
        self.mixture_size = mixture_size
        self.do_layer_norm = do_layer_norm
        self.scalar_parameters = nn.ParameterList(
            nn.Parameter(torch.tensor([float(value)]), requires_grad=trainable) for value in initial_scalar_parameters
        )
        self.gamma = nn.Parameter(torch.tensor([1.0]), requires_grad=trainable)

    def weights(self) -> torch.Tensor:
        """The layer weights after the softmax, ``(mixture_size,)``."""
        return torch.softmax(torch.cat(list(self.scalar_parameters)), dim=0)

    def forward(self, tensors: Sequence[torch.Tensor], mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The mix of ``tensors`` (each ``(batch, time, dim)``); ``mask`` ``(batch, time)`` is needed for layer norm."""
        if len(tensors) != self.mixture_size:
            raise ElmoSettingsError(
                f"tensors holds {len(tensors)} tensors, but this ScalarMix has mixture_size {self.mixture_size}; "
                f"give one tensor per weight"
            )
        weights = self.weights()
        if self.do_layer_norm:
            if mask is None:
                raise ElmoSettingsError(
                    "mask is None, but this ScalarMix has do_layer_norm=True: pass mask, (batch, time), the positions "
                    "to normalise over"
                )
            tensors = [_layer_norm(tensor, mask) for tensor in tensors]
        return self.gamma * sum(weight * tensor for weight, tensor in zip(weights, tensors))


def _layer_norm(tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``tensor`` less its mean over the unmasked entries, over their standard deviation (one of each per call)."""
    keep = mask.unsqueeze(-1).to(tensor.dtype)
    count = keep.sum() * tensor.shape[-1]
    kept = tensor * keep
    mean = kept.sum() / count
    variance = (((kept - mean) * keep) ** 2).sum() / count
    return (tensor - mean) / torch.sqrt(variance + LAYER_NORM_EPS)
