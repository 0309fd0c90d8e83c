"""The live readers (audio/stream.py) on real recordings: what a pipe delivers in pieces is
read as the same samples as the file, and a block source goes through `iter_audio_blocks`."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from as2d.audio.load import AudioError, iter_audio_blocks, load_audio
from as2d.audio.stream import LIVE_BLOCK_S, container_blocks, pcm_blocks, read_blocks
from as2d.types import SAMPLE_RATE

DATA = Path(__file__).parents[1] / "data"
CLIP = DATA / "asterisk" / "en" / "vm-newuser.wav"  # 8 kHz mono 16-bit
LONG_EN = DATA / "long_en.flac"  # 8 kHz


class Pipe(io.RawIOBase):
    """A pipe's end: not seekable, and each read returns at most `piece` bytes (a writer
    that is slower than its reader)."""

    def __init__(self, data: bytes, piece: int = 1000) -> None:
        self._data, self._at, self._piece = data, 0, piece

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self._piece, len(self._data) - self._at)
        buffer[:n] = self._data[self._at : self._at + n]
        self._at += n
        return n


def piped(data: bytes, piece: int = 1000) -> io.BufferedReader:
    return io.BufferedReader(Pipe(data, piece))


class Recording:
    """What `read_blocks` reads from sounddevice.InputStream: `read(frames)` gives
    [frames, channels] float32 and an overflow flag, reusing one buffer between reads."""

    def __init__(self, audio: np.ndarray, channels: int = 2) -> None:
        self._audio, self._at = audio, 0
        self._buffer = np.zeros((0, channels), dtype=np.float32)
        self.channels = channels

    def read(self, frames: int) -> tuple[np.ndarray, bool]:
        if self._buffer.shape[0] != frames:
            self._buffer = np.zeros((frames, self.channels), dtype=np.float32)
        piece = self._audio[self._at : self._at + frames]
        self._buffer[: len(piece)] = piece[:, None]
        self._buffer[len(piece) :] = 0.0
        self._at += frames
        return self._buffer, False


def as_int16(audio: np.ndarray) -> np.ndarray:
    return np.clip(np.round(audio * 32768), -32768, 32767).astype(np.int16)


def test_raw_pcm_at_16k_is_the_samples_in_live_blocks():
    pcm = as_int16(load_audio(CLIP))
    blocks = list(pcm_blocks(piped(pcm.tobytes(), 777)))
    assert {len(b) for b in blocks[:-1]} == {round(LIVE_BLOCK_S * SAMPLE_RATE)}
    np.testing.assert_array_equal(np.concatenate(blocks), pcm.astype(np.float32) / 32768)


def test_raw_pcm_stereo_at_8k_is_averaged_and_resampled_as_the_file_is(tmp_path):
    mono = sf.read(CLIP, dtype="int16")[0]
    stereo = np.stack([mono, mono], axis=1)  # [n, 2]
    blocks = np.concatenate(list(pcm_blocks(piped(stereo.tobytes()), rate=8000, channels=2)))
    np.testing.assert_array_equal(blocks, load_audio(CLIP))


def test_raw_pcm_that_ends_inside_a_frame_keeps_every_whole_sample_and_warns():
    data = np.ones(1000, dtype=np.int16).tobytes() + b"\x01"
    said: list[str] = []
    blocks = list(pcm_blocks(piped(data), warn=said.append))
    assert sum(len(b) for b in blocks) == 1000
    assert said == ["stdin: raw PCM ends inside a sample frame: its last 1 byte dropped"]


def test_empty_raw_pcm_is_an_audio_error_that_says_so():
    with pytest.raises(AudioError, match="stdin: empty"):
        list(pcm_blocks(piped(b"")))


@pytest.mark.parametrize("path", [CLIP, LONG_EN])
def test_a_container_from_a_pipe_is_the_file_decoded(path):
    blocks = list(container_blocks(piped(path.read_bytes(), 4096)))
    # as it arrives: a block, or one codec frame where that is longer; never the whole file
    assert max(len(b) for b in blocks) < SAMPLE_RATE
    np.testing.assert_array_equal(np.concatenate(blocks), load_audio(path))


def test_not_audio_and_truncated_flac_from_a_pipe_are_audio_errors():
    with pytest.raises(AudioError, match="stdin: not an audio file"):
        list(container_blocks(piped(b"this is not audio\n" * 100)))
    data = LONG_EN.read_bytes()
    with pytest.raises(AudioError, match=r"stdin: (damaged|truncated)"):
        list(container_blocks(piped(data[: len(data) // 2])))


def test_a_recording_stream_is_read_in_blocks_of_its_first_channel():
    audio = load_audio(CLIP)
    stream = Recording(audio)
    blocks = list(itertools.islice(read_blocks(stream, 1600), 5))
    assert all(b.shape == (1600,) and b.dtype == np.float32 for b in blocks)
    np.testing.assert_array_equal(np.concatenate(blocks), audio[:8000])  # not the reused buffer


def test_iter_audio_blocks_passes_a_block_source_on_as_it_comes():
    taken: list[int] = []

    def source():
        for i in range(3):
            taken.append(i)
            yield np.full(100 * (i + 1), i, dtype=np.int16)

    blocks = iter_audio_blocks(source())
    assert taken == []  # nothing read before it is asked for
    first = next(blocks)
    assert taken == [0] and first.dtype == np.float32 and len(first) == 100
    assert [len(b) for b in blocks] == [200, 300]
    with pytest.raises(AudioError, match="1-D"):
        list(iter_audio_blocks([np.zeros((2, 10), dtype=np.float32)]))
