"""The learned scalar mix of the biLM's layers (Peters et al., 2018, eq. 1), in torch with autograd: the one
implementation behind ``pipeline/listener_mix.py`` and ``allennlp/scalar_mix.py``; how it differs from the fixed
mixes (``fixed_mix.py``): docs/api.md, "Layer mixes".
"""
from typing import Optional, Sequence

import torch

# AllenNLP's ``tiny_value_of_dtype`` for float32, added to the variance.
LAYER_NORM_EPS = 1e-13


def learned_mix(
    scalars: torch.Tensor,
    gamma: torch.Tensor,
    layers: Sequence[torch.Tensor],
    mask: Optional[torch.Tensor] = None,
    layer_norm: bool = False,
) -> torch.Tensor:
    """``gamma * sum_j softmax(scalars)_j * layers[j]``; ``layers`` a list of equal-shape tensors ``(..., dim)`` or
    one tensor ``(n_layers, ..., dim)``. With ``layer_norm`` each layer is first normalised by one mean and one
    variance over the positions ``mask`` (``layers[j].shape[:-1]``, bool; None: all) and every dimension; padded
    positions are normalised with the same numbers, as in AllenNLP."""
    if layer_norm:
        layers = [normalised(layer, mask) for layer in layers]
    return gamma * sum(weight * layer for weight, layer in zip(torch.softmax(scalars, dim=0), layers))


def normalised(layer: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``layer`` less its mean over the positions ``mask`` keeps (None: all), over their standard deviation."""
    if mask is None:
        centred = layer - layer.mean()
        return centred / torch.sqrt((centred**2).mean() + LAYER_NORM_EPS)
    keep = mask.unsqueeze(-1).to(layer.dtype)
    count = keep.sum() * layer.shape[-1]
    mean = (layer * keep).sum() / count
    variance = (((layer - mean) * keep) ** 2).sum() / count
    return (layer - mean) / torch.sqrt(variance + LAYER_NORM_EPS)
