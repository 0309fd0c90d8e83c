"""The Python API: load a target (and drafter) once, then transcribe recordings window by window.

Example:
    >>> from as2d import Transcriber
    >>> with Transcriber(target="whisper-base", language="en") as transcriber:
    ...     run = transcriber.transcribe("talk.flac")
    ...     for window in run:          # WindowResult, as each window finishes
    ...         print(window.start, window.text)
    ...     print(run.stats.tokens_per_s)  # RunStats, once every window is done

Audio LLM targets also answer requests, window by window (task "ask"):
    >>> options = Options(target="Qwen/Qwen2-Audio-7B-Instruct", task="ask",
    ...                   request="Who is calling, and why?")
    >>> print(Transcriber(options).transcribe("call.wav").text)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from as2d.audio.load import AudioError
from as2d.audio.windows import SpeechWindower
from as2d.engine.as2d import SpeculativeDecoder
from as2d.engine.calibrate import synced_clock
from as2d.engine.decode import WindowDecoder
from as2d.engine.factory import DecoderFactory
from as2d.engine.policy import BudgetPolicy
from as2d.models.targets import adapter_class, check_target, load_target, torch_dtype
from as2d.models.whisper import WhisperTarget
from as2d.options import (
    Options,
    aligner_name,
    check,
    check_timestamps,
    drafter_spec,
    has_transcript_to_time,
    rule,
)
from as2d.runtime.cores import thread_split
from as2d.runtime.drafter import DrafterProcess, start_drafter
from as2d.runtime.drafts import stored_drafts
from as2d.runtime.prepared import PreparedEncodings, prepared_encodings
from as2d.target import Request, TargetAdapter
from as2d.timestamps import AligningTarget, forced_words, segments_of, window_words
from as2d.types import SAMPLE_RATE, RunStats, Segment, Window, WindowResult
from as2d.writers import FileResult

DRAFTER_LOAD_S = 120.0  # the most a Transcriber waits for its drafter's model to load
AudioInput = str | Path | np.ndarray | Iterable[np.ndarray]  # see `load.iter_audio_blocks`
FILE_ERRORS = (AudioError, OSError, ValueError)  # fail one file of a batch; the rest go on


def file_failure(file: str, err: BaseException) -> str:
    """The one line that reports a file's failure, naming the file."""
    return str(err) if isinstance(err, AudioError) else f"{file}: {err}"


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
        shared_target: TargetAdapter[Any] | None = None,
        *,
        drafter_process: DrafterProcess | None = None,
        spawn_drafter: bool = True,
        warm: bool = True,
        **overrides: object,
    ) -> None:
        """Loads `options.target`, or decodes with `shared_target` (already loaded, of that
        name: a benchmark shares one target between configurations run one at a time).

        `drafter_process`: the process of `drafter_spec(options)`, already started (the
        command line starts it before importing torch, so that both load side by side); the
        Transcriber owns it from then on. `spawn_drafter=False`: no drafter process, even for
        as2d, which then decodes every window as `DraftGate`'s refused ones (a command whose
        recordings are all too short for drafting to pay, `gate.drafting_may_pay`).
        `warm`: run `warm_up` now and wait for the drafter's model, so that the first
        recording's timing leaves out first calls and loading; a one-off command saves both
        without it (the target starts alone, and the drafter joins once loaded), except
        before a cost not measured yet on this machine is measured.

        Whatever fails here (a bad option or model, Ctrl-C) closes what was started and sets
        the thread count back, as `close` does, before it raises.
        """
        self._threads_before: int | None = None  # `close` sets the target's back to it
        self._drafter = drafter_process  # owned from here on: `close` stops it
        try:
            self.options = options or Options(**overrides)  # type: ignore[arg-type]
            self._check_family(shared_target)
            target_threads, drafter_threads = thread_split(self.options)
            if not spawn_drafter:  # the drafter's cores are the target's
                threads = self.options.threads or target_threads + drafter_threads
                target_threads, drafter_threads = threads, 0
            self.threads, self.drafter_threads = target_threads, drafter_threads
            # Started before the target loads, so that the drafter's model loads meanwhile.
            if self._drafter is None and spawn_drafter:
                self._drafter = start_drafter(drafter_spec(self.options))
            o = self.options
            self.target = shared_target or load_target(
                o.target, o.device, torch_dtype(o.dtype), o.runtime
            )
            self.backend = self.target.backend
            self._threads_before = self.backend.threads()
            self.backend.set_threads(target_threads)
            self.tokenizer = self.target.tokenizer
            self.rule = rule(o, self.backend.bound)
            # Warm-up passes keep first calls out of timings: the runs' (`warm`), and the costs
            # that speculative methods measure on first use; a one-off run with costs cached
            # skips them.
            encoded = self.warm_up() if warm else None
            if warm:  # the drafter's model loads outside any run's timing
                self._wait_for_drafter()

            def before_measuring() -> Any:  # the drafter shares the machine: loaded first
                self._wait_for_drafter()
                return self.warm_up() if encoded is None else encoded

            self._factory = DecoderFactory(
                o, self.target, (target_threads, drafter_threads), before_measuring
            )
            self.decoder: WindowDecoder = self._factory.decoder(self._drafter)
            self._policies: dict[int | None, BudgetPolicy] = {}  # `set_budget`'s, by budget
            self._aligner: WhisperTarget | None = None  # times a chat target's words
        except BaseException:
            self.close()
            raise

    def windower(self) -> SpeechWindower:
        """A recording's windows as `options.endpoint_ms` cuts them."""
        endpoint_ms = self.options.endpoint_ms
        return SpeechWindower(endpoint_s=None if endpoint_ms is None else endpoint_ms / 1000)

    def _wait_for_drafter(self) -> None:
        if self._drafter is not None:
            self._drafter.wait_ready(DRAFTER_LOAD_S)

    def _check_family(self, shared_target: TargetAdapter[Any] | None) -> None:
        """Raises ValueError, one line, for options this target's family cannot run."""
        check(self.options)
        if shared_target is None:  # a target loaded already is on this machine
            check_target(self.options)  # a language or task the target cannot decode
        o = self.options
        family = type(shared_target) if shared_target else adapter_class(o.target, o.runtime)
        if self.options.task == "ask" and not family.follows_requests:
            raise ValueError(
                f"target {self.options.target} cannot follow requests: ask needs an audio LLM "
                "target (Qwen2-Audio, Qwen2.5-Omni)"
            )
        _check_timing(self.options.timestamps, self.options.task, family.times_words)
        if self.options.method == "sd" and family is not WhisperTarget:
            raise ValueError("sd drafts with a Whisper model and needs a Whisper target")

    def __enter__(self) -> Transcriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stops the drafter process, if any, and sets the target's thread count back to what it
        was before this Transcriber set its own (a caller's settings outlive it)."""
        if self._drafter is not None:
            self._drafter.close()
        if self._threads_before is not None:
            self.backend.set_threads(self._threads_before)
            self._threads_before = None

    def warm_up(self) -> Any:
        """Encoder, prefill and decoder passes of 1 and 8 tokens, so timings exclude first calls."""
        encoded = self.target.encode(np.zeros(SAMPLE_RATE, dtype=np.float32))
        self.target.prefill(encoded, self._prompt(encoded, self.options.language or "en"))
        eot = min(self.target.eot_ids)
        self.target.forward([eot])
        self.target.forward([eot] * 8)
        return encoded

    def transcribe(
        self,
        audio: AudioInput,
        language: str | None = None,
        task: str | None = None,
        request: str | None = None,
        previous: str | None = None,
        timestamps: str | None = None,
    ) -> Transcription:
        """Decode every speech window of `audio`: a path, 16 kHz mono float32 samples, or an
        iterable of such blocks (a live source, `audio/stream.py`), consumed as they come:
        each window is yielded once its audio has arrived, and only one window's audio is
        held, however long the stream.

        `language`: this recording's, where `options.language` is None (else detected).
        `task` ("transcribe", "translate", "ask") and `request` (for "ask"): this recording's,
        where they are not the options' (a server answers every kind of request with one
        target). `previous`: text said before the audio, which every window is conditioned
        on (Whisper targets; `Request.previous`). `timestamps`: "none", "segment" or "word"
        for this recording, where not `options.timestamps` (`WindowResult.segments`).
        """
        o = self.options
        task = task or o.task
        text = (request or o.request) if task == "ask" else None
        asked = Request(task, o.language or language, text, previous)
        if task == "ask" and not (self.target.follows_requests and asked.text):
            raise ValueError(
                f"{o.target} cannot answer requests" if asked.text else "ask needs a request"
            )
        if previous and not self.target.takes_previous:
            raise ValueError(f"{o.target} takes no prompt of earlier text (Whisper targets do)")
        timestamps = timestamps or o.timestamps
        _check_timing(timestamps, task, self.target.times_words)
        run = Transcription(iter([]))
        run.windows = self._decode_windows(audio, run, asked, timestamps)
        return run

    def transcribe_file(
        self,
        file: str,
        previous: str | None = None,
        on_window: Callable[[WindowResult], object] | None = None,
        audio: AudioInput | None = None,
    ) -> FileResult:
        """One file decoded whole, as the command line writes it (`writers.render`);
        `on_window` is called as each window finishes (progress). `audio`: what is decoded,
        where it is not `file` itself (standard input's blocks), which then only names it."""
        run = self.transcribe(file if audio is None else audio, previous=previous)
        for window in run:
            if on_window is not None:
                on_window(window)
        o = self.options
        return FileResult(file, o.method, o.target, o.drafter_used, run.results, run.stats)

    @property
    def drafter(self) -> DrafterProcess | None:
        """The drafter process (as2d), or None."""
        return self._drafter

    def set_budget(self, budget: int | None) -> None:
        """Decodes from now on with budget k (None: auto), with the same target and drafter
        process (as2d, pld): a benchmark runs several budgets on one drafter. A budget used
        before gets its policy back, with what it learnt."""
        if not isinstance(self.decoder, SpeculativeDecoder):
            raise ValueError(f"method {self.options.method} has no budget to change")
        self._policies.setdefault(self.options.budget, self.decoder.policy)
        if budget not in self._policies:
            self._policies[budget] = self._factory.budget_policy(budget)
        self.decoder.policy = self._policies[budget]
        self.options = replace(self.options, budget=budget)

    def forget(self) -> None:
        """Earlier recordings' output is no longer looked up for candidates (by default each
        recording's windows look up every earlier one's; a benchmark repeats recordings)."""
        self.decoder.forget()

    def _decode_windows(
        self, audio: AudioInput, run: Transcription, asked: Request, timestamps: str
    ) -> Iterator[WindowResult]:
        start = time.perf_counter()
        tokens = 0
        request_tokens = self.tokenizer.encode(asked.text) if asked.text else []
        speculative = self.decoder if isinstance(self.decoder, SpeculativeDecoder) else None
        if speculative is not None:  # drafts made before, if stored
            spec_options = replace(self.options, language=asked.language, task=asked.task)
            speculative.stored = stored_drafts(spec_options, audio)
            speculative.language = asked.language
            speculative.ahead = isinstance(audio, (str, Path, np.ndarray))  # not a live source
        prepared = self.prepared(audio)
        windower = self.windower()
        # `windows` reads any source that `iter_audio_blocks` reads, blocks included
        for window in self.decoder.windows(windower.windows(audio)):  # type: ignore[arg-type]
            result, asked = self.decode_window(window, asked, request_tokens, timestamps, prepared)
            tokens += len(result.token_ids)
            yield result
        run.finished = RunStats.since(
            start, time.perf_counter(), windower.received_s, tokens,
            self.decoder.activity(), asked.language,
        )  # fmt: skip

    def decode_window(
        self,
        window: Window,
        asked: Request,
        request_tokens: Sequence[int] = (),
        timestamps: str = "none",
        prepared: PreparedEncodings | None = None,
    ) -> tuple[WindowResult, Request]:
        """Decode one window; returns its result and `asked` with its language (detected if
        None). `request_tokens`: the request's, for prompt lookup. `timestamps` "segment" or
        "word": the result's segments, timed after decoding (`align_s`, not in `decode_s`).
        `prepared`: the recording's encoder outputs stored ahead; a window found there skips
        the encoder (`encode_s` is then the time to read it)."""
        t0 = time.perf_counter()
        decoder = self.decoder
        with decoder.lend_cores(window) as loan:
            encoded = prepared.get(window) if prepared is not None else None
            if encoded is None:  # not prepared, or stale: computed as without the store
                encoded = self.target.encode(window.audio, loan.take if loan else None)
            asked = replace(asked, language=self.target.language(encoded, asked.language))
            decoder.prepare(window, asked.language)  # sd: the drafter's encoder forward
        t1 = synced_clock(self.backend)
        prompt = self.target.prompt(encoded, asked)
        token_ids, counts = decoder.decode(window, encoded, prompt, self.rule, list(request_tokens))
        t2 = synced_clock(self.backend)
        text = self.tokenizer.decode(token_ids).strip()
        w = window
        result = WindowResult(
            w.index, w.start, w.end, text, token_ids, t1 - t0, t2 - t1, **asdict(counts)
        )
        result.started_at = t0
        if timestamps != "none":
            with_words = timestamps == "word"  # else segments only: no word probabilities
            result.segments = self._segments(window, prompt, result, asked.language, with_words)
            result.align_s = synced_clock(self.backend) - t2
        return result, asked

    def prepared(self, audio: object, create: bool = False) -> PreparedEncodings | None:
        """The store of `audio`'s encoder outputs computed ahead for this target (a file,
        `options.prepared` "auto"), else None. Preparation saves through the same object
        (`create`: the store is made if missing)."""
        o = self.options
        if o.prepared == "off" and not create:
            return None
        return prepared_encodings(audio, self.target, o.target, self.threads, o.drafts_dir, create)

    def _segments(
        self,
        window: Window,
        prompt: Sequence[int],
        result: WindowResult,
        language: str | None,
        with_words: bool,
    ) -> list[Segment]:
        """The window's segments: timed by the target's own cross-attention (Whisper), else
        its text forced through a Whisper aligner's (`forced_words`: approximate)."""
        if self.target.times_words:
            target = cast(AligningTarget, self.target)
            words = window_words(target, window, prompt, result.token_ids, language, with_words)
            return segments_of(words, with_words)
        if self._aligner is None:
            self._aligner = WhisperTarget.load(aligner_name(self.options, language))
        words = forced_words(self._aligner, window, result.text, language, with_words)
        return segments_of(words, with_words, approximate=True)

    def _prompt(self, encoded: Any, language: str | None) -> list[int]:
        """The target family's prompt for this window, in the options' task and request."""
        o = self.options
        return self.target.prompt(encoded, Request(o.task, language, o.request))


def _check_timing(timestamps: str, task: str, times_words: bool) -> None:
    """Raises ValueError, one line, for timestamps that cannot be had: a chat target's times
    come from forcing its transcript through a Whisper aligner, and need one."""
    check_timestamps(timestamps)
    if timestamps != "none" and not has_transcript_to_time(task, times_words):
        raise ValueError(f"timestamps time a transcript; task {task!r} gives none to time")


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
