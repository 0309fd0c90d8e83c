"""The most any speculative method could gain on a dataset on this machine: target-only's
time per window against a free, perfect drafter's.

Speculation changes only the decoder's steps after the prefill: the encoder (whose input
Whisper pads to 30 s) and the prefill stay. So for every window this times, on every core,
target-only (encoder, prefill, one step per token) and the ceiling: the same encoder and
prefill, then one verify pass of all the window's tokens, as if a drafter that costs nothing
had drafted them all right. Pooled per subset of the manifest, medians of the repeats. A
real drafter also pays its own encoder and steps, so real speed-ups stay below the ceiling.

    .venv/bin/python scripts/ceiling.py data-cache/hard/manifest.jsonl [--repeats 3] [--every 1]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from as2d.audio.windows import iter_windows
from as2d.engine.decode import decode_target_only
from as2d.eval.datasets import load_dataset
from as2d.models.targets import load_target
from as2d.target import Request, TargetAdapter
from as2d.types import Window


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--every", type=int, default=1, help="only every N-th recording")
    args = parser.parse_args()
    print("$ " + shlex.join([sys.executable, *sys.argv]), flush=True)
    target = load_target("whisper-base", "cpu", None)
    recordings = load_dataset(args.dataset, Path("data-cache/bench-cache"))[:: args.every]
    base: dict[str, float] = defaultdict(float)
    ceiling: dict[str, float] = defaultdict(float)
    for n, recording in enumerate(recordings):
        for window in iter_windows(recording.audio):
            times = [_timed(target, window, recording.language) for _ in range(args.repeats)]
            subset = recording.subset or "all"
            base[subset] += statistics.median(t[0] for t in times)
            ceiling[subset] += statistics.median(t[1] for t in times)
        print(f"\r{n + 1}/{len(recordings)} recordings", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print("| subset | target-only s | free perfect drafter s | ceiling |")
    print("|---|---:|---:|---:|")
    for subset in base:
        print(
            f"| {subset} | {base[subset]:.1f} | {ceiling[subset]:.1f} | "
            f"{base[subset] / ceiling[subset]:.2f}x |"
        )
    whole_base, whole_ceiling = sum(base.values()), sum(ceiling.values())
    print(f"| whole | {whole_base:.1f} | {whole_ceiling:.1f} | {whole_base / whole_ceiling:.2f}x |")
    return 0


def _timed(target: TargetAdapter[Any], window: Window, language: str | None) -> tuple[float, float]:
    """(target-only seconds, ceiling seconds) of one window, on every core."""
    t0 = time.perf_counter()
    encoded = target.encode(window.audio)
    prompt = target.prompt(encoded, Request("transcribe", target.language(encoded, language)))
    t1 = time.perf_counter()
    tokens = decode_target_only(target, encoded, prompt)
    t2 = time.perf_counter()
    target.prefill(encoded, prompt)
    room = target.max_length - target.length  # a window that fills the context has no end
    target.forward([*tokens, min(target.eot_ids)][:room])  # every token verified at once
    t3 = time.perf_counter()
    return t2 - t0, (t1 - t0) + (t3 - t2)


if __name__ == "__main__":
    sys.exit(main())
