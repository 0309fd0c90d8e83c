"""Live audio: blocks in as the user speaks, events out (`LiveSession`).

Each utterance is a window that a pause of `endpoint_ms` ends (`SpeechWindower` with an
endpoint: decided from the audio heard so far, never by waiting for speech to come). Per
utterance the session says, in order:

    speech_started   speech was heard (the utterance's first speech)
    delta            the drafter's provisional text of the utterance so far (as2d; may change)
    speech_stopped   the endpoint was heard: the utterance's window is decided
    completed        the target's text of that window: target-only's, token for token

While the user speaks, the drafter process drafts the utterance as it grows (its encoder is
sized to the audio, so a draft of a few seconds costs tens of milliseconds) and each draft is
a `delta`. In a pause the target need not wait for the endpoint (`early`): it decodes the
window that silence would cut (`SpeechWindower.tentative`), with the drafter's draft of that
very audio; if no speech comes before the endpoint, that is the window (same input, same
output) and its text is ready when the endpoint is heard; if speech resumes, the work is
dropped.

One thread does everything, between blocks: a block that arrives while the target works
waits in the caller's buffer (a pipe, a socket), and `LiveEvent.audio_s` says how much audio
had been heard when each event was decided.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from as2d.api import Transcriber
from as2d.audio.windows import SpeechWindower
from as2d.engine.as2d import SpeculativeDecoder
from as2d.engine.target import Request
from as2d.types import SAMPLE_RATE, Window, WindowResult

DEFAULT_ENDPOINT_MS = 600  # a pause this long ends an utterance
PROVISIONAL_EVERY_S = 0.5  # the open utterance is drafted again once it grew this much
KINDS = ("speech_started", "delta", "speech_stopped", "completed")


@dataclass(frozen=True)
class LiveEvent:
    """What the session says about one utterance.

    Attributes:
        kind: one of `KINDS`.
        item: the utterance, counted from 0.
        audio_s: seconds of audio heard when the event was decided.
        wall: `time.perf_counter()` when it was emitted.
        text: delta: the provisional text of the utterance so far (whole, not a suffix);
            completed: the final text.
        start_s, end_s: the utterance's window (speech_started: its first speech, to it).
        result: completed: the window's result (token ids, timings, step counts).
    """

    kind: str
    item: int
    audio_s: float
    wall: float
    text: str = ""
    start_s: float = 0.0
    end_s: float = 0.0
    result: WindowResult | None = None


@dataclass
class _Early:
    """The target's result for a tentative window, decoded during a pause."""

    window: Window
    result: WindowResult


