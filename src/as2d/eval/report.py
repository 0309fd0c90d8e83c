"""What a benchmark reports: results.jsonl, summary.json, report.md and plots.

Times are per window, encode + decode (`WindowResult.encode_s + decode_s`), the median
over repeats; pooled throughput is total tokens / total of those times, for every
configuration and for the oracle alike, so the figures compare on one footing (reading
the audio file and finding the windows is the same work for every method and is left out).
The baseline is the faster target-only configuration; a window is slower when its time
exceeds the baseline's on the same window; `identical` means every window of every repeat
has the same tokens as target-only with the same thread count (else the baseline).
When the recordings belong to subsets (the manifest's "subset"), every subset gets the same
figures on its own windows, against the same baseline.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from as2d.eval.bench import BenchRun, RecordingRun, tokens_hash
from as2d.eval.catalog import TARGET_ONLY, Config
from as2d.eval.machine import describe
from as2d.eval.metrics import wer
from as2d.eval.oracle import WindowKey, held_out_oracle, hindsight_oracle, pooled_tokens_per_s
from as2d.eval.plots import plot_cdf, plot_speedups
from as2d.eval.timeline import plot_timeline
from as2d.writers import write_atomic

ORACLE_METHOD = "as2d"  # the oracle picks among this method's configurations (+ target-only)


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


def measured(bench: BenchRun) -> Measured:
    """Per-window times of each configuration; the baseline by pooled throughput."""
    samples: dict[str, dict[WindowKey, list[float]]] = {}
    for config in bench.configs:
        mine = samples[config.name] = {}
        for run in sorted(_runs_of(bench, config), key=lambda run: run.repeat):
            for w in run.windows:
                mine.setdefault((run.recording.name, w.index), []).append(w.encode_s + w.decode_s)
    times = _medians(samples)
    targets = [c for c in bench.configs if c.method == TARGET_ONLY] or bench.configs[:1]
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
    base_rate = pooled_tokens_per_s(m.tokens, m.times[m.baseline.name])
    rows = []
    for config in bench.configs:
        runs = _runs_of(bench, config)
        windows = [w for run in runs for w in run.windows]
        verify = sum(w.verify_passes for w in windows)
        mine = m.times[config.name]
        rate = pooled_tokens_per_s(m.tokens, mine)
        slower = sum(mine[key] > m.times[m.baseline.name][key] for key in mine)
        rows.append(
            ConfigSummary(
                method=config.method,
                drafter=config.drafter,
                budget=config.budget_label,
                pooled_tokens_per_s=rate,
                speedup=rate / base_rate if base_rate > 0 else 0.0,
                frac_windows_slower=slower / len(mine) if mine else 0.0,
                identical=_identical(bench, config, _reference(bench, config, m.baseline)),
                wer=_wer([r for r in runs if r.repeat == 0]),
                mean_accepted=sum(w.accepted_tokens for w in windows) / verify if verify else 0.0,
                name=config.name,
                threads=runs[0].threads if runs else config.threads,
                tokens=sum(m.tokens[key] for key in mine),
                seconds=sum(mine.values()),
            )
        )
    return rows


def subset_summaries(bench: BenchRun, m: Measured) -> dict[str, dict[str, object]]:
    """Per subset (in the order they first appear): its size and every configuration's
    figures on its windows (`summarise`, the whole set's baseline); empty without subsets."""
    subsets = dict.fromkeys(r.subset for r in bench.recordings if r.subset is not None)
    result: dict[str, dict[str, object]] = {}
    for subset in subsets:
        part, part_m = _subset(bench, m, subset)
        baseline_runs = [run for run in _runs_of(part, m.baseline) if run.repeat == 0]
        result[subset] = {
            "recordings": len(part.recordings),
            "windows": len(part_m.tokens),
            "audio_s": sum(w.end - w.start for run in baseline_runs for w in run.windows),
            "configs": [asdict(r) for r in summarise(part, part_m)],
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


def summary(
    bench: BenchRun, m: Measured, rows: Sequence[ConfigSummary], info: RunInfo
) -> dict[str, object]:
    """summary.json's content: how it was run (`info`) and the figures."""
    base_rate = pooled_tokens_per_s(m.tokens, m.times[m.baseline.name])
    candidates = [c.name for c in bench.configs if c.method == ORACLE_METHOD]
    oracle: dict[str, object] | None = None
    frac = None
    if candidates:
        best = hindsight_oracle(m.tokens, m.times, [m.baseline.name, *candidates])
        oracle = {
            "pooled_tokens_per_s": best.pooled_tokens_per_s,
            "speedup": best.pooled_tokens_per_s / base_rate if base_rate > 0 else 0.0,
            "candidates": [m.baseline.name, *candidates],
            "wins": best.wins,
        }
        autos = [r for r in rows if r.method == ORACLE_METHOD and r.budget == "auto"]
        auto = max(autos, key=lambda r: r.pooled_tokens_per_s) if autos else None
        if auto and best.pooled_tokens_per_s > 0:
            frac = auto.pooled_tokens_per_s / best.pooled_tokens_per_s
        if auto and info.repeats > 1:
            oracle |= _held_out(m, [m.baseline.name, *candidates], auto.name)
    subsets = subset_summaries(bench, m)
    return {
        **{k: v for k, v in asdict(info).items() if v is not None},
        "audio_s": bench.audio_s,
        "windows": len(m.tokens),
        "baseline": m.baseline.name,
        "configs": [asdict(r) for r in rows],
        **({"subsets": subsets} if subsets else {}),
        "oracle": oracle,
        "as2d_auto_frac_of_oracle": frac,
    }


def result_rows(bench: BenchRun) -> list[dict[str, object]]:
    """results.jsonl: one row per window x configuration x repeat."""
    rows: list[dict[str, object]] = []
    for run in bench.runs:
        c = run.config
        for w in run.windows:
            rows.append(
                {
                    "config": c.name,
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
                    "verify_passes": w.verify_passes,
                    "plain_steps": w.plain_steps,
                    "accepted_tokens": w.accepted_tokens,
                    "drafted_tokens": w.drafted_tokens,
                    "tokens_hash": tokens_hash(w.token_ids),
                    "idle_wait_s": run.idle_wait_s,
                }
            )
    return rows


def write_outputs(bench: BenchRun, out: Path, info: RunInfo) -> dict[str, object]:
    """Writes results.jsonl, summary.json, report.md and the plots into `out`; the summary."""
    out.mkdir(parents=True, exist_ok=True)
    m = measured(bench)
    rows = summarise(bench, m)
    content = summary(bench, m, rows, info)
    lines = "".join(json.dumps(r) + "\n" for r in result_rows(bench))
    write_atomic(out / "results.jsonl", lines)
    write_atomic(out / "summary.json", json.dumps(content, indent=2) + "\n")
    plot_speedups(rows, m.baseline.name, out / "speedup.png")
    plot_cdf(bench.configs, m, out / "window_speedup_cdf.png")
    if bench.timeline is not None:
        plot_timeline(bench.timeline, out / "timeline.png")
    write_atomic(out / "report.md", render_report(content, rows, bench))
    return content


def render_report(
    content: dict[str, object], rows: Sequence[ConfigSummary], bench: BenchRun
) -> str:
    """report.md: the table, the oracle, how it was run and the exact command."""
    machine = content["machine"]
    assert isinstance(machine, dict)
    lines = [
        f"# as2d bench: {content['target']} on {len(bench.recordings)} recordings",
        "",
        table(rows),
        "",
        _oracle_line(content),
        "",
        "![speed-up](speedup.png) ![per-window speed-up](window_speedup_cdf.png)",
        *subset_table(content),
    ]
    if bench.timeline is not None:
        lines += ["", f"Timeline of {bench.timeline.title}:", "", "![timeline](timeline.png)"]
    lines += ["", *external_table(content)]
    lines += [
        "",
        "## How it was run",
        "",
        f"- Machine: {machine['cpu']}, {machine['cores']} cores, load {machine['load_1min']} "
        f"at start; torch {machine['torch']}, Python {machine['python']}.",
        f"- Dataset `{content['dataset']}`: {len(bench.recordings)} recordings, "
        f"{bench.audio_s / 60:.1f} min of audio, {content['windows']} windows; "
        f"{content['repeats']} repeat(s), per-window times are medians over repeats.",
        f"- Baseline: `{content['baseline']}`, the faster target-only thread count.",
        "- One target model shared by every configuration; each loaded and warmed up "
        "(an untimed decode) before timing.",
        "- Interleaved per recording, in an order rotating from one recording to the next "
        "(not per window: an as2d drafter runs ahead into later windows of its recording, "
        "which would be free drafting while other configurations are timed). Before each "
        "timed decode the drafter processes are left to go idle.",
        "- Time = encode + decode per window; pooled tokens/s = tokens / total time; "
        "`identical`: every window's tokens equal target-only's (same threads).",
        "",
        "```",
        str(content["command"]),
        "```",
        "",
    ]
    return "\n".join(lines)


def table(rows: Sequence[ConfigSummary]) -> str:
    """The summary as a Markdown table."""
    header = (
        "| configuration | tokens/s | speed-up | windows slower | identical | WER % | accepted |"
    )
    lines = [header, "|---|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        error = "-" if r.wer is None else f"{100 * r.wer:.1f}"
        lines.append(
            f"| {r.name} | {r.pooled_tokens_per_s:.1f} | {r.speedup:.2f}x | "
            f"{100 * r.frac_windows_slower:.1f} % | {'yes' if r.identical else 'NO'} | "
            f"{error} | {r.mean_accepted:.2f} |"
        )
    return "\n".join(lines)


def subset_table(content: dict[str, object]) -> list[str]:
    """report.md lines for the subsets: a row per configuration, a column per subset (none
    when the recordings have no subsets)."""
    subsets = content.get("subsets")
    if not isinstance(subsets, dict):
        return []
    heads = [
        f"{name} ({part['audio_s'] / 60:.1f} min, {part['windows']} windows)"
        for name, part in subsets.items()
    ]
    lines = [
        "",
        "## Per subset",
        "",
        f"Pooled speed-up over `{content['baseline']}` (the whole set's baseline) / share of "
        "windows slower than it, on each subset's windows.",
        "",
        f"| configuration | {' | '.join(heads)} |",
        f"|---|{'---:|' * len(heads)}",
    ]
    cells: dict[str, list[str]] = {}
    for part in subsets.values():
        for c in part["configs"]:
            cell = f"{c['speedup']:.2f}x / {100 * c['frac_windows_slower']:.1f} %"
            cells.setdefault(c["name"], []).append(cell)
    lines += [f"| {name} | {' | '.join(row)} |" for name, row in cells.items()]
    return lines


def table_of(content: dict[str, object]) -> str:
    """The table of a summary.json's content."""
    configs = content["configs"]
    assert isinstance(configs, list)
    return table([ConfigSummary(**c) for c in configs])


def external_table(content: dict[str, object]) -> list[str]:
    """report.md lines for the CTranslate2 reference (none when it was not run)."""
    external = content.get("external")
    if not isinstance(external, list):
        return []
    base = next(c for c in content["configs"] if c["name"] == content["baseline"])  # type: ignore[attr-defined]
    lines = [
        "## External reference (a different runtime)",
        "",
        "Same windows, same base weights, greedy, through faster-whisper/CTranslate2: the",
        "speed a user gets today without as2d. Not part of the comparison above.",
        "",
        "| runtime | compute | threads | tokens/s | vs our target-only |",
        "|---|---|---:|---:|---:|",
    ]
    for e in external:
        ratio = e["pooled_tokens_per_s"] / base["pooled_tokens_per_s"]
        lines.append(
            f"| {e['runtime']} | {e['compute_type']} | {e['threads']} | "
            f"{e['pooled_tokens_per_s']:.1f} | {ratio:.2f}x |"
        )
    return [*lines, ""]


def _oracle_line(content: dict[str, object]) -> str:
    oracle = content["oracle"]
    if not isinstance(oracle, dict):
        return "Hindsight oracle: no as2d configurations in this run."
    frac = content["as2d_auto_frac_of_oracle"]
    share = "" if not isinstance(frac, float) else f"; as2d auto reaches {100 * frac:.1f} % of it"
    line = (
        f"Hindsight per-window oracle over {', '.join(oracle['candidates'])}: "
        f"{oracle['pooled_tokens_per_s']:.1f} tokens/s ({oracle['speedup']:.2f}x){share}."
    )
    if "held_out_tokens_per_s" not in oracle:
        return line
    return (
        f"{line} Picked on the other repeats and timed on the held-out one (no credit for a "
        f"lucky window): {oracle['held_out_tokens_per_s']:.1f} tokens/s; as2d auto reaches "
        f"{100 * oracle['as2d_auto_frac_of_held_out']:.1f} % of it. The oracle's luck alone: "
        f"as2d auto reaches {100 * oracle['as2d_auto_frac_of_own_best']:.1f} % of the best of "
        "its own repeats per window (100 % on a noiseless machine)."
    )


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
    same = [c for c in bench.configs if c.method == TARGET_ONLY and c.threads in threads]
    return same[0] if same else baseline


def _identical(bench: BenchRun, config: Config, reference: Config) -> bool:
    """Every window of every repeat has the reference's tokens (its first repeat)."""
    expected = {
        (run.recording.name, w.index): w.token_ids
        for run in _runs_of(bench, reference)
        if run.repeat == 0
        for w in run.windows
    }
    return all(
        expected.get((run.recording.name, w.index)) == w.token_ids
        for run in _runs_of(bench, config)
        for w in run.windows
    )


def _wer(runs: Sequence[RecordingRun]) -> float | None:
    """Pooled WER over the recordings that have a reference (None if none has)."""
    pairs = [(run.recording, run.text) for run in runs if run.recording.text is not None]
    if not pairs:
        return None
    language = pairs[0][0].language or "en"
    return wer([str(r.text) for r, _ in pairs], [text for _, text in pairs], language)
