"""The `as2d` command: parse arguments, build Options, call the library. No decoding logic here.

Exit codes: 0 when every file was transcribed; 1 when some files failed and others did not;
2 for bad usage (unknown model, unwritable output directory, bad arguments) or when every
file failed; 130 when interrupted (Ctrl-C). Each failure is one line on stderr; set
AS2D_DEBUG=1 for a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

# Only what argument parsing needs is imported here (no torch, no transformers): `--help`
# answers at once, and each command imports the library modules it uses when it runs.
from as2d.engine.gate import drafting_may_pay
from as2d.eval.catalog import DRAFTERS, Config, catalog
from as2d.models.bundled import ModelNotFoundError, cache_root
from as2d.options import (
    DTYPES,
    METHODS,
    TIMESTAMPS,
    Options,
    check,
    drafter_spec,
    has_transcript_to_time,
    parse_budget,
)
from as2d.runtime.drafter import start_drafter
from as2d.runtime.drafts import stored_drafts
from as2d.writers import FORMATS, FileResult, output_path, render, write_atomic

if TYPE_CHECKING:
    from as2d.api import Transcriber
    from as2d.eval.datasets import Recording

EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 128 + 2  # Ctrl-C: 128 + SIGINT, as a shell reports a process it ended


class UsageError(Exception):
    """A problem with the command line itself: nothing was transcribed."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="as2d", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("transcribe", help="transcribe (or translate) audio files")
    run.add_argument("files", nargs="+", metavar="FILE", help="wav/flac/ogg/mp3/m4a files")
    run.add_argument("--task", default="transcribe", choices=("transcribe", "translate"))
    add_run_options(run)
    ask = commands.add_parser("ask", help="answer a request about a recording (audio LLMs)")
    ask.add_argument("file", metavar="FILE", help="wav/flac/ogg/mp3/m4a file")
    ask.add_argument("request", help='e.g. "Summarise the recording."')
    add_run_options(ask)
    compare = commands.add_parser("compare", help="target-only vs as2d (or --method) on one file")
    compare.add_argument("file", metavar="FILE")
    compare.add_argument("--target", default="whisper-base")
    compare.add_argument("--method", default="as2d", choices=[m for m in METHODS if m != "target"])
    compare.add_argument("--drafter", default="auto")
    compare.add_argument("--budget", default="auto", type=budget, help="auto, or a fixed k (0-16)")
    compare.add_argument("--language", default=None)
    commands.add_parser("models", help="list the bundled models and whether they are cached")
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
    return parser


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by `transcribe` and `ask`: models, method, decoding, output."""
    add_model_options(parser)
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


def add_serve_parser(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="serve OpenAI's audio API over HTTP")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--max-upload-mb", type=float, default=200.0)
    serve.add_argument("--queue", type=int, default=16, help="requests waiting, then 503")
    add_model_options(serve)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The models, the method and how they decode (`transcribe`, `ask`, `serve`)."""
    parser.add_argument("--target", default="whisper-base", help="bundled name, directory or HF id")
    parser.add_argument("--method", default="as2d", choices=METHODS, help="default: as2d")
    parser.add_argument(
        "--drafter",
        default="auto",
        help="drafter model or ct2:NAME; auto: whisper-tiny.en, ct2:whisper-base to translate",
    )
    parser.add_argument("--budget", default="auto", type=budget, help="auto, or a fixed k (0-16)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed")
    parser.add_argument("--drafter-threads", type=int, default=None, help="default: half the cores")
    parser.add_argument("--language", default=None, help="e.g. en; default: detect (multilingual)")
    parser.add_argument(
        "--drafts", default="auto", choices=("auto", "off"), help="use drafts made by as2d draft"
    )
    parser.add_argument("--store", default=None, help="the draft store; default $AS2D_CACHE/drafts")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for the target")
    parser.add_argument("--device", default="cpu", help="the target's device: cpu or cuda[:N]")
    parser.add_argument("--dtype", default=None, choices=DTYPES, help="the target's weights")


