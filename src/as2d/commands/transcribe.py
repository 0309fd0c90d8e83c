"""`as2d transcribe` and `as2d ask`: files, folders of them, `.jsonl` manifests and standard
input (`-`, read as it arrives: `audio/stream.py`), each written to a file or printed, with
a progress bar on stderr; on one machine, or spread over a Ray cluster (`--ray`)."""

from __future__ import annotations

import argparse
import os
import select
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from as2d.commands.arguments import model_options
from as2d.commands.common import (
    EXIT_OK,
    EXIT_SOME_FAILED,
    EXIT_USAGE,
    UsageError,
    fail,
    file_durations,
    open_transcriber,
    prepare_output_dir,
    warn,
)
from as2d.options import Options, check
from as2d.writers import STDIN, FileResult, output_path, render, write_atomic

if TYPE_CHECKING:
    import numpy as np

    from as2d.api import Transcriber
    from as2d.live import LiveSession
    from as2d.types import WindowResult


def stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (`as2d transcribe ... | head` has read
    its fill): poll reports an error on it before anything more is written."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
    except (AttributeError, OSError, ValueError):  # not a file (replaced, closed); no poll
        return False
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def transcribe_files(args: argparse.Namespace) -> int:
    """`as2d transcribe` (and `ask`, one file): every input checked, then each decoded."""
    args.files = expand_inputs(args.files)
    check_stdin(args)
    out_dir = prepare_output_dir(args.output_dir, args.skip_existing)
    check_timeline(args.timeline)
    if out_dir is not None:
        check_distinct_outputs(args.files, out_dir, args.format)
    options = model_options(args)
    todo = [f for f in args.files if not (out_dir and skip(f, out_dir, args))]
    if len(todo) < len(args.files):
        total = f"{len(args.files)} file{'s' if len(args.files) > 1 else ''}"
        skipped = len(args.files) - len(todo)
        print(f"skipped {skipped} of {total}: output already in {out_dir}", file=sys.stderr)
    if not todo:
        return EXIT_OK
    if args.ray is not None:
        if STDIN in todo:
            raise UsageError("--ray reads files: it cannot take standard input (-)")
        failed = transcribe_on_cluster(options, todo, out_dir, args)
    else:
        with open_transcriber(options, todo) as transcriber:
            failed = sum(not transcribe_one(transcriber, f, out_dir, args) for f in todo)
    if failed == 0:
        return EXIT_OK
    return EXIT_USAGE if failed == len(todo) else EXIT_SOME_FAILED


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """Files as given; a folder's audio files (sorted) and a `.jsonl` manifest's in its place."""
    from as2d.eval.datasets import DatasetError, load_folder, load_manifest

    files: list[str] = []
    try:
        for item in inputs:
            path = Path(item)
            if path.is_dir():
                files += [str(r.audio) for r in load_folder(path)]
            elif path.suffix == ".jsonl" and path.is_file():
                files += [str(r.audio) for r in load_manifest(path)]
            else:
                files.append(item)
    except DatasetError as err:
        raise UsageError(str(err)) from err
    return files


def check_stdin(args: argparse.Namespace) -> None:
    """`-` at most once, from a pipe or a file (not a terminal), with a rate and channels
    that raw PCM can have."""
    if args.files.count(STDIN) > 1:
        raise UsageError("standard input (-) can be read only once")
    if args.rate < 1 or args.channels < 1:
        raise UsageError("--rate and --channels must be at least 1")
    if STDIN in args.files and sys.stdin.isatty():
        raise UsageError("- reads audio from standard input, a terminal here: pipe audio into it")


def stdin_blocks(args: argparse.Namespace) -> Iterator[np.ndarray]:
    """Standard input's audio as 16 kHz blocks, as it arrives: raw PCM (`--input-format
    s16le`, `--rate`, `--channels`), else a container FFmpeg reads from a pipe."""
    from as2d.audio.stream import container_blocks, pcm_blocks

    if args.input_format == "s16le":
        return pcm_blocks(sys.stdin.buffer, args.rate, args.channels, warn=warn)
    return container_blocks(sys.stdin.buffer)


