"""Benchmark AS²D against target-only decoding: throughput, losslessness, quality, memory.

One run, interleaved: every configuration is loaded once and kept alive; for each
recording every configuration decodes it in turn, in an order that rotates from one
recording to the next, after a warm-up pass that is thrown away (DESIGN.md: "the
comparison is made in one run, interleaved, after warm-up"). Before each measured
decode the script waits until every drafter process is idle (no CPU used), so only the
configuration being measured has work: an idle drafter process sleeps, a busy one would
steal a core. Each configuration starts every recording with an empty history (the
`HistoryLookup` of earlier output is reset): the bench recordings repeat phrases across
files, and the target's own earlier output would otherwise be replayed as drafts.

Configurations (whisper-base target by default): target-only with 1 and 2 threads (the
best by pooled throughput is the baseline, both are reported), and `as2d` for each
drafter x thread split (target threads + drafter threads) x budget.

Measures, per window and pooled per configuration: output tokens, encode_s, decode_s,
wall (per window: encode_s + decode_s; per recording: the run's wall_s, audio decoding
and VAD included), pooled end-to-end throughput (tokens / wall) and decode-phase
throughput (tokens / sum of decode_s), speedups over the best target-only, share of
windows slower than it, mean accepted tokens per verify pass, share of plain steps,
drafter busy seconds, identical tokens to target-only (same thread count) for every
window, WER against the references. Peak memory of target + drafter processes is
measured in a fresh process per configuration (`--memory-probe`), sampled from /proc;
`--memory-hour` checks that memory stays flat over a >= 60 min recording.

Outputs (`--out DIR`): report.md (the tables also printed on stdout), results.jsonl
(one row per window x configuration x repeat), summary.json, speedups.png, and
timelines/ (one picture per as2d configuration and recording, first repeat).

Example:
    .venv/bin/python scripts/bench_as2d.py --quick --out bench-out/quick
    .venv/bin/python scripts/bench_as2d.py --out bench-out/full        # builds the set if missing
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from as2d.api import Options, Transcriber
from as2d.audio.load import audio_duration, load_audio
from as2d.drafting.sources import HistoryLookup
from as2d.eval.metrics import wer
from as2d.eval.timeline import plot_timeline, recording_timeline
from as2d.types import SAMPLE_RATE, WindowResult

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "data-cache" / "bench" / "manifest.jsonl"
QUICK_AUDIO = REPO / "tests" / "data" / "long_en.flac"  # 112 s, reference in long_en.txt
WARM_UP_S = 60.0  # the discarded first pass decodes this much of the shortest recording
IDLE_TICKS = 1  # children are idle when they used at most this many clock ticks ...
IDLE_PERIOD_S = 0.3  # ... over this long
IDLE_TIMEOUT_S = 60.0
DRAFTER_READY_TIMEOUT_S = 300.0
MEMORY_PERIOD_S = 0.2  # /proc sampling period of the memory probe
HOUR_MARKS_MIN = (10.0, 30.0, 60.0)  # --memory-hour: memory reported at these audio minutes
HOUR_MIN = 61.0  # the long recording's length (a little over the last mark)
MB = 1 << 20
TICKS_PER_S = os.sysconf("SC_CLK_TCK")  # /proc CPU times are in these ticks
QUIET_CORES = 0.3  # other processes using less than this many cores: the machine is quiet
QUIET_POLL_S = 4.0


# ---------------------------------------------------------------- configurations


@dataclass(frozen=True)
class Config:
    """One way to decode, compared against the others."""

    name: str
    method: str  # "target" or "as2d"
    threads: int  # the target's torch threads
    drafter: str | None = None
    drafter_threads: int = 0
    budget: int | None = None  # None: auto

    @property
    def budget_label(self) -> str:
        if self.method == "target":
            return "-"
        return "auto" if self.budget is None else str(self.budget)

    def options(self, target: str, language: str | None) -> Options:
        return Options(
            target=target,
            method=self.method,
            language=language,
            drafter=self.drafter or "whisper-tiny.en",
            budget=self.budget,
            threads=self.threads,
            drafter_threads=self.drafter_threads or None,
        )


def build_configs(
    target_threads: Sequence[int],
    drafters: Sequence[str],
    splits: Sequence[tuple[int, int]],
    budgets: Sequence[int | None],
) -> list[Config]:
    """Target-only per thread count, then as2d per drafter x split x budget."""
    configs = [Config(f"target {t}t", "target", t) for t in target_threads]
    for drafter in drafters:
        for t, d in splits:
            for k in budgets:
                name = f"as2d {drafter} {t}+{d} k={'auto' if k is None else k}"
                configs.append(Config(name, "as2d", t, drafter, d, k))
    return configs


def parse_split(text: str) -> tuple[int, int]:
    """ "2+1" -> (2, 1): target threads + drafter threads."""
    target, drafter = text.split("+")
    return int(target), int(drafter)


def parse_budget(text: str) -> int | None:
    return None if text == "auto" else int(text)


# ---------------------------------------------------------------- recordings


@dataclass(frozen=True)
class Recording:
    """One benchmark recording and its reference transcript."""

    audio: Path
    text: str
    language: str
    duration_s: float

    @property
    def name(self) -> str:
        return self.audio.stem


def load_manifest(path: Path) -> list[Recording]:
    """Recordings listed in a manifest.jsonl ({"audio", "text", "language"} per line)."""
    recordings = []
    for line in path.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            audio = path.parent / entry["audio"]
            duration = audio_duration(str(audio))
            recordings.append(Recording(audio, entry["text"], entry["language"], duration))
    return recordings


def quick_recordings() -> list[Recording]:
    text = QUICK_AUDIO.with_suffix(".txt").read_text().strip()
    return [Recording(QUICK_AUDIO, text, "en", audio_duration(str(QUICK_AUDIO)))]


def ensure_manifest(path: Path) -> None:
    """Builds the default bench set with scripts/make_bench_set.py when it is missing."""
    if path.exists():
        return
    if path != MANIFEST:
        raise SystemExit(f"manifest {path} not found")
    log(f"{path} is missing: building it with scripts/make_bench_set.py (a few minutes)")
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_bench_set.py")], check=True)


# ---------------------------------------------------------------- processes: idle and memory


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: fields 3.. (state, ppid, ..., utime, stime)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def child_pids() -> list[int]:
    """Processes whose parent is this one (drafters and multiprocessing's resource tracker)."""
    me, pids = os.getpid(), []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if int(_stat_fields(int(entry.name))[1]) == me:
                    pids.append(int(entry.name))
            except (OSError, IndexError):
                continue
    return pids


def children_cpu_ticks() -> int:
    """User + system CPU clock ticks used so far by the live child processes."""
    total = 0
    for pid in child_pids():
        try:
            fields = _stat_fields(pid)
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        except (OSError, IndexError):
            continue
    return total


def wait_children_idle() -> float:
    """Waits until no child process uses CPU; returns the seconds waited."""
    start = time.perf_counter()
    before = children_cpu_ticks()
    while time.perf_counter() - start < IDLE_TIMEOUT_S:
        time.sleep(IDLE_PERIOD_S)
        now = children_cpu_ticks()
        if now - before <= IDLE_TICKS:
            break
        before = now
    return time.perf_counter() - start


def machine_busy_ticks() -> int:
    """Clock ticks all CPUs spent busy so far (/proc/stat: user, nice, system, irq, softirq)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = map(int, fields[:7])
    return user + nice + system + irq + softirq


def own_ticks() -> int:
    """Clock ticks used so far by this process and its live children (the drafters)."""
    me = _stat_fields(os.getpid())
    return int(me[11]) + int(me[12]) + children_cpu_ticks()


class OthersCpu:
    """CPU used by processes outside this benchmark, in cores, between `start` and `cores`."""

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        self._t, self._busy, self._own = time.perf_counter(), machine_busy_ticks(), own_ticks()

    def cores(self) -> float:
        """Average cores busy with other processes since `start` (1.0: one core's worth)."""
        ticks = machine_busy_ticks() - self._busy - (own_ticks() - self._own)
        return max(0.0, ticks / TICKS_PER_S / max(time.perf_counter() - self._t, 1e-6))


def wait_quiet(max_wait_s: float) -> float:
    """Waits (at most `max_wait_s`) until other processes use under QUIET_CORES for a second.

    Returns the other processes' cores measured last (what the run starts with).
    """
    deadline = time.perf_counter() + max_wait_s
    while True:
        probe = OthersCpu()
        time.sleep(1.0)
        others = probe.cores()
        if others < QUIET_CORES or time.perf_counter() >= deadline:
            return others
        time.sleep(QUIET_POLL_S)


def _status_kb(pid: int, key: str) -> int:
    """A "key: N kB" line of /proc/PID/status (VmRSS, VmHWM), in kB; 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss_kb(pid: int) -> int:
    """Proportional set size (shared pages split between their users), in kB; 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass
class MemorySample:
    """Memory of this process (the target) and its children (the drafter) at one moment, MB."""

    target_rss: float
    drafter_rss: float
    total_pss: float  # PSS of both: shared pages counted once

    @property
    def total_rss(self) -> float:
        return self.target_rss + self.drafter_rss


def sample_memory() -> MemorySample:
    children = child_pids()
    me = os.getpid()
    return MemorySample(
        _status_kb(me, "VmRSS") / 1024,
        sum(_status_kb(p, "VmRSS") for p in children) / 1024,
        sum(_pss_kb(p) for p in [me, *children]) / 1024,
    )


class MemorySampler:
    """Samples `sample_memory` on a background thread; keeps the peaks (sum of RSS, PSS)."""

    def __init__(self, period_s: float = MEMORY_PERIOD_S) -> None:
        self.period_s = period_s
        self.peak = MemorySample(0.0, 0.0, 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._take()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._take()

    def _take(self) -> None:
        s = sample_memory()
        p = self.peak
        if s.total_rss > p.total_rss:
            p.target_rss, p.drafter_rss = s.target_rss, s.drafter_rss
        p.total_pss = max(p.total_pss, s.total_pss)


# ---------------------------------------------------------------- measuring


@dataclass
class RecordingRun:
    """One configuration's decode of one recording."""

    config: str
    recording: str
    repeat: int
    position: int  # place in this recording's rotation of configurations
    wall_s: float
    tokens: int
    windows: list[WindowResult]
    drafter_busy_s: float
    drafter_windows: int  # windows the drafter finished
    drafter_lost: bool
    idle_wait_s: float  # waited for the drafters to go idle (and others to quiet) before it
    load_1min: float  # load average when it started
    others_cores: float  # cores other processes kept busy during the run, on average
    text: str = ""


@dataclass
class Bench:
    """Live transcribers, one per configuration."""

    configs: list[Config]
    transcribers: dict[str, Transcriber] = field(default_factory=dict)
    keep_history: bool = False
    timelines: Path | None = None  # write the first repeat's timelines here
    quiet_wait_s: float = 0.0  # before each run, wait up to this long for other processes

    def close(self) -> None:
        for transcriber in self.transcribers.values():
            transcriber.close()


def load_bench(
    configs: list[Config], target: str, language: str | None, keep_history: bool
) -> Bench:
    """Loads (and warms up) every configuration, and waits for their drafters to be ready."""
    bench = Bench(configs, keep_history=keep_history)
    for config in configs:
        log(f"loading {config.name}")
        bench.transcribers[config.name] = Transcriber(config.options(target, language))
    for config in configs:
        wait_drafter_ready(bench.transcribers[config.name], config.name)
    return bench


def wait_drafter_ready(transcriber: Transcriber, name: str) -> None:
    spec = transcriber.speculative
    drafter = spec.drafter if spec is not None else None
    deadline = time.perf_counter() + DRAFTER_READY_TIMEOUT_S
    while drafter is not None and drafter.alive and not drafter.ready:
        if time.perf_counter() > deadline:
            raise SystemExit(f"{name}: the drafter did not load in {DRAFTER_READY_TIMEOUT_S} s")
        drafter.poll()
        time.sleep(0.1)
    if drafter is not None and drafter.lost:
        raise SystemExit(f"{name}: drafter lost: {drafter.reason}")


def decode(
    bench: Bench, config: Config, audio: Path | np.ndarray, tag: tuple[str, int, int]
) -> RecordingRun:
    """Decodes one recording with one configuration, alone on the machine (as far as we can)."""
    transcriber = bench.transcribers[config.name]
    started = time.perf_counter()
    wait_children_idle()
    if bench.quiet_wait_s > 0:
        wait_quiet(bench.quiet_wait_s)
    waited = time.perf_counter() - started
    torch.set_num_threads(config.threads)  # process-wide: the last Transcriber built set it
    if not bench.keep_history and transcriber.speculative is not None:
        transcriber.speculative.history = HistoryLookup()  # a fresh history per recording
    load, others = os.getloadavg()[0], OthersCpu()
    run = transcriber.transcribe(audio)
    results = list(run)
    stats = run.stats
    others_cores = others.cores()
    wait_children_idle()  # the drafter's last reports are in
    name, repeat, position = tag
    timeline = recording_timeline(transcriber, results, stats, f"{name}: {config.name}")
    if bench.timelines is not None and repeat == 0 and timeline.drafter:
        bench.timelines.mkdir(parents=True, exist_ok=True)
        plot_timeline(timeline, bench.timelines / f"{_slug(config.name)}--{name}.png")
    return RecordingRun(
        config.name,
        name,
        repeat,
        position,
        stats.wall_s,
        stats.tokens,
        results,
        sum(s.end - s.start for s in timeline.drafter),
        sum(s.finished for s in timeline.drafter),
        stats.drafter is not None and stats.drafter.lost,
        waited,
        load,
        others_cores,
        run.text,
    )


def warm_up(bench: Bench, audio: np.ndarray) -> None:
    """The discarded first pass: every configuration decodes `audio` once."""
    for config in bench.configs:
        log(f"warm-up pass: {config.name}")
        decode(bench, config, audio, ("warm-up", -1, 0))


def rotation(configs: Sequence[Config], shift: int) -> list[Config]:
    """`configs` rotated left by `shift`: each recording starts with a different one."""
    shift %= len(configs)
    return [*configs[shift:], *configs[:shift]]


def measure(bench: Bench, recordings: Sequence[Recording], repeats: int) -> list[RecordingRun]:
    """Every recording x repeat x configuration, interleaved per recording."""
    runs = []
    turn = 0
    for repeat in range(repeats):
        for recording in recordings:
            for position, config in enumerate(rotation(bench.configs, turn)):
                run = decode(bench, config, recording.audio, (recording.name, repeat, position))
                log(
                    f"[{repeat}] {recording.name} {config.name}: {run.tokens} tokens in "
                    f"{run.wall_s:.2f} s ({run.tokens / run.wall_s:.1f}/s), "
                    f"load {run.load_1min:.2f}, others' cores {run.others_cores:.2f}"
                )
                runs.append(run)
            turn += 1
    return runs


# ---------------------------------------------------------------- memory probes


@dataclass
class MemoryProbe:
    """Memory of one configuration in a fresh process, MB (RSS sums double-count shared pages)."""

    config: str
    audio: str
    loaded_rss: float  # target + drafter RSS after loading and warm-up, before decoding
    peak_rss: float  # peak of the sum target RSS + drafter RSS while decoding
    peak_target_rss: float
    peak_drafter_rss: float  # drafter process(es): the drafter and multiprocessing's tracker
    peak_pss: float  # peak proportional set size of both (shared pages counted once)
    marks: list[tuple[float, float]] = field(default_factory=list)  # (audio minutes, RSS MB)
    wall_s: float = 0.0


def memory_probe(config: Config, target: str, audio: Path, marks_min: Sequence[float]) -> None:
    """In a fresh process: load `config`, decode `audio`, print a MemoryProbe as JSON."""
    transcriber = Transcriber(config.options(target, "en"))
    wait_drafter_ready(transcriber, config.name)
    wait_children_idle()
    loaded = sample_memory().total_rss
    todo, marks = list(marks_min), []
    with MemorySampler() as sampler:
        run = transcriber.transcribe(audio)
        for window in run:
            while todo and window.end >= todo[0] * 60:
                marks.append((todo.pop(0), sample_memory().total_rss))
    peak = sampler.peak
    transcriber.close()
    probe = MemoryProbe(
        config.name,
        audio.name,
        loaded,
        peak.total_rss,
        peak.target_rss,
        peak.drafter_rss,
        peak.total_pss,
        marks,
        run.stats.wall_s,
    )
    print(json.dumps(dataclasses.asdict(probe)))


def run_memory_probe(
    config: Config, target: str, audio: Path, marks_min: Sequence[float]
) -> MemoryProbe:
    """Runs `memory_probe` in a child Python (a fresh process holds only this configuration)."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--memory-probe",
        json.dumps(dataclasses.asdict(config)),
        "--target",
        target,
        "--probe-audio",
        str(audio),
        "--marks",
        ",".join(map(str, marks_min)),
    ]
    log(f"memory probe: {config.name} on {audio.name}")
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    fields = json.loads(done.stdout.strip().splitlines()[-1])
    fields["marks"] = [tuple(m) for m in fields["marks"]]
    return MemoryProbe(**fields)


def build_hour_recording(recordings: Sequence[Recording], path: Path) -> Path:
    """A >= HOUR_MIN min FLAC made by repeating the bench recordings (1 s of silence between)."""
    if path.exists() and audio_duration(str(path)) >= HOUR_MIN * 60:
        return path
    log(f"building {path} ({HOUR_MIN:.0f} min)")
    gap = np.zeros(SAMPLE_RATE, np.float32)
    need = int(HOUR_MIN * 60 * SAMPLE_RATE)
    path.parent.mkdir(parents=True, exist_ok=True)
    with sf.SoundFile(path, "w", SAMPLE_RATE, 1, format="FLAC") as out:
        written = 0
        while written < need:
            for recording in recordings:
                audio = load_audio(str(recording.audio))
                for part in (audio, gap):
                    out.write(part)
                    written += len(part)
    return path


# ---------------------------------------------------------------- analysis


@dataclass
class Summary:
    """Pooled figures of one configuration (the median over repeats when there are several)."""

    config: str
    method: str
    threads: int
    drafter: str | None
    drafter_threads: int
    budget: str
    recordings: int
    windows: int
    tokens: int
    wall_s: float
    tokens_per_s: float  # end to end: tokens / wall
    encode_s: float
    decode_s: float
    decode_tokens_per_s: float  # decode phase: tokens / sum of decode_s
    speedup: float  # tokens_per_s over the best target-only's
    decode_speedup: float
    slower_windows: float  # share of windows whose encode_s + decode_s exceeds the baseline's
    accepted_per_verify: float
    plain_share: float  # plain steps / target forwards after the prefill
    drafter_busy_s: float
    drafter_windows: int
    identical_windows: int  # windows with the same tokens as target-only (same threads)
    wer: float
    load_1min: float  # mean load average at the start of its runs
    others_cores: float  # mean cores kept busy by other processes during its runs


def best_target(configs: Sequence[Config], runs: Sequence[RecordingRun]) -> Config:
    """The target-only configuration with the best pooled throughput (median over repeats)."""
    targets = [c for c in configs if c.method == "target"]
    return max(targets, key=lambda c: statistics.median(_pooled_rates(c.name, runs)))


def _pooled_rates(config: str, runs: Sequence[RecordingRun]) -> list[float]:
    repeats = sorted({r.repeat for r in runs})
    rates = []
    for repeat in repeats:
        mine = [r for r in runs if r.config == config and r.repeat == repeat]
        rates.append(sum(r.tokens for r in mine) / sum(r.wall_s for r in mine))
    return rates


def reference_for(config: Config, configs: Sequence[Config], best: Config) -> Config:
    """Whose tokens `config` must reproduce: target-only with the same thread count (a
    different thread count may round differently); target-only itself is checked against
    the baseline."""
    if config.method == "target":
        return best
    same = [c for c in configs if c.method == "target" and c.threads == config.threads]
    return same[0] if same else best


def _window_map(runs: Sequence[RecordingRun], config: str) -> dict[tuple[str, int], WindowResult]:
    return {(r.recording, w.index): w for r in runs if r.config == config for w in r.windows}


def summarise(
    config: Config,
    runs: Sequence[RecordingRun],
    baseline: Config,
    reference: Config,
    recordings: Sequence[Recording],
) -> Summary:
    """Pooled figures of `config` over `runs` (one repeat)."""
    mine = [r for r in runs if r.config == config.name]
    windows = [w for r in mine for w in r.windows]
    base_windows = _window_map(runs, baseline.name)
    ref_windows = _window_map(runs, reference.name)
    tokens = sum(r.tokens for r in mine)
    wall = sum(r.wall_s for r in mine)
    decode_s = sum(w.decode_s for w in windows)
    base = [r for r in runs if r.config == baseline.name]
    base_rate = sum(r.tokens for r in base) / sum(r.wall_s for r in base)
    base_decode = sum(len(w.token_ids) for w in base_windows.values()) / sum(
        w.decode_s for w in base_windows.values()
    )
    slower, identical = _compare_windows(mine, base_windows, ref_windows)
    verify = sum(w.verify_passes for w in windows)
    plain = sum(w.plain_steps for w in windows)
    refs = {rec.name: rec for rec in recordings}
    return Summary(
        config=config.name,
        method=config.method,
        threads=config.threads,
        drafter=config.drafter,
        drafter_threads=config.drafter_threads,
        budget=config.budget_label,
        recordings=len(mine),
        windows=len(windows),
        tokens=tokens,
        wall_s=wall,
        tokens_per_s=tokens / wall,
        encode_s=sum(w.encode_s for w in windows),
        decode_s=decode_s,
        decode_tokens_per_s=tokens / decode_s,
        speedup=tokens / wall / base_rate,
        decode_speedup=tokens / decode_s / base_decode,
        slower_windows=slower / len(windows),
        accepted_per_verify=sum(w.accepted_tokens for w in windows) / verify if verify else 0.0,
        plain_share=plain / (plain + verify) if plain + verify else 1.0,
        drafter_busy_s=sum(r.drafter_busy_s for r in mine),
        drafter_windows=sum(r.drafter_windows for r in mine),
        identical_windows=identical,
        wer=wer([refs[r.recording].text for r in mine], [r.text for r in mine], "en"),
        load_1min=statistics.mean(r.load_1min for r in mine),
        others_cores=statistics.mean(r.others_cores for r in mine),
    )


def _compare_windows(
    runs: Sequence[RecordingRun],
    baseline: dict[tuple[str, int], WindowResult],
    reference: dict[tuple[str, int], WindowResult],
) -> tuple[int, int]:
    """(windows slower than the baseline's, windows with the reference's exact tokens)."""
    slower = identical = 0
    for r in runs:
        for w in r.windows:
            b = baseline.get((r.recording, w.index))
            slower += b is not None and w.encode_s + w.decode_s > b.encode_s + b.decode_s
            ref = reference.get((r.recording, w.index))
            identical += ref is not None and ref.token_ids == w.token_ids
    return slower, identical


def median_summary(summaries: Sequence[Summary]) -> Summary:
    """Field-wise median of one configuration's per-repeat summaries (numbers only)."""
    first = summaries[0]
    values = {}
    for f in dataclasses.fields(Summary):
        value = getattr(first, f.name)
        if isinstance(value, float):
            value = statistics.median(getattr(s, f.name) for s in summaries)
        elif isinstance(value, int):
            value = statistics.median_low(getattr(s, f.name) for s in summaries)
        values[f.name] = value
    return Summary(**values)


def summaries(
    configs: Sequence[Config], runs: Sequence[RecordingRun], recordings: Sequence[Recording]
) -> tuple[Config, list[Summary]]:
    """The baseline, and every configuration's summary (median over repeats)."""
    best = best_target(configs, runs)
    out = []
    for config in configs:
        reference = reference_for(config, configs, best)
        per_repeat = [
            summarise(config, [r for r in runs if r.repeat == repeat], best, reference, recordings)
            for repeat in sorted({r.repeat for r in runs})
        ]
        out.append(median_summary(per_repeat))
    return best, out


# ---------------------------------------------------------------- output


@dataclass
class WindowRow:
    """One line of results.jsonl: one window of one configuration's run."""

    config: str
    recording: str
    repeat: int
    position: int
    window: int
    start: float
    end: float
    tokens: int
    encode_s: float
    decode_s: float
    wall_s: float  # encode_s + decode_s
    baseline_wall_s: float | None  # the same window under the best target-only
    identical: bool | None  # same tokens as target-only with the same threads
    verify_passes: int
    plain_steps: int
    accepted_tokens: int
    drafted_tokens: int
    load_1min: float  # load average when the run started
    others_cores: float  # cores other processes kept busy during the run
    text: str


def window_rows(
    configs: Sequence[Config], runs: Sequence[RecordingRun], best: Config
) -> Iterator[WindowRow]:
    by_name = {c.name: c for c in configs}
    for run in runs:
        reference = reference_for(by_name[run.config], configs, best)
        same_repeat = [r for r in runs if r.repeat == run.repeat]
        base = _window_map(same_repeat, best.name)
        ref = _window_map(same_repeat, reference.name)
        for w in run.windows:
            b, f = base.get((run.recording, w.index)), ref.get((run.recording, w.index))
            yield WindowRow(
                run.config,
                run.recording,
                run.repeat,
                run.position,
                w.index,
                w.start,
                w.end,
                len(w.token_ids),
                w.encode_s,
                w.decode_s,
                w.encode_s + w.decode_s,
                b.encode_s + b.decode_s if b is not None else None,
                f.token_ids == w.token_ids if f is not None else None,
                w.verify_passes,
                w.plain_steps,
                w.accepted_tokens,
                w.drafted_tokens,
                run.load_1min,
                run.others_cores,
                w.text,
            )


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def main_table(results: Sequence[Summary], baseline: str) -> str:
    header = [
        "configuration", "tokens", "wall s", "tok/s", "speedup", "decode s", "decode tok/s",
        "decode speedup", "slower windows", "acc/verify", "plain steps", "drafter busy s",
        "identical", "WER %", "others' cores",
    ]  # fmt: skip
    rows = [
        [
            f"**{s.config}** (baseline)" if s.config == baseline else s.config,
            s.tokens,
            f"{s.wall_s:.1f}",
            f"{s.tokens_per_s:.1f}",
            f"{s.speedup:.2f}x",
            f"{s.decode_s:.1f}",
            f"{s.decode_tokens_per_s:.1f}",
            f"{s.decode_speedup:.2f}x",
            f"{100 * s.slower_windows:.0f} %",
            f"{s.accepted_per_verify:.2f}" if s.method != "target" else "-",
            f"{100 * s.plain_share:.0f} %" if s.method != "target" else "-",
            f"{s.drafter_busy_s:.1f}" if s.drafter else "-",
            f"{s.identical_windows}/{s.windows}",
            f"{100 * s.wer:.2f}",
            f"{s.others_cores:.2f}",
        ]
        for s in results
    ]
    return table(header, rows)


def recording_table(
    configs: Sequence[Config], runs: Sequence[RecordingRun], recordings: Sequence[Recording]
) -> str:
    """End-to-end tokens/s per recording (median over repeats), one column per recording."""
    header = ["configuration", *(f"{r.name} ({r.duration_s:.0f} s)" for r in recordings)]
    rows = []
    for config in configs:
        cells = []
        for rec in recordings:
            mine = [r for r in runs if r.config == config.name and r.recording == rec.name]
            cells.append(f"{statistics.median(r.tokens / r.wall_s for r in mine):.1f}")
        rows.append([config.name, *cells])
    return table(header, rows)


def window_table(configs: Sequence[Config], runs: Sequence[RecordingRun], baseline: Config) -> str:
    """Per window: the baseline's encode_s + decode_s, and each configuration's speedup on it."""
    walls: dict[tuple[str, str, int], list[float]] = {}
    tokens: dict[tuple[str, int], int] = {}
    for run in runs:
        for w in run.windows:
            walls.setdefault((run.config, run.recording, w.index), []).append(
                w.encode_s + w.decode_s
            )
            tokens[(run.recording, w.index)] = len(w.token_ids)
    others = [c for c in configs if c.name != baseline.name]
    header = ["recording", "window", "tokens", f"{baseline.name} s", *(c.name for c in others)]
    rows = []
    for (config, recording, index), values in walls.items():
        if config != baseline.name:
            continue
        base = statistics.median(values)
        cells = []
        for c in others:
            mine = walls.get((c.name, recording, index))
            cells.append(f"{base / statistics.median(mine):.2f}x" if mine else "-")
        rows.append([recording, index, tokens[(recording, index)], f"{base:.2f}", *cells])
    return table(header, rows)


def memory_table(probes: Sequence[MemoryProbe], baseline: str) -> str:
    base = next((p for p in probes if p.config == baseline), None)
    header = [
        "configuration", "loaded MB", "peak MB (target+drafter RSS)", "target MB", "drafter MB",
        "peak PSS MB", f"vs {baseline}",
    ]  # fmt: skip
    rows = [
        [
            p.config,
            f"{p.loaded_rss:.0f}",
            f"{p.peak_rss:.0f}",
            f"{p.peak_target_rss:.0f}",
            f"{p.peak_drafter_rss:.0f}",
            f"{p.peak_pss:.0f}",
            f"{p.peak_rss / base.peak_rss:.2f}x" if base else "-",
        ]
        for p in probes
    ]
    return table(header, rows)


def hour_table(probes: Sequence[MemoryProbe]) -> str:
    header = ["configuration", *(f"RSS MB at {m:.0f} min" for m in HOUR_MARKS_MIN), "peak MB"]
    rows = [[p.config, *(f"{mb:.0f}" for _, mb in p.marks), f"{p.peak_rss:.0f}"] for p in probes]
    return table(header, rows)


def plot_speedups(results: Sequence[Summary], baseline: str, path: Path) -> None:
    """Grouped bars: end-to-end and decode-phase speedup of each configuration."""
    from matplotlib.figure import Figure

    shown = [s for s in results if s.config != baseline]
    fig = Figure(figsize=(max(6.0, 1.1 * len(shown) + 2), 4.8), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(shown))
    for offset, attr, label in (
        (-0.2, "speedup", "end to end"),
        (0.2, "decode_speedup", "decode phase"),
    ):
        values = [getattr(s, attr) for s in shown]
        bars = ax.bar(x + offset, values, 0.4, label=label)
        ax.bar_label(bars, [f"{v:.2f}" for v in values], fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, [s.config.replace(" ", "\n", 2) for s in shown], fontsize=7)
    ax.set_ylabel(f"speedup over {baseline}")
    ax.set_title("pooled throughput, as2d vs best target-only (1.0 = baseline)", fontsize=10)
    ax.legend()
    fig.savefig(path, dpi=110)


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in ".-" else "_" for ch in text)


def log(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def machine_line() -> str:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        "unknown CPU",
    )  # fmt: skip
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return (
        f"{len(os.sched_getaffinity(0))} cores ({cpu}), torch {torch.__version__}, commit {commit}"
    )


# ---------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--manifest", type=Path, default=MANIFEST, help="built if the default is missing"
    )
    p.add_argument("--quick", action="store_true", help=f"only {QUICK_AUDIO.relative_to(REPO)}")
    p.add_argument("--target", default="whisper-base")
    p.add_argument("--target-threads", default="1,2", help="target-only thread counts")
    p.add_argument(
        "--drafters", default="whisper-tiny.en,ct2:whisper-tiny.en,ct2:whisper-base",
        help="as2d drafters, comma-separated",
    )  # fmt: skip
    p.add_argument("--splits", default="1+1,2+1", help="target+drafter threads, comma-separated")
    p.add_argument("--budgets", default="auto", help="auto and/or fixed k, comma-separated")
    p.add_argument("--repeats", type=int, default=1, help="passes over the set (medians if > 1)")
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=20.0,
        help="before each run, wait up to this many seconds for other processes to go quiet",
    )
    p.add_argument("--keep-history", action="store_true", help="history lookup across files")
    p.add_argument("--no-memory", action="store_true", help="skip the memory probes")
    p.add_argument("--memory-hour", action="store_true", help="RSS at 10/30/60 min (long)")
    p.add_argument("--out", type=Path, default=REPO / "bench-out" / "as2d")
    # Internal: the memory probe, run in a fresh process.
    p.add_argument("--memory-probe", help=argparse.SUPPRESS)
    p.add_argument("--probe-audio", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--marks", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


@dataclass
class Report:
    """Everything written at the end."""

    command: str
    machine: str
    started: str
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]
    baseline: str
    summaries: list[Summary]
    memory: list[MemoryProbe]
    hour: list[MemoryProbe]
    recordings: list[str]


