"""The page `as2d serve` shows at `/` (`server/page.py`, `server/static/`), in a real headless
Chromium (`browser.py`) whose microphone is a recording, against real servers with the
bundled models: its live finals equal `as2d transcribe --endpoint-ms 600 --method target`
window for window (as2d and target-only servers), with provisional text before each final on
as2d; a file dropped on it shows the CLI's text and downloads the CLI's srt and vtt; a wrong
key, a foreign origin and a busy server each show their line. Screenshots of a live session
and of a file land in `test-out/page/`. Without a browser these tests fail, saying so."""

from __future__ import annotations

import base64
import functools
import http.server
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import soxr
from websockets.sync.client import connect

from as2d.audio.load import load_audio
from as2d.eval.serve_load import Server, free_port, started_server
from as2d.server import page
from as2d.types import SAMPLE_RATE
from browser import MISSING, Browser, find_chromium

DATA = Path(__file__).parent / "data" / "asterisk" / "en"
LIVE_CLIPS = ["dir-instr.wav", "vm-newuser.wav"]  # the microphone: these, a pause after each
LANGUAGE = "en"  # chosen on the page: English drafts (tiny.en); the CLI detects it
FILE_CLIP = DATA / "conf-usermenu.wav"
WARM_CLIP = DATA / "queue-periodic-announce.wav"  # the keyed server's first live session
OUT = Path(__file__).parents[1] / "test-out" / "page"  # screenshots and the delays measured
KEY = "page-test-key"
ASKED = "This server needs an API key (--api-key): enter it above."  # the page's first line
LIVE_WAIT_S = 300  # the recording plays in real time (~17 s); a loaded machine is slow
SESSIONS = 1  # --realtime-sessions of the keyed server: one more socket finds it busy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        pytest.fail(MISSING, pytrace=False)
    return path


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The microphone's recording: the clips with 1.5 s of silence after each (16 kHz WAV)."""
    pause = np.zeros(int(1.5 * SAMPLE_RATE), np.float32)
    parts = [part for name in LIVE_CLIPS for part in (load_audio(str(DATA / name)), pause)]
    path = tmp_path_factory.mktemp("mic") / "live.wav"
    sf.write(path, np.concatenate(parts), SAMPLE_RATE, subtype="PCM_16")
    return path


