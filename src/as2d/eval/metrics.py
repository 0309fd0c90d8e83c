"""Quality measures that show an output is the target's: WER/CER with Whisper's normalisation.

English text goes through Whisper's `EnglishTextNormalizer` with its British-to-American
spelling map (`english.json`), as the Whisper paper's WER figures were computed, so ours
compare with published ones: "Mr." and "mister", "colour" and "color", "twenty five" and
"25" count as the same words. The normaliser is transformers' port of openai-whisper's (the
same rules); the spelling map is openai-whisper's file as the `whisper-normalizer` package
ships it (that package's own English normaliser adds contractions Whisper's lacks, so it is
not used). Other languages get Whisper's basic normaliser: case and punctuation only.
"""

from __future__ import annotations

from collections.abc import Sequence

import jiwer
from transformers.models.whisper.english_normalizer import (
    BasicTextNormalizer,
    EnglishTextNormalizer,
)
from whisper_normalizer.english import EnglishSpellingNormalizer

_ENGLISH = EnglishTextNormalizer(EnglishSpellingNormalizer().mapping)
_BASIC = BasicTextNormalizer()


def normalize(text: str, language: str = "en") -> str:
    """Whisper's normalisation: case and punctuation; for English also numbers, titles,
    contractions and spelling.

    Example:
        normalize("Mr. Smith paid twenty five dollars for the colour TV.")
        -> "mister smith paid $25 for the color tv"
    """
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
