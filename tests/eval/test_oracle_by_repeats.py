"""scripts/oracle_by_repeats.py on a hand-made results.jsonl whose answer is known."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "oracle_by_repeats.py"
# config -> method, budget, per-window seconds in repeats 0 and 1; every window has 10 tokens.
# auto is lucky on one window in each repeat: per repeat the oracle takes auto's lucky 1 s
# and k=8's 2 s (20 tokens / 3 s), auto alone 20 / 4 s; on medians of both, all tie at 2 s.
TIMES = {
    "target 2t": ("target", "-", [[4.0, 4.0], [4.0, 4.0]]),
    "as2d tiny k=auto": ("as2d", "auto", [[1.0, 3.0], [3.0, 1.0]]),
    "as2d tiny k=8": ("as2d", "8", [[2.0, 2.0], [2.0, 2.0]]),
}


def run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(path), *args], capture_output=True, text=True, check=False
    )


def rows_of(runtime: str | None = None, scale: float = 1.0) -> list[dict[str, object]]:
    """TIMES as results.jsonl rows (on `runtime`: None, a run from before runtimes were
    compared), every time multiplied by `scale`."""
    return [
        {"config": config, "method": method, "budget": budget, "recording": "r", "window": window,
         "repeat": repeat, "tokens": 10, "wall_s": scale * seconds[repeat][window],
         **({"runtime": runtime} if runtime else {})}
        for config, (method, budget, seconds) in TIMES.items()
        for repeat in (0, 1)
        for window in (0, 1)
    ]  # fmt: skip


def test_the_oracles_lead_shrinks_with_repeats_and_the_control_is_auto_against_itself(
    tmp_path: Path,
):
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(row) + "\n" for row in rows_of()))
    done = run(results)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[2] == "| 1 | 2.5 | 5.0 | 6.7 | 75.0% |"
    assert lines[3] == "| 2 | 2.5 | 5.0 | 5.0 | 100.0% |"
    # two copies of auto, one repeat each: the oracle takes 1 s on both windows (20 / 2 s)
    assert lines[4].endswith("of 1 repeat(s) each: 50.0%")


def test_a_file_that_is_not_results_is_a_one_line_error(tmp_path: Path):
    bad = tmp_path / "results.jsonl"
    bad.write_text("not json\n")
    done = run(bad)
    assert done.returncode != 0 and len(done.stderr.splitlines()) == 1
    assert "not a readable results.jsonl" in done.stderr


def test_a_run_that_compared_runtimes_is_read_one_runtime_at_a_time(tmp_path: Path):
    """Torch's rows as above, MNN's twice as fast: the first runtime by default, or the one
    named (same shares: every time halved)."""
    results = tmp_path / "results.jsonl"
    rows = rows_of("torch") + rows_of("mnn", scale=0.5)
    results.write_text("".join(json.dumps(row) + "\n" for row in rows))
    first, mnn = run(results), run(results, "--runtime", "mnn")
    assert first.returncode == 0 and mnn.returncode == 0, first.stderr + mnn.stderr
    assert first.stdout.splitlines()[2] == "| 1 | 2.5 | 5.0 | 6.7 | 75.0% |"
    assert mnn.stdout.splitlines()[2] == "| 1 | 5.0 | 10.0 | 13.3 | 75.0% |"
