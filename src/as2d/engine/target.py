"""The target role: what the decode loop needs from any model whose output must come out exactly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import numpy as np
import torch

Encoded = TypeVar("Encoded")  # a family's encoder output (e.g. Whisper's EncodedAudio)


class Target(Protocol[Encoded]):
    """A model decoded greedily one window at a time, with a rollback-able KV cache.

    `prefill` and `forward` return scores (logits with the model's token suppression applied)
    so the greedy token of a position is the argmax of its row.
    """

    eot_ids: frozenset[int]  # tokens that end a window's output
    max_length: int  # decoder positions, prompt included
    length: int  # positions held in the KV cache

    def encode(self, audio: np.ndarray) -> Encoded:
        """Audio features and encoder forward for one window ([samples] float32, 16 kHz)."""
        ...

    def prefill(self, encoded: Encoded, prompt: Sequence[int]) -> torch.Tensor:
        """Reset the cache, run the prompt; return [V] scores for the first output token."""
        ...

    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        """Append tokens to the cache; return [n, V] scores for the position after each."""
        ...

    def rollback(self, length: int) -> None:
        """Drop every cached position from `length` on."""
        ...
