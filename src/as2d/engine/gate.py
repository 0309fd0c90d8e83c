"""Whether drafting pays for the cores it takes: per window (`DraftGate`), and for a whole
command before its drafter process starts (`drafting_may_pay`). Without torch: the command
line asks before torch loads."""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from as2d.drafting.family import DraftCosts, costs_for
from as2d.engine.costs import (
    cost_path,
    drafter_costs_path,
    load_drafter_costs,
    machine_key,
    target_cost_name,
)
from as2d.engine.policy import CostModel
from as2d.options import Options
from as2d.runtime.cores import thread_split
from as2d.types import MAX_WINDOW_S

PROBE_EVERY = 4  # a drafter that did not pay gets every PROBE_EVERY-th window (and its cores)
TOKENS_PER_S = 3.0  # `DraftGate`'s guess before any window: speech is 2.4-3.4 (bench and hard sets)
FROM_DRAFTS = 0.7  # `DraftGate`'s guess of the share of tokens committed from drafts
SAVED_PER_TOKEN = 0.7  # share of a plain step that a token committed from a draft saves
RECENT_WINDOWS = 8  # windows `DraftGate` estimates from
SLOWDOWN_BOUNDS = (0.5, 4.0)  # how far `DraftGate` lets drafting times stray from start-up's
# What handing a window to the drafter costs the target besides the drafter's own work (the
# hand-over, the drafter waking, its first calls beside the target's encoder), in the target's
# plain steps on every core: on short requests of the hard set (1-5 s, 2-core Xeon) drafting
# cost the target's encoder about this much more than the drafter's timed work.
HANDOFF_STEPS = 3.0


class DraftGate:
    """Whether drafting a window can pay for the cores it takes, decided from its length
    before the drafter sees it.

    While the drafter works on a window, it takes `share` of the cores: for its encoder (on
    the window's speech and a short tail where it is sized to it, else on 30 s) and a step
    per token (`DraftCosts`, timed at its start-up: a window's own times include the
    SIGSTOPs of core loans). Its encoder runs beside the target's, which scales with cores:
    it costs the target `share` of its time. Its steps run beside the target's steps, which
    scale with cores on some machines and not at all on others: they cost `step_loss`,
    1 - step on every core / step on the target's own threads, at most `share`. Each token
    the target commits from a draft saves it most of a plain step on every core
    (`SAVED_PER_TOKEN` of `alone_step_s`). With the window's tokens expected from its length
    (tokens per second of audio in recent windows) and the share of tokens committed from
    drafts in recent drafted windows, a window is drafted when the saving expected exceeds
    the cost; the others the target decodes alone on every core, as target-only does.
    A drafter judged too inaccurate still gets every `PROBE_EVERY`-th window, so that it is
    noticed when it agrees again (a new speaker, language or recording).
    """

    def __init__(
        self,
        alone_step_s: float | None,
        cores: tuple[int, int],
        shared_step_s: float | None = None,
    ) -> None:
        threads, extra = cores
        self.alone_step_s = alone_step_s
        self.share = extra / (threads + extra)
        self.step_loss = self.share
        if alone_step_s is not None and shared_step_s is not None:
            self.step_loss = min(self.share, max(0.0, 1 - alone_step_s / shared_step_s))
        self._rate: deque[tuple[float, int]] = deque(maxlen=RECENT_WINDOWS)  # (seconds, tokens)
        self._drafted: deque[tuple[int, int]] = deque(maxlen=RECENT_WINDOWS)  # (tokens, drafted)
        self._refused = 0  # windows refused in a row for too few tokens from drafts
        self._slowdown: deque[float] = deque(maxlen=RECENT_WINDOWS)  # drafting: seen / predicted

    def pays(self, seconds: float, input_s: float, costs: DraftCosts | None) -> bool:
        """Whether to draft a window of `seconds` of audio whose drafter encoder reads
        `input_s` (`draft_seconds`), given the drafter's costs; True while they are unknown."""
        if costs is None or self.alone_step_s is None:
            return True
        tokens = seconds * _ratio(self._rate, TOKENS_PER_S)
        cost = costs.encode_s(input_s) * self.share + tokens * costs.step_s * self.step_loss
        cost = cost * self.slowdown + HANDOFF_STEPS * self.alone_step_s
        most = tokens * SAVED_PER_TOKEN * self.alone_step_s  # saved were every token drafted
        if most * _ratio(self._drafted, FROM_DRAFTS) > cost:
            self._refused = 0
            return True
        if most * FROM_DRAFTS <= cost:
            return False  # too short for a drafter of usual accuracy
        self._refused += 1
        return self._refused % PROBE_EVERY == 0

    @property
    def slowdown(self) -> float:
        """How much longer the drafter takes on a window beside the target than its start-up
        timings say (the median of recent windows, within `SLOWDOWN_BOUNDS`; 1 before any):
        the two share caches and memory, so its costs grow too."""
        if not self._slowdown:
            return 1.0
        low, high = SLOWDOWN_BOUNDS
        return min(high, max(low, statistics.median(self._slowdown)))

    def observe_drafting(self, predicted_s: float, seconds: float) -> None:
        """A window the drafter finished in `seconds`, where its start-up costs predicted
        `predicted_s`."""
        if predicted_s > 0:
            self._slowdown.append(seconds / predicted_s)

    def observe(self, seconds: float, tokens: int, from_drafts: int, drafted: bool) -> None:
        """A window decoded: its audio length, tokens, and those committed from candidates."""
        self._rate.append((seconds, tokens))
        if drafted:
            self._drafted.append((tokens, from_drafts))


def _ratio(pairs: Iterable[tuple[float, float]], prior: float) -> float:
    """Σ second / Σ first over `pairs`, else `prior`."""
    total = sum(p[0] for p in pairs)
    return sum(p[1] for p in pairs) / total if total > 0 else prior


def drafting_may_pay(options: Options, cache: Path, seconds: Iterable[float]) -> bool:
    """Whether a command's drafter process is worth starting for recordings of `seconds`:
    False only where `DraftGate` would refuse a window as long as the longest (at most 30 s)
    with usual speech and accuracy, by the costs measured on this machine before (the
    target's steps from calibration, the drafter's from its last start). True where a cost
    is unknown, and wherever the gate is off (GPU target, `lend_cores` or `draft_gate`
    False). Without a drafter process as2d decodes every window as the gate's refused
    ones: the target alone on every core, with prompt and history lookup.
    """
    o = options
    if o.method != "as2d" or o.device != "cpu" or not (o.lend_cores and o.draft_gate):
        return True
    threads, extra = thread_split(o)
    name, machine = target_cost_name(o.target, o.device, o.dtype), machine_key(runtime=o.runtime)
    try:
        alone = CostModel.load(cost_path(cache, name, machine, threads + extra))[0]
        shared = CostModel.load(cost_path(cache, name, machine, threads))[0]
    except (OSError, ValueError, KeyError):
        return True
    path = drafter_costs_path(cache, o.drafter, extra, o.drafter_tail_s is not None)
    by_language = load_drafter_costs(path)
    # The recording's language is not known before its first window (unless given): each
    # language the drafter drafts in its own way may be it.
    languages = [o.language] if o.language or not by_language else list(by_language)
    longest = min(max(seconds, default=0.0), MAX_WINDOW_S)
    input_s = (
        MAX_WINDOW_S if o.drafter_tail_s is None else min(MAX_WINDOW_S, longest + o.drafter_tail_s)
    )
    return any(
        DraftGate(alone, (threads, extra), shared).pays(
            longest, input_s, costs_for(by_language, language)
        )
        for language in languages
    )
