"""The Python API: load a target once, then transcribe recordings window by window.

Example:
    >>> from as2d import Transcriber
    >>> transcriber = Transcriber(target="whisper-base", language="en")
    >>> run = transcriber.transcribe("talk.flac")
    >>> for window in run:          # WindowResult, as each window finishes
    ...     print(window.start, window.text)
    >>> run.stats.tokens_per_s      # RunStats, once every window is done
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from as2d.audio.windows import iter_windows
from as2d.engine.decode import greedy_target_only
from as2d.models.bundled import load_whisper
from as2d.models.whisper import WhisperTarget
from as2d.types import SAMPLE_RATE, RunStats, Window, WindowResult

METHODS = ("target",)
TASKS = ("transcribe", "translate")
AudioInput = str | Path | np.ndarray


@dataclass(frozen=True)
class Options:
    """How to decode, shared by every recording of a Transcriber."""

    target: str = "whisper-base"  # bundled name, local directory or Hugging Face id
    method: str = "target"  # one of METHODS
    language: str | None = None  # None: detected from the first window (multilingual targets)
    task: str = "transcribe"  # "transcribe" or "translate" (to English)
    threads: int | None = None  # torch threads for the target; None: torch's default


@dataclass
class Transcription:
    """One recording's results: iterate for WindowResults; `stats` once iteration is done."""

    windows: Iterator[WindowResult]
    results: list[WindowResult] = field(default_factory=list)
    _stats: RunStats | None = None

    def __iter__(self) -> Iterator[WindowResult]:
        for result in self.windows:
            self.results.append(result)
            yield result

    @property
    def stats(self) -> RunStats:
        if self._stats is None:
            for _ in self:
                pass
        assert self._stats is not None
        return self._stats

    @property
    def text(self) -> str:
        """The whole recording's text (decodes every remaining window first)."""
        _ = self.stats
        return " ".join(r.text for r in self.results if r.text)


class Transcriber:
    """Holds a loaded target and decodes recordings with it, one window at a time."""

    def __init__(self, options: Options | None = None, **overrides: object) -> None:
        self.options = options or Options(**overrides)  # type: ignore[arg-type]
        _check(self.options)
        if self.options.threads:
            torch.set_num_threads(self.options.threads)
        model, tokenizer = load_whisper(self.options.target)
        self.target = WhisperTarget(model, tokenizer)
        self.tokenizer = tokenizer
        self.warm_up()

    def warm_up(self) -> None:
        """Encoder, prefill and decoder passes of 1 and 8 tokens, so timings exclude first calls."""
        encoded = self.target.encode(np.zeros(SAMPLE_RATE, dtype=np.float32))
        self.target.prefill(encoded, self._prompt(self.options.language or "en"))
        self.target.forward([self.tokenizer.eot])
        self.target.forward([self.tokenizer.eot] * 8)

    def transcribe(self, audio: AudioInput) -> Transcription:
        """Decode every speech window of `audio` (a path or 16 kHz mono float32 samples)."""
        run = Transcription(iter([]))
        run.windows = self._decode_windows(audio, run)
        return run

    def _decode_windows(self, audio: AudioInput, run: Transcription) -> Iterator[WindowResult]:
        start = time.perf_counter()
        language = self.options.language
        tokens = 0
        audio_s = 0.0
        for window in iter_windows(audio):
            result, language = self._decode_window(window, language)
            tokens += len(result.token_ids)
            audio_s = window.end
            yield result
        wall = time.perf_counter() - start
        run._stats = RunStats(
            wall_s=wall,
            audio_s=audio_s,
            tokens=tokens,
            tokens_per_s=tokens / wall if wall > 0 else 0.0,
            rtf=wall / audio_s if audio_s > 0 else 0.0,
        )

    def _decode_window(self, window: Window, language: str | None) -> tuple[WindowResult, str | None]:
        t0 = time.perf_counter()
        encoded = self.target.encode(window.audio)
        t1 = time.perf_counter()
        if language is None and self.tokenizer.multilingual:
            language = self.target.detect_language(encoded)
        prompt = self._prompt(language)
        token_ids = greedy_target_only(self.target, encoded, prompt)
        t2 = time.perf_counter()
        text = self.tokenizer.decode(token_ids).strip()
        result = WindowResult(window.index, window.start, window.end, text, token_ids, t1 - t0, t2 - t1)
        return result, language

    def _prompt(self, language: str | None) -> list[int]:
        """Whisper's decoder prompt: start of transcript, language, task, no timestamps."""
        sot = self.tokenizer.sot_sequence(language, self.options.task)
        return [*sot, self.tokenizer.no_timestamps]


def _check(options: Options) -> None:
    if options.method not in METHODS:
        raise ValueError(f"unknown method {options.method!r}; choose from {', '.join(METHODS)}")
    if options.task not in TASKS:
        raise ValueError(f"unknown task {options.task!r}; choose from {', '.join(TASKS)}")


def transcribe(audio: AudioInput, **options: object) -> Transcription:
    """One-shot convenience: load the target (see Options) and transcribe one recording."""
    return Transcriber(Options(**options)).transcribe(audio)  # type: ignore[arg-type]
