"""`as2d bench`: every configuration decodes every recording, in one run, interleaved.

Fairness (DESIGN.md, Concurrency):
- One target model per runtime is loaded and shared by that runtime's configurations (they
  run one at a time; `--runtime torch,mnn` compares runtimes on the same windows);
  configurations that differ only in budget share one drafter process (each keeps its own
  budget policy), loaded before timing: memory grows with drafters, not with budgets.
- Every configuration first decodes a warm-up clip that is not timed.
- Target-only runs at 1 thread and at every core; the faster is the baseline.
- Interleaving is per recording, in an order that rotates from one recording to the
  next. Not per window: an `as2d` drafter runs ahead into later windows of its
  recording, so with per-window turns it would draft for free while other configurations
  are being timed. Per recording, the drafter's look-ahead falls inside its own timing.
  Before each timed decode the drafter processes are left to go idle, and (optionally)
  other processes on the machine to quiet down.
- Each configuration starts every recording with an empty history of earlier output.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from tqdm import tqdm

from as2d.api import AudioInput, Transcriber
from as2d.audio.load import audio_duration, load_audio
from as2d.eval.catalog import Config
from as2d.eval.datasets import Recording
from as2d.eval.machine import wait_children_idle, wait_quiet
from as2d.eval.timeline import Timeline, recording_timeline
from as2d.options import Options, drafter_spec
from as2d.runtime.drafts import AheadDrafter, DraftStore
from as2d.target import TargetAdapter
from as2d.types import SAMPLE_RATE, RunStats, WindowResult

T = TypeVar("T")
SHARED_BUDGETS = ("as2d", "pld")  # methods whose budgets share one Transcriber (`set_budget`)
WARM_UP_S = 20.0  # the untimed first decode of every configuration: this much audio


@dataclass(frozen=True)
class BenchSettings:
    """How a benchmark runs, apart from what it compares (the configurations)."""

    base: Options  # target, language, task; method and drafter come from each Config
    repeats: int = 1
    quiet_wait_s: float = 0.0  # before each timed decode, wait up to this for other processes
    progress: bool = True  # a tqdm bar on stderr


@dataclass
class RecordingRun:
    """One configuration's decode of one recording."""

    config: Config
    recording: Recording
    repeat: int
    position: int  # its place in this recording's rotation of configurations
    threads: int  # the target's torch threads
    windows: list[WindowResult]
    stats: RunStats
    idle_wait_s: float  # waited for drafters to go idle (and others to quiet) before it

    @property
    def text(self) -> str:
        return " ".join(w.text for w in self.windows if w.text)


@dataclass
class BenchRun:
    """Everything measured: runs in the order they were made, and one recording's timeline."""

    configs: list[Config]
    recordings: list[Recording]
    runs: list[RecordingRun] = field(default_factory=list)
    timeline: Timeline | None = None
    audio_s: float = 0.0
    drafting_s: dict[str, float] = field(default_factory=dict)  # drafts made ahead, by drafter
    preparation_core_s: dict[str, float] = field(default_factory=dict)  # work ahead, by config


