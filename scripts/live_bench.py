"""Live latency: each recording of a manifest played to `LiveSession` as a microphone would
(`as2d.eval.live`), target-only live against as2d live, interleaved per recording.

    .venv/bin/python scripts/live_bench.py data-cache/hard/manifest.jsonl --subset short \\
        --out bench-out/live [--clock real|simulated] [--limit N] [--endpoint-ms 600]

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

from as2d.api import Transcriber
from as2d.audio.load import load_audio
from as2d.eval.live import CLOCKS, as_dicts, play, summary, utterances
from as2d.live import DEFAULT_ENDPOINT_MS, LiveSession

METHODS = ("target", "as2d")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--subset", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--clock", choices=CLOCKS, default="real")
    parser.add_argument("--endpoint-ms", type=int, default=DEFAULT_ENDPOINT_MS)
    parser.add_argument("--target", default="whisper-base")
    args = parser.parse_args()
    command = "$ " + shlex.join([sys.executable, *sys.argv])
    print(command)
    rows = [json.loads(line) for line in args.manifest.read_text().splitlines() if line]
    rows = [r for r in rows if args.subset in (None, r.get("subset"))][: args.limit]
    options = {"target": args.target, "endpoint_ms": args.endpoint_ms}
    found: dict[str, list] = {m: [] for m in METHODS}
    transcribers = {m: Transcriber(method=m, **options) for m in METHODS}
    try:
        for t in transcribers.values():  # first calls of the live path, outside the figures
            play(LiveSession(t), load_audio(args.manifest.parent / rows[0]["audio"]), "simulated")
        for n, row in enumerate(rows, 1):
            audio = load_audio(args.manifest.parent / row["audio"])
            for method, t in transcribers.items():
                t.options = t.options.__class__(
                    **{**t.options.__dict__, "language": row.get("language")}
                )
                found[method] += utterances(row["audio"], play(LiveSession(t), audio, args.clock))
            print(f"[{n}/{len(rows)}] {row['audio']}", file=sys.stderr)
    finally:
        for t in transcribers.values():
            t.close()
    target = {(u.recording, u.start_s, u.end_s): u.tokens for u in found["target"]}
    same = [target.get((u.recording, u.start_s, u.end_s)) == u.tokens for u in found["as2d"]]
    report = {m: summary(found[m]) for m in METHODS}
    report["as2d_equal_to_target"] = f"{sum(same)}/{len(same)}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "utterances.json").write_text(
        json.dumps({m: as_dicts(found[m]) for m in METHODS}, indent=1)
    )
    (args.out / "summary.json").write_text(json.dumps({"command": command, **report}, indent=1))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
