"""OpenAI's Realtime transcription events, apart from the socket they travel on: client events
checked and read (`parse_event`, `pcm_bytes`, `updated_settings`), and a live session's
events turned into OpenAI's (`Items`, `session_object`, `error_event`).

Why a module of its own: what a client may send and what the server answers is OpenAI's
protocol, pure data in and out; `realtime.py` owns the socket, the live session and the
target's threads, and calls these. A client event the server cannot honour raises
`RealtimeError`, which goes back as an `error` event.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from starlette.types import Message

from as2d.live import DEFAULT_ENDPOINT_MS, LiveEvent
from as2d.types import SAMPLE_RATE

OPENAI_RATE = 24_000  # OpenAI's pcm16: 24 kHz mono, little-endian
RATES = (OPENAI_RATE, SAMPLE_RATE)  # audio/pcm rates taken (16 kHz: as2d's, not resampled)
MAX_APPEND_BYTES = 1 << 20  # PCM per append: 21.8 s at 24 kHz (OpenAI allows 15 MiB base64)
PROVISIONAL = "as2d.input_audio_transcription.provisional"  # ours: the whole caption so far
ECHO_CHARS = 64  # of a client's value quoted back in an error (an unknown type may be huge)


class RealtimeError(Exception):
    """A client event the session cannot honour: an `error` event; `fatal` closes the socket."""

    def __init__(self, code: str, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.code, self.message, self.fatal = code, message, fatal


@dataclass(frozen=True)
class Settings:
    """What `session.update` sets (OpenAI's names in comments)."""

    rate: int = OPENAI_RATE  # input_audio_format "pcm16" / audio.input.format.rate
    model: str = "whisper-1"  # input_audio_transcription.model
    language: str | None = None  # input_audio_transcription.language (None: the server's)
    endpoint_ms: int = DEFAULT_ENDPOINT_MS  # turn_detection.silence_duration_ms


def caption_delta(sent: str, text: str) -> str | None:
    """What to send as OpenAI's delta (an increment) for our provisional `text` (the whole
    utterance so far, which may be revised): its new part where it extends what was `sent`,
    else None (a revision is not sent: the `completed` transcript replaces it).

    Example: caption_delta("Hello", "Hello world") == " world";
    caption_delta("Hello word", "Hello world") is None.
    """
    if len(text) > len(sent) and text.startswith(sent):
        return text[len(sent) :]
    return None


class Items:
    """A socket's conversation items: numbers the live sessions' events across the streams a
    socket goes through (a commit, a clear or an update starts a new one) and turns them into
    OpenAI's events."""

    def __init__(self) -> None:
        self.heard_s = 0.0  # audio of the live streams before the current one
        self.base = 1  # item number of the current stream's item 0
        self.last = 0  # the highest item number said
        self.previous: str | None = None  # the last committed item's id
        self.sent = ""  # the current item's text sent as deltas

    @property
    def said(self) -> bool:
        """Whether the current stream has said an item (server VAD's, or a commit's)."""
        return self.last >= self.base

    def next_stream(self, received_s: float) -> None:
        """The current stream ended after `received_s` of audio; the next one's items follow."""
        self.heard_s += received_s
        self.base, self.sent = self.last + 1, ""

    def messages(self, event: LiveEvent) -> list[dict[str, Any]]:
        """OpenAI's events for one of the live session's."""
        number = self.base + event.item
        self.last = max(self.last, number)
        item = f"item_{number:04d}"
        if event.kind == "speech_started":
            ms = round((self.heard_s + event.start_s) * 1000)
            return [{"type": "input_audio_buffer.speech_started", "audio_start_ms": ms,
                     "item_id": item}]  # fmt: skip
        if event.kind == "delta":
            return self._deltas(item, event.text)
        if event.kind == "speech_stopped":
            ms = round((self.heard_s + event.end_s) * 1000)
            previous, self.previous, self.sent = self.previous, item, ""
            return [
                {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": ms,
                 "item_id": item},
                {"type": "input_audio_buffer.committed", "item_id": item,
                 "previous_item_id": previous},
            ]  # fmt: skip
        return [{"type": "conversation.item.input_audio_transcription.completed",
                 "item_id": item, "content_index": 0, "transcript": event.text}]  # fmt: skip

    def _deltas(self, item: str, text: str) -> list[dict[str, Any]]:
        """OpenAI's delta where the caption grows, and ours with the whole caption, which
        may revise it (OpenAI clients ignore an event type they do not know)."""
        provisional = {"type": PROVISIONAL, "item_id": item, "content_index": 0, "text": text}
        delta = caption_delta(self.sent, text)
        if delta is None:
            return [provisional]
        self.sent = text
        return [{"type": "conversation.item.input_audio_transcription.delta",
                 "item_id": item, "content_index": 0, "delta": delta}, provisional]  # fmt: skip


def session_object(sid: str, s: Settings, beta: bool) -> dict[str, Any]:
    """The session as OpenAI describes it: the beta's fields, or the GA's nested ones."""
    transcription = {"model": s.model, "language": s.language, "prompt": ""}
    turns = {"type": "server_vad", "silence_duration_ms": s.endpoint_ms}
    if beta:
        return {"id": sid, "object": "realtime.transcription_session",
                "input_audio_format": "pcm16", "input_audio_transcription": transcription,
                "turn_detection": turns}  # fmt: skip
    audio_format = {"type": "audio/pcm", "rate": s.rate}
    return {"id": sid, "object": "realtime.transcription_session",
            "type": "transcription", "audio": {"input": {"format": audio_format,
            "transcription": transcription, "turn_detection": turns}}}  # fmt: skip


def error_event(err: RealtimeError, event_id: str | None = None) -> dict[str, Any]:
    """OpenAI's `error` event for `err`, answering the client event `event_id`."""
    error = {"type": "invalid_request_error", "code": err.code, "message": err.message}
    if err.code == "session_limit":
        error["type"] = "server_error"
    return {"type": "error", "error": {**error, "param": None, "event_id": event_id}}


def parse_event(message: Message) -> dict[str, Any]:
    """A client's WebSocket message as an event: a JSON object in a text frame."""
    if message.get("text") is None:
        raise RealtimeError("binary_not_supported", "events are JSON text frames")
    try:
        event = json.loads(message["text"])
    except ValueError:
        raise RealtimeError("invalid_json", "the message is not JSON") from None
    except RecursionError:
        raise RealtimeError("invalid_json", "the message nests too deeply") from None
    if not isinstance(event, dict):
        raise RealtimeError("invalid_json", "an event is a JSON object")
    return event


def pcm_bytes(audio: object) -> bytes:
    """An append's PCM16 bytes, checked."""
    if not isinstance(audio, str):
        raise RealtimeError("invalid_audio", "audio must be base64 text")
    too_large = RealtimeError(
        "audio_too_large", f"an append holds {MAX_APPEND_BYTES} bytes at most"
    )
    if len(audio) > -(-MAX_APPEND_BYTES // 3) * 4:  # base64: 4 characters per 3 bytes
        raise too_large
    try:
        data = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise RealtimeError("invalid_base64", "audio is not base64") from None
    if len(data) > MAX_APPEND_BYTES:
        raise too_large
    if len(data) % 2:
        raise RealtimeError("invalid_audio", "pcm16 audio holds an even number of bytes")
    return data


def updated_settings(session: dict[str, Any], current: Settings) -> Settings:
    """`current` with what a `session.update` (beta or GA fields) sets."""
    audio_input = (session.get("audio") or {}).get("input") or {}
    rate = current.rate
    if "input_audio_format" in session and session["input_audio_format"] != "pcm16":
        raise RealtimeError("invalid_audio_format", "input_audio_format must be pcm16")
    if fmt := audio_input.get("format"):
        if fmt.get("type") != "audio/pcm" or fmt.get("rate", OPENAI_RATE) not in RATES:
            raise RealtimeError("invalid_audio_format", f"format must be audio/pcm at {RATES}")
        rate = int(fmt.get("rate", OPENAI_RATE))
    transcription = session.get("input_audio_transcription") or audio_input.get("transcription")
    transcription = transcription or {}
    if transcription.get("prompt"):
        raise RealtimeError("unsupported_prompt", "a transcription prompt is not supported live")
    detection = session.get("turn_detection", audio_input.get("turn_detection", {}))
    if detection is None or detection.get("type", "server_vad") != "server_vad":
        raise RealtimeError("unsupported_turn_detection", "turn_detection must be server_vad")
    endpoint = detection.get("silence_duration_ms", current.endpoint_ms)
    if not isinstance(endpoint, int) or not 100 <= endpoint <= 10_000:
        raise RealtimeError("invalid_turn_detection", "silence_duration_ms must be 100-10000")
    return Settings(
        rate=rate,
        model=str(transcription.get("model", current.model)),
        language=_language(transcription.get("language", current.language)),
        endpoint_ms=endpoint,
    )


def _language(language: object) -> str | None:
    """A session's language code, in lower case as the target knows it ("EN": "en")."""
    if language is not None and not isinstance(language, str):
        raise RealtimeError("invalid_session", "language must be a language code such as en")
    return language.lower() if language else None


def quoted(value: object) -> str:
    """A client's `value` as an error quotes it: its repr, cut to `ECHO_CHARS`."""
    text = repr(value)
    return text if len(text) <= ECHO_CHARS else f"{text[:ECHO_CHARS]}... ({len(text)} chars)"
