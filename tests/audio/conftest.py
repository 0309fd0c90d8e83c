"""Fixtures for the audio tests: real Asterisk prompts, joined recordings, reference VAD."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from as2d.types import SAMPLE_RATE

DATA = Path(__file__).parents[1] / "data"
ENGLISH_CLIPS = sorted((DATA / "asterisk" / "en").glob("*.wav"))  # 8 kHz mono 16-bit
LONG_EN = DATA / "long_en.flac"  # 111.6 s: five prompts, each followed by 0.8 s of silence

Segments = list[tuple[int, int]]


def read_16k(path: Path) -> np.ndarray:
    """A file as 16 kHz mono float32, read in one go (the reference for streaming reads)."""
    audio, rate = sf.read(path, dtype="float32")
    return soxr.resample(audio, rate, SAMPLE_RATE).astype(np.float32)


@pytest.fixture(scope="session")
def clip() -> tuple[np.ndarray, int]:
    """One real prompt (vm-newuser, 6.1 s) at its own rate: ([samples] float32, 8000)."""
    audio, rate = sf.read(DATA / "asterisk" / "en" / "vm-newuser.wav", dtype="float32")
    return audio, rate


@pytest.fixture(scope="session")
def joined_clips() -> np.ndarray:
    """Every English prompt at 16 kHz, joined with short gaps (0.15-0.6 s): about 85 s."""
    gaps = [0.15, 0.3, 0.6, 0.2]
    parts = []
    for i, path in enumerate(ENGLISH_CLIPS):
        parts += [read_16k(path), np.zeros(round(gaps[i % len(gaps)] * SAMPLE_RATE), np.float32)]
    return np.concatenate(parts)


@pytest.fixture(scope="session")
def long_en() -> np.ndarray:
    """tests/data/long_en.flac at 16 kHz mono float32."""
    return read_16k(LONG_EN)


@pytest.fixture(scope="session")
def reference_speech() -> Callable[[np.ndarray, int], Segments]:
    """Speech segments (samples) by silero_vad's own get_speech_timestamps.

    The function takes 16 kHz audio and the padding in ms (Silero's default is 30).

    Importing silero_vad sets torch's thread count to 1; it is restored afterwards.
    """
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    import silero_vad

    torch.set_num_threads(threads)
    with warnings.catch_warnings():  # its loader uses the deprecated importlib.resources.path
        warnings.simplefilter("ignore", DeprecationWarning)
        model = silero_vad.load_silero_vad(onnx=True)

    def segments(audio: np.ndarray, pad_ms: int = 30) -> Segments:
        found = silero_vad.get_speech_timestamps(
            torch.from_numpy(audio), model, speech_pad_ms=pad_ms
        )
        return [(s["start"], s["end"]) for s in found]

    return segments
