"""Speculative greedy decoding of one window: verify ready candidates, else step alone.

Per step (DESIGN.md, Data flow): ask every source for a candidate without blocking, let the
policy pick one and a budget k, run one target forward over `[pending, c1..ck]`, keep the
longest prefix the target agrees with plus its own next token, roll the KV cache back past
the rejected tail, and tell the sources what was committed. With no candidate (or k = 0) the
step is a plain single-token forward, exactly as in target-only decoding.

Exact by construction (DESIGN.md, Verification rules): a verify pass computes its rows with
other kernels than target-only's single steps, so from the first position a pass computed,
the cache (and every later row) may differ from target-only's in the last bits. A decision
the rule marks unsure (within rounding of flipping) is not committed: the cache is rebuilt
from that first position by single steps, as target-only builds it, and the position is
decided from those scores, which are target-only's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from as2d.drafting.sources import Candidate, CandidateSource
from as2d.engine.policy import BudgetPolicy
from as2d.engine.verify import Greedy, Rule
from as2d.target import Encoded, Target


@dataclass
class StepCounts:
    """How a window's output was produced."""

    verify_passes: int = 0  # target forwards that verified a candidate
    plain_steps: int = 0  # target forwards of one token, no candidate
    accepted_tokens: int = 0  # candidate tokens the target agreed with
    drafted_tokens: int = 0  # candidate tokens sent to verification
    guarded: int = 0  # positions recomputed as target-only computes them (unsure decisions)
    alone: int = 0  # passes the target ran on every core, the drafter's included
    min_margin: float | None = None  # the closest a decision came to flipping (see Verdict)

    def saw(self, margin: float) -> None:
        """Keeps the smallest finite decision margin."""
        if math.isfinite(margin):
            self.min_margin = margin if self.min_margin is None else min(self.min_margin, margin)


def speculative_decode(
    target: Target[Encoded],
    encoded: Encoded,
    prompt: Sequence[int],
    sources: Sequence[CandidateSource],
    policy: BudgetPolicy,
    max_k: int = 16,
    rule: Rule | None = None,
    before_pass: Callable[[int], bool] | None = None,
) -> tuple[list[int], StepCounts]:
    """Decoding with candidates: greedy output equals `decode_target_only`'s token for token;
    sampled output has exactly its distribution.

    Args:
        target: the model; its cache is reset by `prefill`.
        encoded: the window's encoder output.
        prompt: the decoder prompt.
        sources: candidate sources, asked in order every step.
        policy: picks the candidate and budget k.
        max_k: the most candidate tokens asked of a source.
        rule: Greedy() (default) or Sampling(temperature, generator), with the guard's bound.
        before_pass: called with the number of output tokens committed before each pass
            after the prefill: whether the target runs it on every core (`CoreLoan.take`;
            counted in `StepCounts.alone`).

    Returns:
        The output tokens (without prompt or end-of-text) and the step counts.
    """
    rule = rule or Greedy()
    pending = rule.next_token(target.prefill(encoded, prompt))  # as target-only computes it
    window = _Window(target, rule)
    while pending not in target.eot_ids and target.length < target.max_length:
        window.tokens.append(pending)
        room = target.max_length - target.length - 1  # cache positions left after `pending`
        if before_pass is not None and before_pass(len(window.tokens)):
            window.counts.alone += 1
        candidate, k = _pick(sources, policy, window.tokens, min(max_k, room))
        if candidate is None:
            pending = window.step(pending)
            _observe(sources, window.tokens, 0, 0)
            continue
        draft = _until_end(candidate.tokens[:k], target.eot_ids)
        pending, accepted = window.verify(pending, draft)
        policy.observe(candidate.source, accepted, k)
        _observe(sources, window.tokens, accepted, k)
    return window.tokens, window.counts


class _Window:
    """One window's committed tokens, step counts, and how much of the cache target-only
    would have computed bit for bit (`exact`: the positions before the first one a verify
    pass computed)."""

    def __init__(self, target: Target[Any], rule: Rule) -> None:
        """Starts after the prefill, whose cache is target-only's own."""
        self.target = target
        self.rule = rule
        self.prompt_length = target.length
        self.tokens: list[int] = []  # output so far; the cache holds the prompt + tokens
        self.counts = StepCounts()
        self.exact = target.length

    def step(self, pending: int) -> int:
        """A plain step over `pending` (the last of `tokens`); returns the next pending token."""
        exact = self.exact == self.target.length  # the step runs as target-only's would
        choice = self.rule.choose(self.target.forward([pending])[-1])
        self.counts.plain_steps += 1
        self.counts.saw(choice.margin)
        if exact:
            self.exact = self.target.length
        return choice.token if choice.sure or exact else self._recompute(None, (choice.uniform,))

    def verify(self, pending: int, draft: Sequence[int]) -> tuple[int, int]:
        """One forward over [pending, *draft]; commits the candidate tokens it surely agrees
        with. Returns the next pending token (correction, bonus, or recomputed) and how many
        candidate tokens were committed."""
        start = self.target.length
        verdict = self.rule.verdict(draft, self.target.forward([pending, *draft]))  # [k + 1, V]
        self.exact = min(self.exact, start)
        kept = verdict.accepted if verdict.unsure is None else verdict.unsure
        self.target.rollback(start + 1 + kept)  # keep pending + the committed candidates
        c = self.counts
        c.verify_passes, c.drafted_tokens = c.verify_passes + 1, c.drafted_tokens + len(draft)
        c.accepted_tokens += kept
        c.saw(verdict.margin)
        if kept and draft[kept - 1] in self.target.eot_ids:  # the target ends here
            self.tokens.extend(draft[: kept - 1])
            return draft[kept - 1], kept - 1
        self.tokens.extend(draft[:kept])
        if verdict.unsure is None:
            return verdict.next_token, kept
        proposed = draft[kept] if kept < len(draft) else None  # the unsure decision's candidate
        uniforms = (*verdict.uniforms[kept : kept + 1], *verdict.uniforms[-1:])
        return self._recompute(proposed, uniforms), kept

    def _recompute(self, proposed: int | None, uniforms: Sequence[float]) -> int:
        """Target-only's own choice for the next position: the cache is rebuilt by single
        steps from its first inexact position, then the rule decides again on those exact
        scores, with the candidate token and the uniforms of the unsure decision."""
        self.counts.guarded += 1
        unfed = self.tokens[self.exact - self.prompt_length :]  # at least the last token
        self.target.rollback(self.exact)
        for token in unfed:
            scores = self.target.forward([token])[-1]  # [V]
        self.exact = self.target.length
        return self.rule.redo(scores, proposed, uniforms)


def _until_end(draft: Sequence[int], end: frozenset[int]) -> Sequence[int]:
    """`draft` up to and including its first end token: nothing after the target's end."""
    cut = next((i for i, token in enumerate(draft) if token in end), len(draft) - 1)
    return draft[: cut + 1]


def _pick(
    sources: Sequence[CandidateSource], policy: BudgetPolicy, verified: list[int], max_k: int
) -> tuple[Candidate | None, int]:
    if max_k < 1:
        return None, 0
    candidates = [c for s in sources if (c := s.propose(verified, max_k)) is not None]
    candidate, k = policy.pick(candidates)
    return (candidate, k) if candidate is not None and k > 0 else (None, 0)


def _observe(
    sources: Sequence[CandidateSource], verified: list[int], accepted: int, proposed: int
) -> None:
    for source in sources:
        source.observe(verified, accepted, proposed)
