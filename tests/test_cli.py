"""The `as2d` command as a user meets it: outputs, bad input, batches, resuming."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from as2d.cli import main

CLIP = Path(__file__).parent / "data" / "asterisk" / "en" / "vm-newuser.wav"
REFERENCE = "Welcome to Comedian Mail. First, I will guide you through a short setup process."
FAST = ["--target", "whisper-tiny.en", "--method", "target", "--no-progress"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["transcribe", *FAST, *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad")
    audio = CLIP.read_bytes()
    (root / "notes.wav").write_text("this is not audio\n")
    (root / "truncated.wav").write_bytes(audio[: len(audio) // 3])
    (root / "empty.wav").write_bytes(b"")
    (root / "a_directory").mkdir()
    return {
        "missing": root / "missing.wav",
        "directory": root / "a_directory",
        "not audio": root / "notes.wav",
        "truncated": root / "truncated.wav",
        "empty file": root / "empty.wav",
    }


def test_json_output_has_the_documented_fields(capsys):
    code, out, err = run(capsys, CLIP, "--format", "json")
    assert code == 0
    obj = json.loads(out)
    assert set(obj) == {"file", "text", "method", "target", "drafter", "windows", "stats"}
    assert obj["text"] == REFERENCE
    window = obj["windows"][0]
    assert set(window) >= {"index", "start", "end", "text", "token_ids", "encode_s", "decode_s"}
    assert obj["stats"]["tokens"] == len(window["token_ids"]) > 0
    assert set(obj["stats"]) >= {"wall_s", "audio_s", "tokens", "tokens_per_s", "rtf"}
    assert "RTF" in err


@pytest.mark.parametrize("kind", ["missing", "directory", "not audio", "truncated", "empty file"])
def test_bad_input_is_one_line_and_exit_2(capsys, bad_inputs, kind):
    code, out, err = run(capsys, bad_inputs[kind])
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("as2d: error: ")
    assert "Traceback" not in err


def test_zero_length_and_silence_give_empty_text(capsys, tmp_path):
    for name, seconds in (("zero.wav", 0), ("silence.flac", 5)):
        sf.write(tmp_path / name, np.zeros(16_000 * seconds, dtype=np.float32), 16_000)
        code, out, _ = run(capsys, tmp_path / name, "--format", "json")
        assert code == 0
        assert json.loads(out)["text"] == ""


def test_batch_continues_past_a_bad_file_and_resumes(capsys, bad_inputs, tmp_path):
    out_dir = tmp_path / "out"
    code, _, err = run(capsys, bad_inputs["not audio"], CLIP, "-o", out_dir)
    assert code == 1
    assert "notes.wav" in err
    written = out_dir / "vm-newuser.txt"
    assert written.read_text().strip() == REFERENCE
    assert [p.name for p in out_dir.iterdir()] == ["vm-newuser.txt"]  # no temporary leftovers
    written.write_text("kept\n")
    code, _, _ = run(capsys, CLIP, "-o", out_dir, "--skip-existing")
    assert code == 0
    assert written.read_text() == "kept\n"


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_subtitle_formats(capsys, fmt):
    code, out, _ = run(capsys, CLIP, "--format", fmt)
    assert code == 0
    assert REFERENCE in out
    assert ("00:00:00,000 --> " if fmt == "srt" else "WEBVTT") in out


def test_usage_errors_exit_2_before_any_work(capsys, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    no_gpu = [] if torch.cuda.is_available() else [["--device", "cuda"]]
    for args in (
        ["--target", "whisper-huge-nonexistent"],
        ["-o", str(blocker / "sub")],
        ["--device", "tpu"],
        ["--method", "sd", "--drafter", "ct2:whisper-tiny.en"],
        [str(CLIP.parent.parent / "es" / CLIP.name), "-o", str(tmp_path)],  # same output name
        *no_gpu,
    ):
        code = main(["transcribe", str(CLIP), *args])
        _, err = capsys.readouterr()
        assert code == 2
        assert len(err.strip().splitlines()) == 1 and err.startswith("as2d: error: ")


def test_no_traceback_from_the_installed_command(tmp_path):
    """The console script itself, in a fresh process, on a file that is not audio."""
    bad = tmp_path / "bad.mp3"
    bad.write_bytes(b"\x00" * 1000)
    proc = subprocess.run(
        [sys.executable, "-m", "as2d.cli", "transcribe", *FAST, str(bad)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("as2d: error: ")


def test_parsing_imports_no_torch():
    """`as2d --help` answers at once: torch and transformers come with the commands."""
    code = "import sys, as2d.cli; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


def test_models_lists_bundled(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "whisper-base" in out and "whisper-tiny.en" in out
