"""Accept/reject rules for one verify pass: which candidate tokens the target keeps.

Pure functions, no model: the decode loop runs the target over `[last, c1..ck]` and
hands the result here. Greedy decoding keeps exact token equality with target-only
decoding; sampling keeps exactly the target's distribution. Both rules follow
speculative decoding (Leviathan et al. 2023; Chen et al. 2023) with a point-mass
proposal, since every candidate source proposes fixed tokens rather than a
distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Verdict:
    """Outcome of one verify pass.

    Attributes:
        accepted: how many candidate tokens the target kept (0..k).
        next_token: the target's own token after the accepted ones: the correction
            after a rejection, or the bonus token after a full accept.
        tokens: what to commit: `candidate[:accepted] + (next_token,)`.
    """

    accepted: int
    next_token: int
    tokens: tuple[int, ...]


def greedy_accept(candidate: Sequence[int], target_argmax: Sequence[int]) -> Verdict:
    """Greedy rule: keep the longest prefix where the target's argmax equals the candidate.

    Args:
        candidate: c1..ck, the proposed tokens.
        target_argmax: k + 1 tokens, the target's argmax after each position of
            `[last, c1..ck]` (pass `logits.argmax(-1).tolist()`).

    Returns:
        The verdict; `tokens` is exactly what target-only greedy decoding emits next.

    Raises:
        ValueError: if `target_argmax` does not hold k + 1 tokens.

    Example:
        candidate     = [5, 7, 9]
        target_argmax = [5, 7, 2, 4]   # target agrees on 5, 7; wants 2 instead of 9
        -> Verdict(accepted=2, next_token=2, tokens=(5, 7, 2))

        candidate     = [5, 7]
        target_argmax = [5, 7, 3]      # full accept; 3 is the bonus token
        -> Verdict(accepted=2, next_token=3, tokens=(5, 7, 3))
    """
    if len(target_argmax) != len(candidate) + 1:
        raise ValueError(f"need {len(candidate) + 1} target tokens, got {len(target_argmax)}")
    accepted = 0
    for proposed, wanted in zip(candidate, target_argmax, strict=False):
        if proposed != wanted:
            break
        accepted += 1
    next_token = int(target_argmax[accepted])
    return Verdict(accepted, next_token, (*candidate[:accepted], next_token))


def sample_accept(
    candidate: Sequence[int],
    probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> Verdict:
    """Sampling rule for a point-mass proposal: the committed tokens follow the target exactly.

    Args:
        candidate: c1..ck, the proposed tokens.
        probs: [k + 1, V] the target's next-token probabilities after each position
            of `[last, c1..ck]`, with temperature / top-p already applied.
        generator: random source on `probs.device`, for reproducible draws.

    Returns:
        The verdict; `next_token` is sampled (correction or bonus).

    Raises:
        ValueError: if `probs` does not have k + 1 rows.

    Example:
        candidate = [1]
        probs     = [[0.2, 0.5, 0.3],    # p(. | last): candidate 1 kept with prob 0.5
                     [0.0, 0.0, 1.0]]    # p(. | last, 1): bonus is 2
        -> Verdict(accepted=1, next_token=2, tokens=(1, 2))            with prob 0.5
        -> Verdict(accepted=0, next_token=0, tokens=(0,))              with prob 0.2
        -> Verdict(accepted=0, next_token=2, tokens=(2,))              with prob 0.3
    """
    k = len(candidate)
    if probs.dim() != 2 or probs.shape[0] != k + 1:
        raise ValueError(f"need probs of shape [{k + 1}, V], got {list(probs.shape)}")
    # Rule (speculative sampling with proposal q = point mass at x = c_i):
    #   accept x with probability min(1, p(x) / q(x)) = p(x);
    #   on rejection, sample from norm(max(0, p - q)) = p with x removed, renormalised.
    # Why exact: P(emit y) = p(x) [y = x] + (1 - p(x)) * p(y) / (1 - p(x)) [y != x] = p(y).
    # This holds at each position given the committed prefix, so the whole sequence
    # has the target's distribution; after a full accept the bonus comes from p[k].
    cand = torch.tensor(list(candidate), dtype=torch.long, device=probs.device)  # [k]
    p_cand = probs[:k].gather(1, cand[:, None]).squeeze(1)  # [k] p_i(c_i)
    u = torch.rand(k, generator=generator, device=probs.device)  # [k] uniform in [0, 1)
    rejected = (u >= p_cand).nonzero().flatten().tolist()
    accepted = rejected[0] if rejected else k
    dist = probs[accepted]  # [V]
    if accepted < k:
        dist = dist.clone()
        dist[cand[accepted]] = 0.0
        dist = dist / dist.sum()
    next_token = int(torch.multinomial(dist, 1, generator=generator).item())
    return Verdict(accepted, next_token, (*candidate[:accepted], next_token))


class Greedy:
    """Greedy decoding: the next token is the argmax; candidates are kept by `greedy_accept`."""

    def next_token(self, scores: torch.Tensor) -> int:
        """scores: [V] -> the argmax."""
        return int(scores.argmax())

    def verdict(self, candidate: Sequence[int], scores: torch.Tensor) -> Verdict:
        """scores: [k + 1, V] after each position of `[last, c1..ck]`."""
        return greedy_accept(candidate, scores.argmax(-1).tolist())


class Sampling:
    """Temperature sampling: tokens drawn from softmax(scores / T); `sample_accept` keeps
    the target's distribution exactly.

    Args:
        temperature: T > 0.
        generator: random source, for reproducible draws (seeded by the caller).
    """

    def __init__(self, temperature: float, generator: torch.Generator | None = None) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
        self.temperature = temperature
        self.generator = generator

    def next_token(self, scores: torch.Tensor) -> int:
        """scores: [V] -> a token drawn from softmax(scores / T)."""
        probs = _probs(scores, self.temperature)  # [V]
        return int(torch.multinomial(probs, 1, generator=self.generator).item())

    def verdict(self, candidate: Sequence[int], scores: torch.Tensor) -> Verdict:
        """scores: [k + 1, V] after each position of `[last, c1..ck]`."""
        return sample_accept(candidate, _probs(scores, self.temperature), self.generator)


def _probs(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(scores / T) in float32 on the CPU, where the generator lives."""
    return (scores.float().cpu() / temperature).softmax(-1)


Rule = Greedy | Sampling
