"""Whisper's MNN graphs: our checkpoints exported through ONNX and MNN's converter into three
graphs, once per model into the cache (`exported`), which `mnn_whisper.MnnWhisperTarget` runs.

- `encoder.mnn`: log-mel features [1, n_mels, 3000] -> hidden [1500, d];
- `cross.mnn`: hidden -> the cross-attention keys (pre-scaled) and values of every layer;
- `decoder.mnn`: k new tokens over a self-attention cache of any length `past` -> [k, V]
  logits and the k new positions' keys and values. A step is k = 1, a verify pass k > 1; the
  tokens' positions and the causal mask follow from `past` (the mask is aligned to the
  cache's end), so rollback is a length pointer over a cache kept on the host.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from as2d.models.whisper_net import WhisperNet
from as2d.writers import atomic_dir

# Each graph's input and output names, as `export` writes them and `_Graph` feeds them.
GRAPHS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "encoder": (("features",), ("hidden",)),
    "cross": (("hidden",), ("cross_k", "cross_v")),
    "decoder": (("tokens", "past_k", "past_v", "cross_k", "cross_v"), ("logits", "new_k", "new_v")),
}
QUANT_BITS = {"float32": 0, "int8": 8, "int4": 4}  # weights as MNN stores them
OPSET = 17


class _CrossGraph(nn.Module):
    """hidden [1500, d] -> keys [L, H, 1500, Dh] (times Dh^-0.5), values [L, H, 1500, Dh]."""

    def __init__(self, net: WhisperNet) -> None:
        super().__init__()
        self.layers: Any = net.model.decoder.layers
        self.heads = net.shape.decoder_attention_heads

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows, d = hidden.shape
        scale = (d // self.heads) ** -0.5
        keys, values = [], []
        for layer in self.layers:
            attn = layer.encoder_attn
            keys.append(attn.k_proj(hidden).view(rows, self.heads, -1).transpose(0, 1) * scale)
            values.append(attn.v_proj(hidden).view(rows, self.heads, -1).transpose(0, 1))
        return torch.stack(keys), torch.stack(values)


class _DecoderGraph(nn.Module):
    """k tokens over a `past`-long cache -> logits [k, V], new keys and values [L, H, k, Dh].

    The same operations as `WhisperTarget._decoder_pass`, with the cache as inputs and the new
    positions' keys and values as outputs.
    """

    def __init__(self, net: WhisperNet) -> None:
        super().__init__()
        decoder: Any = net.model.decoder
        self.embed_tokens = decoder.embed_tokens
        self.embed_positions = decoder.embed_positions
        self.layers: Any = decoder.layers
        self.layer_norm = decoder.layer_norm
        self.proj_out = net.proj_out
        self.heads = net.shape.decoder_attention_heads

    def forward(
        self,
        tokens: torch.Tensor,  # [k] int64
        past_k: torch.Tensor,  # [L, H, past, Dh]
        past_v: torch.Tensor,  # [L, H, past, Dh]
        cross_k: torch.Tensor,  # [L, H, 1500, Dh], pre-scaled
        cross_v: torch.Tensor,  # [L, H, 1500, Dh]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        k, past = tokens.shape[0], past_k.shape[2]
        rows = torch.arange(k) + past  # [k] the new tokens' positions
        x = self.embed_tokens(tokens) + self.embed_positions(rows)  # [k, d]
        masked = torch.arange(k + past)[None, :] > rows[:, None]  # [k, past + k]
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            h = layer.self_attn_layer_norm(x)
            attn = layer.self_attn
            keys = self._heads(attn.k_proj(h))  # [H, k, Dh]
            values = self._heads(attn.v_proj(h))
            new_k.append(keys)
            new_v.append(values)
            q = self._heads(attn.q_proj(h)) * keys.shape[-1] ** -0.5
            weights = q @ torch.cat([past_k[i], keys], 1).transpose(1, 2)  # [H, k, past + k]
            weights = weights.masked_fill(masked, -torch.inf)
            out = weights.softmax(-1) @ torch.cat([past_v[i], values], 1)  # [H, k, Dh]
            x = x + attn.out_proj(self._merge(out))
            h = layer.encoder_attn_layer_norm(x)
            cross = layer.encoder_attn
            weights = self._heads(cross.q_proj(h)) @ cross_k[i].transpose(1, 2)  # [H, k, 1500]
            x = x + cross.out_proj(self._merge(weights.softmax(-1) @ cross_v[i]))
            x = x + layer.fc2(F.gelu(layer.fc1(layer.final_layer_norm(x))))
        logits = self.proj_out(self.layer_norm(x))  # [k, V]
        return logits, torch.stack(new_k), torch.stack(new_v)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """[k, d] -> [H, k, Dh]"""
        return x.view(x.shape[0], self.heads, -1).transpose(0, 1)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        """[H, k, Dh] -> [k, d]"""
        return x.transpose(0, 1).reshape(x.shape[1], -1)


@dataclass(frozen=True)
class _Spec:
    """One graph to export: its module, example inputs and dynamic axes."""

    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    dynamic_axes: dict[str, dict[int, str]]


def _specs(net: WhisperNet) -> dict[str, _Spec]:
    shape = net.shape
    heads, layers = shape.decoder_attention_heads, shape.decoder_layers
    head_dim = shape.d_model // heads
    frames = shape.max_source_positions  # 1500 encoder positions
    hidden = torch.zeros(frames, shape.d_model)
    cache = torch.zeros(layers, heads, 3, head_dim)  # past = 3 in the example
    cross = torch.zeros(layers, heads, frames, head_dim)
    tokens = torch.zeros(2, dtype=torch.long)  # k = 2 in the example
    return {
        "encoder": _Spec(
            net.model.encoder,
            (torch.zeros(1, shape.num_mel_bins, 2 * frames),),
            {},
        ),
        "cross": _Spec(_CrossGraph(net), (hidden,), {}),
        "decoder": _Spec(
            _DecoderGraph(net),
            (tokens, cache, cache, cross, cross),
            {
                "tokens": {0: "k"},
                "past_k": {2: "past"},
                "past_v": {2: "past"},
                "logits": {0: "k"},
                "new_k": {2: "k"},
                "new_v": {2: "k"},
            },
        ),
    }


def export(net: WhisperNet, directory: str | Path, weights: str = "float32") -> dict[str, Path]:
    """Writes `<graph>.onnx` and `<graph>.mnn` for the encoder, cross and decoder graphs.

    Args:
        net: a float32 checkpoint (its encoder must be the stock one: not swapped to oneDNN).
        directory: where the files go (created).
        weights: "float32" (the reference), "int8" or "int4" (MNN's weight quantisation of
            matmul weights; activations stay float32).

    Returns:
        The .mnn path of each graph.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, spec in _specs(net.float().eval()).items():
            onnx_path = Path(scratch) / f"{name}.onnx"
            inputs, outputs = GRAPHS[name]
            with torch.inference_mode():
                torch.onnx.export(
                    spec.module,
                    spec.inputs,
                    str(onnx_path),
                    input_names=list(inputs),
                    output_names=list(outputs),
                    dynamic_axes=spec.dynamic_axes,
                    opset_version=OPSET,
                    dynamo=False,
                )
            paths[name] = directory / f"{name}.mnn"
            convert(onnx_path, paths[name], QUANT_BITS[weights])
    return paths


