"""OpenAI's answers to a transcription, rendered from its windows: json, text, srt, vtt and
verbose_json (`render`), and the server-sent events of `stream=true` (`TranscriptEvents`).

verbose_json is OpenAI's shape (task, language, duration, text, timed segments, and words
where `timestamp_granularities[]` asks) with `as2d`, our extension: each window's counts and
the run's stats. A stream sends OpenAI's `transcript.text.delta` per window with text, then
`transcript.text.done`; a streamed verbose_json adds ours (OpenAI clients ignore a type they
do not know): `as2d.transcript.window` per window decided, with its segments and how much of
the audio is decided, and the done event carries the verbose_json body under `as2d`, the very
body the unstreamed request answers.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from starlette.responses import JSONResponse, PlainTextResponse, Response

from as2d.options import Options
from as2d.server.decoding import ApiError, Job
from as2d.types import RunStats, Segment, WindowResult, Word
from as2d.writers import FileResult, to_srt, to_vtt, window_cues

WINDOW_EVENT = "as2d.transcript.window"  # ours: a window's segments and the progress


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
    """The server-sent events of one streamed request, made from its job's events in order.

    Example, streamed verbose_json (a window with text, then the end):
        data: {"type": "transcript.text.delta", "delta": "Hello there."}
        data: {"type": "as2d.transcript.window", "window": 0, "segments": [...],
               "done_s": 4.2, "total_s": 10.0}
        data: {"type": "transcript.text.done", "text": "Hello there.", "as2d":
               {"verbose_json": {...}}}
    """

    def __init__(self, job: Job, fmt: str, options: Options, total_s: float | None) -> None:
        self.job, self.options = job, options
        self.verbose = fmt == "verbose_json"
        self.total_s = total_s  # the recording's length (verbose_json: the progress)
        self.windows: list[WindowResult] = []
        self.texts: list[str] = []
        self.segments = 0  # segments sent: the next one's id, as verbose_json numbers them

    def window(self, w: WindowResult) -> list[str]:
        """A delta where the window has text; streaming verbose_json, ours besides."""
        self.windows.append(w)
        events: list[str] = []
        if w.text:
            delta = w.text if not self.texts else " " + w.text
            self.texts.append(w.text)
            events.append(_sse({"type": "transcript.text.delta", "delta": delta}))
        if self.verbose:
            events.append(_sse(self._window_event(w)))
        return events

    def done(self, stats: RunStats) -> str:
        """The whole text; streaming verbose_json, the whole body besides."""
        event: dict[str, Any] = {"type": "transcript.text.done", "text": " ".join(self.texts)}
        if self.verbose:
            result = file_result(self.job.name, self.options, self.windows, stats)
            body = verbose_json(result, self.job.task, self.options.temperature)
            event["as2d"] = {"verbose_json": body}
        return _sse(event)

    def error(self, err: ApiError) -> str:
        return _sse({"type": "error", "error": err.message})

    def _window_event(self, w: WindowResult) -> dict[str, Any]:
        """Ours: the window's segments, numbered and shaped as verbose_json's (with their
        words where they were asked for), and the audio decided so far."""
        cues = window_cues(w, self.job.timestamps != "none")
        segments = []
        for i, cue in enumerate(cues, start=self.segments):
            segment = _segment(i, cue, self.options.temperature)
            if self.job.timestamps == "word":
                segment["words"] = [_word(word) for word in cue.words]
            segments.append(segment)
        self.segments += len(cues)
        return {"type": WINDOW_EVENT, "window": w.index, "segments": segments,
                "done_s": w.end, "total_s": self.total_s}  # fmt: skip


def _sse(obj: dict[str, Any]) -> str:
    """One server-sent event."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"
