"""as2d.audio.vad: streamed Silero VAD finds exactly the segments Silero's own helper finds."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest

from as2d.audio.vad import FRAME, SileroVad, SpeechTracker, silero_model_path

Reference = Callable[[np.ndarray, int], list[tuple[int, int]]]


def streamed_segments(audio: np.ndarray, block: int) -> list[tuple[int, int]]:
    """Speech segments of `audio` fed to SileroVad + SpeechTracker `block` samples at a time."""
    vad, tracker = SileroVad(), SpeechTracker()
    segments: list[tuple[int, int]] = []
    rest, scored = np.zeros(0, dtype=np.float32), 0
    for start in range(0, len(audio), block):
        rest = np.concatenate([rest, audio[start : start + block]])
        whole = len(rest) // FRAME
        segments += tracker.push(vad(rest[: whole * FRAME].reshape(whole, FRAME)), scored)
        rest, scored = rest[whole * FRAME :], scored + whole * FRAME
    last = np.zeros((1, FRAME), dtype=np.float32)
    last[0, : len(rest)] = rest
    segments += tracker.push(vad(last), scored)
    return segments + tracker.finish(len(audio))


@pytest.mark.parametrize("block", [37_777, 160_000])
def test_streamed_vad_matches_silero(
    long_en: np.ndarray, joined_clips: np.ndarray, reference_speech: Reference, block: int
) -> None:
    for audio in (long_en, joined_clips):
        assert streamed_segments(audio, block) == reference_speech(audio, 0)


def test_tracker_rules() -> None:
    # 0.5 starts speech, < 0.35 for >= 100 ms (4 frames) ends it, <= 250 ms is dropped.
    probs = np.array([0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.4, 0.9, 0.2, 0.1, 0.1, 0.1, 0.1])
    tracker = SpeechTracker()
    assert tracker.push(probs, 0) == [(1 * FRAME, 11 * FRAME)]  # 0.4 is not silence
    assert tracker.push(np.array([0.9, 0.9] + [0.1] * 5), 100 * FRAME) == []  # too short
    assert tracker.push(np.array([0.9] * 9), 200 * FRAME) == []
    assert tracker.finish(209 * FRAME) == [(200 * FRAME, 209 * FRAME)]  # open at the end


def test_vad_runs_on_one_thread_without_torch() -> None:
    assert silero_model_path().name == "silero_vad_16k_sequence.onnx"
    assert SileroVad()._session.get_session_options().intra_op_num_threads == 1
    code = (
        "import sys, numpy as np; from as2d.audio.windows import iter_windows; "
        "list(iter_windows(np.zeros(16000, np.float32))); "
        "assert 'torch' not in sys.modules and 'silero_vad' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
