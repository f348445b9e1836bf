"""Highway layers (Srivastava et al. 2015) in the form the ELMo weight files use."""
from typing import List

import torch
from torch import nn

from .precision import LowPrecisionLinear, low_precision_linear


class Highway(nn.Module):
    """``n_layers`` highway layers: ``y = c * relu(x W_t + b_t) + (1 - c) * x`` with ``c = sigmoid(x W_c + b_c)``.

    Weights are kept as TensorFlow stores them (``y = x @ W``), one ``(dim, dim)`` matrix per gate, so
    they round-trip to the hdf5 files unchanged; the two products of a layer run as one.
    """

    def __init__(self, dim: int, n_layers: int):
        super().__init__()
        self.dim = dim
        self.w_carry = nn.ParameterList(nn.Parameter(torch.empty(dim, dim)) for _ in range(n_layers))
        self.b_carry = nn.ParameterList(nn.Parameter(torch.zeros(dim)) for _ in range(n_layers))
        self.w_transform = nn.ParameterList(nn.Parameter(torch.empty(dim, dim)) for _ in range(n_layers))
        self.b_transform = nn.ParameterList(nn.Parameter(torch.zeros(dim)) for _ in range(n_layers))
        # At a reduced precision, one product per layer for both gates: ``x [W_carry | W_transform] + [b_c | b_t]``.
        self.low_precision: List[LowPrecisionLinear] = []
        self.reset_parameters()

    def set_precision(self, precision: str) -> None:
        """Run the gates' products at ``precision`` from now on (weights converted here, once)."""
        self.low_precision = [
            low_precision_linear(
                torch.cat((self.w_carry[k], self.w_transform[k]), dim=1),
                torch.cat((self.b_carry[k], self.b_transform[k])),
                precision,
            )
            for k in range(len(self))
        ]

    def reset_parameters(self) -> None:
        for w in list(self.w_carry) + list(self.w_transform):
            nn.init.normal_(w, 0.0, (1.0 / self.dim) ** 0.5)
        for b in self.b_carry:
            nn.init.constant_(b, -2.0)  # start close to the identity, as bilm-tf does
        for b in self.b_transform:
            nn.init.zeros_(b)

    def __len__(self) -> int:
        return len(self.w_carry)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for k in range(len(self)):
            if self.low_precision:
                carry, transform = self.low_precision[k](x).chunk(2, dim=1)
            else:
                carry = torch.addmm(self.b_carry[k], x, self.w_carry[k])
                transform = torch.addmm(self.b_transform[k], x, self.w_transform[k])
            carry, transform = torch.sigmoid(carry), torch.relu(transform)
            x = carry * transform + (1.0 - carry) * x
        return x
