"""Load and overhead of `as2d serve` on this machine.

1. Load: CLIENTS clients send REQUESTS transcriptions of the English test clips; every answer
   must be 200 and the same for the same clip; prints p50/p95 latency.
2. HTTP overhead: the first 60 s of the bundled long recording, through the server and through
   the Python API with the same options, interleaved after a warm-up; prints the medians.

    .venv/bin/python scripts/serve_load.py [--clients 4] [--requests 40] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import soundfile as sf

from as2d.audio.load import load_audio
from as2d.eval.serve_load import alive, post_audio, run_load, started_server
from as2d.types import SAMPLE_RATE

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("$ " + shlex.join([sys.executable, *sys.argv]))
    clips = sorted((DATA / "asterisk" / "en").glob("*.wav"))
    with tempfile.TemporaryDirectory() as tmp:
        minute = Path(tmp) / "first-60s.wav"
        sf.write(minute, load_audio(DATA / "long_en.flac")[: 60 * SAMPLE_RATE], SAMPLE_RATE)
        with started_server(["--queue", str(args.requests), "--language", "en"]) as server:
            report = run_load(server.url, clips, args.clients, args.requests)
            ok = report.statuses.count(200)
            print(
                f"load: {args.clients} clients, {args.requests} requests over {len(clips)} clips: "
                f"{ok} answered 200, identical per clip: {report.identical()}, "
                f"p50 {report.p50:.2f} s, p95 {report.p95:.2f} s, wall {report.wall_s:.1f} s"
            )
            http_s, api_s = overhead(server.url, minute, args.repeats)
            children = server.children()
            server.process.send_signal(signal.SIGTERM)
            server.process.wait(timeout=120)
        time.sleep(0.5)
        left = [pid for pid in children if alive(pid)]
    ratio = statistics.median(http_s) / statistics.median(api_s)
    print(
        f"60 s file, decode wall time: HTTP median {statistics.median(http_s):.2f} s "
        f"({', '.join(f'{t:.2f}' for t in http_s)}), Python API median "
        f"{statistics.median(api_s):.2f} s ({', '.join(f'{t:.2f}' for t in api_s)}): "
        f"HTTP/API {ratio:.3f}"
    )
    print(f"processes left behind: {left or 'none'}")
    return 0 if ok == args.requests and report.identical() and not left else 1


def overhead(url: str, audio: Path, repeats: int) -> tuple[list[float], list[float]]:
    """Request time through the server against `Transcriber.transcribe` time, interleaved.
    The API's Transcriber has its own drafter process; the server sits idle meanwhile."""
    from as2d.api import Transcriber

    http_s, api_s = [], []
    with Transcriber(language="en") as transcriber:
        for i in range(repeats + 1):  # the first round warms both up
            t0 = time.perf_counter()
            status, _, body = post_audio(
                url + "/v1/audio/transcriptions", {"model": "whisper-1"}, audio.read_bytes()
            )
            t1 = time.perf_counter()
            run = transcriber.transcribe(audio)
            _ = run.stats
            t2 = time.perf_counter()
            assert status == 200 and json.loads(body)["text"] == run.text
            if i > 0:
                http_s.append(t1 - t0)
                api_s.append(t2 - t1)
    return http_s, api_s


if __name__ == "__main__":
    sys.exit(main())
