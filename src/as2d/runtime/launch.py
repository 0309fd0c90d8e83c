"""Starting a child process that dies with its parent process, not with the parent's thread,
and that leaves Ctrl-C to its parent.

Two kernel facts shape how the drafter process is started:

- The parent-death signal that the child asks for (Linux `PR_SET_PDEATHSIG`, see
  `worker._die_with_parent`) is sent when the *thread* that forked the child exits, not the
  process: a drafter started from a worker thread would be killed when that thread ends. So
  the child is forked by the main thread, which lives as long as the process, or else by a
  keeper thread that waits until the child has been closed.
- Ctrl-C sends SIGINT to the whole foreground process group, the child included. The child
  ignores it and the parent closes the child, but the child can only ignore it once its
  interpreter runs our code. The child is forked with SIGINT blocked, a mask it keeps across
  exec, so a Ctrl-C in its first moments stays pending until it ignores the signal
  (`worker._ignore_interrupts`). The parent gets its own Ctrl-C as ever, at the latest when
  the start returns (a few milliseconds: the child's interpreter starts on its own).
"""

from __future__ import annotations

import signal
import threading
from multiprocessing.process import BaseProcess


class Keeper:
    """A thread that starts a child process, then waits until `release`: the child's parent
    thread, alive as long as the child needs it.

    Args:
        process: the child, not yet started.
    """

    def __init__(self, process: BaseProcess) -> None:
        self._process = process
        self._started = threading.Event()
        self._released = threading.Event()
        self._error: BaseException | None = None
        name = f"{process.name}-parent"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Starts the child from the keeper thread; raises what starting it raised."""
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise self._error

    def release(self) -> None:
        """Ends the keeper thread (once the child is gone: it would be killed with it)."""
        self._released.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            start_with_interrupts_blocked(self._process)
        except BaseException as err:  # raised again by `start`, in the caller's thread
            self._error = err
        self._started.set()
        if self._error is None:
            self._released.wait()


def start_child(process: BaseProcess) -> Keeper | None:
    """Starts `process` (module docstring) from this thread if it is the main thread, else from
    a `Keeper`, which is returned: `release` it once the child has exited."""
    if threading.current_thread() is threading.main_thread():
        start_with_interrupts_blocked(process)
        return None
    keeper = Keeper(process)
    keeper.start()
    return keeper


_STARTING = threading.Lock()  # held while a child is handed its start-up data


def wait_for_starts(timeout_s: float = 5.0) -> None:
    """Waits until no child is being started, for a parent about to exit: a spawned child whose
    parent exits while handing it its start-up data (a Ctrl-C in the main thread while a
    `Keeper` starts it) dies of an EOFError traceback on the terminal."""
    if _STARTING.acquire(timeout=timeout_s):
        _STARTING.release()


def start_with_interrupts_blocked(process: BaseProcess) -> None:
    """Starts a spawned `process` with SIGINT blocked in this thread, so that the child starts
    with it blocked; a Ctrl-C meanwhile reaches this process when the call returns."""
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX: no process groups, no mask
        with _STARTING:
            process.start()
        return
    from multiprocessing import resource_tracker

    # A spawned child's start first starts the resource tracker (once a process), which
    # unblocks SIGINT after forking it: started before, it leaves our mask alone.
    resource_tracker.ensure_running()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with _STARTING:
            process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def reap_resource_tracker() -> None:
    """Stops multiprocessing's resource tracker, if this process started one (its first spawned
    child did), and waits for it to exit. Left running, it exits only once this process has,
    and nothing reaps it where the session's init does not (a container's): a defunct process
    outlives every command that started a drafter."""
    from multiprocessing import resource_tracker

    stop = getattr(resource_tracker._resource_tracker, "_stop", None)  # CPython 3.8+
    if stop is not None:
        stop()
