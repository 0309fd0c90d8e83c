"""The hindsight oracle's arithmetic on tiny hand-made timings."""

from __future__ import annotations

import pytest

from as2d.eval.oracle import held_out_oracle, hindsight_oracle, pooled_tokens_per_s

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


def test_held_out_oracle_gives_no_credit_for_a_lucky_repeat():
    tokens = {W0: 10, W1: 10}
    samples = {
        "steady": {W0: [2.0, 2.0], W1: [2.0, 2.0]},
        "noisy": {W0: [1.0, 3.0], W1: [3.0, 1.0]},  # as fast on average, luckier once
    }
    medians = {name: {key: 2.0 for key in tokens} for name in samples}
    # hindsight on medians: a tie per window, 20 tokens / 4 s
    assert hindsight_oracle(tokens, medians, list(samples)).pooled_tokens_per_s == 5.0
    # W0: repeat 0 held out -> steady wins on repeat 1 (2 < 3), charged 2;
    #     repeat 1 held out -> noisy wins on repeat 0 (1 < 2), charged 3: mean 2.5; W1 alike
    assert held_out_oracle(tokens, samples, list(samples)) == pytest.approx(20 / 5.0)
    # a configuration faster on every repeat is picked every time
    samples["fast"] = {W0: [0.5, 1.0], W1: [1.0, 0.5]}
    assert held_out_oracle(tokens, samples, list(samples)) == pytest.approx(20 / 1.5)


def test_held_out_oracle_needs_two_repeats():
    with pytest.raises(ValueError, match="two repeats"):
        held_out_oracle({W0: 1}, {"A": {W0: [1.0]}}, ["A"])
