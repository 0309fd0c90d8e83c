"""The guard: a verify pass that rounds differently from single steps never changes the output.

`RoundingToy` is a target whose single-token steps on a clean cache compute exact scores,
while a pass of several rows, and every row computed while the cache holds positions such a
pass wrote, is off by up to `noise` logits, as a GPU's or oneDNN's kernels are off from
target-only's. Its scores have near-ties that this noise flips, so without the guard the
speculative output differs from target-only (shown first); with it, it never does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from as2d.drafting.sources import Candidate
from as2d.engine.decode import decode_target_only
from as2d.engine.policy import FixedBudget
from as2d.engine.speculative import speculative_decode
from as2d.engine.verify import Greedy

V, EOT, MAX_LENGTH = 8, 7, 40
NOISE = 1e-2  # logits between a pass's rows and exact single steps
TIE = 4e-3  # top-2 margin of every near-tie: the noise can flip it


class RoundingToy:
    """Scores = table[position, last token], plus rounding noise on pass-computed rows."""

    def __init__(self, seed: int, eot_at: int | None = None, noise: float = NOISE) -> None:
        g = torch.Generator().manual_seed(seed)
        table = torch.randn(MAX_LENGTH + 1, V, V, generator=g) * 3  # [T, V, V]
        table[..., EOT] = -10.0
        if eot_at is not None:
            table[eot_at, :, EOT] = 10.0
        top = table.topk(2, -1)
        near = torch.rand(MAX_LENGTH + 1, V, generator=g) < 0.5  # half the rows: a near-tie
        runner_up = top.values[..., 0] - TIE  # [T, V]
        table.scatter_(
            -1, top.indices[..., 1:], torch.where(near, runner_up, top.values[..., 1])[..., None]
        )
        self.table = table
        self.noise = (torch.rand(V, generator=g) * 2 - 1) * noise  # [V] in [-noise, noise]
        self.eot_ids = frozenset({EOT})
        self.max_length = MAX_LENGTH
        self.history: list[tuple[int, bool]] = []  # (token, written by a pass of several rows)

    @property
    def length(self) -> int:
        return len(self.history)

    def prefill(self, encoded: None, prompt: Sequence[int]) -> torch.Tensor:
        self.history = []
        return self.forward(prompt)[-1]

    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        rows = []
        for token in tokens:
            dirty = len(tokens) > 1 or any(by_pass for _, by_pass in self.history)
            self.history.append((token, len(tokens) > 1))
            row = self.table[len(self.history), token]
            rows.append(row + self.noise if dirty else row)
        return torch.stack(rows)  # [n, V]

    def rollback(self, length: int) -> None:
        del self.history[length:]


class Oracle:
    """Proposes the given continuation of the verified tokens, on every `every`-th step."""

    name = "oracle"

    def __init__(self, tokens: Sequence[int], every: int = 1) -> None:
        self.tokens = list(tokens)
        self.every = every
        self.calls = 0

    def propose(self, verified: Sequence[int], max_tokens: int) -> Candidate | None:
        self.calls += 1
        rest = self.tokens[len(verified) : len(verified) + max_tokens]
        if self.calls % self.every or not rest or self.tokens[: len(verified)] != list(verified):
            return None
        return Candidate(tuple(rest), self.name)

    def observe(self, verified: Sequence[int], accepted: int, proposed: int) -> None:
        pass


def _decode(target: RoundingToy, source: Oracle, bound: float) -> tuple[list[int], int]:
    tokens, counts = speculative_decode(
        target, None, [EOT], [source], FixedBudget(6), rule=Greedy(bound)
    )
    return tokens, counts.guarded


def test_the_toy_flips_near_ties_without_the_guard() -> None:
    """The hazard is real: a pass's rounding alone changes the greedy output."""
    differs = 0
    for seed in range(10):
        target = RoundingToy(seed)
        expected = decode_target_only(target, None, [EOT])
        tokens, guarded = _decode(target, Oracle(expected), bound=0.0)
        differs += tokens != expected
        assert guarded == 0
    assert differs >= 5


def test_the_guard_keeps_target_only_output_under_rounding_noise() -> None:
    for seed in range(10):
        for every in (1, 2, 3):  # plain steps between passes run on a pass-written cache too
            target = RoundingToy(seed)
            expected = decode_target_only(target, None, [EOT])
            tokens, guarded = _decode(target, Oracle(expected, every), bound=2 * NOISE)
            assert tokens == expected, (seed, every)
            assert guarded > 0


def test_plain_steps_on_an_exact_cache_are_never_recomputed() -> None:
    """Without candidates nothing is pass-written: target-only's own steps, no recompute."""
    target = RoundingToy(seed=1)
    expected = decode_target_only(target, None, [EOT])
    tokens, guarded = _decode(target, Oracle([], every=1), bound=2 * NOISE)
    assert tokens == expected and guarded == 0


def test_an_end_token_inside_a_candidate_ends_the_output_there() -> None:
    """A candidate that goes on past end-of-text (the target's own continuation after it,
    so every row agrees) commits nothing beyond target-only's end."""
    target = RoundingToy(seed=2, eot_at=12, noise=0.0)
    expected = decode_target_only(target, None, [EOT])
    assert 0 < len(expected) < MAX_LENGTH - 2
    target.prefill(None, [EOT, *expected, EOT])  # the greedy continuation after the end
    after = [int(target.table[len(target.history), EOT].argmax())]
    for _ in range(4):
        target.forward([after[-1]])
        after.append(int(target.table[len(target.history), after[-1]].argmax()))
    proposal = [*expected, EOT, *after]
    for bound in (0.0, 2 * NOISE):
        tokens, _ = _decode(target, Oracle(proposal), bound)
        assert tokens == expected