def follow(
    session: LiveSession, blocks: Iterable[np.ndarray], final: Callable[[WindowResult], object]
) -> None:
    """A live stream to its end: each utterance's result to `final`, the drafter's
    provisional text meanwhile on a terminal's stderr (`as2d listen`, `as2d transcribe -`)."""
    caption = Caption(sys.stderr)
    for event in session.run(blocks):
        if event.kind == "delta":
            caption.show(event.text)
        elif event.kind == "completed" and event.result is not None:
            caption.show("")
            final(event.result)


class Caption:
    """The provisional text of the utterance being spoken, on one line of a terminal that it
    rewrites (nothing where `stream` is not a terminal)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.on = stream.isatty()

    def show(self, text: str) -> None:
        if self.on:
            width = shutil.get_terminal_size().columns - 3
            tail = text[-width:] if text else ""
            self.stream.write("\r\033[K" + (f"… {tail}" if tail else ""))
            self.stream.flush()


def print_window(window: WindowResult) -> None:
    """A live source's window, printed the moment it is decoded: one line of text."""
    if window.text:
        sys.stdout.write(window.text + "\n")
        sys.stdout.flush()


def transcribe_on_cluster(
    options: Options, files: Sequence[str], out_dir: Path | None, args: argparse.Namespace
) -> int:
    """`--ray`: the files spread over a Ray cluster's workers (runtime/cluster.py); returns
    how many failed."""
    from tqdm import tqdm

    from as2d.models.targets import adapter_class
    from as2d.runtime.cluster import FileTask, RayUnavailableError, print_line, transcribe_on_ray

    if out_dir is None:
        raise UsageError("--ray writes its outputs to a folder: give -o DIR")
    if args.ray_cpus_per_worker < 1:
        raise UsageError("--ray-cpus-per-worker must be at least 1")
    try:
        check(options)
        adapter_class(
            options.target, options.runtime
        )  # a bad model name: one line here, not on every worker
    except ValueError as err:
        raise UsageError(str(err)) from err
    durations = dict(zip(files, file_durations(files), strict=True))
    tasks = [FileTask(f, output_path(f, out_dir, args.format), durations[f]) for f in files]
    total = round(sum(durations.values()), 1)
    bar = tqdm(total=total, unit="s", desc="ray", disable=args.no_progress or None)
    try:
        with bar:
            run = transcribe_on_ray(
                args.ray, options, tasks, args.format, args.ray_cpus_per_worker, args.prompt,
                progress=lambda done: bar.update(round(min(done, total) - bar.n, 1)),
                report=print_line,
            )  # fmt: skip
    except (RayUnavailableError, ValueError) as err:
        raise UsageError(str(err)) from err
    print(run.summary(), file=sys.stderr)
    return len(run.failed)


def check_timeline(path: Path | None) -> None:
    """--timeline's folder exists and is writable: found before any decoding, not after."""
    if path is None:
        return
    if not path.parent.is_dir():
        raise UsageError(f"--timeline {path}: {path.parent} is not a folder")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise UsageError(f"--timeline {path}: the folder {path.parent} is not writable")


def check_distinct_outputs(files: Sequence[str], out_dir: Path, fmt: str) -> None:
    """Two inputs with the same name (es/a.wav, fr/a.wav) must not overwrite one output."""
    seen: dict[Path, str] = {}
    for file in files:
        path = output_path(file, out_dir, fmt)
        if path in seen and Path(seen[path]).resolve() != Path(file).resolve():
            raise UsageError(f"{seen[path]} and {file} would both be written to {path}")
        seen[path] = file


def skip(file: str, out_dir: Path, args: argparse.Namespace) -> bool:
    return bool(args.skip_existing and output_path(file, out_dir, args.format).exists())


