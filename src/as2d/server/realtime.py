"""`as2d serve`'s `/v1/realtime?intent=transcription`: OpenAI's Realtime transcription events
over a WebSocket, so that a realtime client transcribes live speech with the server's target.

A socket is one live stream: PCM16 appends are resampled to 16 kHz (`Pcm16Resampler`) and
pushed to a `LiveSession`, whose events go back as OpenAI's (`realtime_events.py` reads the
client's events and writes the server's):

    input_audio_buffer.speech_started   LiveEvent speech_started
    ...input_audio_transcription.delta  LiveEvent delta, where it extends the text sent
    as2d.input_audio_transcription.provisional  LiveEvent delta: the whole caption (ours)
    input_audio_buffer.speech_stopped   LiveEvent speech_stopped (the utterance's window
    input_audio_buffer.committed          is decided: server VAD commits it)
    ...input_audio_transcription.completed  LiveEvent completed: target-only's text

Sharing the one target: a live session hears its audio in a worker thread (`push`: the voice
activity detector, no target) and does its target work in a thread of its own, holding
`Engine.lock` for each piece (a draft handed over, a window decoded), as the decoding thread
holds it for one window of an HTTP request at a time: the target alternates between them
window by window. Live sessions
have their own `Transcriber` over the engine's target, with a drafter process of their own
for as2d (the HTTP requests' numbers its windows across their recordings): while the user
speaks it drafts the utterance, sent as `delta`s; in a pause the target decodes the window
that silence would cut before the endpoint is heard (`LiveSession`'s `early`), so the final
text is most often ready when it is (target-only servers decode each utterance once it has
ended). Sessions share that drafter in turn; one session's
release may drop another's draft (a draft is a hint: the text does not change).

At most `max_sessions` sockets are live at once; one more gets an `error` and is closed. A
session holds at most `MAX_SESSION_S` of audio, an append at most `MAX_APPEND_BYTES`.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import Gauge
from starlette.routing import WebSocketRoute
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect

from as2d.audio.stream import Pcm16Resampler
from as2d.live import LiveEvent, LiveSession
from as2d.models.targets import check_language, target_languages
from as2d.options import Options
from as2d.runtime.memory import release_memory
from as2d.server.access import chosen_subprotocol, offers_beta
from as2d.server.decoding import Engine
from as2d.server.realtime_events import (
    Items,
    RealtimeError,
    Settings,
    error_event,
    parse_event,
    pcm_bytes,
    quoted,
    session_object,
    updated_settings,
)
from as2d.server.sockets import CLOSE_STOPPING, STOP_GRACE_S

if TYPE_CHECKING:
    from as2d.target import Backend

MAX_SESSION_S = 3600.0  # audio per socket; then the session ends
POLL_S = 0.05  # while no message comes, events ready in the session are asked for this often
INBOX = 32  # messages read ahead of the session; then the socket waits (backpressure)
CLOSE_TRY_LATER = 1013  # WebSocket close code: the server is at its limit
CLOSE_POLICY = 1008  # WebSocket close code: a request the server will not serve
STOP_S = STOP_GRACE_S - 1  # a server that stops waits this long for an open utterance's text

T = TypeVar("T")


class RealtimeApi:
    """The WebSocket route; counts live sessions against `max_sessions`."""

    def __init__(self, engine: Engine, max_sessions: int = 4) -> None:
        self.engine = engine
        self.max_sessions = max_sessions
        self.models = [engine.options.target, "whisper-1"]
        self.sessions = 0
        self.gauge = Gauge(
            "as2d_realtime_sessions", "Live WebSocket sessions", registry=engine.metrics.registry
        )
        self._transcriber: Any = None  # live sessions' Transcriber: the engine's target, alone

    def close(self) -> None:
        """Stops the live sessions' drafter process, if one started."""
        if self._transcriber is not None:
            self._transcriber.close()

    def route(self) -> WebSocketRoute:
        return WebSocketRoute("/v1/realtime", self.endpoint)

    async def endpoint(self, ws: WebSocket) -> None:
        await ws.accept(subprotocol=chosen_subprotocol(ws.scope))  # a browser's key: access.py
        if ws.query_params.get("intent") != "transcription":
            await _refuse(ws, "unsupported_intent", "this server serves intent=transcription")
            return
        if self.sessions >= self.max_sessions:
            message = f"{self.max_sessions} realtime sessions are live (--realtime-sessions)"
            await _refuse(ws, "session_limit", message, CLOSE_TRY_LATER)
            return
        self.sessions += 1
        self.gauge.set(self.sessions)
        beta = "realtime=v1" in ws.headers.get("openai-beta", "") or offers_beta(ws.scope)
        try:
            await RealtimeSession(self, ws, beta).run()
        except (WebSocketDisconnect, OSError, RuntimeError):
            pass  # the client went away while we sent: nothing to keep
        finally:
            self.sessions -= 1
            self.gauge.set(self.sessions)
            if self.sessions == 0:  # the streams' buffers go back to the system, unawaited
                threading.Thread(target=release_memory, name="as2d-trim", daemon=True).start()

    def live(self, settings: Settings) -> LiveSession:
        """A new live stream; call with `Engine.lock` held (in `call`)."""
        return LiveSession(
            self.transcriber(),
            settings.endpoint_ms,
            language=settings.language,
            lock=self.engine.lock,  # its own thread takes the target as the HTTP requests do
            renew=self.transcriber,  # a drafter lost mid-stream is replaced for the rest
        )

    def transcriber(self) -> Any:
        """The live sessions' `Transcriber`, with a new drafter process where the last one
        was lost (as the HTTP requests' is replaced); call with `Engine.lock` held."""
        from as2d.api import Transcriber

        old, e = self._transcriber, self.engine
        if old is not None and old.drafter is not None:
            old.drafter.poll()
        if old is not None and (old.drafter is None or not old.drafter.lost):
            return old
        options = replace(
            e.options, method=live_method(e.options), threads=e.threads, timestamps="none"
        )
        if old is not None:
            old.close()  # its drafter is gone; sessions still on it renew in turn
        # as2d: a drafter process of the live sessions' own (see the module's docstring)
        self._transcriber = Transcriber(options, shared_target=e.target, warm=False)
        return self._transcriber

    @property
    def drafter_state(self) -> str:
        """The live sessions' drafter: "none" (target-only, or no session yet), "up", or
        "lost" (replaced with the next session or utterance); from any thread."""
        drafter = None if self._transcriber is None else self._transcriber.drafter
        if drafter is None:
            return "none"
        return "lost" if drafter.lost or drafter.exited else "up"

    async def call(self, work: Callable[[], T]) -> T:
        """`work` in a worker thread while it holds the target (`Engine.lock`)."""
        e = self.engine
        return await asyncio.to_thread(_locked, e.lock, e.target.backend, e.threads, work)

    def check(self, settings: Settings) -> None:
        if settings.model not in self.models:
            raise RealtimeError("invalid_model", f"unknown model; this server has {self.models}")
        target = self.engine.options.target
        try:
            check_language(target, target_languages(target), settings.language, "transcribe")
        except ValueError as err:
            raise RealtimeError("invalid_language", str(err)) from None


