"""Drafter-stream aligner: cursor advance, re-anchoring, offline simulation on tiny token lists."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from as2d.drafting.aligner import (
    AlignStats,
    DrafterStreamSource,
    StreamAligner,
    WordKeys,
    find_anchor,
    simulate,
)
from as2d.drafting.sources import Candidate, CandidateSource
from as2d.models.tokenizer import WhisperTokenizer


def _ids(text: str, vocab: dict[str, int]) -> list[int]:
    """Whitespace words to ids, growing `vocab` (a stand-in for the target's tokenizer)."""
    return [vocab.setdefault(word, len(vocab)) for word in text.split()]


class CountingList(list[int]):
    """A list that counts element reads, to bound the aligner's per-step work."""

    reads = 0

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        item = super().__getitem__(index)
        self.reads += len(item) if isinstance(index, slice) else 1
        return item


# --- simulate: the edit cases ---------------------------------------------------------


def test_exact_match_accepts_everything() -> None:
    target = list(range(20))
    stats = simulate(target, target, k=4)
    assert stats == AlignStats(
        verify_passes=4, plain_steps=0, accepted_tokens=16, drafted_tokens=16
    )
    assert stats.output == tuple(target)


def test_substitution_costs_one_plain_step() -> None:
    target = list(range(20))
    drafter = [*target[:6], 99, *target[7:]]  # the drafter misheard token 6
    stats = simulate(target, drafter, k=4)
    assert stats.output == tuple(target)
    assert stats.plain_steps == 1  # after the correction 6, nothing anchors; then 7 does
    assert stats.forward_passes < len(target) / 2


def test_a_word_in_another_case_re_anchors_under_a_word_key() -> None:
    vocab: dict[str, int] = {}
    target = _ids(". Hold time . Press star for help or pound to exit", vocab)
    drafter = _ids(". hold time . press star for help or pound to exit", vocab)
    words = {i: w for w, i in vocab.items()}
    exact = simulate(target, drafter, k=4)
    keyed = simulate(target, drafter, k=4, key=lambda t: words[t].lower())
    assert exact.output == keyed.output == tuple(target)
    assert exact.plain_steps == 2  # after each correction ("Hold", "Press") nothing anchors
    assert keyed.plain_steps == 0  # "Hold" anchors on "hold": "time ." is proposed next
    assert keyed.forward_passes < exact.forward_passes


def test_word_keys_ignore_case_and_spaces_but_not_punctuation(
    english_tokenizer: WhisperTokenizer,
) -> None:
    keys = WordKeys(english_tokenizer)
    (hold,), (lower,), (bare,) = (english_tokenizer.encode(t) for t in (" Hold", " hold", "hold"))
    assert keys(hold) == keys(lower) == keys(bare) == "hold"
    assert keys(english_tokenizer.encode(",")[0]) != keys(english_tokenizer.encode(".")[0])
    assert keys(english_tokenizer.eot) == english_tokenizer.eot  # no text: its own key


def test_insertion_by_target_re_anchors() -> None:
    target = [*range(10), 50, 51, *range(10, 20)]  # the target heard two more words
    stats = simulate(target, list(range(20)), k=4)
    assert stats.output == tuple(target)
    assert stats.plain_steps == 2  # 50 and 51 exist nowhere in the drafter text
    assert stats.forward_passes <= 9


def test_deletion_by_target_re_anchors_without_plain_steps() -> None:
    target = [*range(8), *range(10, 20)]  # the target skipped drafter tokens 8 and 9
    stats = simulate(target, list(range(20)), k=4)
    assert stats.output == tuple(target)
    assert stats.plain_steps == 0  # the correction 10 is itself an anchor ahead
    assert stats.forward_passes == 4  # 5 tokens, 3 + correction 10, 4 + bonus, last 4


def test_a_second_drafter_covers_what_the_first_misheard() -> None:
    """Two drafts, each wrong where the other is right (`also`): every step verifies the
    longer candidate, so the target steps alone nowhere and needs fewer passes than with
    either draft; the output is the target's all the same."""
    target = [*range(10), 50, 51, *range(10, 20), 60, 61, *range(20, 30)]
    first = [*range(10), 50, 51, *range(10, 30)]  # missed 60 61
    second = [*range(20), 60, 61, *range(20, 30)]  # missed 50 51
    one, other = simulate(target, first, k=4), simulate(target, second, k=4)
    both = simulate(target, first, k=4, also=[second])
    assert both.output == one.output == other.output == tuple(target)
    assert one.plain_steps == other.plain_steps == 2 and both.plain_steps == 0
    assert both.forward_passes < min(one.forward_passes, other.forward_passes)


def test_empty_drafter_means_target_alone() -> None:
    stats = simulate([3, 1, 4, 1, 5], [], k=4)
    assert stats == AlignStats(verify_passes=0, plain_steps=5, accepted_tokens=0, drafted_tokens=0)
    assert stats.output == (3, 1, 4, 1, 5)


def test_drafter_ahead_is_capped_at_k() -> None:
    aligner = StreamAligner(list(range(100)))
    assert aligner.propose([], 4) == (0, 1, 2, 3)
    assert aligner.propose([0, 1, 2, 3, 4], 8) == (5, 6, 7, 8, 9, 10, 11, 12)
    assert aligner.cursor == 5


# --- the aligner step by step ---------------------------------------------------------


def test_repeated_phrase_re_anchors_near_the_cursor_not_at_the_first_occurrence() -> None:
    vocab: dict[str, int] = {}
    target = _ids("it was the best of times it was the worst of times", vocab)
    drafter = _ids("it was the best of times uh it was the worst of times", vocab)
    aligner = StreamAligner(drafter)
    verified = target[:6]  # "... of times", fully accepted
    assert aligner.propose(verified, 4) == tuple(drafter[6:10])  # "uh it was the"
    verified = target[:7]  # the target rejects "uh" and corrects to "it"
    aligner.observe(verified, accepted=0, proposed=4)
    assert aligner.cursor == 8  # the "it" after "uh", not the first word
    assert aligner.propose(verified, 4) == tuple(_ids("was the worst of", vocab))


def test_longer_anchor_wins_over_a_nearer_shorter_one() -> None:
    #          0  1  2  3  4  5  6  7
    drafter = [7, 8, 9, 1, 2, 9, 3, 4]
    assert find_anchor([7, 8, 9], drafter, center=6) == (3, 3)
    assert find_anchor([5, 9], drafter, center=6) == (6, 1)  # nearest lone 9


def test_anchor_search_stays_inside_its_window() -> None:
    drafter = [*range(100, 200), 5, 6, *range(300, 400)]
    assert find_anchor([5, 6], drafter, center=0, ahead=96) is None  # 6 ends at 102
    assert find_anchor([5, 6], drafter, center=10, ahead=96) == (102, 2)
    assert find_anchor([5, 6], drafter, center=200, behind=32) is None


def test_drafter_behind_proposes_nothing_until_it_catches_up() -> None:
    target = list(range(10, 30))
    drafter: list[int] = target[:2]  # the drafter's stream grows in place
    aligner = StreamAligner(drafter)
    verified = target[:2]
    assert aligner.propose(verified, 4) == ()  # at the drafter's end: nothing ready
    verified = target[:5]  # the target stepped alone past the drafter
    assert aligner.propose(verified, 4) == ()
    assert aligner.cursor is None
    drafter.extend(target[2:4])  # still behind
    assert aligner.propose(verified, 4) == ()
    drafter.extend(target[4:12])
    assert aligner.propose(verified, 4) == tuple(target[5:9])
    assert aligner.cursor == 5


def test_update_replaces_the_stream() -> None:
    aligner = StreamAligner()
    assert aligner.propose([], 3) == ()
    aligner.update((4, 5, 6, 7))
    assert aligner.propose([], 3) == (4, 5, 6)
    assert aligner.propose([4], 3) == (5, 6, 7)


def test_new_window_resets_the_cursor() -> None:
    aligner = StreamAligner([1, 2, 3, 4])
    assert aligner.propose([1, 2, 3], 2) == (4,)
    aligner.update([8, 9, 10])  # next window's stream; verified restarts
    assert aligner.propose([], 2) == (8, 9)


def test_per_step_work_is_bounded_not_a_scan_of_the_stream() -> None:
    drafter = CountingList(range(100_000))
    aligner = StreamAligner(drafter)
    verified = list(range(50_000))
    aligner.observe(verified, 0, 0)  # one correction-free jump: plain advance
    drafter.reads = 0
    aligner.observe([*verified, -7], 0, 0)  # a correction: re-anchor (fails)
    aligner.observe([*verified, -7, 50_001], 0, 0)  # re-anchor succeeds
    assert aligner.cursor == 50_002
    assert drafter.reads < 1_000


def test_drafter_stream_source_reads_without_blocking() -> None:
    stream: list[int] = []
    source: CandidateSource = DrafterStreamSource(lambda: stream, name="tiny")
    assert source.propose([], 4) is None
    stream.extend([5, 6, 7])
    assert source.propose([], 4) == Candidate((5, 6, 7), "tiny")
    source.observe([5, 6], accepted=2, proposed=3)
    assert source.propose([5, 6], 4) == Candidate((7,), "tiny")


# --- properties on random edits -------------------------------------------------------


def _edit(tokens: Sequence[int], rng: random.Random, rate: float, vocab: int) -> list[int]:
    """Random substitutions, insertions and deletions at `rate` per token."""
    out: list[int] = []
    for token in tokens:
        roll = rng.random()
        if roll < rate / 3:
            out.append(rng.randrange(vocab))  # substitution
        elif roll < 2 * rate / 3:
            out += [token, rng.randrange(vocab)]  # insertion
        elif roll >= rate:
            out.append(token)  # kept (else deleted)
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 4, 8])
def test_simulated_output_is_always_the_target(seed: int, k: int) -> None:
    rng = random.Random(seed)
    vocab = rng.choice([5, 30, 500])  # small vocabularies repeat phrases a lot
    target = [rng.randrange(vocab) for _ in range(rng.randrange(1, 300))]
    drafter = _edit(target, rng, rate=rng.choice([0.0, 0.05, 0.3, 1.0]), vocab=vocab)
    stats = simulate(target, drafter, k)
    assert stats.output == tuple(target)
    assert stats.accepted_tokens <= stats.drafted_tokens <= k * stats.verify_passes
    assert stats.accepted_tokens + stats.forward_passes >= len(target)
    assert stats.forward_passes <= len(target)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [1, 3, 8])
def test_identical_drafter_needs_one_pass_per_k_plus_one_tokens(seed: int, k: int) -> None:
    rng = random.Random(100 + seed)
    target = [rng.randrange(7) for _ in range(rng.randrange(1, 200))]
    stats = simulate(target, target, k)
    assert stats.verify_passes == math.ceil(len(target) / (k + 1))
    assert stats.plain_steps == 0
