"""How linear layers compute on a CPU: MKL, oneDNN on reordered weights, or int8.

Whisper's lean decoder (`whisper.py`) and its encoder pick per layer: a target stays float32
(MKL for one row, oneDNN for several and for the encoder's 1500 frames), a drafter may use
int8 (`Arithmetic`). The oneDNN ops are private to torch, one reason torch is pinned.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch

VERIFY_ROWS = 17  # rows of a verify pass at the default budget (1 + k, k = 16)

# How a decoder's linear layers compute (see `decoder_linear`):
Arithmetic = Literal[
    "float32",  # MKL for every row count (a GPU, or a CPU without oneDNN)
    "float32+rows",  # MKL for one row, oneDNN for several (targets on a CPU)
    "int8",  # int8 weights per output channel, dynamic int8 activations (drafters on a CPU)
]


class Affine(Protocol):
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """[n, in] -> [n, out]"""
        ...


@dataclass(frozen=True)
class DecoderLinear:
    """A float32 linear layer, `x @ weight_t + bias`, with a second weight layout for several rows.

    One row (a plain step) runs MKL's gemv on `[in, out]`: faster than F.linear here. Several
    rows (a verify pass, a prompt) run oneDNN on a copy of the weight reordered for about
    `VERIFY_ROWS` rows: MKL's small-M sgemm is slow on this path (whisper-base's 512 x 51,865
    output layer at 17 rows: 27 ms with MKL, 11 ms with oneDNN on one core). Both are float32.
    """

    weight_t: torch.Tensor  # [in, out], contiguous
    bias: torch.Tensor | None  # [out]
    packed: torch.Tensor | None = None  # oneDNN's layout of [out, in]; None: MKL for all rows

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None and x.shape[0] > 1:
            return _onednn(x, self.packed, self.bias)
        if self.bias is None:
            return x @ self.weight_t
        return torch.addmm(self.bias, x, self.weight_t)


@dataclass(frozen=True)
class Int8Linear:
    """A linear layer with int8 weights (one scale per output row) and activations quantized
    on the fly (fbgemm/x86): tiny.en's 384 x 51,865 output layer 3.0 -> 0.9 ms a step. Drafters
    only: the scores move by about 1 % of their range, and drafts need not be exact."""

    params: Any  # torch.ops.quantized.linear_prepack(...)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x, self.params, True)


class EncoderLinear(torch.nn.Module):
    """An encoder's `nn.Linear` on oneDNN, its weight reordered for a window's frames (1500):
    MKL's sgemm is slower at these shapes (whisper-base's encoder on one core, 28 s of
    speech: 1.42 -> 1.21 s; on two, 0.72 -> 0.61 s). Same float32 arithmetic, summed in
    another order: the encoder's output moves by at most 8e-4 there, and greedy output is
    unchanged (tests: equal to transformers' `generate`)."""

    def __init__(self, linear: torch.nn.Linear, rows: int) -> None:
        super().__init__()
        weight = linear.weight.detach()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows)
        self.bias = None if linear.bias is None else linear.bias.detach()
        self.out_features = linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _onednn(x.reshape(-1, x.shape[-1]), self.packed, self.bias)
        return y.view(*x.shape[:-1], self.out_features)


def encoder_on_onednn(layers: torch.nn.Module, rows: int) -> None:
    """Swaps the linear layers under `layers` (an encoder's, `rows` frames) for
    `EncoderLinear`s, in place."""
    for module in list(layers.modules()):
        for name, child in list(module.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(module, name, EncoderLinear(child, rows))


def decoder_linear(
    weight: torch.Tensor, bias: torch.Tensor | None, arithmetic: Arithmetic
) -> Affine:
    """A decoder linear layer; `weight`: [out, in] as torch stores it."""
    weight = weight.detach()
    bias = None if bias is None else bias.detach()
    if arithmetic == "int8":
        scales = (weight.abs().amax(1) / 127).clamp_min(1e-12).double()  # [out]
        zeros = torch.zeros(weight.shape[0], dtype=torch.long)
        # quantize_per_channel warns that it is deprecated after torch 2.13 (pinned here).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            q = torch.quantize_per_channel(weight, scales, zeros, 0, torch.qint8)
        return Int8Linear(torch.ops.quantized.linear_prepack(q, bias))
    rows = arithmetic == "float32+rows"
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, VERIFY_ROWS) if rows else None
    return DecoderLinear(weight.t().contiguous(), bias, packed)


def choose_arithmetic(weight: torch.Tensor, approximate: bool) -> Arithmetic:
    """The fastest arithmetic for linear layers of `weight`'s device and dtype on this machine;
    `approximate`: int8 allowed (drafters)."""
    on_cpu = weight.device.type == "cpu" and weight.dtype == torch.float32
    if on_cpu and approximate and "x86" in torch.backends.quantized.supported_engines:
        return "int8"
    if on_cpu and torch.backends.mkldnn.is_available():
        return "float32+rows"
    return "float32"


def fast_bfloat16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX-512 BF16 or AMX), through oneDNN."""
    return bool(
        torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


def _onednn(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`x @ weight.T + bias` on oneDNN (`packed`: the reordered weight): [n, in] -> [n, out]"""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
