"""OpenAI's answers to a transcription, rendered from its windows: json, text, srt, vtt and
verbose_json (`render`), and the server-sent events of `stream=true` (`TranscriptEvents`).

verbose_json is OpenAI's shape (task, language, duration, text, timed segments, and words
where `timestamp_granularities[]` asks) with `as2d`, our extension: each window's counts and
the run's stats. A stream sends OpenAI's `transcript.text.delta` per window with text, then
`transcript.text.done`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from starlette.responses import JSONResponse, PlainTextResponse, Response

from as2d.options import Options
from as2d.server.decoding import ApiError
from as2d.types import RunStats, Segment, WindowResult, Word
from as2d.writers import FileResult, to_srt, to_vtt


def file_result(
    name: str, options: Options, windows: list[WindowResult], stats: RunStats
) -> FileResult:
    """The run as the command line reports a file (`writers.py` renders srt and vtt)."""
    o = options
    return FileResult(name, o.method, o.target, o.drafter_used, windows, stats)


def render(result: FileResult, fmt: str, task: str, temperature: float) -> Response:
    """The answer in OpenAI's `response_format` `fmt`."""
    if fmt == "text":
        return PlainTextResponse(result.text + "\n")
    if fmt in ("srt", "vtt"):
        subtitles = to_srt if fmt == "srt" else to_vtt
        return PlainTextResponse(subtitles(result), media_type=f"text/{fmt}")
    if fmt == "json":
        return JSONResponse({"text": result.text})
    return JSONResponse(verbose_json(result, task, temperature))


def verbose_json(result: FileResult, task: str, temperature: float) -> dict[str, Any]:
    """OpenAI's verbose_json body, with `as2d`: each window's counts and the run's stats."""
    segments = [_segment(i, c, temperature) for i, c in enumerate(result.cues())]
    words = [_word(w) for s in result.segments for w in s.words]
    return {
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


def _segment(i: int, cue: Segment, temperature: float) -> dict[str, Any]:
    """OpenAI's segment object for the `i`th cue of the file."""
    return {"id": i, "seek": round(cue.start * 100), "start": cue.start, "end": cue.end,
            "text": cue.text, "temperature": temperature}  # fmt: skip


def _word(w: Word) -> dict[str, Any]:
    """OpenAI's word object (the word without its leading space)."""
    return {"word": w.word.strip(), "start": w.start, "end": w.end}


class TranscriptEvents:
    """The server-sent events of one streamed request, made from its job's events in order."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def window(self, w: WindowResult) -> list[str]:
        """A delta where the window has text."""
        if not w.text:
            return []
        delta = w.text if not self.texts else " " + w.text
        self.texts.append(w.text)
        return [_sse({"type": "transcript.text.delta", "delta": delta})]

    def done(self, stats: RunStats) -> str:
        """The whole text."""
        return _sse({"type": "transcript.text.done", "text": " ".join(self.texts)})

    def error(self, err: ApiError) -> str:
        return _sse({"type": "error", "error": err.message})


def _sse(obj: dict[str, Any]) -> str:
    """One server-sent event."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"
