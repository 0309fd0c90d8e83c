"""Whisper's weights as plain torch modules, loaded straight from safetensors.

`WhisperTarget` runs its own decoder and needs from a checkpoint only its tensors and the
encoder's forward pass. Building transformers' `WhisperForConditionalGeneration` for that costs
a one-off command about 3 s of imports on a 2-core host, so a checkpoint on disk is read here
with torch and safetensors alone. Module and parameter names are transformers' own, so the same
state dict loads either way (`from_transformers` takes a model already built), and the
encoder's forward pass is transformers' in the same operations and order (tests compare both).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

_SUPPRESSION_KEYS = ("suppress_tokens", "begin_suppress_tokens")


@dataclass(frozen=True)
class WhisperShape:
    """The part of a Whisper `config.json` that shapes the network."""

    d_model: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    decoder_layers: int
    decoder_attention_heads: int
    decoder_ffn_dim: int
    num_mel_bins: int
    max_source_positions: int
    max_target_positions: int
    vocab_size: int

    @classmethod
    def of(cls, config: Any) -> WhisperShape:
        """From a config dict or an object with these attributes (transformers' config)."""

        def get(name: str) -> Any:
            return config[name] if isinstance(config, dict) else getattr(config, name)

        return cls(**{f.name: int(get(f.name)) for f in fields(cls)})


@dataclass(frozen=True)
class Suppression:
    """Token ids greedy decoding never emits: everywhere, and at the first output position."""

    suppress_tokens: tuple[int, ...]
    begin_suppress_tokens: tuple[int, ...]

    @classmethod
    def of(cls, config: Any) -> Suppression:
        get = config.get if isinstance(config, dict) else lambda name: getattr(config, name, None)
        return cls(tuple(get("suppress_tokens") or ()), tuple(get("begin_suppress_tokens") or ()))


class _Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Self-attention without a mask over [1, T, d], scaled as transformers scales it."""
        shape = (*x.shape[:-1], self.heads, -1)
        scale = (x.shape[-1] // self.heads) ** -0.5
        q = (self.q_proj(x) * scale).view(shape).transpose(1, 2).contiguous()
        k = self.k_proj(x).view(shape).transpose(1, 2).contiguous()
        v = self.v_proj(x).view(shape).transpose(1, 2).contiguous()
        out = F.scaled_dot_product_attention(q, k, v, scale=1.0)  # [1, H, T, Dh]
        return self.out_proj(out.transpose(1, 2).reshape(x.shape).contiguous())


class _EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.self_attn = _Attention(d, heads)
        self.final_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        x = x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
        if x.dtype == torch.float16:  # as transformers: keep float16 activations finite
            limit = torch.finfo(x.dtype).max - 1000
            x = x.clamp(-limit, limit)
        return x


class WhisperEncoder(nn.Module):
    def __init__(self, shape: WhisperShape) -> None:
        super().__init__()
        d = shape.d_model
        self.conv1 = nn.Conv1d(shape.num_mel_bins, d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.embed_positions = _embedding(shape.max_source_positions, d)
        self.layers = nn.ModuleList(
            _EncoderLayer(d, shape.encoder_attention_heads, shape.encoder_ffn_dim)
            for _ in range(shape.encoder_layers)
        )
        self.layer_norm = nn.LayerNorm(d)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """[1, n_mels, frames] log-mel features -> [1, frames / 2, d] (Whisper: 3000 -> 1500;
        a drafter's input sized to its speech is shorter, with the first positions)."""
        x = F.gelu(self.conv2(F.gelu(self.conv1(features)))).permute(0, 2, 1)
        x = x + self.embed_positions.weight[: x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class _DecoderLayer(nn.Module):
    """The decoder's weights; `WhisperTarget` runs the decoder with its own KV cache."""

    def __init__(self, d: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.self_attn = _Attention(d, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = _Attention(d, heads)
        self.final_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)


class _Decoder(nn.Module):
    def __init__(self, shape: WhisperShape) -> None:
        super().__init__()
        d = shape.d_model
        self.embed_tokens = _embedding(shape.vocab_size, d)
        self.embed_positions = _embedding(shape.max_target_positions, d)
        self.layers = nn.ModuleList(
            _DecoderLayer(d, shape.decoder_attention_heads, shape.decoder_ffn_dim)
            for _ in range(shape.decoder_layers)
        )
        self.layer_norm = nn.LayerNorm(d)


class _Body(nn.Module):
    def __init__(self, shape: WhisperShape) -> None:
        super().__init__()
        self.encoder = WhisperEncoder(shape)
        self.decoder = _Decoder(shape)


class WhisperNet(nn.Module):
    """A Whisper checkpoint's weights under transformers' names, and the encoder's forward."""

    def __init__(
        self,
        shape: WhisperShape,
        suppression: Suppression,
        alignment_heads: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """`alignment_heads`: the checkpoint's [layer, head] pairs whose cross-attention follows
        the speech (word timings); None: every head of the decoder's upper half, as
        openai-whisper assumes for a checkpoint that names none."""
        super().__init__()
        self.shape = shape
        self.suppression = suppression
        layers, heads = shape.decoder_layers, shape.decoder_attention_heads
        upper = [(layer, head) for layer in range(layers // 2, layers) for head in range(heads)]
        self.alignment_heads = tuple((int(a), int(b)) for a, b in alignment_heads or upper)
        self.model = _Body(shape)
        self.proj_out = nn.Linear(shape.d_model, shape.vocab_size, bias=False)

    @property
    def device(self) -> torch.device:
        return self.proj_out.weight.device

    @classmethod
    def from_state(
        cls,
        shape: WhisperShape,
        suppression: Suppression,
        state: dict[str, torch.Tensor],
        alignment_heads: Sequence[Sequence[int]] | None = None,
    ) -> WhisperNet:
        """Takes the tensors of `state` as they are (no copy, no random initialisation)."""
        state = dict(state)
        state.setdefault("proj_out.weight", state["model.decoder.embed_tokens.weight"])  # tied
        with torch.device("meta"):
            net = cls(shape, suppression, alignment_heads)
        net.load_state_dict(state, strict=True, assign=True)
        return net.eval()

    @classmethod
    def from_dir(cls, directory: str | Path, dtype: torch.dtype) -> WhisperNet:
        """Reads `config.json`, `generation_config.json` and `model.safetensors`."""
        from safetensors.torch import load_file

        directory = Path(directory)
        config = json.loads((directory / "config.json").read_text())
        path = directory / "generation_config.json"
        generation = json.loads(path.read_text()) if path.is_file() else {}
        suppression = Suppression.of(  # older checkpoints keep these in config.json
            {key: generation.get(key) or config.get(key) for key in _SUPPRESSION_KEYS}
        )
        state = load_file(directory / "model.safetensors")
        state = {name: tensor.to(dtype) for name, tensor in state.items()}
        heads = generation.get("alignment_heads")
        return cls.from_state(WhisperShape.of(config), suppression, state, heads)

    @classmethod
    def from_transformers(cls, model: Any) -> WhisperNet:
        """From a transformers `WhisperForConditionalGeneration` (its tensors are shared)."""
        state = {name: t.detach() for name, t in model.state_dict().items()}
        shape, generation = WhisperShape.of(model.config), model.generation_config
        heads = getattr(generation, "alignment_heads", None)
        return cls.from_state(shape, Suppression.of(generation), state, heads)


def _embedding(rows: int, d: int) -> nn.Embedding:
    """An embedding left uninitialised (its weight is loaded next): a random `normal_` on the
    meta device would import torch's compiler, a second on a 2-core host."""
    return nn.Embedding(rows, d, _weight=torch.empty(rows, d))


def is_whisper_dir(directory: str | Path) -> bool:
    """A local checkpoint this module reads without transformers."""
    directory = Path(directory)
    return (directory / "config.json").is_file() and (directory / "model.safetensors").is_file()