def add_bench_parser(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="compare methods on a dataset: speed, identity, WER")
    bench.add_argument("dataset", metavar="DATASET", help="manifest.jsonl, folder, asterisk:LANG")
    bench.add_argument("--out", type=Path, required=True, help="results, summary, report, plots")
    bench.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    bench.add_argument("--drafters", default=",".join(DRAFTERS), help="comma-separated")
    bench.add_argument("--budgets", default="auto,2,4,8,16", help="comma-separated: auto or k")
    bench.add_argument("--repeats", type=int, default=1)
    bench.add_argument("--limit", type=int, default=None, help="only the first N recordings")
    bench.add_argument("--target", default="whisper-base")
    bench.add_argument("--device", default="cpu", help="the target's device: cpu or cuda[:N]")
    bench.add_argument("--dtype", default=None, choices=DTYPES, help="the target's weights")
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
    bench.add_argument("--cache", type=Path, default=None, help="asterisk:LANG downloads")
    bench.add_argument("--no-progress", action="store_true")


def add_exactness_parser(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "exactness", help="count token positions where methods differ from target-only"
    )
    check.add_argument("dataset", metavar="DATASET", help="manifest.jsonl, folder, asterisk:LANG")
    check.add_argument("--target", default="whisper-base")
    check.add_argument("--device", default="cpu", help="the target's device: cpu or cuda[:N]")
    check.add_argument("--dtype", default=None, choices=DTYPES, help="the target's weights")
    check.add_argument("--methods", default="target,as2d,pld,sd", help="comma-separated")
    check.add_argument("--drafters", default="whisper-tiny.en,ct2:whisper-tiny.en")
    check.add_argument("--budgets", default="auto", help="comma-separated: auto or k")
    check.add_argument("--language", default=None, help="default: the dataset's, else detect")
    check.add_argument("--task", default="transcribe", choices=("transcribe", "translate"))
    check.add_argument("--limit", type=int, default=None, help="only the first N recordings")
    check.add_argument("--cache", type=Path, default=None, help="asterisk:LANG downloads")
    check.add_argument("--no-progress", action="store_true")


