"""Timelines: lanes from run data, a readable PNG, and `as2d transcribe --timeline`."""

from __future__ import annotations

from pathlib import Path

import pytest

from as2d.cli import main
from as2d.eval.timeline import (
    Timeline,
    drafter_spans,
    plot_timeline,
    target_spans,
    timeline_path,
)
from as2d.runtime.drafter import BusyInterval
from as2d.types import WindowResult

CLIPS = Path(__file__).parents[1] / "data" / "asterisk" / "en"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
T0 = 1000.0  # a perf_counter origin, as a real run has


def _result(index: int, started: float, encode_s: float, decode_s: float) -> WindowResult:
    return WindowResult(
        index,
        30.0 * index,
        30.0 * index + 30,
        "text",
        list(range(40)),
        encode_s,
        decode_s,
        verify_passes=5,
        plain_steps=3,
        accepted_tokens=30,
        started_at=T0 + started,
    )


@pytest.fixture
def synthetic() -> Timeline:
    """Four windows; the drafter (numbering from 7: a second recording) runs ahead."""
    results = [_result(i, 0.2 + 3.0 * i, 0.8, 2.0) for i in range(4)]
    intervals = [
        BusyInterval(5, T0 - 3.0, T0 - 0.5, 0.5, 30, True),  # the previous recording
        *(
            BusyInterval(7 + i, T0 + 0.1 + 2.0 * i, T0 + 2.0 + 2.0 * i, 0.4, 35, True)
            for i in range(3)
        ),
        BusyInterval(10, T0 + 6.1, T0 + 11.5, 0.4, 12, False),  # abandoned: the target was done
    ]
    return Timeline(
        "synthetic",
        12.0,
        target_spans(results, T0, speculative=True),
        drafter_spans(intervals, base=7, windows=4, origin=T0),
    )


def test_spans_are_relative_to_the_run_and_renumbered(synthetic):
    first = synthetic.target[0]
    assert first.window == 0
    assert (first.start, first.encoded, first.end) == pytest.approx((0.2, 1.0, 3.0))
    assert (first.tokens, first.accepted) == (40, 30)
    assert [s.window for s in synthetic.drafter] == [0, 1, 2, 3]  # window 5 left out
    assert synthetic.drafter[0].start == pytest.approx(0.1)
    assert synthetic.drafter[0].encoded == pytest.approx(0.5)
    assert not synthetic.drafter[-1].finished


def test_plot_writes_a_png(tmp_path, synthetic):
    path = tmp_path / "timeline.png"
    plot_timeline(synthetic, path)
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 10_000  # bars, labels and legend, not an empty canvas


def test_plot_without_a_drafter(tmp_path, synthetic):
    path = tmp_path / "target-only.png"
    plot_timeline(Timeline("target only", 12.0, synthetic.target, ()), path)
    assert path.read_bytes().startswith(PNG_SIGNATURE)


def test_timeline_path_names_each_input_when_there_are_several():
    assert timeline_path(Path("t.png"), "a/b.flac", several=False) == Path("t.png")
    assert timeline_path(Path("o/t.png"), "a/b.flac", several=True) == Path("o/t-b.png")


@pytest.mark.slow
def test_cli_draws_one_timeline_per_input(tmp_path, capsys):
    files = [CLIPS / "vm-newuser.wav", CLIPS / "dir-intro.wav"]
    args = ["--target", "whisper-tiny.en", "--language", "en", "--no-progress"]
    code = main(["transcribe", *args, "--timeline", str(tmp_path / "tl.png"), *map(str, files)])
    capsys.readouterr()
    assert code == 0
    for f in files:
        data = (tmp_path / f"tl-{f.stem}.png").read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        assert len(data) > 10_000
