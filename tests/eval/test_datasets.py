"""Dataset loaders: manifest, folder, and one-line errors for bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from as2d.eval.datasets import DatasetError, Recording, load_dataset, load_folder, load_manifest

ASTERISK = Path(__file__).parents[1] / "data" / "asterisk" / "en"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Two clips, one with a same-name transcript, plus a file that is not audio."""
    shutil.copy(ASTERISK / "dir-instr.wav", tmp_path / "b.wav")
    shutil.copy(ASTERISK / "demo-nogo.wav", tmp_path / "a.wav")
    (tmp_path / "a.txt").write_text("Hello there.\n")
    (tmp_path / "notes.md").write_text("not audio")
    return tmp_path


def test_folder_lists_audio_sorted_with_optional_transcripts(folder: Path):
    assert load_folder(folder) == [
        Recording(folder / "a.wav", "Hello there.", None),
        Recording(folder / "b.wav", None, None),
    ]
    assert load_dataset(str(folder), cache=folder) == load_folder(folder)


def test_manifest_paths_are_relative_to_the_manifest(folder: Path):
    manifest = folder / "sets" / "m.jsonl"
    manifest.parent.mkdir()
    rows = [{"audio": "../a.wav", "text": "hi", "language": "en"}, {"audio": "../b.wav"}]
    manifest.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert load_manifest(manifest) == [
        Recording(manifest.parent / "../a.wav", "hi", "en"),
        Recording(manifest.parent / "../b.wav", None, None),
    ]
    assert load_dataset(str(manifest), cache=folder) == load_manifest(manifest)


def test_manifest_subsets(folder: Path):
    rows = [{"audio": "a.wav", "language": "fr", "subset": "varied"}, {"audio": "b.wav"}]
    (folder / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert load_manifest(folder / "m.jsonl") == [
        Recording(folder / "a.wav", None, "fr", "varied"),
        Recording(folder / "b.wav", None, None, None),
    ]


def test_a_folder_with_a_manifest_uses_the_manifest(folder: Path):
    (folder / "manifest.jsonl").write_text(json.dumps({"audio": "b.wav", "text": "x"}) + "\n")
    assert load_dataset(str(folder), cache=folder) == [Recording(folder / "b.wav", "x", None)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "lists no recordings"),
        ("{not json\n", "m.jsonl:1: not JSON"),
        ('{"audio": "a.wav"}\n[1, 2]\n', 'm.jsonl:2: expected an object with an "audio" path'),
        ('{"audio": "missing.wav"}\n', "missing.wav not found"),
        ('{"audio": "a.wav", "text": 3}\n', '"text", "language" and "subset" must be strings'),
        ('{"audio": "a.wav", "subset": ["short"]}\n', '"subset" must be strings'),
    ],
)
def test_bad_manifest_is_one_line(folder: Path, content: str, message: str):
    (folder / "m.jsonl").write_text(content)
    with pytest.raises(DatasetError, match=message) as error:
        load_manifest(folder / "m.jsonl")
    assert "\n" not in str(error.value)


def test_bad_dataset_specs(tmp_path: Path):
    with pytest.raises(DatasetError, match="no such manifest or folder"):
        load_dataset(str(tmp_path / "nothing"), cache=tmp_path)
    with pytest.raises(DatasetError, match="no audio files"):
        load_dataset(str(tmp_path), cache=tmp_path)
    with pytest.raises(DatasetError, match="asterisk:de: choose from en, fr, es"):
        load_dataset("asterisk:de", cache=tmp_path)