def render_report(
    report: Report,
    configs: Sequence[Config],
    runs: Sequence[RecordingRun],
    recordings: Sequence[Recording],
) -> str:
    audio_min = sum(r.duration_s for r in recordings) / 60
    lines = [
        f"Reproduce: `{report.command}`",
        "",
        f"# as2d benchmark, {report.started}",
        "",
        f"- machine: {report.machine}",
        f"- load average (1/5/15 min) at start {_load(report.load_start)}, "
        f"at end {_load(report.load_end)}",
        f"- {len(recordings)} recordings, {audio_min:.1f} min of audio; "
        f"repeats: {len({r.repeat for r in runs})}; baseline: **{report.baseline}** "
        "(best target-only by pooled throughput)",
        "- wall: per recording, start of the first window to end of the last (audio decoding "
        "and VAD included); decode: prefill + decoder steps; per-window wall (slower windows): "
        "encode_s + decode_s against the same window under the baseline",
        "- identical: windows whose tokens equal target-only with the same target threads "
        "(target-only itself: equal to the baseline's)",
        "- others' cores: CPU kept busy by processes outside the benchmark during its runs, "
        "in cores (from /proc/stat less this process tree); the machine has 2",
        "",
        "## Pooled",
        "",
        main_table(report.summaries, report.baseline),
        "",
        "## End-to-end tokens/s per recording",
        "",
        recording_table(configs, runs, recordings),
    ]
    best = next(c for c in configs if c.name == report.baseline)
    lines += [
        "",
        "## Per window: baseline encode+decode seconds, and each configuration's speedup on it",
        "",
        window_table(configs, runs, best),
    ]
    if report.memory:
        lines += [
            "",
            "## Memory (fresh process per configuration)",
            "",
            memory_table(report.memory, report.baseline),
        ]
    if report.hour:
        lines += ["", "## Memory over a long recording", "", hour_table(report.hour)]
    lines += ["", f"Reproduce: `{report.command}`", ""]
    return "\n".join(lines)