def budget(value: str) -> int | None:
    """`auto` -> None (chosen per step); a number -> a fixed budget k (`parse_budget`)."""
    try:
        return parse_budget(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; returns its exit code.

    Ctrl-C ends it with one line and 130 (128 + SIGINT, as a shell reports it): drafter
    processes are closed on the way out, and no output file is left half written.
    """
    with watched_interrupts() as interrupts:
        try:
            return run_command(argv)
        except (UsageError, ModelNotFoundError) as err:
            return fail(str(err), EXIT_USAGE)
        except KeyboardInterrupt:
            return fail("interrupted", EXIT_INTERRUPTED)
        except Exception:
            if interrupts.received:  # what the code that Ctrl-C hit made of it
                return fail("interrupted", EXIT_INTERRUPTED)
            raise


def run_command(argv: Sequence[str] | None) -> int:
    """Parses `argv` (None: the process's arguments) and runs the command it names."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for reports: the exact command
    if args.command == "models":
        return list_models()
    if args.command == "compare":
        return compare_methods(args)
    if args.command == "bench":
        return bench_dataset(args)
    if args.command == "exactness":
        return exactness_dataset(args)
    if args.command == "serve":
        return serve(args)
    if args.command == "draft":
        return draft_files(args)
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


def fail(message: str, code: int) -> int:
    print(f"as2d: error: {message}", file=sys.stderr)
    return code


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
    out_dir = prepare_output_dir(args.output_dir, args.skip_existing)
    if out_dir is not None:
        check_distinct_outputs(args.files, out_dir, args.format)
    options = model_options(args)
    todo = [f for f in args.files if not (out_dir and skip(f, out_dir, args))]
    if not todo:
        return EXIT_OK
    if args.ray is not None:
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
        adapter_class(options.target)  # a bad model name: one line here, not on every worker
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
                report=bar.write if not args.no_progress else print_line,
            )  # fmt: skip
    except (RayUnavailableError, ValueError) as err:
        raise UsageError(str(err)) from err
    print(run.summary(), file=sys.stderr)
    return len(run.failed)


def model_options(args: argparse.Namespace) -> Options:
    """The Options of `add_model_options`' arguments."""
    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be at least 1")
    if args.drafter_threads is not None and args.drafter_threads < 1:
        raise UsageError("--drafter-threads must be at least 1")
    return Options(
        target=args.target,
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
        drafts=args.drafts,
        drafts_dir=args.store,
        timestamps=timestamps(args),
    )


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


def serve(args: argparse.Namespace) -> int:
    """Serves until SIGINT/SIGTERM (see `server.py`)."""
    options = model_options(args)
    if args.queue < 1 or args.max_upload_mb <= 0:
        raise UsageError("--queue must be at least 1 and --max-upload-mb above 0")
    try:
        check(options)
    except ValueError as err:
        raise UsageError(str(err)) from err
    from as2d.server import serve as run_server

    quiet_transformers()
    run_server(options, args.host, args.port, args.max_upload_mb, args.queue)
    return EXIT_OK


def open_transcriber(options: Options, files: Sequence[str]) -> Transcriber:
    """The Transcriber of a one-off command over `files`: its drafter process starts before
    torch is imported here, so that both load side by side, and no warm-up passes that only
    serve timing are run (see `Transcriber`). Where every file's drafts are stored (`as2d
    draft`) or no file is long enough for drafting to pay on this machine
    (`drafting_may_pay`), no drafter process starts at all."""
    try:
        check(options)  # before a drafter is started for nothing
        stored = all(stored_drafts(options, file) is not None for file in files)
        spawn = not stored and drafting_may_pay(options, cache_root(), _durations(files))
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
    reported when its turn comes)."""
    from as2d.audio.load import AudioError, audio_duration

    for file in files:
        try:
            yield audio_duration(file)
        except AudioError:
            yield 0.0


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
    from as2d.eval.catalog import with_drafts_ready

    recordings, configs, base = dataset_configs(args)
    configs = with_drafts_ready(configs, args.drafts)
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
    from as2d.models.bundled import cache_root

    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    try:
        cache = args.cache or cache_root() / "datasets"
        recordings = load_dataset(args.dataset, cache)[: args.limit]
        methods, drafters = _items(args.methods), _items(args.drafters)
        budgets = [parse_budget(b) for b in _items(args.budgets)]
    except (DatasetError, ValueError) as err:
        raise UsageError(str(err)) from err
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UsageError(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    languages = {r.language for r in recordings}
    language = args.language or (languages.pop() if len(languages) == 1 else None)
    base = Options(
        target=args.target,
        language=language,
        task=args.task,
        device=args.device,
        dtype=args.dtype,
        drafts="off",  # a benchmark's drafter drafts: stored drafts would skew its numbers
        # bench: timed apart from decoding (WindowResult.align_s); exactness times nothing
        timestamps=getattr(args, "timestamps", "none"),
    )
    return recordings, catalog(methods, drafters, budgets, len(os.sched_getaffinity(0))), base


def _items(text: str) -> list[str]:
    """ "a, b,,c" -> ["a", "b", "c"]."""
    return [item.strip() for item in text.split(",") if item.strip()]


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
    """Transcribe one file and write or print it; report a failure in one line."""
    from as2d.api import FILE_ERRORS, file_failure
    from as2d.eval.timeline import timeline_path, write_timeline

    try:
        result = run_with_progress(transcriber, file, args.no_progress, args.prompt)
        content = render(result, args.format)
        if out_dir is None:
            sys.stdout.write(content)
            sys.stdout.flush()
        else:
            write_atomic(output_path(file, out_dir, args.format), content)
        if args.timeline is not None:
            path = timeline_path(args.timeline, file, several=len(args.files) > 1)
            write_timeline(transcriber, result, path)
    except FILE_ERRORS as err:
        fail(file_failure(file, err), EXIT_USAGE)
        if os.environ.get("AS2D_DEBUG"):
            raise
        return False
    s = result.stats
    print(
        f"{file}: {s.audio_s:.1f} s of audio in {s.wall_s:.2f} s "
        f"(RTF {s.rtf:.3f}, {s.tokens_per_s:.1f} tokens/s, {s.tokens} tokens)",
        file=sys.stderr,
    )
    return True


def run_with_progress(
    transcriber: Transcriber, file: str, quiet: bool, previous: str | None = None
) -> FileResult:
    from tqdm import tqdm

    from as2d.audio.load import audio_duration

    total = audio_duration(file)
    with tqdm(total=round(total, 1), unit="s", desc=Path(file).name, disable=quiet or None) as bar:
        return transcriber.transcribe_file(
            file, previous, lambda window: bar.update(round(window.end - bar.n, 1))
        )


if __name__ == "__main__":
    sys.exit(main())
