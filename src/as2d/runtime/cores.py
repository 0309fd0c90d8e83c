"""The cores of one machine shared by the target and its drafter process: how many threads
each gets (`thread_split`), and the drafter's cores lent to the target while it can spare
them (`CoreLoan`).

Threads are set through the target's `Backend`, so lending works whatever the runtime; the
command line splits the cores before any runtime loads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from as2d.engine.policy import BudgetPolicy
    from as2d.options import Options
    from as2d.runtime.drafter import DrafterProcess
    from as2d.target import Backend


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def thread_split(options: Options) -> tuple[int, int]:
    """(target threads, drafter threads): the cores are shared when a drafter process runs.

    With the target on a GPU, its process needs one core to launch kernels; the drafter
    takes the rest.
    """
    on_gpu = options.device != "cpu"
    if options.method != "as2d":
        return options.threads or (1 if on_gpu else _cores()), 0
    spare = _cores() - 1 if on_gpu else _cores() // 2
    drafter = options.drafter_threads or max(1, spare)
    return options.threads or max(1, _cores() - drafter), drafter


class CoreLoan:
    """The drafter's cores lent to the target, for one window's encoder or decoding, as soon
    as it can spare them.

    The encoder is most of a window's target time and takes about half as long on two cores
    as on one. `take` is called before the encoder and between its layers (`Target.encode`):
    once the drafter can spare its cores (`DrafterProcess.spare`: done with the window), and
    is not loading its model (`DrafterProcess.loading`), it is stopped where it is and the
    target runs the rest of its encoder on the drafter's cores too; `close` continues the
    drafter. Stopped earlier, the drafter would have nothing for the target's first steps
    (asterisk + piper long-form, 2 recordings: lending always 1.41x end to end; only when the
    drafter had encoded the window by the encoder's start 1.49x; ct2:whisper-tiny.en on the
    bench set, stopped once past its encoder rather than done: 18.9 % plain steps, not 7.5 %).
    While decoding, `take` is called before each target pass (`speculative_decode`).

    Args:
        backend: the target's runtime, whose threads are set.
        drafter: the drafter process (None, or lost: the cores are free).
        index: the window, in the drafter's numbering.
        threads: the target's own threads.
        extra: the drafter's threads, added to the target's while lent.
        ready: whether the drafter can spare its cores now (default: `DrafterProcess.spare`).
        policy: told when the target runs alone (`BudgetPolicy.alone`), if given.
    """

    def __init__(
        self,
        backend: Backend,
        drafter: DrafterProcess | None,
        index: int,
        threads: int,
        extra: int,
        ready: Callable[[], bool] | None = None,
        policy: BudgetPolicy | None = None,
    ) -> None:
        self.backend = backend
        self.drafter = drafter
        self.index = index
        self.threads = threads
        self.extra = extra
        self.ready = ready or (lambda: drafter is not None and drafter.spare(index))
        self.policy = policy
        self.taken = False

    def take(self) -> bool:
        """Takes the drafter's cores if it can spare them now (once per loan); whether taken."""
        d = self.drafter
        if self.taken:
            return True
        if d is not None:
            d.poll()
            if d.alive and (d.loading or not (self.ready() and d.stop())):
                return False
        self.backend.set_threads(self.threads + self.extra)
        if self.policy is not None:
            self.policy.alone(True)
        self.taken = True
        return True

    def close(self) -> None:
        """Gives the cores back: the drafter goes on, the target keeps its own threads."""
        if self.drafter is not None:
            self.drafter.resume()
        self.backend.set_threads(self.threads)
        if self.policy is not None:
            self.policy.alone(False)
