"""What the exactness guard costs per decision: the greedy rule with margins (top-2) against
the plain argmax it replaced, on scores of whisper-base's vocabulary, interleaved, medians.

A plain step's decision is one row; a verify pass's verdict has k + 1 rows. Multiply by the
plain steps and passes of a run (`as2d bench` results.jsonl) to get a run's overhead.

    .venv/bin/python scripts/guard_overhead.py
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import torch

from as2d.backends.torch_backend import rounding_bound
from as2d.engine.verify import Greedy, greedy_accept

VOCAB = 51_865  # whisper-base
REPEATS = 400


def median_us(calls: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Median time of each call in microseconds, the calls interleaved."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(REPEATS):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def decisions(rows: int, guarded: Greedy) -> dict[str, Callable[[], object]]:
    """The old and the guarded decision over `rows` rows of random scores."""
    scores = torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(rows)) * 5
    draft = scores.argmax(-1).tolist()[:-1]
    if rows == 1:  # a plain step
        return {
            "argmax": lambda: int(scores[0].argmax()),
            "guarded": lambda: guarded.choose(scores[0]),
        }
    return {
        "argmax": lambda: greedy_accept(draft, scores.argmax(-1).tolist()),
        "guarded": lambda: guarded.verdict(draft, scores),
    }


def main() -> int:
    torch.set_num_threads(1)  # as2d's target thread on 2 cores
    guarded = Greedy(rounding_bound(torch.float32))
    print(f"reproduce: {sys.executable} {' '.join(sys.argv)}")
    for rows in (1, 5, 17):
        t = median_us(decisions(rows, guarded))
        print(
            f"{rows:>2} rows: argmax {t['argmax']:.0f} us, guarded {t['guarded']:.0f} us, "
            f"difference {t['guarded'] - t['argmax']:+.0f} us"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
