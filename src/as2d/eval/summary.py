"""What a benchmark measured: per-window times, every configuration's pooled figures, the
oracle, and summary.json's content (`report.py` writes them out).

Times are per window, encode + decode (`WindowResult.encode_s + decode_s`), the median
over repeats; pooled throughput is total tokens / total of those times, for every
configuration and for the oracle alike, so the figures compare on one footing (reading
the audio file and finding the windows is the same work for every method and is left out;
so are word timings, `--timestamps`, reported apart as `timestamps`).
The baseline is the faster target-only configuration; a window is slower when its time
exceeds the baseline's on the same window. Windows that a speculative configuration decoded
exactly as target-only does (no candidate verified, every step on every core: as2d's gate
kept them from the drafter) are counted apart, since their time differs from the baseline's
by noise alone, and the share slower is also given for the other windows. `identical`
means every window of every repeat has the same tokens as target-only with the same
thread count (else the baseline).
When the recordings belong to subsets (the manifest's "subset"), every subset gets the same
figures on its own windows, against the same baseline.
Runtimes compared side by side (`--runtime torch,mnn`) are figured apart (`by_runtime`): each
configuration against the baseline, target-only and oracle of its own runtime, since another
runtime's target may round to other tokens; summary.json's top-level baseline, oracle and
noise floor are the first runtime's, and `runtimes` has every runtime's.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property

from as2d.eval.bench import BenchRun, RecordingRun, tokens_hash
from as2d.eval.catalog import TARGET_ONLY, Config
from as2d.eval.machine import describe
from as2d.eval.metrics import wer
from as2d.eval.oracle import WindowKey, held_out_oracle, hindsight_oracle, pooled_tokens_per_s

ORACLE_METHOD = "as2d"  # the oracle picks among this method's configurations (+ target-only)
CLEARLY_SLOWER = 1.03  # a window "slower by more than 3 %": above this times the baseline's


@dataclass
class ConfigSummary:
    """One row of summary.json's "configs" (the issue's names first)."""

    method: str
    drafter: str | None
    budget: str  # "-", "auto" or k
    pooled_tokens_per_s: float
    speedup: float  # over the baseline (the faster target-only)
    frac_windows_slower: float
    identical: bool
    wer: float | None  # None without references
    mean_accepted: float  # accepted tokens per verify pass
    name: str
    threads: int | None
    tokens: int
    seconds: float
    frac_windows_alone: float = 0.0  # decoded as target-only decodes them (see the docstring)
    frac_others_slower: float | None = None  # of the other windows, the share slower; None: none
    frac_slower_3pct: float = 0.0  # windows slower than the baseline by more than 3 %
    drafts: str = "live"  # "ready": every draft made before the request
    prepared: bool = False  # the target's encoder output made before the request
    request_s: float = 0.0  # pooled: each recording's median time from request to answer
    preparation_core_s: float = 0.0  # core-seconds of the work made ahead (drafts, encoder)
    runtime: str = "torch"  # what ran the target; speed-up and identity are within it


@dataclass
class RunInfo:
    """How the benchmark was run: the head of summary.json."""

    target: str
    dataset: str
    command: str  # the exact command line, for report.md
    repeats: int
    machine: dict[str, object] = field(default_factory=describe)
    external: list[dict[str, object]] | None = None  # CTranslate2 reference, when run


@dataclass
class Measured:
    """Per-window figures of every configuration."""

    tokens: dict[WindowKey, int]  # the baseline's output tokens per window
    samples: dict[str, dict[WindowKey, list[float]]]  # config name -> window -> per repeat
    baseline: Config

    @cached_property
    def times(self) -> dict[str, dict[WindowKey, float]]:
        """Config name -> window -> seconds, the median over repeats."""
        return _medians(self.samples)

    @cached_property
    def base_rate(self) -> float:
        """The baseline's pooled tokens/s."""
        return pooled_tokens_per_s(self.tokens, self.times[self.baseline.name])


@dataclass
class RuntimePart:
    """One runtime's share of a benchmark: its configurations and runs, their times, and
    their figures against its own baseline."""

    bench: BenchRun  # this runtime's configurations and runs only
    m: Measured
    rows: list[ConfigSummary]

    @property
    def runtime(self) -> str:
        return self.m.baseline.runtime