def exported(name: str, weights: str = "float32") -> Path:
    """The directory of a model's MNN graphs, `cache_dir(name, weights)`, exported on first
    use (into a temporary folder renamed into place, so a reader never sees half a model)."""
    from as2d.models.bundled import load_whisper_net

    directory = cache_dir(name, weights)
    if has_graphs(directory):
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    with atomic_dir(directory, replace=True) as scratch:
        net, _ = load_whisper_net(name, torch.float32)
        export(net, scratch, weights)
    return directory


def cache_dir(name: str, weights: str = "float32") -> Path:
    """`$AS2D_CACHE/mnn/<name>/<weights>/`, a path's characters other than letters, digits,
    `.` and `-` made `_`."""
    from as2d.models.bundled import cache_root

    return cache_root() / "mnn" / re.sub(r"[^\w.-]+", "_", name) / weights


def has_graphs(directory: Path) -> bool:
    """Whether `directory` holds every graph of `GRAPHS`."""
    return all((directory / f"{graph}.mnn").is_file() for graph in GRAPHS)


def convert(onnx_path: Path, mnn_path: Path, quant_bits: int = 0) -> None:
    """ONNX -> MNN with MNN's converter (exact GELU, not its tanh approximation)."""
    command = [
        sys.executable,
        "-m",
        "MNN.tools.mnnconvert",
        "-f",
        "ONNX",
        "--modelFile",
        str(onnx_path),
        "--MNNModel",
        str(mnn_path),
        "--bizCode",
        "as2d",
        "--useGeluApproximation",
        "0",
    ]
    if quant_bits:
        command += ["--weightQuantBits", str(quant_bits)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not mnn_path.is_file():
        raise RuntimeError(f"mnnconvert failed on {onnx_path}:\n{result.stdout}{result.stderr}")
