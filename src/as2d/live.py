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

The audio is heard in the caller's thread and the target works in a thread of its own, so
that an utterance's end is heard on time while the target decodes (`background`; without it
the target works in `push`, and a block that arrives meanwhile waits in the caller's buffer).
`LiveEvent.audio_s` says how much audio had been heard when each event was decided.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from queue import Empty, Queue, SimpleQueue
from typing import Any

import numpy as np

from as2d.api import Transcriber
from as2d.audio.windows import SpeechWindower
from as2d.engine.as2d import SpeculativeDecoder, Utterances
from as2d.target import Request
from as2d.types import SAMPLE_RATE, Window, WindowResult

DEFAULT_ENDPOINT_MS = 600  # a pause this long ends an utterance
PROVISIONAL_EVERY_S = 0.5  # the open utterance is drafted again once it grew this much
CAPTION_EVERY_S = 0.05  # how often the target's side looks for new provisional text
READ_AHEAD_BLOCKS = 64  # blocks of a stream read ahead of `push` (faster than real time)
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
        early: completed: decoded in the pause, before the endpoint was heard.
    """

    kind: str
    item: int
    audio_s: float
    wall: float
    text: str = ""
    start_s: float = 0.0
    end_s: float = 0.0
    result: WindowResult | None = None
    early: bool = False


@dataclass(frozen=True)
class _Job:
    """Work for the target's side: "draft" the open utterance, decode a pause's window
    "early", or the utterance's "final" window."""

    kind: str
    window: Window
    item: int


