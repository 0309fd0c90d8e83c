"""Output formats (txt, json, srt, vtt) for one transcribed file, and the one atomic write
that outputs, reports, the model cache and the cost models all go through (a folder's: the
MNN graphs' cache and `as2d export`)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from as2d.types import RunStats, Segment, WindowResult

FORMATS = ("txt", "json", "srt", "vtt")
STDIN = "-"  # the command line's name for audio on standard input; written as `stdin.<ext>`


@dataclasses.dataclass
class FileResult:
    """Everything reported for one input file."""

    file: str
    method: str
    target: str
    drafter: str | None
    windows: list[WindowResult]
    stats: RunStats

    @property
    def text(self) -> str:
        return " ".join(w.text for w in self.windows if w.text)

    @property
    def segments(self) -> list[Segment]:
        """Every window's segments, in order (empty without timestamps)."""
        return [s for w in self.windows for s in w.segments]

    def cues(self) -> list[Segment]:
        """Subtitle cues: the segments where the run timed words, else one per window."""
        timed = any(w.segments for w in self.windows)
        return [c for w in self.windows for c in window_cues(w, timed)]


def window_cues(window: WindowResult, timed: bool) -> list[Segment]:
    """One window's subtitle cues: its segments in a `timed` run, else one for its text (a
    server streaming a file sends them window by window)."""
    if timed:
        return window.segments
    return [Segment(window.start, window.end, window.text)] if window.text else []


def to_json(result: FileResult) -> str:
    """One JSON object: file, text, method, target, drafter, windows, stats, and segments
    where the run timed them (each window's are there, not repeated in `windows`)."""
    windows = [dataclasses.asdict(w) for w in result.windows]
    for window in windows:
        del window["segments"]
    obj = {
        "file": result.file,
        "text": result.text,
        "method": result.method,
        "target": result.target,
        "drafter": result.drafter,
        "windows": windows,
        "stats": dataclasses.asdict(result.stats),
    }
    if result.segments:
        obj["segments"] = [dataclasses.asdict(s) for s in result.segments]
    return json.dumps(obj, ensure_ascii=False)


def _timestamp(seconds: float, sep: str) -> str:
    """12.5, "," -> "00:00:12,500" (SRT); "." gives WebVTT's form."""
    ms = round(seconds * 1000)
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def to_srt(result: FileResult) -> str:
    blocks = [
        f"{i}\n{_timestamp(c.start, ',')} --> {_timestamp(c.end, ',')}\n{c.text}\n"
        for i, c in enumerate(result.cues(), start=1)
    ]
    return "\n".join(blocks)


def to_vtt(result: FileResult) -> str:
    """WebVTT cues; where words are timed, each word after the first carries its start
    (karaoke-style: `Never <00:00:01.200>drink`)."""
    blocks = [
        f"{_timestamp(c.start, '.')} --> {_timestamp(c.end, '.')}\n{_karaoke(c)}\n"
        for c in result.cues()
    ]
    return "\n".join(["WEBVTT\n", *blocks])


def _karaoke(cue: Segment) -> str:
    if not cue.words:
        return cue.text
    first, *rest = cue.words
    timed = [f"<{_timestamp(w.start, '.')}><c>{w.word}</c>" for w in rest]
    return "".join([first.word.strip(), *timed])


def render(result: FileResult, fmt: str) -> str:
    """The file's content in `fmt` (one of FORMATS)."""
    renderers = {"txt": lambda r: r.text + "\n", "json": lambda r: to_json(r) + "\n"}
    renderers |= {"srt": to_srt, "vtt": to_vtt}
    return renderers[fmt](result)


def output_path(input_path: str, out_dir: Path, fmt: str) -> Path:
    """`talk.flac` -> `OUT_DIR/talk.txt`; `-` (standard input) -> `OUT_DIR/stdin.txt`."""
    stem = "stdin" if input_path == STDIN else Path(input_path).stem
    return out_dir / f"{stem}.{fmt}"


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yields a temporary path beside `path`; moves it onto `path` if the block succeeds.

    Readers see the old file or the new one, never half of one. The temporary name is
    this process's and thread's own, so concurrent writers of one path do not collide (the
    last to finish wins); it is removed whatever happens.

    Example:
        with atomic_path(out / "model.safetensors") as tmp:
            save_file(state, str(tmp))
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path, content: str) -> None:
    """Writes `content` (UTF-8) to `path` through `atomic_path`."""
    with atomic_path(path) as tmp:
        tmp.write_text(content, encoding="utf-8")


@contextmanager
def atomic_dir(path: Path, replace: bool = False) -> Iterator[Path]:
    """Yields a new empty folder beside `path`; moves it onto `path` if the block succeeds.

    Readers find the folder whole or not at all. Without `replace`, `path` must be missing
    or empty (else OSError, once the block is done); with it, a folder there is moved aside
    and removed once the new one is in place (between the two moves, no folder is there).
    The temporary folder is this process's and thread's own, and removed whatever happens.

    Example:
        with atomic_dir(out / "whisper-base") as tmp:
            export(net, tmp)
    """
    stem = f".{path.name}.{os.getpid()}-{threading.get_ident()}"
    tmp, old = path.with_name(f"{stem}.tmp"), path.with_name(f"{stem}.old")
    shutil.rmtree(tmp, ignore_errors=True)  # left by a process of this id that was killed
    tmp.mkdir()
    try:
        yield tmp
        if replace and path.is_dir():
            os.replace(path, old)
            try:
                os.replace(tmp, path)
            except OSError:
                os.replace(old, path)  # the old folder back where it was
                raise
        else:
            os.replace(tmp, path)  # onto nothing, or an empty folder
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
