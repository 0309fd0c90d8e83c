"""Accept/reject rules for one verify pass: which candidate tokens the target keeps.

Pure functions, no model: the decode loop runs the target over `[last, c1..ck]` and
hands the result here. Greedy decoding keeps exact token equality with target-only
decoding; sampling keeps exactly the target's distribution. Both rules follow
speculative decoding (Leviathan et al. 2023; Chen et al. 2023) with a point-mass
proposal, since every candidate source proposes fixed tokens rather than a
distribution.

The guard (DESIGN.md, Verification rules): a verify pass of k + 1 rows runs other kernels
than a single-token step, so its scores differ from target-only's in the last bits. A
decision that such a difference could overturn (greedy: a top-2 margin within the rounding
bound; sampling: a uniform draw that close to its threshold) is marked unsure, and the
decode loop recomputes that position the way target-only computes it before committing it.
The bound is the target's runtime's (`Backend.bound`), measured per runtime and precision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Verdict:
    """Outcome of one verify pass.

    Attributes:
        accepted: how many candidate tokens the target kept (0..k).
        next_token: the target's own token after the accepted ones: the correction
            after a rejection, or the bonus token after a full accept.
        tokens: what to commit: `candidate[:accepted] + (next_token,)`.
        unsure: the first of the verdict's decisions (row i decides the token after
            `candidate[:i]`, rows 0..accepted) that rounding could overturn; None when every
            decision stands. Only the candidate tokens before it may be committed.
        margin: how far the closest decision was from flipping (greedy: logits; sampling:
            probability), for reports.
        uniforms: sampling: the k uniforms of the accept tests, then the final draw's; an
            unsure decision is made again with the same uniforms on exact scores (`redo`).
    """

    accepted: int
    next_token: int
    tokens: tuple[int, ...]
    unsure: int | None = None
    margin: float = field(default=math.inf, compare=False)
    uniforms: tuple[float, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Choice:
    """One position's token from one row of scores, and whether rounding could overturn it."""

    token: int
    sure: bool
    margin: float  # greedy: top-2 logit margin; sampling: distance of the draw to a threshold
    uniform: float = math.nan  # sampling: the uniform the token was drawn with


def greedy_accept(
    candidate: Sequence[int],
    target_argmax: Sequence[int],
    margins: Sequence[float] = (),
    bound: float = 0.0,
) -> Verdict:
    """Greedy rule: keep the longest prefix where the target's argmax equals the candidate.

    Args:
        candidate: c1..ck, the proposed tokens.
        target_argmax: k + 1 tokens, the target's argmax after each position of
            `[last, c1..ck]` (pass `logits.argmax(-1).tolist()`).
        margins: k + 1 top-2 score margins of the same rows (none: every decision stands).
        bound: a decision whose margin is at most this is unsure.

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

        candidate     = [5, 7]
        target_argmax = [5, 7, 3],  margins = [4.0, 1e-4, 2.0],  bound = 2e-3
        -> Verdict(accepted=2, ..., unsure=1, margin=1e-4)   # commit 5 only, recompute the next
    """
    if len(target_argmax) != len(candidate) + 1:
        raise ValueError(f"need {len(candidate) + 1} target tokens, got {len(target_argmax)}")
    accepted = 0
    for proposed, wanted in zip(candidate, target_argmax, strict=False):
        if proposed != wanted:
            break
        accepted += 1
    next_token = int(target_argmax[accepted])
    decided = list(margins[: accepted + 1])  # the rows whose argmax the verdict relies on
    unsure = next((i for i, m in enumerate(decided) if m <= bound), None)
    margin = min(decided, default=math.inf)
    return Verdict(accepted, next_token, (*candidate[:accepted], next_token), unsure, margin)


