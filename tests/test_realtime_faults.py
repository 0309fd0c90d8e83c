"""The realtime WebSocket (`server/realtime.py`) under faults a new user meets (issue 39): bad
settings and messages get `error` events in words and the session goes on, a commit after
server VAD's last item is no error, and limits hold to the byte."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from as2d.audio.load import load_audio
from as2d.eval.serve_load import Server, started_server
from as2d.server.realtime_events import MAX_APPEND_BYTES
from test_realtime import _append, _metric, _pcm_chunks, _session, _sessions_drop_to, _until

DATA = Path(__file__).parent / "data" / "asterisk" / "en"
CLIP = DATA / "demo-nogo.wav"
FAST = ["--target", "whisper-tiny.en", "--method", "target", "--language", "en"]
DONE = "conversation.item.input_audio_transcription.completed"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    store = tmp_path_factory.mktemp("drafts")
    with started_server([*FAST, "--store", str(store)]) as running:
        yield running.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"


def _error(ws: ClientConnection, message: str | bytes) -> dict[str, Any]:
    ws.send(message)
    return _until(ws, "error")[-1]["error"]


def _goes_on(ws: ClientConnection) -> None:
    """The session still answers: a settings update is acknowledged, without an error."""
    update = {"type": "session.update", "session": {"type": "transcription"}}
    ws.send(json.dumps(update))
    events = _until(ws, "session.updated", timeout=30)
    assert not any(e["type"] == "error" for e in events), events


def _update(transcription: dict[str, Any]) -> str:
    session = {"type": "transcription", "audio": {"input": {"transcription": transcription}}}
    return json.dumps({"type": "session.update", "session": session})


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (_update({"model": "whisper-1", "language": 5}), "invalid_session"),
        (_update({"model": "whisper-1", "language": ["en"]}), "invalid_session"),
        ("[" * 100_000 + "]" * 100_000, "invalid_json"),
        ('{"a": ' * 100_000 + "1" + "}" * 100_000, "invalid_json"),
    ],
)
def test_settings_of_the_wrong_type_and_deep_json_are_errors_in_words(server, message, code):
    with connect(server, max_size=None) as ws:
        _session(ws)
        error = _error(ws, message)
        assert (error["type"], error["code"]) == ("invalid_request_error", code)
        assert "Error" not in error["message"]  # words, not Python's exception
        _goes_on(ws)


def test_a_language_in_capitals_is_the_language(server):
    with connect(server, max_size=None) as ws:
        _session(ws)
        ws.send(_update({"model": "whisper-1", "language": "EN"}))
        updated = _until(ws, "session.updated")[-1]["session"]
        assert updated["audio"]["input"]["transcription"]["language"] == "en"


def test_an_append_over_the_limit_by_two_bytes_is_refused(server):
    with connect(server, max_size=None) as ws:
        _session(ws)
        for size, refused in ((MAX_APPEND_BYTES + 2, True), (MAX_APPEND_BYTES, False)):
            audio = base64.b64encode(bytes(size)).decode()
            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
            ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
            events = _until(ws, "input_audio_buffer.cleared")
            errors = [e["error"]["code"] for e in events if e["type"] == "error"]
            assert errors == (["audio_too_large"] if refused else []), size


def test_an_unknown_event_type_is_not_echoed_whole(server):
    with connect(server, max_size=None) as ws:
        _session(ws)
        error = _error(ws, json.dumps({"type": "x" * 200_000}))
        assert error["code"] == "unknown_event" and len(error["message"]) < 200
        _goes_on(ws)


def test_a_commit_after_server_vad_completed_the_last_item_is_no_error(server):
    """The README's client: audio, then a commit at the end; server VAD has often completed
    the last utterance by then (here always: the commit waits for its transcript)."""
    audio = np.concatenate([load_audio(str(CLIP)), np.zeros(32_000, np.float32)])
    with connect(server, max_size=None) as ws:
        _session(ws)
        for chunk in _pcm_chunks(audio):
            _append(ws, chunk)
        assert _until(ws, DONE)[-1]["transcript"]
        time.sleep(0.5)
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        _goes_on(ws)
        error = _error(ws, json.dumps({"type": "input_audio_buffer.commit"}))  # nothing at all
        assert error["code"] == "input_audio_buffer_commit_empty"


AS2D = ["--target", "whisper-tiny.en", "--method", "as2d", "--language", "en"]
LONG = Path(__file__).parent / "data" / "long_en.flac"  # 112 s


@pytest.fixture(scope="module")
def as2d_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """An as2d server: live sessions have a drafter process of their own, besides the HTTP
    requests' (`http_drafters`: the server's children before any session)."""
    store = tmp_path_factory.mktemp("drafts")
    with started_server([*AS2D, "--store", str(store)]) as running:
        running.http_drafters = set(running.children())  # type: ignore[attr-defined]
        yield running


def _ws(server: Server) -> str:
    return server.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("VmRSS:")).split()[1]) / 1024


def _sessions(server: Server) -> float:
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    return float(
        next(x for x in text.splitlines() if x.startswith("as2d_realtime_sessions ")).split()[-1]
    )


def test_audio_sent_at_once_holds_bounded_memory_and_ends_with_its_client(as2d_server):
    """Three clients send 112 s each at once and close: the server's memory grows by little
    more than the audio, and no session outlives its client by a second (issue 39, 3)."""
    chunks = _pcm_chunks(load_audio(str(LONG)))
    with connect(_ws(as2d_server), max_size=None) as ws:  # the live sessions' models loaded
        _session(ws)
    before = _rss_mb(as2d_server.process.pid)
    with ExitStack() as stack:
        sockets = [stack.enter_context(connect(_ws(as2d_server), max_size=None)) for _ in range(3)]
        for ws in sockets:
            _session(ws)
        for chunk in chunks:
            for ws in sockets:
                _append(ws, chunk)
        for ws in sockets:
            ws.close()
        closed = time.monotonic()
        while _sessions(as2d_server) > 0:
            assert time.monotonic() - closed < 1.5, "a session outlived its client"
            time.sleep(0.05)
    grown = _rss_mb(as2d_server.process.pid) - before
    assert grown < 200, grown


def _health(server: Server) -> dict[str, Any]:
    return json.loads(urllib.request.urlopen(server.url + "/health").read())


def _spoken(ws: ClientConnection, names: list[str]) -> list[dict[str, Any]]:
    """`names` spoken at 1.5 times real time, a second of silence after each (drafts take
    their time on a busy machine); every event until each utterance's transcript."""
    silence = np.zeros(16_000, np.float32)
    audio = np.concatenate([x for n in names for x in (load_audio(str(DATA / n)), silence)])
    events: list[dict[str, Any]] = []
    for chunk in _pcm_chunks(np.concatenate([audio, silence])):
        _append(ws, chunk)
        time.sleep(0.067)
        with suppress(TimeoutError):
            events.append(json.loads(ws.recv(timeout=0)))
    kinds = [e["type"] for e in events]
    while kinds.count(DONE) < kinds.count("input_audio_buffer.speech_started"):
        events += _until(ws, DONE)
        kinds = [e["type"] for e in events]
    return events


