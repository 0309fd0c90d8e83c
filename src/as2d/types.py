"""Dataclasses that cross module boundaries: windows in, per-window results and run stats out."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SAMPLE_RATE = 16_000  # every model here consumes 16 kHz mono float32
MAX_WINDOW_S = 30.0  # Whisper's receptive field
N_SAMPLES = int(MAX_WINDOW_S * SAMPLE_RATE)  # 480_000 samples: 3000 mel, 1500 encoder frames
HOP = 160  # samples between log-mel frames: every 10 ms
N_FRAMES = N_SAMPLES // HOP  # 3000 log-mel frames a 30 s window


@dataclass(frozen=True)
class Window:
    """One piece of the input audio, decoded independently.

    Attributes:
        index: position of the window in its recording, from 0.
        start: start time in the recording, seconds.
        end: end time in the recording, seconds.
        audio: [samples] float32 at SAMPLE_RATE; at most MAX_WINDOW_S long.
        speech: (start, end) of the speech the voice activity detector found in it, seconds
            in the recording; empty where unknown.
    """

    index: int
    start: float
    end: float
    audio: np.ndarray = field(repr=False)
    speech: tuple[tuple[float, float], ...] = ()

    @property
    def duration(self) -> float:
        """Seconds of audio."""
        return len(self.audio) / SAMPLE_RATE


@dataclass
class Word:
    """One word of the output with its time in the recording (`--timestamps word`)."""

    word: str  # as it stands in the text, with its leading space and punctuation: " Hello,"
    start: float  # seconds from the start of the recording
    end: float
    probability: float  # the target's mean probability of the word's tokens


@dataclass
class Segment:
    """A sentence-like piece of a window's text with its time in the recording."""

    start: float  # seconds from the start of the recording
    end: float
    text: str
    words: list[Word] = field(default_factory=list)  # empty unless words were asked for
    approximate: bool = False  # timed by another model than the one whose text it is


@dataclass
class WindowResult:
    """What the target produced for one window, with its timings."""

    index: int
    start: float
    end: float
    text: str
    token_ids: list[int]  # output tokens, without prompt or end-of-text
    encode_s: float  # audio features + encoder forward
    decode_s: float  # prefill of the prompt + every decoder step
    verify_passes: int = 0  # target forwards that verified candidates (speculative methods)
    plain_steps: int = 0  # target forwards of one token without a candidate
    accepted_tokens: int = 0  # candidate tokens the target agreed with
    drafted_tokens: int = 0  # candidate tokens sent to verification
    guarded: int = 0  # positions recomputed as target-only computes them (unsure decisions)
    alone: int = 0  # passes the target ran on every core, the drafter's included (as2d, CPU)
    min_margin: float | None = None  # the closest a decision came to flipping; None: unmeasured
    started_at: float = 0.0  # time.perf_counter() when encoding began (timelines)
    segments: list[Segment] = field(default_factory=list)  # empty unless timestamps were asked for
    align_s: float = 0.0  # time spent on word timings, after decoding (not in decode_s)


@dataclass
class DrafterActivity:
    """What the drafter process did during a run."""

    name: str
    busy_s: float  # seconds spent drafting windows
    windows_drafted: int
    lost: bool  # the drafter died, hung or failed; the target carried on alone
    reason: str | None = None


@dataclass
class RunStats:
    """Pooled figures for one recording (model loading and warm-up excluded)."""

    wall_s: float  # start of the first window to end of the last
    audio_s: float  # the recording's length (its last window may end before, in silence)
    tokens: int
    tokens_per_s: float
    rtf: float  # wall_s / audio_s
    drafter: DrafterActivity | None = None  # speculative methods with a drafter model
    started_at: float = 0.0  # time.perf_counter() at the start of wall_s (timelines)
    language: str | None = None  # the language decoded: given, else detected; None: no window

    @classmethod
    def since(
        cls,
        start: float,
        end: float,
        audio_s: float,
        tokens: int,
        drafter: DrafterActivity | None,
        language: str | None,
    ) -> RunStats:
        """The figures of a run from `start` to `end` (time.perf_counter())."""
        wall = end - start
        return cls(
            wall, audio_s, tokens, tokens / wall if wall > 0 else 0.0,
            wall / audio_s if audio_s > 0 else 0.0, drafter, start, language,
        )  # fmt: skip
