"""What every drafter model does at start-up: time its encoder and steps in CPU time, so
that the gate weighs what drafting a window costs (`DraftCosts`)."""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

from as2d.drafting.family import SHORT_INPUT_S
from as2d.models.tokenizer import WhisperTokenizer
from as2d.runtime.spec import DrafterSpec
from as2d.types import N_SAMPLES, SAMPLE_RATE

WARM_STEPS = 8  # decoder steps timed at start-up


class _Encodes(Protocol):
    def encode(self, audio: np.ndarray, language: str | None) -> Any: ...


def busy_s(threads: int) -> float:
    """This process's CPU seconds per thread: the time a call takes on the drafter's own
    cores, not inflated by the parent, which loads and warms up the target at the same time."""
    return time.process_time() / threads


def timed_encodes(model: _Encodes, threads: int, sized: bool) -> tuple[float, float, Any]:
    """The encoder's cost on `SHORT_INPUT_S` and on 30 s of silence (each encoded twice: the
    first call pays one-off set-up), and the last encoding. Not `sized`: the encoder pads
    every input to 30 s, so the two are one timing."""

    def timed(samples: int) -> tuple[float, Any]:
        silence = np.zeros(samples, np.float32)
        model.encode(silence, "en")
        start = busy_s(threads)
        encoded = model.encode(silence, "en")
        return busy_s(threads) - start, encoded

    full_s, encoded = timed(N_SAMPLES)
    short_s = timed(int(SHORT_INPUT_S * SAMPLE_RATE))[0] if sized else full_s
    return short_s, full_s, encoded


def warm_prompt(tokenizer: WhisperTokenizer, spec: DrafterSpec) -> list[int]:
    """The prompt of the warm-up steps: the spec's language, else English."""
    language = (spec.language or "en") if tokenizer.multilingual else None
    return tokenizer.prompt(language, spec.task)


def short_silence() -> np.ndarray:
    """`SHORT_INPUT_S` of silence: the first calls' input where the warm-up is not timed."""
    return np.zeros(int(SHORT_INPUT_S * SAMPLE_RATE), np.float32)
