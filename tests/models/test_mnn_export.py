"""`as2d export --runtime mnn`: a folder with the graphs, tokenizer and manifest, from which
`--runtime mnn --target DIR` decodes the tokens the model's name gives; and the mistakes it
is told in one line (a bad name, a folder not empty or not writable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from as2d.cli import main
from as2d.models.cache import sha256_file
from as2d.models.mnn_export import MANIFEST, read_export
from as2d.models.mnn_graphs import GRAPHS
from as2d.models.mnn_whisper import mnn_available

CLIP = Path(__file__).parents[1] / "data" / "asterisk" / "en" / "demo-nogo.wav"
MODEL = "whisper-tiny.en"
needs_mnn = pytest.mark.skipif(not mnn_available(), reason="MNN is not installed: as2d[mnn]")


def as2d(*args: object) -> subprocess.CompletedProcess[str]:
    """`as2d ARGS` in a fresh process, as a user runs it."""
    command = [sys.executable, "-m", "as2d.cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The bundled tiny.en exported by the command over a folder holding an old file
    (--force), and what it said on stderr."""
    directory = tmp_path_factory.mktemp("device") / "tiny"
    directory.mkdir()
    (directory / "old.txt").write_text("an earlier export's")
    proc = as2d("export", "--runtime", "mnn", MODEL, directory, "--force")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    return directory, proc.stderr


def tokens(capsys: pytest.CaptureFixture[str], target: Path | str) -> list[list[int]]:
    """Each window's tokens of target-only decoding on MNN, from the command line's json."""
    options = ["--method", "target", "--language", "en", "--format", "json", "--no-progress"]
    code = main(["transcribe", str(CLIP), "--runtime", "mnn", "--target", str(target), *options])
    out = capsys.readouterr().out
    assert code == 0
    return [window["token_ids"] for window in json.loads(out)["windows"]]


def test_a_bad_name_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    proc = as2d("export", "--runtime", "mnn", "no-such-model", tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "as2d: error: unknown model 'no-such-model': not a bundled model (whisper-base, "
        "whisper-tiny.en), a local model directory, or a Hugging Face hub id"
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_folder_not_empty_is_kept_without_force(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    proc = as2d("export", "--runtime", "mnn", MODEL, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"as2d: error: {tmp_path} is not empty: give --force to replace it"
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    proc = as2d("export", "--runtime", "mnn", MODEL, blocker / "tiny")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"as2d: error: {blocker} is a file, not a folder"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_a_folder_not_writable_is_one_line(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    proc = as2d("export", "--runtime", "mnn", MODEL, locked / "tiny")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"as2d: error: cannot write {locked / 'tiny'}: Permission denied"
    ]


@pytest.mark.slow
@needs_mnn
def test_the_export_holds_the_graphs_tokenizer_and_manifest(exported: tuple[Path, str]) -> None:
    directory, stderr = exported
    manifest = read_export(directory)
    assert (manifest.model, manifest.runtime, manifest.dtype) == (MODEL, "mnn", "float32")
    assert (manifest.n_mels, manifest.sample_rate) == (80, 16_000)
    assert manifest.tokens.eot == 50256 and manifest.tokens.sot == 50257
    assert manifest.tokens.languages == {}  # English-only: no language in its prompt
    for name, (inputs, outputs) in GRAPHS.items():
        graph = manifest.graphs[name]
        assert (graph.inputs, graph.outputs) == (inputs, outputs)
        assert sha256_file(directory / graph.file) == graph.sha256
    names = {p.name for p in directory.iterdir()}  # the old file gone (--force)
    assert names == {MANIFEST, "config.json", "tokenizer.json", *(f"{g}.mnn" for g in GRAPHS)}
    assert not any(p.name.startswith(".") for p in directory.parent.iterdir())  # no temporary
    assert stderr.splitlines()[-1] == (
        f"{MODEL}: exported for mnn to {directory} "
        f"({sum(g.bytes for g in manifest.graphs.values()) / 1e6:.0f} MB); "
        f"run it with: as2d transcribe FILE --runtime mnn --target {directory}"
    )


@pytest.mark.slow
@needs_mnn
def test_the_export_decodes_the_tokens_of_the_model_s_name(
    exported: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, _ = exported
    from_export = tokens(capsys, directory)
    assert sum(map(len, from_export)) > 10
    assert from_export == tokens(capsys, MODEL)


@pytest.mark.slow
@needs_mnn
def test_an_export_is_refused_by_torch_and_a_broken_copy_is_named(
    exported: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, _ = exported
    code = main(["transcribe", str(CLIP), "--target", str(directory), "--method", "target"])
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"as2d: error: {directory} is an export for mnn (as2d export): run it with --runtime mnn"
    ]

    copy = tmp_path / "copy"
    copy.mkdir()
    for file in directory.iterdir():
        os.link(file, copy / file.name)
    (copy / "decoder.mnn").unlink()
    (copy / "decoder.mnn").write_bytes(b"half a graph")
    code = main(["transcribe", str(CLIP), "--runtime", "mnn", "--target", str(copy)])
    assert code == 2
    size = read_export(directory).graphs["decoder"].bytes
    assert capsys.readouterr().err.splitlines() == [
        f"as2d: error: {copy / 'decoder.mnn'} is missing or not the exported one "
        f"({size} bytes): copy the export again"
    ]
