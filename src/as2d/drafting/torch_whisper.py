"""A PyTorch Whisper drafter: the lean `WhisperTarget` decoder with approximate arithmetic
(bfloat16 encoder where the CPU has it, int8 decoder), its encoder sized to the speech,
publishing text after every token.

torch is imported here, in the drafter process, so a CTranslate2 drafter process never
loads it (seconds of start-up and hundreds of MB saved).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from as2d.drafting.family import ANY_LANGUAGE, DraftCosts, RunOnGuard, sized_frames
from as2d.drafting.warm import WARM_STEPS, busy_s, short_silence, timed_encodes, warm_prompt
from as2d.runtime.spec import DrafterSpec
from as2d.types import SAMPLE_RATE


@dataclass(frozen=True)
class Encoded:
    """One window encoded by a drafter: what its decoding needs."""

    hidden: Any  # the model's encoder output
    language: str | None  # the window's language, None: detected when decoding
    seconds: float  # the input's length (`RunOnGuard`)


class TorchWhisperDrafter:
    """Any Whisper (bundled name, local directory, hub id) drafting greedily, token by token."""

    streams = True

    def __init__(self, spec: DrafterSpec, model: str) -> None:
        import torch

        from as2d.backends.torch_backend import TorchBackend
        from as2d.models.whisper import WhisperTarget

        TorchBackend().set_threads(spec.threads)
        # In-process drafting (`drafts.py`) where torch already ran cannot change it.
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(1)
        # A drafter need not be exact: bfloat16 encoder, int8 decoder (see WhisperTarget).
        self.model = WhisperTarget.load(model, approximate=True)
        self.tokenizer = self.model.tokenizer
        self.spec = spec
        self._costs: dict[str, DraftCosts] = {}

    def encode(self, audio: np.ndarray, language: str | None) -> Encoded:
        frames = sized_frames(len(audio)) if self.spec.tail_s is not None else None
        hidden = self.model.encode(audio, frames=frames)
        return Encoded(hidden, language, len(audio) / SAMPLE_RATE)

    def warm_up(self) -> dict[str, DraftCosts]:
        if not self.spec.timed:  # first calls only
            encoded = self.encode(short_silence(), "en")
            self.model.prefill(encoded.hidden, warm_prompt(self.tokenizer, self.spec))
            self.model.forward([self.tokenizer.eot])
            return self._costs
        threads = self.spec.threads
        short_s, full_s, encoded = timed_encodes(self, threads, self.spec.tail_s is not None)
        self.model.prefill(encoded.hidden, warm_prompt(self.tokenizer, self.spec))
        start = busy_s(threads)
        for _ in range(WARM_STEPS):
            self.model.forward([self.tokenizer.eot])  # any token: a step costs the same
        step_s = (busy_s(threads) - start) / WARM_STEPS
        self._costs = {ANY_LANGUAGE: DraftCosts(short_s, full_s, step_s)}
        return self._costs

    def costs(self) -> dict[str, DraftCosts]:
        return self._costs

    def texts(self, encoded: Encoded) -> Iterator[tuple[int, str]]:
        language = encoded.language if self.tokenizer.multilingual else None
        if self.tokenizer.multilingual and language is None:
            language = self.model.detect_language(encoded.hidden)
        prompt = self.tokenizer.prompt(language, self.spec.task)
        scores = self.model.prefill(encoded.hidden, prompt)  # [V]
        guard = RunOnGuard(encoded.seconds)
        while True:
            token = int(scores.argmax())
            if token in self.model.eot_ids or self.model.length >= self.model.max_length:
                return
            if guard.stops(token):
                return
            yield len(guard.tokens), self.tokenizer.decode(guard.tokens)
            scores = self.model.forward([token])[-1]


def load(spec: DrafterSpec, model: str) -> TorchWhisperDrafter:
    """A PyTorch Whisper drafter (`family.KINDS`): a Whisper name, directory or hub id."""
    return TorchWhisperDrafter(spec, model)
