"""Accept/reject rules: greedy equality and the point-mass sampling rule, checked statistically."""

from __future__ import annotations

import pytest
import torch

from as2d.engine.verify import Verdict, greedy_accept, sample_accept

# --- greedy ---------------------------------------------------------------------------


def test_greedy_correction_after_partial_accept() -> None:
    assert greedy_accept([5, 7, 9], [5, 7, 2, 4]) == Verdict(2, 2, (5, 7, 2))


def test_greedy_full_accept_appends_bonus() -> None:
    assert greedy_accept([5, 7], [5, 7, 3]) == Verdict(2, 3, (5, 7, 3))


def test_greedy_first_token_rejected() -> None:
    assert greedy_accept([1, 2, 3], [4, 2, 3, 9]) == Verdict(0, 4, (4,))


def test_greedy_empty_candidate_is_a_plain_step() -> None:
    assert greedy_accept([], [8]) == Verdict(0, 8, (8,))


def test_greedy_rejects_wrong_argmax_length() -> None:
    with pytest.raises(ValueError):
        greedy_accept([1, 2], [1, 2])


# --- sampling -------------------------------------------------------------------------


CHI2_CRIT_0001 = {4: 18.47, 5: 20.52, 11: 31.26, 15: 37.70}  # df -> chi-square, p = 0.001
DRAWS = 1500  # per statistical test; ~0.2 ms each on 2 CPU cores


def _random_probs(rows: int, vocab: int, seed: int) -> torch.Tensor:
    """[rows, vocab] random distributions, token 0 impossible everywhere."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.rand(rows, vocab, generator=g) + 0.2  # [rows, vocab]
    probs[:, 0] = 0.0
    return probs / probs.sum(-1, keepdim=True)


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson statistic of `counts` against `probs` over the possible cells, and its df."""
    possible = probs > 0
    expected = counts.sum() * probs[possible]
    stat = float(((counts[possible] - expected) ** 2 / expected).sum())
    return stat, int(possible.sum()) - 1


def test_sample_docstring_example_is_exact_at_the_edges() -> None:
    probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # candidate 1 certain, bonus 2
    assert sample_accept([1], probs) == Verdict(1, 2, (1, 2))
    probs = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])  # candidate 1 impossible
    assert sample_accept([1], probs) == Verdict(0, 2, (2,))


def test_sample_rejects_wrong_shape() -> None:
    with pytest.raises(ValueError):
        sample_accept([1, 2], torch.full((2, 4), 0.25))


@pytest.mark.parametrize("candidate", [(0, 3), (2, 1), (5, 5)])
def test_sample_first_token_follows_target(candidate: tuple[int, int]) -> None:
    """Whatever the candidate (impossible, likely or not), the first token is ~ p."""
    probs = _random_probs(3, 6, seed=1)  # [k + 1, V]
    g = torch.Generator().manual_seed(2)
    counts = torch.zeros(6)
    for _ in range(DRAWS):
        counts[sample_accept(candidate, probs, g).tokens[0]] += 1
    assert counts[0] == 0
    stat, df = _chi2(counts, probs[0])
    assert stat < CHI2_CRIT_0001[df]


def test_chi2_test_would_catch_resampling_with_the_candidate_kept() -> None:
    """Power: the classic bug (resample from p, x not removed) gives q != p; at DRAWS the
    expected statistic is far above the critical value."""
    p = _random_probs(1, 6, seed=1)[0]  # [V]
    x = 2
    q = (1 - p[x]) * p  # [V] law of the buggy rule's first token
    q[x] += p[x]
    noncentrality = DRAWS * float(((q - p)[p > 0] ** 2 / p[p > 0]).sum())
    assert noncentrality > 3 * CHI2_CRIT_0001[5]


def test_sample_plain_step_samples_target() -> None:
    probs = _random_probs(1, 6, seed=3)  # [1, V]
    g = torch.Generator().manual_seed(4)
    counts = torch.zeros(6)
    for _ in range(DRAWS):
        verdict = sample_accept([], probs, g)
        assert verdict.accepted == 0
        counts[verdict.next_token] += 1
    stat, df = _chi2(counts, probs[0])
    assert stat < CHI2_CRIT_0001[df]


def test_sample_two_step_sequence_matches_direct_sampling() -> None:
    """Joint law of (y1, y2): verify [c1, c2], then a plain step if only y1 came out."""
    vocab, c1, c2 = 4, 2, 3
    first = _random_probs(1, vocab, seed=5)[0]  # [V] p(y1)
    second = _random_probs(vocab, vocab, seed=6)  # [V, V] p(y2 | y1)
    second[:, 0] = second[:, 1]  # let y2 = 0 happen too
    second = second / second.sum(-1, keepdim=True)
    probs = torch.stack([first, second[c1], torch.full((vocab,), 1 / vocab)])  # [3, V]
    g = torch.Generator().manual_seed(7)
    counts = torch.zeros(vocab, vocab)
    for _ in range(2 * DRAWS):
        tokens = sample_accept([c1, c2], probs, g).tokens
        if len(tokens) == 1:  # rejected at c1: the next step samples y2 from the target
            tokens = (*tokens, int(torch.multinomial(second[tokens[0]], 1, generator=g)))
        counts[tokens[0], tokens[1]] += 1
    joint = first[:, None] * second  # [V, V] p(y1) p(y2 | y1)
    stat, df = _chi2(counts.flatten(), joint.flatten())
    assert stat < CHI2_CRIT_0001[df]