def transcribe_one(
    transcriber: Transcriber, file: str, out_dir: Path | None, args: argparse.Namespace
) -> bool:
    """Transcribe one file and write or print it; report a failure in one line. Where stdout's
    reader has gone, raises BrokenPipeError before decoding: the command ends (`cli.main`)."""
    from as2d.api import FILE_ERRORS, file_failure

    if out_dir is None and stdout_gone():
        raise BrokenPipeError("stdout's reader has gone")
    live_text = file == STDIN and out_dir is None and args.format == "txt"
    try:
        result = run_with_progress(transcriber, file, args, live_text)
        content = render(result, args.format)
        if out_dir is not None:
            write_atomic(output_path(file, out_dir, args.format), content)
        elif not live_text:  # (live text is printed window by window)
            sys.stdout.write(content)
            sys.stdout.flush()
    except BrokenPipeError:
        raise  # stdout's reader has gone: not this file's failure
    except FILE_ERRORS as err:
        fail(file_failure(file, err), EXIT_USAGE)
        if os.environ.get("AS2D_DEBUG"):
            raise
        return False
    if args.timeline is not None:
        draw_timeline(transcriber, result, args.timeline, several=len(args.files) > 1)
    s = result.stats
    print(
        f"{'stdin' if file == STDIN else file}: {s.audio_s:.1f} s of audio in {s.wall_s:.2f} s "
        f"(RTF {s.rtf:.3f}, {s.tokens_per_s:.1f} tokens/s, {s.tokens} tokens)",
        file=sys.stderr,
    )
    return True


def draw_timeline(
    transcriber: Transcriber, result: FileResult, timeline: Path, several: bool
) -> None:
    """--timeline: the picture of the run that made `result`. One that cannot be drawn is a
    warning: the transcript is there all the same."""
    from as2d.eval.timeline import timeline_path, write_timeline

    path = timeline_path(timeline, result.file, several)
    try:
        write_timeline(transcriber, result, path)
    except (OSError, ValueError) as err:  # not the temporary file's name: what went wrong
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        print(f"as2d: warning: {result.file}: no timeline at {path}: {reason}", file=sys.stderr)


def run_with_progress(
    transcriber: Transcriber, file: str, args: argparse.Namespace, live_text: bool = False
) -> FileResult:
    """Decodes `file` (`-`: standard input, as it arrives) with a bar of its seconds on
    stderr; `live_text`: each window's text printed as it is decoded, in place of the bar."""
    from tqdm import tqdm

    from as2d.audio.load import audio_duration

    live = file == STDIN
    total = None if live else round(audio_duration(file), 1)
    name = "stdin" if live else Path(file).name
    quiet = args.no_progress or live_text
    with tqdm(total=total, unit="s", desc=name, disable=quiet or None) as bar:

        def finished(window: WindowResult) -> None:
            bar.update(round(window.end - bar.n, 1))
            if live_text:
                print_window(window)

        endpoint_ms = transcriber.options.endpoint_ms
        if live_text and endpoint_ms is not None and not args.prompt:
            return live_lines(transcriber, stdin_blocks(args), endpoint_ms, finished)
        audio = stdin_blocks(args) if live else None
        return transcriber.transcribe_file(file, args.prompt, finished, audio)


def live_lines(
    transcriber: Transcriber,
    blocks: Iterator[np.ndarray],
    endpoint_ms: int,
    on_window: Callable[[WindowResult], object],
) -> FileResult:
    """Standard input cut at each endpoint, heard as `as2d listen` hears a microphone
    (`LiveSession`): every method decodes a window in the pause before its endpoint, so its
    line comes once the endpoint is heard, not a decode later; the drafter's provisional text
    on a terminal's stderr. The windows and texts are `transcribe_file`'s."""
    import time

    from as2d.live import LiveSession
    from as2d.types import RunStats

    o = transcriber.options
    start = time.perf_counter()
    session = LiveSession(transcriber, endpoint_ms, early=True)
    results: list[WindowResult] = []

    def final(result: WindowResult) -> None:
        results.append(result)
        on_window(result)

    try:
        follow(session, blocks, final)
    finally:
        session.drop()  # stops the target's side where the loop failed (a reader gone)
    tokens = sum(len(w.token_ids) for w in results)
    stats = RunStats.since(
        start, time.perf_counter(), session.windower.received_s, tokens,
        transcriber.decoder.activity(), session.language,
    )  # fmt: skip
    return FileResult(STDIN, o.method, o.target, o.drafter_used, results, stats)
