"""`as2d models`: the bundled models and whether they are cached on this machine; `as2d
export`: a model written to a folder of its own for a device (`models/mnn_export.py`)."""

from __future__ import annotations

import argparse
import sys

from as2d.commands.common import EXIT_OK, UsageError, quiet_transformers


def list_models() -> int:
    from as2d.models.bundled import bundled_names, is_cached

    for name in bundled_names():
        print(f"{name}\t{'cached' if is_cached(name) else 'not cached (built on first use)'}")
    return EXIT_OK


def export_model(args: argparse.Namespace) -> int:
    """`as2d export --runtime mnn NAME DIR`: NAME's graphs, config, tokenizer and manifest
    written to DIR, whole or not at all, each step said on stderr; then how to run it."""
    from as2d.models.mnn_export import write_export

    quiet_transformers()
    try:
        manifest = write_export(args.name, args.directory, args.force, report=progress)
    except ValueError as err:  # a bad name, DIR not empty, no MNN to export with
        raise UsageError(str(err)) from err
    except OSError as err:
        raise UsageError(f"cannot write {args.directory}: {err.strerror or err}") from err
    megabytes = sum(graph.bytes for graph in manifest.graphs.values()) / 1e6
    progress(
        f"{args.name}: exported for {args.runtime} to {args.directory} ({megabytes:.0f} MB); "
        f"run it with: as2d transcribe FILE --runtime {args.runtime} --target {args.directory}"
    )
    return EXIT_OK


def progress(line: str) -> None:
    """A step of a command that writes no output of its own on stdout: a line on stderr."""
    print(line, file=sys.stderr)
