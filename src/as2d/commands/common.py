"""What the commands share: exit codes, `UsageError`, one-line failures and warnings, the
output folder's checks, and the Transcriber of a one-off command."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from as2d.options import Options, check, drafter_spec
from as2d.runtime.drafter import start_drafter
from as2d.runtime.drafts import drafter_needed
from as2d.writers import STDIN

if TYPE_CHECKING:
    from as2d.api import Transcriber

EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 128 + 2  # Ctrl-C: 128 + SIGINT, as a shell reports a process it ended
EXIT_BROKEN_PIPE = 128 + 13  # stdout's reader has gone: 128 + SIGPIPE, as for `yes | head`


class UsageError(Exception):
    """A problem with the command line itself: nothing was transcribed."""


def fail(message: str, code: int) -> int:
    print(f"as2d: error: {message}", file=sys.stderr)
    return code


def warn(message: str) -> None:
    """A warning on stderr, one line: what goes on regardless."""
    print(f"as2d: warning: {message}", file=sys.stderr)


def quiet_transformers() -> None:
    """Our own bar is the only one on stderr: none from transformers while models load.
    transformers reads the hub's setting when it is imported (a Qwen target imports it, a
    Whisper target does not); where it is loaded already, it is told directly."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging

        logging.disable_progress_bar()


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


def open_transcriber(options: Options, files: Sequence[str]) -> Transcriber:
    """The Transcriber of a one-off command over `files`: its drafter process starts before
    torch is imported here, so that both load side by side, and no warm-up passes that only
    serve timing are run (see `Transcriber`). Where every file's drafts are stored (`as2d
    draft`) or no file is long enough for drafting to pay on this machine
    (`drafter_needed`), no drafter process starts at all."""
    try:
        check(options)  # before a drafter is started for nothing
        spawn = drafter_needed(options, files, file_durations(files))
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


def file_durations(files: Sequence[str]) -> Iterator[float]:
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
