"""`as2d transcribe --ray`: files spread over a real local Ray cluster (127.0.0.1 only, two
workers of one CPU each, or one of two), compared with a local run of the same files."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from as2d.cli import main

DATA = Path(__file__).parents[1] / "data"
LONG = DATA / "long_en.flac"
CLIPS = [DATA / "asterisk" / "en" / "vm-newuser.wav", DATA / "asterisk" / "en" / "demo-nogo.wav"]
RUN_S = 240  # the most one command may take here


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three recordings and a file that is not audio."""
    root = tmp_path_factory.mktemp("recordings")
    for path in [LONG, *CLIPS]:
        shutil.copy(path, root / path.name)
    (root / "notes.wav").write_text("this is not audio\n")
    return root


@pytest.fixture(scope="module")
def local(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same files transcribed on this machine without Ray."""
    out = tmp_path_factory.mktemp("local")
    assert main(["transcribe", str(folder), "-o", str(out), "--no-progress"]) == 1  # notes.wav
    return out


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _as2d(*args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "as2d.cli", "transcribe", *args, "--no-progress"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_outputs_equal_a_local_run_and_a_bad_file_is_reported(folder, local, tmp_path) -> None:
    out = tmp_path / "ray"
    process = _as2d(str(folder), "-o", str(out), "--ray", "local", "--ray-cpus-per-worker", "1")
    _, err = process.communicate(timeout=RUN_S)
    assert process.returncode == 1, err  # some files failed, the others were written
    assert _contents(out) == _contents(local)  # byte for byte, nothing else in the folder
    errors = [line for line in err.splitlines() if line.startswith("as2d: error:")]
    assert len(errors) == 1 and "notes.wav" in errors[0]
    assert "ray: 4 file(s), 1 failed" in err and "on 2 worker(s)" in err


def test_resume_skips_the_files_already_written(folder, local, tmp_path) -> None:
    out = tmp_path / "ray"
    out.mkdir()
    kept = out / "long_en.txt"
    kept.write_text("kept\n")
    args = [str(folder), "-o", str(out), "--ray", "local", "--ray-cpus-per-worker", "1"]
    process = _as2d(*args, "--skip-existing", "--format", "txt")
    _, err = process.communicate(timeout=RUN_S)
    assert process.returncode == 1, err
    assert kept.read_text() == "kept\n"
    assert "ray: 3 file(s)" in err  # long_en was not sent to the cluster
    assert (out / "demo-nogo.txt").read_bytes() == (local / "demo-nogo.txt").read_bytes()


def test_lines_go_to_stderr_as_in_a_local_run_and_ray_says_nothing(tmp_path) -> None:
    """With the progress bar (no --no-progress): the per-file line and the summary on stderr,
    nothing on stdout, no line of Ray's own (its start-up notes)."""
    command = [sys.executable, "-m", "as2d.cli", "transcribe", str(CLIPS[0]), "-o", str(tmp_path),
               "--ray", "local", "--target", "whisper-tiny.en", "--method", "target"]  # fmt: skip
    process = subprocess.run(command, capture_output=True, text=True, timeout=RUN_S)
    assert process.returncode == 0, process.stderr
    assert process.stdout == ""
    lines = process.stderr.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"{CLIPS[0]}: ") and lines[1].startswith("ray: 1 file(s), 0 failed")


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _busy_worker(pid: int) -> int | None:
    """A Ray worker below `pid` that is transcribing a file now."""
    for child in _descendants(pid):
        try:
            title = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if title.startswith(b"ray::FileWorker.transcribe"):
            return child
    return None


def test_a_worker_killed_mid_file_has_its_file_finished_by_another(local, tmp_path) -> None:
    """One worker of two CPUs on the long recording; SIGKILL it while it decodes: a new
    worker starts, decodes the file again, and the output is the local run's."""
    source = tmp_path / "in"
    source.mkdir()
    shutil.copy(LONG, source / LONG.name)
    out = tmp_path / "ray"
    process = _as2d(str(source), "-o", str(out), "--ray", "local", "--ray-cpus-per-worker", "2")
    deadline = time.monotonic() + RUN_S
    worker = None
    while worker is None and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
        worker = _busy_worker(process.pid)
    assert worker is not None, process.communicate()[1]
    time.sleep(1.0)  # well into the file
    os.kill(worker, signal.SIGKILL)
    _, err = process.communicate(timeout=RUN_S)
    assert process.returncode == 0, err
    assert "1 worker(s) lost, 1 file(s) retried" in err
    assert _contents(out) == {"long_en.txt": (local / "long_en.txt").read_bytes()}


def test_without_an_output_folder_is_one_line(capsys) -> None:
    code = main(["transcribe", str(CLIPS[0]), "--ray", "local", "--no-progress"])
    err = capsys.readouterr().err
    assert (
        code == 2
        and err.strip() == "as2d: error: --ray writes its outputs to a folder: give -o DIR"
    )


def test_without_ray_installed_is_one_line_naming_the_extra(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    code = main(["transcribe", str(CLIPS[0]), "-o", str(tmp_path), "--ray", "local"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == "as2d: error: --ray needs Ray: pip install 'as2d[ray]'"
