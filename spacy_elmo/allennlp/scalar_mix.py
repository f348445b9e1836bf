"""AllenNLP's ``ScalarMix`` (``allennlp.modules.scalar_mix``): a trainable mix of the biLM's layers in torch,
:func:`~spacy_elmo.model.learned_mix.learned_mix` with AllenNLP's parameters and arguments. With ``do_layer_norm``
every layer is first normalised over all unmasked (position, dimension) pairs of the whole batch.
"""
from typing import Optional, Sequence

import torch
from torch import nn

from ..errors import ElmoSettingsError
from ..model.learned_mix import learned_mix


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
        if self.do_layer_norm and mask is None:
            raise ElmoSettingsError(
                "mask is None, but this ScalarMix has do_layer_norm=True: pass mask, (batch, time), the positions "
                "to normalise over"
            )
        return learned_mix(torch.cat(list(self.scalar_parameters)), self.gamma, tensors, mask, self.do_layer_norm)
