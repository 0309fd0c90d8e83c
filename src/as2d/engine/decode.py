"""What every method's window decoder offers (`WindowDecoder`), and target-only decoding:
the baseline every method must equal."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

from as2d.engine.speculative import StepCounts
from as2d.engine.verify import Greedy, Rule
from as2d.target import Encoded, Target
from as2d.types import DrafterActivity, Window

if TYPE_CHECKING:
    from as2d.runtime.cores import CoreLoan
    from as2d.runtime.drafter import DrafterProcess


class WindowDecoder(Protocol):
    """One method's decoding of a recording's windows (target-only `TargetOnlyDecoder`,
    as2d and pld `SpeculativeDecoder`, sd `CoupledDecoder`; `engine.factory` builds them).
    `Transcriber` runs each window through it the same way:

        for window in decoder.windows(windows):
            with decoder.lend_cores(window) as loan:      # the target's encoder
                encoded = target.encode(window.audio, loan.take if loan else None)
                decoder.prepare(window, target.language(encoded, language))
            tokens, counts = decoder.decode(window, encoded, prompt, rule, request)
    """

    drafter: DrafterProcess | None  # the drafter process, if the method has one
    base: int  # the drafter's number of the current recording's window 0

    def windows(self, windows: Iterable[Window]) -> Iterator[Window]:
        """The recording's windows in order (as2d hands each to its drafter early)."""
        ...

    def lend_cores(self, window: Window) -> AbstractContextManager[CoreLoan | None]:
        """Around the target's encoder of `window`: the drafter's cores, once it can spare them."""
        ...

    def prepare(self, window: Window, language: str | None) -> None:
        """What the method does with a window before decoding it, once the target knows its
        `language` (given or detected) (sd: the drafter's encoder; as2d: hands over windows
        that waited for the language)."""
        ...

    def decode(
        self,
        window: Window,
        encoded: Any,
        prompt: Sequence[int],
        rule: Rule,
        request: Sequence[int] = (),
    ) -> tuple[list[int], StepCounts]:
        """One window's output (greedy: equal to target-only), with its step counts.
        `request`: the user's request in target tokens (task ask)."""
        ...

    def activity(self) -> DrafterActivity | None:
        """The drafter's work so far (None without a drafter)."""
        ...

    def forget(self) -> None:
        """Drops what earlier recordings left behind (the history lookup's text)."""
        ...


class TargetOnlyDecoder:
    """The target alone, one forward per output token (`decode_target_only`)."""

    drafter: DrafterProcess | None = None
    base = 0

    def __init__(self, target: Target[Any]) -> None:
        self.target = target

    def windows(self, windows: Iterable[Window]) -> Iterator[Window]:
        yield from windows

    def lend_cores(self, window: Window) -> AbstractContextManager[CoreLoan | None]:
        return nullcontext(None)  # no drafter: the target has every core already

    def prepare(self, window: Window, language: str | None) -> None:
        pass

    def decode(
        self,
        window: Window,
        encoded: Any,
        prompt: Sequence[int],
        rule: Rule,
        request: Sequence[int] = (),
    ) -> tuple[list[int], StepCounts]:
        tokens = decode_target_only(self.target, encoded, prompt, rule)
        return tokens, StepCounts(plain_steps=len(tokens))

    def activity(self) -> DrafterActivity | None:
        return None

    def forget(self) -> None:
        pass


def decode_target_only(
    target: Target[Encoded], encoded: Encoded, prompt: Sequence[int], rule: Rule | None = None
) -> list[int]:
    """Plain decoding with the KV cache: one target forward per output token.

    Args:
        target: the model, its cache reset by `prefill`.
        encoded: the window's encoder output from `target.encode`.
        prompt: the decoder prompt (e.g. Whisper's start-of-transcript sequence).
        rule: Greedy() (default) or Sampling(temperature, generator).

    Returns:
        The output token ids, without prompt or end-of-text.
    """
    rule = rule or Greedy()
    scores = target.prefill(encoded, prompt)  # [V]
    tokens: list[int] = []
    while True:
        token = rule.next_token(scores)
        if token in target.eot_ids or target.length >= target.max_length:
            return tokens
        tokens.append(token)
        scores = target.forward([token])[-1]
