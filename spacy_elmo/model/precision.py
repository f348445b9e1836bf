"""The biLM's matrix products at reduced precision: bf16 or fp16 weights, or int8 weights with per-row activation scales.

A :class:`LowPrecisionLinear` computes ``x @ W + b`` from weights converted once, when the precision is set
(:meth:`BiLm.set_precision`), never per call. Outputs are float32, so everything between the products (gate
nonlinearities, the cell state, clipping, residuals, the highway gates) stays in float32.

int8 scales each *row* of the activations on its own, so a sentence's vectors never depend on its batch-mates
(torch's ``quantize_dynamic`` scales per tensor, i.e. per batch): each row is divided by its largest magnitude,
two pinning columns of +1 and -1 (inputs whose weights are zero) fix the per-tensor range that fbgemm's dynamic
kernel derives to exactly [-1, 1] for any number of rows, and the int32 sums are exact whatever the batch. The
rounding to int8 turns a last-bit difference in a row into a whole int8 step (1e-2 in the result), so what feeds
these products must not depend on the batch either (:class:`RowExactLinear`). The kernel is torch's fbgemm dynamic
quantized linear, reached through :class:`Int8Linear` only, so a torch without it can swap in another int8 product in
one place.
"""
import functools
import warnings
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch

from ..errors import ElmoSettingsError
from .cpu import native_bf16_cpu

PRECISIONS = ("fp32", "bf16", "int8", "fp16")
CUDA_PRECISIONS = ("fp32", "bf16", "fp16")
DEFAULT_PRECISION = "fp32"

# Rows of each float32 product of a :class:`RowExactLinear`.
ROW_BLOCK = 16

# Buffers shared by the products of one call (:func:`stacked_linear`), by shape.
Scratch = Dict[Tuple[int, int], torch.Tensor]

_FLOAT_TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision_name(precision: str, name: str = "precision") -> None:
    """Refuse a precision that is none of :data:`PRECISIONS` (``name``: the setting, for the message)."""
    if precision not in PRECISIONS:
        raise ElmoSettingsError(f"{name} must be one of {', '.join(PRECISIONS)}, found {precision!r}")


def check_precision(precision: str, device: torch.device) -> None:
    """Refuse a precision that is unknown, or that this device cannot run (fast), with what to use instead."""
    check_precision_name(precision)
    if device.type == "cuda":
        if precision not in CUDA_PRECISIONS:
            raise ElmoSettingsError(
                f"precision {precision!r} runs on CPUs only (torch's int8 kernels are CPU kernels); on a GPU use "
                f"one of {', '.join(CUDA_PRECISIONS)}"
            )
        return
    if precision == "fp16":
        raise ElmoSettingsError("precision 'fp16' is for GPUs; on a CPU use 'int8' (any x86 CPU) or 'bf16' (CPUs with bf16)")
    if precision == "bf16" and not native_bf16_cpu():
        raise ElmoSettingsError(
            f"precision 'bf16' needs a CPU with native bf16 (AVX512_BF16 or AMX); this one has "
            f"{torch.backends.cpu.get_cpu_capability()}, where bf16 is slower than fp32. Use precision 'int8', "
            f"which runs on AVX2 CPUs too, or 'fp32'"
        )


