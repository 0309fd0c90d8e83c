"""The `as2d` command as a user meets it: outputs, bad input, batches, resuming."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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
        code, out, err = run(capsys, tmp_path / name, "--format", "json")
        assert code == 0
        assert json.loads(out)["text"] == ""
        assert json.loads(out)["stats"]["audio_s"] == seconds
        assert f"{name}: {seconds:.1f} s of audio" in err


def test_the_duration_reported_is_the_audio_s_length(capsys, tmp_path):
    """Not where the last window ends: here 3 s of silence follow the speech."""
    audio, rate = sf.read(CLIP, dtype="float32")
    padded = tmp_path / "padded.wav"
    sf.write(padded, np.concatenate([audio, np.zeros(3 * rate, np.float32)]), rate)
    length = sf.info(padded).duration
    code, out, err = run(capsys, padded, "--format", "json")
    assert code == 0
    result = json.loads(out)
    assert result["windows"][-1]["end"] < length - 2
    assert result["stats"]["audio_s"] == pytest.approx(length, abs=1e-3)
    assert result["stats"]["language"] == "en"  # English-only target: English
    assert f"padded.wav: {length:.1f} s of audio" in err


def test_batch_continues_past_a_bad_file_and_resumes(capsys, bad_inputs, tmp_path):
    out_dir = tmp_path / "out"
    code, _, err = run(capsys, bad_inputs["not audio"], CLIP, "-o", out_dir)
    assert code == 1
    assert "notes.wav" in err
    written = out_dir / "vm-newuser.txt"
    assert written.read_text().strip() == REFERENCE
    assert [p.name for p in out_dir.iterdir()] == ["vm-newuser.txt"]  # no temporary leftovers
    written.write_text("kept\n")
    code, _, err = run(capsys, CLIP, "-o", out_dir, "--skip-existing")
    assert code == 0
    assert written.read_text() == "kept\n"
    assert err == f"skipped 1 of 1 file: output already in {out_dir}\n"
    code, _, err = run(capsys, bad_inputs["not audio"], CLIP, "-o", out_dir, "--skip-existing")
    assert code == 2  # every file it tried failed
    assert err.splitlines()[0] == f"skipped 1 of 2 files: output already in {out_dir}"


def cue_texts(subtitles: str) -> list[str]:
    """The text lines of an srt or vtt file (no numbers, times or header)."""
    lines = subtitles.splitlines()
    return [x for x in lines if x and "-->" not in x and not x.isdigit() and x != "WEBVTT"]


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_subtitles_have_a_timed_cue_per_sentence(capsys, fmt):
    code, out, _ = run(capsys, CLIP, "--format", fmt)
    assert code == 0
    assert out.startswith("1\n" if fmt == "srt" else "WEBVTT\n")
    assert cue_texts(out) == ["Welcome to Comedian Mail.", REFERENCE.split(". ", 1)[1]]
    times = [line.split(" --> ") for line in out.splitlines() if "-->" in line]
    assert times[0][0] > "00:00:00" and times[0][1] <= times[1][0]  # after the leading silence
    code, plain, _ = run(capsys, CLIP, "--format", fmt, "--timestamps", "none")
    assert cue_texts(plain) == [REFERENCE]  # one cue per window
    code, words, _ = run(capsys, CLIP, "--format", fmt, "--timestamps", "word")
    assert ("<c> Mail.</c>" in words) == (fmt == "vtt")  # karaoke-style word times


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


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--language", "xx"], "unknown language code 'xx'; whisper-base knows af, am,"),
        (["--target", "whisper-tiny.en", "--task", "translate"], "English-only"),
        (["--target", "whisper-tiny.en", "--language", "fr"], "English-only"),
        (["--target", "nosuch/model"], "not in the local Hugging Face hub cache"),
        (["--drafter", "nosuch"], "unknown model 'nosuch'"),
        (["--drafter", "ct2:nosuch"], "unknown drafter 'ct2:nosuch'"),
    ],
    ids=[
        "unknown language",
        "translate on .en",
        "French on .en",
        "model nowhere here",
        "drafter nowhere here",
        "ct2 drafter nowhere here",
    ],
)
def test_a_request_the_target_cannot_decode_is_refused_before_anything_loads(tmp_path, args, says):
    """One line and exit 2 within seconds: no model loaded or converted (the cache stays
    empty), no hub asked."""
    env = {**os.environ, "AS2D_CACHE": str(tmp_path / "as2d"), "HF_HUB_CACHE": str(tmp_path / "hf")}
    command = [sys.executable, "-m", "as2d.cli", "transcribe", str(CLIP), "--no-progress", *args]
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert time.perf_counter() - started < 10
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("as2d: error: ")
    assert says in proc.stderr
    assert not (tmp_path / "as2d").exists() or not any((tmp_path / "as2d").iterdir())


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


def test_models_says_cached_once_a_model_was_used(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("AS2D_CACHE", str(tmp_path))
    assert main(["models"]) == 0
    assert "whisper-base\tnot cached" in capsys.readouterr().out
    code = main(["transcribe", str(CLIP), "--target", "whisper-base", "--method", "target"])
    assert code == 0
    capsys.readouterr()
    assert main(["models"]) == 0
    assert "whisper-base\tcached\n" in capsys.readouterr().out


# ---------------------------------------------------------------- Ctrl-C

LONG = Path(__file__).parent / "data" / "long_en.flac"


def descendants(pid: int) -> set[int]:
    """Every process below `pid` now (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def drafter_started(pid: int) -> bool:
    """Whether the drafter process (spawned by multiprocessing) exists below `pid`."""
    for child in descendants(pid):
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("after_s", [0.0, 3.0], ids=["drafter starting", "models loading"])
def test_ctrl_c_ends_a_run_in_one_line_and_leaves_nothing_behind(tmp_path, after_s):
    """Ctrl-C as a terminal sends it: SIGINT to the whole process group, drafter included,
    `after_s` after the drafter process appears."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "as2d.cli", "transcribe", str(LONG), "-o", str(out)]
    proc = subprocess.Popen(
        [*command, "--no-progress"], stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    seen: set[int] = set()
    deadline = time.perf_counter() + 120
    while not drafter_started(proc.pid):
        assert proc.poll() is None and time.perf_counter() < deadline, "no drafter started"
        time.sleep(0.01)
    interrupt_at = time.perf_counter() + after_s
    while time.perf_counter() < interrupt_at:
        seen |= descendants(proc.pid)
        time.sleep(0.05)
    seen |= descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.splitlines() == ["as2d: error: interrupted"], err
    deadline = time.perf_counter() + 10  # the resource tracker leaves when it sees us gone
    while any(map(running, seen)) and time.perf_counter() < deadline:
        time.sleep(0.05)
    assert seen and not any(map(running, seen)), "a child process survived"
    assert not out.exists() or not list(out.iterdir()), "no output, no temporary file"


def test_ctrl_c_while_writing_leaves_no_file(capsys, tmp_path, monkeypatch):
    out_dir = tmp_path / "out"
    replace = os.replace

    def interrupted_replace(source: str, target: Path) -> None:
        if Path(target).parent == out_dir:
            raise KeyboardInterrupt
        replace(source, target)

    monkeypatch.setattr(os, "replace", interrupted_replace)
    code, _, err = run(capsys, CLIP, "-o", out_dir)
    assert code == 130 and err.strip() == "as2d: error: interrupted"
    assert list(out_dir.iterdir()) == [], "neither the output nor its temporary file"
