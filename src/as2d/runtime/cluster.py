"""Transcribe many files across a Ray cluster (`as2d transcribe ... --ray ADDRESS`).

Each Ray actor (`FileWorker`) holds one Transcriber: a target and its drafter process, on the
CPUs Ray gives it. Files, not windows, are the unit of work, so each file's drafter keeps its
own history and runs ahead within it, as on one machine. The driver (`transcribe_on_ray`)
hands a file to each idle worker and writes what comes back to the output folder itself,
atomically: a worker that dies mid-file leaves nothing behind; its file goes back to the
queue (up to `ATTEMPTS` tries in all) and a replacement worker is started. A file that fails
on its own (bad audio) is reported and the others go on. Ray is imported only here, and only
when `--ray` is given (`pip install 'as2d[ray]'`).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from as2d.options import Options
from as2d.writers import render, write_atomic

ATTEMPTS = 3  # tries per file: a worker lost mid-file sends it back to the queue
WORKER_START_S = 600.0  # the longest wait for a worker to load its models
POLL_S = 1.0  # progress is asked of busy workers this often
LOCAL_OBJECT_STORE = 128 * 1024**2  # `local`: results are text, the store stays small


class RayUnavailableError(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


@dataclass(frozen=True)
class FileTask:
    """One input file, where its output goes, and how long it is."""

    file: str
    output: Path
    audio_s: float


@dataclass
class FileOutcome:
    """What a worker made of one file: the rendered output, or the one-line reason it failed."""

    file: str
    content: str | None
    error: str | None
    audio_s: float = 0.0
    wall_s: float = 0.0
    tokens: int = 0


@dataclass
class ClusterRun:
    """The whole job, for the summary line."""

    workers: int
    files: int = 0
    failed: list[str] = field(default_factory=list)  # one line each
    audio_s: float = 0.0
    wall_s: float = 0.0
    lost_workers: int = 0
    retried: int = 0

    def summary(self) -> str:
        rate = self.audio_s / self.wall_s if self.wall_s > 0 else 0.0
        lost = f"; {self.lost_workers} worker(s) lost, {self.retried} file(s) retried"
        return (
            f"ray: {self.files} file(s), {len(self.failed)} failed; "
            f"{self.audio_s / 3600:.3f} h of audio in {self.wall_s:.1f} s "
            f"({rate:.1f}x real time) on {self.workers} worker(s)"
            f"{lost if self.lost_workers else ''}"
        )


class FileWorker:
    """A Ray actor: one Transcriber on `cpus` CPUs, decoding one file at a time. Threaded
    (two calls at once), so that `progress` answers while `transcribe` runs."""

    def __init__(
        self, options: Options, fmt: str, previous: str | None, durations: dict[str, float]
    ) -> None:
        from as2d.options import drafter_spec
        from as2d.runtime.drafter import start_drafter
        from as2d.runtime.drafts import drafter_needed

        self.fmt, self.previous = fmt, previous
        # As a one-off command (the same rule): no drafter process where every file's drafts
        # are stored on this node, or no file is long enough for drafting to pay by this
        # node's costs; else it starts before torch is imported, so both load side by side.
        spawn = drafter_needed(options, list(durations), durations.values())
        drafter = start_drafter(drafter_spec(options)) if spawn else None
        from as2d.api import Transcriber

        self.transcriber = Transcriber(
            options, drafter_process=drafter, spawn_drafter=spawn, warm=False
        )
        self.done_s = 0.0  # audio seconds of the current file decoded so far

    def pid(self) -> int:
        """The worker's process id (ready once the models are loaded)."""
        return os.getpid()

    def progress(self) -> float:
        return self.done_s

    def transcribe(self, file: str) -> FileOutcome:
        from as2d.api import FILE_ERRORS, file_failure

        self.done_s = 0.0

        def advance(window: Any) -> None:
            self.done_s = window.end

        try:
            result = self.transcriber.transcribe_file(file, self.previous, advance)
            content = render(result, self.fmt)
        except FILE_ERRORS as err:
            return FileOutcome(file, None, file_failure(file, err))
        s = result.stats
        return FileOutcome(file, content, None, s.audio_s, s.wall_s, s.tokens)