class LowPrecisionLinear:
    """``x @ weight + bias`` at a reduced precision for inputs ``(..., in)``; float32 in, float32 out."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor]):
        self.in_features, self.out_features = weight.shape
        self.bias = None if bias is None else bias.detach().float().clone()

    def __call__(self, x: torch.Tensor, addend: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x @ weight + bias``, plus ``addend`` (broadcastable to ``(rows, out)``) when given."""
        rows = x.reshape(1, -1, self.in_features)
        out = rows.new_empty(1, rows.shape[1], self.out_features)
        return self.products([self], rows, [self.shift(addend)], out, None).view(*x.shape[:-1], self.out_features)

    def shift(self, addend: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """What is added to the product: the bias and ``addend``, either, or None."""
        if addend is None:
            return self.bias
        return addend if self.bias is None else addend + self.bias

    @staticmethod
    def products(
        kernels: Sequence["LowPrecisionLinear"], x: torch.Tensor, shifts: Sequence[Optional[torch.Tensor]],
        out: torch.Tensor, scratch: Optional[Scratch],
    ) -> torch.Tensor:
        """``out[d] = x[d] @ W_d + shifts[d]`` for kernels of this class, ``x`` ``(len(kernels), rows, in)``; adding
        and writing in the product's last pass saves passes over the output. ``scratch``: buffers that the
        products of one call (e.g. every step of an LSTM) share, see :func:`stacked_linear`."""
        raise NotImplementedError


class FloatLinear(LowPrecisionLinear):
    """Weights stored as bf16 or fp16; each product rounds its input to that type and returns float32."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor], dtype: torch.dtype):
        super().__init__(weight, bias)
        self.dtype = dtype
        self.weight = weight.detach().to(dtype).contiguous()

    @staticmethod
    def products(
        kernels: Sequence[LowPrecisionLinear], x: torch.Tensor, shifts: Sequence[Optional[torch.Tensor]],
        out: torch.Tensor, scratch: Optional[Scratch],
    ) -> torch.Tensor:
        for d, (kernel, shift) in enumerate(zip(kernels, shifts)):
            product = torch.mm(x[d].to(kernel.dtype), kernel.weight)
            if shift is None:
                out[d].copy_(product)
            else:
                torch.add(shift, product, out=out[d])  # promotes to float32
        return out


class Int8Linear(LowPrecisionLinear):
    """Weights in int8 with one scale per output column; activations in int8 with one scale per row."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor]):
        super().__init__(weight, bias)
        columns = weight.detach().float().t()  # (out, in), the layout fbgemm packs
        scales = (columns.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
        zero_points = torch.zeros(self.out_features, dtype=torch.long)
        pinned = torch.cat((columns, columns.new_zeros(self.out_features, len(PINS))), dim=1)  # the pins' weights: 0
        with warnings.catch_warnings():  # torch 2.13 marks quantized tensors deprecated; the kernel stays
            warnings.simplefilter("ignore")
            quantized = torch.quantize_per_channel(pinned, scales, zero_points, 0, torch.qint8)
            self._packed = torch.ops.quantized.linear_prepack(quantized, None)

    @staticmethod
    def products(
        kernels: Sequence[LowPrecisionLinear], x: torch.Tensor, shifts: Sequence[Optional[torch.Tensor]],
        out: torch.Tensor, scratch: Optional[Scratch],
    ) -> torch.Tensor:
        """Every kernel's rows scaled in one pass (one abs-max, one division into a buffer that holds the pinning
        columns), then one int8 product per kernel, its row scale and shift applied as it is written."""
        stacked, rows, width = x.shape
        if rows == 0:
            return out
        linear_dynamic = _int8_kernel()
        magnitude = x.abs().amax(dim=2, keepdim=True).clamp_min_(1e-30)
        unit = _pinned_rows(x, scratch)
        torch.div(x, magnitude, out=unit.narrow(2, 0, width))
        for d, (kernel, shift) in enumerate(zip(kernels, shifts)):
            # reduce_range=True: 7-bit activations, which cannot overflow AVX2's 16-bit pair sums.
            product = linear_dynamic(unit[d], kernel._packed, True)
            if shift is None:
                torch.mul(product, magnitude[d], out=out[d])
            else:
                torch.addcmul(shift, product, magnitude[d], out=out[d])
        return out


class RowExactLinear(LowPrecisionLinear):
    """A float32 product beside reduced ones (int8's token projection), each row's result the same whatever other rows
    ``x`` holds: products of exactly :data:`ROW_BLOCK` rows, the last one padded with zeros.

    BLAS chooses its kernel, and with it how a row's sums are rounded, by the number of rows (MKL on AVX-512: 1 to 3
    rows round otherwise than 4 or more). A token's vector is computed among the other new tokens of its call, which
    depend on the batch and on what the token cache holds, and int8 rounds the LSTMs' inputs, which turns a last-bit
    difference there into one of 1e-2: with every product the same shape, the token vectors do not differ at all.
    """

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor]):
        super().__init__(weight, bias)
        self.weight = weight.detach().float().contiguous()

    @staticmethod
    def products(
        kernels: Sequence[LowPrecisionLinear], x: torch.Tensor, shifts: Sequence[Optional[torch.Tensor]],
        out: torch.Tensor, scratch: Optional[Scratch],
    ) -> torch.Tensor:
        rows = x.shape[1]
        for d, (kernel, shift) in enumerate(zip(kernels, shifts)):
            padded = torch.nn.functional.pad(x[d], (0, 0, 0, -rows % ROW_BLOCK))  # a copy: blocks start aligned alike
            product = torch.cat([torch.mm(block, kernel.weight) for block in padded.split(ROW_BLOCK)])[:rows]
            if shift is None:
                out[d].copy_(product)
            else:
                torch.add(shift, product, out=out[d])
        return out


