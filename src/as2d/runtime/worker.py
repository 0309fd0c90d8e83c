"""The drafter process itself: load a drafter model (`DrafterFamily.load`), then draft
windows in order.

Runs in a spawned child (see `drafter.py` for the parent side and the message list). It
decodes each window greedily following its own history and publishes the text as it grows;
it skips or abandons windows the target is already done with.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import random
import signal
import string
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from as2d.drafting.family import DraftModel
from as2d.runtime.frames import Outbox
from as2d.runtime.memory import release_memory
from as2d.runtime.spec import CRASH_EXIT_CODE, SLEEP_FAULT_S, DrafterSpec
from as2d.sequences import common_prefix
from as2d.types import N_SAMPLES

_IDLE_CHECK_S = 0.5  # an idle child checks this often that its parent is still alive
_PR_SET_PDEATHSIG = 1  # prctl option (Linux): a signal the kernel sends when the parent dies


@dataclass(frozen=True)
class ChildLink:
    """The child's ends of what it shares with the parent (pickled into it at spawn)."""

    windows: Connection  # reads (index, slot, samples, language) per submitted window
    results: Connection  # writes framed messages (module docstring)
    released: Any  # RawValue("q"): the last window the target is done with
    audio: Any  # RawArray("f", slots * N_SAMPLES): window audio, one slot per window in flight

    def slots(self) -> np.ndarray:
        """The audio slots as an array view: [slots, N_SAMPLES] float32."""
        return np.frombuffer(self.audio, dtype=np.float32).reshape(-1, N_SAMPLES)


def _with_fault(
    fault: str | None, texts: Iterator[tuple[int, str]], seed: int
) -> Iterator[tuple[int, str]]:
    """Applies `DrafterSpec.fault` (tests and robustness benchmarks only) to a text stream."""
    if fault is None:
        yield from texts
        return
    if fault == "empty":
        return
    rng = random.Random(seed)
    noise = ""
    for n, text in texts:
        if fault == "sleep":
            time.sleep(SLEEP_FAULT_S)
        if fault == "random":
            noise += " " + "".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 8)))
        yield n, noise if fault == "random" else text
        if fault == "crash":
            os._exit(CRASH_EXIT_CODE)


def _publish(out: Outbox, index: int, sent: str, text: str) -> str:
    """Sends what changed between the published `sent` and `text`; returns the new published text.

    A trailing U+FFFD (a UTF-8 character split across tokens) is held back until complete.
    """
    text = text.rstrip("\ufffd")
    if text == sent:
        return sent
    keep = len(sent) if text.startswith(sent) else common_prefix(sent, text)
    out.send("text", index, keep, text[keep:])
    return text


def _die_with_parent() -> None:
    """Asks Linux to kill this process when its parent dies, even while it is stopped
    (`DrafterProcess.stop`); elsewhere the idle check in `_next_window` must do.

    The kernel sends the signal when the *thread* that started this process exits, so the
    parent starts it from a thread that lives as long as the process (`DrafterProcess.start`).
    A parent already gone before the request is noticed by `getppid` (we were re-parented).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux
        return
    parent = mp.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(0)


def _ignore_interrupts() -> None:
    """Leaves Ctrl-C to the parent: it reaches the whole process group, and the parent
    closes this process when it is interrupted. The parent starts this process with SIGINT
    blocked (`DrafterProcess.start`), so a Ctrl-C during start-up is held pending until now,
    when ignoring SIGINT discards it: no traceback from a half-started interpreter."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # POSIX
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _draft_window(
    spec: DrafterSpec,
    drafter: DraftModel,
    out: Outbox,
    link: ChildLink,
    window: _Submitted,
) -> None:
    """Drafts one window, publishing its text as it grows; abandons it once the target is done."""
    index = window.index
    start = time.perf_counter()
    out.send("start", index, start)
    encoded = drafter.encode(window.audio, window.language or spec.language)
    out.send("encoded", index, time.perf_counter())
    sent, tokens, finished = "", 0, True
    for count, text in _with_fault(spec.fault, drafter.texts(encoded), index):
        if link.released.value >= index:
            finished = False
            break
        sent, tokens = _publish(out, index, sent, text), count
    out.send("done", index, start, time.perf_counter(), tokens, finished)


@dataclass(frozen=True)
class _Submitted:
    index: int
    audio: np.ndarray  # the window's `draft_audio`, copied out of its slot
    language: str | None  # as the target knows it (None: not yet)


def _next_window(link: ChildLink) -> _Submitted | None:
    """Waits for the next window, copied out of its slot; None once the parent is gone."""
    parent = mp.parent_process()
    idle = False
    try:
        while parent is None or parent.is_alive():
            if link.windows.poll(_IDLE_CHECK_S):
                index, slot, samples, language = link.windows.recv()
                return _Submitted(index, link.slots()[slot, :samples].copy(), language)
            if not idle:  # the burst is over: its buffers go back to the system
                release_memory()
                idle = True
    except EOFError:  # the parent closed its end
        pass
    return None


def child_main(spec: DrafterSpec, link: ChildLink) -> None:
    """Entry point of the drafter process: load the model, then draft windows in order."""
    _ignore_interrupts()
    _die_with_parent()
    out = Outbox(link.results.fileno())
    try:
        drafter = spec.family.load(spec)
        costs = dict(drafter.warm_up())
        out.send("ready", time.perf_counter(), costs)
        while (window := _next_window(link)) is not None:
            if window.index > link.released.value:
                _draft_window(spec, drafter, out, link, window)
            if drafter.costs() != costs:  # a model loaded on first need
                costs = dict(drafter.costs())
                out.send("costs", costs)
    except BrokenPipeError:  # the parent is gone: nobody to tell
        return
    except Exception as err:
        out.send("error", f"{type(err).__name__}: {err}")
        raise


# ---------------------------------------------------------------- parent side
