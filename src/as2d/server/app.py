"""`as2d serve`: OpenAI's audio API over HTTP, with one target and one drafter process.

Requests queue in arrival order for the one target: a single decoding thread owns the
`Transcriber` (`decoding.py`) and runs one recording at a time; this module, on the event
loop, only parses requests and renders answers. A full queue
answers 503 with `Retry-After`, a client that goes away cancels its work at the next window,
and a drafter process that dies is replaced before the next request (the answer it was
drafting for is unchanged: the target carries on alone).

Endpoints: `POST /v1/audio/transcriptions` and `/v1/audio/translations` (OpenAI's multipart
form; `stream=true` sends server-sent events as windows finish), `POST /v1/chat/completions`
(audio LLM targets only: one `input_audio` part and the request as text), `POST
/v1/recordings` and `GET`/`DELETE /v1/recordings/{id}` (recordings prepared ahead,
`recordings.py`), `GET /v1/models`,
`/health`, `/metrics` (Prometheus text); `/v1/realtime?intent=transcription`, OpenAI's
Realtime transcription over a WebSocket (`realtime.py`).
Errors are OpenAI's JSON: `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import logging
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import uvicorn
from prometheus_client import generate_latest
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from as2d.models.targets import check_language, target_languages
from as2d.options import Options, drafter_spec, has_transcript_to_time, prepare_drafter
from as2d.runtime.drafts import draft_store
from as2d.server.access import Access, AccessMiddleware
from as2d.server.decoding import ApiError, Engine, Job, Metrics
from as2d.server.page import PageApi
from as2d.server.realtime import RealtimeApi
from as2d.server.recordings import MAX_RECORDING_BYTES, Recording, Recordings
from as2d.server.sockets import DroppingWebSocketProtocol
from as2d.types import RunStats, WindowResult
from as2d.writers import FileResult, to_srt, to_vtt

RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
STREAM_FORMATS = ("json", "text")  # stream=true sends text deltas: no cues, no segments
MODEL_ALIASES = ("whisper-1",)  # what OpenAI clients send by default: the server's target
_CHUNK = 1 << 20


class AudioApi:
    """The HTTP side: parses requests into jobs and renders their results."""

    def __init__(self, engine: Engine, max_upload_bytes: int, upload_dir: Path) -> None:
        self.engine = engine
        self.max_upload_bytes = max_upload_bytes
        self.upload_dir = upload_dir
        self.metrics = engine.metrics
        self.models = [engine.options.target, *MODEL_ALIASES]
        self.languages = target_languages(engine.options.target)  # None: any (chat models)
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
            recording = self._recording(request.path_params["rid"])
        except ApiError as err:
            return err.response()
        return JSONResponse(self.engine.recordings.public(recording))

    async def delete_recording(self, request: Request) -> Response:
        """Removes a recording and everything prepared for it (OpenAI's deletion object)."""
        rid = request.path_params["rid"]
        if not self.engine.recordings.delete(rid):
            return ApiError(404, f"no recording {rid!r} on this server", "recording_id").response()
        return JSONResponse({"id": rid, "object": "recording.deleted", "deleted": True})

    async def _add_recording(self, request: Request) -> Response:
        """Stores an upload and answers at once; the server drafts it while idle."""
        from as2d.audio.load import AudioError, audio_duration

        self._check_length(request)
        form = await self._form(request)
        try:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise ApiError(400, "the form has no file", "file")
            name, path = upload.filename or "audio", await self._save(upload)
        finally:
            await form.close()
        try:
            duration = audio_duration(str(path))
            recording = self.engine.recordings.add(path.read_bytes(), path.suffix, duration)
        except AudioError as err:
            raise ApiError(400, str(err).replace(str(path), name), "file") from None
        finally:
            path.unlink(missing_ok=True)
        return JSONResponse(self.engine.recordings.public(recording))

    def _recording(self, rid: str) -> Recording:
        recording = self.engine.recordings.get(rid)
        if recording is None:
            raise ApiError(404, f"no recording {rid!r} on this server", "recording_id")
        return recording

    async def list_models(self, request: Request) -> Response:
        data = [{"id": m, "object": "model", "owned_by": "as2d"} for m in self.models]
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

    async def _answer(self, endpoint: str, work: Any) -> Response:
        with self.metrics.latency.labels(endpoint).time():
            try:
                response = await work
            except ApiError as err:
                response = err.response()
        self.metrics.requests.labels(endpoint, str(response.status_code)).inc()
        return response

    async def _chat(self, request: Request) -> Response:
        """OpenAI's chat completion with one `input_audio` part in the last user message; its
        text parts are the request (task "ask"). Earlier messages are not used."""
        if not self.engine.target.follows_requests:
            raise ApiError(
                400,
                f"the target {self.engine.options.target} transcribes and translates; chat "
                "needs an audio LLM target (Qwen2-Audio, Qwen2.5-Omni): start the server with "
                "--target",
                "model",
            )
        length = request.headers.get("content-length", "0")
        if not length.isdigit() or int(length) > 2 * self.max_upload_bytes:  # base64
            raise self._too_large()
        try:
            body = await request.json()
            messages = body["messages"]
            fields = {k: str(body[k]) for k in ("model", "temperature") if k in body}
        except (ValueError, KeyError, TypeError):
            raise ApiError(400, "the body must be JSON with model and messages") from None
        if body.get("stream"):
            raise ApiError(400, "stream is not supported for chat completions", "stream")
        self._check_fields({**fields, "model": str(body.get("model"))})
        text, part = _chat_parts(messages)
        if part is not None:
            audio, fmt = _audio_part(part)
            if len(audio) > self.max_upload_bytes:
                raise self._too_large()
            name, path, keep = "audio", self._write(audio, f".{fmt}"), False
        elif body.get("recording_id"):
            recording = self._recording(str(body["recording_id"]))
            name, path, keep = recording.id, recording.path, True
        else:
            raise ApiError(
                400, "the last user message needs an input_audio part (or a recording_id)"
            )
        loop = asyncio.get_running_loop()
        job = Job(path, name, "ask", None, loop, text, keep=keep)
        windows, stats = await self._run(job, request)
        answer = " ".join(w.text for w in windows if w.text)
        tokens = sum(len(w.token_ids) for w in windows)
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": answer},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"completion_tokens": tokens},
                "as2d": {
                    "windows": [dataclasses.asdict(w) for w in windows],
                    "stats": dataclasses.asdict(stats),
                },
            }
        )

    def _check_length(self, request: Request) -> None:
        length = request.headers.get("content-length", "0")
        if not length.isdigit() or int(length) > self.max_upload_bytes:
            raise self._too_large()

    async def _form(self, request: Request) -> Any:
        try:
            return await request.form(max_files=1, max_fields=16)
        except Exception as err:  # starlette: malformed multipart, too many parts
            reason = getattr(err, "detail", err)  # an HTTPException's words, not its status
            raise ApiError(400, f"could not read the form: {reason}") from None

    async def _audio(self, request: Request, task: str) -> Response:
        self._check_length(request)
        form = await self._form(request)
        try:
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
            fmt, stream = self._check_fields(fields)
            language = fields.get("language") or None
            self._check_language(language, task)
            granularities = form.getlist("timestamp_granularities[]")
            timestamps = self._timestamps(fmt, task, granularities)
            upload = form.get("file")
            if isinstance(upload, UploadFile):
                name, path, keep = upload.filename or "audio", await self._save(upload), False
            elif fields.get("recording_id"):
                recording = self._recording(fields["recording_id"])
                name, path, keep = recording.id, recording.path, True
            else:
                raise ApiError(400, "the form has no file (or recording_id)", "file")
        finally:
            await form.close()
        loop = asyncio.get_running_loop()
        job = Job(
            path, name, task, language, loop,
            keep=keep, previous=fields.get("prompt"), timestamps=timestamps,
        )  # fmt: skip
        if stream:
            self._submit(job)
            return StreamingResponse(self._stream(job), media_type="text/event-stream")
        windows, stats = await self._run(job, request)
        o = self.engine.options
        result = FileResult(name, o.method, o.target, o.drafter_used, windows, stats)
        return self._render(result, fmt, task)

    def _check_fields(self, fields: dict[str, str]) -> tuple[str, bool]:
        """The response format and whether to stream; ApiError for a field we cannot honour."""
        model = fields.get("model")
        if model not in self.models:
            raise ApiError(400, f"unknown model {model!r}; this server has {self.models}", "model")
        fmt = fields.get("response_format", "json")
        if fmt not in RESPONSE_FORMATS:
            raise ApiError(
                400, f"response_format must be one of {RESPONSE_FORMATS}", "response_format"
            )
        if fields.get("prompt") and not self.engine.target.takes_previous:
            raise ApiError(
                400, "prompt needs a Whisper target (chat models take a request)", "prompt"
            )
        try:
            temperature = float(fields.get("temperature", self.engine.options.temperature))
        except ValueError:
            raise ApiError(400, "temperature must be a number", "temperature") from None
        if temperature != self.engine.options.temperature:
            raise ApiError(
                400,
                f"this server decodes at temperature {self.engine.options.temperature}",
                "temperature",
            )
        stream = fields.get("stream", "false").lower()
        if stream not in ("true", "false"):
            raise ApiError(400, "stream must be true or false", "stream")
        if stream == "true" and fmt not in STREAM_FORMATS:
            raise ApiError(
                400,
                f"stream=true sends the text as events: response_format must be one of "
                f"{STREAM_FORMATS}, not {fmt}",
                "response_format",
            )
        return fmt, stream == "true"

    def _check_language(self, language: str | None, task: str) -> None:
        """ApiError for a language code the target does not know, or a language other than
        English or a translation asked of an English-only target."""
        try:
            check_language(self.engine.options.target, self.languages, language, task)
        except ValueError as err:
            raise ApiError(400, str(err), "language" if language else "model") from None

    def _timestamps(self, fmt: str, task: str, granularities: list[Any]) -> str:
        """What to time: segments for subtitles and verbose_json, words where OpenAI's
        `timestamp_granularities[]` asks for them; nothing where there is no transcript to
        time (a chat target's translation)."""
        if any(g not in ("segment", "word") for g in granularities):
            raise ApiError(
                400, "timestamp_granularities[] holds segment and/or word",
                "timestamp_granularities[]",
            )  # fmt: skip
        if granularities and fmt != "verbose_json":
            raise ApiError(
                400, "timestamp_granularities[] needs response_format verbose_json",
                "timestamp_granularities[]",
            )  # fmt: skip
        if not has_transcript_to_time(task, self.engine.target.times_words):
            if "word" in granularities:
                raise ApiError(400, "this model cannot time words", "timestamp_granularities[]")
            return "none"
        if "word" in granularities:
            return "word"
        return "segment" if fmt in ("srt", "vtt", "verbose_json") else "none"

    async def _save(self, upload: UploadFile) -> Path:
        """The upload in a file of its own, refused past the size limit."""
        suffix = Path(upload.filename or "").suffix[:16]
        with tempfile.NamedTemporaryFile(dir=self.upload_dir, suffix=suffix, delete=False) as out:
            path, size = Path(out.name), 0
            while chunk := await upload.read(_CHUNK):
                size += len(chunk)
                if size > self.max_upload_bytes:
                    out.close()
                    path.unlink()
                    raise self._too_large()
                out.write(chunk)
        if size == 0:
            path.unlink()
            raise ApiError(400, "the uploaded file is empty", "file")
        return path

    def _too_large(self) -> ApiError:
        mb = self.max_upload_bytes / 2**20
        return ApiError(413, f"the upload is larger than {mb:g} MB (--max-upload-mb)", "file")

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
            return await self._collect(job, request)
        finally:
            job.discard()

    def _write(self, data: bytes, suffix: str) -> Path:
        if not data:
            raise ApiError(400, "the audio is empty", "messages")
        with tempfile.NamedTemporaryFile(dir=self.upload_dir, suffix=suffix, delete=False) as out:
            out.write(data)
        return Path(out.name)

    async def _collect(self, job: Job, request: Request) -> tuple[list[WindowResult], RunStats]:
        """Waits for the job's windows; a client that disconnects cancels it."""
        windows: list[WindowResult] = []
        while True:
            try:
                kind, value = await asyncio.wait_for(job.events.get(), timeout=0.5)
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

    async def _stream(self, job: Job) -> AsyncIterator[str]:
        """Server-sent events as OpenAI streams a transcription: a delta per window, then the
        whole text. A client that goes away cancels the job (the generator is closed)."""
        texts: list[str] = []
        try:
            while True:
                kind, value = await job.events.get()
                if kind == "window" and value.text:
                    delta = value.text if not texts else " " + value.text
                    texts.append(value.text)
                    yield _event({"type": "transcript.text.delta", "delta": delta})
                elif kind == "done":
                    yield _event({"type": "transcript.text.done", "text": " ".join(texts)})
                    return
                elif kind == "error":
                    yield _event({"type": "error", "error": value.message})
                    return
        finally:
            job.cancelled.set()  # a no-op once done; a disconnect stops the decoding
            job.discard()

    def _render(self, result: FileResult, fmt: str, task: str) -> Response:
        if fmt == "text":
            return PlainTextResponse(result.text + "\n")
        if fmt in ("srt", "vtt"):
            render = to_srt if fmt == "srt" else to_vtt
            return PlainTextResponse(render(result), media_type=f"text/{fmt}")
        if fmt == "json":
            return JSONResponse({"text": result.text})
        segments = [
            {"id": i, "seek": round(c.start * 100), "start": c.start, "end": c.end,
             "text": c.text, "temperature": self.engine.options.temperature}
            for i, c in enumerate(result.cues())
        ]  # fmt: skip
        words = [
            {"word": w.word.strip(), "start": w.start, "end": w.end}
            for s in result.segments
            for w in s.words
        ]
        return JSONResponse(
            {
                "task": task,
                "language": result.stats.language,  # given, else detected
                "duration": result.stats.audio_s,
                "text": result.text,
                "segments": segments,
                **({"words": words} if words else {}),
                "as2d": {  # our extension: each window's counts and the run's stats
                    "method": result.method,
                    "windows": [dataclasses.asdict(w) for w in result.windows],
                    "stats": dataclasses.asdict(result.stats),
                },
            }
        )


