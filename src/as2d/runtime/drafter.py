"""The drafter worker: a small audio model in its own process, drafting windows ahead of the target.

AS²D's drafter transcribes each window greedily on its own, following its own history,
and publishes a growing text per window; the target reads whatever is there without
ever waiting (DESIGN.md, Concurrency). A separate process gives the drafter its own
cores and its own interpreter (no GIL contention with the target), and makes it
disposable: if it crashes, hangs or falls behind, the target carries on alone.

IPC, chosen so that no parent-side call can block (no threads, no locks, no big pickles):

    parent ── window audio copied into shared memory: one 30 s slot per window in flight ──► child
    parent ── (index, slot, samples) on a pipe, a few bytes per window ─────────────────────► child
    parent ◄── length-prefixed pickled tuples on a pipe, read with O_NONBLOCK ─────────────── child
    parent ── `released`: shared int, the last window the target is done with ──────────────► child
    parent ── SIGSTOP / SIGCONT while the target borrows the drafter's cores ────────────────► child

The target borrows the drafter's cores for its encoder (`stop`, `resume`): the encoder is most
of a window's target time and runs nearly twice as fast on two cores. The drafter is
stopped where it is, inside a token or its own encoder, and continued after; a pipe write
stopped halfway is finished then (the parent reassembles frames); the stall clock pauses
meanwhile. The child asks the kernel to kill it if the parent dies, so a stopped drafter
never outlives its target, and it ignores Ctrl-C: the parent closes it (see `launch.py`).

At most `lookahead + 1` windows are in flight (see `DrafterProcess.wants`), so window i's
slot (i mod lookahead + 1) is reused only once the target is done with window i; the
child copies a window out of its slot before drafting it, and a window it is still on
when the slot is reused is one the target no longer wants (the child abandons it).

Messages from the child (times are `time.perf_counter()`: CLOCK_MONOTONIC on Linux,
one system-wide clock, so child and parent times are directly comparable):

    ("ready", t, costs)                      model loaded; its warm-up's `DraftCosts` by language
    ("costs", costs)                         a model loaded since (`auto`'s multilingual one)
    ("start", index, t) / ("encoded", index, t)
    ("text", index, keep, delta)             window text is now text[:keep] + delta
    ("done", index, start, end, tokens, finished)
    ("error", message)                       the drafter failed to load or run

Text, not token ids, crosses the pipe: the drafter's vocabulary may differ from the
target's, and `DraftTokens` re-encodes it with the target's tokenizer. A torch drafter
publishes after every token: batching is not worth it, as a message costs 5-100 µs of
CPU on each side (pickle + one write; one read + unpickle) against 15-25 ms per tiny.en
token on one thread (measured on a busy 2-core VM). A CTranslate2 drafter has no token
callback, so it publishes each window's text once, when done.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
import types
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from as2d.drafting.family import DraftCosts, costs_for, draft_audio
from as2d.engine.costs import drafter_costs_path, load_drafter_costs, save_drafter_costs
from as2d.models.bundled import cache_root
from as2d.runtime.frames import FrameReader
from as2d.runtime.launch import Keeper, start_child
from as2d.runtime.spec import CRASH_EXIT_CODE, FAULTS, SLEEP_FAULT_S, BusyInterval, DrafterSpec
from as2d.runtime.worker import ChildLink, child_main
from as2d.types import N_SAMPLES, Window

__all__ = [
    "CRASH_EXIT_CODE",
    "FAULTS",
    "SLEEP_FAULT_S",
    "BusyInterval",
    "DrafterProcess",
    "DrafterSpec",
    "start_drafter",
]

# A drafter loads its model in 2-4 s (torch's import, then tiny.en's: 2-core Xeon); longer, it
# is taken for stuck, and core loans stop it as any other.
LOADING_GRACE_S = 15.0
_STOP = getattr(signal, "SIGSTOP", None)  # POSIX only: elsewhere the drafter keeps its cores
_CONTINUE = getattr(signal, "SIGCONT", None)
_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_CHILD_ENV = (
    ("OMP_WAIT_POLICY", "PASSIVE"),  # idle drafter threads sleep instead of spinning on cores
    # No progress bars in the drafter: no noise on the terminal, and no tqdm lock, a
    # semaphore that a terminated child would leave to the resource tracker.
    ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
)


class _WindowDraft:
    text: str = ""
    done: bool = False


class DrafterProcess:
    """Parent-side handle of a drafter process; every method returns at once.

    Args:
        spec: the drafter.
        stall_s: `lost` once the drafter has work but sends nothing for this long.
        startup_s: the same limit before the model is loaded.

    Example:
        with DrafterProcess(DrafterSpec("whisper-tiny.en")) as drafter:
            for w in windows_ahead:                    # as the target moves on
                if drafter.wants(w.index):
                    drafter.submit(w)
            drafter.poll()
            drafter.text(0)  -> " Welcome to Comedian Mail."   # whatever is ready
            drafter.release(0)                         # target done with window 0
    """

    def __init__(self, spec: DrafterSpec, stall_s: float = 30.0, startup_s: float = 300.0) -> None:
        self.spec = spec
        self.stall_s = stall_s
        self.startup_s = startup_s
        self.lost = False
        self.reason: str | None = None  # why the drafter was lost
        self.ready = False  # model loaded
        # Start-up's costs by language in CPU seconds per thread, so that the parent's own
        # start-up beside it does not count; a window's times include the SIGSTOPs of core
        # loans (`stop`).
        self.warm_costs: dict[str, DraftCosts] | None = None
        self.intervals: list[BusyInterval] = []  # one small record per window drafted
        self._ctx = mp.get_context("spawn")
        self._process: Any = None
        self._drafts: dict[int, _WindowDraft] = {}
        self._submitted = -1  # highest window index submitted
        self._released: Any = self._ctx.RawValue("q", -1)  # shared with the child
        self._encoded: dict[int, float] = {}  # window -> time its encoding ended
        self._last_heard = 0.0
        self._closed = False
        self._stopped = False  # by `stop`, until `resume`
        self._stopped_at = 0.0  # when `stop` stopped it: the stall clock pauses from then
        self._stops: deque[tuple[float, float]] = deque(maxlen=64)  # (stopped, continued)
        self._keeper: Keeper | None = None  # the child's parent thread, if not the main one
        self._slots = spec.lookahead + 1  # windows in flight, each with a 30 s audio slot
        self._audio: Any = None  # set by start(): the shared RawArray
        self._slot_audio = np.empty((0, N_SAMPLES), np.float32)  # [slots, N_SAMPLES] view of it
        self._windows: Any = None  # our end of the windows pipe
        self._results: Any = None  # our end of the results pipe
        self._frames: Any = None

    def __enter__(self) -> DrafterProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Spawns the drafter process; it loads its model in the background.

        From any thread: the drafter lives until `close` or the end of this process. If
        anything interrupts the start (Ctrl-C), what was started is closed before it raises.
        """
        try:
            self._spawn()
        except BaseException:
            self.close()
            raise

    def _spawn(self) -> None:
        self._audio = self._ctx.RawArray("f", self._slots * N_SAMPLES)
        self._slot_audio = np.frombuffer(self._audio, np.float32).reshape(self._slots, N_SAMPLES)
        windows, self._windows = self._ctx.Pipe(duplex=False)
        self._results, results = self._ctx.Pipe(duplex=False)
        link = ChildLink(windows, results, self._released, self._audio)
        kept = load_drafter_costs(self._costs_path())
        self.warm_costs = kept or None  # earlier runs' until the child times its own
        keys = self.spec.family.warm_keys(self.spec.language)
        spec = replace(self.spec, timed=not kept or any(k not in kept for k in keys))
        self._process = self._ctx.Process(target=child_main, args=(spec, link), daemon=True)
        with _child_env(self.spec.threads), _bare_main():
            self._keeper = start_child(self._process)
        windows.close()  # the child holds the other ends: EOF on results means it is gone
        results.close()
        os.set_blocking(self._windows.fileno(), False)  # a full pipe must not block submit
        self._frames = FrameReader(self._results.fileno())
        self._last_heard = self._spawned_at = time.perf_counter()

    def wait_ready(self, timeout_s: float) -> bool:
        """Blocks until the drafter's model is loaded, it is lost, or `timeout_s` passes.

        For start-up only (model loading is outside the timed run), never while decoding:
        without it the drafter misses the first window of a run. Returns `ready`.
        """
        deadline = time.perf_counter() + timeout_s
        while self.alive and not self.ready and time.perf_counter() < deadline:
            self.poll()
            time.sleep(0.02)
        return self.ready

    @property
    def alive(self) -> bool:
        """Started, not lost and not closed (as of the last `poll`)."""
        return self._process is not None and not self.lost and not self._closed

    @property
    def exited(self) -> bool:
        """Whether its process has ended; from any thread (it reads nothing of the child's,
        as `poll` does)."""
        return self._process is not None and not self._process.is_alive()

    @property
    def loading(self) -> bool:
        """Whether its model is still loading, for at most `LOADING_GRACE_S` since the start:
        core loans leave it its cores meanwhile (stopped, it would only draft later)."""
        started = time.perf_counter() - self._spawned_at
        return self.alive and not self.ready and started < LOADING_GRACE_S

    @property
    def busy_s(self) -> float:
        """Seconds the drafter spent on windows (finished or abandoned) so far."""
        return sum(i.end - i.start for i in self.intervals)

    @property
    def windows_drafted(self) -> int:
        """Windows the drafter finished."""
        return sum(i.finished for i in self.intervals)

    @property
    def submitted(self) -> int:
        """The highest window number submitted so far (-1: none): the next must be higher."""
        return self._submitted

    def holds(self, index: int) -> bool:
        """Whether window `index` was submitted and not yet released."""
        return index in self._drafts

    @property
    def held_windows(self) -> int:
        """Windows whose draft is held in memory (submitted and not released)."""
        return len(self._drafts)

    def wants(self, index: int) -> bool:
        """Whether to submit window `index` now.

        True for the next window not yet submitted while it is at most `spec.lookahead`
        windows beyond the target's (the target is on the window after the last one
        released), and the drafter is not lost.
        """
        target_on = self._released.value + 1
        return self.alive and index > self._submitted and index <= target_on + self.spec.lookahead

    def costs(self, language: str | None) -> DraftCosts | None:
        """What drafting a window in `language` (None: not known yet) costs, as timed at
        start-up, or by an earlier run until then; None where neither timed it."""
        return costs_for(self.warm_costs, language)

    def submit(self, window: Window, language: str | None = None) -> None:
        """Hands a window to the drafter: copies the audio its encoder reads (`draft_audio`,
        ≤ 30 s) into its shared slot. `language`: the window's, where the target knows it.

        Raises:
            ValueError: `wants(window.index)` is False while the drafter is alive.
        """
        if not self.alive:
            return
        if not self.wants(window.index):
            raise ValueError(f"window {window.index} is not wanted now (see wants)")
        if not self._outstanding():
            self._last_heard = time.perf_counter()  # the stall clock starts with the work
        audio, slot = draft_audio(window, self.spec.tail_s), window.index % self._slots
        self._slot_audio[slot, : len(audio)] = audio
        self._drafts[window.index] = _WindowDraft()
        self._submitted = window.index
        try:
            self._windows.send((window.index, slot, len(audio), language))
        except OSError as err:  # the child is gone, or has not read windows for ages
            self._lose(f"drafter does not take windows ({type(err).__name__})")

    def poll(self) -> None:
        """Takes in everything the drafter sent, and checks that it is alive and answering."""
        if not self.alive:
            return
        gone = not self._process.is_alive()  # checked first: then its last words are read below
        for message in self._frames.messages():
            self._handle(message)
        self._check_health(gone)

    def text(self, index: int) -> str:
        """The drafted text of window `index` so far ("" if none, or released)."""
        draft = self._drafts.get(index)
        return draft.text if draft is not None else ""

    def done(self, index: int) -> bool:
        """Whether the drafter finished window `index` (its text is final)."""
        draft = self._drafts.get(index)
        return draft is not None and draft.done

    @property
    def idle(self) -> bool:
        """Whether it has nothing to do: every window submitted and not released is drafted
        (as of the last `poll`)."""
        return not self._outstanding()

    def encoded(self, index: int) -> bool:
        """Whether the drafter is past its encoder for window `index` (drafting it, or done)."""
        return index in self._encoded or self.done(index)

    def spare(self, index: int) -> bool:
        """Whether stopping the drafter now would hold back no text the target needs for
        window `index`: once its draft of the window is done. With its encoder sized to the
        speech, drafting a window costs a few of the target's encoder layers, so the target
        waits for the whole draft rather than decode beside a drafter still writing it."""
        return self.done(index)

    def release(self, index: int) -> None:
        """The target is done with window `index` and all before it: forget their drafts.

        The drafter skips those windows, or abandons the one it is on.
        """
        self._released.value = max(self._released.value, index)
        for i in [i for i in self._drafts if i <= index]:
            del self._drafts[i]
        for i in [i for i in self._encoded if i <= index]:
            del self._encoded[i]

    def stop(self) -> bool:
        """Stops the drafter (SIGSTOP) wherever it is, so the target can use its cores.

        Returns whether its cores are free: True once it is stopped or gone; False where
        processes cannot be stopped (no SIGSTOP), and then the target should not count on them.
        """
        if not self._stopped and self._signal(_STOP):
            self._stopped, self._stopped_at = True, time.perf_counter()
        return self._stopped or not self.alive

    def resume(self) -> None:
        """Continues a drafter that `stop` stopped (SIGCONT); its stall clock goes on from
        where it paused."""
        if self._stopped:
            self._signal(_CONTINUE)
            self._last_heard = time.perf_counter() - self._silent_s()
            self._stopped = False
            self._stops.append((self._stopped_at, time.perf_counter()))

    def _signal(self, signum: int | None) -> bool:
        """Sends `signum` to a live child; False where it cannot be sent (no such signal)."""
        if signum is None or self._process is None or not self.alive:
            return False
        try:
            os.kill(self._process.pid, signum)
        except ProcessLookupError:
            return False
        return True

    def close(self) -> None:
        """Stops the drafter process: terminate, then kill; waits at most about 2 s."""
        if self._process is None or self._closed:
            return
        self._closed = True
        self.resume()
        self._windows.close()  # an idle child exits on its own at EOF
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=1.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=1.0)
        if self._keeper is not None:
            self._keeper.release()
        self._results.close()
        self._audio, self._slot_audio = None, np.empty((0, N_SAMPLES), np.float32)

    def _handle(self, message: tuple[Any, ...]) -> None:
        """Applies one message from the child to the per-window state."""
        self._last_heard = time.perf_counter()
        kind, *args = message
        if kind == "text" and args[0] in self._drafts:
            index, keep, delta = args
            draft = self._drafts[index]
            draft.text = draft.text[:keep] + delta
        elif kind == "encoded":
            self._encoded[args[0]] = args[1]
        elif kind == "done":
            self._finish(*args)
        elif kind in ("ready", "costs"):
            self.ready = True
            self._timed(args[-1])
        elif kind == "error":
            self._lose(f"drafter failed: {args[0]}")

    def _costs_path(self) -> Path:
        spec = self.spec
        return drafter_costs_path(cache_root(), spec.name, spec.threads, spec.tail_s is not None)

    def _timed(self, costs: dict[str, DraftCosts]) -> None:
        """The child's costs by language, over earlier runs' for models it has not loaded yet
        (kept for `gate.drafting_may_pay`)."""
        self.warm_costs = {**(self.warm_costs or {}), **costs}
        path = self._costs_path()
        save_drafter_costs(path, self.warm_costs)

    def _finish(self, index: int, start: float, end: float, tokens: int, finished: bool) -> None:
        encoded = self._encoded.pop(index, end)
        stopped = sum(max(0.0, min(end, b) - max(start, a)) for a, b in self._stops)
        interval = BusyInterval(index, start, end, encoded - start, tokens, finished, stopped)
        self.intervals.append(interval)
        if index in self._drafts:
            self._drafts[index].done = finished

    def _outstanding(self) -> bool:
        return any(not d.done for d in self._drafts.values())

    def _check_health(self, gone: bool) -> None:
        if gone:
            self._lose(f"drafter process exited (exit code {self._process.exitcode})")
            return
        limit = self.stall_s if self.ready else self.startup_s
        silent = self._silent_s()
        if self._outstanding() and silent > limit:
            self._lose(f"drafter sent nothing for {silent:.1f} s (limit {limit:.1f} s)")
            self._process.kill()  # free its cores; `close` reaps it

    def _silent_s(self) -> float:
        """Seconds the drafter has run without a word since it was last heard from or given
        work: a stall clock that pauses while it is stopped (it cannot answer then)."""
        now = self._stopped_at if self._stopped else time.perf_counter()
        return max(0.0, now - self._last_heard)

    def _lose(self, reason: str) -> None:
        if not self.lost:
            self.lost, self.reason = True, reason


def start_drafter(spec: DrafterSpec | None) -> DrafterProcess | None:
    """A started `DrafterProcess(spec)`, its model loading in the background; None for None."""
    if spec is None:
        return None
    drafter = DrafterProcess(spec)
    drafter.start()
    return drafter


@contextmanager
def _bare_main() -> Iterator[None]:
    """Hides the parent's `__main__` from multiprocessing while it spawns the child.

    spawn runs the parent's main module again in the child (`as2d`'s console script, or a
    user's script, with whatever it imports); `child_main` needs nothing from it. With an
    empty `__main__` the child imports `worker.py` and what its drafter runs, no more: a
    CTranslate2 drafter never imports torch.
    """
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


@contextmanager
def _child_env(threads: int) -> Iterator[None]:
    """Sets the variables a spawned child inherits: thread counts (read when torch loads)."""
    values = {**{name: str(threads) for name in _THREAD_ENV}, **dict(_CHILD_ENV)}
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
