"""Building benchmark recordings: asterisk prompt sets, long-form joins, files and manifests.

- `fetch_debian`: Debian packages fetched with `apt-get download` into the cache and
  unpacked with `dpkg-deb -x` there: nothing is installed system-wide. `fetch_asterisk`
  uses it for `asterisk-core-sounds-LANG-wav` (8 kHz studio prompts, CC-BY-SA-3.0) and
  `asterisk-core-sounds-LANG` (their transcripts).
- `join_long_form`: clips joined with short random gaps into N-minute recordings, with
  their references joined in the same order.
- Synthesised speech (Piper, espeak-ng) is `speech.py`'s.

Every recording is written as FLAC with a same-name `.txt` reference (none where the words
are not known), atomically; a manifest (`write_manifest`) lists them for `as2d bench`.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from as2d.eval.datasets import DatasetError, Recording

GAP_S = (0.25, 0.8)  # silence after each joined clip: uniform in this range, seconds


@dataclass(frozen=True)
class Clip:
    """One short recording and what it says (None: not known)."""

    path: Path
    text: str | None
    seconds: float


def run(command: list[str], cwd: Path | None = None) -> None:
    """Run a command; a failure becomes a one-line DatasetError with its last stderr line."""
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    except OSError as err:
        raise DatasetError(f"{command[0]}: {err.strerror}") from err
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DatasetError(f"{' '.join(command)} failed ({done.returncode}): {last}")


def fetch_debian(cache: Path, packages: Sequence[str], into: str) -> Path:
    """Download `packages` into CACHE/debs and unpack them together into CACHE/INTO (cached).

    Raises:
        DatasetError: a package cannot be downloaded or unpacked (one line).
    """
    unpacked = cache / into
    if (unpacked / ".done").exists():
        return unpacked
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    missing = [name for name in packages if not list(debs.glob(f"{name}_*.deb"))]
    if missing:
        try:
            run(["apt-get", "download", *missing], cwd=debs)
        except DatasetError as err:
            names = ", ".join(missing)
            raise DatasetError(f"cannot fetch Debian package {names} ({err})") from err
    unpacked.mkdir(parents=True, exist_ok=True)
    for name in packages:
        run(["dpkg-deb", "-x", str(next(debs.glob(f"{name}_*.deb"))), str(unpacked)])
    (unpacked / ".done").touch()
    return unpacked


def fetch_asterisk(cache: Path, language: str) -> Path:
    """Download and unpack the prompt and transcript packages of `language` (cached)."""
    packages = [f"asterisk-core-sounds-{language}-wav", f"asterisk-core-sounds-{language}"]
    return fetch_debian(cache, packages, f"asterisk/{language}")


def clean_transcript(text: str) -> str:
    """Spoken words of a transcript: bracketed non-speech and silence notes removed.

    Example:
        "Goodbye [sound of a door] (2 seconds of silence)" -> "Goodbye"
    """
    text = re.sub(r"\[[^\]]*\]|\([^)]*silence[^)]*\)", " ", text)
    return " ".join(text.split())


def asterisk_prompts(cache: Path, language: str) -> list[Clip]:
    """Every prompt of the `language` set that has spoken words, sorted by path."""
    unpacked = fetch_asterisk(cache, language)
    notes = unpacked / "usr/share/doc" / f"asterisk-core-sounds-{language}"
    raw = gzip.decompress((notes / f"core-sounds-{language}.txt.gz").read_bytes())
    lines = raw.decode("utf-8", errors="replace").splitlines()
    voices = [d for d in (unpacked / "usr/share/asterisk/sounds").iterdir() if d.is_dir()]
    clips = []
    for line in lines:
        name, sep, text = line.partition(":")
        path = voices[0] / f"{name.strip()}.wav"
        text = clean_transcript(text)
        if sep and text and not name.startswith(("silence/", ";")) and path.is_file():
            clips.append(Clip(path, text, sf.info(path).duration))
    return sorted(clips, key=lambda clip: clip.path)


def plan_long_form(
    clips: Sequence[Clip], count: int, minutes: float, rng: np.random.Generator
) -> list[tuple[list[Clip], list[float]]]:
    """Split shuffled clips into up to `count` recordings of about `minutes`, with gaps.

    A recording takes clips (each followed by a random gap) while they fit in `minutes`
    (the first one always); one under half of that (clips ran out) is not made.
    """
    order = [clips[i] for i in rng.permutation(len(clips))]
    plans = []
    for _ in range(count):
        chosen: list[Clip] = []
        gaps: list[float] = []
        seconds = 0.0
        while order and (not chosen or seconds + order[-1].seconds <= minutes * 60):
            chosen.append(order.pop())
            gaps.append(float(rng.uniform(*GAP_S)))
            seconds += chosen[-1].seconds + gaps[-1]
        if seconds < minutes * 30:
            break
        plans.append((chosen, gaps))
    return plans


def join_long_form(
    clips: Sequence[Clip], out: Path, prefix: str, count: int, minutes: float, language: str
) -> list[Recording]:
    """Up to `count` recordings `OUT/PREFIX-NN.flac` of about `minutes` joined from `clips`.

    The clips are shuffled with a fixed seed, so the same call builds the same recordings.

    Recordings already written by an earlier call are kept as they are.
    """
    recordings = []
    plans = plan_long_form(clips, count, minutes, np.random.default_rng(0))
    for i, (chosen, gaps) in enumerate(plans):
        path = out / f"{prefix}-{i:02d}.flac"
        if not finished(path):
            rate = sf.info(chosen[0].path).samplerate
            pieces = []
            for clip, gap in zip(chosen, gaps, strict=True):
                audio, clip_rate = sf.read(clip.path, dtype="float32", always_2d=True)
                pieces += [soxr.resample(audio.mean(axis=1), clip_rate, rate), silence(gap, rate)]
            write_recording(path, pieces, rate, joined_text(chosen))
        recordings.append(written(path, language))
    return recordings


def joined_text(clips: Sequence[Clip]) -> str | None:
    """What `clips` say one after the other; None if any of them is not known."""
    texts = [clip.text for clip in clips]
    return None if None in texts else " ".join(str(text) for text in texts)


def silence(seconds: float, rate: int) -> np.ndarray:
    """`seconds` of digital silence at `rate`."""
    return np.zeros(round(seconds * rate), dtype=np.float32)


def write_recording(path: Path, pieces: Sequence[np.ndarray], rate: int, text: str | None) -> None:
    """Write float32 pieces as one 16-bit FLAC and `text` beside it (if known), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.flac")
    with sf.SoundFile(partial, "w", rate, 1, subtype="PCM_16") as file:
        for piece in pieces:
            file.write(piece.astype(np.float32))
    reference = path.with_suffix(".txt")
    if text is None:
        reference.unlink(missing_ok=True)
    else:
        reference.with_suffix(".partial.txt").write_text(text + "\n", encoding="utf-8")
        reference.with_suffix(".partial.txt").replace(reference)
    partial.replace(path)  # last: a FLAC without the reference it has never exists


def write_manifest(out: Path, recordings: Sequence[Recording]) -> Path:
    """Write OUT/manifest.jsonl (audio paths relative to `out`), atomically; its path."""
    from as2d.writers import write_atomic

    rows = []
    for r in recordings:
        row = {"audio": os.path.relpath(r.audio, out), "text": r.text, "language": r.language}
        row["subset"] = r.subset
        rows.append(json.dumps({k: v for k, v in row.items() if v is not None}, ensure_ascii=False))
    manifest = out / "manifest.jsonl"
    write_atomic(manifest, "".join(f"{row}\n" for row in rows))
    return manifest


def finished(path: Path) -> bool:
    """Whether the recording at `path` was written (its FLAC is written last)."""
    return path.is_file()


def written(path: Path, language: str | None, subset: str | None = None) -> Recording:
    """The recording `write_recording` wrote at `path`, with its reference if it has one."""
    reference = path.with_suffix(".txt")
    text = reference.read_text(encoding="utf-8").strip() if reference.is_file() else None
    return Recording(path, text, language, subset)
