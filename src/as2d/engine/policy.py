"""Budget policy: how many candidate tokens (k) to verify in the next target pass.

Verifying more tokens costs a little more latency and pays off only if the target
accepts them. With a per-token acceptance rate alpha (tokens accepted one after another
until the first rejection), a verify pass of budget k commits in expectation

    E[tokens | k] = 1 + alpha + alpha^2 + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)

(the accepted run plus the target's own correction or bonus token). The policy picks
the k that maximises E[tokens | k] / cost[k], the expected tokens per second, with
cost measured once per device and model; k = 0 is a plain single-token step.
A fixed k stays selectable, for the catalog and the hindsight oracle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from as2d.drafting.sources import Candidate


@dataclass(frozen=True)
class CostModel:
    """Measured latency of one target pass per budget.

    Attributes:
        latency_s: seconds for one pass verifying k tokens, for k = 0..K_max
            (k = 0: a plain single-token step).
    """

    latency_s: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.latency_s or min(self.latency_s) <= 0:
            raise ValueError(f"need positive latencies for k = 0..K_max, got {self.latency_s}")

    @property
    def max_k(self) -> int:
        """The largest budget measured."""
        return len(self.latency_s) - 1

    def __getitem__(self, k: int) -> float:
        return self.latency_s[k]

    @classmethod
    def fit(cls, measurements: Mapping[int, Sequence[float]], max_k: int) -> CostModel:
        """Builds a cost model from timings of some budgets, interpolating the rest.

        Each measured k takes the median of its timings; budgets in between are
        interpolated linearly, budgets outside the measured range take the nearest
        measured value.

        Args:
            measurements: k -> seconds of repeated passes at that budget.
            max_k: the largest budget of the model.

        Example:
            CostModel.fit({0: [0.010, 0.012, 0.011], 4: [0.015]}, max_k=5).latency_s
            -> (0.011, 0.012, 0.013, 0.014, 0.015, 0.015)
        """
        ks = sorted(k for k, times in measurements.items() if len(times) > 0)
        if not ks:
            raise ValueError("no measurements")
        medians = [float(np.median(measurements[k])) for k in ks]
        latency = np.interp(np.arange(max_k + 1), ks, medians)
        return cls(tuple(round(float(s), 9) for s in latency))

    def save(self, path: str | Path) -> None:
        """Writes the model as JSON: {"latency_s": [...]}."""
        Path(path).write_text(json.dumps({"latency_s": list(self.latency_s)}, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> CostModel:
        """Reads a model written by `save`."""
        data = json.loads(Path(path).read_text())
        return cls(tuple(float(s) for s in data["latency_s"]))


class AcceptanceEstimate:
    """Per-source estimate of alpha, the per-token acceptance rate, as an EMA.

    A verify that accepted a of p proposed tokens tested a + 1 tokens if it stopped at
    a rejection (a < p), else p: tokens after the first rejection were never tested, so
    they count neither way (counting them as rejections would bias alpha low). alpha is the
    ratio of decayed accepted counts to decayed tested counts, plus a fixed prior that
    keeps alpha away from 0, so a source that had a bad stretch still gets cheap probes.

    Args:
        prior: alpha before any observation.
        prior_weight: how many tested tokens the prior is worth (it does not decay).
        decay: weight kept by the past at each update (per verify).

    Example:
        est = AcceptanceEstimate(prior=0.5, prior_weight=1.0, decay=0.5)
        est.update("drafter", accepted=3, proposed=4)   # 3 kept of 4 tested: (3 + 0.5) / (4 + 1)
        est.alpha("drafter")  -> 0.7
    """

    def __init__(self, prior: float = 0.5, prior_weight: float = 2.0, decay: float = 0.9) -> None:
        self._prior = prior
        self._prior_weight = prior_weight
        self._decay = decay
        self._accepted: dict[str, float] = {}  # decayed accepted tokens per source
        self._tested: dict[str, float] = {}  # decayed tested tokens per source

    def alpha(self, source: str) -> float:
        """The current estimate of alpha for `source` (the prior if never observed)."""
        prior_mass = self._prior * self._prior_weight
        accepted = self._accepted.get(source, 0.0)
        tested = self._tested.get(source, 0.0)
        return (accepted + prior_mass) / (tested + self._prior_weight)

    def update(self, source: str, accepted: int, proposed: int) -> None:
        """Folds one verify of `source`'s candidate into its estimate."""
        if proposed < 1:
            return
        tested = accepted + (1 if accepted < proposed else 0)
        self._accepted[source] = self._decay * self._accepted.get(source, 0.0) + accepted
        self._tested[source] = self._decay * self._tested.get(source, 0.0) + tested


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens committed by one verify pass of budget k: (1 - alpha^(k+1)) / (1 - alpha).

    Example:
        expected_tokens(0.5, 2) -> 1.75     # 1 + 0.5 + 0.25
        expected_tokens(1.0, 3) -> 4.0      # every token accepted, plus the bonus
    """
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def choose_budget(alpha: float, cost: CostModel, available: int) -> int:
    """The budget k maximising expected tokens per second; 0 if a plain step is best.

    Args:
        alpha: per-token acceptance rate of the candidate's source.
        cost: measured pass latency per budget.
        available: candidate length; k never exceeds it (nor cost.max_k).

    Example:
        cost = CostModel((1.0, 1.1, 1.2, 1.6))
        choose_budget(0.5, cost, 3) -> 2    # 1/1.0, 1.5/1.1, 1.75/1.2, 1.875/1.6
        choose_budget(0.05, cost, 3) -> 0   # 1.05/1.1 < 1/1.0
    """
    best_k, best_rate = 0, 1.0 / cost[0]
    for k in range(1, min(available, cost.max_k) + 1):
        rate = expected_tokens(alpha, k) / cost[k]
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k


class BudgetPolicy(Protocol):
    """Chooses k per candidate and learns from verify outcomes."""

    def choose(self, candidate_len: int, source: str) -> int:
        """Budget for a candidate of `candidate_len` tokens from `source`; 0 = plain step."""
        ...

    def observe(self, source: str, accepted: int, proposed: int) -> None:
        """Feedback after verifying `proposed` tokens of `source`, `accepted` kept."""
        ...

    def pick(self, candidates: Sequence[Candidate]) -> tuple[Candidate | None, int]:
        """The candidate to verify and its budget; (None, 0) for a plain step."""
        ...

    def alone(self, alone: bool) -> None:
        """The target runs on every core (True) or on its share (False) from now on."""
        ...


class FixedBudget:
    """Always verify up to k tokens (the catalog's fixed configurations; k = 0 is target-only).

    Example:
        FixedBudget(4).choose(candidate_len=7, source="drafter") -> 4
        FixedBudget(4).choose(candidate_len=2, source="drafter") -> 2
    """

    def __init__(self, k: int) -> None:
        self.k = k

    def choose(self, candidate_len: int, source: str) -> int:
        """min(k, candidate_len)."""
        return min(self.k, candidate_len)

    def observe(self, source: str, accepted: int, proposed: int) -> None:
        """A fixed budget learns nothing."""

    def pick(self, candidates: Sequence[Candidate]) -> tuple[Candidate | None, int]:
        """The longest candidate (the first on a tie), with budget min(k, its length)."""
        if not candidates or self.k < 1:
            return None, 0
        best = max(candidates, key=lambda c: len(c.tokens))
        return best, self.choose(len(best.tokens), best.source)

    def alone(self, alone: bool) -> None:
        """A fixed budget does not depend on the cost."""


class AutoBudget:
    """Expected-throughput budget: per-source alpha estimates against the measured cost.

    A source whose alpha fell so low that it always loses to a plain step is still probed
    with its best k >= 1 after `probe_every` declined candidates, so it can recover.

    A drafter process runs on cores the target could use: with the target on its share,
    passes cost `cost`; once it takes the drafter's cores too (`alone(True)`), `alone_cost`.

    Args:
        cost: measured pass latency per budget, the target on its share of the cores.
        estimate: per-source acceptance estimates; a default one if None.
        probe_every: declined candidates of one source between probes (0: never probe).
        alone_cost: the same on every core (None: the same as `cost`).

    Example:
        policy = AutoBudget(CostModel((1.0, 1.1, 1.2, 1.6)))
        policy.choose(candidate_len=3, source="drafter") -> 2   # prior alpha = 0.5
    """

    def __init__(
        self,
        cost: CostModel,
        estimate: AcceptanceEstimate | None = None,
        probe_every: int = 32,
        alone_cost: CostModel | None = None,
    ) -> None:
        self.shared_cost = self.cost = cost
        self.alone_cost = alone_cost or cost
        self.estimate = estimate if estimate is not None else AcceptanceEstimate()
        self._probe_every = probe_every
        self._declined: dict[str, int] = {}  # consecutive declined candidates per source

    def choose(self, candidate_len: int, source: str) -> int:
        """The throughput-maximising budget for this source's candidate."""
        alpha = self.estimate.alpha(source)
        k = choose_budget(alpha, self.cost, candidate_len)
        if k > 0 or candidate_len < 1:
            return k
        declined = self._declined.get(source, 0) + 1
        if self._probe_every and declined >= self._probe_every:
            declined, k = 0, self._best_positive_k(alpha, candidate_len)
        self._declined[source] = declined
        return k

    def observe(self, source: str, accepted: int, proposed: int) -> None:
        """Updates the source's alpha estimate."""
        self.estimate.update(source, accepted, proposed)
        self._declined[source] = 0

    def pick(self, candidates: Sequence[Candidate]) -> tuple[Candidate | None, int]:
        """The candidate and budget with the most expected tokens per second."""
        best: tuple[Candidate | None, int] = (None, 0)
        best_rate = 1.0 / self.cost[0]
        for candidate in candidates:
            k = self.choose(len(candidate.tokens), candidate.source)
            rate = expected_tokens(self.estimate.alpha(candidate.source), k) / self.cost[k]
            if k > 0 and (best[0] is None or rate > best_rate):
                best, best_rate = (candidate, k), rate
        return best

    def alone(self, alone: bool) -> None:
        """Chooses budgets with the cost of the target on every core, or on its share."""
        self.cost = self.alone_cost if alone else self.shared_cost

    def _best_positive_k(self, alpha: float, available: int) -> int:
        """The best budget among k >= 1 (for a probe)."""
        ks = range(1, min(available, self.cost.max_k) + 1)
        return max(ks, key=lambda k: expected_tokens(alpha, k) / self.cost[k], default=0)