def by_runtime(bench: BenchRun) -> list[RuntimePart]:
    """Every runtime's figures, in the order of the configurations' runtimes."""
    parts = []
    for part in split_by_runtime(bench):
        m = measured(part)
        parts.append(RuntimePart(part, m, summarise(part, m)))
    return parts


def split_by_runtime(bench: BenchRun) -> list[BenchRun]:
    """`bench` as one BenchRun per runtime, each with that runtime's configurations and runs
    (the recordings and what was made ahead are shared)."""
    runtimes = dict.fromkeys(c.runtime for c in bench.configs)
    return [
        replace(
            bench,
            configs=[c for c in bench.configs if c.runtime == runtime],
            runs=[run for run in bench.runs if run.config.runtime == runtime],
        )
        for runtime in runtimes
    ]


def measured(bench: BenchRun) -> Measured:
    """Per-window times of each configuration of one runtime (`split_by_runtime`); the
    baseline by pooled throughput."""
    samples: dict[str, dict[WindowKey, list[float]]] = {}
    for config in bench.configs:
        mine = samples[config.name] = {}
        for run in sorted(_runs_of(bench, config), key=lambda run: run.repeat):
            for w in run.windows:
                mine.setdefault((run.recording.name, w.index), []).append(w.encode_s + w.decode_s)
    times = _medians(samples)
    cold = [c for c in bench.configs if c.method == TARGET_ONLY and not c.prepared]
    targets = cold or bench.configs[:1]  # the baseline computes its own encoder
    tokens = _tokens(bench, targets[0])
    baseline = max(targets, key=lambda c: pooled_tokens_per_s(tokens, times[c.name]))
    return Measured(_tokens(bench, baseline), samples, baseline)


def _medians(
    samples: dict[str, dict[WindowKey, list[float]]],
) -> dict[str, dict[WindowKey, float]]:
    return {
        name: {key: statistics.median(s) for key, s in mine.items()}
        for name, mine in samples.items()
    }


def summarise(bench: BenchRun, m: Measured) -> list[ConfigSummary]:
    """Every configuration's pooled figures."""
    base_rate = m.base_rate
    rows = []
    for config in bench.configs:
        runs = _runs_of(bench, config)
        windows = [w for run in runs for w in run.windows]
        verify = sum(w.verify_passes for w in windows)
        mine = m.times[config.name]
        rate = pooled_tokens_per_s(m.tokens, mine)
        base = m.times[m.baseline.name]
        slower = {key for key in mine if mine[key] > base[key]}
        clearly = [key for key in mine if mine[key] > CLEARLY_SLOWER * base[key]]
        alone = _decoded_as_target_only(runs) if config.method != TARGET_ONLY else set()
        others = len(mine) - len(alone)
        rows.append(
            ConfigSummary(
                method=config.method,
                drafter=config.drafter,
                budget=config.budget_label,
                pooled_tokens_per_s=rate,
                speedup=rate / base_rate if base_rate > 0 else 0.0,
                frac_windows_slower=len(slower) / len(mine) if mine else 0.0,
                identical=_identical(bench, config, _reference(bench, config, m.baseline)),
                wer=_wer([r for r in runs if r.repeat == 0]),
                mean_accepted=sum(w.accepted_tokens for w in windows) / verify if verify else 0.0,
                name=config.name,
                threads=runs[0].threads if runs else config.threads,
                tokens=sum(m.tokens[key] for key in mine),
                seconds=sum(mine.values()),
                frac_windows_alone=len(alone) / len(mine) if mine else 0.0,
                frac_others_slower=len(slower - alone) / others if others else None,
                frac_slower_3pct=len(clearly) / len(mine) if mine else 0.0,
                drafts="ready" if config.drafts_ready else "live",
                prepared=config.prepared,
                request_s=sum(request_times(runs).values()),
                preparation_core_s=bench.preparation_core_s.get(config.name, 0.0),
                runtime=config.runtime,
            )
        )
    return rows


