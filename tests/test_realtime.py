"""`as2d serve`'s realtime WebSocket (`server/realtime.py`) in a subprocess on 127.0.0.1,
spoken to with `websockets` (and the official `openai` client): the transcripts of a live
stream equal target-only's windows of the same 16 kHz audio, bad events are answered with
`error` events, and a server at its session limit refuses one more."""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soxr
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from as2d.api import Transcriber
from as2d.audio.load import load_audio
from as2d.audio.stream import Pcm16Resampler
from as2d.eval.serve_load import started_server
from as2d.server.realtime_events import OPENAI_RATE, caption_delta
from as2d.types import SAMPLE_RATE

DATA = Path(__file__).parent / "data" / "asterisk" / "en"
CLIPS = ["demo-nogo.wav", "tt-allbusy.wav", "dir-intro.wav"]
CHUNK = OPENAI_RATE // 10  # 100 ms appends
LIMIT = 2  # --realtime-sessions of the test server
FAST = ["--target", "whisper-tiny.en", "--method", "target", "--language", "en"]

pytestmark = pytest.mark.slow


def test_a_delta_is_the_new_part_of_a_caption_that_extends_the_last():
    assert caption_delta("", "Hello") == "Hello"
    assert caption_delta("Hello", "Hello world") == " world"
    assert caption_delta("Hello word", "Hello world") is None  # a revision: not sent
    assert caption_delta("Hello", "Hello") is None


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    store = tmp_path_factory.mktemp("drafts")
    args = [*FAST, "--realtime-sessions", str(LIMIT), "--store", str(store)]
    with started_server(args) as running:
        yield running.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"


def _pcm_chunks(audio16k: np.ndarray) -> list[bytes]:
    """`audio16k` as a client sends it: 24 kHz PCM16, in 100 ms appends."""
    audio24k = soxr.resample(audio16k, SAMPLE_RATE, OPENAI_RATE)
    pcm = np.clip(np.round(audio24k * 32767), -32768, 32767).astype("<i2")
    return [pcm[i : i + CHUNK].tobytes() for i in range(0, len(pcm), CHUNK)]


def _heard(chunks: list[bytes], committed: bool = False) -> np.ndarray:
    """The 16 kHz samples the server makes of `chunks` (its own conversion); `committed`: and
    of the resampler's tail, which a commit flushes."""
    resampler = Pcm16Resampler(OPENAI_RATE)
    blocks = [resampler.feed(c) for c in chunks]
    tail = [resampler.feed(b"", last=True)] if committed else []
    return np.concatenate([*blocks, *tail])


@pytest.fixture(scope="module")
def recording() -> list[bytes]:
    """The clips with a second of silence after each, then two more (the last endpoint)."""
    silence = np.zeros(SAMPLE_RATE, dtype=np.float32)
    parts = [part for name in CLIPS for part in (load_audio(str(DATA / name)), silence)]
    return _pcm_chunks(np.concatenate([*parts, silence, silence]))


def _append(ws: ClientConnection, chunk: bytes) -> None:
    ws.send(
        json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()})
    )


def _until(ws: ClientConnection, kind: str, timeout: float = 120) -> list[dict[str, Any]]:
    """Events received up to and with the first of type `kind`."""
    events, deadline = [], time.monotonic() + timeout
    while True:
        event = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
        assert {"event_id", "type"} <= set(event)
        events.append(event)
        if event["type"] == kind:
            return events


def _session(ws: ClientConnection, endpoint_ms: int = 600) -> None:
    assert json.loads(ws.recv(timeout=60))["type"] == "session.created"
    turns = {"type": "server_vad", "silence_duration_ms": endpoint_ms}
    audio_format = {"type": "audio/pcm", "rate": OPENAI_RATE}
    transcription = {"model": "whisper-1", "language": "en"}
    audio_input = {"format": audio_format, "transcription": transcription, "turn_detection": turns}
    update = {"type": "transcription", "audio": {"input": audio_input}}
    ws.send(json.dumps({"type": "session.update", "session": update}))
    updated = _until(ws, "session.updated")[-1]
    assert updated["session"]["audio"]["input"]["turn_detection"] == turns


