"""Pure helpers on sequences (token ids, text) that the drafter process, the drafting code and
the evaluation all need; no torch, so the drafter process can import them for free."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def common_prefix(a: Sequence[T], b: Sequence[T]) -> int:
    """Length of the longest common prefix of `a` and `b` (token ids or text).

    Example:
        common_prefix([1, 2, 3], [1, 2, 5, 6]) -> 2
        common_prefix(" Hello wor", " Hello world") -> 10
    """
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)
