"""Budget policy: cost model, acceptance estimate, and the k that maximises tokens per second."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from as2d.drafting.family import DraftCosts
from as2d.drafting.sources import Candidate
from as2d.engine.as2d import MIN_SHARED_PASSES, Payoff
from as2d.engine.costs import (
    cost_path,
    drafter_costs_path,
    machine_key,
    save_drafter_costs,
    target_cost_name,
)
from as2d.engine.gate import PROBE_EVERY, RECENT_WINDOWS, DraftGate, drafting_may_pay
from as2d.engine.policy import (
    AcceptanceEstimate,
    AutoBudget,
    BudgetPolicy,
    CostModel,
    FixedBudget,
    choose_budget,
    expected_tokens,
)
from as2d.options import Options

COST = CostModel((1.0, 1.1, 1.2, 1.6))  # seconds per pass for k = 0..3


# --- expected tokens and the choice of k ----------------------------------------------


@pytest.mark.parametrize(
    ("alpha", "k", "tokens"),
    [(0.5, 2, 1.75), (1.0, 3, 4.0), (0.0, 5, 1.0), (0.9, 0, 1.0), (0.8, 1, 1.8)],
)
def test_expected_tokens(alpha: float, k: int, tokens: float) -> None:
    assert expected_tokens(alpha, k) == pytest.approx(tokens)


@pytest.mark.parametrize(
    ("alpha", "available", "k"),
    [
        (0.5, 3, 2),  # rates 1/1.0, 1.5/1.1 = 1.36, 1.75/1.2 = 1.46, 1.875/1.6 = 1.17
        (0.9, 3, 2),  # 1.9/1.1 = 1.73, 2.71/1.2 = 2.26, 3.439/1.6 = 2.15
        (1.0, 3, 2),  # 3/1.2 = 4/1.6 = 2.5: a tie goes to the smaller k
        (0.05, 3, 0),  # 1.05/1.1 = 0.95 < 1: a plain step is best
        (0.9, 1, 1),  # the candidate has one token
        (0.9, 0, 0),  # no candidate
    ],
)
def test_choose_budget(alpha: float, available: int, k: int) -> None:
    assert choose_budget(alpha, COST, available) == k


def test_choose_budget_never_exceeds_the_cost_model() -> None:
    flat = CostModel((1.0, 1.01, 1.02, 1.03))
    assert choose_budget(1.0, flat, available=10) == 3


# --- cost model -----------------------------------------------------------------------


def test_cost_fit_takes_medians_and_interpolates() -> None:
    cost = CostModel.fit({0: [0.010, 0.012, 0.011], 4: [0.015], 6: []}, max_k=5)
    assert cost.latency_s == pytest.approx((0.011, 0.012, 0.013, 0.014, 0.015, 0.015))
    assert cost.max_k == 5
    assert cost[2] == pytest.approx(0.013)


def test_cost_fit_holds_the_nearest_value_outside_the_measured_range() -> None:
    cost = CostModel.fit({2: [0.02], 3: [0.03]}, max_k=4)
    assert cost.latency_s == pytest.approx((0.02, 0.02, 0.02, 0.03, 0.03))


def test_cost_save_load_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cost.json"
    COST.save(path)
    assert CostModel.load(path) == COST


@pytest.mark.parametrize("latency", [(), (0.01, 0.0), (-1.0,)])
def test_cost_rejects_empty_or_non_positive(latency: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        CostModel(latency)


def test_cost_fit_needs_a_measurement() -> None:
    with pytest.raises(ValueError):
        CostModel.fit({3: []}, max_k=3)


# --- acceptance estimate --------------------------------------------------------------


def test_acceptance_estimate_hand_computed() -> None:
    est = AcceptanceEstimate(prior=0.5, prior_weight=1.0, decay=0.5)
    assert est.alpha("drafter") == 0.5
    est.update("drafter", accepted=3, proposed=4)  # 3 kept of 4 tested
    assert est.alpha("drafter") == pytest.approx((3 + 0.5) / (4 + 1))
    est.update("drafter", accepted=4, proposed=4)  # 4 of 4: decayed 1.5 + 4 of 2 + 4
    assert est.alpha("drafter") == pytest.approx((5.5 + 0.5) / (6 + 1))
    assert est.alpha("prompt") == 0.5  # per source


def test_acceptance_estimate_counts_only_tested_tokens() -> None:
    est = AcceptanceEstimate(prior=0.5, prior_weight=1e-9, decay=1.0)
    for _ in range(10):
        est.update("s", accepted=1, proposed=8)  # 1 kept, 1 rejected, 6 never tested
    assert est.alpha("s") == pytest.approx(0.5)


def test_acceptance_estimate_ignores_empty_verifies_and_keeps_a_floor() -> None:
    est = AcceptanceEstimate(prior=0.5, prior_weight=2.0, decay=0.9)
    est.update("s", accepted=0, proposed=0)
    assert est.alpha("s") == 0.5
    for _ in range(200):
        est.update("s", accepted=0, proposed=4)
    assert est.alpha("s") == pytest.approx(1.0 / (10.0 + 2.0), rel=1e-6)  # prior / (EMA + 2)


# --- policies -------------------------------------------------------------------------


def test_fixed_budget() -> None:
    policy: BudgetPolicy = FixedBudget(4)
    assert policy.choose(candidate_len=7, source="drafter") == 4
    assert policy.choose(candidate_len=2, source="drafter") == 2
    short, long = Candidate((1, 2), "prompt"), Candidate((1, 2, 3, 4, 5), "drafter")
    assert policy.pick([short, long]) == (long, 4)
    assert policy.pick([]) == (None, 0)
    assert FixedBudget(0).pick([long]) == (None, 0)  # k = 0 is target-only decoding


def test_auto_budget_follows_the_acceptance_rate() -> None:
    cost = CostModel((1.0, 1.05, 1.1, 1.15, 1.2))
    policy = AutoBudget(cost, AcceptanceEstimate(prior=0.5))
    assert policy.choose(candidate_len=8, source="drafter") == 3  # 1.875/1.15 is the best
    for _ in range(30):
        policy.observe("drafter", accepted=4, proposed=4)
    assert policy.choose(candidate_len=8, source="drafter") == 4
    assert policy.choose(candidate_len=2, source="drafter") == 2


def test_auto_budget_probes_a_declined_source() -> None:
    policy = AutoBudget(CostModel((1.0, 1.5, 2.0)), probe_every=3)  # prior 0.5: 1.5/1.5 ties
    assert [policy.choose(4, "prompt") for _ in range(7)] == [0, 0, 1, 0, 0, 1, 0]
    policy.observe("prompt", accepted=0, proposed=1)  # resets the count of declines
    assert [policy.choose(4, "prompt") for _ in range(3)] == [0, 0, 1]


def test_auto_budget_picks_the_best_source() -> None:
    policy = AutoBudget(CostModel((1.0, 1.05, 1.1, 1.15, 1.2)))
    for _ in range(20):
        policy.observe("drafter", accepted=4, proposed=4)
        policy.observe("prompt", accepted=0, proposed=4)
    drafter, prompt = Candidate((1, 2, 3, 4), "drafter"), Candidate((5, 6, 7, 8), "prompt")
    assert policy.pick([prompt, drafter]) == (drafter, 4)
    assert policy.pick([]) == (None, 0)


def test_auto_budget_alone_chooses_with_the_cost_on_every_core() -> None:
    # On its share a verify costs far more than a step: plain steps win. On every core
    # verifying 3 tokens is nearly free: it wins at the same alpha.
    shared, alone = CostModel((1.0, 3.0, 3.0, 3.0)), CostModel((0.5, 0.5, 0.5, 0.5))
    policy = AutoBudget(shared, alone_cost=alone)
    assert policy.choose(candidate_len=3, source="drafter") == 0
    policy.alone(True)
    assert policy.choose(candidate_len=3, source="drafter") == 3
    policy.alone(False)
    assert policy.choose(candidate_len=3, source="drafter") == 0


# --- whether the drafter pays for its cores -------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def passes(payoff: Payoff, clock: Clock, seconds: float, tokens: int, count: int) -> None:
    """`count` passes of `seconds` each, each committing `tokens`."""
    committed = 1
    for _ in range(count):
        payoff.count(committed)
        clock.now += seconds
        committed += tokens
    payoff.count(committed)


def test_payoff_judges_only_after_enough_shared_passes() -> None:
    clock = Clock()
    payoff = Payoff(alone_step_s=0.02, clock=clock)
    assert not payoff.losing()  # nothing counted
    passes(payoff, clock, seconds=0.03, tokens=1, count=MIN_SHARED_PASSES - 1)
    assert not payoff.losing() and not payoff.lost
    passes(payoff, clock, seconds=0.03, tokens=1, count=1)
    assert payoff.losing() and payoff.lost  # 1 token per 30 ms shared < 1 per 20 ms alone


@pytest.mark.parametrize(
    ("seconds", "tokens", "losing"),
    [
        (0.03, 1, True),  # plain steps on the target's share: the drafter is behind
        (0.035, 1, True),  # verify passes whose candidates are rejected: a wrong drafter
        (0.035, 4, False),  # 4 tokens per verify: it pays
        (0.019, 1, False),  # a share as fast as every core (e.g. a GPU-bound target)
    ],
)
def test_payoff_compares_the_shared_rate_with_the_alone_rate(
    seconds: float, tokens: int, losing: bool
) -> None:
    clock = Clock()
    payoff = Payoff(alone_step_s=0.02, clock=clock)
    passes(payoff, clock, seconds, tokens, count=2 * MIN_SHARED_PASSES)
    assert payoff.losing() is losing


def test_payoff_without_an_alone_cost_never_loses() -> None:
    clock = Clock()
    payoff = Payoff(alone_step_s=None, clock=clock)
    passes(payoff, clock, seconds=1.0, tokens=1, count=2 * MIN_SHARED_PASSES)
    assert not payoff.losing()


def test_payoff_gives_up_on_a_drafter_that_writes_nothing_past_its_encoder() -> None:
    """A drafter past its encoder for the window that writes nothing (asleep, stuck) loses its
    cores after `MIN_SHARED_PASSES` such passes in a row, even while the target's own rate
    (history lookup, 4 tokens a pass) stays within the margin; text in between starts the
    count again."""
    clock, committed = Clock(), 1
    payoff = Payoff(alone_step_s=0.02, clock=clock)
    for n in range(3 * MIN_SHARED_PASSES):
        payoff.count(committed, silent=n % MIN_SHARED_PASSES != 0)  # text now and then
        clock.now, committed = clock.now + 0.03, committed + 4
    assert not payoff.losing()
    for _ in range(MIN_SHARED_PASSES):
        payoff.count(committed, silent=True)
        clock.now, committed = clock.now + 0.03, committed + 4
    assert payoff.losing() and payoff.lost


# ---------------------------------------------------------------- which windows to draft

# whisper-tiny.en on one core, its encoder padded to 30 s (encoder s on 4 s and on 30 s of
# input, step s), and whisper-base's step on both (measured on one EPYC)
TINY_EN = DraftCosts(0.12, 0.12, 0.006)
BASE_STEP_S = 0.0097


def test_draft_gate_leaves_short_windows_to_the_target() -> None:
    """A few seconds of speech hold too few tokens to pay for the drafter's encoder."""
    gate = DraftGate(BASE_STEP_S, cores=(1, 1))
    assert not gate.pays(3.0, 3.0, TINY_EN)
    assert gate.pays(25.0, 25.0, TINY_EN)


