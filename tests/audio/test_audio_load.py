"""as2d.audio.load: every format, any rate and channel count, bad input, zero length."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from as2d.audio.load import AudioError, audio_duration, iter_audio_blocks, load_audio
from as2d.types import SAMPLE_RATE
from audio_files import encode_with_av


def write_clip(directory: Path, audio: np.ndarray, rate: int, ext: str) -> Path:
    """Write `audio` as `clip.<ext>`: soundfile for wav/flac/ogg, PyAV for mp3/m4a."""
    path = directory / f"clip.{ext}"
    if ext in ("mp3", "m4a"):
        encode_with_av(path, audio, rate, "mp3" if ext == "mp3" else "aac")
    else:
        sf.write(path, audio, rate)
    return path


def rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(audio))))


@pytest.mark.parametrize("ext", ["wav", "flac", "ogg", "mp3", "m4a"])
def test_every_format_loads(tmp_path: Path, clip: tuple[np.ndarray, int], ext: str) -> None:
    audio, rate = clip
    path = write_clip(tmp_path, audio, rate, ext)
    loaded = load_audio(path)
    expected = soxr.resample(audio, rate, SAMPLE_RATE)
    assert loaded.dtype == np.float32 and loaded.ndim == 1
    # AAC adds 1024 samples of priming (and frame padding) when the file has no edit list
    assert abs(len(loaded) - len(expected)) <= 0.25 * SAMPLE_RATE
    assert rms(loaded) == pytest.approx(rms(expected), rel=0.15)
    assert audio_duration(path) == pytest.approx(len(audio) / rate, abs=0.25)
    if ext in ("wav", "flac"):  # lossless: the streamed resampling equals a one-shot one
        np.testing.assert_allclose(loaded, expected, atol=2e-4)


def test_mp3_without_a_length_header_is_not_taken_for_truncated(
    tmp_path: Path, long_en: np.ndarray
) -> None:
    path = tmp_path / "vbr.mp3"  # libsndfile guesses ~2x its length from the first frame
    encode_with_av(path, long_en, SAMPLE_RATE, "mp3", plain_vbr_mp3=True)
    assert sf.info(path).duration > 1.5 * len(long_en) / SAMPLE_RATE
    assert len(load_audio(path)) == pytest.approx(len(long_en), abs=0.1 * SAMPLE_RATE)
    assert audio_duration(path) == pytest.approx(len(long_en) / SAMPLE_RATE, abs=0.1)


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
@pytest.mark.parametrize("subtype", ["PCM_16", "PCM_24", "FLOAT"])
def test_any_rate_and_sample_format_becomes_16k_float32(
    tmp_path: Path, rate: int, subtype: str
) -> None:
    t = np.arange(round(2.5 * rate)) / rate
    path = tmp_path / "tone.wav"
    sf.write(path, 0.5 * np.sin(2 * np.pi * 440 * t), rate, subtype=subtype)
    loaded = load_audio(path)
    assert loaded.dtype == np.float32
    assert abs(len(loaded) - 2.5 * SAMPLE_RATE) <= 1
    assert np.abs(loaded).max() == pytest.approx(0.5, abs=0.01)


def test_stereo_44k_is_averaged_to_mono(tmp_path: Path) -> None:
    t = np.arange(3 * 44_100) / 44_100
    left, right = 0.6 * np.sin(2 * np.pi * 440 * t), 0.2 * np.sin(2 * np.pi * 1000 * t)
    path = tmp_path / "stereo.flac"
    sf.write(path, np.stack([left, right], axis=1), 44_100)
    loaded = load_audio(path)
    assert len(loaded) == 3 * SAMPLE_RATE
    spectrum = np.abs(np.fft.rfft(loaded)) / (len(loaded) / 2)  # 1/3 Hz per bin
    assert spectrum[440 * 3] == pytest.approx(0.3, abs=0.01)
    assert spectrum[1000 * 3] == pytest.approx(0.1, abs=0.01)


def test_blocks_are_bounded_and_join_to_the_whole(tmp_path: Path, long_en: np.ndarray) -> None:
    path = tmp_path / "long.wav"
    sf.write(path, long_en, SAMPLE_RATE)
    blocks = list(iter_audio_blocks(path, block_s=4.0))
    assert len(blocks) == 28  # 111.6 s in 4 s blocks
    assert max(len(block) for block in blocks) <= 4.0 * SAMPLE_RATE + 64
    np.testing.assert_array_equal(np.concatenate(blocks), load_audio(path))


def test_arrays(clip: tuple[np.ndarray, int]) -> None:
    audio, rate = clip
    assert np.shares_memory(load_audio(audio), audio)  # float32 16 kHz mono: as it is
    assert load_audio(audio.astype(np.float64)).dtype == np.float32
    int16 = np.array([0, 16384, -32768], dtype=np.int16)
    np.testing.assert_array_equal(load_audio(int16), [0.0, 0.5, -1.0])
    assert len(load_audio(audio, sample_rate=rate)) == 2 * len(audio)
    assert audio_duration(audio) == len(audio) / SAMPLE_RATE
    assert sum(len(block) for block in iter_audio_blocks(audio, block_s=1.0)) == len(audio)
    with pytest.raises(AudioError, match="1-D"):
        load_audio(np.zeros((100, 2), dtype=np.float32))
    with pytest.raises(AudioError, match="dtype"):
        load_audio(np.zeros(100, dtype=np.int64))


def test_zero_length_audio_gives_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.wav"
    sf.write(path, np.zeros(0, dtype=np.float32), 44_100)
    assert list(iter_audio_blocks(path)) == []
    assert load_audio(path).shape == (0,) and load_audio(path).dtype == np.float32
    assert audio_duration(path) == 0.0
    assert load_audio(np.zeros(0, dtype=np.float32)).shape == (0,)
    assert list(iter_audio_blocks(np.zeros(0, dtype=np.float32))) == []


def truncate(path: Path) -> Path:
    """Keep the first half of a file's bytes."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def damage(path: Path) -> Path:
    """Overwrite 2000 bytes in the middle of a file with random ones (libmpg123 complains)."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 2000] = np.random.default_rng(0).bytes(2000)
    path.write_bytes(bytes(data))
    return path


def make_bad_input(case: str, directory: Path, clip: tuple[np.ndarray, int]) -> Path:
    """Create the bad input named `case` in `directory`; return its path."""
    path = directory / "bad.wav"
    match case:
        case "missing":
            return directory / "nope.wav"
        case "directory":
            return directory
        case "text":
            path.write_text("not audio\n" * 50)
        case "random bytes":
            path.write_bytes(np.random.default_rng(0).bytes(9000))
        case "empty file":
            path.write_bytes(b"")
        case "damaged mp3":
            return damage(write_clip(directory, *clip, "mp3"))
        case _:  # "truncated <ext>"
            return truncate(write_clip(directory, *clip, case.split()[1]))
    return path


BAD_INPUTS = {  # case: what the message says
    "missing": "no such file",
    "directory": "is a directory",
    "text": "not an audio file",
    "random bytes": "not an audio file",
    "empty file": "empty file",
    "truncated wav": "truncated WAV",
    "truncated flac": "damaged or truncated",
    "truncated mp3": r"truncated or damaged: \d\.\d of its 6\.1 s could be decoded",
    "truncated m4a": "not an audio file",  # its index (moov) is at the end
    "damaged mp3": "damaged or truncated",
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_raises_audio_error_in_words(
    tmp_path: Path, clip: tuple[np.ndarray, int], case: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """One line that says what is wrong: no errno, and nothing from the decoding libraries
    on the process's stderr (libmpg123 prints there about damaged MP3 frames)."""
    path = make_bad_input(case, tmp_path, clip)
    with pytest.raises(AudioError, match=BAD_INPUTS[case]) as raised:
        load_audio(path)
    message = str(raised.value)
    assert "\n" not in message and str(path) in message and "Errno" not in message
    assert capfd.readouterr().err == ""
