"""The commands that run until they are stopped: `as2d serve` (OpenAI's audio API over HTTP)
and `as2d listen` (the microphone, utterance by utterance)."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from as2d.commands.arguments import model_options
from as2d.commands.common import EXIT_OK, UsageError, open_transcriber, quiet_transformers
from as2d.commands.transcribe import follow, print_window
from as2d.options import check
from as2d.writers import STDIN


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
        try:
            follow(session, microphone_blocks(args.input_device), print_window)
        except MicrophoneError as err:
            raise UsageError(str(err)) from err
    return EXIT_OK