@pytest.fixture(scope="module")
def streamed(server, recording) -> list[dict[str, Any]]:
    """Every event of the recording streamed faster than real time, until the last item."""
    expected = len(_reference(recording))
    events: list[dict[str, Any]] = []
    with connect(server, max_size=None, max_queue=None) as ws:
        _session(ws)
        for chunk in recording:
            _append(ws, chunk)
        done = "conversation.item.input_audio_transcription.completed"
        while sum(e["type"] == done for e in events) < expected:
            events += _until(ws, done)
    return events


def _reference(chunks: list[bytes], committed: bool = False) -> list[str]:
    """Target-only's window texts of the samples the server heard, as `as2d transcribe
    --method target --endpoint-ms 600` cuts them."""
    audio = _heard(chunks, committed)
    with Transcriber(
        method="target", endpoint_ms=600, target="whisper-tiny.en", language="en"
    ) as t:
        return [w.text for w in t.transcribe(audio)]


def test_a_live_stream_s_transcripts_equal_target_only_window_by_window(streamed, recording):
    completed = [
        e["transcript"] for e in streamed
        if e["type"] == "conversation.item.input_audio_transcription.completed"
    ]  # fmt: skip
    expected = _reference(recording)
    assert len(expected) >= len(CLIPS) and all(expected)
    assert completed == expected


def test_each_item_is_started_stopped_committed_then_completed(streamed):
    kinds = [
        "input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed", "conversation.item.input_audio_transcription.completed",
    ]  # fmt: skip
    items = list(dict.fromkeys(e["item_id"] for e in streamed if "item_id" in e))
    assert items == [f"item_{n:04d}" for n in range(1, len(items) + 1)]
    previous = None
    for item in items:
        of_item = [e for e in streamed if e.get("item_id") == item]
        assert [e["type"] for e in of_item if e["type"] in kinds] == kinds
        started, stopped, committed, completed = (
            next(e for e in of_item if e["type"] == k) for k in kinds
        )
        assert started["audio_start_ms"] < stopped["audio_end_ms"]
        assert committed["previous_item_id"] == previous
        assert completed["content_index"] == 0
        previous = item
    first = [streamed.index(next(e for e in streamed if e.get("item_id") == i)) for i in items]
    assert first == sorted(first)


def _metric(server: str, name: str) -> float:
    url = server.replace("ws://", "http://").split("/v1/")[0] + "/metrics"
    text = urllib.request.urlopen(url).read().decode()
    return float(
        next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " "))
    )


def _sessions_drop_to(server: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while _metric(server, "as2d_realtime_sessions") != count:
        assert time.monotonic() < deadline, "a realtime session was left behind"
        time.sleep(0.1)


def _check_commit(ws: ClientConnection, chunks: list[bytes]) -> None:
    """`chunks` ended by a manual commit are transcribed as target-only's windows of them."""
    expected = _reference(chunks, committed=True)
    for chunk in chunks:
        _append(ws, chunk)
    ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
    done = "conversation.item.input_audio_transcription.completed"
    events: list[dict[str, Any]] = []
    while sum(e["type"] == done for e in events) < len(expected):
        events += _until(ws, done)
    assert [e["type"] for e in events].count("input_audio_buffer.committed") == len(expected)
    assert [e["transcript"] for e in events if e["type"] == done] == expected


BAD = [
    ("not json", "invalid_json"),
    (json.dumps([1, 2]), "invalid_json"),
    (json.dumps({"type": "response.create"}), "unknown_event"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "%%%"}), "invalid_base64"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "AAAA"}), "invalid_audio"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": 7}), "invalid_audio"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "A" * (2 << 20)}),
     "audio_too_large"),
    (json.dumps({"type": "session.update", "session": {"audio": "x"}}), "invalid_session"),
    (json.dumps({"type": "session.update", "session": {"turn_detection": None}}),
     "unsupported_turn_detection"),
    (json.dumps({"type": "session.update", "session": {"input_audio_transcription":
     {"model": "whisper-1", "language": "fr"}}}), "invalid_language"),
    (json.dumps({"type": "input_audio_buffer.commit"}), "input_audio_buffer_commit_empty"),
    (b"\x00\x01", "binary_not_supported"),
]  # fmt: skip


