"""A live server fed faster than real time: N clients each send a recording at once over the
Realtime WebSocket and close, to an as2d server and to a target-only server in turn. Per
server: its memory (RSS of the server and of its children) before, at the peak and 5 s after
the last close, and how long its sessions outlive their clients.

    .venv/bin/python scripts/realtime_memory.py tests/data/long_en.flac --clients 10

Clients over the server's `--realtime-sessions` are refused (counted), as a user's would be.
"""

from __future__ import annotations

import argparse
import base64
import json
import shlex
import sys
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import soxr
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from as2d.audio.load import load_audio
from as2d.eval.serve_load import started_server

RATE = 24_000  # OpenAI's realtime PCM16
CHUNK = RATE // 10  # 100 ms appends
# a flooding client pings nobody: the server reads its backlog first, and pongs come late
FLOOD: dict[str, Any] = {"max_size": None, "ping_interval": None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recording", type=Path)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=10, help="the servers' realtime slots")
    parser.add_argument("--methods", default="target,as2d")
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds per server: the first also warms buffers"
    )
    args = parser.parse_args()
    print("$ " + shlex.join([sys.executable, *sys.argv]))
    audio = soxr.resample(load_audio(str(args.recording)), 16_000, RATE)
    pcm = np.clip(np.round(audio * 32767), -32768, 32767).astype("<i2")
    appends = [
        json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(c).decode()})
        for c in (pcm[i : i + CHUNK].tobytes() for i in range(0, len(pcm), CHUNK))
    ]
    for method in args.methods.split(","):
        serve = ["--method", method, "--realtime-sessions", str(args.sessions), "--language", "en"]
        with started_server(serve) as server:
            pids = [server.process.pid]
            ws_url = server.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
            with connect(ws_url, max_size=None) as ws:  # the live models loaded, then measured
                _session(ws)
            time.sleep(2)
            for round_ in range(1, args.rounds + 1):
                before = _rss_mb(pids)
                peak = [before]
                sampling = threading.Event()
                threading.Thread(target=_sample, args=(pids, peak, sampling), daemon=True).start()
                refused = 0
                with ExitStack() as stack:
                    sockets = []
                    for _ in range(args.clients):
                        try:
                            sockets.append(stack.enter_context(connect(ws_url, **FLOOD)))
                            _session(sockets[-1])
                        except (InvalidStatus, RuntimeError):
                            refused += 1
                    for message in appends:
                        for ws in sockets:
                            ws.send(message)
                    for ws in sockets:
                        ws.close()
                closed = time.monotonic()
                while _sessions(server.url) > 0 and time.monotonic() - closed < 300:
                    time.sleep(0.05)
                outlived = time.monotonic() - closed
                time.sleep(5)
                after = _rss_mb(pids)
                server_mb = _rss_mb([server.process.pid], children=False)
                sampling.set()
                print(
                    f"{method:6} round {round_}: {args.clients} clients ({refused} refused) x "
                    f"{len(pcm) / RATE:.0f} s: sessions gone {outlived:.2f} s after the close; "
                    f"memory {before:.0f} MB before, {max(peak):.0f} MB peak, "
                    f"{after:.0f} MB 5 s after (+{after - before:.0f} MB; the server process alone "
                    f"{server_mb:.0f} MB)",
                    flush=True,
                )
    return 0


def _session(ws: ClientConnection) -> None:
    created = json.loads(ws.recv(timeout=60))
    if created["type"] != "session.created":
        raise RuntimeError(created)
    transcription = {"model": "whisper-1", "language": "en"}
    audio_input = {"format": {"type": "audio/pcm", "rate": RATE}, "transcription": transcription}
    update = {"type": "transcription", "audio": {"input": audio_input}}
    ws.send(json.dumps({"type": "session.update", "session": update}))
    while json.loads(ws.recv(timeout=60))["type"] != "session.updated":
        pass


def _rss_mb(pids: list[int], children: bool = True) -> float:
    """The RSS of `pids` and (`children`) of their children, in MB."""
    total = 0
    for pid in pids:
        tasks = Path(f"/proc/{pid}/task").glob("*/children")  # children of every thread
        kids = [int(p) for task in tasks for p in task.read_text().split()] if children else []
        for each in [pid, *kids]:
            try:
                status = Path(f"/proc/{each}/status").read_text()
            except FileNotFoundError:
                continue
            total += int(next(x for x in status.splitlines() if x.startswith("VmRSS:")).split()[1])
    return total / 1024


def _sample(pids: list[int], peak: list[float], stop: threading.Event) -> None:
    while not stop.wait(0.2):
        peak.append(_rss_mb(pids))


def _sessions(url: str) -> float:
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    line = next(x for x in text.splitlines() if x.startswith("as2d_realtime_sessions "))
    return float(line.split()[-1])


if __name__ == "__main__":
    sys.exit(main())
