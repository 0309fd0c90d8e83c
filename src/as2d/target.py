"""The target role: what the decode loop needs from any model whose output must come out exactly.

`Target` is all the engine sees. `TargetAdapter` adds what the API needs around it for one
model family (prompt building, tokenizer, language detection); `as2d.models.targets` picks
the adapter from the model's config, so nothing else knows a family by name.

Every target runs on a `Backend` (DESIGN.md, Runtimes): the runtime's threads, its queued
work and its rounding, so that the engine, core lending and the bench never call a runtime
(torch, MNN) themselves. The backends live in `as2d.backends`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np
import torch

Encoded = TypeVar("Encoded")  # a family's encoder output (e.g. Whisper's EncodedAudio)


class Backend(Protocol):
    """The runtime a model runs on, as the engine sees it.

    Attributes:
        name: the runtime and device ("torch-cpu", "torch-cuda", "mnn-cpu"), for reports.
        bound: the largest score difference (logits) that rounding may put between a row of
            its k-row verify pass and the single-token step that target-only decoding runs
            (the guard's bound, `verify.Greedy`); measured per runtime and precision.
    """

    name: str
    bound: float

    def threads(self) -> int:
        """The threads its next pass runs on (in the calling thread)."""
        ...

    def set_threads(self, threads: int) -> None:
        """Runs its next passes on `threads` (core lending changes it between passes)."""
        ...

    def sync(self) -> None:
        """Returns once its queued work is done (a GPU's kernels run asynchronously)."""
        ...

    def cost_key(self) -> str:
        """What its measured pass costs are kept under (`costs.machine_key`): a cost timed on
        one runtime or machine never steers another's decisions."""
        ...


@contextmanager
def threads_set(backend: Backend, threads: int) -> Iterator[None]:
    """`backend` on `threads` in the block, then on its threads before."""
    before = backend.threads()
    backend.set_threads(threads)
    try:
        yield
    finally:
        backend.set_threads(before)


class Target(Protocol[Encoded]):
    """A model decoded greedily one window at a time, with a rollback-able KV cache.

    `prefill` and `forward` return scores (logits with the model's token suppression applied)
    so the greedy token of a position is the argmax of its row.
    """

    backend: Backend  # threads, sync, rounding bound and cost key of its runtime
    eot_ids: frozenset[int]  # tokens that end a window's output
    max_length: int  # decoder positions, prompt included
    length: int  # positions held in the KV cache

    def encode(self, audio: np.ndarray, between: Callable[[], object] | None = None) -> Encoded:
        """Audio features and encoder forward for one window ([samples] float32, 16 kHz).

        `between` is called before the encoder and between pieces of its work (Whisper: its
        layers), where the caller may change the thread count (`CoreLoan`).
        """
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


@dataclass(frozen=True)
class Request:
    """What the user wants from a window.

    Attributes:
        task: "transcribe", "translate" (to English) or "ask" (answer `text` about the audio).
        language: the spoken language's code; None where unknown (detected if the family can).
        text: the user's request (task "ask" only).
        previous: text said before the audio (Whisper's prompt, OpenAI's `prompt`): it
            conditions the decoding (spelling, names, style); Whisper targets only.
    """

    task: str = "transcribe"
    language: str | None = None
    text: str | None = None
    previous: str | None = None


class TextTokenizer(Protocol):
    """The target's tokenizer, for re-encoding drafter text and decoding the output."""

    def encode(self, text: str) -> list[int]:
        """Canonical ids of plain text, exactly as the target would produce them."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Plain text of output ids (special tokens dropped)."""
        ...


class TargetAdapter(Target[Encoded], Protocol):
    """One model family as a target: the decode-loop protocol plus prompts and a tokenizer."""

    tokenizer: TextTokenizer
    device: torch.device  # where the weights and caches live
    dtype: torch.dtype  # what the decoder computes in
    follows_requests: bool  # can answer free requests (the ask task)
    takes_previous: bool  # conditions on text said before the audio (`Request.previous`)
    times_words: bool  # gives word timings (`timestamps.AligningTarget`)
    leading_space: bool  # output text starts with a space (Whisper: " Hello")
    encoded_type: type[Encoded]  # what `encode` returns: a dataclass of tensors (prepared.py)

    def prompt(self, encoded: Encoded, request: Request) -> list[int]:
        """The decoder prompt for a window and request (language already resolved)."""
        ...

    def language(self, encoded: Encoded, given: str | None) -> str | None:
        """`given`, else the window's detected language where the family detects it."""
        ...