def request_times(runs: Sequence[RecordingRun]) -> dict[str, float]:
    """Recording -> the median over repeats of its time from request to answer (the whole
    `transcribe`: reading and cutting the audio, every window's encoder and decoding)."""
    walls: dict[str, list[float]] = {}
    for run in runs:
        walls.setdefault(run.recording.name, []).append(run.stats.wall_s)
    return {name: statistics.median(w) for name, w in walls.items()}


def _decoded_as_target_only(runs: Sequence[RecordingRun]) -> set[WindowKey]:
    """The windows that every repeat of a speculative configuration decoded as target-only on
    every core decodes them: no candidate verified, every step taken on every core."""
    plain: dict[WindowKey, bool] = {}
    for run in runs:
        for w in run.windows:
            key = (run.recording.name, w.index)
            alone = w.verify_passes == 0 and w.alone >= w.plain_steps
            plain[key] = plain.get(key, True) and alone
    return {key for key, alone in plain.items() if alone}


def noise_floor(m: Measured) -> float | None:
    """The share of windows on which the baseline is slower than itself by more than 3 %:
    its repeats split in two halves (the earlier and the later), each window's median of one
    half against the other's. What this machine's noise alone makes of "slower by more than
    3 %"; None with a single repeat.

    Example: repeats [1.00, 1.10, 1.00, 1.00] of a window: halves 1.05 against 1.00: slower.
    """
    halves: list[float] = []
    for times in m.samples[m.baseline.name].values():
        if len(times) < 2:
            return None
        half = len(times) // 2
        halves.append(statistics.median(times[:half]) / statistics.median(times[half:]))
    return sum(h > CLEARLY_SLOWER for h in halves) / len(halves) if halves else None


def subset_summaries(parts: Sequence[RuntimePart]) -> dict[str, dict[str, object]]:
    """Per subset (in the order they first appear): its size and every configuration's
    figures on its windows (`summarise`, the whole set's baseline of its runtime), and the
    noise floor (the first runtime's; with several, `runtimes` has each one's); empty without
    subsets."""
    first = parts[0].bench
    subsets = dict.fromkeys(r.subset for r in first.recordings if r.subset is not None)
    result: dict[str, dict[str, object]] = {}
    for subset in subsets:
        narrowed = [_subset(part.bench, part.m, subset) for part in parts]
        part, part_m = narrowed[0]
        baseline_runs = [run for run in _runs_of(part, part_m.baseline) if run.repeat == 0]
        floors = {
            p.runtime: {"noise_floor_slower_3pct": noise_floor(m)}
            for p, (_, m) in zip(parts, narrowed, strict=True)
        }
        result[subset] = {
            "recordings": len(part.recordings),
            "windows": len(part_m.tokens),
            "audio_s": sum(w.end - w.start for run in baseline_runs for w in run.windows),
            "noise_floor_slower_3pct": noise_floor(part_m),
            "configs": [asdict(r) for b, m in narrowed for r in summarise(b, m)],
            **({"runtimes": floors} if len(parts) > 1 else {}),
        }
    return result


def _subset(bench: BenchRun, m: Measured, subset: str) -> tuple[BenchRun, Measured]:
    """`bench` and `m` narrowed to the recordings of `subset`; the baseline stays."""
    recordings = [r for r in bench.recordings if r.subset == subset]
    names = {r.name for r in recordings}
    runs = [run for run in bench.runs if run.recording.name in names]
    samples = {
        config: {key: s for key, s in mine.items() if key[0] in names}
        for config, mine in m.samples.items()
    }
    tokens = {key: n for key, n in m.tokens.items() if key[0] in names}
    return BenchRun(bench.configs, recordings, runs), Measured(tokens, samples, m.baseline)


