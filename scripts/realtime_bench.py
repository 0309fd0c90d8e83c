"""Live latency over `as2d serve`'s realtime WebSocket: each recording of a manifest streamed
in real time as OpenAI's realtime clients do (24 kHz PCM16 appends of 100 ms, then a second
of silence and a commit), to a server of each method in turn.

    .venv/bin/python scripts/realtime_bench.py data-cache/hard/manifest.jsonl --subset short \\
        --limit 30 --out bench-out/realtime [--methods target,as2d]

Per utterance, from the client's clock: the first delta after its speech started, the
completed transcript after speech_stopped and after its window's end; the transcripts of
the methods are compared.
"""

from __future__ import annotations

import argparse
import base64
import json
import shlex
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import soxr
from websockets.sync.client import connect

from as2d.audio.load import load_audio
from as2d.eval.serve_load import free_port
from as2d.types import SAMPLE_RATE

RATE = 24_000  # OpenAI's realtime PCM16 rate
CHUNK_S = 0.1


@contextmanager
def server(method: str, target: str) -> Iterator[str]:
    """`as2d serve` with `method` on a free port; its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "as2d.cli", "serve", "--port", str(port)]
    command += ["--method", method, "--target", target]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"as2d serve --method {method} did not start") from None
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(30)


def stream(url: str, audio: np.ndarray, language: str | None) -> list[tuple[float, dict]]:
    """Streams `audio` (16 kHz) in real time with a second of silence; every event with its
    time in seconds since the first append."""
    pcm = soxr.resample(audio, SAMPLE_RATE, RATE)
    pcm = np.concatenate([pcm, np.zeros(RATE, np.float32)])
    data = (np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes()
    step = int(RATE * CHUNK_S) * 2
    events: list[tuple[float, dict]] = []
    ws_url = url.replace("http", "ws") + "/v1/realtime?intent=transcription"
    with connect(ws_url, max_size=None) as ws:
        ws.recv()  # session.created
        transcription = {"model": "whisper-1", "language": language}
        turn = {"type": "server_vad", "silence_duration_ms": 600}
        session = {"input_audio_transcription": transcription, "turn_detection": turn}
        ws.send(json.dumps({"type": "transcription_session.update", "session": session}))
        start = time.perf_counter()

        def send() -> None:
            for i, at in enumerate(range(0, len(data), step)):
                time.sleep(max(0.0, start + (i + 1) * CHUNK_S - time.perf_counter()))
                chunk = base64.b64encode(data[at : at + step]).decode()
                ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            ws.send(json.dumps({"type": "input_audio_buffer.commit"}))

        sender = threading.Thread(target=send)
        sender.start()
        open_items: set[str] = set()
        quiet = 0.0  # seconds without an event since everything was sent and answered
        while quiet < 2.0:
            try:
                event = json.loads(ws.recv(timeout=0.25))
            except TimeoutError:
                settled = not sender.is_alive() and not open_items
                quiet = quiet + 0.25 if settled else 0.0
                continue
            events.append((time.perf_counter() - start, event))
            kind, item = event["type"], event.get("item_id")
            if kind.endswith("speech_started"):
                open_items.add(item)
            if kind.endswith("transcription.completed"):
                open_items.discard(item)
        sender.join()
    return events


def utterances(events: list[tuple[float, dict]]) -> list[dict]:
    by_item: dict[str, dict[str, tuple[float, dict]]] = {}
    for at, event in events:
        if "item_id" in event:
            by_item.setdefault(event["item_id"], {}).setdefault(event["type"], (at, event))
    rows = []
    for kinds in by_item.values():
        done = kinds.get("conversation.item.input_audio_transcription.completed")
        started = kinds.get("input_audio_buffer.speech_started")
        stopped = kinds.get("input_audio_buffer.speech_stopped")
        if not (done and started and stopped):
            continue
        delta = kinds.get("conversation.item.input_audio_transcription.delta")
        speech_start = started[1]["audio_start_ms"] / 1000
        rows.append({
            "transcript": done[1]["transcript"],
            "first_text_s": None if delta is None else delta[0] - speech_start,
            "final_s": done[0] - stopped[0],
            "final_after_audio_s": done[0] - stopped[1]["audio_end_ms"] / 1000,
        })  # fmt: skip
    return rows


def summary(rows: list[dict]) -> dict[str, object]:
    out: dict[str, object] = {"utterances": len(rows)}
    for name in ("first_text_s", "final_s", "final_after_audio_s"):
        values = sorted(v for r in rows if (v := r[name]) is not None)
        out[f"{name}_p50"] = statistics.median(values) if values else None
        out[f"{name}_p95"] = values[round(0.95 * (len(values) - 1))] if values else None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--subset", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--methods", default="target,as2d")
    parser.add_argument("--target", default="whisper-base")
    args = parser.parse_args()
    command = "$ " + shlex.join([sys.executable, *sys.argv])
    print(command)
    rows = [json.loads(line) for line in args.manifest.read_text().splitlines() if line]
    rows = [r for r in rows if args.subset in (None, r.get("subset"))][: args.limit]
    found: dict[str, list[dict]] = {}
    for method in args.methods.split(","):
        with server(method, args.target) as url:
            first = load_audio(args.manifest.parent / rows[0]["audio"])
            stream(url, first, rows[0].get("language"))  # first calls, outside the figures
            found[method] = []
            for n, row in enumerate(rows, 1):
                audio = load_audio(args.manifest.parent / row["audio"])
                found[method] += utterances(stream(url, audio, row.get("language")))
                print(f"{method} [{n}/{len(rows)}] {row['audio']}", file=sys.stderr)
    report: dict[str, object] = {m: summary(r) for m, r in found.items()}
    texts = [[r["transcript"] for r in found[m]] for m in found]
    report["same_transcripts"] = all(t == texts[0] for t in texts)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "utterances.json").write_text(json.dumps(found, indent=1))
    (args.out / "summary.json").write_text(json.dumps({"command": command, **report}, indent=1))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
