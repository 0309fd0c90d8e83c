"""Live input as a user meets it: `as2d transcribe -` on a pipe (raw PCM or a container),
decoded as it arrives and token for token as the file is; `as2d listen` without a
microphone; the Python API on a generator of blocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from as2d.api import Transcriber
from as2d.audio.load import load_audio
from as2d.audio.windows import SpeechWindower
from as2d.options import Options
from as2d.types import SAMPLE_RATE

pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data"
CLIP = DATA / "asterisk" / "en" / "vm-newuser.wav"  # 6 s, one window
LONG_EN = DATA / "long_en.flac"  # 112 s, several windows
FAST = ["--target", "whisper-tiny.en", "--method", "target", "--no-progress"]


def as2d(
    *args: object, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """`as2d ARGS` in a fresh process, `stdin` piped into it."""
    command = [sys.executable, "-m", "as2d.cli", *map(str, args)]
    return subprocess.run(command, input=stdin, capture_output=True, timeout=600, env=env)


def window_tokens(path: Path) -> list[list[int]]:
    return [w["token_ids"] for w in json.loads(path.read_text())["windows"]]


def as_int16(audio: np.ndarray) -> np.ndarray:
    return np.clip(np.round(audio * 32768), -32768, 32767).astype(np.int16)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[list[int]]]]:
    """Each recording, and the int16-rounded 16 kHz copy of it that raw PCM carries, with
    its tokens window by window as `as2d transcribe FILE` decodes it (one process for all)."""
    root = tmp_path_factory.mktemp("live")
    paths = {"clip": CLIP, "long": LONG_EN}
    for name, path in list(paths.items()):
        paths[f"{name}_pcm"] = root / f"{name}_pcm.wav"
        sf.write(paths[f"{name}_pcm"], as_int16(load_audio(path)), SAMPLE_RATE, "PCM_16")
    out = root / "out"
    proc = as2d("transcribe", *FAST, *paths.values(), "--format", "json", "-o", out)
    assert proc.returncode == 0, proc.stderr
    tokens = {name: window_tokens(out / f"{path.stem}.json") for name, path in paths.items()}
    assert len(tokens["long"]) > 1 and all(tokens.values())
    return {name: (paths[name], tokens[name]) for name in paths}


def transcribe_stdin(data: bytes, out: Path, *options: str) -> list[list[int]]:
    proc = as2d("transcribe", "-", *FAST, "--format", "json", "-o", out, *options, stdin=data)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.decode().startswith("stdin: ")
    return window_tokens(out / "stdin.json")


@pytest.mark.parametrize("name", ["clip", "long"])
def test_raw_pcm_on_stdin_decodes_as_its_file(files, tmp_path, name):
    path, expected = files[f"{name}_pcm"]
    pcm = sf.read(path, dtype="int16")[0].tobytes()
    assert transcribe_stdin(pcm, tmp_path, "--input-format", "s16le") == expected


@pytest.mark.parametrize("name", ["clip", "long"])
def test_a_container_on_stdin_decodes_as_its_file(files, tmp_path, name):
    path, expected = files[name]  # an 8 kHz wav, a flac: resampled as the file is
    assert transcribe_stdin(path.read_bytes(), tmp_path) == expected


def test_raw_pcm_at_another_rate_is_resampled(files, tmp_path):
    """8 kHz int16 as the file holds it: the same samples as the file, resampled alike."""
    path, expected = files["clip"]
    pcm = sf.read(path, dtype="int16")[0].tobytes()
    assert transcribe_stdin(pcm, tmp_path, "--input-format", "s16le", "--rate", "8000") == expected


def test_the_first_window_is_printed_before_stdin_ends(files):
    """112 s of raw PCM written a second of audio at a time, 0.2 s apart: the first window's
    text is on stdout while the writer still has most of the recording to write."""
    pcm = sf.read(files["long_pcm"][0], dtype="int16")[0].tobytes()
    second = 2 * SAMPLE_RATE
    command = [
        sys.executable,
        "-m",
        "as2d.cli",
        "transcribe",
        "-",
        *FAST,
        "--input-format",
        "s16le",
    ]
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    written = threading.Event()

    def write_slowly() -> None:
        assert proc.stdin is not None
        for at in range(0, len(pcm), second):
            proc.stdin.write(pcm[at : at + second])
            proc.stdin.flush()
            time.sleep(0.2)
        proc.stdin.close()
        written.set()

    writer = threading.Thread(target=write_slowly)
    writer.start()
    first = proc.stdout.readline().decode()
    still_writing = not written.is_set()
    writer.join()
    rest = proc.stdout.read().decode()
    assert proc.wait(timeout=300) == 0
    assert first.strip() and still_writing
    assert len(rest.splitlines()) >= 1  # later windows, each on its own line


def test_stdin_cut_at_endpoints_prints_the_files_windows(files, tmp_path):
    """`--endpoint-ms` on standard input is heard as a microphone is (`LiveSession`): one line
    per window, each the text `as2d transcribe FILE --endpoint-ms` gives that window."""
    path = files["long_pcm"][0]
    cut = ["--endpoint-ms", "600"]
    proc = as2d("transcribe", *FAST, *cut, path, "--format", "json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    windows = json.loads((tmp_path / f"{path.stem}.json").read_text())["windows"]
    pcm = sf.read(path, dtype="int16")[0].tobytes()
    proc = as2d("transcribe", "-", *FAST, *cut, "--input-format", "s16le", stdin=pcm)
    assert proc.returncode == 0, proc.stderr
    assert len(windows) > 2
    assert proc.stdout.decode().splitlines() == [w["text"] for w in windows if w["text"]]
    assert proc.stderr.decode().startswith(f"stdin: {len(pcm) / 2 / SAMPLE_RATE:.1f} s of audio")


def test_a_stdin_window_is_decoded_in_the_pause_before_its_endpoint():
    """A pause shorter than the endpoint is heard, then nothing comes for a while: the
    window that pause would end is decoded meanwhile, so once the endpoint is heard its line
    comes at once, not a decode later (issue 39, 1). whisper-base decodes this window in
    1.2-1.5 s on a 2-core Xeon; the line came 0.1-0.2 s after the endpoint's audio."""
    audio = load_audio(CLIP)
    (window,) = SpeechWindower(endpoint_s=0.6).windows([audio])
    end = int((window.speech[-1][1] + 0.45) * SAMPLE_RATE)  # a 0.45 s pause
    audio = np.concatenate([audio, np.zeros(SAMPLE_RATE, np.float32)])[:end]
    command = [sys.executable, "-m", "as2d.cli", "transcribe", "-", "--method", "target"]
    command += ["--language", "en", "--input-format", "s16le", "--endpoint-ms", "600"]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(as_int16(audio).tobytes())
    proc.stdin.flush()
    time.sleep(15)  # start-up, and the window decoded in the pause
    proc.stdin.write(bytes(2 * SAMPLE_RATE))  # a second of silence: the endpoint
    proc.stdin.flush()
    sent = time.monotonic()
    line = proc.stdout.readline()
    waited = time.monotonic() - sent
    proc.stdin.close()
    assert proc.wait(timeout=120) == 0
    assert line.strip() and waited < 0.6, waited


