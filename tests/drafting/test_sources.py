"""Candidate protocol and the n-gram lookup sources (prompt and history)."""

from __future__ import annotations

import pytest

from as2d.drafting.sources import Candidate, CandidateSource, HistoryLookup, PromptLookup


def test_candidate_needs_tokens() -> None:
    assert Candidate((1, 2), "x").tokens == (1, 2)
    with pytest.raises(ValueError):
        Candidate((), "x")


# --- prompt lookup --------------------------------------------------------------------


def test_prompt_lookup_proposes_what_follows_the_suffix() -> None:
    source: CandidateSource = PromptLookup([1, 2, 3, 4, 5])
    assert source.propose([9, 2, 3], 4) == Candidate((4, 5), "prompt")
    assert source.propose([9, 2, 3], 1) == Candidate((4,), "prompt")


def test_prompt_lookup_prefers_the_longest_suffix() -> None:
    #                       0  1  2  3  4  5  6  7
    source = PromptLookup([8, 3, 1, 9, 2, 3, 4, 6], max_ngram=3)
    assert source.propose([2, 3], 2) == Candidate((4, 6), "prompt")  # (2, 3), not the 3 at 1
    assert source.propose([7, 3], 2) == Candidate((1, 9), "prompt")  # lone 3: first occurrence


def test_prompt_lookup_has_nothing_without_a_match() -> None:
    source = PromptLookup([1, 2, 3], min_ngram=2)
    assert source.propose([], 4) is None
    assert source.propose([7, 1], 4) is None  # (7, 1) unseen; a lone 1 is too short
    assert source.propose([2, 3], 4) is None  # the prompt's end has no continuation
    assert source.propose([1, 2], 0) is None


# --- history lookup -------------------------------------------------------------------


def test_history_lookup_reuses_an_earlier_window() -> None:
    """`propose` and `observe` both take `verified` as committed: either feeds the history."""
    source = HistoryLookup()
    source.observe([7, 8, 9, 10], accepted=0, proposed=0)
    assert source.propose([3, 7, 8], 2) == Candidate((9, 10), "history")  # window 2 starts


def test_history_lookup_prefers_the_most_recent_occurrence() -> None:
    source = HistoryLookup(min_ngram=2, max_ngram=2)
    source.observe([1, 2, 3], 0, 0)
    source.end_window()
    source.observe([1, 2, 4], 0, 0)
    source.end_window()
    assert source.propose([1, 2], 1) == Candidate((4,), "history")


def test_history_lookup_within_the_current_window() -> None:
    source = HistoryLookup()
    assert source.propose([5, 6, 7, 5], 3) is None
    assert source.propose([5, 6, 7, 5, 6], 3) == Candidate((7, 5, 6), "history")


def test_history_lookup_detects_a_restarted_window() -> None:
    source = HistoryLookup(min_ngram=2, max_ngram=2)
    source.observe([1, 2, 3, 4], 0, 0)
    source.observe([5, 6], 0, 0)  # shorter: a new window, appended after 4
    source.observe([5, 6, 7], 0, 0)
    source.observe([1, 9, 9], 0, 0)  # not shorter, but another first token: a new window
    assert source.propose([4, 5], 2) == Candidate((6, 7), "history")
    assert source.propose([6, 7], 2) == Candidate((1, 9), "history")


def test_history_lookup_memory_is_bounded() -> None:
    source = HistoryLookup(min_ngram=2, max_ngram=3, capacity=64)
    for window in range(100):
        source.observe([1000 + window, 1, 2, 3, 2000 + window], 0, 0)
        source.end_window()
    assert source.propose([3, 1000], 1) is None  # forgotten long ago
    assert source.propose([2, 3], 1) == Candidate((2099,), "history")  # the latest window
    assert source.propose([2098, 1099], 1) == Candidate((1,), "history")
    assert len(source._stream) <= 64
    assert len(source._index) <= 3 * 64
