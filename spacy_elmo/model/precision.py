"""The biLM's matrix products at reduced precision: bf16 or fp16 weights, or int8 weights with per-row activation scales.

A :class:`LowPrecisionLinear` computes ``x @ W + b`` from weights converted once, when the precision is set
(:meth:`BiLm.set_precision`), never per call. Outputs are float32, so everything between the products (gate
nonlinearities, the cell state, clipping, residuals, the highway gates) stays in float32.

int8 scales each *row* of the activations on its own, so a sentence's vectors never depend on its batch-mates
(torch's ``quantize_dynamic`` scales per tensor, i.e. per batch): our code rounds each row to integers in
[-63, 63] (``round(x * 63 / max|x|)``: 7 bits, which cannot overflow the 16-bit pair sums of AVX2's int8
instructions), the kernel sums them against the int8 weights exactly in int32 and scales the sums by the weight
columns' scales, and the row's scale ``max|x| / 63`` is applied as the result is written. The rounding turns a
last-bit difference in a row into a whole int8 step (1e-2 in the result), so what feeds these products must not
depend on the batch either (:class:`RowExactLinear`).

The int8 weights and their scales are plain tensors that :class:`Int8Linear` keeps. :data:`INT8_KERNELS` multiply
them: fbgemm's dynamic quantized linear (on the quantized tensors that torch 2.13 marks deprecated), oneDNN's int8
linear on plain int8 tensors (the kernel torch keeps for its x86 int8 inference) and, where torch has neither, the
weights dequantized to float32 for each product. All three give the same floats for the same rows (exact integer
sums, one rounding in the scaling), so a call may pick its kernel by its number of rows (:func:`int8_kernels`):
fbgemm costs less per call (one-row products), oneDNN runs batches faster on AMX CPUs and, for weights beyond the
L2 cache, on VNNI CPUs (BENCHMARKS.md)."""
import functools
import os
import types
import warnings
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch

from ..errors import ElmoSettingsError
from .cpu import amx_cpu, l2_cache_bytes, native_bf16_cpu, vnni_cpu

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
        added = None if addend is None else addend[None]  # the addend of this one kernel
        return stacked_linear([self], x.reshape(1, -1, self.in_features), added).view(*x.shape[:-1], self.out_features)

    def shift(self, addend: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """What is added to the product: the bias and ``addend``, either, or None."""
        if addend is None:
            return self.bias
        return addend if self.bias is None else addend + self.bias

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ weight`` for ``x`` ``(rows, in)``, what this class's :meth:`products` adds each shift to (a class
        with products of its own, :class:`Int8Linear`, has none)."""
        raise NotImplementedError

    @staticmethod
    def products(
        kernels: Sequence["LowPrecisionLinear"], x: torch.Tensor, shifts: Sequence[Optional[torch.Tensor]],
        out: torch.Tensor, scratch: Optional[Scratch],
    ) -> torch.Tensor:
        """``out[d] = x[d] @ W_d + shifts[d]`` for kernels of this class, ``x`` ``(len(kernels), rows, in)``; adding
        and writing in the product's last pass saves passes over the output. ``scratch``: buffers that the
        products of one call (e.g. every step of an LSTM) share, see :func:`stacked_linear`."""
        for d, (kernel, shift) in enumerate(zip(kernels, shifts)):
            product = kernel.product(x[d])
            if shift is None:
                out[d].copy_(product)
            else:
                torch.add(shift, product, out=out[d])  # promotes a bf16 or fp16 product to float32
        return out


class FloatLinear(LowPrecisionLinear):
    """Weights stored as bf16 or fp16 (float32 for :class:`RowExactLinear`); each product rounds its input to that type
    and returns float32."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor], dtype: torch.dtype):
        super().__init__(weight, bias)
        self.dtype = dtype
        self.weight = weight.detach().to(dtype).contiguous()

    def product(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x.to(self.dtype), self.weight)


