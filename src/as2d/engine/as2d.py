"""AS²D over a recording: the drafter runs ahead over the windows, the target verifies.

`WindowFeeder` reads windows ahead of the target and hands them to the drafter process as
early as its lookahead allows, so the drafter's text for a window is (mostly) ready when
the target starts on it. `SpeculativeDecoder` decodes one window with the candidate sources
(the drafter's stream re-encoded in the target's vocabulary, lookup in earlier windows'
output and in the user's request) and never waits for the drafter: a source with nothing
ready proposes nothing.
Without a drafter (`drafter=None`) it is prompt/history lookup decoding (`pld`).
A live stream (`live.LiveSession`) has its utterances drafted as they grow and decoded by the
same `decode`, through `Utterances` and the decoder's `*_utterance` methods.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from as2d.drafting.aligner import DrafterStreamSource, WordKeys
from as2d.drafting.draft_tokens import DraftTokens
from as2d.drafting.family import DraftCosts, draft_seconds
from as2d.drafting.sources import CandidateSource, HistoryLookup, PromptLookup
from as2d.engine.gate import PROBE_EVERY, DraftGate
from as2d.engine.policy import BudgetPolicy
from as2d.engine.speculative import StepCounts, speculative_decode
from as2d.engine.verify import Rule
from as2d.runtime.cores import CoreLoan
from as2d.runtime.drafter import DrafterProcess
from as2d.runtime.drafts import Drafts
from as2d.target import Target, TextTokenizer
from as2d.types import DrafterActivity, Window

MIN_SHARED_PASSES = 8  # passes a window's drafter shares the cores before `Payoff` judges it
SCALES_BELOW = 0.9  # the target's step on every core / on its own threads under which the
# target takes the drafter's cores as soon as the window's draft is done
LOSING_BELOW = 0.75  # `Payoff`: the share of the alone rate below which the drafter loses


class SpeculativeDecoder:
    """Decodes windows with candidates from a drafter process and from earlier output.

    Window numbers given to the drafter run on across recordings (the drafter process
    lives as long as the decoder); `base` maps a recording's window i to `base + i`.

    `cores`: (the target's threads, the drafter's) where the target may take the drafter's
    cores (`CoreLoan`): for its encoder once the drafter can spare them, and while decoding
    once the drafter is idle, has finished the window's draft where the target's step runs
    faster on every core (`SCALES_BELOW`), or does not pay for its cores (`Payoff`, against
    `alone_step_s`, the target's plain step on every core). None: each keeps its own.
    `shared_step_s`: its plain step on its own threads (`DraftGate` weighs what sharing costs).
    `gate`: whether `DraftGate` decides which windows the drafter gets (with `cores`); False:
    every window.
    """

    def __init__(
        self,
        target: Target[Any],
        tokenizer: TextTokenizer,
        policy: BudgetPolicy,
        drafter: DrafterProcess | None = None,
        max_k: int = 16,
        leading_space: bool = True,
        cores: tuple[int, int] | None = None,
        alone_step_s: float | None = None,
        shared_step_s: float | None = None,
        gate: bool = True,
    ) -> None:
        self.target = target
        self.tokenizer = tokenizer  # the target's: drafter text is re-encoded with it
        self.word_keys = WordKeys(tokenizer)  # anchors match words whatever their case
        self.leading_space = leading_space  # whether the target's text starts with a space
        self.policy = policy
        self.drafter = drafter
        self.max_k = max_k
        self.cores = cores
        self.alone_step_s = alone_step_s
        self.shared_step_s = shared_step_s
        self._unpaid = 0  # windows in a row whose drafter did not pay for its cores
        # Whether the target gains from the drafter's cores while it decodes (its steps scale).
        self._scales = (
            alone_step_s is not None
            and shared_step_s is not None
            and alone_step_s < SCALES_BELOW * shared_step_s
        )
        self._asked: dict[int, tuple[float, DraftCosts]] = {}  # submitted: input s, costs
        self._heard = 0  # drafter intervals `DraftGate` has seen
        self.gate = (
            DraftGate(alone_step_s, cores, shared_step_s)
            if gate and drafter is not None and cores
            else None
        )
        self.history = HistoryLookup()
        self.base = 0  # drafter window number of the current recording's window 0
        self._first = 0  # `base` while the current recording's windows are read (`activity`)
        self.stored: Drafts | None = None  # the current recording's drafts made before
        self.language: str | None = None  # the recording's, once known: picks `auto`'s model
        self._waiting: list[Window] = []  # read ahead before the language that drafts them
        # Whether `windows` reads windows ahead of the target: a recording there whole (a
        # file) can be; a live source's next window is decided only once its audio comes,
        # and waiting for it would hold back the text of the window decided already.
        self.ahead = True

    def windows(self, windows: Iterable[Window]) -> Iterator[Window]:
        """Yields a recording's windows in order, submitting each to the drafter early (read
        ahead of the target only where `ahead`)."""
        self._first, count = self.base, 0
        ahead: deque[Window] = deque()
        source = iter(windows)
        while True:
            while not ahead or (self.ahead and self._drafter_wants(count)):
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
        self._waiting.clear()

    def prepare(self, window: Window, language: str | None) -> None:
        """The target knows the recording's language (given, or detected on its first window):
        windows read ahead before it, for a drafter whose model depends on it, go now."""
        self.language = language
        waiting, self._waiting = self._waiting, []
        for early in waiting:
            self._submit(early)

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
        index = self.base + window.index
        stored = self._stored(window)
        d = self.drafter if self.drafter is not None and self.drafter.holds(index) else None
        # A stored draft is complete and was never sent to the drafter process.
        drafts = self.stored if stored else d
        if drafts is not None:
            at = window.index if stored else index
            stream = DraftTokens(drafts, at, self.tokenizer, self.leading_space)
            sources.insert(0, DrafterStreamSource(stream.tokens, key=self.word_keys))
        payoff = Payoff(self.alone_step_s)
        resting = self._resting()  # it did not pay in the windows before: the cores at once

        def done_with_window() -> bool:
            return (
                d is None
                or resting
                or d.idle
                or payoff.losing()
                or (self._scales and d.done(index))
            )

        with self.lend_cores(window, done_with_window) as loan:
            loan.take()  # the prefill on every core too, where the drafter has nothing to do

            def before_pass(committed: int) -> bool:
                if d is not None and d.loading:
                    payoff.restart()  # judged from the first pass the drafter could draft
                silent = d is not None and d.encoded(index) and not d.text(index)
                payoff.count(committed, silent)
                return loan.take()

            tokens, counts = speculative_decode(
                self.target, encoded, prompt, sources, self.policy, self.max_k, rule,
                before_pass if self.cores else None,
            )  # fmt: skip
        self._unpaid = self._unpaid + 1 if payoff.lost or resting else 0
        if self.drafter is not None:
            self.drafter.release(index)
        if self.gate is not None:
            self._tell_gate_drafting_times()
            drafted = d is not None or stored
            self.gate.observe(window.duration, len(tokens), counts.accepted_tokens, drafted)
        self.history.end_window()
        return tokens, counts

    @contextmanager
    def lend_cores(
        self, window: Window, ready: Callable[[], bool] | None = None
    ) -> Iterator[CoreLoan]:
        """The drafter's cores for the target while it works on `window` (see `CoreLoan`):
        by default for its encoder, once the drafter can spare them (`encoder_ready`);
        `ready()` says when otherwise. Without `cores`, a loan that takes nothing."""
        index = self.base + window.index
        threads, extra = self.cores or (self.target.backend.threads(), 0)
        when = ready or (lambda: self.encoder_ready(index))
        loan = CoreLoan(self.target.backend, self.drafter, index, threads, extra, when, self.policy)
        if self.cores is None:
            loan.taken = True  # nothing to lend
        try:
            yield loan
        finally:
            if self.cores is not None:
                loan.close()

    def forget(self) -> None:
        """Earlier recordings' text is no longer looked up."""
        self.history = HistoryLookup()

    def encoder_ready(self, index: int) -> bool:
        """Whether the drafter can spare its cores for the target's encoder of window
        `index`: it does not hold the window (`DraftGate` kept it, or the drafter did not want
        it), it is far enough into the window (`DrafterProcess.spare`), or it did not pay
        for them in the windows before (then every `PROBE_EVERY`-th window it drafts as usual,
        so that a drafter that pays again is noticed)."""
        d = self.drafter
        return d is None or self._resting() or not d.holds(index) or d.spare(index)

    def _resting(self) -> bool:
        """Whether the drafter did not pay for its cores in the windows before and this window
        is not one of the `PROBE_EVERY`-th that it gets to show it pays again."""
        return self._unpaid > 0 and self._unpaid % PROBE_EVERY != 0

    def activity(self) -> DrafterActivity | None:
        """The drafter's work on the current recording's windows (None without a drafter):
        the process outlives recordings, and its records of earlier ones are not this one's."""
        d = self.drafter
        if d is None:
            return None
        d.poll()
        mine = [i for i in d.intervals if i.index >= self._first]
        busy_s = sum(i.end - i.start for i in mine)
        return DrafterActivity(d.spec.name, busy_s, sum(i.finished for i in mine), d.lost, d.reason)

    def _tell_gate_drafting_times(self) -> None:
        """The drafter's time on each window it finished since the last call, against what its
        start-up costs predicted (`DraftGate.observe_drafting`)."""
        assert self.gate is not None and self.drafter is not None
        intervals = self.drafter.intervals
        for interval in intervals[self._heard :]:
            asked = self._asked.pop(interval.index, None)
            if asked is not None and interval.finished:
                input_s, costs = asked
                predicted = costs.encode_s(input_s) + interval.tokens * costs.step_s
                running = interval.end - interval.start - interval.stopped_s
                self.gate.observe_drafting(predicted, running)
        self._heard = len(intervals)

    def draft_utterance(
        self, stream: Utterances, window: Window, language: str | None, force: bool = False
    ) -> None:
        """Hands a live stream's growing utterance `window` to the drafter in place of the
        stream's last draft, unless that one is still being drafted (the grown utterance goes
        once it is done; `force`: at once, as the pause's exact window must)."""
        d = self.drafter
        if d is None:
            return
        if d.holds(stream.draft) and not d.done(stream.draft) and not force:
            return
        index = self._take_number(stream)
        if stream.draft >= 0:
            d.release(stream.draft)
        if d.wants(index):
            d.submit(replace(window, index=index), language)
        stream.draft = index

    def has_utterance_draft(self, stream: Utterances) -> bool:
        """Whether the drafter holds the stream's latest draft."""
        return self.drafter is not None and self.drafter.holds(stream.draft)

    def utterance_text(self, stream: Utterances) -> str:
        """The stream's latest draft's text so far ("" without one)."""
        d = self.drafter
        if d is None:
            return ""
        d.poll()
        return d.text(stream.draft).strip()

    def follow_utterance(self, stream: Utterances, window: Window) -> None:
        """The next `decode` of `window` (a live stream's utterance) reads the stream's latest
        draft as its candidates; without one, a number the drafter never had (no draft)."""
        held = self.has_utterance_draft(stream)
        self.base = (stream.draft if held else self._take_number(stream)) - window.index

    def adopt(self, stream: Utterances) -> None:
        """A stream whose drafter was lost goes on with this decoder's: its next drafts'
        numbers follow the stream's last."""
        stream.draft = -1
        if self.drafter is not None and stream.next > 0:
            self.drafter.release(stream.next - 1)

    def _take_number(self, stream: Utterances) -> int:
        """A window number the drafter has not had (it may serve other streams too)."""
        had = self.drafter.submitted if self.drafter is not None else -1
        index = max(stream.next, had + 1)
        stream.next = index + 1
        return index

    def _drafter_wants(self, count: int) -> bool:
        return self.drafter is not None and self.drafter.wants(self.base + count)

    def _stored(self, window: Window) -> bool:
        return self.stored is not None and self.stored.covers(window)

    def _submit(self, window: Window) -> None:
        index, d = self.base + window.index, self.drafter
        if d is None or not d.wants(index) or self._stored(window):
            return
        if self.language is None and d.spec.family.by_language:
            # `auto` drafts English with a model several times cheaper than other languages':
            # the window waits for the target's detection (its encoder and one step) rather
            # than go to the multilingual model, whose costs the gate would mostly refuse.
            self._waiting.append(window)
            return
        costs, input_s = d.costs(self.language), draft_seconds(window, d.spec.tail_s)
        if self.gate is None or self.gate.pays(window.duration, input_s, costs):
            d.submit(replace(window, index=index), self.language)  # else the target alone
            if costs is not None:
                self._asked[index] = (input_s, costs)


