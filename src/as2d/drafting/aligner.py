"""Drafter-stream alignment: where the target's verified text sits in the drafter's own text.

The heart of AS²D (DESIGN.md, "Candidate sources"). The drafter transcribes the window
on its own and publishes a growing token stream (already in the target's vocabulary).
The target never waits for it; at each step it only needs the drafter position that
corresponds to the end of its verified text, the cursor, and proposes the drafter
tokens after it.

- After a full accept (the committed tokens are the drafter's next tokens) the cursor
  advances: O(committed tokens).
- After a correction the cursor re-anchors: the target's last n tokens (n = 6..1,
  longest first) are searched in the drafter tokens near the projected cursor (32
  behind, 96 ahead); the longest match wins, then the one nearest the projection. No
  anchor means no candidate this step; anchoring is tried again next step. A search
  costs O(window), never a scan of the whole stream.
- Anchors compare tokens by a key, `WordKeys` in the engine: the token's text without
  case or surrounding spaces. The drafter often writes the target's words in another
  case (tiny.en: ". hold time" where base writes ". Hold time"), and an exact anchor
  would be lost until the target wrote a word the drafter spelled alike. Proposals are
  the drafter's own tokens all the same; verification decides (bench set, offline:
  plain steps 359 -> 265, see `simulate`).

`simulate` replays a target-only output against a complete drafter output through the
same aligner and the greedy accept rule, to measure the aligner offline.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from as2d.drafting.sources import Candidate
from as2d.engine.verify import greedy_accept

MAX_ANCHOR = 6  # longest suffix tried when re-anchoring; long anchors survive repeated phrases
MIN_ANCHOR = 1
BEHIND = 32  # search reach behind the projected cursor (target inserted words)
AHEAD = 96  # search reach ahead of it (target dropped words, or the projection lags)
_END = -1  # end-of-text in `simulate`: the target's argmax past its last token

TokenKey = Callable[[int], Hashable]  # what anchors compare: tokens with equal keys match


def _same(token: int) -> Hashable:
    return token


class _Decoder(Protocol):
    def decode(self, ids: Sequence[int]) -> str: ...


class WordKeys:
    """A `TokenKey` from a tokenizer: a token's text lower-cased and stripped of spaces
    (" Hold" and " hold" match; " hold" and "hold" too), cached per id. A token without
    such text (blank, special, or part of a UTF-8 character) is its own key.

    Example:
        keys = WordKeys(tokenizer)
        keys(tokenizer.encode(" Hold")[0]) == keys(tokenizer.encode(" hold")[0])  -> True
    """

    def __init__(self, tokenizer: _Decoder) -> None:
        self._tokenizer = tokenizer
        self._keys: dict[int, Hashable] = {}

    def __call__(self, token: int) -> Hashable:
        key = self._keys.get(token)
        if key is None:
            text = self._tokenizer.decode([token]).strip().lower()
            key = self._keys[token] = text if text and "\ufffd" not in text else token
        return key


class StreamAligner:
    """Keeps the cursor into one window's drafter tokens and proposes what follows it.

    Args:
        drafter: the drafter's tokens for this window so far (may keep growing; see
            `update`).
        max_anchor: longest suffix of the verified tokens tried as an anchor.
        min_anchor: shortest anchor accepted.
        behind: how far behind the projected cursor an anchor may end.
        ahead: how far ahead of the projected cursor an anchor may end.
        key: what anchors compare (`WordKeys`); the token ids themselves by default.

    Example:
        aligner = StreamAligner([10, 11, 12, 13, 14])
        aligner.propose([], 3)            -> (10, 11, 12)
        aligner.propose([10, 11, 99], 3)  -> ()            # 99 is nowhere: no anchor
        aligner.propose([10, 11, 99, 13], 3) -> (14,)      # re-anchored on 13
    """

    def __init__(
        self,
        drafter: Sequence[int] = (),
        max_anchor: int = MAX_ANCHOR,
        min_anchor: int = MIN_ANCHOR,
        behind: int = BEHIND,
        ahead: int = AHEAD,
        key: TokenKey = _same,
    ) -> None:
        self._drafter = drafter
        self._max_anchor = max_anchor
        self._min_anchor = min_anchor
        self._behind = behind
        self._ahead = ahead
        self._key = key
        self.reset()

    @property
    def cursor(self) -> int | None:
        """Drafter position aligned with the end of the verified tokens; None if lost."""
        return self._pos if self._anchored else None

    def reset(self) -> None:
        """Starts a new window: nothing verified, cursor at the drafter's first token."""
        self._pos = 0  # cursor, or its projection while not anchored
        self._anchored = True
        self._synced = 0  # len(verified) that _pos refers to
        self._tried = (-1, -1)  # (len(verified), len(drafter)) of the last failed search

    def update(self, drafter: Sequence[int]) -> None:
        """Replaces the drafter tokens with the latest (usually longer) stream."""
        self._drafter = drafter

    def propose(self, verified: Sequence[int], max_tokens: int) -> tuple[int, ...]:
        """Drafter tokens after the cursor, at most `max_tokens`; () if none are ready.

        Args:
            verified: the target's committed output tokens for this window.
            max_tokens: the most tokens wanted (the budget k).
        """
        self._sync(verified)
        if not self._anchored or max_tokens < 1:
            return ()
        return tuple(self._drafter[self._pos : self._pos + max_tokens])

    def observe(self, verified: Sequence[int], accepted: int, proposed: int) -> None:
        """Moves the cursor past the newly committed tokens (advance or re-anchor)."""
        self._sync(verified)

    def _sync(self, verified: Sequence[int]) -> None:
        """Brings the cursor up to `verified`: advance if the drafter agrees, else re-anchor."""
        n = len(verified)
        if n < self._synced:  # a new window restarted the verified tokens
            self.reset()
        new = n - self._synced
        ahead = self._drafter[self._pos : self._pos + new]
        agrees = self._anchored and list(ahead) == list(verified[self._synced :])
        self._pos += new  # on disagreement, the projection: as if the drafter had kept pace
        self._synced = n
        if not agrees:
            self._anchored = False
            self._reanchor(verified)

    def _reanchor(self, verified: Sequence[int]) -> None:
        """Searches the anchor near the projected cursor; sets the cursor if found."""
        attempt = (len(verified), len(self._drafter))
        if attempt == self._tried:
            return  # nothing changed since the last failed search
        if not verified:
            self._pos, self._anchored = 0, True
            return
        found = find_anchor(
            verified,
            self._drafter,
            self._pos,
            self._max_anchor,
            self._behind,
            self._ahead,
            self._key,
        )
        if found is not None and found[1] >= self._min_anchor:
            self._pos, self._anchored = found[0], True
        else:
            self._tried = attempt


