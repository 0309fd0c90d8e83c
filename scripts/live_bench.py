"""Live latency: each recording of a manifest played to `LiveSession` as a microphone would
(`as2d.eval.live`), target-only live against as2d live, interleaved per recording.

    .venv/bin/python scripts/live_bench.py data-cache/hard/manifest.jsonl --subset short \\
        --out bench-out/live [--clock real|simulated] [--limit N] [--endpoint-ms 600] \\
        [--methods four]

Per utterance: the first provisional text after speech starts, `speech_stopped` after the
audio that decided it, the final text after `speech_stopped` and after the window's end;
and whether as2d's final text is target-only's (same windows, token for token).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np

from as2d.api import Transcriber
from as2d.audio.load import load_audio
from as2d.eval.live import CLOCKS, as_dicts, play, summary, utterances
from as2d.live import DEFAULT_ENDPOINT_MS, LiveSession
from as2d.types import SAMPLE_RATE

METHODS = ("target", "as2d")
LATE = "-late"  # a method name's suffix: the target waits for each endpoint (`early` off)
EARLY = "-early"  # the target decodes in each pause, before its endpoint (`early` on)
# Issue 36's four for a live utterance, from speech end to final text: target-only cold,
# target-only with its work done in the pause, as2d with the drafts made while the user
# speaks, and as2d with those and the target's work in the pause.
FOUR = f"target,target{EARLY},as2d{LATE},as2d"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--subset", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--clock", choices=CLOCKS, default="real")
    parser.add_argument("--endpoint-ms", type=int, default=DEFAULT_ENDPOINT_MS)
    parser.add_argument("--target", default="whisper-base")
    parser.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"of {METHODS}, each also with {LATE} or {EARLY}; four: {FOUR}",
    )
    parser.add_argument(
        "--join", action="store_true", help="one stream: the recordings joined, 1 s apart"
    )
    parser.add_argument("--seconds", type=float, default=None, help="each stream's first S s")
    args = parser.parse_args()
    command = "$ " + shlex.join([sys.executable, *sys.argv])
    print(command)
    rows = [json.loads(line) for line in args.manifest.read_text().splitlines() if line]
    rows = [r for r in rows if args.subset in (None, r.get("subset"))][: args.limit]
    options = {"target": args.target, "endpoint_ms": args.endpoint_ms}
    methods = (FOUR if args.methods == "four" else args.methods).split(",")
    found: dict[str, list] = {m: [] for m in methods}
    transcribers = {m: Transcriber(method=_method(m), **options) for m in methods}
    streams = [(r["audio"], r.get("language"), [r["audio"]]) for r in rows]
    if args.join:
        streams = [("joined", rows[0].get("language"), [r["audio"] for r in rows])]
    background = args.clock == "real"  # the simulated clock needs the target in `push`
    try:
        first = load_audio(args.manifest.parent / rows[0]["audio"])
        for t in transcribers.values():  # first calls of the live path, outside the figures
            play(LiveSession(t, background=False), first, "simulated")
        for n, (name, language, files) in enumerate(streams, 1):
            audio = joined([load_audio(args.manifest.parent / f) for f in files])
            audio = audio[: None if args.seconds is None else round(args.seconds * SAMPLE_RATE)]
            for method, t in transcribers.items():
                early = {LATE: False, EARLY: True}.get(method[len(_method(method)) :])
                session = LiveSession(
                    t, args.endpoint_ms, early, language=language, background=background
                )
                found[method] += utterances(name, play(session, audio, args.clock))
            print(f"[{n}/{len(streams)}] {name}", file=sys.stderr)
    finally:
        for t in transcribers.values():
            t.close()
    report: dict[str, object] = {m: _row(m, summary(found[m])) for m in methods}
    if {"target", "as2d"} <= set(methods):
        target = {(u.recording, u.start_s, u.end_s): u.tokens for u in found["target"]}
        same = [target.get((u.recording, u.start_s, u.end_s)) == u.tokens for u in found["as2d"]]
        report["as2d_equal_to_target"] = f"{sum(same)}/{len(same)}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "utterances.json").write_text(
        json.dumps({m: as_dicts(found[m]) for m in methods}, indent=1)
    )
    (args.out / "summary.json").write_text(json.dumps({"command": command, **report}, indent=1))
    print(json.dumps(report, indent=1))
    return 0


def _method(name: str) -> str:
    """The method of a name, less its suffix."""
    return name.removesuffix(LATE).removesuffix(EARLY)


def _row(name: str, figures: dict) -> dict:
    """A method's figures, with what was made before the endpoint: the drafts (as2d, while
    the user speaks) and the target's work (in the pause), and the request's time (the
    median from speech end to final text)."""
    drafts = "live" if _method(name) == "as2d" else None
    prepared = bool(figures["early"])
    return {"drafts": drafts, "prepared": prepared, "request_s": figures["final_s_p50"], **figures}


def joined(parts: list[np.ndarray]) -> np.ndarray:
    """Recordings one after the other, a second of silence after each but the last."""
    silence = np.zeros(SAMPLE_RATE, np.float32)
    return np.concatenate([x for part in parts for x in (part, silence)][:-1])


if __name__ == "__main__":
    sys.exit(main())
