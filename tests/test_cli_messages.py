"""What the `as2d` command says and leaves behind, run as a user runs it (a subprocess): bad
files in words, a closed pipe, output paths that cannot be written."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from audio_files import encode_with_av

DATA = Path(__file__).parent / "data" / "asterisk" / "en"
CLIP = DATA / "vm-newuser.wav"
CLIPS = [CLIP, DATA / "demo-nogo.wav", DATA / "dir-intro.wav"]
FAST = ["--target", "whisper-tiny.en", "--method", "target", "--no-progress"]


def as2d(*args: object, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`as2d ARGS` in a fresh process; its output as text."""
    command = [sys.executable, "-m", "as2d.cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def damaged_mp3(path: Path) -> Path:
    """CLIP as an MP3 with 2000 random bytes in its middle: libmpg123 (libsndfile's MP3
    decoder) prints four lines of its own about it to the process's stderr."""
    audio, rate = sf.read(CLIP, dtype="float32")
    encode_with_av(path, audio, rate, "mp3")
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 2000] = np.random.default_rng(0).bytes(2000)
    path.write_bytes(bytes(data))
    return path


def test_bad_files_are_told_in_words_once_each(tmp_path):
    """No errno, no decoder library's own lines: one line per file, saying what is wrong."""
    notes = tmp_path / "notes.wav"
    notes.write_text("this is not audio\n")
    empty = tmp_path / "empty.flac"
    empty.write_bytes(b"")
    proc = as2d("transcribe", *FAST, notes, damaged_mp3(tmp_path / "damaged.mp3"), empty)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"as2d: error: {notes}: not an audio file that as2d can decode "
        "(an unknown format, or damaged)",
        f"as2d: error: {tmp_path / 'damaged.mp3'}: damaged or truncated audio data",
        f"as2d: error: {empty}: empty file (0 bytes)",
    ]


def test_a_closed_pipe_stops_the_run_at_once_and_quietly():
    """`as2d transcribe A B C | head -c 10`: once the reader has gone, no more files are
    decoded and nothing is said about it; exit 141, as a shell reports a tool SIGPIPE ended."""
    command = [sys.executable, "-m", "as2d.cli", "transcribe", *FAST, *map(str, CLIPS)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10) == "Welcome to"
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 141
    # the first file's report at most (it may be written before the pipe closes); the
    # second file may have been decoded by then, never the third
    assert all(line.startswith(f"{CLIP}: ") for line in err.splitlines()), err


def test_a_timeline_that_cannot_be_written_is_a_usage_error_before_decoding(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for timeline in (blocker / "x.png", tmp_path / "missing" / "x.png"):
        proc = as2d("transcribe", *FAST, CLIP, "--timeline", timeline)
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr  # nothing decoded
        assert proc.stderr.splitlines() == [
            f"as2d: error: --timeline {timeline}: {timeline.parent} is not a folder"
        ]


def test_a_timeline_that_fails_leaves_the_transcript_and_a_warning(tmp_path):
    """The picture fails after the transcript is written (its name is taken by a folder): the
    file is transcribed all the same, and the warning names the picture, not our temporary."""
    (tmp_path / "x.png").mkdir()
    out = tmp_path / "out"
    proc = as2d("transcribe", *FAST, CLIP, "-o", out, "--timeline", tmp_path / "x.png")
    assert proc.returncode == 0, proc.stderr
    assert (out / "vm-newuser.txt").read_text().startswith("Welcome to Comedian Mail.")
    warning, report = proc.stderr.splitlines()
    assert warning == f"as2d: warning: {CLIP}: no timeline at {tmp_path / 'x.png'}: Is a directory"
    assert report.startswith(f"{CLIP}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "x.png"]  # no temporary left


def test_serve_on_a_port_in_use_is_a_usage_error_before_the_models_load():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        proc = as2d("serve", "--port", port, "--target", "whisper-tiny.en", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"as2d: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]


REAPER = """
import ctypes, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to this process
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE).returncode
time.sleep(1.0)
children = subprocess.run(["ps", "-o", "stat=,cmd=", "--ppid", str(__import__("os").getpid())],
                          capture_output=True, text=True).stdout.splitlines()
print(code, [c for c in children if not c.endswith("--ppid " + str(__import__("os").getpid()))])
"""


def test_nothing_is_left_behind_after_the_command_exits(tmp_path):
    """A one-off as2d transcription that starts a drafter process (a fresh cache: no cost is
    known, so it starts) leaves no process behind once it has exited, not even a defunct one
    (multiprocessing's resource tracker was one, where the session's init did not reap it)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_CHILD_SUBREAPER is Linux's")
    long_en = DATA.parents[1] / "long_en.flac"
    env = {**os.environ, "AS2D_CACHE": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "as2d.cli", "transcribe", str(long_en), "--no-progress"]
    command += ["--target", "whisper-tiny.en", "--format", "json", "-o", str(tmp_path / "out")]
    proc = subprocess.run(
        [sys.executable, "-c", REAPER, *command],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.stdout.strip() == "0 []", proc.stdout + proc.stderr
    result = json.loads((tmp_path / "out" / "long_en.json").read_text())
    assert result["stats"]["drafter"] is not None  # a drafter process was started
