"""The `as2d` command: parse arguments, build Options, call the library. No decoding logic here.

Exit codes: 0 when every file was transcribed; 1 when some files failed and others did not;
2 for bad usage (unknown model, unwritable output directory, bad arguments) or when every
file failed; 130 when interrupted (Ctrl-C); 141 when stdout's reader has gone (`| head`:
the run stops at once and quietly, as a tool that SIGPIPE ended). Each failure is one line
on stderr; set AS2D_DEBUG=1 for a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

# Only what argument parsing needs is imported here (no torch, no transformers): `--help`
# answers at once, and each command imports the library modules it uses when it runs.
from as2d.backends import RUNTIMES
from as2d.commands.common import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_USAGE, UsageError, fail
from as2d.commands.models import export_model, list_models
from as2d.commands.prepare import draft_files, prepare_files
from as2d.commands.serve import listen, serve
from as2d.commands.transcribe import transcribe_files
from as2d.drafting.family import DEFAULT_TAIL_S
from as2d.eval import commands as eval_commands
from as2d.eval.catalog import DRAFTERS
from as2d.models.bundled import ModelNotFoundError
from as2d.options import (
    DTYPES,
    METHODS,
    TIMESTAMPS,
    parse_budget,
)
from as2d.runtime.launch import reap_resource_tracker, wait_for_starts
from as2d.writers import FORMATS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="as2d", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("transcribe", help="transcribe (or translate) audio files")
    run.add_argument(
        "files", nargs="+", metavar="FILE", help="wav/flac/ogg/mp3/m4a files; -: standard input"
    )
    run.add_argument("--task", default="transcribe", choices=("transcribe", "translate"))
    add_run_options(run)
    ask = commands.add_parser("ask", help="answer a request about a recording (audio LLMs)")
    ask.add_argument("file", metavar="FILE", help="wav/flac/ogg/mp3/m4a file")
    ask.add_argument("request", help='e.g. "Summarise the recording."')
    add_run_options(ask)
    add_listen_parser(commands)
    compare = commands.add_parser("compare", help="target-only vs as2d (or --method) on one file")
    compare.add_argument("file", metavar="FILE")
    compare.add_argument("--target", default="whisper-base")
    compare.add_argument("--method", default="as2d", choices=[m for m in METHODS if m != "target"])
    compare.add_argument("--drafter", default="auto")
    compare.add_argument("--budget", default="auto", type=budget, help="auto, or a fixed k (0-16)")
    compare.add_argument("--language", default=None)
    commands.add_parser("models", help="list the bundled models and whether they are cached")
    add_export_parser(commands)
    add_bench_parser(commands)
    add_exactness_parser(commands)
    add_serve_parser(commands)
    draft = commands.add_parser("draft", help="draft files ahead, for transcribe and serve")
    draft.add_argument("files", nargs="+", metavar="FILE")
    draft.add_argument("--drafter", default="auto")
    draft.add_argument("--language", default=None)
    draft.add_argument("--task", default="transcribe", choices=("transcribe", "translate"))
    draft.add_argument("--threads", type=int, default=None, help="default: every core")
    draft.add_argument("--store", default=None, help="default: $AS2D_CACHE/drafts")
    add_prepare_parser(commands)
    return parser


def add_export_parser(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser(
        "export", help="write a model's graphs, tokenizer and manifest to a folder for a device"
    )
    export.add_argument("name", metavar="NAME", help="bundled name, directory or HF id")
    export.add_argument("directory", type=Path, metavar="DIR", help="the folder to write")
    export.add_argument(
        "--runtime", required=True, choices=("mnn",), help="what runs it there: mnn (CPU)"
    )
    export.add_argument("--force", action="store_true", help="replace DIR if it holds anything")


def add_prepare_parser(commands: argparse._SubParsersAction) -> None:
    prepare = commands.add_parser(
        "prepare", help="draft files and run the target's encoder ahead, for transcribe and serve"
    )
    prepare.add_argument("files", nargs="+", metavar="FILE")
    prepare.add_argument("--target", default="whisper-base", help="the target of later requests")
    prepare.add_argument("--device", default="cpu", help="the target's device: cpu or cuda[:N]")
    prepare.add_argument("--dtype", default=None, choices=DTYPES, help="the target's weights")
    prepare.add_argument(
        "--threads", type=int, default=None, help="the target's threads in later requests "
        "(part of the key; default: every core, as a request with every draft ready uses)",
    )  # fmt: skip
    prepare.add_argument(
        "--drafter", default=None, help="default: the one that agrees best with the target "
        "(a bundled target's CTranslate2 int8 copy), not the fastest: nobody waits for it",
    )  # fmt: skip
    prepare.add_argument("--no-drafts", action="store_true", help="the encoder's work only")
    prepare.add_argument("--language", default=None)
    prepare.add_argument("--task", default="transcribe", choices=("transcribe", "translate"))
    prepare.add_argument("--endpoint-ms", type=int, default=None, metavar="MS")
    prepare.add_argument("--store", default=None, help="default: $AS2D_CACHE/drafts")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by `transcribe` and `ask`: models, method, decoding, input, output."""
    add_model_options(parser)
    add_stdin_options(parser)
    parser.add_argument("--prompt", default=None, help="text said before (Whisper targets)")
    parser.add_argument("--format", default="txt", choices=FORMATS)
    parser.add_argument(
        "--timestamps",
        default=None,
        choices=TIMESTAMPS,
        help="segment: sentence-like cues; word: and word times (json, vtt); "
        "default: segment for srt/vtt, else none",
    )
    parser.add_argument("-o", "--output-dir", type=Path, help="write FILE.<format> here")
    parser.add_argument("--skip-existing", action="store_true", help="skip files already written")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="spread the files over a Ray cluster: auto, ray://HOST:PORT, or local",
    )
    parser.add_argument(
        "--ray-cpus-per-worker", type=int, default=2, metavar="N", help="CPUs of each worker"
    )
    parser.add_argument(
        "--timeline", type=Path, metavar="FILE.png", help="draw target/drafter activity (PNG)"
    )


