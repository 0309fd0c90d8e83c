"""What an HTTP request asks of `as2d serve`, checked before anything is queued: the upload
read within `--max-upload-mb`, and OpenAI's form fields checked against what the server's one
target can honour (`Forms`). Every refusal is an `ApiError` naming the field.

Why a module of its own: the routes (`audio_api.py`) stay a few lines each, and every limit
and field rule of the API sits in one place.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request

from as2d.models.targets import check_language, target_languages
from as2d.options import has_transcript_to_time
from as2d.server.decoding import ApiError, Engine, Job, audio_error
from as2d.server.recordings import Recording

RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
STREAM_FORMATS = ("json", "text", "verbose_json")  # events: text deltas (verbose_json: segments)
MODEL_ALIASES = ("whisper-1",)  # what OpenAI clients send by default: the server's target
_CHUNK = 1 << 20


@dataclass
class AudioRequest:
    """A transcription or translation request, checked: its job and how to answer it."""

    job: Job
    fmt: str  # response_format
    stream: bool  # server-sent events as windows finish


class Forms:
    """Reads requests within the server's limits and checks their fields."""

    def __init__(self, engine: Engine, max_upload_bytes: int, upload_dir: Path) -> None:
        self.engine = engine
        self.max_upload_bytes = max_upload_bytes
        self.upload_dir = upload_dir
        self.models = [engine.options.target, *MODEL_ALIASES]
        self.languages = target_languages(engine.options.target)  # None: any (chat models)

    async def audio(self, request: Request, task: str) -> AudioRequest:
        """The multipart form of `/v1/audio/transcriptions` or `/translations`, its upload
        saved (or its `recording_id` found)."""
        self.check_length(request)
        form = await self._read(request)
        try:
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
            fmt, stream = self.check_fields(fields)
            language = fields.get("language") or None
            self._check_language(language, task)
            granularities = form.getlist("timestamp_granularities[]")
            timestamps = self._timestamps(fmt, task, granularities)
            upload = form.get("file")
            if isinstance(upload, UploadFile):
                name, path, keep = upload.filename or "audio", await self._save(upload), False
            elif fields.get("recording_id"):
                recording = self.recording(fields["recording_id"])
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
        return AudioRequest(job, fmt, stream)

    async def upload(self, request: Request) -> tuple[str, Path]:
        """The name and saved file of a form that holds just a file (`/v1/recordings`)."""
        self.check_length(request)
        form = await self._read(request)
        try:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise ApiError(400, "the form has no file", "file")
            return upload.filename or "audio", await self._save(upload)
        finally:
            await form.close()

    async def duration(self, path: Path, name: str) -> float:
        """The audio's length in seconds (its headers, where they say); 400 where the file is
        not audio."""
        from as2d.audio.load import AudioError, audio_duration

        try:
            return await asyncio.to_thread(audio_duration, str(path))
        except AudioError as err:
            raise audio_error(err, path, name) from None

    def recording(self, rid: str) -> Recording:
        recording = self.engine.recordings.get(rid)
        if recording is None:
            raise ApiError(404, f"no recording {rid!r} on this server", "recording_id")
        return recording

    def check_length(self, request: Request, factor: int = 1) -> None:
        """413 for a body over the upload limit (times `factor`: base64 in JSON), from its
        `Content-Length`, before it is read."""
        length = request.headers.get("content-length", "0")
        if not length.isdigit() or int(length) > factor * self.max_upload_bytes:
            raise self.too_large()

    def too_large(self) -> ApiError:
        mb = self.max_upload_bytes / 2**20
        return ApiError(413, f"the upload is larger than {mb:g} MB (--max-upload-mb)", "file")

    def check_fields(self, fields: dict[str, str]) -> tuple[str, bool]:
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

    def write(self, data: bytes, suffix: str) -> Path:
        """`data` (a chat request's audio) in a file of its own."""
        if not data:
            raise ApiError(400, "the audio is empty", "messages")
        with tempfile.NamedTemporaryFile(dir=self.upload_dir, suffix=suffix, delete=False) as out:
            out.write(data)
        return Path(out.name)

    async def _read(self, request: Request) -> Any:
        try:
            return await request.form(max_files=1, max_fields=16)
        except Exception as err:  # starlette: malformed multipart, too many parts
            reason = getattr(err, "detail", err)  # an HTTPException's words, not its status
            raise ApiError(400, f"could not read the form: {reason}") from None

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
                    raise self.too_large()
                out.write(chunk)
        if size == 0:
            path.unlink()
            raise ApiError(400, "the uploaded file is empty", "file")
        return path