def _load(load: Sequence[float]) -> str:
    return "/".join(f"{x:.2f}" for x in load)


def write_outputs(
    out: Path,
    report: Report,
    configs: Sequence[Config],
    runs: Sequence[RecordingRun],
    recordings: Sequence[Recording],
) -> str:
    out.mkdir(parents=True, exist_ok=True)
    best = next(c for c in configs if c.name == report.baseline)
    with (out / "results.jsonl").open("w") as f:
        for row in window_rows(configs, runs, best):
            f.write(json.dumps(dataclasses.asdict(row)) + "\n")
    (out / "summary.json").write_text(json.dumps(dataclasses.asdict(report), indent=1) + "\n")
    text = render_report(report, configs, runs, recordings)
    (out / "report.md").write_text(text)
    plot_speedups(report.summaries, report.baseline, out / "speedups.png")
    return text


def run_bench(args: argparse.Namespace, command: str) -> str:
    """Loads, warms up, measures, probes memory; writes the outputs; returns report.md."""
    started, load_start = f"{datetime.now():%Y-%m-%d %H:%M}", os.getloadavg()
    log(f"load average at start: {_load(load_start)}")
    if not args.quick:
        ensure_manifest(args.manifest)
    recordings = quick_recordings() if args.quick else load_manifest(args.manifest)
    configs = build_configs(
        [int(t) for t in args.target_threads.split(",")],
        args.drafters.split(",") if args.drafters else [],
        [parse_split(s) for s in args.splits.split(",")],
        [parse_budget(b) for b in args.budgets.split(",")],
    )
    shortest = min(recordings, key=lambda r: r.duration_s)
    bench = load_bench(configs, args.target, "en", args.keep_history)
    try:
        warm_up(bench, load_audio(str(shortest.audio))[: int(WARM_UP_S * SAMPLE_RATE)])
        bench.timelines = args.out / "timelines"
        bench.quiet_wait_s = args.quiet_wait
        runs = measure(bench, recordings, args.repeats)
    finally:
        bench.close()
    best, results = summaries(configs, runs, recordings)
    memory = (
        []
        if args.no_memory
        else [run_memory_probe(c, args.target, shortest.audio, []) for c in configs]
    )
    hour = []
    if args.memory_hour:
        long = build_hour_recording(recordings, REPO / "data-cache" / "bench-hour" / "hour.flac")
        first_as2d = next((c for c in configs if c.method == "as2d"), None)
        hour = [
            run_memory_probe(c, args.target, long, HOUR_MARKS_MIN) for c in [best, first_as2d] if c
        ]
    report = Report(
        command, machine_line(), started, load_start, os.getloadavg(), best.name, results,
        memory, hour, [r.name for r in recordings],
    )  # fmt: skip
    return write_outputs(args.out, report, configs, runs, recordings)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.memory_probe:
        config = Config(**json.loads(args.memory_probe))
        marks = [float(m) for m in args.marks.split(",") if m]
        memory_probe(config, args.target, args.probe_audio, marks)
        return 0
    command = shlex.join([sys.executable, *sys.argv])
    print(f"Reproduce: `{command}`", flush=True)  # first line, even if the run fails
    report = run_bench(args, command)
    print(report.split("\n", 2)[2], end="")  # the report, less its own first line
    return 0


if __name__ == "__main__":
    sys.exit(main())