def sample_accept(
    candidate: Sequence[int],
    probs: torch.Tensor,
    generator: torch.Generator | None = None,
    tolerance: float = 0.0,
) -> Verdict:
    """Sampling rule for a point-mass proposal: the committed tokens follow the target exactly.

    Args:
        candidate: c1..ck, the proposed tokens.
        probs: [k + 1, V] the target's next-token probabilities after each position
            of `[last, c1..ck]`, with temperature / top-p already applied.
        generator: random source on `probs.device`, for reproducible draws.
        tolerance: the relative error rounding may leave in `probs`; a draw that close to
            its threshold is an unsure decision.

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
    gaps = (u - p_cand).abs().tolist()  # [k] each uniform's distance to its threshold p_i(c_i)
    slack = (p_cand * tolerance).tolist()  # [k] how far rounding may move that threshold
    v = float(torch.rand((), generator=generator, device=probs.device))
    draw = _invert(dist, v)  # a residual's normalised sums err by <= 2 * tolerance
    # Decision i < accepted kept c_i; decision `accepted` rejected c_accepted (if < k) and drew.
    sure = [gaps[i] > slack[i] for i in range(accepted)]
    rejection_sure = accepted == k or gaps[accepted] > slack[accepted]
    sure.append(rejection_sure and draw.margin > 2 * tolerance)
    unsure = next((i for i, ok in enumerate(sure) if not ok), None)
    margin = min([*gaps[: accepted + 1], draw.margin])
    tokens = (*candidate[:accepted], draw.token)
    return Verdict(accepted, draw.token, tokens, unsure, margin, (*u.tolist(), v))


def _invert(dist: torch.Tensor, v: float) -> Choice:
    """The token of `dist` ([V], unnormalised) whose interval of the cumulative sums holds the
    uniform `v`, and v's distance to the nearer end of it (`sure` is left to the caller, who
    knows the rounding tolerance).

    Example:
        _invert([0.5, 0.0, 1.5], 0.3) -> Choice(token=2, margin=0.05, uniform=0.3)
        # normalised sums [0.25, 0.25, 1.0]: 0.3 falls in token 2's interval (0.25, 1.0]
    """
    cdf = dist.double().cumsum(0)  # [V]
    cdf = cdf / cdf[-1]
    token = min(
        int(torch.searchsorted(cdf, torch.tensor(v, dtype=cdf.dtype), right=True)), len(cdf) - 1
    )
    lower = float(cdf[token - 1]) if token > 0 else 0.0
    return Choice(token, True, min(v - lower, float(cdf[token]) - v), v)


class Greedy:
    """Greedy decoding: the next token is the argmax; candidates are kept by `greedy_accept`.

    Args:
        bound: a decision whose top-2 score margin is at most this is unsure (the guard;
            `Backend.bound` of the target's runtime). 0: only exact ties.
    """

    def __init__(self, bound: float = 0.0) -> None:
        self.bound = bound

    def next_token(self, scores: torch.Tensor) -> int:
        """scores: [V] -> the argmax (target-only decoding: no margin needed)."""
        return int(scores.argmax())

    def choose(self, scores: torch.Tensor) -> Choice:
        """scores: [V] -> the argmax, sure unless its top-2 margin is within the bound."""
        top = scores.topk(2)  # values, indices: [2]
        margin = float(top.values[0] - top.values[1])
        token = int(top.indices[0]) if margin > 0 else int(scores.argmax())  # argmax's tie rule
        return Choice(token, margin > self.bound, margin)

    def redo(self, scores: torch.Tensor, candidate: int | None, uniforms: Sequence[float]) -> int:
        """An unsure decision made again on exact scores ([V]): the argmax."""
        return self.next_token(scores)

    def verdict(self, candidate: Sequence[int], scores: torch.Tensor) -> Verdict:
        """scores: [k + 1, V] after each position of `[last, c1..ck]`."""
        top = scores.topk(2, -1)  # values, indices: [k + 1, 2]
        margins = (top.values[:, 0] - top.values[:, 1]).tolist()
        # topk and argmax may pick different tokens only on an exact tie, which is unsure.
        return greedy_accept(candidate, top.indices[:, 0].tolist(), margins, self.bound)


class Sampling:
    """Temperature sampling: tokens drawn from softmax(scores / T); `sample_accept` keeps
    the target's distribution exactly.

    Args:
        temperature: T > 0.
        generator: random source, for reproducible draws (seeded by the caller).
        bound: the guard's score bound (see `Greedy`); a score error of b changes each
            probability by a factor of at most exp(2 b / T).
    """

    def __init__(
        self, temperature: float, generator: torch.Generator | None = None, bound: float = 0.0
    ) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
        self.temperature = temperature
        self.generator = generator
        self.bound = bound
        self.tolerance = math.expm1(2 * bound / temperature)  # relative error of a probability

    def next_token(self, scores: torch.Tensor) -> int:
        """scores: [V] -> a token drawn from softmax(scores / T)."""
        return self.choose(scores).token

    def choose(self, scores: torch.Tensor) -> Choice:
        """scores: [V] -> a drawn token, sure unless the draw lies within rounding of an end
        of its token's interval."""
        v = float(torch.rand((), generator=self.generator))
        draw = _invert(_probs(scores, self.temperature), v)
        return Choice(draw.token, draw.margin > 2 * self.tolerance, draw.margin, v)

    def redo(self, scores: torch.Tensor, candidate: int | None, uniforms: Sequence[float]) -> int:
        """An unsure decision made again on exact scores ([V]) with the uniforms it was made
        with: the accept test of `candidate` (uniforms[0]) if any, then the draw (last).

        Example (probs [0.2, 0.5, 0.3] on exact scores):
            redo(scores, 1, (0.49, v)) -> 1        # 0.49 < p(1): the candidate stands
            redo(scores, 1, (0.51, 0.1)) -> 0      # rejected: draw 0.1 from [0.4, 0, 0.6]
            redo(scores, None, (0.9,)) -> 2        # a plain step's draw
        """
        probs = _probs(scores, self.temperature)  # [V]
        if candidate is not None:
            if uniforms[0] < float(probs[candidate]):
                return candidate
            probs = probs.clone()
            probs[candidate] = 0.0
        return _invert(probs, uniforms[-1]).token

    def verdict(self, candidate: Sequence[int], scores: torch.Tensor) -> Verdict:
        """scores: [k + 1, V] after each position of `[last, c1..ck]`."""
        probs = _probs(scores, self.temperature)
        return sample_accept(candidate, probs, self.generator, self.tolerance)


def _probs(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(scores / T) in float32 on the CPU, where the generator lives."""
    return (scores.float().cpu() / temperature).softmax(-1)


Rule = Greedy | Sampling
