"""What each drafter's encoder costs by the length of its input, and what a step costs: the
numbers behind the sized encoder (`draft_audio`: the window's speech plus a tail instead of
Whisper's 30 s) and behind `DraftGate`'s choices. One thread (the drafter's share of a 2-core
machine), CPU seconds, medians of interleaved repeats, silence as input (an encoder's cost
does not depend on what it hears).

    .venv/bin/python scripts/drafter_costs.py [--repeats 5] [--drafters whisper-tiny.en,...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from as2d.drafting.family import DraftModel
from as2d.runtime.spec import DrafterSpec
from as2d.types import SAMPLE_RATE

INPUTS_S = (2.0, 4.0, 8.0, 16.0, 30.0)
DRAFTERS = "whisper-tiny.en,whisper-base,ct2:whisper-tiny.en,ct2:whisper-base"


def encoder_s(model: DraftModel, seconds: float, repeats: int) -> float:
    """Median CPU seconds of one encoder call on `seconds` of input."""
    audio = np.zeros(round(seconds * SAMPLE_RATE), np.float32)
    model.encode(audio, "en")
    times = []
    for _ in range(repeats):
        start = time.process_time()
        model.encode(audio, "en")
        times.append(time.process_time() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--drafters", default=DRAFTERS)
    args = parser.parse_args(argv)
    heads = " | ".join(f"{s:g} s" for s in INPUTS_S)
    print(f"| drafter | encoder on {heads} | 30 s padded | step |")
    print(f"|---|{'---:|' * (len(INPUTS_S) + 2)}")
    for name in args.drafters.split(","):
        sized = DrafterSpec(name, threads=1, language="en")
        model = sized.family.load(sized)
        step_s = model.warm_up()["*"].step_s
        cells = [f"{encoder_s(model, s, args.repeats):.3f}" for s in INPUTS_S]
        padded = DrafterSpec(name, threads=1, language="en", tail_s=None)
        full = encoder_s(padded.family.load(padded), 2.0, args.repeats)
        print(f"| {name} | {' | '.join(cells)} | {full:.3f} | {step_s * 1000:.1f} ms |")
    print(f"\n{' '.join([sys.executable, *sys.argv])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