class Int8Linear(LowPrecisionLinear):
    """Weights in int8 with one scale per output column; activations in int8 with one scale per row.

    The weight in int8, ``(out, in)``, and ``scales`` ``(out,)``, so that ``int8 * scales[:, None]`` is the transposed
    float weight: what :data:`INT8_KERNELS` multiply, each kernel of :func:`int8_kernels` packing them once."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor]):
        super().__init__(weight, bias)
        columns = weight.detach().float().t()  # (out, in), the layout the kernels pack
        self.scales = (columns.abs().amax(dim=1) / 127.0).clamp_min(1e-12)
        levels = torch.round(columns / self.scales[:, None]).clamp_(-127, 127).to(torch.int8).contiguous()
        self.kernels = int8_kernels(levels.numel())
        self.packed = {kernel.name: kernel.pack(levels, self.scales) for kernel in set(self.kernels)}

    @staticmethod
    def products(
        kernels: Sequence[LowPrecisionLinear], x: torch.Tensor, shifts: Sequence[Optional[torch.Tensor]],
        out: torch.Tensor, scratch: Optional[Scratch],
    ) -> torch.Tensor:
        """Every kernel's rows rounded in one pass (into a buffer whose last columns the kernel may use, see
        :func:`_level_rows`), then one int8 product per kernel, its row scale and shift applied as it is written."""
        stacked, rows, width = x.shape
        if rows == 0:
            return out
        few, many = kernels[0].kernels  # type: ignore[attr-defined]
        kernel = few if rows < ONEDNN_ROWS else many
        # max|x| per row; exact either way, and 6-17x faster than linalg.vector_norm(x, inf) (BENCHMARKS.md).
        magnitude = x.abs().amax(dim=2, keepdim=True).clamp_min_(1e-30).div_(LEVELS)
        levels = _level_rows(x, scratch)
        torch.div(x, magnitude, out=levels.narrow(2, 0, width)).round_()
        rows_in = kernel.rows(levels, width)
        for d, (linear, shift) in enumerate(zip(kernels, shifts)):
            product = kernel.product(rows_in[d], linear)
            if shift is None:
                torch.mul(product, magnitude[d], out=out[d])
            else:
                torch.addcmul(shift, product, magnitude[d], out=out[d])
        return out


class FbgemmInt8:
    """fbgemm's dynamic int8 linear on quantized tensors (deprecated in torch 2.13). It quantizes its input itself,
    per tensor, from the tensor's range: two pinning columns of +63.5 and -63.5 (whose weights are zero) beside the
    rounded rows fix that range, so that its scale is exactly 1 and its zero point 64 (a 7-bit range, 0 to 127) for
    any rows, and it takes the rows' integers as they are."""

    name = "fbgemm"

    @staticmethod
    def available() -> bool:
        try:
            ops = (torch.ops.quantized.linear_dynamic.default, torch.ops.quantized.linear_prepack.default,
                   torch._make_per_channel_quantized_tensor)
            return all(map(callable, ops)) and "fbgemm" in torch.backends.quantized.supported_engines
        except (AttributeError, RuntimeError):
            return False

    @staticmethod
    def pack(weight: torch.Tensor, scales: torch.Tensor) -> object:
        pinned = torch.cat((weight, weight.new_zeros(weight.shape[0], len(PINS))), dim=1)  # the pins' weights: 0
        with warnings.catch_warnings():  # torch 2.13 marks quantized tensors deprecated; the kernel stays
            warnings.simplefilter("ignore")
            quantized = torch._make_per_channel_quantized_tensor(
                pinned, scales.double(), torch.zeros(len(scales), dtype=torch.long), 0
            )
            return torch.ops.quantized.linear_prepack(quantized, None)

    @staticmethod
    def rows(levels: torch.Tensor, width: int) -> torch.Tensor:
        """What :meth:`product` takes of the rounded rows ``levels`` ``(..., width + 2)``: all, with the pins."""
        return levels

    @staticmethod
    def product(rows: torch.Tensor, linear: "Int8Linear") -> torch.Tensor:
        """``rows @ weight.T * scales`` (float32), the rows as :meth:`rows` gives them."""
        return _op("quantized", "linear_dynamic")(rows, linear.packed["fbgemm"], True)  # reduce_range: 7 bits


