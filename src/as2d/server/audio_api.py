"""The HTTP routes of OpenAI's audio API (`AudioApi`): each reads its request (`forms.py`,
`chat.py`), queues a job for the decoding thread (`decoding.py`), waits for its windows and
renders the answer (`responses.py`). A client that goes away cancels its job at the next
window; every answer is counted in `/metrics` by endpoint and status.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from as2d.server.chat import chat_job, completion
from as2d.server.decoding import ApiError, Engine, Job
from as2d.server.forms import AudioRequest, Forms
from as2d.server.realtime import RealtimeApi
from as2d.server.responses import TranscriptEvents, file_result, render
from as2d.types import RunStats, WindowResult

DISCONNECT_POLL_S = 0.5  # while a request waits for its windows, whether its client is there


class AudioApi:
    """`/v1/audio/*`, `/v1/chat/completions`, `/v1/recordings`, `/v1/models`, `/health` and
    `/metrics`."""

    def __init__(self, engine: Engine, max_upload_bytes: int, upload_dir: Path) -> None:
        self.engine = engine
        self.forms = Forms(engine, max_upload_bytes, upload_dir)
        self.metrics = engine.metrics
        self.live: RealtimeApi | None = None  # the WebSocket's, whose drafter /health reports

    def routes(self) -> list[Route]:
        return [
            Route("/v1/audio/transcriptions", self.transcriptions, methods=["POST"]),
            Route("/v1/audio/translations", self.translations, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/recordings", self.add_recording, methods=["POST"]),
            Route("/v1/recordings/{rid}", self.show_recording, methods=["GET"]),
            Route("/v1/recordings/{rid}", self.delete_recording, methods=["DELETE"]),
            Route("/v1/models", self.list_models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.prometheus, methods=["GET"]),
        ]

    async def transcriptions(self, request: Request) -> Response:
        return await self._answer("transcriptions", self._audio(request, "transcribe"))

    async def translations(self, request: Request) -> Response:
        return await self._answer("translations", self._audio(request, "translate"))

    async def chat(self, request: Request) -> Response:
        return await self._answer("chat", self._chat(request))

    async def add_recording(self, request: Request) -> Response:
        return await self._answer("recordings", self._add_recording(request))

    async def show_recording(self, request: Request) -> Response:
        try:
            recording = self.forms.recording(request.path_params["rid"])
        except ApiError as err:
            return err.response()
        return JSONResponse(self.engine.recordings.public(recording))

    async def delete_recording(self, request: Request) -> Response:
        """Removes a recording and everything prepared for it (OpenAI's deletion object)."""
        rid = request.path_params["rid"]
        if not self.engine.recordings.delete(rid):
            return ApiError(404, f"no recording {rid!r} on this server", "recording_id").response()
        return JSONResponse({"id": rid, "object": "recording.deleted", "deleted": True})

    async def list_models(self, request: Request) -> Response:
        data = [{"id": m, "object": "model", "owned_by": "as2d"} for m in self.forms.models]
        return JSONResponse({"object": "list", "data": data})

    async def health(self, request: Request) -> Response:
        queued = self.engine.jobs.qsize()
        live = self.live.drafter_state if self.live is not None else "none"
        return JSONResponse(
            {"status": "ok", "queue": queued, "drafter": self.engine.drafter_state,
             "live_drafter": live}
        )  # fmt: skip

    async def prometheus(self, request: Request) -> Response:
        body = generate_latest(self.metrics.registry)
        return Response(body, media_type="text/plain; version=0.0.4")

    async def _answer(self, endpoint: str, work: Coroutine[Any, Any, Response]) -> Response:
        with self.metrics.latency.labels(endpoint).time():
            try:
                response = await work
            except ApiError as err:
                response = err.response()
        self.metrics.requests.labels(endpoint, str(response.status_code)).inc()
        return response

    async def _audio(self, request: Request, task: str) -> Response:
        asked = await self.forms.audio(request, task)
        if asked.stream:
            return await self._stream(asked)
        windows, stats = await self._run(asked.job, request)
        result = file_result(asked.job.name, self.engine.options, windows, stats)
        return render(result, asked.fmt, task, self.engine.options.temperature)

    async def _chat(self, request: Request) -> Response:
        job, model = await chat_job(request, self.forms)
        windows, stats = await self._run(job, request)
        return JSONResponse(completion(model, windows, stats))

    async def _add_recording(self, request: Request) -> Response:
        """Stores an upload and answers at once; the server drafts it while idle."""
        name, path = await self.forms.upload(request)
        try:
            duration = await self.forms.duration(path, name)
            recording = self.engine.recordings.add(path.read_bytes(), path.suffix, duration)
        finally:
            path.unlink(missing_ok=True)
        return JSONResponse(self.engine.recordings.public(recording))

    async def _stream(self, asked: AudioRequest) -> Response:
        """Queues the job and answers with its events as they come; streaming verbose_json,
        the recording's length is read first (the progress), and a file that is not audio is
        refused then, as unstreamed."""
        job = asked.job
        total_s = None
        if asked.fmt == "verbose_json":
            try:
                total_s = await self.forms.duration(job.path, job.name)
            except ApiError:
                job.discard()
                raise
        self._submit(job)
        events = TranscriptEvents(job, asked.fmt, self.engine.options, total_s)
        return StreamingResponse(_events(job, events), media_type="text/event-stream")

    def _submit(self, job: Job) -> None:
        try:
            self.engine.submit(job)
        except ApiError:
            job.discard()
            raise

    async def _run(self, job: Job, request: Request) -> tuple[list[WindowResult], RunStats]:
        """Queues the job and waits for its windows; its file is removed after."""
        self._submit(job)
        try:
            return await _collect(job, request)
        finally:
            job.discard()


async def _collect(job: Job, request: Request) -> tuple[list[WindowResult], RunStats]:
    """Waits for the job's windows; a client that disconnects cancels it."""
    windows: list[WindowResult] = []
    while True:
        try:
            kind, value = await asyncio.wait_for(job.events.get(), DISCONNECT_POLL_S)
        except TimeoutError:
            if await request.is_disconnected():
                job.cancelled.set()
                raise ApiError(499, "the client closed the request") from None
            continue
        if kind == "window":
            windows.append(value)
        elif kind == "done":
            return windows, value
        else:
            raise value


async def _events(job: Job, events: TranscriptEvents) -> AsyncIterator[str]:
    """The job's server-sent events as its windows finish. A client that goes away cancels
    the job (the generator is closed)."""
    try:
        while True:
            kind, value = await job.events.get()
            if kind == "window":
                for event in events.window(value):
                    yield event
            elif kind == "done":
                yield events.done(value)
                return
            elif kind == "error":
                yield events.error(value)
                return
    finally:
        job.cancelled.set()  # a no-op once done; a disconnect stops the decoding
        job.discard()