def add_stdin_options(parser: argparse.ArgumentParser) -> None:
    """How `-` (standard input, read as it arrives) is read: a container, or raw PCM."""
    parser.add_argument(
        "--input-format",
        default="auto",
        choices=("auto", "s16le"),
        help="of -: auto (wav, flac, ogg, mp3...), or s16le: raw 16-bit little-endian PCM",
    )
    parser.add_argument("--rate", type=int, default=16_000, help="s16le's sample rate (Hz)")
    parser.add_argument("--channels", type=int, default=1, help="s16le's channels")


def add_listen_parser(commands: argparse._SubParsersAction) -> None:
    listen = commands.add_parser("listen", help="transcribe the microphone until Ctrl-C")
    listen.add_argument(
        "--input-device",
        type=input_device,
        default=None,
        metavar="NAME|INDEX",
        help="the microphone (default: the system's); --device is the target's",
    )
    listen.add_argument("--task", default="transcribe", choices=("transcribe", "translate"))
    add_model_options(listen)


def input_device(value: str) -> str | int:
    """A sound device's index (a number) or a part of its name, as sounddevice takes it."""
    return int(value) if value.isdigit() else value


def add_serve_parser(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="serve OpenAI's audio API over HTTP")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--max-upload-mb", type=float, default=200.0)
    serve.add_argument(
        "--max-recordings-mb", type=float, default=1024.0,
        help="recordings sent ahead kept on disk; beyond it the least recently used go",
    )  # fmt: skip
    serve.add_argument("--queue", type=int, default=16, help="requests waiting, then 503")
    serve.add_argument(
        "--realtime-sessions", type=int, default=4,
        help="live WebSocket sessions at once (/v1/realtime), then refused",
    )  # fmt: skip
    serve.add_argument(
        "--api-key", default=None, metavar="KEY",
        help="every request must carry it (default: $AS2D_API_KEY); without one, the server "
        "listens on 127.0.0.1 only",
    )  # fmt: skip
    serve.add_argument(
        "--allow-origin", action="append", default=[], metavar="ORIGIN",
        help="a web page's origin allowed besides the server's own (e.g. https://example.org; "
        "repeat for more, * for any)",
    )  # fmt: skip
    add_model_options(serve)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The models, the method and how they decode (`transcribe`, `ask`, `listen`, `serve`)."""
    parser.add_argument("--target", default="whisper-base", help="bundled name, directory or HF id")
    parser.add_argument("--method", default="as2d", choices=METHODS, help="default: as2d")
    parser.add_argument(
        "--drafter",
        default="auto",
        help="auto (default): whisper-tiny.en for English windows, whisper-base for others, "
        "ct2:whisper-base to translate; or a Whisper model, or ct2:NAME (CTranslate2 int8)",
    )
    add_tail_option(parser)
    parser.add_argument(
        "--endpoint-ms",
        type=int,
        default=None,
        metavar="MS",
        help="a window per utterance, ended by a pause of MS ms (100-10000; as live audio is "
        "cut); default: windows of up to 30 s holding several utterances",
    )
    parser.add_argument("--budget", default="auto", type=budget, help="auto, or a fixed k (0-16)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed")
    parser.add_argument("--drafter-threads", type=int, default=None, help="default: half the cores")
    parser.add_argument("--language", default=None, help="e.g. en; default: detect (multilingual)")
    parser.add_argument(
        "--drafts", default="auto", choices=("auto", "off"), help="use drafts made by as2d draft"
    )
    parser.add_argument(
        "--prepared", default="auto", choices=("auto", "off"),
        help="use the target's encoder outputs stored by as2d prepare",
    )  # fmt: skip
    parser.add_argument("--store", default=None, help="the draft store; default $AS2D_CACHE/drafts")
    parser.add_argument("--threads", type=int, default=None, help="the target's threads")
    add_runtime_options(parser)


def add_tail_option(parser: argparse.ArgumentParser) -> None:
    """The drafter's encoder input (requests, and every drafter of `bench` and `exactness`)."""
    parser.add_argument(
        "--drafter-tail",
        default=DEFAULT_TAIL_S,
        type=tail,
        metavar="S|full",
        help=f"silence after the speech the drafter's encoder reads (default {DEFAULT_TAIL_S}); "
        "full: Whisper's 30 s",
    )