def test_garbage_on_stdin_is_one_line_and_exit_2():
    proc = as2d("transcribe", "-", *FAST, stdin=b"this is not audio\n" * 100)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and proc.stdout == b""
    assert len(err.splitlines()) == 1 and err.startswith("as2d: error: stdin: ")
    assert "Traceback" not in err


def test_a_stray_byte_after_raw_pcm_keeps_every_sample_and_warns(files, tmp_path):
    """One byte past the last whole sample: the samples before it are decoded as ever, and
    one warning says the byte was dropped (it used to cost the whole last window)."""
    path, expected = files["clip_pcm"]
    pcm = sf.read(path, dtype="int16")[0].tobytes() + b"\x01"
    proc = as2d(
        "transcribe", "-", *FAST, "--input-format", "s16le", "--format", "json", "-o", tmp_path,
        stdin=pcm,
    )  # fmt: skip
    err = proc.stderr.decode().splitlines()
    assert proc.returncode == 0, err
    assert err[0] == (
        "as2d: warning: stdin: raw PCM ends inside a sample frame: its last 1 byte dropped"
    )
    assert window_tokens(tmp_path / "stdin.json") == expected


@pytest.mark.parametrize(
    "options",
    [[], ["--input-format", "s16le"], ["--input-format", "s16le", "--endpoint-ms", "600"]],
)
def test_empty_stdin_says_it_is_empty(options):
    proc = as2d("transcribe", "-", *FAST, *options, stdin=b"")
    err = proc.stderr.decode()
    assert proc.returncode == 2 and proc.stdout == b""
    assert err.splitlines() == ["as2d: error: stdin: empty: no audio data came"]


