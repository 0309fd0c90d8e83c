"""Candidate sources: the one small protocol the decode loop drafts through, and n-gram lookups.

The engine asks every source for a candidate each step and tells it afterwards what
the target committed (the transformers `CandidateGenerator` contract: get candidates,
update from how many were accepted). It knows no source by name. This module holds
the protocol and the two model-free sources:

- `PromptLookup`: n-grams from the request/prompt tokens (prompt lookup decoding).
- `HistoryLookup`: n-grams from earlier verified output, bounded in memory.

The drafter-stream source lives in `as2d.drafting.aligner`. A source may propose
anything: verification decides, so a wrong guess costs time, never correctness.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Candidate:
    """Tokens proposed for the next target positions.

    Attributes:
        tokens: proposed next target tokens, at least one.
        source: name of the source that proposed them, for stats and the policy.
    """

    tokens: tuple[int, ...]
    source: str

    def __post_init__(self) -> None:
        if not self.tokens:
            raise ValueError("a candidate holds at least one token; propose None instead")


class CandidateSource(Protocol):
    """Anything that can propose the target's next tokens.

    `verified` is always the target's committed output tokens for the current window
    (no prompt, no forced prefix); it only grows within a window and restarts (shorter)
    at the next window.
    """

    name: str

    def propose(self, verified: Sequence[int], max_tokens: int) -> Candidate | None:
        """Returns up to `max_tokens` tokens to follow `verified`; None if nothing is ready.

        Must not block: a source with nothing ready answers None at once.
        """
        ...

    def observe(self, verified: Sequence[int], accepted: int, proposed: int) -> None:
        """Feedback after a step: `verified` now includes what was committed.

        `proposed` is how many of this source's tokens were verified (0 if the step did
        not use this source) and `accepted` how many of them the target kept.
        """
        ...


def _suffix_keys(tokens: Sequence[int], min_ngram: int, max_ngram: int) -> list[tuple[int, ...]]:
    """The last n tokens of `tokens` as tuples, longest first (n = max_ngram..min_ngram)."""
    longest = min(max_ngram, len(tokens))
    return [tuple(tokens[len(tokens) - n :]) for n in range(longest, min_ngram - 1, -1)]


class PromptLookup:
    """Prompt lookup decoding: find the verified suffix in the prompt, propose what follows.

    The index over the prompt is built once; a lookup costs at most `max_ngram` dict
    probes. For each n-gram the earliest occurrence is kept (the longest continuation).

    Args:
        prompt: the request/prompt token ids in the target's vocabulary.
        name: source name for stats and the policy.
        min_ngram: shortest suffix that may match.
        max_ngram: longest suffix tried (tried first).

    Example:
        prompt = [1, 2, 3, 4, 5], verified = [9, 2, 3]
        -> the suffix (2, 3) is found; candidate (4, 5)
    """

    def __init__(
        self,
        prompt: Sequence[int],
        name: str = "prompt",
        min_ngram: int = 1,
        max_ngram: int = 3,
    ) -> None:
        self.name = name
        self._prompt = tuple(prompt)
        self._min_ngram = min_ngram
        self._max_ngram = max_ngram
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> position right after it
        for end in range(1, len(self._prompt)):  # end == len(prompt) has no continuation
            for n in range(min_ngram, min(max_ngram, end) + 1):
                self._index.setdefault(self._prompt[end - n : end], end)

    def propose(self, verified: Sequence[int], max_tokens: int) -> Candidate | None:
        """Continuation of the longest matching suffix of `verified`, or None."""
        if max_tokens < 1:
            return None
        for key in _suffix_keys(verified, self._min_ngram, self._max_ngram):
            start = self._index.get(key)
            if start is not None:
                return Candidate(self._prompt[start : start + max_tokens], self.name)
        return None

    def observe(self, verified: Sequence[int], accepted: int, proposed: int) -> None:
        """Nothing to learn: the prompt does not change."""


class HistoryLookup:
    """N-gram lookup over verified output: earlier windows and the current one so far.

    Every committed token is appended to one stream (windows in order), indexed
    incrementally: each n-gram maps to the position after its most recent occurrence.
    Memory is bounded: past `capacity` tokens the older half is dropped and the index
    rebuilt (amortised O(max_ngram) per token).

    Window changes are detected from `verified` restarting (shorter, or a different
    first or last-seen token); `end_window()` makes it explicit. A missed detection only
    weakens lookups, never correctness.

    Args:
        name: source name for stats and the policy.
        min_ngram: shortest suffix that may match (2 avoids matching on one common token).
        max_ngram: longest suffix tried (tried first).
        capacity: most tokens kept; older ones are forgotten.

    Example:
        window 1 verified: [7, 8, 9, 10]; window 2 verified so far: [3, 7, 8]
        -> the suffix (7, 8) was followed by 9 before; candidate (9, 10, 3, 7)
           (max_tokens=4: the stream runs on into window 2)
    """

    def __init__(
        self,
        name: str = "history",
        min_ngram: int = 2,
        max_ngram: int = 4,
        capacity: int = 8192,
    ) -> None:
        self.name = name
        self._min_ngram = min_ngram
        self._max_ngram = max_ngram
        self._capacity = max(capacity, 2 * max_ngram)
        self._stream: list[int] = []  # verified tokens of all windows seen, in order
        self._base = 0  # absolute position of _stream[0]
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> absolute position after it
        self._seen = 0  # tokens of the current window already in the stream
        self._first = -1  # first and last token of the current window seen so far
        self._last = -1

    def propose(self, verified: Sequence[int], max_tokens: int) -> Candidate | None:
        """Continuation of the most recent earlier occurrence of `verified`'s suffix, or None."""
        self._sync(verified)
        if max_tokens < 1:
            return None
        for key in _suffix_keys(verified, self._min_ngram, self._max_ngram):
            start = self._index.get(key)
            if start is not None:
                offset = start - self._base
                return Candidate(tuple(self._stream[offset : offset + max_tokens]), self.name)
        return None

    def observe(self, verified: Sequence[int], accepted: int, proposed: int) -> None:
        """Appends newly committed tokens to the history."""
        self._sync(verified)

    def end_window(self) -> None:
        """Marks the current window finished: the next `verified` starts a new one."""
        self._seen = 0

    def _sync(self, verified: Sequence[int]) -> None:
        """Appends the tokens of `verified` not yet in the stream."""
        seen = self._seen
        restarted = len(verified) < seen or (
            seen > 0 and (verified[0] != self._first or verified[seen - 1] != self._last)
        )
        if restarted:
            seen = 0
        for token in verified[seen:]:
            self._append(token)
        if verified:
            self._first, self._last = verified[0], verified[-1]
        self._seen = len(verified)

    def _append(self, token: int) -> None:
        """Appends one token, indexing the n-grams that it continues."""
        stream = self._stream
        end = len(stream)
        for n in range(self._min_ngram, min(self._max_ngram, end) + 1):
            self._index[tuple(stream[end - n : end])] = self._base + end
        stream.append(token)
        if len(stream) > self._capacity:
            self._forget(len(stream) // 2)

    def _forget(self, count: int) -> None:
        """Drops the oldest `count` tokens and rebuilds the index over the rest."""
        kept = self._stream[count:]
        self._base += count
        self._stream = []
        self._index = {}
        for token in kept:
            self._append(token)