class OneDnnInt8:
    """oneDNN's int8 linear on plain tensors (``torch.ops.onednn.qlinear_pointwise``, what torch's x86 int8
    inference lowers to), on the rows' integers as uint8 around a zero point of 64 (1 to 127: u8 x s8 pair sums
    stay within AVX2's 16 bits), the int32 sums scaled by the weight columns' scales in the kernel."""

    name = "onednn"

    @staticmethod
    def available() -> bool:
        try:
            if not torch.backends.mkldnn.is_available():
                return False
            weight = torch.tensor([[1, -2], [3, 4]], dtype=torch.int8)
            linear = types.SimpleNamespace(packed={"onednn": OneDnnInt8.pack(weight, torch.ones(2))},
                                           scales=torch.ones(2), out_features=2)
            product = OneDnnInt8.product(OneDnnInt8.rows(torch.tensor([[1.0, -1.0]]), 2), linear)
            return torch.equal(product, torch.tensor([[3.0, -1.0]]))
        except (AttributeError, RuntimeError, NotImplementedError):
            return False

    @staticmethod
    def pack(weight: torch.Tensor, scales: torch.Tensor) -> object:
        return torch.ops.onednn.qlinear_prepack(weight, None)

    @staticmethod
    def rows(levels: torch.Tensor, width: int) -> torch.Tensor:
        return torch.add(levels.narrow(-1, 0, width), ZERO_POINT).to(torch.uint8)

    @staticmethod
    def product(rows: torch.Tensor, linear: "Int8Linear") -> torch.Tensor:
        return _op("onednn", "qlinear_pointwise")(rows, 1.0, ZERO_POINT, linear.packed["onednn"], linear.scales,
                                _zero_points(linear.out_features), None, 1.0, 0, torch.float32, "none", [], "")


class DequantizedInt8:
    """The int8 weights turned into float32 for each product (the floor, for a torch with neither int8 kernel):
    float32 sums of the same integers, exact while they stay below 2**24, so the same results, slower than fp32."""

    name = "dequantized"

    @staticmethod
    def available() -> bool:
        return True

    @staticmethod
    def pack(weight: torch.Tensor, scales: torch.Tensor) -> object:
        return weight

    @staticmethod
    def rows(levels: torch.Tensor, width: int) -> torch.Tensor:
        return levels.narrow(-1, 0, width)

    @staticmethod
    def product(rows: torch.Tensor, linear: "Int8Linear") -> torch.Tensor:
        return torch.mm(rows, linear.packed["dequantized"].t().float()).mul_(linear.scales)


# The int8 kernels by name, in the order tried where the other is missing.
INT8_KERNELS = {kernel.name: kernel for kernel in (FbgemmInt8, OneDnnInt8, DequantizedInt8)}
# SPACY_ELMO_INT8_KERNEL=<name>: the one int8 kernel to use for every product (benchmarks and tests); unset or
# "auto", :func:`int8_kernels` chooses by the CPU and the rows.
INT8_KERNEL_VARIABLE = "SPACY_ELMO_INT8_KERNEL"
# Products of this many rows or more run on oneDNN where fbgemm is the other choice (measured: BENCHMARKS.md).
ONEDNN_ROWS = 4