def test_bad_events_get_errors_and_the_session_goes_on(server):
    clip = _pcm_chunks(np.concatenate([load_audio(str(DATA / CLIPS[0])), np.zeros(8000, "f4")]))
    with connect(server, max_size=None) as ws:
        _session(ws)
        for message, code in BAD:
            ws.send(message)
            error = _until(ws, "error")[-1]["error"]
            assert (error["type"], error["code"]) == ("invalid_request_error", code), message
        _check_commit(ws, clip)


def test_a_client_gone_mid_utterance_leaves_nothing_behind(server):
    clip = _pcm_chunks(load_audio(str(DATA / CLIPS[1])))
    with connect(server) as ws:
        _session(ws)
        for chunk in clip[: len(clip) // 2]:
            _append(ws, chunk)
        assert _until(ws, "input_audio_buffer.speech_started")
    _sessions_drop_to(server, 0)
    with connect(server) as ws:  # the server goes on
        _session(ws)
        _check_commit(ws, clip)
    _sessions_drop_to(server, 0)


def test_one_session_over_the_limit_is_refused_with_an_error(server):
    with ExitStack() as stack:
        for _ in range(LIMIT):
            ws = stack.enter_context(connect(server))
            assert json.loads(ws.recv(timeout=60))["type"] == "session.created"
        with connect(server) as extra:
            error = json.loads(extra.recv(timeout=60))
            assert (error["type"], error["error"]["code"]) == ("error", "session_limit")
            with pytest.raises(ConnectionClosed, match="1013"):
                extra.recv(timeout=10)
    _sessions_drop_to(server, 0)
    with connect(server) as ws:  # a place is free again
        assert json.loads(ws.recv(timeout=60))["type"] == "session.created"


def test_the_openai_client_transcribes_through_the_realtime_api(server):
    openai = pytest.importorskip("openai")
    base = server.replace("ws://", "http://").split("/v1/")[0] + "/v1"
    client = openai.OpenAI(base_url=base, api_key="none", max_retries=0)
    clip = _pcm_chunks(np.concatenate([load_audio(str(DATA / CLIPS[0])), np.zeros(8000, "f4")]))
    expected = _reference(clip, committed=True)
    completed: list[str] = []
    with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        conn.session.update(session={"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": OPENAI_RATE},
            "transcription": {"model": "whisper-1", "language": "en"}}}})  # fmt: skip
        for chunk in clip:
            conn.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
        conn.input_audio_buffer.commit()
        for event in conn:
            assert event.type != "error", event
            if event.type == "conversation.item.input_audio_transcription.completed":
                completed.append(event.transcript)
                if len(completed) == len(expected):
                    break
    assert completed == expected


def test_an_as2d_server_s_live_stream_has_deltas_and_the_same_transcripts(tmp_path, recording):
    """With as2d, live sessions have a drafter of their own: the utterance's drafts come as
    deltas while it is spoken, pauses' windows are decoded early, and the transcripts are
    target-only's all the same. Streamed at twice real time, so that drafts have time to land."""
    args = ["--target", "whisper-tiny.en", "--method", "as2d", "--language", "en"]
    expected = _reference(recording)
    done = "conversation.item.input_audio_transcription.completed"
    events: list[dict[str, Any]] = []
    with started_server([*args, "--store", str(tmp_path)]) as running:
        url = running.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
        with connect(url, max_size=None, max_queue=None) as ws:
            _session(ws)
            for chunk in recording:
                _append(ws, chunk)
                time.sleep(0.05)
            while sum(e["type"] == done for e in events) < len(expected):
                events += _until(ws, done)
    assert [e["transcript"] for e in events if e["type"] == done] == expected
    assert any(e["type"] == "conversation.item.input_audio_transcription.delta" for e in events)
