"""Measure the target's cost of a verify pass per budget k, once per machine, model and threads.

The policy (DESIGN.md, Policy) needs the latency of one target forward over 1 + k tokens for
k = 0 (a plain step) to K. It depends on the machine, the model and the thread count, so it is
measured on a real window's encoder output and cached as JSON beside the converted weights,
under its backend's key (`Backend.cost_key`: processor, runtime, device). Each pass is timed
to the end of its queued work (`Backend.sync`: a GPU's kernels), not to their launch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from as2d.engine.policy import CostModel
from as2d.target import Backend, Encoded, Target
from as2d.writers import atomic_path

CONTEXT = 64  # cached positions the passes are measured over (a typical mid-window length)


def measure_cost(
    target: Target[Encoded],
    encoded: Encoded,
    prompt: Sequence[int],
    max_k: int = 16,
    repeats: int = 5,
) -> CostModel:
    """Median latency of a forward over 1 + k tokens, k = 0..max_k, at a typical context.

    Args:
        target: the model to measure.
        encoded: any window's encoder output (its content does not change the cost).
        prompt: a valid decoder prompt.
        max_k: the largest budget measured.
        repeats: measurements per k; the median is kept.

    Returns:
        The fitted cost model.
    """
    target.prefill(encoded, prompt)
    filler = [prompt[-1]] * (CONTEXT - len(prompt))  # none after a long (chat) prompt
    if filler:
        target.forward(filler)
    base = target.length
    samples: dict[int, list[float]] = {k: [] for k in range(max_k + 1)}
    for _ in range(repeats):
        for k in range(max_k + 1):  # interleaved, so drifts in machine load hit every k alike
            start = synced_clock(target.backend)
            target.forward([prompt[-1]] * (k + 1))
            samples[k].append(synced_clock(target.backend) - start)
            target.rollback(base)
    return CostModel.fit(samples, max_k)


def synced_clock(backend: Backend) -> float:
    """time.perf_counter() once the backend's queued work is done (GPU kernels run async)."""
    backend.sync()
    return time.perf_counter()


def cached_cost(
    path: Path,
    target: Target[Encoded],
    window: Callable[[], tuple[Encoded, Sequence[int]]],
    max_k: int = 16,
) -> CostModel:
    """The cost model stored at `path`, measured and stored first if missing or unreadable.

    `window()` gives what to measure on (an encoded window and its prompt); it is called only
    when the cost must be measured, so a cached cost costs no encoder pass.
    """
    try:
        cost = CostModel.load(path)
        if cost.max_k >= max_k:
            return cost
    except (OSError, ValueError, KeyError, json.JSONDecodeError):
        pass
    cost = measure_cost(target, *window(), max_k)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        cost.save(tmp)
    return cost