def find_anchor(
    verified: Sequence[int],
    drafter: Sequence[int],
    center: int,
    max_anchor: int = MAX_ANCHOR,
    behind: int = BEHIND,
    ahead: int = AHEAD,
    key: TokenKey = _same,
) -> tuple[int, int] | None:
    """Finds where the verified tokens' suffix ends in the drafter tokens near `center`.

    Args:
        verified: the target's committed tokens (non-empty).
        drafter: the drafter's tokens.
        center: the projected cursor.
        max_anchor: longest suffix tried.
        behind: how far before `center` a match may end.
        ahead: how far after `center` a match may end.
        key: what is compared: tokens with equal keys match.

    Returns:
        (end, length): the drafter position right after the best match and the match
        length, the longest match winning, then the one nearest `center` (the earlier
        one on a tie); None if even the last verified token is not found.

    Example:
        verified = [4, 5], drafter = [5, 1, 4, 5, 2, 5], center = 6
        -> (4, 2): the suffix (4, 5) ends at 4; the lone 5s at 1 and 6 are shorter
    """
    last = key(verified[-1])
    cap = min(max_anchor, len(verified))
    lo = max(1, center - behind)
    hi = min(len(drafter), center + ahead)
    best: tuple[int, int] | None = None  # (end, length)
    best_rank = (0, 0)  # (length, -distance): larger is better
    for end in range(lo, hi + 1):
        if key(drafter[end - 1]) != last:
            continue
        length = _match_length(verified, drafter, end, cap, key)
        rank = (length, -abs(end - center))
        if rank > best_rank:
            best, best_rank = (end, length), rank
    return best


def _match_length(
    verified: Sequence[int], drafter: Sequence[int], end: int, cap: int, key: TokenKey
) -> int:
    """How many of the last tokens of `verified` match `drafter[:end]`'s last ones (≤ cap)."""
    length = 0
    limit = min(cap, end)
    while length < limit and key(drafter[end - 1 - length]) == key(verified[-1 - length]):
        length += 1
    return length


