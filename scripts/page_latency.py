"""The page's live delay against the WebSocket client's, on one server and one recording:
turn by turn, the recording is played into the page as a headless Chromium's microphone
(`tests/browser.py`) and streamed by `scripts/realtime_bench.py`'s client, both in real time;
per utterance, the delay from `speech_stopped` to the final transcript as each client's clock
sees it. Medians over every utterance of every turn.

    as2d serve --port 8000 &
    .venv/bin/python scripts/page_latency.py http://127.0.0.1:8000 talk.wav --turns 3 [--key KEY]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts")]

from realtime_bench import stream, utterances  # noqa: E402 (scripts/)

from as2d.audio.load import load_audio  # noqa: E402
from browser import Browser, find_chromium  # noqa: E402 (tests/)


def page_delays(chromium: str, url: str, wav: Path, key: str | None) -> tuple[list[float], list]:
    """One turn of the page: its finals' delays and texts."""
    browser = Browser(chromium, wav)
    try:
        browser.open(url + "/")
        if key:
            browser.js(f"sessionStorage.setItem('as2d-api-key', {json.dumps(key)})")
            browser.open(url + "/")
        browser.wait("document.getElementById('language').options.length > 1", 30)
        browser.click("#start")
        length = load_audio(str(wav)).size / 16_000
        time.sleep(length)  # the recording plays once, then silence: its last endpoint
        browser.wait("document.querySelectorAll('.utterance.provisional').length === 0", 60)
        seen = browser.js("window.as2dPage")
        browser.click("#stop")
    finally:
        browser.close()
    finals = seen["finals"]
    return [f["delay"] for f in finals], [f["text"] for f in finals]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("wav", type=Path, help="16-bit WAV, the page's microphone")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--key", default=None)
    args = parser.parse_args()
    chromium = find_chromium()
    if chromium is None:
        sys.exit("page_latency: no Chromium found")
    if args.key:  # the socket client sends it as a header
        import realtime_bench

        realtime_bench.connect = _with_key(realtime_bench.connect, args.key)  # type: ignore
    audio = load_audio(str(args.wav))
    page, socket, texts = [], [], {}
    for turn in range(args.turns):
        delays, texts["page"] = page_delays(chromium, args.url, args.wav, args.key)
        page += delays
        rows = utterances(stream(args.url, audio, None))
        socket += [r["final_s"] for r in rows]
        texts["socket"] = [r["transcript"] for r in rows]
        print(f"turn {turn + 1}: page {delays}, socket {[r['final_s'] for r in rows]}")
    report = {
        "page_median_s": statistics.median(page),
        "socket_median_s": statistics.median(socket),
        "utterances": [len(page), len(socket)],
        "same_finals": texts["page"] == texts["socket"],
    }
    print(json.dumps(report, indent=1))
    if not report["same_finals"]:  # the last turn's, side by side
        for page_text, socket_text in itertools.zip_longest(texts["page"], texts["socket"]):
            print(f"page:   {page_text}\nsocket: {socket_text}")
    return 0


def _with_key(connect, key: str):  # type: ignore[no-untyped-def]
    """`websockets`' connect, sending the key as OpenAI's clients do."""

    def keyed(url, **kwargs):  # type: ignore[no-untyped-def]
        return connect(url, additional_headers={"Authorization": f"Bearer {key}"}, **kwargs)

    return keyed


if __name__ == "__main__":
    sys.exit(main())