def worker_threads(options: Options, cpus: int) -> Options:
    """`options` for a worker on `cpus` CPUs: as2d splits them between target and drafter as
    on a machine of that size (`thread_split`), other methods give them all to the target."""
    if options.method != "as2d":
        return replace(options, threads=options.threads or cpus)
    drafter = options.drafter_threads or max(1, cpus // 2)
    target = options.threads or max(1, cpus - drafter)
    return replace(options, threads=target, drafter_threads=drafter)


def connect(address: str) -> Any:
    """Imports Ray and joins the cluster at `address` (`auto`, `ray://host:port`), or starts
    one on this machine (`local`: 127.0.0.1 only, every core). Returns the ray module."""
    try:
        import ray
    except ImportError:
        raise RayUnavailableError("--ray needs Ray: pip install 'as2d[ray]'") from None
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage reports, no prompt
    # Ray's start-up notes (token authentication, ...) stay off the terminal, its errors do not
    logging.getLogger("ray").setLevel(logging.ERROR)
    try:
        if address == "local":
            ray.init(
                num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False,
                _node_ip_address="127.0.0.1", object_store_memory=LOCAL_OBJECT_STORE,
                log_to_driver=False, configure_logging=False,
            )  # fmt: skip
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise RayUnavailableError(f"cannot reach the Ray cluster at {address}: {err}") from None
    return ray


def transcribe_on_ray(
    address: str,
    options: Options,
    tasks: Sequence[FileTask],
    fmt: str,
    cpus_per_worker: int,
    previous: str | None = None,
    progress: Callable[[float], object] | None = None,
    report: Callable[[str], object] | None = None,
) -> ClusterRun:
    """Transcribes `tasks` on the cluster at `address`, writing each output atomically.

    `progress(audio_s)`: audio seconds done so far across the cluster (finished files and
    the busy workers' current ones). `report(line)`: one line per finished or failed file.
    """
    ray = connect(address)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 0))
        workers = max(1, min(len(tasks), cpus // cpus_per_worker))
        actor = ray.remote(num_cpus=cpus_per_worker, max_concurrency=2)(FileWorker)
        durations = {task.file: task.audio_s for task in tasks}
        job = _Job(ray, actor, worker_threads(options, cpus_per_worker), fmt, previous, durations)
        return job.run(tasks, workers, progress or _ignore, report or _ignore)
    finally:
        ray.shutdown()


def _ignore(*_: object) -> None:
    return None


class _Job:
    """The driver's loop: idle workers get the next file, finished files are written, lost
    workers are replaced and their files queued again."""

    def __init__(
        self,
        ray: Any,
        actor: Any,
        options: Options,
        fmt: str,
        previous: str | None,
        durations: dict[str, float],
    ):
        self.ray, self.actor, self.options = ray, actor, options
        self.fmt, self.previous, self.durations = fmt, previous, durations
        self.starting: dict[Any, Any] = {}  # pid() ref -> worker loading its models
        self.idle: list[Any] = []
        self.busy: dict[Any, tuple[Any, FileTask]] = {}  # transcribe() ref -> (worker, task)
        self.attempts: dict[str, int] = {}
        self.finished_s = 0.0  # audio seconds of the files done (written or failed)

    def run(
        self,
        tasks: Sequence[FileTask],
        workers: int,
        progress: Callable[[float], object],
        report: Callable[[str], object],
    ) -> ClusterRun:
        run = ClusterRun(workers, files=len(tasks))
        queue = deque(tasks)
        start = time.perf_counter()
        for _ in range(workers):
            self._start_worker()
        waited_since = time.monotonic()
        while queue or self.busy:
            while self.idle and queue:
                worker, task = self.idle.pop(), queue.popleft()
                self.busy[worker.transcribe.remote(task.file)] = (worker, task)
            refs = [*self.busy, *self.starting]
            done, _ = self.ray.wait(refs, num_returns=1, timeout=POLL_S)
            for ref in done:
                if ref in self.starting:
                    self._started(ref, run)
                    continue
                worker, task = self.busy.pop(ref)
                try:
                    outcome: FileOutcome = self.ray.get(ref)
                except self.ray.exceptions.RayActorError:
                    self._lost(task, queue, run, report)
                    continue
                self.idle.append(worker)
                self._finish(task, outcome, run, report)
            if self.busy or self.idle:
                waited_since = time.monotonic()
            elif time.monotonic() - waited_since > WORKER_START_S:
                run.failed += [f"{t.file}: no Ray worker could start" for t in queue]
                break
            progress(self.finished_s + self._in_flight_s())
        run.wall_s = time.perf_counter() - start
        return run

    def _start_worker(self) -> None:
        worker = self.actor.remote(self.options, self.fmt, self.previous, self.durations)
        self.starting[worker.pid.remote()] = worker

    def _started(self, ref: Any, run: ClusterRun) -> None:
        """A worker that finished loading (or failed to: the models cannot load at all)."""
        worker = self.starting.pop(ref)
        try:
            self.ray.get(ref)
        except self.ray.exceptions.RayActorError as err:
            cause = getattr(err, "cause", None) or err
            if isinstance(cause, ValueError):  # a bad model or option: no worker can start
                raise ValueError(str(cause).splitlines()[0]) from None
            run.lost_workers += 1
            self._start_worker()
            return
        self.idle.append(worker)

    def _lost(
        self,
        task: FileTask,
        queue: deque[FileTask],
        run: ClusterRun,
        report: Callable[[str], object],
    ) -> None:
        """The worker died with `task`: a replacement starts, and the file goes back to the
        front of the queue, or fails once it has had every attempt."""
        run.lost_workers += 1
        self._start_worker()
        tries = self.attempts[task.file] = self.attempts.get(task.file, 1) + 1
        if tries <= ATTEMPTS:
            run.retried += 1
            queue.appendleft(task)
            return
        self._finish(
            task,
            FileOutcome(task.file, None, f"{task.file}: {ATTEMPTS} workers lost on it"),
            run,
            report,
        )

    def _finish(
        self, task: FileTask, outcome: FileOutcome, run: ClusterRun, report: Callable[[str], object]
    ) -> None:
        """Writes the output, or reports the failure; either way the file is done."""
        self.finished_s += task.audio_s
        if outcome.content is None:
            run.failed.append(outcome.error or f"{task.file}: failed")
            report(f"as2d: error: {outcome.error}")
            return
        try:
            write_atomic(task.output, outcome.content)
        except OSError as err:
            run.failed.append(f"{task.file}: cannot write {task.output}: {err.strerror}")
            report(f"as2d: error: {run.failed[-1]}")
            return
        run.audio_s += outcome.audio_s
        rate = outcome.tokens / outcome.wall_s if outcome.wall_s > 0 else 0.0
        report(
            f"{task.file}: {outcome.audio_s:.1f} s of audio in {outcome.wall_s:.2f} s "
            f"({rate:.1f} tokens/s, {outcome.tokens} tokens)"
        )

    def _in_flight_s(self) -> float:
        """Audio seconds the busy workers have decoded of their current files."""
        workers = [worker for worker, _ in self.busy.values()]
        if not workers:
            return 0.0
        try:
            return float(sum(self.ray.get([w.progress.remote() for w in workers], timeout=1.0)))
        except (self.ray.exceptions.RayError, TimeoutError):
            return 0.0  # a worker is going: the next poll will tell


def print_line(line: str) -> None:
    """One line on stderr, where a local run prints its lines (above the progress bar)."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)
