"""How much of the hindsight oracle's lead over as2d auto is luck: the oracle against repeats.

The hindsight oracle picks each window's fastest configuration on the same noisy times it
reports, so on a busy machine it also picks whichever near-equal configuration was lucky.
From an `as2d bench --repeats N` run's `results.jsonl` this prints, for R = 1..N repeats
(averaged over every subset of R repeats), target-only, as2d auto and the oracle (over the
faster target-only and every as2d configuration, on per-window medians), and auto's share.
A share that climbs with R is noise washing out. The control line is the oracle over two
copies of auto itself, each the median of its own disjoint repeats: no policy beats its own
copy, so whatever that oracle gains is the machine's noise alone.

Example:
    .venv/bin/python scripts/oracle_by_repeats.py bench-out/luck4/results.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

from as2d.eval.oracle import WindowKey, hindsight_oracle, pooled_tokens_per_s

Samples = dict[str, dict[WindowKey, dict[int, float]]]  # config -> window -> repeat -> s


def read(path: Path) -> tuple[Samples, dict[WindowKey, int], dict[str, str]]:
    """Per-window seconds of every configuration and repeat, tokens per window, methods."""
    samples: Samples = {}
    tokens: dict[WindowKey, int] = {}
    methods: dict[str, str] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        key = (row["recording"], row["window"])
        samples.setdefault(row["config"], {}).setdefault(key, {})[row["repeat"]] = row["wall_s"]
        tokens[key] = row["tokens"]
        methods[row["config"]] = row["method"]
    return samples, tokens, methods


def medians(
    samples: Samples, config: str, repeats: Iterable[int] | None = None
) -> dict[WindowKey, float]:
    """Window -> the median of `config`'s seconds over `repeats` (default: all of them)."""
    chosen = None if repeats is None else list(repeats)
    return {
        key: statistics.median(s.values() if chosen is None else [s[r] for r in chosen])
        for key, s in samples[config].items()
    }


def curve(
    samples: Samples, tokens: dict[WindowKey, int], methods: dict[str, str]
) -> list[tuple[int, float, float, float]]:
    """(R, target-only, auto, oracle) tokens/s, each the mean over every subset of R repeats."""
    repeats = sorted({r for s in samples.values() for w in s.values() for r in w})
    targets = [c for c, m in methods.items() if m == "target"]
    as2d = [c for c, m in methods.items() if m == "as2d"]
    autos = [c for c in as2d if c.endswith("k=auto")]
    rows = []
    for size in range(1, len(repeats) + 1):
        figures = []
        for subset in itertools.combinations(repeats, size):
            times = {c: medians(samples, c, subset) for c in samples}
            rate = {c: pooled_tokens_per_s(tokens, times[c]) for c in samples}
            base = max(targets, key=rate.__getitem__)
            oracle = hindsight_oracle(tokens, times, [base, *as2d]).pooled_tokens_per_s
            figures.append((rate[base], max(rate[c] for c in autos), oracle))
        rows.append((size, *(statistics.mean(f) for f in zip(*figures, strict=True))))
    return rows


def self_control(samples: Samples, tokens: dict[WindowKey, int], auto: str) -> list[float]:
    """Per R up to half the repeats: auto (median of 2R) against the oracle over two copies
    of itself, each the median of R disjoint repeats (the mean over every such pair)."""
    repeats = sorted({r for w in samples[auto].values() for r in w})
    shares = []
    for size in range(1, len(repeats) // 2 + 1):
        fractions = []
        for a in itertools.combinations(repeats, size):
            for b in itertools.combinations([r for r in repeats if r not in a], size):
                copies = {"a": medians(samples, auto, a), "b": medians(samples, auto, b)}
                oracle = hindsight_oracle(tokens, copies, ["a", "b"]).pooled_tokens_per_s
                both = pooled_tokens_per_s(tokens, medians(samples, auto, a + b))
                fractions.append(both / oracle)
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
    path = parser.parse_args().results
    try:
        samples, tokens, methods = read(path)
    except (OSError, ValueError, KeyError) as err:
        raise SystemExit(f"{path}: not a readable results.jsonl ({err})") from None
    autos = [c for c, m in methods.items() if m == "as2d" and c.endswith("k=auto")]
    if not autos or not any(m == "target" for m in methods.values()):
        raise SystemExit(f"{path}: needs target-only and an as2d k=auto configuration")
    print(table(curve(samples, tokens, methods)))
    auto = max(autos, key=lambda c: pooled_tokens_per_s(tokens, medians(samples, c)))
    for size, share in enumerate(self_control(samples, tokens, auto), 1):
        print(f"control, {auto} against two copies of itself of {size} repeat(s) each: {share:.1%}")


if __name__ == "__main__":
    main()