def _cli(*args: str) -> str:
    """`as2d transcribe ARGS`'s standard output."""
    command = [sys.executable, "-m", "as2d.cli", "transcribe", "--no-progress", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def expected(recording: Path) -> list[str]:
    """Target-only's window texts, as the CLI cuts the recording live."""
    result = json.loads(_cli(str(recording), "--endpoint-ms", "600", "--method", "target",
                             "--format", "json"))  # fmt: skip
    return [w["text"] for w in result["windows"]]


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """An as2d server (the default models) that needs `KEY`."""
    store = tmp_path_factory.mktemp("drafts")
    args = ["--api-key", KEY, "--realtime-sessions", str(SESSIONS), "--store", str(store)]
    with started_server(args) as server:
        _warm(server, {"Authorization": f"Bearer {KEY}"})
        yield server


def _warm(server: Server, headers: dict[str, str]) -> None:
    """One utterance over the socket before the page's, in real time as a microphone sends
    it: the live sessions' drafter process starts with the first session (as
    `scripts/realtime_bench.py` leaves its first call out). Not faster than real time: a
    burst (a whole clip in one append) left that drafter idle for the next session's first
    utterance."""
    audio = np.concatenate([load_audio(str(WARM_CLIP)), np.zeros(SAMPLE_RATE, np.float32)])
    pcm = (np.clip(soxr.resample(audio, SAMPLE_RATE, 24_000), -1, 1) * 32767).astype("<i2")
    url = server.url.replace("http", "ws") + "/v1/realtime?intent=transcription"
    with connect(url, additional_headers=headers, max_size=None) as ws:
        session = {"input_audio_transcription": {"model": "whisper-1", "language": LANGUAGE}}
        ws.send(json.dumps({"type": "transcription_session.update", "session": session}))
        for at in range(0, len(pcm), 2400):  # 100 ms appends, every 100 ms
            chunk = base64.b64encode(pcm[at : at + 2400].tobytes()).decode()
            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            time.sleep(0.1)
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        quiet = 300.0  # then, after a final, 3 s without an event: it was the last
        while True:
            try:
                kind = json.loads(ws.recv(timeout=quiet))["type"]
            except TimeoutError:
                return
            if kind == "conversation.item.input_audio_transcription.completed":
                quiet = 3.0


@pytest.fixture(scope="module")
def target_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A target-only server without a key."""
    store = tmp_path_factory.mktemp("drafts")
    with started_server(["--method", "target", "--store", str(store)]) as server:
        yield server


def _open(browser: Browser, url: str, key: str | None, language: str = "") -> None:
    """The page at `url`, with `key` entered where it asks for one, and `language` chosen
    ("": auto)."""
    browser.open(url)
    if key is not None:
        browser.wait("!document.getElementById('key-form').hidden", 30)
        browser.js(f"document.getElementById('key').value = {json.dumps(key)}")
        browser.click("#key-form button")
    browser.wait("document.getElementById('language').options.length > 1", 30)
    browser.js(f"document.getElementById('language').value = {json.dumps(language)}")


BOTH_SHOWN = (
    "document.querySelector('.utterance.final') !== null && "
    "document.querySelector('.utterance.provisional .text')?.textContent.length > 0"
)  # a final caption and a provisional one on the page: the moment to show


def _live(browser: Browser, count: int, name: str) -> dict[str, Any]:
    """Start, `count` finals, Stop: what the page saw. The screenshot is taken the first time
    a final and a provisional caption are both on the page, else after the last final."""
    browser.click("#start")
    deadline, shot = time.monotonic() + LIVE_WAIT_S, False
    while browser.js("window.as2dPage.finals.length") < count:
        if not shot and browser.js(BOTH_SHOWN):
            browser.screenshot(OUT / f"live-{name}.png")
            shot = True
        if time.monotonic() > deadline:
            raise AssertionError(f"the page's finals by then: {browser.js('window.as2dPage')}")
        time.sleep(0.1)
    if not shot:
        browser.screenshot(OUT / f"live-{name}.png")
    browser.click("#stop")
    browser.wait("document.getElementById('start').disabled === false", 30)
    return dict(browser.js("window.as2dPage"))


@pytest.mark.parametrize("method", ["as2d", "target"])
def test_live_finals_equal_target_only_window_for_window(
    method: str, chromium: str, recording: Path, expected: list[str], request: Any
) -> None:
    server: Server = request.getfixturevalue("keyed" if method == "as2d" else "target_only")
    browser = Browser(chromium, recording)
    try:
        _open(browser, server.url + "/", KEY if method == "as2d" else None, LANGUAGE)
        mode = browser.text("#server")
        assert ("live: as2d" if method == "as2d" else "live: target-only") in mode
        seen = _live(browser, len(expected), method)
    finally:
        browser.close()
    assert [f["text"] for f in seen["finals"]] == expected
    assert [e for e in seen["errors"] if e != ASKED] == []
    drafted = [f["item"] for f in seen["finals"] if _drafted(seen["items"][f["item"]])]
    shown = [f["item"] for f in seen["finals"] if seen["provisional"].get(f["item"])]
    assert shown == drafted  # the drafter's text, where the server sent it, before the final
    assert bool(drafted) == (method == "as2d")  # as2d drafts, target-only does not
    _record_delays(method, [f["delay"] for f in seen["finals"]], len(drafted))


def _drafted(events: list[str]) -> bool:
    """Whether the server sent provisional text of an item before its final."""
    done = events.index("conversation.item.input_audio_transcription.completed")
    return any(kind.endswith(("delta", "provisional")) for kind in events[:done])


def _record_delays(method: str, delays: list[float], drafted: int) -> None:
    """The delays from speech_stopped to the final on the page, kept for the README, and how
    many finals had provisional text before them."""
    OUT.mkdir(parents=True, exist_ok=True)
    summary = {"delays_s": delays, "median_s": statistics.median(delays), "drafted": drafted}
    (OUT / f"delays-{method}.json").write_text(json.dumps(summary, indent=1))
    print(f"page, {method} server: speech end to final, median {summary['median_s']:.2f} s")


def test_a_file_shows_the_cli_text_and_downloads_its_srt_and_vtt(
    chromium: str, keyed: Server
) -> None:
    browser = Browser(chromium)
    try:
        _open(browser, keyed.url + "/", KEY)
        browser.choose_file("#file", FILE_CLIP)
        seen = browser.wait("window.as2dPage.file", 300)
        first = browser.js(
            "const w = document.querySelectorAll('.word')[3];"
            "const p = document.getElementById('player');"
            "p.currentTime = Number(w.dataset.start) + 0.01;"
            "new Promise(r => p.addEventListener('seeked', () => setTimeout(() => r("
            "document.querySelector('.word.now')?.textContent), 50), {once: true}))"
        )
        browser.screenshot(OUT / "file.png")
        shown = browser.js(
            "[...document.querySelectorAll('.segment > span:last-child')]"
            ".map(s => s.textContent).join(' ')"
        )
    finally:
        browser.close()
    text = _cli(str(FILE_CLIP)).strip()
    assert seen["progress"] and 0 < seen["progress"][-1] <= 1  # the decoding's, as it came
    assert seen["downloads"]["txt"].strip() == text
    assert shown.split() == text.split()
    assert first and first in text  # the word at the player's time is marked
    for fmt in ("srt", "vtt"):
        assert seen["downloads"][fmt] == _cli(str(FILE_CLIP), "--format", fmt,
                                              "--timestamps", "word")  # fmt: skip


def test_a_wrong_key_shows_its_line_over_http_and_the_socket(chromium: str, keyed: Server):
    browser = Browser(chromium)
    try:
        browser.open(keyed.url + "/")
        browser.js("sessionStorage.setItem('as2d-api-key', 'not-the-key')")
        browser.open(keyed.url + "/")  # as a tab that kept an old key
        assert _error_line(browser, 0) == "The API key is wrong: enter it above."
        browser.click("#start")
        assert _error_line(browser, 1) == "The server refused the key: the API key is wrong"
        assert browser.js("document.getElementById('key-form').hidden") is False
    finally:
        browser.close()


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[str]:
    """The page's files served from another origin (another port), as a copy would be."""
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(page.STATIC.parent)
    )
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_a_foreign_origin_is_refused_with_its_line(chromium: str, keyed: Server, elsewhere: str):
    browser = Browser(chromium)
    try:
        url = f"{elsewhere}/static/index.html?server={keyed.url}"
        browser.open(url)
        browser.js(f"sessionStorage.setItem('as2d-api-key', {json.dumps(KEY)})")
        browser.open(url)  # the right key: only the origin is wrong
        browser.click("#start")
        line = _error_line(browser, 0)
    finally:
        browser.close()
    assert line == (
        f"The server refused this page: this server does not serve pages from {elsewhere} "
        "(start it with --allow-origin to allow them)."
    )


