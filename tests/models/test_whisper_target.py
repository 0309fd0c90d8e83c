"""Our target-only decoding equals transformers' `generate` greedy, token for token."""

from __future__ import annotations

import soundfile as sf
import soxr

from as2d.engine.decode import decode_target_only
from as2d.models.whisper import WhisperTarget
from as2d.types import SAMPLE_RATE

from .conftest import EN_DIR, Greedy


def test_target_only_equals_generate(greedy: Greedy) -> None:
    target = WhisperTarget.load(greedy.name)  # read without transformers (whisper_net.py)
    tokenizer = target.tokenizer
    language = "en" if tokenizer.multilingual else None
    prompt = tokenizer.prompt(language, "transcribe")
    for clip, expected in zip(greedy.clips, greedy.hf, strict=True):
        audio, rate = sf.read(EN_DIR / f"{clip}.wav", dtype="float32")
        encoded = target.encode(soxr.resample(audio, rate, SAMPLE_RATE))
        assert decode_target_only(target, encoded, prompt) == expected, clip
