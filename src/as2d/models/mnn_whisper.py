"""Whisper on MNN: a target that runs our checkpoints' MNN graphs (`mnn_graphs.py`).

MNN (Alibaba's inference engine, PyPI `MNN`, the `mnn` extra) runs on phones and small CPUs
where PyTorch does not. The self-attention cache is kept here, on the host, so rollback is a
length pointer.

`MnnWhisperTarget` is a whole target (`--runtime mnn`): the engine's calls, Whisper's prompt,
language detection and token suppression shared with `WhisperTarget` (not copied), on an
`MnnBackend` whose thread count changes per call, so core lending works. It gives no word
timings (no cross-attention weights come out of the graphs). Its greedy tokens equal the torch
target's on real clips (tests/models/test_mnn_whisper.py, scripts/mnn_probe.py). It loads from
a model's graphs in the cache (`mnn_graphs.exported`) or from a folder `as2d export` wrote
(`mnn_export.py`), which holds no torch weights.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from as2d.audio.mel import log_mel
from as2d.backends.mnn_backend import MnnBackend, MnnGraph, import_mnn
from as2d.models.mnn_graphs import GRAPHS, exported
from as2d.models.tokenizer import WhisperTokenizer
from as2d.models.whisper import detect_language, spoken_language, suppress, whisper_prompt
from as2d.models.whisper_net import Suppression, WhisperShape
from as2d.target import Backend, Request


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
