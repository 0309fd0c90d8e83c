"""The output formats, and the one atomic write: readers see the old file or the new one,
never half of one (a folder's likewise)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from as2d.types import RunStats, Segment, WindowResult, Word
from as2d.writers import FileResult, atomic_dir, atomic_path, render, write_atomic


def test_write_atomic_replaces_whole(tmp_path: Path) -> None:
    path = tmp_path / "talk.txt"
    path.write_text("old\n")
    write_atomic(path, "café\n")
    assert path.read_text(encoding="utf-8") == "café\n"
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("killed mid-write")
    assert path.read_bytes() == b"old"
    assert list(tmp_path.iterdir()) == [path]


def test_a_folder_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "export"
    with pytest.raises(RuntimeError), atomic_dir(path) as tmp:
        (tmp / "encoder.mnn").write_bytes(b"graph")
        raise RuntimeError("interrupted before the decoder")
    assert list(tmp_path.iterdir()) == []  # no folder, no temporary one

    with atomic_dir(path) as tmp:
        (tmp / "encoder.mnn").write_bytes(b"graph")
    assert [p.name for p in path.iterdir()] == ["encoder.mnn"]
    assert list(tmp_path.iterdir()) == [path]


def test_a_folder_replaces_another_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "export"
    path.mkdir()
    (path / "old.txt").write_text("old")
    with pytest.raises(OSError), atomic_dir(path) as tmp:  # not empty: left as it is
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in path.iterdir()] == ["old.txt"]

    with atomic_dir(path, replace=True) as tmp:
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in path.iterdir()] == ["new.txt"]
    assert list(tmp_path.iterdir()) == [path]  # the old folder removed, no temporary one


def _result(timed: bool) -> FileResult:
    words = [
        Word(" Hello", 1.0, 1.5, 0.9),
        Word(" there.", 1.5, 2.0, 0.8),
        Word(" Bye.", 3.0, 3.4, 1.0),
    ]
    segments = [Segment(1.0, 2.0, "Hello there.", words[:2]), Segment(3.0, 3.4, "Bye.", words[2:])]
    window = WindowResult(0, 0.5, 4.0, "Hello there. Bye.", [1, 2, 3], 0.1, 0.2)
    if timed:
        window.segments = segments
    return FileResult("a.wav", "target", "whisper-base", None, [window], RunStats(1, 4, 3, 3, 0.25))


def test_subtitles_have_a_cue_per_segment_and_vtt_times_each_word() -> None:
    assert render(_result(True), "srt") == (
        "1\n00:00:01,000 --> 00:00:02,000\nHello there.\n\n2\n00:00:03,000 --> 00:00:03,400\nBye.\n"
    )
    assert render(_result(True), "vtt") == (
        "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nHello<00:00:01.500><c> there.</c>\n\n"
        "00:00:03.000 --> 00:00:03.400\nBye.\n"
    )
    untimed = render(_result(False), "srt")  # no timestamps: a cue per window
    assert untimed == "1\n00:00:00,500 --> 00:00:04,000\nHello there. Bye.\n"


def test_json_holds_segments_once_and_only_when_timed() -> None:
    timed = json.loads(render(_result(True), "json"))
    assert [s["text"] for s in timed["segments"]] == ["Hello there.", "Bye."]
    assert timed["segments"][0]["words"][1] == {
        "word": " there.", "start": 1.5, "end": 2.0, "probability": 0.8
    }  # fmt: skip
    assert "segments" not in timed["windows"][0]
    assert "segments" not in json.loads(render(_result(False), "json"))
