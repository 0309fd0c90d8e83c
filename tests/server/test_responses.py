"""`server/responses.py` on windows made by hand (no model): a streamed verbose_json numbers
each window's segments as the whole body does, says how much audio is decided, and ends with
the body the unstreamed request answers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from as2d.options import Options
from as2d.server.decoding import Job
from as2d.server.responses import TranscriptEvents, file_result, verbose_json
from as2d.types import RunStats, Segment, WindowResult, Word


def _window(
    index: int, start: float, end: float, said: list[tuple[float, float, str]]
) -> WindowResult:
    """A window whose segments are `said` (start, end, text), each word timed as its segment."""
    segments = [
        Segment(s, e, text, [Word(f" {word}", s, e, 0.9) for word in text.split()])
        for s, e, text in said
    ]
    text = " ".join(text for _, _, text in said)
    return WindowResult(index, start, end, text, [1, 2, 3], 0.1, 0.2, segments=segments)


def _data(event: str) -> dict[str, Any]:
    assert event.startswith("data: ") and event.endswith("\n\n")
    return json.loads(event.removeprefix("data: "))


def test_a_streamed_verbose_json_numbers_each_window_s_segments_and_ends_with_the_body():
    windows = [
        _window(0, 0.0, 10.0, [(0.5, 4.0, "Hello there."), (4.5, 9.0, "How are you?")]),
        _window(1, 10.0, 20.0, []),  # silence: no text, no segment, still decided
        _window(2, 20.0, 28.0, [(20.5, 27.0, "Fine, thanks.")]),
    ]
    stats = RunStats(wall_s=1.0, audio_s=30.0, tokens=9, tokens_per_s=9.0, rtf=0.03, language="en")
    options = Options(method="target")
    loop = asyncio.new_event_loop()
    try:
        job = Job(Path("talk.wav"), "talk.wav", "transcribe", "en", loop, timestamps="word")
        events = TranscriptEvents(job, "verbose_json", options, total_s=30.0)
        sent = [_data(event) for w in windows for event in events.window(w)]
        done = _data(events.done(stats))
    finally:
        loop.close()
    body = verbose_json(
        file_result("talk.wav", options, windows, stats), "transcribe", options.temperature
    )
    assert done["as2d"]["verbose_json"] == body
    deltas = [e["delta"] for e in sent if e["type"] == "transcript.text.delta"]
    assert (
        done["text"] == "".join(deltas) == body["text"] == "Hello there. How are you? Fine, thanks."
    )
    ours = [e for e in sent if e["type"] == "as2d.transcript.window"]
    assert [(e["window"], e["done_s"], e["total_s"]) for e in ours] == [
        (0, 10.0, 30.0), (1, 20.0, 30.0), (2, 28.0, 30.0)
    ]  # fmt: skip
    segments = [s for e in ours for s in e["segments"]]
    assert [s["id"] for s in segments] == [0, 1, 2]
    assert [{k: v for k, v in s.items() if k != "words"} for s in segments] == body["segments"]
    assert [word for s in segments for word in s["words"]] == body["words"]
    assert body["words"][0] == {"word": "Hello", "start": 0.5, "end": 4.0}


def test_a_streamed_json_sends_openai_s_events_only():
    loop = asyncio.new_event_loop()
    try:
        job = Job(Path("talk.wav"), "talk.wav", "transcribe", "en", loop)
        events = TranscriptEvents(job, "json", Options(method="target"), total_s=None)
        sent = [_data(e) for e in events.window(_window(0, 0.0, 5.0, [(0.0, 4.0, "Hi.")]))]
        done = _data(events.done(RunStats(1.0, 5.0, 3, 3.0, 0.2)))
    finally:
        loop.close()
    assert sent == [{"type": "transcript.text.delta", "delta": "Hi."}]
    assert done == {"type": "transcript.text.done", "text": "Hi."}