def test_listen_without_sounddevice_is_one_line_and_exit_2():
    proc = as2d("listen", "--target", "whisper-tiny.en")
    err = proc.stderr.decode()
    assert proc.returncode == 2
    assert err.splitlines() == [
        "as2d: error: no microphone: install the mic extra (pip install 'as2d[mic]')"
    ]


STAND_INS = {
    # sounddevice's own words where it finds no PortAudio library
    "portaudio": "raise OSError('PortAudio library not found')\n",
    # PortAudio without any input device, as on a server
    "device": (
        "class PortAudioError(Exception): pass\n"
        "def query_devices(device=None, kind=None):\n"
        "    raise PortAudioError('Error querying device -1')\n"
    ),
}


@pytest.mark.parametrize("kind", STAND_INS)
def test_listen_without_portaudio_or_input_device_is_one_line_and_exit_2(tmp_path, kind):
    """A stand-in `sounddevice` on the path that fails as the real one does."""
    (tmp_path / "sounddevice.py").write_text(STAND_INS[kind])
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{':'.join(sys.path)}"}
    proc = as2d("listen", "--target", "whisper-tiny.en", env=env)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err
    expected = "PortAudio library not found" if kind == "portaudio" else "no input device"
    assert err.startswith("as2d: error: no ") and expected in err


def test_the_api_on_a_generator_of_blocks_is_the_array_whole():
    audio = load_audio(LONG_EN)[: 50 * SAMPLE_RATE]  # two windows
    consumed: list[int] = []

    def blocks() -> Iterator[np.ndarray]:
        for at in range(0, len(audio), 5923):  # 0.37 s: no block size of ours
            consumed.append(at)
            yield audio[at : at + 5923]

    with Transcriber(Options(target="whisper-tiny.en", method="target")) as transcriber:
        whole = [w.token_ids for w in transcriber.transcribe(audio)]
        run = transcriber.transcribe(blocks())
        first = next(iter(run))
        assert len(consumed) < len(audio) / 5923  # the first window came before the end
        streamed = [first.token_ids, *(w.token_ids for w in run)]
    assert len(whole) == 2 and streamed == whole


def test_as2d_on_a_live_source_gives_each_window_once_it_is_decided():
    """as2d reads a file's windows ahead of the target for its drafter, but never a live
    source's: the next window is decided only when its audio comes, so each window comes as
    soon as the windower has decided it, not at the end of the stream (issue 39, 1)."""
    audio = load_audio(LONG_EN)[: 60 * SAMPLE_RATE]
    heard = [0]

    def blocks() -> Iterator[np.ndarray]:
        for at in range(0, len(audio), 5923):
            heard[0] = at + 5923
            yield audio[at : at + 5923]

    decided = [heard[0] for _ in SpeechWindower(endpoint_s=0.6).windows(blocks())]
    options = Options(target="whisper-tiny.en", method="as2d", endpoint_ms=600)
    with Transcriber(options) as transcriber:
        given = [heard[0] for _ in transcriber.transcribe(blocks())]
    assert len(decided) > 2
    assert given[:-1] == decided[:-1]  # the last one is decided by the stream's end
