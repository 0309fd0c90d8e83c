"""Live stdin: `as2d transcribe - --input-format s16le` fed a recording in real time, 0.1 s at a
time, with as2d and with target-only in turn. Per window, the time from its endpoint (the
moment the endpointer has heard the pause that ends it) to its line on stdout.

    .venv/bin/python scripts/stdin_latency.py tests/data/long_en.flac --seconds 40

The endpoints come from `SpeechWindower` over the same blocks; the process starts (models
loaded, its `ready` line on stderr is not awaited) before the first byte is written, so the
first window also carries what start-up has not finished by then.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from as2d.audio.load import load_audio
from as2d.audio.windows import SpeechWindower
from as2d.types import SAMPLE_RATE

BLOCK = SAMPLE_RATE // 10  # 0.1 s written at a time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recording", type=Path)
    parser.add_argument("--seconds", type=float, default=40.0, help="the recording's first S s")
    parser.add_argument("--endpoint-ms", type=int, default=600)
    parser.add_argument("--methods", default="target,as2d")
    parser.add_argument("--target", default="whisper-base")
    args = parser.parse_args()
    print("$ " + shlex.join([sys.executable, *sys.argv]))
    audio = load_audio(args.recording)[: round(args.seconds * SAMPLE_RATE)]
    endpoints = _endpoints(audio, args.endpoint_ms)
    pcm = np.clip(np.round(audio * 32767), -32768, 32767).astype("<i2").tobytes()
    for method in args.methods.split(","):
        lines = _feed(pcm, method, args)
        late = [at - end for at, end in zip(lines, endpoints, strict=False)]
        shown = ", ".join(f"{x:.2f}" for x in late)
        print(
            f"{method:6}: {len(lines)} lines for {len(endpoints)} windows; line after endpoint "
            f"(s): {shown}; median {statistics.median(late):.2f}, most {max(late):.2f}",
            flush=True,
        )
    return 0


def _endpoints(audio: np.ndarray, endpoint_ms: int) -> list[float]:
    """Seconds of audio heard when each window was decided (the last: the stream's end)."""
    heard = [0]

    def blocks() -> Iterator[np.ndarray]:
        for at in range(0, len(audio), BLOCK):
            heard[0] = min(len(audio), at + BLOCK)
            yield audio[at : at + BLOCK]

    windower = SpeechWindower(endpoint_s=endpoint_ms / 1000)
    return [heard[0] / SAMPLE_RATE for _ in windower.windows(blocks())]


def _feed(pcm: bytes, method: str, args: argparse.Namespace) -> list[float]:
    """Each stdout line's time after the first byte was written, the writer in real time."""
    command = [str(Path(sys.executable).with_name("as2d")), "transcribe", "-"]
    command += ["--input-format", "s16le", "--endpoint-ms", str(args.endpoint_ms)]
    command += ["--method", method, "--target", args.target, "--language", "en"]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    time.sleep(1.0)  # the interpreter and its imports, as a microphone pipe would find them
    start = time.monotonic()

    def write() -> None:
        assert proc.stdin is not None
        for i, at in enumerate(range(0, len(pcm), 2 * BLOCK)):
            time.sleep(max(0.0, start + i * 0.1 - time.monotonic()))
            proc.stdin.write(pcm[at : at + 2 * BLOCK])
            proc.stdin.flush()
        proc.stdin.close()

    writer = threading.Thread(target=write)
    writer.start()
    lines = [time.monotonic() - start for line in proc.stdout if line.strip()]
    writer.join()
    proc.wait()
    return lines


if __name__ == "__main__":
    sys.exit(main())