def test_draft_gate_drafts_shorter_windows_where_the_encoder_is_sized_to_the_speech() -> None:
    """An encoder that reads 12 s of speech and a 1 s tail costs less than half of one that
    reads 30 s: a window the padded encoder could not pay for now pays; 3 s still cannot pay
    for handing it over (`HANDOFF_STEPS`)."""
    sized = DraftCosts(0.02, 0.12, 0.006)  # tiny.en on 4 s and on 30 s of input
    assert sized.encode_s(4.0) == 0.02 and sized.encode_s(30.0) == 0.12
    assert not DraftGate(BASE_STEP_S, cores=(1, 1)).pays(12.0, 30.0, sized)
    assert DraftGate(BASE_STEP_S, cores=(1, 1)).pays(12.0, 13.0, sized)
    assert not DraftGate(BASE_STEP_S, cores=(1, 1)).pays(3.0, 4.0, sized)


def test_draft_gate_weighs_the_drafter_s_steps_by_what_sharing_costs_the_target() -> None:
    """Where the target's step is no faster on every core than on its own threads (an older
    EPYC, measured: 21-24 ms either way), the drafter's steps cost it nothing, its encoder
    still half the target's cores: windows pay from a shorter length."""
    slow_encoder = DraftCosts(1.4, 1.4, 0.011)  # whisper-tiny.en on one core of that machine
    scaling = DraftGate(0.0217, cores=(1, 1), shared_step_s=2 * 0.0217)
    flat = DraftGate(0.0217, cores=(1, 1), shared_step_s=0.0215)
    assert scaling.step_loss == 0.5 and flat.step_loss == 0.0
    assert not scaling.pays(30.0, 30.0, slow_encoder)
    assert flat.pays(30.0, 30.0, slow_encoder)
    assert not flat.pays(3.0, 3.0, slow_encoder)


