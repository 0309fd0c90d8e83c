"""Peak memory of each benchmark configuration, each measured in a fresh process.

`as2d bench` keeps every configuration loaded in one process (sharing the target), so its
own memory says nothing about one configuration. Here each configuration of the catalog
(the same axes as `as2d bench`) is loaded in a fresh Python, decodes one recording, and
reports the peak RSS of the target process and of its drafter process(es), sampled from
/proc, and the peak PSS of both (shared pages counted once). `--marks 10,30,60` also
reports RSS at those audio minutes (pass a recording over an hour long to check that
memory stays flat).

Example:
    .venv/bin/python scripts/bench_memory.py tests/data/long_en.flac --methods target,as2d \
        --drafters whisper-tiny.en --budgets auto
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from as2d.api import Transcriber
from as2d.eval.catalog import DRAFTERS, Config, catalog
from as2d.eval.machine import children, wait_children_idle
from as2d.options import METHODS, Options, parse_budget

PERIOD_S = 0.2  # /proc sampling period
MB = 1024  # /proc reports kB


@dataclass
class Probe:
    """Memory of one configuration, MB (RSS sums double-count pages shared between processes)."""

    config: str
    loaded_rss: float  # target + drafter RSS after loading and warm-up, before decoding
    peak_rss: float = 0.0  # peak of target RSS + drafter RSS while decoding
    peak_target_rss: float = 0.0
    peak_drafter_rss: float = 0.0
    peak_pss: float = 0.0
    marks: list[tuple[float, float]] = field(default_factory=list)  # (audio minutes, RSS MB)


def _kb(path: str, key: str) -> int:
    """A "key: N kB" line of a /proc file, in kB; 0 if the process is gone."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def sample(probe: Probe) -> float:
    """Updates the peaks of `probe` from /proc; returns target + drafter RSS now, MB."""
    pids = [os.getpid(), *children()]
    rss = [_kb(f"/proc/{pid}/status", "VmRSS") / MB for pid in pids]
    if sum(rss) > probe.peak_rss:
        probe.peak_rss, probe.peak_target_rss, probe.peak_drafter_rss = (
            sum(rss),
            rss[0],
            sum(rss[1:]),
        )
    pss = sum(_kb(f"/proc/{pid}/smaps_rollup", "Pss") for pid in pids) / MB
    probe.peak_pss = max(probe.peak_pss, pss)
    return sum(rss)


def probe_config(config: Config, base: Options, audio: str, marks_min: list[float]) -> Probe:
    """In this (fresh) process: load `config`, decode `audio`, sample memory meanwhile."""
    with Transcriber(config.options(base)) as transcriber:
        wait_children_idle()
        probe = Probe(config.name, 0.0)
        probe.loaded_rss = sample(probe)
        stop = threading.Event()
        sampler = threading.Thread(target=_sample_until, args=(stop, probe), daemon=True)
        sampler.start()
        for window in transcriber.transcribe(audio):
            while marks_min and window.end >= marks_min[0] * 60:
                probe.marks.append((marks_min.pop(0), sample(probe)))
        stop.set()
        sampler.join()
        sample(probe)
    return probe


def _sample_until(stop: threading.Event, probe: Probe) -> None:
    while not stop.wait(PERIOD_S):
        sample(probe)


def run_in_fresh_process(config: Config, args: argparse.Namespace) -> Probe:
    """`probe_config` in a child Python, so that it holds only this configuration."""
    command = [sys.executable, __file__, args.audio, "--target", args.target]
    command += ["--marks", args.marks, "--probe", json.dumps(dataclasses.asdict(config))]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    fields = json.loads(done.stdout.strip().splitlines()[-1])
    return Probe(**fields)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("audio", help="the recording every configuration decodes")
    parser.add_argument("--target", default="whisper-base")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--drafters", default=",".join(DRAFTERS))
    parser.add_argument("--budgets", default="auto")
    parser.add_argument("--marks", default="", help="audio minutes to report RSS at, e.g. 10,30")
    parser.add_argument("--probe", help=argparse.SUPPRESS)  # internal: one config, this process
    args = parser.parse_args(argv)
    base = Options(target=args.target, language="en")
    marks = [float(m) for m in args.marks.split(",") if m]
    if args.probe:
        config = Config(**json.loads(args.probe))
        print(json.dumps(dataclasses.asdict(probe_config(config, base, args.audio, marks))))
        return 0
    budgets = [parse_budget(b) for b in args.budgets.split(",")]
    configs = catalog(
        args.methods.split(","), args.drafters.split(","), budgets, len(os.sched_getaffinity(0))
    )
    print("| configuration | loaded MB | peak MB | target MB | drafter MB | peak PSS MB | marks |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for config in configs:
        p = run_in_fresh_process(config, args)
        marks_text = ", ".join(f"{m:g} min: {mb:.0f}" for m, mb in p.marks) or "-"
        print(
            f"| {p.config} | {p.loaded_rss:.0f} | {p.peak_rss:.0f} | {p.peak_target_rss:.0f} | "
            f"{p.peak_drafter_rss:.0f} | {p.peak_pss:.0f} | {marks_text} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
