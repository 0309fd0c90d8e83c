"""The hindsight per-window oracle: the best configuration for every window, after the fact.

Given every configuration's time on every window (all produce the same tokens, so the
token count of a window is the same for all), the oracle takes the fastest time per window.
Its pooled throughput is the limit an online policy choosing among those configurations
could reach; `as2d --budget auto` is reported as a fraction of it (DESIGN.md, Measures).
"""

from __future__ import annotations

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
