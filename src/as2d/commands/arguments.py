"""The Options of a command's parsed arguments, checked before any model loads: a bad
thread count, a target not on this machine or one that cannot decode the language and task
asked for is a `UsageError`, one line, not a failure after seconds of loading."""

from __future__ import annotations

import argparse
from pathlib import Path

from as2d.commands.common import UsageError
from as2d.drafting.family import AUTO
from as2d.options import Options, check, has_transcript_to_time


def model_options(args: argparse.Namespace) -> Options:
    """The Options of `add_model_options`' arguments, with a target found on this machine that
    can decode the language and task asked for (checked before any model loads)."""
    options = Options(
        target=args.target,
        runtime=args.runtime,
        device=args.device,
        dtype=args.dtype,
        method=args.method,
        language=args.language,
        task=getattr(args, "task", "transcribe"),
        request=getattr(args, "request", None),
        drafter=args.drafter,
        budget=args.budget,
        temperature=args.temperature,
        seed=args.seed,
        threads=args.threads,
        drafter_threads=args.drafter_threads,
        drafter_tail_s=args.drafter_tail,
        endpoint_ms=getattr(args, "endpoint_ms", None),
        drafts=args.drafts,
        prepared=args.prepared,
        drafts_dir=args.store,
        timestamps=timestamps(args),
    )
    return checked(options)


def prepare_options(args: argparse.Namespace) -> Options:
    """The Options of `as2d prepare`: those of the later requests that will find the work
    (target, dtype, device, threads, windows, drafter), checked as `model_options`' are and
    as a Transcriber's (one opens at once), and its files found."""
    options = Options(
        target=args.target,
        device=args.device,
        dtype=args.dtype,
        language=args.language,
        task=args.task,
        drafter=args.drafter or AUTO,
        threads=args.threads,
        endpoint_ms=args.endpoint_ms,
        drafts_dir=args.store,
    )
    checked(options, runnable=True)
    missing = [file for file in args.files if not Path(file).is_file()]
    if missing:
        raise UsageError(f"no such file: {missing[0]}")
    return options


def checked(options: Options, runnable: bool = False) -> Options:
    """`options`, once their thread counts are at least 1 and their target is found on this
    machine and can decode the language and task asked for (`check_target`); `runnable`:
    and a Transcriber can run them (`check`), which a command that opens one later checks
    there, after its own arguments.

    Raises:
        UsageError: one line, the first problem found.
    """
    from as2d.models.targets import check_target

    if options.threads is not None and options.threads < 1:
        raise UsageError("--threads must be at least 1")
    if options.drafter_threads is not None and options.drafter_threads < 1:
        raise UsageError("--drafter-threads must be at least 1")
    try:
        if runnable:
            check(options)
        check_target(options)
    except ValueError as err:
        raise UsageError(str(err)) from err
    return options


def timestamps(args: argparse.Namespace) -> str:
    """--timestamps, else segments for subtitles where there is a transcript to time: any
    target's (a chat target's through a Whisper aligner), or a Whisper target's translation."""
    from as2d.models.targets import times_words

    given = getattr(args, "timestamps", None)
    if given is not None or getattr(args, "format", None) not in ("srt", "vtt"):
        return given or "none"
    task = getattr(args, "task", "transcribe")
    # the target's config is read only where the task alone does not decide
    timed = has_transcript_to_time(task, task != "transcribe" and times_words(args.target))
    return "segment" if timed else "none"