@contextmanager
def _held_session(server: Server) -> Iterator[None]:
    """The server's one realtime session, taken by a client that is not the page (the page's
    last session may take a moment to be let go)."""
    url = server.url.replace("http", "ws") + "/v1/realtime?intent=transcription"
    deadline = time.monotonic() + 30
    while True:
        with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            if json.loads(ws.recv(timeout=60))["type"] == "session.created":
                yield
                return
        assert time.monotonic() < deadline, "the server's realtime session stayed taken"
        time.sleep(0.5)


def _error_line(browser: Browser, before: int) -> str:
    """The page's error line, once it says more than its first `before` lines."""
    browser.wait(f"window.as2dPage.errors.length > {before}", 30)
    return str(browser.js("document.getElementById('error').textContent"))


def test_a_busy_server_shows_its_line(chromium: str, keyed: Server) -> None:
    browser = Browser(chromium)
    try:
        with _held_session(keyed):
            _open(browser, keyed.url + "/", KEY)
            browser.click("#start")
            line = _error_line(browser, 1)  # after the page's request for the key
    finally:
        browser.close()
    assert line == (
        f"The server is busy: {SESSIONS} realtime sessions are live (--realtime-sessions). "
        "Try again later."
    )


def test_a_file_the_server_cannot_read_shows_its_line(chromium: str, keyed: Server) -> None:
    browser = Browser(chromium)
    try:
        _open(browser, keyed.url + "/", KEY)
        browser.choose_file("#file", DATA / "transcripts.txt")
        line = _error_line(browser, 1)  # after the page's request for the key
    finally:
        browser.close()
    assert line.startswith("transcripts.txt: ") and len(line.splitlines()) == 1