class DrafterStreamSource:
    """Candidate source over a drafter's growing token stream for the current window.

    Args:
        read: returns the drafter's tokens for the current window so far, in the
            target's vocabulary, without blocking (e.g. a `DraftStream.tokens` method).
        name: source name for stats and the policy.
        key: what the aligner's anchors compare (`StreamAligner`).
    """

    def __init__(
        self,
        read: Callable[[], Sequence[int]],
        name: str = "drafter",
        key: TokenKey = _same,
    ) -> None:
        self.name = name
        self._read = read
        self._aligner = StreamAligner(key=key)

    def propose(self, verified: Sequence[int], max_tokens: int) -> Candidate | None:
        """The drafter tokens after the cursor, or None if not anchored / not ready."""
        self._aligner.update(self._read())
        tokens = self._aligner.propose(verified, max_tokens)
        return Candidate(tokens, self.name) if tokens else None

    def observe(self, verified: Sequence[int], accepted: int, proposed: int) -> None:
        """Moves the cursor past what the target committed."""
        self._aligner.observe(verified, accepted, proposed)

    def reset(self) -> None:
        """Starts a new window."""
        self._aligner.reset()


@dataclass(frozen=True)
class AlignStats:
    """What `simulate` counted: target forward passes by kind, and candidate tokens.

    Attributes:
        verify_passes: target forwards that verified a candidate.
        plain_steps: target forwards with no candidate (one token each).
        accepted_tokens: candidate tokens the target kept.
        drafted_tokens: candidate tokens verified.
        output: the committed tokens, always the target tokens since the accept rule
            never commits a wrong token (left out of `==` and `repr`).
    """

    verify_passes: int
    plain_steps: int
    accepted_tokens: int
    drafted_tokens: int
    output: tuple[int, ...] = field(default=(), repr=False, compare=False)

    @property
    def forward_passes(self) -> int:
        """All target forwards in the decode phase (target-only needs one per token)."""
        return self.verify_passes + self.plain_steps


def simulate(
    target_tokens: Sequence[int],
    drafter_tokens: Sequence[int],
    k: int,
    key: TokenKey = _same,
    also: Sequence[Sequence[int]] = (),
) -> AlignStats:
    """Replays target-only output against a complete drafter output, offline.

    Each step asks a `StreamAligner` for up to k tokens; with a candidate, the
    target's argmax is read off `target_tokens` and `greedy_accept` decides, else the
    step is plain. Stops once every target token is committed (the end-of-text step
    is not counted; target-only decoding takes `len(target_tokens)` forwards).

    Args:
        target_tokens: the target's greedy output for one window (non-negative ids).
        drafter_tokens: the drafter's complete output for it, in the target's vocabulary.
        k: the budget, the most candidate tokens per verify.
        key: what the aligner's anchors compare (`StreamAligner`).
        also: other drafters' complete outputs for the window: each step verifies the
            longest candidate of all (the first on a tie), as `FixedBudget.pick` does.

    Returns:
        The counts, and the committed output.

    Example:
        simulate([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], k=4)
        -> AlignStats(verify_passes=1, plain_steps=0, accepted_tokens=4, drafted_tokens=4)
    """
    aligners = [StreamAligner(tokens, key=key) for tokens in (drafter_tokens, *also)]
    verified: list[int] = []
    passes = plain = accepted = drafted = 0
    while len(verified) < len(target_tokens):
        candidate = max((a.propose(verified, k) for a in aligners), key=len)
        pos = len(verified)
        if candidate:
            wanted = [*target_tokens[pos : pos + len(candidate) + 1]]
            wanted += [_END] * (len(candidate) + 1 - len(wanted))  # [k + 1] argmax
            verdict = greedy_accept(candidate, wanted)
            at_end = verdict.next_token == _END  # full accept up to the end: no bonus
            verified += verdict.tokens[: verdict.accepted] if at_end else verdict.tokens
            passes, accepted = passes + 1, accepted + verdict.accepted
            drafted += len(candidate)
            for aligner in aligners:
                aligner.observe(verified, verdict.accepted, len(candidate))
        else:
            plain += 1
            verified.append(target_tokens[pos])
            for aligner in aligners:
                aligner.observe(verified, 0, 0)
    return AlignStats(passes, plain, accepted, drafted, tuple(verified))