def run_bench(
    configs: Sequence[Config],
    recordings: Sequence[Recording],
    settings: BenchSettings,
    targets: Mapping[str, TargetAdapter[Any]] | None = None,
) -> BenchRun:
    """Loads every configuration (those of a runtime sharing its target from `targets`, else
    the one their first loads), warms each up, then decodes recordings x repeats x
    configurations, interleaved per recording."""
    bench = BenchRun(list(configs), list(recordings))
    bench.audio_s = sum(audio_duration(r.audio) for r in recordings)
    shown = _timeline_config(configs)
    longest = max(recordings, key=lambda r: audio_duration(r.audio))
    bench.drafting_s = make_drafts_ahead(configs, recordings, settings.base)
    loaded = _load(configs, settings.base, targets, settings.progress)
    try:
        encoding = make_encoders_ahead(loaded, configs, recordings)
        bench.preparation_core_s = _preparation_core_s(configs, settings.base, bench, encoding)
        _warm_up(loaded, configs, longest)
        total = len(recordings) * settings.repeats * len(configs)
        bar = tqdm(total=total, desc="decoding", unit="run", disable=not settings.progress or None)
        with bar:
            for done, run in enumerate(_measure(loaded, bench, settings), 1):
                bar.set_postfix_str(f"{run.recording.name}: {run.config.name}", refresh=False)
                bar.update()
                if settings.progress and not sys.stderr.isatty():  # a log file: a line per run
                    tokens, wall = run.stats.tokens, run.stats.wall_s
                    print(
                        f"[{done}/{total}] {run.recording.name}: {run.config.name}: "
                        f"{tokens} tokens in {wall:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
                bench.runs.append(run)
                if run.config == shown and run.recording == longest and run.repeat == 0:
                    title = f"{longest.name}: {shown.name}"
                    transcriber = loaded.transcribers[shown]
                    bench.timeline = recording_timeline(transcriber, run.windows, run.stats, title)
    finally:
        loaded.close()
    return bench


def _timeline_config(configs: Sequence[Config]) -> Config:
    """The configuration whose timeline is drawn: as2d auto if there, else one with a drafter."""
    ranked = sorted(
        configs, key=lambda c: (c.method != "as2d", c.budget is not None, not c.drafter)
    )
    return ranked[0]


@dataclass
class Loaded:
    """A Transcriber per configuration; configurations that differ only in budget share one
    (one drafter process, not one per budget) and switch it to their budget when used."""

    transcribers: dict[Config, Transcriber] = field(default_factory=dict)
    shared: set[Config] = field(default_factory=set)  # those whose Transcriber is shared

    def use(self, config: Config) -> Transcriber:
        """The transcriber of `config`, on `config`'s budget."""
        transcriber = self.transcribers[config]
        if config in self.shared:
            transcriber.set_budget(config.budget)
        return transcriber

    def close(self) -> None:
        """Closes the transcribers last built first, so the thread count ends as it began."""
        unique = {id(t): t for t in self.transcribers.values()}.values()
        for transcriber in reversed(list(unique)):
            transcriber.close()


def _load(
    configs: Sequence[Config],
    base: Options,
    targets: Mapping[str, TargetAdapter[Any]] | None,
    progress: bool = False,
) -> Loaded:
    """A Transcriber per configuration, one target per runtime (from `targets`, else loaded by
    the runtime's first configuration): a torch target never decodes an MNN configuration."""
    loaded = Loaded()
    by_drafter: dict[Config, Transcriber] = {}  # the configuration less its budget -> shared
    shared = dict(targets or {})  # runtime -> its one target
    try:
        for config in tqdm(configs, desc="loading", unit="config", disable=not progress or None):
            key = replace(config, budget=None)
            transcriber = by_drafter.get(key)
            if transcriber is None:
                options = config.options(base)
                spawn = not config.drafts_ready  # its drafts are stored: no drafter process
                target = shared.get(config.runtime)
                transcriber = Transcriber(options, shared_target=target, spawn_drafter=spawn)
                shared[config.runtime] = transcriber.target  # loaded once per runtime
            if config.method in SHARED_BUDGETS:
                by_drafter[key] = transcriber
                loaded.shared.add(config)
                transcriber.set_budget(config.budget)  # measures an auto budget's costs now
            loaded.transcribers[config] = transcriber
    except BaseException:
        loaded.close()
        raise
    return loaded


def make_drafts_ahead(
    configs: Sequence[Config], recordings: Sequence[Recording], base: Options
) -> dict[str, float]:
    """Drafts every recording for each drafts-ready configuration's drafter into
    `base.drafts_dir`, in this process on every core, before anything is timed; returns the
    seconds each drafter took (the cost paid before the requests)."""
    seconds: dict[str, float] = {}
    for config in configs:
        spec = drafter_spec(config.options(base))
        if not config.drafts_ready or spec is None or spec.name in seconds:
            continue
        assert base.drafts_dir is not None, "drafts-ready configurations need a draft store"
        spec = replace(spec, threads=len(os.sched_getaffinity(0)))
        drafter = AheadDrafter(DraftStore(Path(base.drafts_dir)), spec)
        start = time.perf_counter()
        for recording in recordings:  # in the language its requests will name
            drafter.draft(recording.audio, base.language or recording.language)
        seconds[spec.name] = time.perf_counter() - start
    return seconds


def make_encoders_ahead(
    loaded: Loaded, configs: Sequence[Config], recordings: Sequence[Recording]
) -> dict[str, float]:
    """Runs the target's encoder over every window of every recording for each prepared
    configuration, on its target's thread count (the store's key), into the store beside its
    drafts, before anything is timed; returns each configuration's core-seconds (the encoder's
    seconds x its threads; configurations on one runtime and thread count share one
    preparation)."""
    from as2d.runtime.prepared import prepare

    made: dict[tuple[str, int], float] = {}  # (runtime, threads) -> core-seconds
    core_s: dict[str, float] = {}
    for config in configs:
        if not config.prepared:
            continue
        transcriber = loaded.transcribers[config]
        key = (config.runtime, transcriber.threads)
        if key not in made:
            start = time.perf_counter()
            for recording in recordings:
                prepare(recording.audio, transcriber, None)
            made[key] = (time.perf_counter() - start) * transcriber.threads
        core_s[config.name] = made[key]
    return core_s


def _preparation_core_s(
    configs: Sequence[Config], base: Options, bench: BenchRun, encoding: dict[str, float]
) -> dict[str, float]:
    """Per configuration, the core-seconds of what its requests found made ahead: its
    drafter's drafts (made on every core) and its target's encoder outputs."""
    cores = len(os.sched_getaffinity(0))
    core_s = {}
    for config in configs:
        spec = drafter_spec(config.options(base))
        drafts = bench.drafting_s.get(spec.name, 0.0) * cores if spec and config.drafts_ready else 0
        if config.prepared or config.drafts_ready:
            core_s[config.name] = drafts + encoding.get(config.name, 0.0)
    return core_s


def _warm_up(loaded: Loaded, configs: Sequence[Config], recording: Recording) -> None:
    """Every configuration decodes the first WARM_UP_S of `recording`, untimed."""
    audio = load_audio(recording.audio)[: int(WARM_UP_S * SAMPLE_RATE)]
    for config in configs:
        _decode(loaded.use(config), audio, recording.language)


def _measure(loaded: Loaded, bench: BenchRun, settings: BenchSettings) -> Iterator[RecordingRun]:
    """Every repeat x recording x configuration; the order rotates with each recording."""
    turn = 0
    for repeat in range(settings.repeats):
        for recording in bench.recordings:
            for position, config in enumerate(rotation(bench.configs, turn)):
                started = time.perf_counter()
                wait_children_idle()
                if settings.quiet_wait_s > 0:
                    wait_quiet(settings.quiet_wait_s)
                waited = time.perf_counter() - started
                transcriber = loaded.use(config)
                windows, stats = _decode(transcriber, recording.audio, recording.language)
                yield RecordingRun(
                    config,
                    recording,
                    repeat,
                    position,
                    transcriber.threads,
                    windows,
                    stats,
                    waited,
                )
            turn += 1


def rotation(items: Sequence[T], shift: int) -> list[T]:
    """`items` rotated left by `shift`: each recording starts with a different one.

    Example:
        rotation([a, b, c], 1) -> [b, c, a]
    """
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


def _decode(
    transcriber: Transcriber, audio: AudioInput, language: str | None
) -> tuple[list[WindowResult], RunStats]:
    """One recording (a path or samples) in `language` (unless the run has one), with a fresh
    history, at the config's threads."""
    transcriber.backend.set_threads(transcriber.threads)  # process-wide: set per decode
    transcriber.forget()
    run = transcriber.transcribe(audio, language)
    windows = list(run)
    return windows, run.stats


def tokens_hash(token_ids: Sequence[int]) -> str:
    """A short fingerprint of an output: equal token ids give equal hashes.

    The first 16 hex digits of the SHA-256 of the ids as little-endian int64.
    """
    data = np.asarray(token_ids, dtype=np.int64).tobytes()
    return hashlib.sha256(data).hexdigest()[:16]
