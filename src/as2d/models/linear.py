"""How linear layers compute on a CPU: MKL, oneDNN on reordered weights, or int8.

Whisper's lean decoder (`whisper.py`) and its encoder pick per layer: a target stays float32
(MKL for one row, oneDNN for several and for the encoder's 1500 frames), a drafter may use
int8 (`Arithmetic`). The oneDNN ops are private to torch, one reason torch is pinned; each
path is probed once a process (`onednn_works`, `int8_works`), and where its ops are missing or
disagree with `F.linear`, torch's public float32 path serves instead, with one warning.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch
import torch.nn.functional as F

VERIFY_ROWS = 17  # rows of a verify pass at the default budget (1 + k, k = 16)
INT8_TOLERANCE = 0.05  # an int8 probe's largest error, as a fraction of the output's range

# How a missing or changed private op fails: no such attribute, no kernel, a new schema.
_OP_ERRORS = (AttributeError, RuntimeError, TypeError)
_ONEDNN_OPS = "torch.ops.mkldnn._reorder_linear_weight/_linear_pointwise"
_INT8_OPS = "torch.quantize_per_channel/torch.ops.quantized.linear_prepack/linear_dynamic"
_BF16_OP = "torch.ops.mkldnn._is_mkldnn_bf16_supported"
_ON_MKL = "linear layers use torch's public float32 path (MKL) for every row count"
_IN_FLOAT32 = "linear layers use torch's public float32 path"

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
        self.packed = _reorder(linear.weight.detach(), rows)
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
        return _int8_linear(weight, bias)
    rows = arithmetic == "float32+rows"
    packed = _reorder(weight, VERIFY_ROWS) if rows else None
    return DecoderLinear(weight.t().contiguous(), bias, packed)


def choose_arithmetic(weight: torch.Tensor, approximate: bool) -> Arithmetic:
    """The fastest arithmetic for linear layers of `weight`'s device and dtype on this machine;
    `approximate`: int8 allowed (drafters). Only paths whose probes pass are chosen."""
    on_cpu = weight.device.type == "cpu" and weight.dtype == torch.float32
    if on_cpu and approximate and int8_works():
        return "int8"
    if on_cpu and onednn_works():
        return "float32+rows"
    return "float32"


@functools.cache
def onednn_works() -> bool:
    """Whether oneDNN's private linear ops exist and agree with `F.linear` (float32 tolerance)
    on a small random case, with and without a bias. Probed once a process; False also where
    torch has no oneDNN (no warning: MKL is then the expected path)."""
    if not torch.backends.mkldnn.is_available():
        return False
    weight, bias, x = _probe_case()  # [out, in], [out], [n, in]
    try:
        packed = _reorder(weight, VERIFY_ROWS)
        pairs = [(_onednn(x, packed, b), F.linear(x, weight, b)) for b in (bias, None)]
        error = max((y - expected).abs().max().item() for y, expected in pairs)
        agree = all(torch.allclose(y, expected, rtol=1e-4, atol=1e-5) for y, expected in pairs)
    except _OP_ERRORS as failure:
        _fall_back(_ONEDNN_OPS, f"failed a probe ({_one_line(failure)})", _ON_MKL)
        return False
    if not agree:
        reason = f"disagree with F.linear on a probe (largest error {error:.3g})"
        _fall_back(_ONEDNN_OPS, reason, _ON_MKL)
    return agree


@functools.cache
def int8_works() -> bool:
    """Whether the int8 path (`_int8_linear`) runs and stays within `INT8_TOLERANCE` of
    `F.linear` on a small random case. Probed once a process; False also where torch has no
    x86 quantized engine (no warning: float32 is then the expected path)."""
    if "x86" not in torch.backends.quantized.supported_engines:
        return False
    weight, bias, x = _probe_case()  # [out, in], [out], [n, in]
    try:
        expected = F.linear(x, weight, bias)  # [n, out]
        error = (_int8_linear(weight, bias)(x) - expected).abs().max().item()
    except _OP_ERRORS as failure:
        _fall_back(_INT8_OPS, f"failed a probe ({_one_line(failure)})", _IN_FLOAT32)
        return False
    agree = error <= INT8_TOLERANCE * (expected.max() - expected.min()).item()
    if not agree:
        reason = f"disagree with F.linear on a probe (largest error {error:.3g})"
        _fall_back(_INT8_OPS, reason, _IN_FLOAT32)
    return agree


def fast_bfloat16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX-512 BF16 or AMX), through oneDNN;
    False, with a warning, where the private op that says so is missing."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except _OP_ERRORS as failure:
        reason = f"failed ({_one_line(failure)})"
        _fall_back(_BF16_OP, reason, "the encoder stays float32 (torch's public path)")
        return False


def _onednn(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`x @ weight.T + bias` on oneDNN (`packed`: the reordered weight): [n, in] -> [n, out]"""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _reorder(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """oneDNN's layout of `weight` ([out, in]) for products with about `rows` rows."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, rows)


def _int8_linear(weight: torch.Tensor, bias: torch.Tensor | None) -> Int8Linear:
    """`weight` ([out, in]) in int8, one symmetric scale per output row."""
    scales = (weight.abs().amax(1) / 127).clamp_min(1e-12).double()  # [out]
    zeros = torch.zeros(weight.shape[0], dtype=torch.long)
    # quantize_per_channel warns that it is deprecated after torch 2.13 (pinned here).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        q = torch.quantize_per_channel(weight, scales, zeros, 0, torch.qint8)
    return Int8Linear(torch.ops.quantized.linear_prepack(q, bias))


def _probe_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A small random linear layer and input for the probes: [out, in], [out], [n, in].
    Its own generator, so probing leaves torch's global random state alone."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(32, 64, generator=generator)  # [out, in]
    bias = torch.randn(32, generator=generator)  # [out]
    x = torch.randn(3, 64, generator=generator)  # [n, in]: several rows, oneDNN's case
    return weight, bias, x


def _fall_back(ops: str, reason: str, instead: str) -> None:
    """Warns, in one line, that `ops` are not used, and what is done `instead`."""
    message = f"as2d: {ops} {reason}; {instead} instead"
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _one_line(failure: BaseException) -> str:
    """`failure` as one line: its type and the first line of its message."""
    lines = str(failure).splitlines()
    return f"{type(failure).__name__}: {lines[0] if lines else ''}"
