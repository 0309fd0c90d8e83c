"""`POST /v1/chat/completions` for audio LLM targets (Qwen2-Audio, Qwen2.5-Omni): OpenAI's chat
body read into a job (`chat_job`: one `input_audio` part in the last user message, whose text
parts are the request, task "ask"; earlier messages are not used), and the answer as OpenAI's
chat completion (`completion`, with `as2d`: the windows and the run's stats).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import time
import uuid
from typing import Any

from starlette.requests import Request

from as2d.server.decoding import ApiError, Job
from as2d.server.forms import Forms
from as2d.types import RunStats, WindowResult


async def chat_job(request: Request, forms: Forms) -> tuple[Job, Any]:
    """The job a chat completion asks for, and the `model` it names (echoed in the answer)."""
    engine = forms.engine
    if not engine.target.follows_requests:
        raise ApiError(
            400,
            f"the target {engine.options.target} transcribes and translates; chat needs an "
            "audio LLM target (Qwen2-Audio, Qwen2.5-Omni): start the server with --target",
            "model",
        )
    forms.check_length(request, factor=2)  # the audio travels as base64
    try:
        body = await request.json()
        messages = body["messages"]
        fields = {k: str(body[k]) for k in ("model", "temperature") if k in body}
    except (ValueError, KeyError, TypeError):
        raise ApiError(400, "the body must be JSON with model and messages") from None
    if body.get("stream"):
        raise ApiError(400, "stream is not supported for chat completions", "stream")
    forms.check_fields({**fields, "model": str(body.get("model"))})
    text, part = chat_parts(messages)
    if part is not None:
        audio, fmt = audio_part(part)
        if len(audio) > forms.max_upload_bytes:
            raise forms.too_large()
        name, path, keep = "audio", forms.write(audio, f".{fmt}"), False
    elif body.get("recording_id"):
        recording = forms.recording(str(body["recording_id"]))
        name, path, keep = recording.id, recording.path, True
    else:
        raise ApiError(400, "the last user message needs an input_audio part (or a recording_id)")
    loop = asyncio.get_running_loop()
    return Job(path, name, "ask", None, loop, text, keep=keep), body["model"]


def completion(model: Any, windows: list[WindowResult], stats: RunStats) -> dict[str, Any]:
    """OpenAI's chat completion of the answer's windows."""
    answer = " ".join(w.text for w in windows if w.text)
    tokens = sum(len(w.token_ids) for w in windows)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
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


def chat_parts(messages: Any) -> tuple[str, dict[str, Any] | None]:
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


def audio_part(part: dict[str, Any]) -> tuple[bytes, str]:
    """The bytes and format of an `input_audio` part."""
    fmt = str(part.get("format") or "wav")
    if not fmt.isalnum():
        raise ApiError(400, f"unknown audio format {fmt!r}", "messages")
    try:
        return base64.b64decode(part.get("data") or "", validate=True), fmt
    except (binascii.Error, ValueError):
        raise ApiError(400, "input_audio data is not base64", "messages") from None
