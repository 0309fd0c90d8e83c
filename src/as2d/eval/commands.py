"""The bodies of the evaluation commands: `as2d compare`, `as2d bench` and `as2d exactness`
(`cli.py` parses their arguments; `as2d.commands` holds the commands that decode files)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

# Torch and transformers are imported by each command when it runs, not here.
from as2d.backends import RUNTIMES
from as2d.commands.common import (
    EXIT_OK,
    EXIT_SOME_FAILED,
    UsageError,
    prepare_output_dir,
    quiet_transformers,
)
from as2d.eval.catalog import Config, catalog
from as2d.models.bundled import cache_root
from as2d.options import METHODS, Options, parse_budget

if TYPE_CHECKING:
    from as2d.eval.datasets import Recording


def compare_methods(args: argparse.Namespace) -> int:
    """Target-only, then --method, on one file: per-window agreement, transcript, speed-up."""
    from as2d.api import compare
    from as2d.audio.load import AudioError

    quiet_transformers()
    options = Options(
        target=args.target, drafter=args.drafter, language=args.language, budget=args.budget
    )
    try:
        target, as2d = compare(args.file, options, ("target", args.method))
    except (AudioError, ValueError) as err:
        raise UsageError(str(err)) from err
    method = f"{args.method} tokens"
    print(f"{'window':>6}  {'seconds':>13}  {'target tokens':>13}  {method:>11}  same")
    for t, a in zip(target.results, as2d.results, strict=True):
        same = "yes" if t.token_ids == a.token_ids else "NO"
        span = f"{t.start:5.1f}-{t.end:5.1f}"
        print(f"{t.index:>6}  {span:>13}  {len(t.token_ids):>13}  {len(a.token_ids):>11}  {same}")
    pairs = list(zip(target.results, as2d.results, strict=True))
    identical = all(t.token_ids == a.token_ids for t, a in pairs)
    print(f"\n{as2d.text}\n")
    label = args.method if args.method == "pld" else f"{args.method} ({options.drafter})"
    for name, run in (("target-only", target), (label, as2d)):
        s = run.stats
        decode = sum(r.decode_s for r in run.results)
        print(f"{name:>28}: {s.wall_s:6.2f} s wall, {decode:6.2f} s decoding, RTF {s.rtf:.3f}")
    t_decode = sum(r.decode_s for r in target.results)
    a_decode = sum(r.decode_s for r in as2d.results)
    print(
        f"{'identical output':>28}: {'yes' if identical else 'NO'}\n"
        f"{'speed-up':>28}: {target.stats.wall_s / as2d.stats.wall_s:.2f}x end to end, "
        f"{t_decode / a_decode:.2f}x decode phase (one run each, one after the other: for\n"
        f"{'':>30}honest numbers, interleaved and repeated, use as2d bench)"
    )
    passes = sum(r.verify_passes for r in as2d.results)
    if passes:
        accepted = sum(r.accepted_tokens for r in as2d.results)
        plain = sum(r.plain_steps for r in as2d.results)
        print(
            f"{'accepted per verify':>28}: {accepted / passes:.2f} "
            f"({passes} verify passes, {plain} plain steps)"
        )
    return EXIT_OK if identical else EXIT_SOME_FAILED


def bench_dataset(args: argparse.Namespace) -> int:
    """`as2d bench`: load the dataset, expand the catalog, measure, write the outputs."""
    from as2d.audio.load import AudioError
    from as2d.eval.bench import BenchSettings, run_bench
    from as2d.eval.external import external_reference
    from as2d.eval.report import table_of, write_outputs
    from as2d.eval.summary import RunInfo

    if args.repeats < 1:
        raise UsageError("--repeats must be at least 1")
    from as2d.eval.catalog import with_drafts_ready, with_prepared

    recordings, configs, base = dataset_configs(args)
    configs = with_drafts_ready(configs, args.drafts)
    configs = with_prepared(configs) if args.prepared else configs
    base = replace(base, drafts_dir=str(args.out / "drafts"))  # drafts-ready configurations'
    prepare_output_dir(args.out, skip_existing=False)
    quiet_transformers()
    settings = BenchSettings(base, args.repeats, args.quiet_wait, not args.no_progress)
    command = "as2d " + shlex.join(args.argv)
    info = RunInfo(args.target, args.dataset, command, args.repeats)
    try:
        bench = run_bench(configs, recordings, settings)
        if args.external:
            info.external = external_reference(bench, settings)
    except (AudioError, ValueError) as err:
        raise UsageError(str(err)) from err
    content = write_outputs(bench, args.out, info)
    print(table_of(content), file=sys.stderr)
    rows = content["configs"]
    assert isinstance(rows, list)
    return EXIT_OK if all(row["identical"] for row in rows) else EXIT_SOME_FAILED


def exactness_dataset(args: argparse.Namespace) -> int:
    """`as2d exactness`: every configuration against target-only, one JSON object on stdout."""
    from as2d.audio.load import AudioError
    from as2d.eval.exactness import check_exactness, report_dict

    recordings, configs, base = dataset_configs(args)
    quiet_transformers()
    try:
        report = check_exactness(configs, recordings, base, progress=not args.no_progress)
    except (AudioError, ValueError) as err:
        raise UsageError(str(err)) from err
    print(json.dumps(report_dict(report)))
    return EXIT_SOME_FAILED if report.mismatches else EXIT_OK


def dataset_configs(args: argparse.Namespace) -> tuple[list[Recording], list[Config], Options]:
    """The dataset, the catalog and the base options of `bench` and `exactness`."""
    from as2d.eval.datasets import DatasetError, load_dataset

    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    try:
        cache = args.cache or cache_root() / "datasets"
        recordings = load_dataset(args.dataset, cache)
        if args.subset is not None:
            subsets = sorted({r.subset for r in recordings if r.subset is not None})
            recordings = [r for r in recordings if r.subset == args.subset]
            if not recordings:
                known = ", ".join(subsets) or "none"
                raise UsageError(f"--subset {args.subset}: the dataset has {known}")
        recordings = recordings[: args.limit]
        methods, drafters = _items(args.methods), _items(args.drafters)
        budgets = [parse_budget(b) for b in _items(args.budgets)]
    except (DatasetError, ValueError) as err:
        raise UsageError(str(err)) from err
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UsageError(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    runtimes = _runtimes(args.runtime, methods)
    languages = {r.language for r in recordings}
    language = args.language or (languages.pop() if len(languages) == 1 else None)
    base = Options(
        target=args.target,
        language=language,
        task=args.task,
        runtime=runtimes[0],  # each configuration names its own
        device=args.device,
        dtype=args.dtype,
        drafter_tail_s=args.drafter_tail,
        drafts="off",  # a benchmark's drafter drafts: stored drafts would skew its numbers
        # bench: timed apart from decoding (WindowResult.align_s); exactness times nothing
        timestamps=getattr(args, "timestamps", "none"),
    )
    cores = len(os.sched_getaffinity(0))
    return recordings, catalog(methods, drafters, budgets, cores, runtimes), base


def _runtimes(text: str, methods: Sequence[str]) -> list[str]:
    """`--runtime`: one runtime, or several side by side ("torch,mnn"); says on stderr that
    sd is left out on the runtimes other than torch (the catalog leaves it out there)."""
    runtimes = list(dict.fromkeys(_items(text)))
    unknown = [r for r in runtimes if r not in RUNTIMES] or ([] if runtimes else [text])
    if unknown:
        raise UsageError(f"unknown runtime {unknown[0]!r}; choose from {', '.join(RUNTIMES)}")
    others = [r for r in runtimes if r != "torch"]
    if others and "sd" in methods:  # its drafter shares torch's cache
        print(f"sd left out on {', '.join(others)}: it runs on torch only", file=sys.stderr)
    return runtimes


def _items(text: str) -> list[str]:
    """ "a, b,,c" -> ["a", "b", "c"]."""
    return [item.strip() for item in text.split(",") if item.strip()]
