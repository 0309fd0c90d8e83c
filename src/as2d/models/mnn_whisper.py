"""Whisper on MNN: our checkpoints exported as three MNN graphs, and a target that runs them.

MNN (Alibaba's inference engine, PyPI `MNN`, the `mnn` extra) runs on phones and small CPUs
where PyTorch does not. `export` writes three graphs from a `WhisperNet` through ONNX and
MNN's converter:

- `encoder.mnn`: log-mel features [1, n_mels, 3000] -> hidden [1500, d];
- `cross.mnn`: hidden -> the cross-attention keys (pre-scaled) and values of every layer;
- `decoder.mnn`: k new tokens over a self-attention cache of any length `past` -> [k, V]
  logits and the k new positions' keys and values. A step is k = 1, a verify pass k > 1; the
  tokens' positions and the causal mask follow from `past` (the mask is aligned to the
  cache's end), so rollback is a length pointer over a cache kept here, on the host.

`MnnWhisperTarget` is a whole target (`--runtime mnn`): the engine's calls, Whisper's prompt,
language detection and token suppression shared with `WhisperTarget` (not copied), on an
`MnnBackend` whose thread count changes per call, so core lending works. It gives no word
timings (no cross-attention weights come out of the graphs). Its greedy tokens equal the torch
target's on real clips (tests/models/test_mnn_whisper.py, scripts/mnn_probe.py). It loads from
a model's graphs in the cache (`exported`) or from a folder `as2d export` wrote
(`mnn_export.py`), which holds no torch weights.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from as2d.audio.mel import log_mel
from as2d.backends.mnn_backend import MnnBackend, MnnGraph, import_mnn
from as2d.models.tokenizer import WhisperTokenizer
from as2d.models.whisper import detect_language, spoken_language, suppress, whisper_prompt
from as2d.models.whisper_net import Suppression, WhisperNet, WhisperShape
from as2d.target import Backend, Request
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


@dataclass
class MnnEncoded:
    """The encoder's output for one window and its cross-attention keys and values."""

    hidden: np.ndarray  # [1500, d]


