"""Quality measures that show an output is the target's: WER/CER with Whisper's normalisation."""

from __future__ import annotations

from collections.abc import Sequence

import jiwer
from transformers.models.whisper.english_normalizer import (
    BasicTextNormalizer,
    EnglishTextNormalizer,
)

_ENGLISH = EnglishTextNormalizer({})  # Whisper's English normaliser, no spelling map (offline)
_BASIC = BasicTextNormalizer()


def normalize(text: str, language: str = "en") -> str:
    """Whisper-style normalisation: case, punctuation, numbers/spelling for English."""
    return (_ENGLISH if language == "en" else _BASIC)(text)


def wer(references: Sequence[str], hypotheses: Sequence[str], language: str = "en") -> float:
    """Pooled word error rate over pairs of texts, after `normalize`.

    Example:
        wer(["Press one, then two."], ["press one then 3"]) -> 0.25
    """
    refs = [normalize(t, language) for t in references]
    hyps = [normalize(t, language) for t in hypotheses]
    return float(jiwer.wer(refs, hyps))


def cer(references: Sequence[str], hypotheses: Sequence[str], language: str = "en") -> float:
    """Pooled character error rate after `normalize` (for languages without spaces)."""
    refs = [normalize(t, language) for t in references]
    hyps = [normalize(t, language) for t in hypotheses]
    return float(jiwer.cer(refs, hyps))