def test_draft_gate_drafts_while_a_cost_is_unknown() -> None:
    assert DraftGate(BASE_STEP_S, cores=(1, 1)).pays(1.0, 2.0, None)
    assert DraftGate(None, cores=(1, 1)).pays(1.0, 2.0, TINY_EN)


def test_draft_gate_learns_the_token_rate() -> None:
    """Dense speech (spelled digits) holds more tokens a second: shorter windows pay."""
    gate = DraftGate(BASE_STEP_S, cores=(1, 1))
    assert not gate.pays(6.0, 6.0, TINY_EN)
    for _ in range(RECENT_WINDOWS):
        gate.observe(6.0, 60, 55, drafted=True)  # 10 tokens a second, nearly all from drafts
    assert gate.pays(6.0, 6.0, TINY_EN)


def test_draft_gate_stops_drafting_for_a_wrong_drafter_but_probes_it() -> None:
    gate = DraftGate(BASE_STEP_S, cores=(1, 1))
    for _ in range(RECENT_WINDOWS):
        gate.observe(25.0, 75, 0, drafted=True)  # nothing committed from its drafts
    decisions = [gate.pays(25.0, 25.0, TINY_EN) for _ in range(2 * PROBE_EVERY)]
    assert decisions.count(True) == 2 and decisions[PROBE_EVERY - 1]
    for _ in range(RECENT_WINDOWS):
        gate.observe(25.0, 75, 70, drafted=True)  # it agrees again
    assert gate.pays(25.0, 25.0, TINY_EN)