def summary(bench: BenchRun, parts: Sequence[RuntimePart], info: RunInfo) -> dict[str, object]:
    """summary.json's content: how it was run (`info`) and the figures of every runtime
    (`by_runtime`); the top-level baseline, noise floor and oracle are the first runtime's."""
    first = parts[0]
    oracle, frac = runtime_oracle(first, info.repeats)
    subsets = subset_summaries(parts)
    return {
        **{k: v for k, v in asdict(info).items() if v is not None},
        "audio_s": bench.audio_s,
        "windows": len(first.m.tokens),
        "baseline": first.m.baseline.name,
        "baselines": {part.runtime: part.m.baseline.name for part in parts},
        "noise_floor_slower_3pct": noise_floor(first.m),
        "configs": [asdict(r) for part in parts for r in part.rows],
        **({"runtimes": runtime_figures(parts, info.repeats)} if len(parts) > 1 else {}),
        **({"subsets": subsets} if subsets else {}),
        "oracle": oracle,
        "as2d_auto_frac_of_oracle": frac,
        **({"drafting_s": bench.drafting_s} if bench.drafting_s else {}),
        **({"requests": requests(bench)} if bench.preparation_core_s else {}),
        **({"timestamps": timing} if (timing := timing_costs(bench)) else {}),
    }


def runtime_figures(parts: Sequence[RuntimePart], repeats: int) -> dict[str, dict[str, object]]:
    """Per runtime, side by side: its baseline's pooled tokens/s, the share of windows on
    which its baseline's tokens are the first runtime's baseline's (another runtime may round
    to other tokens), its noise floor, its oracle and as2d auto's share of it."""
    figures: dict[str, dict[str, object]] = {}
    reference = _token_ids(parts[0].bench, parts[0].m.baseline)
    for part in parts:
        mine = _token_ids(part.bench, part.m.baseline)
        same = sum(reference.get(key) == ids for key, ids in mine.items())
        oracle, frac = runtime_oracle(part, repeats)
        figures[part.runtime] = {
            "pooled_tokens_per_s": part.m.base_rate,
            "frac_windows_same_tokens": same / len(mine) if mine else 0.0,
            "noise_floor_slower_3pct": noise_floor(part.m),
            "oracle": oracle,
            "as2d_auto_frac_of_oracle": frac,
        }
    return figures


def runtime_oracle(
    part: RuntimePart, repeats: int
) -> tuple[dict[str, object] | None, float | None]:
    """The hindsight oracle over one runtime's baseline and live as2d configurations (drafted
    while decoding), and the fastest as2d auto's share of it; (None, None) without as2d."""
    m = part.m
    live = [c.name for c in part.bench.configs if c.method == ORACLE_METHOD and not c.drafts_ready]
    if not live:
        return None, None
    candidates = [m.baseline.name, *live]
    best = hindsight_oracle(m.tokens, m.times, candidates)
    oracle: dict[str, object] = {
        "pooled_tokens_per_s": best.pooled_tokens_per_s,
        "speedup": best.pooled_tokens_per_s / m.base_rate if m.base_rate > 0 else 0.0,
        "candidates": candidates,
        "wins": best.wins,
    }
    autos = [r for r in part.rows if r.name in live and r.budget == "auto"]
    auto = max(autos, key=lambda r: r.pooled_tokens_per_s) if autos else None
    frac = None
    if auto and best.pooled_tokens_per_s > 0:
        frac = auto.pooled_tokens_per_s / best.pooled_tokens_per_s
    if auto and repeats > 1:
        oracle |= _held_out(m, candidates, auto.name)
    return oracle, frac


def requests(bench: BenchRun) -> dict[str, object]:
    """Per configuration, each recording's time from request to answer (`request_times`)
    and the core-seconds made ahead for it: what `--prepared` and `--drafts ready` compare."""
    return {
        config.name: {
            "drafts": "ready" if config.drafts_ready else "live",
            "prepared": config.prepared,
            "request_s": request_times(_runs_of(bench, config)),
            "preparation_core_s": bench.preparation_core_s.get(config.name, 0.0),
        }
        for config in bench.configs
    }


def timing_costs(bench: BenchRun) -> dict[str, dict[str, float]]:
    """Per configuration, what timing words cost after decoding (`--timestamps`): seconds
    in all, and as a share of the decode phase's seconds. Empty where nothing was timed."""
    costs: dict[str, dict[str, float]] = {}
    for config in bench.configs:
        windows = [w for run in bench.runs if run.config == config for w in run.windows]
        align, decode = sum(w.align_s for w in windows), sum(w.decode_s for w in windows)
        if align > 0:
            costs[config.name] = {"align_s": align, "decode_s": decode, "share": align / decode}
    return costs