def _chat_parts(messages: Any) -> tuple[str, dict[str, Any] | None]:
    """The request text and the `input_audio` part (None: none) of the last user message."""
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    if not isinstance(content, list):
        raise ApiError(400, "the last user message needs content parts: text and input_audio")
    parts = [p for p in content if isinstance(p, dict)]
    texts = [str(p.get("text", "")) for p in parts if p.get("type") == "text"]
    audios = [p.get("input_audio") for p in parts if p.get("type") == "input_audio"]
    if len(audios) > 1 or not all(isinstance(a, dict) for a in audios):
        raise ApiError(400, "the last user message holds at most one input_audio part", "messages")
    if not any(t.strip() for t in texts):
        raise ApiError(400, "the last user message needs a text part: the request", "messages")
    return "\n".join(t for t in texts if t.strip()), audios[0] if audios else None


def _audio_part(part: dict[str, Any]) -> tuple[bytes, str]:
    """The bytes and format of an `input_audio` part."""
    fmt = str(part.get("format") or "wav")
    if not fmt.isalnum():
        raise ApiError(400, f"unknown audio format {fmt!r}", "messages")
    try:
        return base64.b64decode(part.get("data") or "", validate=True), fmt
    except (binascii.Error, ValueError):
        raise ApiError(400, "input_audio data is not base64", "messages") from None