class _Newest:
    """The open utterance's newest draft or early job not yet taken by the target's side.

    Audio may come faster than the target works (a client sending a recording at once): each
    such job holds a copy of the utterance so far, and only the newest is worth doing, so a
    newer one replaces the one waiting rather than queue behind it (memory stays bounded).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._job: _Job | None = None

    def put(self, job: _Job) -> bool:
        """Holds `job` in place of the one waiting; whether none was (queue this one)."""
        with self._lock:
            empty, self._job = self._job is None, job
        return empty

    def take(self) -> _Job | None:
        with self._lock:
            job, self._job = self._job, None
        return job


class LiveSession:
    """Transcribes one live stream with a `Transcriber` (which it does not close).

    Two sides: `push` hears the audio (the voice activity detector and the windows: a
    millisecond a block) and says what it decides at once (`speech_started`,
    `speech_stopped`); the target's side (`_Engine`) drafts, decodes and says the rest
    (`delta`, `completed`) from a thread of its own (`background`), so that an utterance's
    end is heard on time while the target works. `poll` returns what it said since.

    Args:
        transcriber: its options give the method, models and language.
        endpoint_ms: a pause this long ends an utterance (`Options.endpoint_ms` cuts a file's
            windows the same way).
        early: decode the window of a pause before its endpoint (default: with a drafter,
            as as2d does; target-only live decodes each utterance once it has ended).
        provisional: draft the open utterance as it grows and say so (`delta`).
        language: the stream's, where `options.language` is None (else detected on the
            first utterance).
        background: the target's side in its own thread (False: in `push`, between blocks).
        lock: held by the target's side whenever it uses the transcriber or its drafter (a
            server's target, shared with its other requests).
        renew: called (with `lock` held) once the drafter is lost: a transcriber of the same
            options with a live drafter, which the session goes on with (a server's, shared
            by its sessions); None: the session goes on without drafts.
    """

    def __init__(
        self,
        transcriber: Transcriber,
        endpoint_ms: int = DEFAULT_ENDPOINT_MS,
        early: bool | None = None,
        provisional: bool = True,
        language: str | None = None,
        background: bool = True,
        lock: AbstractContextManager[Any] | None = None,
        renew: Callable[[], Transcriber] | None = None,
    ) -> None:
        self.windower = SpeechWindower(endpoint_s=endpoint_ms / 1000)
        drafter = transcriber.drafter
        self.early = drafter is not None if early is None else early
        self.provisional = provisional and drafter is not None
        self._item = 0
        self._started = False  # speech_started said for the current item
        self._drafted_to = 0.0  # where the open utterance's last draft ended (s)
        self._early_sent: Window | None = None  # the pause's window handed over, if any
        self._said: SimpleQueue[LiveEvent] = SimpleQueue()
        self._pause: Window | None = None  # `windower.tentative()` after the last block
        self._engine = _Engine(transcriber, language, self._say, lambda: self._pause, lock, renew)
        self._jobs: Queue[_Job | _Newest | None] = Queue()  # in order: finals, `_Newest`s
        self._newest = _Newest()  # the open utterance's draft or early job
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(
                target=self._engine.serve, args=(self._jobs,), daemon=True
            )
            self._thread.start()

    @property
    def language(self) -> str | None:
        """The stream's language: given, else detected on its first utterance (None before)."""
        return self._engine.asked.language

    def push(self, block: np.ndarray) -> list[LiveEvent]:
        """Hears the next block (16 kHz mono float32); returns what was decided since."""
        events: list[LiveEvent] = []
        for window in self.windower.push(block):
            events += self._decided(window)
        if not self._started and self.windower.in_speech:
            opened = self.windower.open_utterance()
            events.append(
                self._started_event(opened.speech[0][0] if opened and opened.speech else 0.0)
            )
        self._hand_over_work()
        return events + self.poll()

    def poll(self) -> list[LiveEvent]:
        """What the target's side said since the last call (raises what it failed with)."""
        if self._thread is None:
            self._engine.caption()
        self._engine.check()
        events = []
        while not self._said.empty():
            events.append(self._said.get())
        return events

    def finish(self) -> list[LiveEvent]:
        """The stream ended: the utterance still open ends here; returns once every event is
        said (the target's side has stopped)."""
        events: list[LiveEvent] = []
        for window in self.windower.finish():
            events += self._decided(window)
        self.close()
        return events + self.poll()

    def close(self) -> None:
        """Stops the target's side once the work handed over is done."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None

    def drop(self) -> None:
        """Stops the target's side without doing the work handed over (a client gone): the
        piece it is on ends in its own thread, which is not waited for; nothing else runs."""
        if self._thread is not None:
            self._newest.take()
            while not self._jobs.empty():
                self._jobs.get_nowait()  # only this thread puts: the queue cannot refill
            self._jobs.put(None)
            self._thread = None

    def run(self, blocks: Iterable[np.ndarray]) -> Iterator[LiveEvent]:
        """Every event of a stream of blocks, as they are decided: `blocks` is read in a
        thread of its own, so that what the target's side says comes while no block does (a
        pipe whose writer pauses). An error of `blocks` is raised here."""
        queue: Queue[np.ndarray | BaseException | None] = Queue(maxsize=READ_AHEAD_BLOCKS)

        def read() -> None:
            try:
                for block in blocks:
                    queue.put(block)
                queue.put(None)
            except BaseException as err:  # the stream's own error, raised by the reader
                queue.put(err)

        threading.Thread(target=read, daemon=True).start()  # a reader left blocked: the exit's
        while True:
            try:
                block = queue.get(timeout=CAPTION_EVERY_S)
            except Empty:
                yield from self.poll()
                continue
            if block is None:
                break
            if isinstance(block, BaseException):
                raise block
            yield from self.push(block)
        yield from self.finish()

    def _event(self, kind: str, item: int, **fields: object) -> LiveEvent:
        heard = self.windower.received_s
        return LiveEvent(kind, item, heard, time.perf_counter(), **fields)  # type: ignore[arg-type]

    def _say(self, kind: str, item: int, **fields: object) -> LiveEvent:
        """An event of the target's side, said through `poll`."""
        event = self._event(kind, item, **fields)
        self._said.put(event)
        return event

    def _started_event(self, start_s: float) -> LiveEvent:
        self._started = True
        return self._event("speech_started", self._item, start_s=start_s, end_s=start_s)

    def _decided(self, window: Window) -> list[LiveEvent]:
        """The utterance's window is decided: said at once; the target's side finishes it."""
        events = []
        if not self._started:  # decided in the block that first heard it
            events.append(
                self._started_event(window.speech[0][0] if window.speech else window.start)
            )
        bounds = {"start_s": window.start, "end_s": window.end}
        events.append(self._event("speech_stopped", self._item, **bounds))
        self._work(_Job("final", window, self._item))
        self._item += 1
        self._started, self._drafted_to, self._early_sent = False, 0.0, None
        return events

    def _hand_over_work(self) -> None:
        """A pause's window to decode early, else the grown utterance to draft."""
        self._pause = tentative = self.windower.tentative()  # read by the target's side
        if tentative is not None:
            if self.early and not (self._early_sent and _same(self._early_sent, tentative)):
                self._work(_Job("early", tentative, self._item))
                self._early_sent = tentative
            return
        opened = self.windower.open_utterance()
        if self.provisional and opened and opened.end - self._drafted_to >= PROVISIONAL_EVERY_S:
            self._work(_Job("draft", opened, self._item))
            self._drafted_to = opened.end

    def _work(self, job: _Job) -> None:
        """Hands `job` to the target's side: a final in order; a draft or early job in
        place of the open utterance's one waiting (`_Newest`), dropped once it ends."""
        if self._thread is None:
            self._engine.do(job)
        elif job.kind == "final":
            self._newest.take()  # the utterance has ended: its provisional work is stale
            self._newest = _Newest()  # the next utterance's, queued after this final
            self._jobs.put(job)
        elif self._newest.put(job):
            self._jobs.put(self._newest)


