"""`as2d draft` and `as2d prepare`: work done ahead of later requests (`transcribe`, `ask`,
`serve` with the same store find it), where nobody waits for it."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from as2d.commands.arguments import prepare_options
from as2d.commands.common import EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE, fail
from as2d.options import Options, drafter_spec, preparing


def draft_files(args: argparse.Namespace) -> int:
    """Makes and stores the drafts of each file (as2d transcribe and serve use them)."""
    from as2d.audio.load import AudioError
    from as2d.runtime.drafts import AheadDrafter, draft_store

    options = Options(drafter=args.drafter, language=args.language, task=args.task)
    spec = drafter_spec(options)
    assert spec is not None  # method as2d
    spec = replace(spec, threads=args.threads or os.cpu_count() or 1)
    drafter = AheadDrafter(draft_store(Path(args.store) if args.store else None), spec)
    failed = 0
    for file in args.files:
        try:
            drafter.draft(Path(file))
            print(f"{file}: drafted ({spec.name})", file=sys.stderr)
        except (AudioError, OSError, ValueError) as err:
            fail(str(err) if isinstance(err, AudioError) else f"{file}: {err}", EXIT_USAGE)
            failed += 1
    if failed == 0:
        return EXIT_OK
    return EXIT_USAGE if failed == len(args.files) else EXIT_SOME_FAILED


def prepare_files(args: argparse.Namespace) -> int:
    """Stores each file's drafts and the target's encoder output per speech window (a later
    `transcribe`, `ask` or `serve` with the same store uses them; `runtime/prepared.py`)."""
    import time

    from as2d.api import FILE_ERRORS, Transcriber, file_failure
    from as2d.runtime.drafts import AheadDrafter, draft_store
    from as2d.runtime.prepared import prepare

    options = prepare_options(args)
    accurate = preparing(options)
    spec = None if args.no_drafts else drafter_spec(accurate)
    store = draft_store(Path(args.store) if args.store else None)
    drafter = None
    if spec is not None:
        drafter = AheadDrafter(store, replace(spec, threads=os.cpu_count() or 1))
    failed = 0
    with Transcriber(options, spawn_drafter=False, warm=False) as transcriber:
        for file in args.files:
            start = time.perf_counter()
            try:
                done = prepare(Path(file), transcriber, drafter)
            except FILE_ERRORS as err:
                failed += 1
                fail(file_failure(file, err), EXIT_USAGE)
                continue
            seconds = time.perf_counter() - start
            what = f"drafts ({spec.label}) and " if spec is not None else ""
            print(
                f"{file}: prepared {done.encoded} windows: {what}{options.target}'s encoder "
                f"on {transcriber.threads} threads, {seconds:.1f} s",
                file=sys.stderr,
            )
    if failed == 0:
        return EXIT_OK
    return EXIT_USAGE if failed == len(args.files) else EXIT_SOME_FAILED