@dataclass
class Utterances:
    """A live stream's drafts (`live.LiveSession`): the drafter drafts each utterance as it
    grows, each draft under a window number of its own, and the target decodes the
    utterance's window with the latest (`SpeculativeDecoder.draft_utterance`,
    `follow_utterance`). One per stream: streams may share a decoder and its drafter."""

    draft: int = -1  # the drafter's number of the stream's latest draft (-1: none)
    next: int = 0  # the smallest number the stream may take next


class Payoff:
    """Whether a window's decoding gains from leaving the drafter its cores.

    While the drafter runs, the target decodes on its share of the cores; alone it would
    step on all of them in `alone_step_s`. Once `MIN_SHARED_PASSES` passes ran shared, the
    tokens the target committed per second since its first pass are compared with one token
    per `alone_step_s`: `losing` once they are fewer than `LOSING_BELOW` of it (a wrong
    drafter, or one too slow to keep ahead: plain steps on one of 2 cores are 0.70 of the alone
    rate with whisper-base). The margin and the 8 passes keep a drafter that is merely behind
    at the window's start: judged at parity after 4 passes, it lost its cores in most long
    windows of the hard set, which then ran 0.87-1.0x where they had run 1.2x (1 repeat each).
    Measured in the window itself, so a drafter that did not pay in one window is judged
    afresh in the next.
    """

    def __init__(
        self, alone_step_s: float | None, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.alone_step_s = alone_step_s
        self.passes = 0  # passes that ran since the first was counted
        self.silent = 0  # passes in a row with the drafter past its encoder and no text
        self.lost = False  # `losing` answered True
        self._clock = clock
        self._start: float | None = None
        self._now = 0.0
        self._first = self._committed = 0

    def restart(self) -> None:
        """Forgets the passes so far."""
        self.passes, self.silent, self._start = 0, 0, None

    def count(self, committed: int, silent: bool = False) -> None:
        """A pass is about to run, with `committed` output tokens so far; `silent`: the
        drafter is past its encoder for the window and has written nothing of it."""
        self.silent = self.silent + 1 if silent else 0
        now = self._clock()
        if self._start is None:
            self._start, self._first = now, committed
        else:
            self.passes += 1
        self._now, self._committed = now, committed

    def losing(self) -> bool:
        """Whether the target would have committed more tokens alone on every core, or the
        drafter has written nothing of the window for `MIN_SHARED_PASSES` passes past its
        encoder (asleep or stuck: a drafter's first token follows its encoder by one of its
        steps; the target's own rate may stay within the margin thanks to earlier text, yet
        the drafter's cores do nothing for it)."""
        if self.silent >= MIN_SHARED_PASSES:
            self.lost = True
            return True
        if self._start is None or self.alone_step_s is None or self.passes < MIN_SHARED_PASSES:
            return False
        tokens, seconds = self._committed - self._first, self._now - self._start
        self.lost = tokens * self.alone_step_s < LOSING_BELOW * seconds
        return self.lost
