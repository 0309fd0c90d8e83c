"""The decoding side of `as2d serve`: one thread owns the `Transcriber` and decodes queued
requests in arrival order (`Engine`), drafting recordings sent ahead while none waits; a
request's windows travel back to its event loop (`Job`); `Metrics` counts what was done.
`ApiError` is an answer other than 200, raised on either side.

The target is also lent to live sessions (`realtime.py`) between a request's windows: whoever
uses the target holds `Engine.lock`, the decoding thread for one window at a time.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.responses import JSONResponse

from as2d.options import Options
from as2d.server.recordings import Recordings
from as2d.types import WindowResult

RETRY_AFTER_S = 5


class ApiError(Exception):
    """An answer other than 200: OpenAI's error object with this status."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        error = {"message": self.message, "type": kind, "param": self.param, "code": None}
        headers = {"Retry-After": str(RETRY_AFTER_S)} if self.status == 503 else None
        return JSONResponse({"error": error}, self.status, headers=headers)


def audio_error(err: Exception, path: Path, name: str) -> ApiError:
    """400 for a file that is not audio, in the reader's words naming the upload `name` (not
    the server's temporary `path`)."""
    return ApiError(400, str(err).replace(str(path), name), "file")


@dataclass
class Job:
    """One recording to decode; its events go back to the request's event loop."""

    path: Path
    name: str  # the uploaded file's name, for messages
    task: str
    language: str | None
    loop: asyncio.AbstractEventLoop
    request: str | None = None  # task "ask": what the user asks about the recording
    keep: bool = False  # a stored recording's file, not an upload of this request
    previous: str | None = None  # OpenAI's `prompt`: text said before the audio
    timestamps: str = "none"  # "segment" or "word": the windows' segments (Whisper targets)
    events: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def discard(self) -> None:
        """Removes the request's upload (never a stored recording)."""
        if not self.keep:
            self.path.unlink(missing_ok=True)

    def send(self, kind: str, value: Any = None) -> None:
        """From the decoding thread: ("window", WindowResult), ("done", RunStats), ("error",
        ApiError)."""
        self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "as2d_requests", "Requests answered", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram("as2d_request_seconds", "Time to answer", ["endpoint"], registry=r)
        self.queue = Gauge("as2d_queue_depth", "Recordings waiting for the target", registry=r)
        self.audio = Counter("as2d_audio_seconds", "Audio decoded", registry=r)
        self.tokens = Counter("as2d_tokens", "Output tokens", registry=r)
        self.decode = Counter("as2d_decode_seconds", "Encoder and decoder time", registry=r)
        self.accepted = Counter("as2d_accepted_tokens", "Draft tokens accepted", registry=r)
        self.verifies = Counter("as2d_verify_passes", "Verify passes", registry=r)
        self.drafter = Gauge("as2d_drafter_up", "1: the drafter process is alive", registry=r)
        self.speed = Gauge("as2d_tokens_per_second", "The last recording's tokens/s", registry=r)

    def window(self, w: WindowResult) -> None:
        self.tokens.inc(len(w.token_ids))
        self.decode.inc(w.encode_s + w.decode_s)
        self.accepted.inc(w.accepted_tokens)
        self.verifies.inc(w.verify_passes)


class Engine:
    """The decoding thread: owns the Transcriber and runs queued jobs in arrival order."""

    def __init__(
        self, options: Options, queue_size: int, metrics: Metrics, recordings: Recordings
    ) -> None:
        self.options = options
        self.metrics = metrics
        self.recordings = recordings
        self.jobs: queue.Queue[Job | None] = queue.Queue(maxsize=queue_size)
        self.ready = threading.Event()
        self.failure: BaseException | None = None  # why the Transcriber could not load
        self.drafter_state = "none"
        self.target: Any = None  # the loaded target (its family's traits: chat, prompt)
        self.threads = 1  # torch threads the target decodes with (set once loaded)
        self.lock = threading.Lock()  # held while the target works: per window, per live call
        self._thread = threading.Thread(target=self._run, name="as2d-decoder", daemon=True)

    def start(self) -> None:
        """Loads the models in the decoding thread; raises what loading raised."""
        self._thread.start()
        self.ready.wait()
        if self.failure is not None:
            raise self.failure

    def submit(self, job: Job) -> None:
        try:
            self.jobs.put_nowait(job)
        except queue.Full:
            raise ApiError(503, "the server is busy: too many requests queued") from None
        self.metrics.queue.set(self.jobs.qsize())

    def stop(self) -> None:
        """Decodes what is queued, then closes the Transcriber (and its drafter)."""
        self.jobs.put(None)
        self._thread.join()

    def _run(self) -> None:
        from as2d.api import Transcriber

        try:
            transcriber = Transcriber(self.options)
        except BaseException as err:
            self.failure = err
            self.ready.set()
            return
        self.target, self.threads = transcriber.target, transcriber.threads
        self._watch(transcriber)
        self.ready.set()
        try:
            while (job := self._next_job(transcriber)) is not None:
                self.metrics.queue.set(self.jobs.qsize())
                if not job.cancelled.is_set():
                    self._decode(transcriber, job)
                if transcriber.drafter is not None and transcriber.drafter.lost:
                    with self.lock:
                        transcriber = self._replace_drafter(transcriber)
                self._watch(transcriber)
        finally:
            transcriber.close()

    def _replace_drafter(self, transcriber: Any) -> Any:
        """A new drafter process for the next request; the target stays loaded. Where none
        starts, the server goes on without one (as2d's target alone on every core)."""
        from as2d.api import Transcriber

        target = transcriber.target
        transcriber.close()  # first: it sets the thread count back to what it found
        try:
            return Transcriber(self.options, shared_target=target)
        except Exception:
            return Transcriber(self.options, shared_target=target, spawn_drafter=False)

    def _next_job(self, transcriber: Any) -> Job | None:
        """The next request; meanwhile stored recordings are prepared (`Recordings`)."""
        while True:
            if self.recordings.pending() is not None:
                self.recordings.prepare_some(self._busy, transcriber, self.lock)
            try:
                return self.jobs.get(timeout=0.2)  # a recording may be added meanwhile
            except queue.Empty:
                continue

    def _busy(self) -> bool:
        """Whether a request waits (preparation stops for it)."""
        return not self.jobs.empty()

    def _watch(self, transcriber: Any) -> None:
        drafter = transcriber.drafter
        self.drafter_state = "none" if drafter is None else "lost" if drafter.lost else "up"
        self.metrics.drafter.set(self.drafter_state == "up")

    def _decode(self, transcriber: Any, job: Job) -> None:
        from as2d.audio.load import AudioError

        try:
            run = transcriber.transcribe(
                job.path, job.language, job.task, job.request, job.previous, job.timestamps
            )
            windows = iter(run)
            while True:
                with self.lock:  # a live session may decode between two windows
                    window = next(windows, None)
                if window is None:
                    break
                self.metrics.window(window)
                job.send("window", window)
                if job.cancelled.is_set():
                    run.windows.close()  # the client is gone: no more windows
                    return
            self.metrics.audio.inc(run.stats.audio_s)
            self.metrics.speed.set(run.stats.tokens_per_s)
            job.send("done", run.stats)
        except AudioError as err:
            job.send("error", audio_error(err, job.path, job.name))
        except Exception as err:  # one request fails, the server goes on
            job.send("error", ApiError(500, f"decoding failed: {type(err).__name__}: {err}"))
