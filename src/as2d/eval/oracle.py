"""The hindsight per-window oracle: the best configuration for every window, after the fact.

Given every configuration's time on every window (all produce the same tokens, so the
token count of a window is the same for all), the oracle takes the fastest time per window.
Its pooled throughput is the limit an online policy choosing among those configurations
could reach; `as2d --budget auto` is reported as a fraction of it (DESIGN.md, Measures).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

WindowKey = tuple[str, int]  # (recording name, window index)


@dataclass(frozen=True)
class Oracle:
    """Pooled figures of the per-window best, and which configuration won how often."""

    pooled_tokens_per_s: float
    seconds: float  # sum over windows of the fastest time
    wins: dict[str, int]  # configuration name -> windows where it was the fastest


def pooled_tokens_per_s(
    tokens: Mapping[WindowKey, int], seconds: Mapping[WindowKey, float]
) -> float:
    """Total tokens / total seconds over the windows of `seconds`.

    Example:
        tokens {a: 10, b: 30}, seconds {a: 1.0, b: 3.0} -> 40 / 4.0 = 10.0
    """
    total = sum(seconds.values())
    return sum(tokens[key] for key in seconds) / total if total > 0 else 0.0


def hindsight_oracle(
    tokens: Mapping[WindowKey, int],
    times: Mapping[str, Mapping[WindowKey, float]],
    candidates: Sequence[str],
) -> Oracle:
    """The oracle over `candidates`: per window, the fastest candidate's time.

    Args:
        tokens: output tokens of each window (the target's; the same for every method).
        times: configuration name -> window -> seconds (encode + decode).
        candidates: the configurations the oracle may pick from; each must time every window.

    Example:
        tokens {w0: 10, w1: 10}
        times {"A": {w0: 1.0, w1: 4.0}, "B": {w0: 2.0, w1: 2.0}}
        -> best per window: A on w0 (1.0), B on w1 (2.0); 20 tokens / 3.0 s = 6.67 tokens/s,
           wins {"A": 1, "B": 1}, while A alone gives 4.0 and B alone 5.0 tokens/s
    """
    wins = dict.fromkeys(candidates, 0)
    best: dict[WindowKey, float] = {}
    for key in tokens:
        winner = min(candidates, key=lambda name: times[name][key])
        wins[winner] += 1
        best[key] = times[winner][key]
    return Oracle(pooled_tokens_per_s(tokens, best), sum(best.values()), wins)


def held_out_oracle(
    tokens: Mapping[WindowKey, int],
    samples: Mapping[str, Mapping[WindowKey, Sequence[float]]],
    candidates: Sequence[str],
) -> float:
    """Pooled tokens/s of the oracle that picks on some repeats and is timed on another.

    `hindsight_oracle` picks and times on the same measurements, so on a noisy machine it
    also picks whichever configuration was lucky on a window: among near-equal candidates
    it reports a speed that no choice of configuration reaches again. Here, for each repeat
    r, the winner of a window is picked by the median of the other repeats' times and is
    charged its time in repeat r; the seconds are averaged over r. This errs the other way
    (a noisy pick is sometimes not the truly best configuration), so the two bracket the
    oracle's true speed. Needs at least two repeats.

    Args:
        samples: configuration name -> window -> seconds in repeat 0, 1, ...

    Example:
        tokens {w0: 10}; samples {"A": {w0: [1.0, 3.0]}, "B": {w0: [2.0, 2.0]}}
        -> repeat 0 held out: B wins on repeat 1 (2.0 < 3.0), charged 2.0;
           repeat 1 held out: A wins on repeat 0 (1.0 < 2.0), charged 3.0;
           10 tokens / 2.5 s = 4.0 tokens/s (the hindsight oracle on medians: 5.0)
    """
    repeats = len(next(iter(samples[candidates[0]].values())))
    if repeats < 2:
        raise ValueError("a held-out oracle needs at least two repeats")
    seconds: dict[WindowKey, float] = {}
    for key in tokens:
        charged = 0.0
        for r in range(repeats):
            elsewhere = {name: _median_without(samples[name][key], r) for name in candidates}
            charged += samples[min(elsewhere, key=elsewhere.__getitem__)][key][r]
        seconds[key] = charged / repeats
    return pooled_tokens_per_s(tokens, seconds)


def _median_without(values: Sequence[float], skip: int) -> float:
    return statistics.median(v for i, v in enumerate(values) if i != skip)