def add_runtime_options(parser: argparse.ArgumentParser, side_by_side: bool = False) -> None:
    """What runs the target: runtime (`side_by_side`: several, comma-separated, checked by the
    command), device, dtype."""
    if side_by_side:
        parser.add_argument(
            "--runtime",
            default="torch",
            help="torch (default), mnn (CPU), or several side by side: torch,mnn",
        )
    else:
        parser.add_argument(
            "--runtime", default="torch", choices=RUNTIMES, help="torch (default), or mnn (CPU)"
        )
    parser.add_argument("--device", default="cpu", help="the target's device: cpu or cuda[:N]")
    parser.add_argument("--dtype", default=None, choices=DTYPES, help="the target's weights")


def add_bench_parser(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="compare methods on a dataset: speed, identity, WER")
    bench.add_argument("dataset", metavar="DATASET", help="manifest.jsonl, folder, asterisk:LANG")
    bench.add_argument("--out", type=Path, required=True, help="results, summary, report, plots")
    bench.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    bench.add_argument("--drafters", default=",".join(DRAFTERS), help="comma-separated")
    bench.add_argument("--budgets", default="auto,2,4,8,16", help="comma-separated: auto or k")
    add_tail_option(bench)
    bench.add_argument("--repeats", type=int, default=1)
    bench.add_argument("--limit", type=int, default=None, help="only the first N recordings")
    bench.add_argument("--subset", default=None, help="only the manifest's rows of this subset")
    bench.add_argument("--target", default="whisper-base")
    add_runtime_options(bench, side_by_side=True)
    bench.add_argument("--language", default=None, help="default: the dataset's, else detect")
    bench.add_argument("--task", default="transcribe", choices=("transcribe", "translate"))
    bench.add_argument("--quiet-wait", type=float, default=0.0, help="max s to wait for others")
    bench.add_argument(
        "--timestamps", default="none", choices=TIMESTAMPS, help="also time words, apart"
    )
    bench.add_argument("--external", action="store_true", help="also time CTranslate2 greedy")
    bench.add_argument(
        "--drafts",
        default="live",
        choices=("live", "ready", "both"),
        help="as2d with its drafter process (live), with every draft made ahead (ready), both",
    )
    bench.add_argument(
        "--prepared", action="store_true",
        help="also target-only and drafts-ready as2d with every encoder output made ahead",
    )  # fmt: skip
    bench.add_argument("--cache", type=Path, default=None, help="asterisk:LANG downloads")
    bench.add_argument("--no-progress", action="store_true")


