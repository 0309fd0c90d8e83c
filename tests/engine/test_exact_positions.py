"""Exactness at scale on the real bundled models: verify passes commit, at every position,
the token target-only decoding computes there.

whisper-base and whisper-tiny.en transcribe speech read by espeak-ng at three speeds each
(more than 5,000 output tokens in all). Target-only decodes each window at every core; then
the speculative loop decodes it on one thread, as as2d's target does, with a source that
proposes target-only's own output, so that nearly every position is committed by a verify
pass of up to 16 tokens: kernels, row counts and thread count all differ from target-only's,
and the guard must keep every token.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
import soxr
import torch

from as2d.audio.windows import iter_windows
from as2d.drafting.sources import Candidate
from as2d.engine.decode import decode_target_only
from as2d.engine.policy import FixedBudget
from as2d.engine.speculative import speculative_decode
from as2d.engine.verify import Greedy
from as2d.eval.speech import PASSAGES, espeak_speech
from as2d.models.whisper import WhisperTarget
from as2d.types import SAMPLE_RATE

pytestmark = pytest.mark.slow

SPEEDS_WPM = {  # readings of the same text at other speeds: different audio, other tokens
    "whisper-base": (150, 195, 240),
    "whisper-tiny.en": (140, 175, 210),
}
MIN_POSITIONS = 5_000


class TargetOnlyTokens:
    """Proposes the next `max_tokens` of target-only's output after the verified tokens."""

    name = "target-only"

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = list(tokens)

    def propose(self, verified: Sequence[int], max_tokens: int) -> Candidate | None:
        rest = self.tokens[len(verified) : len(verified) + max_tokens]
        return Candidate(tuple(rest), self.name) if rest else None

    def observe(self, verified: Sequence[int], accepted: int, proposed: int) -> None:
        pass


@dataclass
class Totals:
    """What the windows checked so far add up to."""

    positions: int = 0
    passes: int = 0
    guarded: int = 0
    min_margin: float = np.inf


def check_window(target: WhisperTarget, audio: np.ndarray, cores: int, totals: Totals) -> None:
    """Target-only at every core, then verify passes of target-only's tokens on one thread."""
    tokenizer = target.tokenizer
    language = "en" if tokenizer.multilingual else None
    prompt = [*tokenizer.sot_sequence(language, "transcribe"), tokenizer.no_timestamps]
    torch.set_num_threads(cores)
    encoded = target.encode(audio)
    expected = decode_target_only(target, encoded, prompt)
    torch.set_num_threads(1)
    rule = Greedy(target.backend.bound)
    source = TargetOnlyTokens(expected)
    tokens, counts = speculative_decode(
        target, encoded, prompt, [source], FixedBudget(16), rule=rule
    )
    assert tokens == expected
    totals.positions += len(tokens)
    totals.passes += counts.verify_passes
    totals.guarded += counts.guarded
    if counts.min_margin is not None:
        totals.min_margin = min(totals.min_margin, counts.min_margin)


def test_verify_passes_commit_target_only_tokens_at_5000_positions() -> None:
    cores, threads = len(os.sched_getaffinity(0)), torch.get_num_threads()
    totals = Totals()
    try:
        for name, speeds in SPEEDS_WPM.items():
            target = WhisperTarget.load(name)
            for wpm in speeds:
                pieces, rate = espeak_speech(PASSAGES, wpm)
                audio = soxr.resample(np.concatenate(pieces), rate, SAMPLE_RATE)
                for window in iter_windows(audio.astype(np.float32)):
                    check_window(target, window.audio, cores, totals)
    finally:
        torch.set_num_threads(threads)
    print(totals)
    assert totals.positions >= MIN_POSITIONS
    assert totals.passes < totals.positions / 8  # nearly every position from a verify pass
