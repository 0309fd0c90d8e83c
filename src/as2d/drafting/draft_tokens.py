"""A window's drafted text in the target's vocabulary, re-encoded incrementally.

The drafter publishes text (its vocabulary may differ from the target's); the aligner needs
target tokens. Re-encoding only the tail that can still change keeps this cheap per step.
"""

from __future__ import annotations

from typing import Protocol


class _Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


class _TextSource(Protocol):
    def poll(self) -> None: ...

    def text(self, index: int) -> str: ...


class DraftTokens:
    """A window's drafted text in the TARGET's vocabulary, re-encoded only where it changed.

    Whisper text keeps its leading space (" Hello"), as the model emits it; for targets
    whose text starts without one (chat models: "Hello"), `leading_space=False` strips it.
    Encoding is incremental: the text before the last safe cut (a space that starts a word,
    after a non-space) tokenizes the same alone as inside the whole text under Whisper's
    GPT-2 pre-tokenization and Qwen2's, so only the text after the cut is encoded again.

    Args:
        drafter: where the text comes from (a `DrafterProcess`); polled on every read.
        index: the window.
        tokenizer: the target's tokenizer.
        leading_space: whether the target's text starts with a space, as Whisper's does.

    Example:
        stream = DraftTokens(drafter, 0, target.tokenizer)
        DrafterStreamSource(stream.tokens)   # the aligner reads it without blocking
    """

    def __init__(
        self, drafter: _TextSource, index: int, tokenizer: _Encoder, leading_space: bool = True
    ) -> None:
        self._drafter = drafter
        self._leading_space = leading_space
        self._index = index
        self._tokenizer = tokenizer
        self._text = ""
        self._cut = 0  # text[:cut] encodes to tokens[:cut_tokens], whatever follows
        self._cut_tokens = 0
        self._tokens: list[int] = []

    def tokens(self) -> list[int]:
        """The current drafted tokens (target vocabulary); never waits."""
        self._drafter.poll()
        text = self._drafter.text(self._index)
        if not self._leading_space:
            text = text.lstrip()
        if text != self._text:
            self._update(text)
        return self._tokens

    def _update(self, text: str) -> None:
        if text[: self._cut] != self._text[: self._cut]:
            self._cut = self._cut_tokens = 0  # rewritten before the cut: start over
        head = self._tokens[: self._cut_tokens]
        tail = text[self._cut :]
        split = _last_cut(tail)
        stable = self._tokenizer.encode(tail[:split])
        self._tokens = head + stable + self._tokenizer.encode(tail[split:])
        self._cut += split
        self._cut_tokens += len(stable)
        self._text = text


def _last_cut(text: str) -> int:
    """Position of the last space that starts a word after a non-space (0 if none).

    GPT-2 pre-tokens never span such a space, and none of them looks past it, so
    `encode(text) == encode(text[:cut]) + encode(text[cut:])`.
    """
    cut = len(text) - 1
    while cut > 0:
        cut = text.rfind(" ", 0, cut)
        if cut > 0 and text[cut + 1].isalpha() and not text[cut - 1].isspace():
            return cut
    return 0
