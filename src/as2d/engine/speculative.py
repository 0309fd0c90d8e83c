"""Speculative greedy decoding of one window: verify ready candidates, else step alone.

Per step (DESIGN.md, Data flow): ask every source for a candidate without blocking, let the
policy pick one and a budget k, run one target forward over `[pending, c1..ck]`, keep the
longest prefix the target agrees with plus its own next token, roll the KV cache back past
the rejected tail, and tell the sources what was committed. With no candidate (or k = 0) the
step is a plain single-token forward, exactly as in target-only decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from as2d.drafting.sources import Candidate, CandidateSource
from as2d.engine.policy import BudgetPolicy
from as2d.engine.target import Encoded, Target
from as2d.verify import Greedy, Rule


@dataclass
class StepCounts:
    """How a window's output was produced."""

    verify_passes: int = 0  # target forwards that verified a candidate
    plain_steps: int = 0  # target forwards of one token, no candidate
    accepted_tokens: int = 0  # candidate tokens the target agreed with
    drafted_tokens: int = 0  # candidate tokens sent to verification


def speculative_decode(
    target: Target[Encoded],
    encoded: Encoded,
    prompt: Sequence[int],
    sources: Sequence[CandidateSource],
    policy: BudgetPolicy,
    max_k: int = 16,
    rule: Rule | None = None,
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
        rule: Greedy() (default) or Sampling(temperature, generator).

    Returns:
        The output tokens (without prompt or end-of-text) and the step counts.
    """
    rule = rule or Greedy()
    counts = StepCounts()
    tokens: list[int] = []
    pending = rule.next_token(target.prefill(encoded, prompt))  # next token, not yet fed
    while pending not in target.eot_ids and target.length < target.max_length:
        tokens.append(pending)
        room = target.max_length - target.length - 1  # cache positions left after `pending`
        candidate, k = _pick(sources, policy, tokens, min(max_k, room))
        if candidate is None:
            pending = rule.next_token(target.forward([pending])[-1])
            counts.plain_steps += 1
            _observe(sources, tokens, 0, 0)
            continue
        draft = candidate.tokens[:k]
        pending, accepted = _verify(target, rule, pending, draft, tokens, counts)
        policy.observe(candidate.source, accepted, k)
        _observe(sources, tokens, accepted, k)
    return tokens, counts


def _pick(
    sources: Sequence[CandidateSource], policy: BudgetPolicy, verified: list[int], max_k: int
) -> tuple[Candidate | None, int]:
    if max_k < 1:
        return None, 0
    candidates = [c for s in sources if (c := s.propose(verified, max_k)) is not None]
    candidate, k = policy.pick(candidates)
    return (candidate, k) if candidate is not None and k > 0 else (None, 0)


def _verify(
    target: Target[Any],
    rule: Rule,
    pending: int,
    draft: Sequence[int],
    tokens: list[int],
    counts: StepCounts,
) -> tuple[int, int]:
    """One forward over [pending, *draft]; commit the agreed prefix.

    Returns:
        The next pending token (the correction, or the bonus) and how many were accepted.
    """
    start = target.length
    verdict = rule.verdict(draft, target.forward([pending, *draft]))  # scores: [k + 1, V]
    target.rollback(start + 1 + verdict.accepted)  # keep pending + accepted candidates
    tokens.extend(draft[: verdict.accepted])
    counts.verify_passes += 1
    counts.drafted_tokens += len(draft)
    counts.accepted_tokens += verdict.accepted
    return verdict.next_token, verdict.accepted


def _observe(
    sources: Sequence[CandidateSource], verified: list[int], accepted: int, proposed: int
) -> None:
    for source in sources:
        source.observe(verified, accepted, proposed)