def int8_kernels(weight_bytes: int = 0) -> Tuple[type, type]:
    """The int8 kernels of a new :class:`Int8Linear` product of ``weight_bytes`` int8 weights: (for fewer than
    :data:`ONEDNN_ROWS` rows, for more). fbgemm for few rows and oneDNN for more on CPUs with AMX, and on CPUs with
    AVX512-VNNI for weights larger than the core's L2 cache; fbgemm alone otherwise (measured: on a VNNI EPYC the
    pair ran the embedded model and ``small``, whose products' weights fit in L2, 0.82-0.92x as fast as fbgemm alone,
    and ``original`` 1.04-1.14x; on AVX2 oneDNN is slower at any rows; BENCHMARKS.md, "The int8 kernels"). Without
    fbgemm oneDNN for all, without both the dequantized weights; :data:`INT8_KERNEL_VARIABLE` names one for all."""
    chosen = os.environ.get(INT8_KERNEL_VARIABLE, "auto")
    if chosen != "auto":
        if chosen not in INT8_KERNELS:
            raise ElmoSettingsError(
                f"{INT8_KERNEL_VARIABLE} must be auto or one of {', '.join(INT8_KERNELS)}, found {chosen!r}"
            )
        if not _has_kernel(chosen):
            raise ElmoSettingsError(f"{INT8_KERNEL_VARIABLE}={chosen}: this torch ({torch.__version__}) lacks that kernel")
        return INT8_KERNELS[chosen], INT8_KERNELS[chosen]
    present = [kernel for name, kernel in INT8_KERNELS.items() if _has_kernel(name)]
    if present[0] is FbgemmInt8 and OneDnnInt8 in present and (amx_cpu() or (vnni_cpu() and weight_bytes > l2_cache_bytes())):
        return FbgemmInt8, OneDnnInt8
    return present[0], present[0]


@functools.lru_cache(maxsize=None)
def _has_kernel(name: str) -> bool:
    return INT8_KERNELS[name].available()


class RowExactLinear(FloatLinear):
    """A float32 product beside reduced ones (int8's token projection), each row's result the same whatever other rows
    ``x`` holds: products of exactly :data:`ROW_BLOCK` rows, the last one padded with zeros.

    BLAS chooses its kernel, and with it how a row's sums are rounded, by the number of rows (MKL on AVX-512: 1 to 3
    rows round otherwise than 4 or more). A token's vector is computed among the other new tokens of its call, which
    depend on the batch and on what the token cache holds, and int8 rounds the LSTMs' inputs, which turns a last-bit
    difference there into one of 1e-2: with every product the same shape, the token vectors do not differ at all.
    """

    def product(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        padded = torch.nn.functional.pad(x, (0, 0, 0, -rows % ROW_BLOCK))  # a copy: blocks start aligned alike
        return torch.cat([torch.mm(block, self.weight) for block in padded.split(ROW_BLOCK)])[:rows]


# The rounded rows' range: integers in [-LEVELS, LEVELS]; fbgemm's pinning columns; oneDNN's zero point.
LEVELS = 63
PINS = torch.tensor([LEVELS + 0.5, -LEVELS - 0.5])
ZERO_POINT = 64


@functools.lru_cache(maxsize=None)
def _op(namespace: str, name: str) -> Callable[..., torch.Tensor]:
    """``torch.ops.<namespace>.<name>`` as one resolved overload: called through the packet, each call first checks
    in Python whether its arguments need a Python dispatch (5 us, a fifth of a one-row int8 product's time)."""
    return getattr(getattr(torch.ops, namespace), name).default


@functools.lru_cache(maxsize=None)
def _zero_points(n: int) -> torch.Tensor:
    """The weights' zero points for oneDNN: ``n`` zeros, shared by the products of that width."""
    return torch.zeros(n, dtype=torch.int32)


def _level_rows(x: torch.Tensor, scratch: Optional[Scratch]) -> torch.Tensor:
    """A buffer ``(stacked, rows, width + 2)`` for the rounded rows of ``x`` ``(stacked, rows, width)``, its last
    two columns fbgemm's pins: from ``scratch`` when it has one as large (one per width, set up once per call)."""
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
        return RowExactLinear(weight, bias, torch.float32)
    return FloatLinear(weight, bias, _FLOAT_TYPES[precision])


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