class _Engine:
    """The target's side of a `LiveSession`: the results of its utterances' windows, and the
    drafter's provisional text of each, through the transcriber's decoder (`Utterances`).

    `say(kind, item, **fields)` says an event; `tentative()` is the pause's window as the
    session hears it now (an early job whose pause has ended is dropped)."""

    def __init__(
        self,
        transcriber: Transcriber,
        language: str | None,
        say: Callable[..., LiveEvent],
        tentative: Callable[[], Window | None],
        lock: AbstractContextManager[Any] | None = None,
        renew: Callable[[], Transcriber] | None = None,
    ) -> None:
        self._lock = lock or nullcontext()
        o = transcriber.options
        self.asked = Request(o.task, o.language or language, o.request if o.task == "ask" else None)
        self._request = transcriber.tokenizer.encode(self.asked.text) if self.asked.text else []
        self._use(transcriber)
        self.renew = renew  # see `LiveSession`
        self._say = say
        self._tentative = tentative
        self._item = 0  # the utterance its drafts are of
        self._caption = ""  # the last provisional text said
        self._stream = Utterances()  # this stream's drafts, numbered by the decoder
        self._early: tuple[Window, WindowResult] | None = None
        self._error: BaseException | None = None

    def serve(self, jobs: Queue[_Job | _Newest | None]) -> None:
        """Does the jobs in order until None (a `_Newest`: the job it holds by then); says
        provisional text while idle."""
        self.transcriber.backend.set_threads(self.transcriber.threads)  # a new thread's own
        while True:
            try:
                job = jobs.get(timeout=CAPTION_EVERY_S)
            except Empty:
                self.caption()
                continue
            if job is None:
                return
            if isinstance(job, _Newest):
                job = job.take()
            if job is not None and self._error is None:
                try:
                    self.do(job)
                except BaseException as err:  # said by `check`, in the session's thread
                    self._error = err

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def _use(self, transcriber: Transcriber) -> None:
        """Works with `transcriber` (its options are the session's) and its decoder."""
        self.transcriber = transcriber
        decoder = transcriber.decoder
        self._speculative = decoder if isinstance(decoder, SpeculativeDecoder) else None

    def _renew(self) -> None:
        """A lost drafter's successor, where `renew` gives one: later windows are drafted
        again (a drafter that dies mid-stream must not silence the rest of it)."""
        drafter = self.transcriber.drafter
        if self.renew is None or drafter is None or not drafter.lost:
            return
        self._use(self.renew())
        if self._speculative is not None:
            self._speculative.adopt(self._stream)

    def do(self, job: _Job) -> None:
        with self._lock:
            self._renew()
            if job.kind == "draft":
                self._draft(job.window)
            elif job.kind == "early":
                now = self._tentative()
                if now is not None and _same(now, job.window):  # still the pause's window
                    self._decode_early(job.window)
            else:
                self._final(job.window, job.item)
        self.caption()

    def caption(self) -> None:
        """Says the latest draft's text where it changed."""
        if self._speculative is None:
            return
        with self._lock:
            text = self._speculative.utterance_text(self._stream)
        if text and text != self._caption:
            self._caption = text
            self._say("delta", self._item, text=text)

    def _final(self, window: Window, item: int) -> None:
        """The utterance's final text: the early result where it is of this very window."""
        early = self._early
        if early is not None and _same(early[0], window):
            result = replace(early[1], index=window.index)
        else:
            result, early = self._decode(window), None
        bounds = {"start_s": window.start, "end_s": window.end}
        self._say("completed", item, text=result.text, result=result, early=bool(early), **bounds)
        self._item, self._caption, self._early = item + 1, "", None

    def _decode_early(self, window: Window) -> None:
        """The pause's window, with the utterance's latest draft (drafted now where there is
        none: the target's encoder takes every core once the draft is done)."""
        sd = self._speculative
        if sd is not None and not sd.has_utterance_draft(self._stream):
            self._draft(window, force=True)
        self._early = (window, self._decode(window))

    def _decode(self, window: Window) -> WindowResult:
        """The target's result for `window`, with the drafter's latest draft of the
        utterance as its candidates."""
        if self._speculative is not None:
            self._speculative.follow_utterance(self._stream, window)
        result, self.asked = self.transcriber.decode_window(window, self.asked, self._request)
        return result

    def _draft(self, window: Window, force: bool = False) -> None:
        """The grown utterance to the drafter (`SpeculativeDecoder.draft_utterance`)."""
        assert self._speculative is not None
        self._speculative.draft_utterance(self._stream, window, self.asked.language, force)


def _same(a: Window, b: Window) -> bool:
    """Whether two windows cut the same audio (`SpeechWindower` is deterministic)."""
    return (a.start, a.end) == (b.start, b.end) and len(a.audio) == len(b.audio)


def blocks_of(audio: np.ndarray, block_s: float = 0.1) -> Iterator[np.ndarray]:
    """`audio` (16 kHz mono float32) as a live source's blocks of `block_s`."""
    step = max(1, round(block_s * SAMPLE_RATE))
    for start in range(0, len(audio), step):
        yield audio[start : start + step]
