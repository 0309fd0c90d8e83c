"""One-off commands from start to exit: `as2d transcribe CLIP` (as2d and target-only) against
faster-whisper int8 on the same weights (the target's CTranslate2 copy, greedy), each a fresh
process, interleaved, medians of N.

    .venv/bin/python scripts/startup_bench.py tests/data/asterisk/en/demo-nogo.wav --repeats 5

Each process's text is printed once, so that a reader sees the three agree. `import torch`
alone is timed beside them: the part of as2d's time that no cut in as2d can remove.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

FASTER_WHISPER = """
import sys
from faster_whisper import WhisperModel
model = WhisperModel(sys.argv[1], device="cpu", compute_type="int8")
segments, _ = model.transcribe(sys.argv[2], beam_size=1, language=sys.argv[3],
                               condition_on_previous_text=True, vad_filter=False)
print(" ".join(s.text.strip() for s in segments))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clip", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--target", default="whisper-base")
    parser.add_argument("--language", default="en")
    args = parser.parse_args()
    print("$ " + shlex.join([sys.executable, *sys.argv]))

    from as2d.models.bundled import ct2_dir

    as2d = [str(Path(sys.executable).with_name("as2d")), "transcribe", str(args.clip)]
    as2d += ["--target", args.target, "--language", args.language]
    commands = {
        "as2d": as2d,
        "as2d --method target": [*as2d, "--method", "target"],
        "faster-whisper int8": [
            sys.executable, "-c", FASTER_WHISPER, str(ct2_dir(args.target)), str(args.clip),
            args.language,
        ],
        # the floor under any torch target: the interpreter and `import torch`, nothing else
        "python -c 'import torch'": [sys.executable, "-c", "import torch"],
    }  # fmt: skip
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    texts: dict[str, str] = {}
    for _ in range(args.repeats + 1):  # the first round warms the page cache, untimed
        for name, command in commands.items():
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            seconds[name].append(time.perf_counter() - start)
            texts[name] = done.stdout.strip()
    reference = statistics.median(seconds["faster-whisper int8"][1:])
    for name, times in seconds.items():
        median = statistics.median(times[1:])
        spread = ", ".join(f"{t:.2f}" for t in times[1:])
        ratio = median / reference
        print(f"{name:26} median {median:.2f} s ({ratio:.2f}x faster-whisper): {spread}")
    for name, text in texts.items():
        if text:
            print(f"{name:26} {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
