"""The one atomic write: readers see the old file or the new one, never half of one."""

from __future__ import annotations

from pathlib import Path

import pytest

from as2d.writers import atomic_path, write_atomic


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