# The pinning columns of every int8 product's scaled rows (see the module docstring).
PINS = torch.tensor([1.0, -1.0])


@functools.lru_cache(maxsize=None)
def _int8_kernel() -> Callable[..., torch.Tensor]:
    """fbgemm's dynamic int8 linear as one resolved overload: called through ``torch.ops.quantized.linear_dynamic``,
    each call first checks in Python whether its arguments need a Python dispatch (5 us, a fifth of a one-row
    product's time)."""
    return torch.ops.quantized.linear_dynamic.default


def _pinned_rows(x: torch.Tensor, scratch: Optional[Scratch]) -> torch.Tensor:
    """A buffer ``(stacked, rows, width + 2)`` for the scaled rows of ``x`` ``(stacked, rows, width)``, its last
    two columns the pins: from ``scratch`` when it has one as large (one per width, set up once per call)."""
    stacked, rows, width = x.shape
    buffer = None if scratch is None else scratch.get((stacked, width))
    if buffer is None or buffer.shape[1] < rows:
        buffer = x.new_empty(stacked, rows, width + len(PINS))
        buffer.narrow(2, width, len(PINS)).copy_(PINS)
        if scratch is not None:
            scratch[(stacked, width)] = buffer
    return buffer[:, :rows]


def low_precision_linear(weight: torch.Tensor, bias: Optional[torch.Tensor], precision: str) -> LowPrecisionLinear:
    """The product ``x @ weight + bias`` (``weight``: ``(in, out)``, as the biLM stores it) at ``precision``;
    ``"fp32"``: a product that a reduced precision keeps in float32 (:class:`RowExactLinear`)."""
    if precision == "int8":
        return Int8Linear(weight, bias)
    if precision == DEFAULT_PRECISION:
        return RowExactLinear(weight, bias)
    return FloatLinear(weight, bias, _FLOAT_TYPES[precision])


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, kernel: Optional[LowPrecisionLinear]) -> torch.Tensor:
    """``bias + x @ weight`` for 2-d ``x``: by ``kernel`` where the precision is reduced, else in float32 as ever."""
    return torch.addmm(bias, x, weight) if kernel is None else kernel(x)


def stacked_linear(
    kernels: Sequence[LowPrecisionLinear],
    x: torch.Tensor,
    addend: Optional[torch.Tensor] = None,
    scratch: Optional[Scratch] = None,
) -> torch.Tensor:
    """One product per leading index: ``x[d] @ W_d (+ b_d) (+ addend[d])`` for ``x`` ``(len(kernels), rows, in)``,
    each written straight into its slice of the result. ``scratch``: an empty dict at the start of a run of such
    products (e.g. an LSTM's steps), then passed to each, so that they reuse its buffers instead of making their own;
    one caller's alone (calls from several threads at once each need their own)."""
    result = x.new_empty(len(kernels), x.shape[1], kernels[0].out_features)
    addends = [None] * len(kernels) if addend is None else addend.unbind(0)
    shifts = [kernel.shift(a) for kernel, a in zip(kernels, addends)]
    return kernels[0].products(kernels, x, shifts, result, scratch)
