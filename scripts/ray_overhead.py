"""What `--ray` costs: the same files transcribed by one local command and through a local Ray
cluster with one worker on the same cores, end to end (start-up included), interleaved.

    python scripts/ray_overhead.py [data-cache/bench/manifest.jsonl] [--repeats 2]

Prints each run's wall time, the median ratio Ray / local, whether the outputs are byte for
byte the same, and the command that reproduces it. Stored drafts are off for both.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AS2D = [sys.executable, "-m", "as2d.cli", "transcribe"]


def timed(inputs: list[str], out: Path, extra: list[str]) -> float:
    """Seconds one command takes, from start to exit."""
    command = [*AS2D, *inputs, "-o", str(out), "--drafts", "off", "--no-progress", *extra]
    start = time.perf_counter()
    subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def same_outputs(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    if names != sorted(p.name for p in b.iterdir()):
        return False
    return not filecmp.cmpfiles(a, b, names, shallow=False)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="*", default=["data-cache/bench/manifest.jsonl"])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    ray = ["--ray", "local", "--ray-cpus-per-worker", str(cores)]
    times: dict[str, list[float]] = {"local": [], "ray": []}
    identical = True
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            order = ["local", "ray"] if repeat % 2 == 0 else ["ray", "local"]
            for name in order:
                out = Path(tmp) / f"{name}-{repeat}"
                times[name].append(timed(args.inputs, out, ray if name == "ray" else []))
                print(f"repeat {repeat}: {name} {times[name][-1]:.1f} s", flush=True)
            identical &= same_outputs(Path(tmp) / f"local-{repeat}", Path(tmp) / f"ray-{repeat}")
    local, on_ray = statistics.median(times["local"]), statistics.median(times["ray"])
    print(
        f"local {local:.1f} s, ray {on_ray:.1f} s (medians of {args.repeats}, {cores} cores): "
        f"ray / local {on_ray / local:.3f}, overhead {100 * (on_ray / local - 1):+.1f} %; "
        f"outputs identical: {identical}"
    )
    print("command: python scripts/ray_overhead.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
