"""How much of the hindsight oracle's lead over as2d auto is luck: the oracle against repeats.

The hindsight oracle picks each window's fastest configuration on the same noisy times it
reports, so on a busy machine it also picks whichever near-equal configuration was lucky.
From an `as2d bench --repeats N` run's `results.jsonl` this prints, for R = 1..N repeats
(averaged over every subset of R repeats), target-only, as2d auto and the oracle (over the
faster target-only and every as2d configuration, on per-window medians), and auto's share.
A share that climbs with R is noise washing out. The control line is the oracle over two
copies of auto itself, each the median of its own disjoint repeats: no policy beats its own
copy, so whatever that oracle gains is the machine's noise alone. A run that compared
runtimes (`--runtime torch,mnn`) is read one runtime at a time: `--runtime`, default the
first one in the file.

Example:
    .venv/bin/python scripts/oracle_by_repeats.py bench-out/luck4/results.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from as2d.eval.catalog import TARGET_ONLY
from as2d.eval.oracle import WindowKey, hindsight_oracle, pooled_tokens_per_s
from as2d.eval.summary import ORACLE_METHOD


@dataclass
class Results:
    """A results.jsonl: every configuration's seconds per window and repeat, and its kind."""

    samples: dict[str, dict[WindowKey, dict[int, float]]] = field(default_factory=dict)
    tokens: dict[WindowKey, int] = field(default_factory=dict)
    targets: list[str] = field(default_factory=list)  # target-only, at each thread count
    candidates: list[str] = field(default_factory=list)  # the oracle's as2d configurations
    autos: list[str] = field(default_factory=list)  # as2d with the auto budget
    repeats: list[int] = field(default_factory=list)

    def medians(self, config: str, repeats: Iterable[int] | None = None) -> dict[WindowKey, float]:
        """Window -> the median of `config`'s seconds over `repeats` (default: all of them)."""
        chosen = list(self.repeats if repeats is None else repeats)
        return {k: statistics.median(s[r] for r in chosen) for k, s in self.samples[config].items()}


def read(path: Path, runtime: str | None = None) -> Results:
    """The rows of a results.jsonl on `runtime` (None: the first row's; a row from before
    runtimes were compared is torch's), gathered per configuration, window and repeat."""
    results = Results()
    for line in path.read_text().splitlines():
        row = json.loads(line)
        runtime = runtime or row.get("runtime", "torch")
        if row.get("runtime", "torch") != runtime:
            continue
        key, config = (row["recording"], row["window"]), row["config"]
        if config not in results.samples:  # its first row: file it by kind
            if row["method"] == TARGET_ONLY:
                results.targets.append(config)
            elif row["method"] == ORACLE_METHOD:
                results.candidates.append(config)
                if row["budget"] == "auto":
                    results.autos.append(config)
        results.samples.setdefault(config, {}).setdefault(key, {})[row["repeat"]] = row["wall_s"]
        results.tokens[key] = row["tokens"]
    results.repeats = sorted({r for s in results.samples.values() for w in s.values() for r in w})
    return results


def curve(results: Results) -> list[tuple[int, float, float, float]]:
    """(R, target-only, auto, oracle) tokens/s, each the mean over every subset of R repeats."""
    tokens, rows = results.tokens, []
    for size in range(1, len(results.repeats) + 1):
        figures = []
        for subset in itertools.combinations(results.repeats, size):
            times = {c: results.medians(c, subset) for c in results.samples}
            rate = {c: pooled_tokens_per_s(tokens, times[c]) for c in results.samples}
            base = max(results.targets, key=rate.__getitem__)
            candidates = [base, *results.candidates]
            oracle = hindsight_oracle(tokens, times, candidates).pooled_tokens_per_s
            figures.append((rate[base], max(rate[c] for c in results.autos), oracle))
        rows.append((size, *(statistics.mean(f) for f in zip(*figures, strict=True))))
    return rows


def self_control(results: Results, auto: str) -> list[float]:
    """Per R up to half the repeats: auto (median of 2R) against the oracle over two copies
    of itself, each the median of R disjoint repeats (the mean over every such pair)."""
    repeats, shares = results.repeats, []
    for size in range(1, len(repeats) // 2 + 1):
        fractions = []
        for a in itertools.combinations(repeats, size):
            for b in itertools.combinations([r for r in repeats if r not in a], size):
                copies = {"a": results.medians(auto, a), "b": results.medians(auto, b)}
                oracle = hindsight_oracle(results.tokens, copies, ["a", "b"])
                both = pooled_tokens_per_s(results.tokens, results.medians(auto, a + b))
                fractions.append(both / oracle.pooled_tokens_per_s)
        shares.append(statistics.mean(fractions))
    return shares


def table(rows: Sequence[tuple[int, float, float, float]]) -> str:
    lines = [
        "| repeats | target-only tokens/s | as2d auto | hindsight oracle | auto / oracle |",
        "|---:|---:|---:|---:|---:|",
    ]
    for size, base, auto, oracle in rows:
        lines.append(f"| {size} | {base:.1f} | {auto:.1f} | {oracle:.1f} | {auto / oracle:.1%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="results.jsonl of `as2d bench --repeats N`")
    parser.add_argument("--runtime", default=None, help="of a run that compared runtimes")
    args = parser.parse_args()
    path = args.results
    try:
        results = read(path, args.runtime)
    except (OSError, ValueError, KeyError) as err:
        raise SystemExit(f"{path}: not a readable results.jsonl ({err})") from None
    if not results.autos or not results.targets:
        raise SystemExit(f"{path}: needs target-only and an as2d k=auto configuration")
    print(table(curve(results)))
    auto = max(results.autos, key=lambda c: pooled_tokens_per_s(results.tokens, results.medians(c)))
    for size, share in enumerate(self_control(results, auto), 1):
        print(f"control, {auto} against two copies of itself of {size} repeat(s) each: {share:.1%}")


if __name__ == "__main__":
    main()
