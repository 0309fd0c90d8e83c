"""AS²D over a recording: the drafter runs ahead over the windows, the target verifies.

`WindowFeeder` reads windows ahead of the target and hands them to the drafter process as
early as its lookahead allows, so the drafter's text for a window is (mostly) ready when
the target starts on it. `SpeculativeDecoder` decodes one window with the candidate sources
(the drafter's stream re-encoded in the target's vocabulary, lookup in earlier windows'
output and in the user's request) and never waits for the drafter: a source with nothing
ready proposes nothing.
Without a drafter (`drafter=None`) it is prompt/history lookup decoding (`pld`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch

from as2d.drafting.aligner import DrafterStreamSource, WordKeys
from as2d.drafting.draft_tokens import DraftTokens
from as2d.drafting.sources import CandidateSource, HistoryLookup, PromptLookup
from as2d.engine.policy import BudgetPolicy
from as2d.engine.speculative import StepCounts, speculative_decode
from as2d.engine.target import Target, TextTokenizer
from as2d.runtime.drafter import DrafterProcess
from as2d.types import DrafterActivity, Window
from as2d.verify import Rule


class SpeculativeDecoder:
    """Decodes windows with candidates from a drafter process and from earlier output.

    Window numbers given to the drafter run on across recordings (the drafter process
    lives as long as the decoder); `base` maps a recording's window i to `base + i`.
    """

    def __init__(
        self,
        target: Target[Any],
        tokenizer: TextTokenizer,
        policy: BudgetPolicy,
        drafter: DrafterProcess | None = None,
        max_k: int = 16,
        leading_space: bool = True,
    ) -> None:
        self.target = target
        self.tokenizer = tokenizer  # the target's: drafter text is re-encoded with it
        self.word_keys = WordKeys(tokenizer)  # anchors match words whatever their case
        self.leading_space = leading_space  # whether the target's text starts with a space
        self.policy = policy
        self.drafter = drafter
        self.max_k = max_k
        self.history = HistoryLookup()
        self.base = 0  # drafter window number of the current recording's window 0

    def windows(self, windows: Iterable[Window]) -> Iterator[Window]:
        """Yields a recording's windows in order, submitting each to the drafter early."""
        count = 0
        ahead: deque[Window] = deque()
        source = iter(windows)
        while True:
            while not ahead or self._drafter_wants(count):
                window = next(source, None)
                if window is None:
                    break
                self._submit(window)
                ahead.append(window)
                count += 1
            if not ahead:
                break
            yield ahead.popleft()
        self.base += count

    def prepare(self, window: Window) -> None:
        """Nothing to do before decoding a window: the drafter process already has it."""

    def decode(
        self,
        window: Window,
        encoded: Any,
        prompt: Sequence[int],
        rule: Rule,
        request: Sequence[int] = (),
    ) -> tuple[list[int], StepCounts]:
        """One window's output (greedy: equal to target-only), with its step counts.

        `request` is the user's request in target tokens (task ask): looked up as well.
        """
        sources: list[CandidateSource] = [self.history]
        if request:
            sources.insert(0, PromptLookup(request, max_ngram=4))
        if self.drafter is not None:
            index = self.base + window.index
            stream = DraftTokens(self.drafter, index, self.tokenizer, self.leading_space)
            sources.insert(0, DrafterStreamSource(stream.tokens, key=self.word_keys))
        tokens, counts = speculative_decode(
            self.target, encoded, prompt, sources, self.policy, self.max_k, rule
        )
        if self.drafter is not None:
            self.drafter.release(self.base + window.index)
        self.history.end_window()
        return tokens, counts

    @contextmanager
    def lend_cores(self, window: Window, threads: int, extra: int) -> Iterator[CoreLoan]:
        """The drafter's cores for the target's encoder of `window` (see `CoreLoan`)."""
        loan = CoreLoan(self.drafter, self.base + window.index, threads, extra)
        try:
            yield loan
        finally:
            loan.close()

    def activity(self) -> DrafterActivity | None:
        """The drafter's work so far (None without a drafter)."""
        d = self.drafter
        if d is None:
            return None
        d.poll()
        return DrafterActivity(d.spec.name, d.busy_s, d.windows_drafted, d.lost, d.reason)

    def _drafter_wants(self, count: int) -> bool:
        return self.drafter is not None and self.drafter.wants(self.base + count)

    def _submit(self, window: Window) -> None:
        index = self.base + window.index
        if self.drafter is not None and self.drafter.wants(index):
            self.drafter.submit(replace(window, index=index))


class CoreLoan:
    """The drafter's cores lent to the target for one window's encoder, as soon as it can spare
    them.

    The encoder is most of a window's target time and takes about half as long on two cores
    as on one. `take` is called before the encoder and between its layers (`Target.encode`):
    once the drafter can spare its cores (`DrafterProcess.spare`: past its own encoder for the
    window, or for a whole-window drafter done with it), it is stopped where it is and the
    target runs the rest of its encoder on the drafter's cores too; `close` continues the
    drafter. Stopped earlier, the drafter would have nothing for the target's first steps
    (asterisk + piper long-form, 2 recordings: lending always 1.41x end to end; only when the
    drafter had encoded the window by the encoder's start 1.49x; ct2:whisper-tiny.en on the
    bench set, stopped once past its encoder rather than done: 18.9 % plain steps, not 7.5 %).

    Args:
        drafter: the drafter process (None, or lost: the cores are free).
        index: the window, in the drafter's numbering.
        threads: the target's own threads.
        extra: the drafter's threads, added to the target's while lent.
    """

    def __init__(
        self, drafter: DrafterProcess | None, index: int, threads: int, extra: int
    ) -> None:
        self.drafter = drafter
        self.index = index
        self.threads = threads
        self.extra = extra
        self.taken = False

    def take(self) -> None:
        """Takes the drafter's cores if it can spare them now (once per loan)."""
        d = self.drafter
        if self.taken:
            return
        if d is not None:
            d.poll()
            if d.alive and not (d.spare(self.index) and d.stop()):
                return
        torch.set_num_threads(self.threads + self.extra)
        self.taken = True

    def close(self) -> None:
        """Gives the cores back: the drafter goes on, the target keeps its own threads."""
        if self.drafter is not None:
            self.drafter.resume()
        torch.set_num_threads(self.threads)
