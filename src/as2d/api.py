"""The Python API: load a target (and drafter) once, then transcribe recordings window by window.

Example:
    >>> from as2d import Transcriber
    >>> with Transcriber(target="whisper-base", language="en") as transcriber:
    ...     run = transcriber.transcribe("talk.flac")
    ...     for window in run:          # WindowResult, as each window finishes
    ...         print(window.start, window.text)
    ...     print(run.stats.tokens_per_s)  # RunStats, once every window is done
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from as2d.audio.windows import iter_windows
from as2d.engine.as2d import SpeculativeDecoder
from as2d.engine.calibrate import cached_cost
from as2d.engine.decode import decode_target_only
from as2d.engine.policy import AutoBudget, BudgetPolicy, FixedBudget
from as2d.engine.speculative import StepCounts
from as2d.models.bundled import cache_root, load_whisper
from as2d.models.whisper import EncodedAudio, WhisperTarget
from as2d.runtime.drafter import DrafterProcess, DrafterSpec
from as2d.types import SAMPLE_RATE, RunStats, Window, WindowResult
from as2d.verify import Greedy, Rule, Sampling

METHODS = ("as2d", "target", "pld")  # sd (conventional speculative decoding) comes with bench
TASKS = ("transcribe", "translate")
DRAFTER_LOAD_S = 120.0  # the most a Transcriber waits for its drafter's model to load
AudioInput = str | Path | np.ndarray


@dataclass(frozen=True)
class Options:
    """How to decode, shared by every recording of a Transcriber."""

    target: str = "whisper-base"  # bundled name, local directory or Hugging Face id
    method: str = "as2d"  # one of METHODS
    language: str | None = None  # None: detected from the first window (multilingual targets)
    task: str = "transcribe"  # "transcribe" or "translate" (to English)
    temperature: float = 0.0  # 0: greedy (exact tokens); > 0: sampling (exact distribution)
    seed: int | None = None  # sampling seed, for reproducible runs
    # Speculation (as2d, pld)
    drafter: str = "whisper-tiny.en"  # load_whisper name/path, or "ct2:NAME" (CTranslate2 int8)
    budget: int | None = None  # None: chosen per step from the measured cost; else fixed k
    max_k: int = 16  # the largest budget considered
    lookahead: int = 2  # windows the drafter may run ahead of the target
    # Threads: default splits the cores between target and drafter (as2d), else all cores
    threads: int | None = None  # the target's torch threads
    drafter_threads: int | None = None
    drafter_fault: str | None = None  # tests and robustness benchmarks only (DrafterSpec.fault)


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def thread_split(options: Options) -> tuple[int, int]:
    """(target threads, drafter threads): the cores are shared when a drafter process runs."""
    if options.method != "as2d":
        return options.threads or _cores(), 0
    drafter = options.drafter_threads or max(1, _cores() // 2)
    return options.threads or max(1, _cores() - drafter), drafter


@dataclass
class Transcription:
    """One recording's results: iterate for WindowResults; `stats` once iteration is done."""

    windows: Iterator[WindowResult]
    results: list[WindowResult] = field(default_factory=list)
    finished: RunStats | None = None

    def __iter__(self) -> Iterator[WindowResult]:
        for result in self.windows:
            self.results.append(result)
            yield result

    @property
    def stats(self) -> RunStats:
        """Run statistics (decodes every remaining window first)."""
        for _ in self:
            pass
        assert self.finished is not None
        return self.finished

    @property
    def text(self) -> str:
        """The whole recording's text (decodes every remaining window first)."""
        _ = self.stats
        return " ".join(r.text for r in self.results if r.text)