class MnnWhisperTarget:
    """Greedy-decoding Whisper target on MNN.

    The self-attention cache is two host arrays [L, H, max_length, Dh]; a pass sends their
    first `length` positions to the decoder graph and stores the k positions it returns, so
    rollback moves `length`. Scores carry Whisper's suppression, as `WhisperTarget`'s do.
    """

    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("whisper",)
    follows_requests = False  # transcribes or translates; cannot answer free requests
    takes_previous = True  # <|startofprev|> and earlier text before the prompt
    times_words = False  # the graphs give no cross-attention weights
    leading_space = True  # output text starts with a space: " Hello"

    def __init__(
        self,
        directory: str | Path,
        shape: WhisperShape,
        suppression: Suppression,
        tokenizer: WhisperTokenizer,
        backend: MnnBackend | None = None,
    ) -> None:
        """`directory` holds `export`'s graphs of a checkpoint of this shape and suppression."""
        directory = Path(directory)
        mnn = backend or MnnBackend()
        self.backend: Backend = mnn
        self.device, self.dtype = torch.device("cpu"), torch.float32  # the host's arrays
        self.graphs = {
            name: MnnGraph(directory / f"{name}.mnn", *names, mnn) for name, names in GRAPHS.items()
        }
        self.tokenizer = tokenizer
        self.eot_ids = frozenset({tokenizer.eot})
        self.max_length = shape.max_target_positions
        self.n_mels = shape.num_mel_bins
        heads = shape.decoder_attention_heads
        cache = (shape.decoder_layers, heads, self.max_length, shape.d_model // heads)
        self.self_k = np.zeros(cache, dtype=np.float32)  # [L, H, T, Dh]
        self.self_v = np.zeros(cache, dtype=np.float32)
        self.cross: list[Any] = []  # keys, values [L, H, 1500, Dh], as the decoder's inputs
        vocab = shape.vocab_size
        self.suppress = torch.tensor([t for t in suppression.suppress_tokens if t < vocab])
        self.begin_suppress = torch.tensor(
            [t for t in suppression.begin_suppress_tokens if t < vocab]
        )
        self.length = 0
        self.prompt_length = 0

    @classmethod
    def load(
        cls, name_or_path: str, device: str = "cpu", dtype: torch.dtype | None = None
    ) -> MnnWhisperTarget:
        """A folder `as2d export` wrote (`from_export`), else a model's float32 graphs from
        the cache (exported on first use, see `exported`).

        Raises:
            ValueError: a device other than the CPU, a dtype other than float32, or an
                export folder that is not whole.
        """
        from as2d.models.bundled import load_whisper_net
        from as2d.models.mnn_export import is_export

        if torch.device(device).type != "cpu" or dtype not in (None, torch.float32):
            raise ValueError("the MNN runtime runs float32 on the CPU (no --device, --dtype)")
        if is_export(name_or_path):
            return cls.from_export(Path(name_or_path))
        directory = exported(name_or_path)
        net, tokenizer = load_whisper_net(name_or_path, torch.float32)
        return cls(directory, net.shape, net.suppression, tokenizer)

    @classmethod
    def from_export(cls, directory: Path) -> MnnWhisperTarget:
        """The target of a folder `as2d export` wrote: its graphs, its `config.json`'s shape,
        its manifest's suppression and its tokenizer; no torch weights, no conversion.

        Raises:
            ValueError: the folder is not a whole export (`mnn_export.read_export`).
        """
        from as2d.models.mnn_export import read_export

        tokens = read_export(directory).tokens
        shape = WhisperShape.of(json.loads((directory / "config.json").read_text()))
        suppression = Suppression(tokens.suppress, tokens.begin_suppress)
        return cls(directory, shape, suppression, WhisperTokenizer.from_model_dir(directory))

    def prompt(self, encoded: MnnEncoded, request: Request) -> list[int]:
        """Whisper's decoder prompt (`whisper.whisper_prompt`)."""
        return whisper_prompt(self.tokenizer, self.max_length, request)

    def language(self, encoded: MnnEncoded, given: str | None) -> str | None:
        """`given`, else the detected language (`whisper.spoken_language`)."""
        return spoken_language(self, self.tokenizer, encoded, given)

    def detect_language(self, encoded: MnnEncoded) -> str:
        """The most likely language code after `<|startoftranscript|>`."""
        return detect_language(self, self.tokenizer, encoded)

    def encode(self, audio: np.ndarray, between: Callable[[], object] | None = None) -> MnnEncoded:
        """Log-mel features of a ≤ 30 s window (padded to 30 s) and the encoder graph;
        `between` is called once before it (one graph: no layers to lend cores between)."""
        if between is not None:
            between()
        feats = log_mel(audio, self.n_mels).float().numpy()  # [1, n_mels, 3000]
        (hidden,) = self.graphs["encoder"](feats)
        return MnnEncoded(hidden.reshape(hidden.shape[-2:]))

    def prefill(self, encoded: MnnEncoded, prompt: Sequence[int]) -> torch.Tensor:
        """Start a window: cross-attention keys/values, then the prompt. Returns [V] scores."""
        decoder = self.graphs["decoder"]
        self.cross = [decoder.const(a) for a in self.graphs["cross"](encoded.hidden)]
        self.length = 0
        self.prompt_length = len(prompt)
        return self.forward(prompt)[-1]

    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        """Append `tokens` to the cache; return the scores for the position after each: [n, V]."""
        start, end = self.length, self.length + len(tokens)
        if end > self.max_length:
            raise ValueError(f"decoder context full: {start} + {len(tokens)} > {self.max_length}")
        logits, new_k, new_v = self.graphs["decoder"](
            np.asarray(tokens, dtype=np.int32),
            self.self_k[:, :, :start],
            self.self_v[:, :, :start],
            *self.cross,
        )
        self.self_k[:, :, start:end] = new_k
        self.self_v[:, :, start:end] = new_v
        self.length = end
        scores = torch.from_numpy(logits.reshape(len(tokens), -1))
        return suppress(scores, self.suppress, self.begin_suppress, self.prompt_length - 1 - start)

    def rollback(self, length: int) -> None:
        """Forget every cached position from `length` on (a rejected verify suffix)."""
        if not self.prompt_length <= length <= self.length:
            raise ValueError(f"cannot roll back to {length} (holding {self.length})")
        self.length = length


def mnn_available() -> bool:
    """MNN importable (the `mnn` extra)."""
    try:
        import_mnn()
    except ImportError:
        return False
    return True


def greedy(target: Any, encoded: Any, prompt: Sequence[int]) -> list[int]:
    """Target-only greedy tokens of a window (the reference speculative decoding must equal)."""
    tokens: list[int] = []
    scores = target.prefill(encoded, prompt)
    while len(prompt) + len(tokens) < target.max_length:
        token = int(scores.argmax())
        if token in target.eot_ids:
            break
        tokens.append(token)
        scores = target.forward([token])[-1]
    return tokens
