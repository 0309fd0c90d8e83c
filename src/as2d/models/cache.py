"""The converted-model cache on disk: a manifest that tells a whole cache from a partial one.

A conversion (``convert.py``) writes its files, each moved into place whole
(``as2d.writers.atomic_path``), then ``manifest.json`` last: the converter version, the
source it came from, and each file's size, mtime and sha256. Every load checks sizes and
mtimes only (a ``stat`` per file): a truncated file, or one written since the conversion,
makes the cache invalid, and it is rebuilt. Hashing on every load would re-read hundreds of
MB before each command; the sha256 is compared on request (``check_hashes=True``), e.g. for
a cache copied with its mtimes kept.

No torch here: checking the cache must not cost importing it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from as2d.writers import atomic_path

CONVERTER_VERSION = 1  # bump when the cached layout changes; old caches are rebuilt
MANIFEST = "manifest.json"
WEIGHTS = "model.safetensors"


def sha256_file(path: Path) -> str:
    """Returns the hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Writes ``data`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))


def read_manifest(out_dir: Path) -> dict[str, Any] | None:
    """Returns the cache manifest, or None when it is missing or unreadable."""
    try:
        return dict(json.loads((out_dir / MANIFEST).read_text()))
    except (OSError, ValueError):
        return None


def write_manifest(out_dir: Path, source: dict[str, Any], files: Sequence[str]) -> None:
    """Records ``files`` (names in ``out_dir``, all written) as a complete cache of ``source``."""
    entries = {}
    for name in files:
        stat = (out_dir / name).stat()
        entries[name] = {
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "sha256": sha256_file(out_dir / name),
        }
    manifest = {"converter": CONVERTER_VERSION, "source": source, "files": entries}
    write_json(out_dir / MANIFEST, manifest)


def cache_is_valid(out_dir: Path, source: dict[str, Any], check_hashes: bool = False) -> bool:
    """Whether ``out_dir`` holds a complete conversion of ``source``.

    Args:
        out_dir: the cache directory.
        source: description of the source weights (as given to ``convert_to_hf``).
        check_hashes: also compare sha256, reading every file (sizes and mtimes are
            always compared).

    Returns:
        True when the manifest matches the converter version, the source, and every
        listed file's size and mtime (and hash); a manifest without mtimes (written
        before they were recorded) does not match, so that cache is rebuilt once.
    """
    manifest = read_manifest(out_dir)
    if not manifest or manifest.get("converter") != CONVERTER_VERSION:
        return False
    if manifest.get("source") != source:
        return False
    files: dict[str, Any] = manifest.get("files", {})
    for name, meta in files.items():
        path = out_dir / name
        try:
            stat = path.stat()
        except OSError:
            return False
        if (stat.st_size, stat.st_mtime_ns) != (meta["size"], meta.get("mtime_ns")):
            return False
        if check_hashes and sha256_file(path) != meta["sha256"]:
            return False
    return WEIGHTS in files
