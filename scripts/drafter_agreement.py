"""Which drafter agrees best with the target, per subset and language: the choice for drafts
made ahead, where nobody waits for the drafter and only its agreement counts.

For every speech window of a dataset this decodes target-only's greedy tokens once, drafts the
window with each drafter in this process (as `as2d draft` does: the sized encoder input, the
recording's language), and replays the target's tokens against each draft offline
(`aligner.simulate`, the engine's aligner with its word keys). Reported per subset and
drafter:
- coverage: the share of the target's tokens that came from the draft (accepted tokens);
- passes: target forwards in the decode phase as a share of target-only's one per token
  (what every draft ready can save there; the encoder and prefill stay);
- drafting core-seconds per audio second (the preparation's cost).
Counts are deterministic (no timing noise); drafting seconds are wall time times threads.

    .venv/bin/python scripts/drafter_agreement.py data-cache/hard/manifest.jsonl \\
        [--drafters whisper-tiny.en,whisper-base,ct2:whisper-base] [--k 16] [--every 1]

A name "a+b" replays both drafters' drafts of each window at once (`simulate`'s `also`): each
pass verifies the longer candidate, as the engine's policy picks among its sources.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from as2d.audio.windows import iter_windows
from as2d.drafting.aligner import WordKeys, simulate
from as2d.drafting.family import DEFAULT_TAIL_S, draft_audio
from as2d.engine.decode import decode_target_only
from as2d.eval.datasets import load_dataset
from as2d.models.targets import load_target
from as2d.runtime.drafts import load_drafter
from as2d.runtime.spec import DrafterSpec
from as2d.target import Request, TargetAdapter
from as2d.types import Window

DRAFTERS = "whisper-tiny.en,whisper-base,ct2:whisper-base"


@dataclass
class Tally:
    """One drafter's counts over a subset."""

    tokens: int = 0  # target tokens
    passes: int = 0  # decode-phase target forwards with this drafter's every draft ready
    accepted: int = 0
    draft_core_s: float = 0.0
    audio_s: float = 0.0
    windows: int = 0
    languages: set[str] = field(default_factory=set)

    def row(self) -> dict[str, Any]:
        return {
            "windows": self.windows,
            "audio_s": round(self.audio_s, 1),
            "target_tokens": self.tokens,
            "coverage": round(self.accepted / max(self.tokens, 1), 3),
            "passes_share": round(self.passes / max(self.tokens, 1), 3),
            "draft_core_s_per_audio_s": round(self.draft_core_s / max(self.audio_s, 1e-9), 3),
            "languages": sorted(self.languages),
        }


def target_tokens(target: TargetAdapter[Any], window: Window, language: str | None) -> list[int]:
    """Target-only greedy tokens of one window, as `as2d transcribe --method target` gives."""
    encoded = target.encode(window.audio)
    language = target.language(encoded, language)
    return decode_target_only(target, encoded, target.prompt(encoded, Request(language=language)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--drafters", default=DRAFTERS)
    parser.add_argument("--k", type=int, default=16, help="the budget of each verify pass")
    parser.add_argument("--every", type=int, default=1, help="only every N-th recording")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None, help="write the table as JSON here too")
    parser.add_argument("--subset", default=None, help="only this subset's recordings")
    parser.add_argument(
        "--tail", default=str(DEFAULT_TAIL_S), help="the drafters' encoder input: seconds of "
        "silence after the speech, or full (Whisper's 30 s, as the target reads it)",
    )  # fmt: skip
    args = parser.parse_args()
    print("$ " + shlex.join([sys.executable, *sys.argv]), flush=True)
    target = load_target("whisper-base", "cpu", None)
    keys = WordKeys(target.tokenizer)
    names = args.drafters.split(",")
    recordings = load_dataset(args.dataset, Path("data-cache/bench-cache"))[:: args.every]
    recordings = [r for r in recordings if args.subset in (None, r.subset)]
    tail_s = None if args.tail == "full" else float(args.tail)
    models: dict[tuple[str, str | None], Any] = {}
    tallies: dict[tuple[str, str], Tally] = defaultdict(Tally)
    for n, recording in enumerate(recordings):
        for window in iter_windows(recording.audio):
            wanted = target_tokens(target, window, recording.language)
            drafted: dict[str, tuple[list[int], float]] = {}  # drafter: tokens, core-seconds
            for drafter in dict.fromkeys(d for name in names for d in name.split("+")):
                spec = DrafterSpec(drafter, args.threads, recording.language, tail_s=tail_s)
                key = (drafter, recording.language)
                model = models.get(key) or models.setdefault(key, load_drafter(spec))
                start = time.perf_counter()
                encoded = model.encode(draft_audio(window, spec.tail_s), spec.language)
                texts = [text for _, text in model.texts(encoded)]
                core_s = (time.perf_counter() - start) * args.threads
                drafted[drafter] = (target.tokenizer.encode(texts[-1]) if texts else [], core_s)
            for name in names:  # "a+b": each step the longest of both drafts' candidates
                first, *also = (drafted[d][0] for d in name.split("+"))
                stats = simulate(wanted, first, args.k, key=keys, also=also)
                core_s = sum(drafted[d][1] for d in name.split("+"))
                for subset in (recording.subset or "all", f"lang:{recording.language}", "whole"):
                    tally = tallies[(subset, name)]
                    tally.tokens += len(wanted)
                    tally.passes += stats.forward_passes
                    tally.accepted += stats.accepted_tokens
                    tally.draft_core_s += core_s
                    tally.audio_s += window.end - window.start
                    tally.windows += 1
                    tally.languages.add(recording.language or "?")
        print(f"\r{n + 1}/{len(recordings)} recordings", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    table = {f"{subset} {name}": tally.row() for (subset, name), tally in sorted(tallies.items())}
    print(
        "| subset | drafter | windows | coverage | decode passes / target-only's "
        "| draft core-s per audio s |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for label, row in table.items():
        subset, name = label.split(" ", 1)
        print(
            f"| {subset} | {name} | {row['windows']} | {row['coverage']:.1%} | "
            f"{row['passes_share']:.1%} | {row['draft_core_s_per_audio_s']:.2f} |"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
