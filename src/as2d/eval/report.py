"""What a benchmark writes: results.jsonl, summary.json, report.md and plots, from the
figures of `summary.py`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from as2d.eval.bench import BenchRun
from as2d.eval.plots import plot_cdf, plot_speedups
from as2d.eval.summary import ConfigSummary, RunInfo, by_runtime, result_rows, summary
from as2d.eval.timeline import plot_timeline
from as2d.writers import write_atomic

OWN_RUNTIME = (  # under the table where runtimes are compared
    "Speed-up, windows slower and identical: against the faster target-only of the "
    "configuration's own runtime (each runtime's target is its own reference)."
)


def write_outputs(bench: BenchRun, out: Path, info: RunInfo) -> dict[str, object]:
    """Writes results.jsonl, summary.json, report.md and the plots into `out`; the summary."""
    out.mkdir(parents=True, exist_ok=True)
    parts = by_runtime(bench)
    rows = [row for part in parts for row in part.rows]
    content = summary(bench, parts, info)
    lines = "".join(json.dumps(r) + "\n" for r in result_rows(bench))
    write_atomic(out / "results.jsonl", lines)
    write_atomic(out / "summary.json", json.dumps(content, indent=2) + "\n")
    baseline = parts[0].m.baseline.name if len(parts) == 1 else "its runtime's target-only"
    plot_speedups(rows, baseline, out / "speedup.png")
    plot_cdf(parts, out / "window_speedup_cdf.png")
    if bench.timeline is not None:
        plot_timeline(bench.timeline, out / "timeline.png")
    write_atomic(out / "report.md", render_report(content, rows, bench))
    return content


def render_report(
    content: dict[str, object], rows: Sequence[ConfigSummary], bench: BenchRun
) -> str:
    """report.md: the table, the runtimes side by side (when several), the oracle, how it
    was run and the exact command."""
    machine = content["machine"]
    assert isinstance(machine, dict)
    several = "runtimes" in content
    shared = (
        "One target model per runtime, shared by that runtime's configurations"
        if several
        else "One target model shared by every configuration"
    )
    lines = [
        f"# as2d bench: {content['target']} on {len(bench.recordings)} recordings",
        "",
        table(rows),
        *(["", OWN_RUNTIME] if several else []),
        "",
        *_oracle_lines(content),
        "",
        'Windows slower: the share whose median time is above the baseline\'s; "> 3 %": '
        "slower by more than 3 %, beside the noise floor, the same share for the baseline "
        f"against itself (its earlier repeats against its later ones): "
        f"{_noise_floors(content)}.",
        "",
        "![speed-up](speedup.png) ![per-window speed-up](window_speedup_cdf.png)",
        *runtime_table(content, rows),
        *subset_table(content),
    ]
    if bench.timeline is not None:
        lines += ["", f"Timeline of {bench.timeline.title}:", "", "![timeline](timeline.png)"]
    lines += ["", *external_table(content), *request_table(rows)]
    lines += [
        "",
        "## How it was run",
        "",
        f"- Machine: {machine['cpu']}, {machine['cores']} cores, load {machine['load_1min']} "
        f"at start; torch {machine['torch']}, Python {machine['python']}.",
        f"- Dataset `{content['dataset']}`: {len(bench.recordings)} recordings, "
        f"{bench.audio_s / 60:.1f} min of audio, {content['windows']} windows; "
        f"{content['repeats']} repeat(s), per-window times are medians over repeats.",
        f"- {_baseline_line(content)}",
        f"- {shared}; each loaded and warmed up (an untimed decode) before timing.",
        "- Interleaved per recording, in an order rotating from one recording to the next "
        "(not per window: an as2d drafter runs ahead into later windows of its recording, "
        "which would be free drafting while other configurations are timed). Before each "
        "timed decode the drafter processes are left to go idle.",
        "- Time = encode + decode per window; pooled tokens/s = tokens / total time; "
        "`identical`: every window's tokens equal target-only's (same threads"
        f"{', same runtime' if several else ''}).",
        *_drafting_lines(bench),
        *_timing_lines(content),
        "",
        "```",
        str(content["command"]),
        "```",
        "",
    ]
    return "\n".join(lines)


def _drafting_lines(bench: BenchRun) -> list[str]:
    """What drafts-ready configurations paid before the timed runs."""
    minutes = bench.audio_s / 60
    return [
        f"- `drafts ready`: every draft made before the timed runs ({drafter}: {seconds:.1f} s "
        f"for the {minutes:.1f} min of audio, in-process on every core, model load included); "
        "no drafter process runs while they decode."
        for drafter, seconds in bench.drafting_s.items()
    ]


def _timing_lines(content: dict[str, object]) -> list[str]:
    """What timing words cost after decoding, per configuration (left out of its time)."""
    costs = content.get("timestamps")
    if not isinstance(costs, dict):
        return []
    return [
        f"- Word timing (`--timestamps`), after decoding, not in the times above: `{name}` "
        f"{cost['align_s']:.1f} s, {100 * cost['share']:.1f} % of its decode phase."
        for name, cost in costs.items()
    ]


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
            f"{slower_cell(asdict(r))} | {'yes' if r.identical else 'NO'} | "
            f"{error} | {r.mean_accepted:.2f} |"
        )
    return "\n".join(lines)


def slower_cell(config: Mapping[str, Any]) -> str:
    """A configuration's share of windows slower; where it decoded some as target-only
    decodes them (alone: their times differ by noise only), that share and the others'."""
    cell = f"{100 * config['frac_windows_slower']:.1f} %"
    alone, others = config.get("frac_windows_alone", 0.0), config.get("frac_others_slower")
    if alone and others is not None:
        cell += f" ({100 * alone:.0f} % alone; {100 * others:.1f} % of the rest)"
    elif alone:
        cell += " (all alone)"
    return cell + f"; > 3 %: {100 * config.get('frac_slower_3pct', 0.0):.1f} %"