def test_draft_gate_counts_only_drafted_windows_for_accuracy() -> None:
    gate = DraftGate(BASE_STEP_S, cores=(1, 1))
    for _ in range(RECENT_WINDOWS):
        gate.observe(3.0, 9, 0, drafted=False)  # short windows the target decoded alone
    assert gate.pays(25.0, 25.0, TINY_EN)


# ---------------------------------------------------------------- whether to start a drafter


def _kept_costs(
    cache: Path,
    target_steps: tuple[float, float],
    drafter: DraftCosts,
    english: DraftCosts | None = None,
):
    """Costs kept in `cache` as earlier runs keep them: the target's step on 2 threads and on
    1 (`target_steps`), the drafter's warm-up costs on 1 (`english`: `auto`'s for English
    windows, where it drafts them with another model)."""
    machine = machine_key()
    for threads, step in zip((2, 1), target_steps, strict=True):
        path = cost_path(cache, target_cost_name("whisper-base", "cpu", None), machine, threads)
        path.parent.mkdir(parents=True, exist_ok=True)
        CostModel((step, 1.2 * step, 1.4 * step)).save(path)
    by_language = {"*": drafter} if english is None else {"*": drafter, "en": english}
    save_drafter_costs(drafter_costs_path(cache, "auto", 1), by_language)


def test_no_drafter_starts_for_recordings_too_short_to_pay(tmp_path: Path, monkeypatch) -> None:
    """The one-off command on a short recording: the drafter process would only slow the
    target down, so it is not started; a 30 s window or an unknown cost starts it."""
    monkeypatch.setattr("as2d.runtime.cores._cores", lambda: 2)
    options = Options(target="whisper-base", method="as2d", language="en")
    assert drafting_may_pay(options, tmp_path, [3.0])  # nothing measured yet
    _kept_costs(tmp_path, (BASE_STEP_S, 0.0171), TINY_EN)
    assert not drafting_may_pay(options, tmp_path, [2.0, 3.0])
    assert drafting_may_pay(options, tmp_path, [3.0, 600.0])  # a 30 s window pays
    assert drafting_may_pay(replace(options, draft_gate=False), tmp_path, [3.0])
    assert drafting_may_pay(replace(options, device="cuda"), tmp_path, [3.0])


def test_a_drafter_starts_where_the_language_is_not_known_yet(tmp_path: Path, monkeypatch) -> None:
    """`auto` drafts English with a cheaper model than other languages: with the language left
    to detection, the recording may be English, and a drafter that pays for English starts
    (it did not: the other languages' costs decided, and no drafter ever started)."""
    monkeypatch.setattr("as2d.runtime.cores._cores", lambda: 2)
    dear = DraftCosts(0.25, 1.5, 0.05)  # a drafter that never pays against whisper-base
    _kept_costs(tmp_path, (BASE_STEP_S, 0.0171), dear, english=TINY_EN)
    unknown = Options(target="whisper-base", method="as2d")
    assert drafting_may_pay(unknown, tmp_path, [25.0])
    assert drafting_may_pay(replace(unknown, language="en"), tmp_path, [25.0])
    assert not drafting_may_pay(replace(unknown, language="fr"), tmp_path, [25.0])


def test_draft_gate_weighs_drafting_by_how_long_it_really_took() -> None:
    """A drafter that takes three times its start-up timings beside the target (caches and
    memory shared) costs three times as much: a window that paid no longer does."""
    gate = DraftGate(BASE_STEP_S, cores=(1, 1))
    sized = DraftCosts(0.02, 0.12, 0.006)
    assert gate.slowdown == 1.0 and gate.pays(12.0, 13.0, sized)
    for _ in range(RECENT_WINDOWS):
        gate.observe_drafting(predicted_s=0.1, seconds=0.3)
    assert gate.slowdown == pytest.approx(3.0)
    assert not gate.pays(12.0, 13.0, sized)
