"""Benchmark datasets: recordings with optional reference transcripts, from three sources.

- a JSONL manifest: one `{"audio": path relative to the manifest, "text": reference or
  absent, "language": optional, "subset": optional}` per line (`as2d bench` reports each
  subset on its own as well);
- a folder of audio files, each with an optional same-name `.txt` transcript;
- `asterisk:LANG` (en, fr, es): the Debian asterisk prompt sets, one recording per prompt,
  fetched into the cache by `eval.builders.fetch_asterisk` (never installed system-wide).

Longer recordings (joined prompts, synthesised speech) are built by `eval.builders` and
listed in a manifest. Any problem with the input raises `DatasetError` with one line.

Example:
    recordings = load_dataset("data-cache/bench/manifest.jsonl", cache=Path("data-cache"))
    recordings[0].audio, recordings[0].text, recordings[0].language
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".ogg", ".mp3", ".m4a", ".opus", ".webm"})
ASTERISK_LANGUAGES = ("en", "fr", "es")


class DatasetError(Exception):
    """The dataset cannot be used: missing, empty, malformed; the message is one line."""


@dataclass(frozen=True)
class Recording:
    """One benchmark recording: its audio file and what it says (None: no reference)."""

    audio: Path
    text: str | None = None
    language: str | None = None
    subset: str | None = None  # the part of the set it belongs to, reported on its own

    @property
    def name(self) -> str:
        return self.audio.stem


def load_dataset(spec: str, cache: Path) -> list[Recording]:
    """The recordings named by `spec`: a manifest (.jsonl), a folder, or `asterisk:LANG`.

    Args:
        spec: what the user typed as DATASET.
        cache: where `asterisk:LANG` packages are downloaded and unpacked.

    Raises:
        DatasetError: unknown form, missing path, malformed manifest, no recordings.
    """
    if spec.startswith("asterisk:"):
        from as2d.eval.builders import asterisk_prompts  # apt-get/dpkg only when asked

        language = spec.partition(":")[2]
        if language not in ASTERISK_LANGUAGES:
            raise DatasetError(f"asterisk:{language}: choose from {', '.join(ASTERISK_LANGUAGES)}")
        prompts = asterisk_prompts(cache, language)
        return [Recording(p.path, p.text, language) for p in prompts]
    path = Path(spec)
    if path.is_dir():
        manifest = path / "manifest.jsonl"
        return load_manifest(manifest) if manifest.is_file() else load_folder(path)
    if path.is_file():
        return load_manifest(path)
    raise DatasetError(f"{spec}: no such manifest or folder (or asterisk:en|fr|es)")


def load_manifest(path: Path) -> list[Recording]:
    """Recordings listed in a JSONL manifest; audio paths are relative to the manifest.

    Example:
        manifest.jsonl: {"audio": "a.flac", "text": "hello"}
        -> [Recording(Path("<dir>/a.flac"), "hello", None)]
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DatasetError(f"{path}: cannot read the manifest ({err})") from err
    recordings = [
        _manifest_entry(path, number, line)
        for number, line in enumerate(lines, start=1)
        if line.strip()
    ]
    if not recordings:
        raise DatasetError(f"{path}: the manifest lists no recordings")
    return recordings


def _manifest_entry(manifest: Path, number: int, line: str) -> Recording:
    where = f"{manifest}:{number}"
    try:
        entry = json.loads(line)
    except json.JSONDecodeError as err:
        raise DatasetError(f"{where}: not JSON ({err.msg})") from err
    if not isinstance(entry, dict) or not isinstance(entry.get("audio"), str):
        raise DatasetError(f'{where}: expected an object with an "audio" path')
    text, language, subset = entry.get("text"), entry.get("language"), entry.get("subset")
    if not all(isinstance(value, str | None) for value in (text, language, subset)):
        raise DatasetError(f'{where}: "text", "language" and "subset" must be strings when given')
    audio = manifest.parent / entry["audio"]
    if not audio.is_file():
        raise DatasetError(f"{where}: audio file {audio} not found")
    return Recording(audio, text, language, subset)


def load_folder(folder: Path) -> list[Recording]:
    """Every audio file in `folder` (sorted by name), with its same-name `.txt` if present."""
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES)
    if not files:
        suffixes = " ".join(sorted(AUDIO_SUFFIXES))
        raise DatasetError(f"{folder}: no audio files ({suffixes}) in the folder")
    recordings = []
    for audio in files:
        reference = audio.with_suffix(".txt")
        text = reference.read_text(encoding="utf-8").strip() if reference.is_file() else None
        recordings.append(Recording(audio, text))
    return recordings
