"""The bodies of the `as2d` commands that decode audio: transcribe, ask, listen, draft, prepare,
serve, models (`cli.py` parses the command line and calls one; `eval/commands.py` has the evaluation
ones). `-` in place of a file is standard input, read as it arrives (`audio/stream.py`).

Each takes the parsed arguments and returns an exit code (see `cli.py`); a problem with
the command line itself is raised as `UsageError`.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import socket
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

# Only what every command needs is imported here (no torch, no transformers): each one
# imports the library modules it uses when it runs.
from as2d.drafting.family import AUTO
from as2d.options import (
    Options,
    check,
    drafter_spec,
    has_transcript_to_time,
    prepare_drafter,
)
from as2d.runtime.drafter import start_drafter
from as2d.runtime.drafts import drafter_needed
from as2d.writers import STDIN, FileResult, output_path, render, write_atomic

if TYPE_CHECKING:
    import numpy as np

    from as2d.api import Transcriber
    from as2d.types import WindowResult

EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 128 + 2  # Ctrl-C: 128 + SIGINT, as a shell reports a process it ended
EXIT_BROKEN_PIPE = 128 + 13  # stdout's reader has gone: 128 + SIGPIPE, as for `yes | head`


class UsageError(Exception):
    """A problem with the command line itself: nothing was transcribed."""


def fail(message: str, code: int) -> int:
    print(f"as2d: error: {message}", file=sys.stderr)
    return code


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


def quiet_transformers() -> None:
    """Our own bar is the only one on stderr: none from transformers while models load.
    transformers reads the hub's setting when it is imported (a Qwen target imports it, a
    Whisper target does not); where it is loaded already, it is told directly."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging

        logging.disable_progress_bar()


def list_models() -> int:
    from as2d.models.bundled import bundled_names, is_cached

    for name in bundled_names():
        print(f"{name}\t{'cached' if is_cached(name) else 'not cached (built on first use)'}")
    return EXIT_OK


def transcribe_files(args: argparse.Namespace) -> int:
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


def warn(message: str) -> None:
    """A warning on stderr, one line: what goes on regardless."""
    print(f"as2d: warning: {message}", file=sys.stderr)


def print_window(window: WindowResult) -> None:
    """A live source's window, printed the moment it is decoded: one line of text."""
    if window.text:
        sys.stdout.write(window.text + "\n")
        sys.stdout.flush()


def listen(args: argparse.Namespace) -> int:
    """`as2d listen`: the microphone, transcribed utterance by utterance until Ctrl-C
    (`cli.main` answers that with 130): each final text on a line of stdout, the drafter's
    provisional text meanwhile on a terminal's stderr (`LiveSession`). No microphone is a
    usage error, found before any model loads."""
    from as2d.audio.stream import MicrophoneError, check_microphone, microphone_blocks
    from as2d.live import DEFAULT_ENDPOINT_MS, LiveSession

    options = model_options(args)
    endpoint_ms = options.endpoint_ms or DEFAULT_ENDPOINT_MS
    try:
        name = check_microphone(args.input_device)
    except MicrophoneError as err:
        raise UsageError(str(err)) from err
    # a live source is as long as it goes on: [STDIN] stands for one in the drafter's choice
    with open_transcriber(options, [STDIN]) as transcriber:
        print(f"listening to {name} (Ctrl-C to stop)", file=sys.stderr)
        session = LiveSession(transcriber, endpoint_ms)
        caption = Caption(sys.stderr)
        try:
            for event in session.run(microphone_blocks(args.input_device)):
                if event.kind == "delta":
                    caption.show(event.text)
                elif event.kind == "completed" and event.result is not None:
                    caption.show("")
                    print_window(event.result)
        except MicrophoneError as err:
            raise UsageError(str(err)) from err
    return EXIT_OK


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
    durations = dict(zip(files, _durations(files), strict=True))
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


def model_options(args: argparse.Namespace) -> Options:
    """The Options of `add_model_options`' arguments, with a target found on this machine that
    can decode the language and task asked for (checked before any model loads)."""
    from as2d.models.targets import check_target

    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be at least 1")
    if args.drafter_threads is not None and args.drafter_threads < 1:
        raise UsageError("--drafter-threads must be at least 1")
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
    try:
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
    accurate = replace(options, drafter=prepare_drafter(options))
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
            what = f"drafts ({spec.name}) and " if spec is not None else ""
            print(
                f"{file}: prepared {done.encoded} windows: {what}{options.target}'s encoder "
                f"on {transcriber.threads} threads, {seconds:.1f} s",
                file=sys.stderr,
            )
    if failed == 0:
        return EXIT_OK
    return EXIT_USAGE if failed == len(args.files) else EXIT_SOME_FAILED