def _event(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def create_app(
    options: Options,
    max_upload_mb: float = 200,
    queue_size: int = 16,
    realtime_sessions: int = 4,
    max_recordings_mb: float = MAX_RECORDING_BYTES / 2**20,
    access: Access | None = None,
) -> Starlette:
    """The ASGI app; its models load when it starts (lifespan) and close when it stops.
    Every request passes `access` (the key, the origins) first; `/` is the page."""
    access = access or Access()  # None: no key, no foreign origin
    metrics = Metrics()
    store = draft_store(Path(options.drafts_dir) if options.drafts_dir else None)
    accurate = dataclasses.replace(options, drafter=prepare_drafter(options))  # nobody waits for it
    spec = drafter_spec(accurate) if options.drafts == "auto" else None
    recordings = Recordings(store, spec, int(max_recordings_mb * 2**20))
    engine = Engine(options, queue_size, metrics, recordings)
    upload_dir = Path(tempfile.mkdtemp(prefix="as2d-uploads-"))
    api = AudioApi(engine, int(max_upload_mb * 2**20), upload_dir)

    live = RealtimeApi(engine, realtime_sessions)
    api.live = live

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(engine.start)
        try:
            yield
        finally:
            await asyncio.to_thread(engine.stop)
            live.close()
            shutil.rmtree(upload_dir, ignore_errors=True)

    page = PageApi(engine, access.api_key is not None)
    routes = [*page.routes(), *api.routes(), live.route()]
    middleware = [Middleware(AccessMiddleware, access=access)]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


class _Server(uvicorn.Server):
    """uvicorn's server, saying on stderr where it listens once it does (models loaded,
    socket bound): one line, what `uvicorn.run` would log at info level."""

    def __init__(self, config: uvicorn.Config, target: str) -> None:
        super().__init__(config)
        self.target = target

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started:
            host = self.config.host
            url = f"http://{f'[{host}]' if ':' in host else host}:{self.config.port}"
            line = f"as2d: serving {self.target} on {url} (Ctrl-C to stop)"
            print(line, file=sys.stderr, flush=True)


def serve(
    options: Options,
    host: str,
    port: int,
    max_upload_mb: float,
    queue_size: int,
    realtime_sessions: int = 4,
    max_recordings_mb: float = MAX_RECORDING_BYTES / 2**20,
    access: Access | None = None,
) -> None:
    """Runs the server until SIGINT/SIGTERM: uvicorn stops taking requests, answers those in
    flight, and the lifespan closes the models.

    Raises:
        SystemExit: the server could not start (uvicorn has said why).
    """
    # A malformed multipart body is answered 400; python-multipart also warns about it on
    # stderr (through logging's last resort). Its errors (a temporary file that cannot be
    # made) are still shown.
    logging.getLogger("python_multipart").setLevel(logging.ERROR)
    app = create_app(
        options, max_upload_mb, queue_size, realtime_sessions, max_recordings_mb, access
    )
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=300,
        ws=DroppingWebSocketProtocol,  # never waits on a client that does not read
    )  # fmt: skip
    server = _Server(config, options.target)
    with suppress(KeyboardInterrupt):  # raised again by uvicorn once it has shut down
        server.run()
    if not server.started:
        raise SystemExit(3)  # uvicorn's STARTUP_FAILURE, as uvicorn.run exits
