"""Output formats (txt, json, srt, vtt) for one transcribed file, written atomically."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path

from as2d.types import RunStats, WindowResult

FORMATS = ("txt", "json", "srt", "vtt")


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


def to_json(result: FileResult) -> str:
    """One JSON object: file, text, method, target, drafter, windows, stats."""
    obj = {
        "file": result.file,
        "text": result.text,
        "method": result.method,
        "target": result.target,
        "drafter": result.drafter,
        "windows": [dataclasses.asdict(w) for w in result.windows],
        "stats": dataclasses.asdict(result.stats),
    }
    return json.dumps(obj, ensure_ascii=False)


def _timestamp(seconds: float, sep: str) -> str:
    """12.5, "," -> "00:00:12,500" (SRT); "." gives WebVTT's form."""
    ms = round(seconds * 1000)
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def to_srt(result: FileResult) -> str:
    cues = [w for w in result.windows if w.text]
    blocks = [
        f"{i}\n{_timestamp(w.start, ',')} --> {_timestamp(w.end, ',')}\n{w.text}\n"
        for i, w in enumerate(cues, start=1)
    ]
    return "\n".join(blocks)


def to_vtt(result: FileResult) -> str:
    cues = [w for w in result.windows if w.text]
    blocks = [f"{_timestamp(w.start, '.')} --> {_timestamp(w.end, '.')}\n{w.text}\n" for w in cues]
    return "\n".join(["WEBVTT\n", *blocks])


def render(result: FileResult, fmt: str) -> str:
    """The file's content in `fmt` (one of FORMATS)."""
    renderers = {"txt": lambda r: r.text + "\n", "json": lambda r: to_json(r) + "\n"}
    renderers |= {"srt": to_srt, "vtt": to_vtt}
    return renderers[fmt](result)


def output_path(input_path: str, out_dir: Path, fmt: str) -> Path:
    """`talk.flac` -> `OUT_DIR/talk.txt`."""
    return out_dir / f"{Path(input_path).stem}.{fmt}"


def write_atomic(path: Path, content: str) -> None:
    """Write to a temporary file beside `path`, then rename: readers never see half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