def prepare_options(args: argparse.Namespace) -> Options:
    """The Options of `as2d prepare`: those of the later requests that will find the work
    (target, dtype, device, threads, windows, drafter), checked before any model loads."""
    from as2d.models.targets import check_target

    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be at least 1")
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
    try:
        check(options)
        check_target(options)
    except ValueError as err:
        raise UsageError(str(err)) from err
    missing = [file for file in args.files if not Path(file).is_file()]
    if missing:
        raise UsageError(f"no such file: {missing[0]}")
    return options


def serve(args: argparse.Namespace) -> int:
    """Serves until SIGINT/SIGTERM (see `server.py`)."""
    options = model_options(args)
    if args.queue < 1 or args.max_upload_mb <= 0 or args.realtime_sessions < 0:
        raise UsageError(
            "--queue must be at least 1, --max-upload-mb above 0, --realtime-sessions 0 or more"
        )
    if args.max_recordings_mb <= 0:
        raise UsageError("--max-recordings-mb must be above 0")
    try:
        check(options)
    except ValueError as err:
        raise UsageError(str(err)) from err
    from as2d.server.access import KEY_ENV, server_access

    try:
        key = args.api_key or os.environ.get(KEY_ENV) or None
        access = server_access(key, args.allow_origin, args.host)
    except ValueError as err:
        raise UsageError(str(err)) from err
    check_address(args.host, args.port)
    from as2d.server import serve as run_server

    quiet_transformers()
    run_server(
        options, args.host, args.port, args.max_upload_mb, args.queue, args.realtime_sessions,
        args.max_recordings_mb,
        access,
    )  # fmt: skip
    return EXIT_OK


def check_address(host: str, port: int) -> None:
    """`as2d serve` can listen on host:port (free, allowed): found before the models load,
    in words, not after them in uvicorn's errno."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind((host, port))
    except OSError as err:
        raise UsageError(f"cannot listen on {host}:{port}: {err.strerror}") from err


def open_transcriber(options: Options, files: Sequence[str]) -> Transcriber:
    """The Transcriber of a one-off command over `files`: its drafter process starts before
    torch is imported here, so that both load side by side, and no warm-up passes that only
    serve timing are run (see `Transcriber`). Where every file's drafts are stored (`as2d
    draft`) or no file is long enough for drafting to pay on this machine
    (`drafter_needed`), no drafter process starts at all."""
    try:
        check(options)  # before a drafter is started for nothing
        spawn = drafter_needed(options, files, _durations(files))
        drafter = start_drafter(drafter_spec(options)) if spawn else None
    except ValueError as err:
        raise UsageError(str(err)) from err
    try:
        from as2d.api import Transcriber

        quiet_transformers()
        # The Transcriber owns the drafter from here on.
        return Transcriber(options, drafter_process=drafter, spawn_drafter=spawn, warm=False)
    except BaseException as err:
        if drafter is not None:  # Ctrl-C while torch loads, before the Transcriber owns it
            drafter.close()
        if isinstance(err, ValueError):
            raise UsageError(str(err)) from err
        raise


def _durations(files: Sequence[str]) -> Iterator[float]:
    """Each file's length in seconds from its header; 0 for one that cannot be read (it is
    reported when its turn comes); standard input's is not known, and may be endless."""
    from as2d.audio.load import AudioError, audio_duration

    for file in files:
        if file == STDIN:
            yield float("inf")
            continue
        try:
            yield audio_duration(file)
        except AudioError:
            yield 0.0


def prepare_output_dir(out_dir: Path | None, skip_existing: bool) -> Path | None:
    if out_dir is None:
        if skip_existing:
            raise UsageError("--skip-existing needs --output-dir")
        return None
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create output directory {out_dir}: {err.strerror}") from err
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise UsageError(f"output directory {out_dir} is not writable")
    return out_dir


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
        if live_text:
            pass  # printed window by window
        elif out_dir is None:
            sys.stdout.write(content)
            sys.stdout.flush()
        else:
            write_atomic(output_path(file, out_dir, args.format), content)
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

        audio = stdin_blocks(args) if live else None
        return transcriber.transcribe_file(file, args.prompt, finished, audio)