def live_method(options: Options) -> str:
    """How live sessions decode: as2d drafts on the CPU beside a CPU target, else the target
    decodes alone (finals only, no provisional text)."""
    return "as2d" if options.method == "as2d" and options.device == "cpu" else "target"


def _locked(lock: threading.Lock, backend: Backend, threads: int, work: Callable[[], T]) -> T:
    with lock:
        backend.set_threads(threads)  # this worker thread's, as the decoding thread's
        return work()


async def _refuse(ws: WebSocket, code: str, message: str, close: int = CLOSE_POLICY) -> None:
    await ws.send_json(error_event(RealtimeError(code, message)))
    await ws.close(close)


class RealtimeSession:
    """One socket: client events in, the live session's events out, in order."""

    def __init__(self, api: RealtimeApi, ws: WebSocket, beta: bool) -> None:
        self.api, self.ws, self.beta = api, ws, beta
        self.id = f"sess_{uuid.uuid4().hex[:20]}"
        self.settings = Settings()
        self.resampler = Pcm16Resampler(self.settings.rate)
        self.live: LiveSession | None = None
        self.items = Items()  # numbers the live streams' events, as OpenAI's

    async def run(self) -> None:
        self.live = await self.api.call(lambda: self.api.live(self.settings))
        kind = "transcription_session" if self.beta else "session"
        await self._send({"type": f"{kind}.created", "session": self._session()})
        inbox: asyncio.Queue[Message] = asyncio.Queue(INBOX)
        reader = asyncio.create_task(_read(self.ws, inbox))
        try:
            while True:
                try:
                    message = await asyncio.wait_for(inbox.get(), POLL_S)
                except TimeoutError:
                    if reader.done():
                        return  # the reader failed: the socket is unusable
                    await self._poll()
                    continue
                if message["type"] == "websocket.disconnect":
                    if message.get("code") == CLOSE_STOPPING:  # the server stops, not the client
                        await self._stop()
                    return  # mid-utterance or not: the session is dropped with this object
                if not await self._handle(message):
                    return
        finally:
            reader.cancel()
            if self.live is not None:  # its backlog is dropped: the events would go nowhere
                self.live.drop()

    async def _handle(self, message: Message) -> bool:
        """One client message; False once the socket is closed."""
        event_id = None
        try:
            event = parse_event(message)
            event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
            await self._dispatch(event)
        except (WebSocketDisconnect, OSError):
            raise
        except Exception as err:  # decoding failed: said, and the socket closed
            if not isinstance(err, RealtimeError):
                err = RealtimeError("server_error", f"{type(err).__name__}: {err}", fatal=True)
            await self._send(error_event(err, event_id))
            if err.fatal:
                await self.ws.close(CLOSE_POLICY)
                return False
        return True

    async def _dispatch(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "input_audio_buffer.append":
            await self._append(event.get("audio"))
        elif kind == "input_audio_buffer.commit":
            await self._commit()
        elif kind == "input_audio_buffer.clear":
            await self._restart()
            await self._send({"type": "input_audio_buffer.cleared"})
        elif kind in ("session.update", "transcription_session.update"):
            await self._update(event.get("session"), kind.replace(".update", ".updated"))
        else:
            raise RealtimeError("unknown_event", f"unknown event type {quoted(kind)}")

    async def _append(self, audio: object) -> None:
        data = pcm_bytes(audio)
        live = self.live
        assert live is not None
        if self.items.heard_s + live.windower.received_s + len(data) / 2 / self.settings.rate > (
            MAX_SESSION_S
        ):
            raise RealtimeError(
                "session_too_long", f"a session holds {MAX_SESSION_S:g} s of audio", fatal=True
            )
        block = self.resampler.feed(data)
        await self._say(await asyncio.to_thread(live.push, block))

    async def _commit(self) -> None:
        """Ends the utterance now (OpenAI's manual commit); later audio is a new stream."""
        live, tail = self.live, self.resampler.feed(b"", last=True)
        assert live is not None
        events = await asyncio.to_thread(lambda: [*live.push(tail), *live.finish()])
        await self._say(events)
        said = self.items.said  # an item of this stream: server VAD's, or now
        await self._restart()
        if not said:  # nothing new after server VAD's last item is not an error
            raise RealtimeError("input_audio_buffer_commit_empty", "the buffer holds no speech")

    async def _stop(self) -> None:
        """The server stops (`sockets.py`): the utterance heard so far ends now and its
        transcript is sent, or an error event for it where it is not ready in `STOP_S`; then
        the socket closes with `CLOSE_STOPPING`."""
        live, tail = self.live, self.resampler.feed(b"", last=True)
        assert live is not None
        work = asyncio.to_thread(lambda: [*live.push(tail), *live.finish()])
        try:
            await self._say(await asyncio.wait_for(work, STOP_S))
        except TimeoutError:
            message = "the server stopped before the open utterance's transcript was ready"
            await self._send(error_event(RealtimeError("server_stopping", message)))
        await self.ws.close(CLOSE_STOPPING)

    async def _restart(self) -> None:
        """A new live stream, where the current one's audio ends (commit, clear, update)."""
        assert self.live is not None
        await asyncio.to_thread(self.live.close)  # its work done: nothing left running
        self.items.next_stream(self.live.windower.received_s)
        self.resampler = Pcm16Resampler(self.settings.rate)
        self.live = await self.api.call(lambda: self.api.live(self.settings))

    async def _poll(self) -> None:
        """Events the session decided without new audio."""
        live = self.live
        if live is not None:
            await self._say(live.poll())  # only what its thread said: no work

    async def _update(self, session: object, answer: str) -> None:
        if not isinstance(session, dict):
            raise RealtimeError("invalid_session", "session must be an object")
        try:
            settings = updated_settings(session, self.settings)
        except (AttributeError, TypeError, ValueError):  # a field of the wrong JSON type
            raise RealtimeError("invalid_session", "a session field has the wrong type") from None
        self.api.check(settings)
        if settings != self.settings:
            assert self.live is not None
            if self.live.windower.received_s > 0:
                raise RealtimeError(
                    "session_in_progress",
                    "settings change between utterances: commit or clear the buffer first",
                )
            self.settings = settings
            await self._restart()
        await self._send({"type": answer, "session": self._session()})

    async def _say(self, events: list[LiveEvent]) -> None:
        for event in events:
            for message in self.items.messages(event):
                await self._send(message)

    def _session(self) -> dict[str, Any]:
        return session_object(self.id, self.settings, self.beta)

    async def _send(self, message: dict[str, Any]) -> None:
        await self.ws.send_json({"event_id": f"event_{uuid.uuid4().hex[:20]}", **message})


async def _read(ws: WebSocket, inbox: asyncio.Queue[Message]) -> None:
    """The socket's messages into `inbox`, up to and with its disconnect."""
    while True:
        message = await ws.receive()
        await inbox.put(message)
        if message["type"] == "websocket.disconnect":
            return