class Transcriber:
    """Holds a loaded target (and drafter process) and decodes recordings with them."""

    def __init__(
        self,
        options: Options | None = None,
        shared_target: WhisperTarget | None = None,
        **overrides: object,
    ) -> None:
        """Loads `options.target`, or decodes with `shared_target` (already loaded, of that
        name: a benchmark shares one target between configurations run one at a time)."""
        self.options = options or Options(**overrides)  # type: ignore[arg-type]
        _check(self.options)
        target_threads, drafter_threads = thread_split(self.options)
        torch.set_num_threads(target_threads)
        drafter = self._start_drafter(drafter_threads)  # loads while the target loads
        try:
            self.target = shared_target or WhisperTarget(*load_whisper(self.options.target))
        except BaseException:
            if drafter is not None:
                drafter.close()
            raise
        self.tokenizer = self.target.tokenizer
        self.rule = _rule(self.options)
        encoded = self.warm_up()
        self.speculative = self._speculative(drafter, encoded, target_threads)
        if drafter is not None:
            drafter.wait_ready(DRAFTER_LOAD_S)  # loading is not part of a run's timing

    def __enter__(self) -> Transcriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stops the drafter process, if any."""
        if self.speculative is not None and self.speculative.drafter is not None:
            self.speculative.drafter.close()

    def warm_up(self) -> EncodedAudio:
        """Encoder, prefill and decoder passes of 1 and 8 tokens, so timings exclude first calls."""
        encoded = self.target.encode(np.zeros(SAMPLE_RATE, dtype=np.float32))
        self.target.prefill(encoded, self._prompt(self.options.language or "en"))
        self.target.forward([self.tokenizer.eot])
        self.target.forward([self.tokenizer.eot] * 8)
        return encoded

    def transcribe(self, audio: AudioInput) -> Transcription:
        """Decode every speech window of `audio` (a path or 16 kHz mono float32 samples)."""
        run = Transcription(iter([]))
        run.windows = self._decode_windows(audio, run)
        return run

    def _start_drafter(self, threads: int) -> DrafterProcess | None:
        o = self.options
        if o.method != "as2d":
            return None
        spec = DrafterSpec(o.drafter, threads, o.language, o.task, o.lookahead, o.drafter_fault)
        drafter = DrafterProcess(spec)
        drafter.start()
        return drafter

    def _speculative(
        self, drafter: DrafterProcess | None, encoded: EncodedAudio, threads: int
    ) -> SpeculativeDecoder | None:
        o = self.options
        if o.method == "target":
            return None
        policy = self.budget_policy(o.budget, encoded, threads)
        return SpeculativeDecoder(self.target, self.tokenizer, policy, drafter, o.max_k)

    def budget_policy(
        self, budget: int | None, encoded: EncodedAudio, threads: int
    ) -> BudgetPolicy:
        """A fixed budget k, or (None) k chosen per step from this target's measured cost
        at `threads` (measured on `encoded` the first time, then cached)."""
        if budget is not None:
            return FixedBudget(budget)
        prompt = self._prompt("en")
        cost = cached_cost(
            self._cost_path(threads), self.target, encoded, prompt, self.options.max_k
        )
        return AutoBudget(cost)

    def _cost_path(self, threads: int) -> Path:
        name = re.sub(r"[^\w.-]+", "_", self.options.target)
        return cache_root() / "cost" / f"{name}-{threads}threads.json"

    def _decode_windows(self, audio: AudioInput, run: Transcription) -> Iterator[WindowResult]:
        start = time.perf_counter()
        language = self.options.language
        tokens, audio_s = 0, 0.0
        windows = iter_windows(audio)
        if self.speculative is not None:
            windows = self.speculative.windows(windows)
        for window in windows:
            result, language = self.decode_window(window, language)
            tokens += len(result.token_ids)
            audio_s = window.end
            yield result
        wall = time.perf_counter() - start
        activity = self.speculative.activity() if self.speculative is not None else None
        run.finished = RunStats(
            wall_s=wall,
            audio_s=audio_s,
            tokens=tokens,
            tokens_per_s=tokens / wall if wall > 0 else 0.0,
            rtf=wall / audio_s if audio_s > 0 else 0.0,
            drafter=activity,
            started_at=start,
        )

    def decode_window(
        self, window: Window, language: str | None
    ) -> tuple[WindowResult, str | None]:
        """Decode one window; returns its result and the language (detected if None)."""
        t0 = time.perf_counter()
        encoded = self.target.encode(window.audio)
        t1 = time.perf_counter()
        if language is None and self.tokenizer.multilingual:
            language = self.target.detect_language(encoded)
        prompt = self._prompt(language)
        if self.speculative is None:
            token_ids = decode_target_only(self.target, encoded, prompt, self.rule)
            counts = StepCounts(plain_steps=len(token_ids))
        else:
            token_ids, counts = self.speculative.decode(window, encoded, prompt, self.rule)
        t2 = time.perf_counter()
        text = self.tokenizer.decode(token_ids).strip()
        w = window
        result = WindowResult(
            w.index, w.start, w.end, text, token_ids, t1 - t0, t2 - t1, **asdict(counts)
        )
        result.started_at = t0
        return result, language

    def _prompt(self, language: str | None) -> list[int]:
        """Whisper's decoder prompt: start of transcript, language, task, no timestamps."""
        sot = self.tokenizer.sot_sequence(language, self.options.task)
        return [*sot, self.tokenizer.no_timestamps]


def _rule(options: Options) -> Rule:
    """Greedy, or temperature sampling with its own seeded generator."""
    if options.temperature == 0:
        return Greedy()
    generator = torch.Generator()
    generator.manual_seed(options.seed if options.seed is not None else torch.seed())
    return Sampling(options.temperature, generator)


def _check(options: Options) -> None:
    if options.method not in METHODS:
        raise ValueError(f"unknown method {options.method!r}; choose from {', '.join(METHODS)}")
    if options.task not in TASKS:
        raise ValueError(f"unknown task {options.task!r}; choose from {', '.join(TASKS)}")
    if options.temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {options.temperature}")
    if options.budget is not None and not 0 <= options.budget <= options.max_k:
        raise ValueError(f"budget must be between 0 and {options.max_k}, got {options.budget}")


def compare(audio: AudioInput, options: Options, methods: Sequence[str]) -> list[Transcription]:
    """Decode `audio` with each method in turn (each loaded and warmed up before timing)."""
    runs = []
    for method in methods:
        with Transcriber(replace(options, method=method)) as transcriber:
            run = transcriber.transcribe(audio)
            _ = run.stats
        runs.append(run)
    return runs


def transcribe(audio: AudioInput, **options: object) -> Transcription:
    """One-shot convenience: load the target (see Options), transcribe one recording, clean up.

    The returned Transcription is fully decoded; use a Transcriber to stream many files.
    """
    with Transcriber(Options(**options)) as transcriber:  # type: ignore[arg-type]
        run = transcriber.transcribe(audio)
        _ = run.stats
    return run