def result_rows(bench: BenchRun) -> list[dict[str, object]]:
    """results.jsonl: one row per window x configuration x repeat."""
    rows: list[dict[str, object]] = []
    for run in bench.runs:
        c = run.config
        for w in run.windows:
            rows.append(
                {
                    "config": c.name,
                    "runtime": c.runtime,
                    "method": c.method,
                    "drafter": c.drafter,
                    "budget": c.budget_label,
                    "recording": run.recording.name,
                    "repeat": run.repeat,
                    "position": run.position,
                    "threads": run.threads,
                    "window": w.index,
                    "start": w.start,
                    "end": w.end,
                    "tokens": len(w.token_ids),
                    "encode_s": w.encode_s,
                    "decode_s": w.decode_s,
                    "wall_s": w.encode_s + w.decode_s,
                    "align_s": w.align_s,
                    "verify_passes": w.verify_passes,
                    "plain_steps": w.plain_steps,
                    "accepted_tokens": w.accepted_tokens,
                    "drafted_tokens": w.drafted_tokens,
                    "tokens_hash": tokens_hash(w.token_ids),
                    "idle_wait_s": run.idle_wait_s,
                }
            )
    return rows


def _held_out(m: Measured, candidates: list[str], auto: str) -> dict[str, float]:
    """The held-out oracle (oracle.held_out_oracle) and as2d auto's share of it, both on
    mean times over the repeats; and auto's share of the best of its own repeats per window.

    The last is the hindsight oracle's luck alone: the oracle over one configuration
    measured again and again; only the machine's noise puts auto's share of it under 100 %.
    """
    rate = held_out_oracle(m.tokens, m.samples, candidates)
    own = m.samples[auto]
    auto_rate = pooled_tokens_per_s(m.tokens, {key: statistics.mean(s) for key, s in own.items()})
    luck = pooled_tokens_per_s(m.tokens, {key: min(s) for key, s in own.items()})
    return {
        "held_out_tokens_per_s": rate,
        "as2d_auto_frac_of_held_out": auto_rate / rate,
        "as2d_auto_frac_of_own_best": auto_rate / luck,
    }


def _runs_of(bench: BenchRun, config: Config) -> list[RecordingRun]:
    return [run for run in bench.runs if run.config == config]


def _tokens(bench: BenchRun, config: Config) -> dict[WindowKey, int]:
    return {
        (run.recording.name, w.index): len(w.token_ids)
        for run in _runs_of(bench, config)
        if run.repeat == 0
        for w in run.windows
    }


def _reference(bench: BenchRun, config: Config, baseline: Config) -> Config:
    """Whose tokens `config` must reproduce: target-only at the same thread count (another
    count may round differently), else the baseline."""
    threads = {run.threads for run in _runs_of(bench, config)}
    same = [
        c
        for c in bench.configs
        if c.method == TARGET_ONLY and not c.prepared and c.threads in threads
    ]
    return same[0] if same else baseline


def _identical(bench: BenchRun, config: Config, reference: Config) -> bool:
    """Every window of every repeat has the reference's tokens (its first repeat)."""
    expected = _token_ids(bench, reference)
    return all(
        expected.get((run.recording.name, w.index)) == w.token_ids
        for run in _runs_of(bench, config)
        for w in run.windows
    )


def _token_ids(bench: BenchRun, config: Config) -> dict[WindowKey, list[int]]:
    """Each window's tokens in `config`'s first repeat."""
    return {
        (run.recording.name, w.index): w.token_ids
        for run in _runs_of(bench, config)
        if run.repeat == 0
        for w in run.windows
    }


def _wer(runs: Sequence[RecordingRun]) -> float | None:
    """Pooled WER over the recordings that have a reference (None if none has)."""
    pairs = [(run.recording, run.text) for run in runs if run.recording.text is not None]
    if not pairs:
        return None
    language = pairs[0][0].language or "en"
    return wer([str(r.text) for r, _ in pairs], [text for _, text in pairs], language)