def _noise_floors(content: dict[str, object]) -> str:
    """The noise floor; with several runtimes, each one's."""
    runtimes = content.get("runtimes")
    if not isinstance(runtimes, dict):
        return noise_floor_cell(content)
    return ", ".join(f"{name} {noise_floor_cell(figures)}" for name, figures in runtimes.items())


def noise_floor_cell(part: Mapping[str, Any]) -> str:
    """The share of windows target-only is slower than itself by more than 3 %."""
    floor = part.get("noise_floor_slower_3pct")
    return "-" if floor is None else f"{100 * floor:.1f} %"


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
    baseline = (
        "the whole set's target-only baseline of its runtime"
        if "runtimes" in content
        else f"`{content['baseline']}` (the whole set's baseline)"
    )
    lines = [
        "",
        "## Per subset",
        "",
        f"Pooled speed-up over {baseline} / share of windows slower than it, on each subset's "
        "windows.",
        "",
        f"| configuration | {' | '.join(heads)} |",
        f"|---|{'---:|' * len(heads)}",
    ]
    cells: dict[str, list[str]] = {}
    for part in subsets.values():
        for c in part["configs"]:
            cell = f"{c['speedup']:.2f}x / {slower_cell(c)}"
            cells.setdefault(c["name"], []).append(cell)
    lines += [f"| {name} | {' | '.join(row)} |" for name, row in cells.items()]
    label = "noise floor (> 3 %, target-only against itself)"
    runtimes = content.get("runtimes")
    if not isinstance(runtimes, dict):
        floors = [noise_floor_cell(part) for part in subsets.values()]
        return [*lines, f"| {label} | {' | '.join(floors)} |"]
    for runtime in runtimes:  # a floor per runtime
        floors = [noise_floor_cell(part["runtimes"][runtime]) for part in subsets.values()]
        lines.append(f"| {label}, {runtime} | {' | '.join(floors)} |")
    return lines


def request_table(rows: Sequence[ConfigSummary]) -> list[str]:
    """Time from request to answer, pooled, with what was made ahead (`--prepared`); empty
    where nothing was."""
    if not any(r.prepared or r.drafts == "ready" for r in rows):
        return []
    cold = min((r.request_s for r in rows if r.method == "target" and not r.prepared), default=0)
    lines = [
        "## Time from request to answer (work made ahead)",
        "",
        "| configuration | drafts | encoder ahead | request s (pooled) | vs target-only cold "
        "| made ahead (core-s) | identical |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{cold / r.request_s:.2f}x" if r.request_s > 0 and cold > 0 else "-"
        lines.append(
            f"| {r.name} | {r.drafts} | {'yes' if r.prepared else 'no'} | {r.request_s:.2f} "
            f"| {ratio} | {r.preparation_core_s:.1f} | {'yes' if r.identical else 'NO'} |"
        )
    return ["", *lines]


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


def runtime_table(content: dict[str, object], rows: Sequence[ConfigSummary]) -> list[str]:
    """report.md lines that set the runtimes side by side (none with one runtime): each one's
    target-only and fastest configuration, against the first runtime's target-only."""
    runtimes = content.get("runtimes")
    baselines = content["baselines"]
    if not isinstance(runtimes, dict) or not isinstance(baselines, dict):
        return []
    first = next(iter(runtimes))
    first_rate = runtimes[first]["pooled_tokens_per_s"]
    lines = [
        "",
        "## Runtimes side by side",
        "",
        f'The same windows; "vs {first}": tokens/s over {first}\'s target-only '
        f"(`{baselines[first]}`); fastest: of the configurations with no work made ahead.",
        "",
        f"| runtime | target-only | tokens/s | vs {first} | windows with {first}'s tokens "
        f"| fastest | tokens/s | speed-up | vs {first} |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for runtime, figures in runtimes.items():
        cold = [r for r in rows if r.runtime == runtime and r.drafts == "live" and not r.prepared]
        best = max(cold, key=lambda r: r.pooled_tokens_per_s)
        rate = figures["pooled_tokens_per_s"]
        lines.append(
            f"| {runtime} | {baselines[runtime]} | {rate:.1f} | {_ratio(rate, first_rate)} | "
            f"{100 * figures['frac_windows_same_tokens']:.1f} % | {best.name} | "
            f"{best.pooled_tokens_per_s:.1f} | {best.speedup:.2f}x | "
            f"{_ratio(best.pooled_tokens_per_s, first_rate)} |"
        )
    return lines


def _ratio(rate: float, reference: float) -> str:
    return f"{rate / reference:.2f}x" if reference > 0 else "-"


def _baseline_line(content: dict[str, object]) -> str:
    """How the baseline was chosen: one, or one per runtime."""
    baselines = content["baselines"]
    assert isinstance(baselines, dict)
    if len(baselines) == 1:
        return f"Baseline: `{content['baseline']}`, the faster target-only thread count."
    each = ", ".join(f"`{name}`" for name in baselines.values())
    return f"Baselines: {each}, each runtime's faster target-only thread count."


def _oracle_lines(content: dict[str, object]) -> list[str]:
    """The oracle's line; with several runtimes, one per runtime (each over its own)."""
    runtimes = content.get("runtimes")
    if not isinstance(runtimes, dict):
        return [_oracle_line(content)]
    return ["\n\n".join(f"{name}: {_oracle_line(figures)}" for name, figures in runtimes.items())]


def _oracle_line(content: Mapping[str, Any]) -> str:
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
