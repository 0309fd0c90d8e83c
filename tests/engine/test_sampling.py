"""Speculative sampling keeps the target's distribution exactly (a statistical test).

The target is a toy with a 4-token vocabulary whose scores depend on the position and the
last token, so the exact probability of every output sequence can be enumerated and the
sampled frequencies tested against it (chi-square), for target-only and speculative runs.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

import pytest
import torch

from as2d.drafting.sources import Candidate
from as2d.engine.decode import decode_target_only
from as2d.engine.policy import FixedBudget
from as2d.engine.speculative import speculative_decode
from as2d.engine.verify import Sampling

V, EOT, MAX_LENGTH = 4, 3, 5  # tokens 0..2 and end-of-text; prompt of 1 + at most 4 tokens


class ToyTarget:
    """Scores = table[position, last token]; a KV cache is the token history."""

    def __init__(self, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.table = torch.randn(MAX_LENGTH + 1, V, V, generator=generator) * 1.5  # [T, V, V]
        self.eot_ids = frozenset({EOT})
        self.max_length = MAX_LENGTH
        self.history: list[int] = []

    @property
    def length(self) -> int:
        return len(self.history)

    def encode(self, audio: object) -> None:
        return None

    def prefill(self, encoded: None, prompt: Sequence[int]) -> torch.Tensor:
        self.history = []
        return self.forward(prompt)[-1]

    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        rows = []
        for token in tokens:
            self.history.append(token)
            rows.append(self.table[len(self.history), token])
        return torch.stack(rows)  # [n, V]

    def rollback(self, length: int) -> None:
        del self.history[length:]


class FixedGuess:
    """A source that always proposes the same (often wrong) tokens."""

    name = "guess"

    def propose(self, verified: Sequence[int], max_tokens: int) -> Candidate | None:
        return Candidate((0, 1, 0, 1)[:max_tokens], self.name)

    def observe(self, verified: Sequence[int], accepted: int, proposed: int) -> None:
        pass


def exact_distribution(target: ToyTarget, temperature: float) -> dict[tuple[int, ...], float]:
    """P(output) for every output sequence, by enumeration."""
    probs: dict[tuple[int, ...], float] = {}
    for n in range(MAX_LENGTH):
        for seq in itertools.product(range(EOT), repeat=n):
            history, p = [EOT], 1.0  # prompt: one token
            for token in (*seq, EOT) if n < MAX_LENGTH - 1 else seq:
                step = (target.table[len(history), history[-1]] / temperature).softmax(-1)
                p *= float(step[token])
                history.append(token)
            probs[seq] = p
    return probs


def chi_square(samples: Counter[tuple[int, ...]], probs: dict[tuple[int, ...], float]) -> float:
    n = sum(samples.values())
    assert set(samples) <= set(probs)
    return sum((samples[s] - n * p) ** 2 / (n * p) for s, p in probs.items() if n * p > 0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_speculative_sampling_matches_the_target_distribution(temperature):
    target = ToyTarget(seed=3)
    probs = exact_distribution(target, temperature)
    assert abs(sum(probs.values()) - 1.0) < 1e-5
    rule = Sampling(temperature, torch.Generator().manual_seed(11))
    runs = 12_000
    plain = Counter(tuple(decode_target_only(target, None, [EOT], rule)) for _ in range(runs))
    speculative = Counter(
        tuple(speculative_decode(target, None, [EOT], [FixedGuess()], FixedBudget(3), rule=rule)[0])
        for _ in range(runs)
    )
    dof = len(probs) - 1
    limit = dof + 6 * (2 * dof) ** 0.5  # far in the tail: p < 1e-6 for a correct sampler
    assert chi_square(plain, probs) < limit
    assert chi_square(speculative, probs) < limit


class RoundingToyTarget(ToyTarget):
    """ToyTarget whose passes of several rows, and rows computed while the cache holds what
    such a pass wrote, are off by up to `noise` logits (kernels that round differently)."""

    def __init__(self, seed: int, noise: float) -> None:
        super().__init__(seed)
        generator = torch.Generator().manual_seed(seed + 1)
        self.noise = (torch.rand(V, generator=generator) * 2 - 1) * noise  # [V]
        self.by_pass: list[bool] = []

    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        del self.by_pass[len(self.history) :]  # positions rolled back
        dirty = len(tokens) > 1 or any(self.by_pass)
        self.by_pass += [len(tokens) > 1] * len(tokens)
        rows = super().forward(tokens)  # [n, V]
        return rows + self.noise if dirty else rows


@pytest.mark.parametrize("bound, holds", [(0.4, True), (0.0, False)])
def test_the_guard_keeps_the_distribution_when_passes_round_differently(bound, holds):
    """With the guard, draws near a threshold are made again on exact scores with the same
    uniforms: the distribution stays the target's. Without it, the chi-square test sees the
    passes' rounding (the test has the power to catch it)."""
    target = RoundingToyTarget(seed=3, noise=0.4)
    probs = exact_distribution(target, 1.0)
    rule = Sampling(1.0, torch.Generator().manual_seed(11), bound=bound)
    runs, guarded = 12_000, 0
    samples: Counter[tuple[int, ...]] = Counter()
    for _ in range(runs):
        tokens, counts = speculative_decode(
            target, None, [EOT], [FixedGuess()], FixedBudget(3), rule=rule
        )
        samples[tuple(tokens)] += 1
        guarded += counts.guarded
    dof = len(probs) - 1
    limit = dof + 6 * (2 * dof) ** 0.5
    assert (chi_square(samples, probs) < limit) == holds
    assert (guarded > 0) == holds