def add_exactness_parser(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "exactness", help="count token positions where methods differ from target-only"
    )
    check.add_argument("dataset", metavar="DATASET", help="manifest.jsonl, folder, asterisk:LANG")
    check.add_argument("--target", default="whisper-base")
    add_runtime_options(check, side_by_side=True)
    check.add_argument("--methods", default="target,as2d,pld,sd", help="comma-separated")
    check.add_argument("--drafters", default="auto,ct2:whisper-tiny.en")
    check.add_argument("--budgets", default="auto", help="comma-separated: auto or k")
    add_tail_option(check)
    check.add_argument("--language", default=None, help="default: the dataset's, else detect")
    check.add_argument("--task", default="transcribe", choices=("transcribe", "translate"))
    check.add_argument("--limit", type=int, default=None, help="only the first N recordings")
    check.add_argument("--subset", default=None, help="only the manifest's rows of this subset")
    check.add_argument("--cache", type=Path, default=None, help="asterisk:LANG downloads")
    check.add_argument("--no-progress", action="store_true")


def budget(value: str) -> int | None:
    """`auto` -> None (chosen per step); a number -> a fixed budget k (`parse_budget`)."""
    try:
        return parse_budget(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def tail(value: str) -> float | None:
    """`full` -> None (Whisper's 30 s); seconds >= 0 -> the drafter's tail after the speech."""
    if value == "full":
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 30:
        raise argparse.ArgumentTypeError(
            f"the tail is seconds from 0 to 30, or full, got {value!r}"
        )
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; returns its exit code.

    Ctrl-C ends it with one line and 130 (128 + SIGINT, as a shell reports it): drafter
    processes are closed on the way out, and no output file is left half written. A closed
    stdout (`as2d transcribe ... | head`) ends it as quietly, with 141 (`closed_stdout`).
    """
    with watched_interrupts() as interrupts:
        try:
            return run_command(argv)
        except (UsageError, ModelNotFoundError) as err:
            return fail(str(err), EXIT_USAGE)
        except BrokenPipeError:
            return closed_stdout()
        except KeyboardInterrupt:
            return fail("interrupted", EXIT_INTERRUPTED)
        except Exception:
            if interrupts.received:  # what the code that Ctrl-C hit made of it
                return fail("interrupted", EXIT_INTERRUPTED)
            raise


def entry() -> None:
    """The `as2d` executable: `main`, then an exit that leaves out the interpreter's teardown
    (a third of a second with torch loaded, a tenth of a one-off transcription) once every
    file is written, every drafter process closed and every child reaped; Python's own exit
    where `main` raises."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = closed_stdout()
    except (OSError, ValueError):  # a closed stream: nothing more can be said
        pass
    wait_for_starts()
    reap_resource_tracker()
    os._exit(code)


def closed_stdout() -> int:
    """stdout's reader has gone: nothing more is said (what Python would flush into the pipe
    at exit goes to /dev/null), and the code is a shell's for a tool that SIGPIPE ended, as
    Python's documentation of SIGPIPE recommends. Drafter processes were closed on the way."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # stdout is not a file (replaced, closed)
        pass
    return EXIT_BROKEN_PIPE


def run_command(argv: Sequence[str] | None) -> int:
    """Parses `argv` (None: the process's arguments) and runs the command it names."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for reports: the exact command
    if args.command == "models":
        return list_models()
    if args.command == "export":
        return export_model(args)
    if args.command == "compare":
        return eval_commands.compare_methods(args)
    if args.command == "bench":
        return eval_commands.bench_dataset(args)
    if args.command == "exactness":
        return eval_commands.exactness_dataset(args)
    if args.command == "serve":
        return serve(args)
    if args.command == "draft":
        return draft_files(args)
    if args.command == "prepare":
        return prepare_files(args)
    if args.command == "listen":
        return listen(args)
    if args.command == "ask":
        args.files, args.task = [args.file], "ask"
    return transcribe_files(args)


class Interrupts:
    """Ctrl-C raised as Python raises it (KeyboardInterrupt), and remembered: the code it
    interrupts may turn it into another error (an extension module interrupted while it
    loads fails with an ImportError)."""

    def __init__(self) -> None:
        self.received = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.received = True
        raise KeyboardInterrupt


@contextmanager
def watched_interrupts() -> Iterator[Interrupts]:
    """SIGINT handled by an `Interrupts` in the block (in the main thread, the only one that
    handles signals; elsewhere none is ever received)."""
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = signal.signal(signal.SIGINT, interrupts)
    try:
        yield interrupts
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


if __name__ == "__main__":
    entry()