class LiveSession:
    """Transcribes one live stream with a `Transcriber` (which it does not close).

    Args:
        transcriber: its options give the method, models and language.
        endpoint_ms: a pause this long ends an utterance (`Options.endpoint_ms` cuts a file's
            windows the same way).
        early: decode the window of a pause before its endpoint (default: with a drafter,
            as as2d does; target-only live decodes each utterance once it has ended).
        provisional: draft the open utterance as it grows and say so (`delta`).
        language: the stream's, where `options.language` is None (else detected on the
            first utterance).
    """

    def __init__(
        self,
        transcriber: Transcriber,
        endpoint_ms: int = DEFAULT_ENDPOINT_MS,
        early: bool | None = None,
        provisional: bool = True,
        language: str | None = None,
    ) -> None:
        self.transcriber = transcriber
        self.windower = SpeechWindower(endpoint_s=endpoint_ms / 1000)
        o = transcriber.options
        self.asked = Request(o.task, o.language or language, o.request if o.task == "ask" else None)
        decoder = transcriber.decoder
        self._speculative = decoder if isinstance(decoder, SpeculativeDecoder) else None
        self.drafter = transcriber.drafter
        self.early = self.drafter is not None if early is None else early
        self.provisional = provisional and self.drafter is not None
        self._request = transcriber.tokenizer.encode(self.asked.text) if self.asked.text else []
        self._item = 0
        self._started = False  # speech_started said for the current item
        self._caption = ""  # the last provisional text said
        self._drafted_to = 0.0  # where the open utterance's last draft ended (s)
        self._draft_index = -1  # the drafter's number of the current item's latest draft
        self._next_index = 0
        self._tentative: Window | None = None  # the window the latest draft is of, if exact
        self._early: _Early | None = None

    def push(self, block: np.ndarray) -> list[LiveEvent]:
        """Hears the next block (16 kHz mono float32); returns what it decided."""
        events: list[LiveEvent] = []
        for window in self.windower.push(block):
            events += self._complete(window)
        self._hear_speech(events)
        if self.provisional:
            self._draft_open_utterance(events)
        if self.early:
            self._decode_early()
        return events

    def finish(self) -> list[LiveEvent]:
        """The stream ended: the utterance still open ends here."""
        events: list[LiveEvent] = []
        for window in self.windower.finish():
            events += self._complete(window)
        return events

    def run(self, blocks: Iterable[np.ndarray]) -> Iterator[LiveEvent]:
        """Every event of a stream of blocks, as they are decided."""
        for block in blocks:
            yield from self.push(block)
        yield from self.finish()

    # ------------------------------------------------------------------ per utterance

    def _event(self, kind: str, **fields: object) -> LiveEvent:
        heard = self.windower.received_s
        return LiveEvent(kind, self._item, heard, time.perf_counter(), **fields)  # type: ignore[arg-type]

    def _hear_speech(self, events: list[LiveEvent]) -> None:
        if not self._started and self.windower.in_speech:
            self._started = True
            opened = self.windower.open_utterance()
            start = opened.speech[0][0] if opened is not None and opened.speech else 0.0
            events.append(self._event("speech_started", start_s=start, end_s=start))

    def _complete(self, window: Window) -> list[LiveEvent]:
        """The utterance's window is decided: its final text, reused from a pause where the
        target decoded this very window then."""
        if not self._started:  # decided in the block that first heard it
            self._started = True
            start = window.speech[0][0] if window.speech else window.start
            started = [self._event("speech_started", start_s=start, end_s=start)]
        else:
            started = []
        stopped = self._event("speech_stopped", start_s=window.start, end_s=window.end)
        early = self._early
        if early is not None and _same(early.window, window):
            result = replace(early.result, index=window.index)
        else:
            result = self._decode(window)
        completed = self._event(
            "completed", text=result.text, start_s=window.start, end_s=window.end, result=result
        )
        self._item += 1
        self._started, self._caption, self._drafted_to = False, "", 0.0
        self._tentative = self._early = None
        return [*started, stopped, completed]

    def _decode(self, window: Window) -> WindowResult:
        """The target's result for `window`, with the drafter's latest draft of the
        utterance as its candidates."""
        if self._speculative is not None:
            held = self.drafter is not None and self.drafter.holds(self._draft_index)
            at = self._draft_index
            if not held:  # a number the drafter never had: no draft
                at, self._next_index = self._next_index, self._next_index + 1
            self._speculative.base = at - window.index
        result, self.asked = self.transcriber.decode_window(window, self.asked, self._request)
        return result

    def _decode_early(self) -> None:
        """In a pause: the target decodes the window that silence would cut, once."""
        tentative = self.windower.tentative()
        if tentative is None or (self._early is not None and _same(self._early.window, tentative)):
            return
        if self.drafter is not None and not (self._tentative and _same(self._tentative, tentative)):
            self._submit(tentative)
            self._tentative = tentative
        self._early = _Early(tentative, self._decode(tentative))

    def _draft_open_utterance(self, events: list[LiveEvent]) -> None:
        """Drafts the utterance so far again once it grew enough and the drafter is free;
        says its latest text as it grows."""
        d = self.drafter
        assert d is not None
        d.poll()
        text = d.text(self._draft_index).strip()
        if text and text != self._caption:
            self._caption = text
            events.append(self._event("delta", text=text))
        opened = self.windower.open_utterance()
        if opened is None or self.windower.tentative() is not None:
            return  # silence, or a pause: `_decode_early` drafts its exact window
        grown = opened.end - self._drafted_to >= PROVISIONAL_EVERY_S
        if grown and (not d.holds(self._draft_index) or d.done(self._draft_index)):
            self._submit(opened)
            self._drafted_to = opened.end
            self._tentative = None

    def _submit(self, window: Window) -> None:
        """Hands `window` to the drafter as its next window, in place of the last one."""
        d = self.drafter
        assert d is not None
        index, self._next_index = self._next_index, self._next_index + 1
        if self._draft_index >= 0:
            d.release(self._draft_index)
        if d.wants(index):
            d.submit(replace(window, index=index), self.asked.language)
        self._draft_index = index


def _same(a: Window, b: Window) -> bool:
    """Whether two windows cut the same audio (`SpeechWindower` is deterministic)."""
    return (a.start, a.end) == (b.start, b.end) and len(a.audio) == len(b.audio)


def blocks_of(audio: np.ndarray, block_s: float = 0.1) -> Iterator[np.ndarray]:
    """`audio` (16 kHz mono float32) as a live source's blocks of `block_s`."""
    step = max(1, round(block_s * SAMPLE_RATE))
    for start in range(0, len(audio), step):
        yield audio[start : start + step]
