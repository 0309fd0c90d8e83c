"""Request-time speed with every draft made ahead (`as2d draft`, a server's recordings) against
target-only, on a dataset.

Each recording is drafted first (timed apart: the drafting cost, paid before the request).
Then, after a warm-up recording, target-only and as2d-from-stored-drafts (no drafter process:
the target on every core) decode it in turn, `--repeats` times, interleaved; both forget
earlier recordings before each run, so history lookup helps neither. Prints pooled
tokens/s, the speed-up of the pooled decode time, the median per-recording ratio, whether every
output is identical, and the drafting cost.

    .venv/bin/python scripts/drafts_ready_bench.py data-cache/bench/manifest.jsonl [--repeats 2]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from as2d.api import Options, Transcriber
from as2d.eval.datasets import load_dataset
from as2d.options import drafter_spec
from as2d.runtime.drafts import AheadDrafter, DraftStore


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    print("$ " + shlex.join([sys.executable, *sys.argv]), flush=True)
    recordings = load_dataset(args.dataset, Path("data-cache/bench-cache"))[: args.limit]
    with tempfile.TemporaryDirectory() as tmp:
        options = Options(drafts_dir=tmp, language="en")
        spec = drafter_spec(options)
        assert spec is not None
        spec = replace(spec, threads=2)
        drafter = AheadDrafter(DraftStore(Path(tmp)), spec)
        start = time.perf_counter()
        for r in recordings:
            drafter.draft(r.audio)
        draft_s = time.perf_counter() - start
        del drafter
        audio_s = 0.0
        times: dict[str, list[float]] = {"target": [], "as2d": []}
        tokens: dict[str, list[list[int]]] = {"target": [], "as2d": []}
        ratios = []
        with (
            Transcriber(replace(options, method="target")) as target,
            Transcriber(options, spawn_drafter=False) as as2d,
        ):
            for t in (target, as2d):  # warm-up: one recording each, not timed
                _ = t.transcribe(recordings[0].audio).stats
            for r in recordings:
                per = {}
                for _ in range(args.repeats):
                    for name, t in (("target", target), ("as2d", as2d)):
                        t.forget()
                        run = t.transcribe(r.audio)
                        stats = run.stats
                        times[name].append(stats.wall_s)
                        tokens[name].append([tok for w in run.results for tok in w.token_ids])
                        per.setdefault(name, []).append(stats.wall_s)
                audio_s = stats.audio_s
                ratios.append(statistics.median(per["target"]) / statistics.median(per["as2d"]))
                print(
                    f"{r.name}: {audio_s:.0f} s, target {statistics.median(per['target']):.2f} s, "
                    f"as2d with drafts {statistics.median(per['as2d']):.2f} s, "
                    f"{ratios[-1]:.2f}x",
                    flush=True,
                )
    n = sum(len(x) for x in tokens["target"])
    target_s, as2d_s = sum(times["target"]), sum(times["as2d"])
    print(
        f"pooled: target-only {n / target_s:.1f} tokens/s, as2d with every draft ready "
        f"{n / as2d_s:.1f} tokens/s: {target_s / as2d_s:.2f}x; median per recording "
        f"{statistics.median(ratios):.2f}x; identical: {tokens['target'] == tokens['as2d']}"
    )
    print(
        f"drafting cost (before the requests, 2 threads): {draft_s:.1f} s for "
        f"{len(recordings)} recordings, the drafter's load included"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
