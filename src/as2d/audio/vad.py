"""Streaming voice activity detection with Silero VAD, on one CPU thread, without torch.

Windows must be cut where nobody speaks, so every window boundary comes from here.
The model is the batched ("sequence") ONNX export of Silero VAD v5 that the `silero_vad`
package ships: one onnxruntime call scores a whole block of 32 ms frames, bit-exact with
the frame-by-frame model, at about 0.2 s of CPU per minute of audio. Its LSTM state and
the 64-sample context are carried between calls, so audio can arrive in blocks of any
size. The model file is found without importing `silero_vad`, whose import pulls in torch
and sets torch's global thread count to 1 (which would slow the target model down).

`SpeechTracker` turns frame probabilities into speech segments with the same rules as
`silero_vad.get_speech_timestamps` (hysteresis between 0.5 and 0.35, pauses of at least
100 ms end a segment, segments under 250 ms are dropped), but incrementally.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from as2d.types import SAMPLE_RATE

FRAME = 512  # samples per VAD frame at 16 kHz = 32 ms
CONTEXT = 64  # samples of the previous frame that the model sees before each frame
SPEECH_THRESHOLD = 0.5  # a frame at or above this starts (or resumes) speech
SILENCE_THRESHOLD = 0.35  # SPEECH_THRESHOLD - 0.15: a frame below this may end speech
MIN_SILENCE = SAMPLE_RATE // 10  # 100 ms = 1600 samples of silence end a segment
MIN_SPEECH = SAMPLE_RATE // 4  # 250 ms = 4000 samples: shorter segments are noise
_MODEL_FILE = "silero_vad_16k_sequence.onnx"
_STATE_SHAPE = (1, 1, 128)  # LSTM h and c: [layers, batch, hidden]


def silero_model_path() -> Path:
    """Return the path of the Silero VAD sequence model shipped in the silero_vad package.

    Raises:
        FileNotFoundError: silero_vad is not installed or lacks the model file.
    """
    spec = importlib.util.find_spec("silero_vad")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the silero-vad package is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / _MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"Silero VAD model not found at {path}")
    return path


class SileroVad:
    """Speech probability per 32 ms frame, streamed: state carries over between calls."""

    def __init__(self, model_path: Path | None = None) -> None:
        """Load the model into an onnxruntime session that uses a single thread.

        Args:
            model_path: a Silero VAD sequence ONNX file; the packaged one by default.
        """
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # leave the cores to the target and the drafter
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(
            str(model_path or silero_model_path()), options, providers=["CPUExecutionProvider"]
        )
        self.reset()

    def reset(self) -> None:
        """Forget the stream so far (start of a new recording)."""
        self._h = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._c = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        """Score the next frames of the stream.

        Args:
            frames: [n, FRAME] float32 at 16 kHz, continuing the previous call's audio.

        Returns:
            [n] float32 speech probabilities.
        """
        if not len(frames):
            return np.zeros(0, dtype=np.float32)
        contexts = np.empty((len(frames), CONTEXT), dtype=np.float32)  # [n, CONTEXT]
        contexts[0] = self._context
        contexts[1:] = frames[:-1, -CONTEXT:]
        inputs = np.concatenate([contexts, frames], axis=1)  # [n, CONTEXT + FRAME]
        probs, self._h, self._c = self._session.run(
            ["speech_probs", "hn", "cn"], {"input": inputs, "h": self._h, "c": self._c}
        )
        self._context = frames[-1, -CONTEXT:].copy()
        return probs.reshape(-1)


@dataclass
class SpeechTracker:
    """Speech segments from frame probabilities, as get_speech_timestamps finds them.

    Attributes:
        start: first sample of the speech run in progress, None in silence.
        pause: first sample of a possible pause inside that run, None if none.
    """

    start: int | None = None
    pause: int | None = None

    def push(self, probs: np.ndarray, first_sample: int) -> list[tuple[int, int]]:
        """Feed frame probabilities; return the segments that they close.

        Args:
            probs: [n] speech probabilities of consecutive frames.
            first_sample: sample index of the first of those frames in the recording.

        Returns:
            Closed segments as (start, end) sample indices, end exclusive and unpadded.
        """
        closed = []
        for i, prob in enumerate(probs.tolist()):
            sample = first_sample + i * FRAME
            if prob >= SPEECH_THRESHOLD:
                self.pause = None
                if self.start is None:
                    self.start = sample
            elif self.start is not None and prob < SILENCE_THRESHOLD:
                self.pause = sample if self.pause is None else self.pause
                if sample - self.pause >= MIN_SILENCE:
                    if self.pause - self.start > MIN_SPEECH:
                        closed.append((self.start, self.pause))
                    self.start = self.pause = None
        return closed

    def finish(self, total: int) -> list[tuple[int, int]]:
        """End the stream after `total` samples; return the segment still open, if any."""
        start, self.start, self.pause = self.start, None, None
        if start is not None and total - start > MIN_SPEECH:
            return [(start, total)]
        return []
