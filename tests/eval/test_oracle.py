"""The hindsight oracle's arithmetic on tiny hand-made timings."""

from __future__ import annotations

import pytest

from as2d.eval.oracle import hindsight_oracle, pooled_tokens_per_s

W0, W1, W2 = ("a", 0), ("a", 1), ("b", 0)


def test_pooled_is_total_tokens_over_total_time_not_mean_of_rates():
    tokens = {W0: 10, W1: 30}
    assert pooled_tokens_per_s(tokens, {W0: 1.0, W1: 3.0}) == 10.0
    assert pooled_tokens_per_s(tokens, {W0: 2.0, W1: 2.0}) == 10.0  # rates 5 and 15
    assert pooled_tokens_per_s(tokens, {}) == 0.0


def test_oracle_takes_the_fastest_configuration_per_window():
    tokens = {W0: 10, W1: 10, W2: 20}
    times = {
        "target": {W0: 2.0, W1: 2.0, W2: 4.0},
        "k=4": {W0: 1.0, W1: 4.0, W2: 3.0},
        "k=8": {W0: 1.5, W1: 1.0, W2: 5.0},
    }
    oracle = hindsight_oracle(tokens, times, ["target", "k=4", "k=8"])
    assert oracle.seconds == pytest.approx(1.0 + 1.0 + 3.0)
    assert oracle.pooled_tokens_per_s == pytest.approx(40 / 5.0)
    assert oracle.wins == {"target": 0, "k=4": 2, "k=8": 1}
    for name in times:  # never slower than any single candidate
        assert oracle.pooled_tokens_per_s >= pooled_tokens_per_s(tokens, times[name])


def test_oracle_picks_only_among_candidates():
    tokens = {W0: 10}
    times = {"target": {W0: 2.0}, "sd": {W0: 0.5}}
    oracle = hindsight_oracle(tokens, times, ["target"])
    assert oracle.pooled_tokens_per_s == 5.0
    assert oracle.wins == {"target": 1}