def _deltas(events: list[dict[str, Any]]) -> int:
    return sum(e["type"] == "conversation.item.input_audio_transcription.delta" for e in events)


def test_a_live_drafter_killed_mid_stream_is_replaced_and_reported(as2d_server):
    """The live sessions' drafter killed while a socket streams: /health says so, the rest
    of that stream and a new socket get drafts again (issue 39, 4)."""
    long = ["conf-usermenu.wav", "vm-msginstruct.wav"]  # 14 s each
    with connect(_ws(as2d_server), max_size=None) as ws:
        _session(ws)
        assert _deltas(_spoken(ws, long))
        live = set(as2d_server.children()) - as2d_server.http_drafters  # type: ignore[attr-defined]
        assert len(live) == 1 and _health(as2d_server)["live_drafter"] == "up"
        os.kill(live.pop(), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _health(as2d_server)["live_drafter"] != "lost":
            assert time.monotonic() < deadline, "/health says a dead drafter is up"
            time.sleep(0.1)
        assert _deltas(_spoken(ws, long))
    assert _health(as2d_server)["live_drafter"] == "up"
    with connect(_ws(as2d_server), max_size=None) as ws:
        _session(ws)
        assert _deltas(_spoken(ws, long))


@contextmanager
def _stuck(url: str) -> Iterator[threading.Thread]:
    """A client that never reads (a receive buffer of a few KB, one message queued at most,
    no keepalive of its own to give up on the server): it sends 112 s of speech at once and
    then updates whose answers it leaves unread; the thread sending blocks once the server
    stops reading it in turn."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    chunks = _pcm_chunks(load_audio(str(LONG)))
    update = json.dumps({"type": "session.update", "session": {"type": "transcription"}})
    with connect(url, sock=sock, max_queue=1, max_size=None, ping_interval=None) as ws:

        def flood() -> None:
            with suppress(ConnectionClosed, OSError):
                for chunk in chunks:
                    _append(ws, chunk)
                for _ in range(20_000):
                    ws.send(update)

        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        yield sender
        ws.close_socket()  # no closing handshake: it would wait on what was never read


def test_a_client_that_never_reads_is_dropped_by_the_keepalive(server):
    """Its answers fill the socket's buffers; the keepalive's ping goes unanswered, and the
    session ends within its interval and timeout (20 + 20 s), not never (issue 39, 2)."""
    _sessions_drop_to(server, 0)
    start = time.monotonic()
    with _stuck(server):
        while _metric(server, "as2d_realtime_sessions") > 0 or time.monotonic() - start < 1:
            assert time.monotonic() - start < 60, "a client that never reads keeps its session"
            time.sleep(0.5)
    with connect(server) as other:  # the server goes on
        _session(other)


def test_sigterm_with_a_client_that_never_reads_exits_in_seconds(tmp_path):
    """SIGTERM while a client that never reads holds a backlog of 112 s: its socket is
    dropped and its backlog with it; the server exits within 10 s, without a traceback
    (it waited out the graceful timeout, 300 s, then logged a CancelledError) (issue 39, 2)."""
    with started_server([*FAST, "--store", str(tmp_path)]) as running:
        with _stuck(_ws(running)) as sender:
            sender.join(timeout=20)  # until the server stops reading it
            running.process.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            running.process.wait(timeout=30)
            took = time.monotonic() - stopped
        stderr = running.process.stderr.read() if running.process.stderr else ""
    assert took < 10, took
    assert "Traceback" not in stderr and "CancelledError" not in stderr, stderr[-2000:]


def test_sigterm_finishes_the_open_utterance_first(tmp_path):
    """SIGTERM while a socket streams an utterance: it gets that utterance's transcript (or
    an error event for it), then close 1012; it got neither (issue 39, 7)."""
    audio = load_audio(str(LONG))[: 8 * 16_000]  # speech all through: an utterance open
    with started_server([*FAST, "--store", str(tmp_path)]) as running:
        with connect(_ws(running), max_size=None) as ws:
            _session(ws)
            before = []
            for chunk in _pcm_chunks(audio):  # at twice real time
                _append(ws, chunk)
                time.sleep(0.05)
                with suppress(TimeoutError):
                    before.append(json.loads(ws.recv(timeout=0)))
            with suppress(TimeoutError):
                while True:
                    before.append(json.loads(ws.recv(timeout=0.2)))
            started = [e["item_id"] for e in before if e["type"].endswith("speech_started")][-1]
            assert not any(e.get("item_id") == started and e["type"] == DONE for e in before)
            running.process.send_signal(signal.SIGTERM)
            events = []
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    events.append(json.loads(ws.recv(timeout=30)))
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
        running.process.wait(timeout=30)
    ended = [e for e in events if e.get("item_id") == started and e["type"] == DONE]
    errors = [e["error"]["code"] for e in events if e["type"] == "error"]
    assert (ended and ended[0]["transcript"]) or errors == ["server_stopping"], events
