"""A CTranslate2 Whisper drafter at int8: greedy, no timestamps, one text per window (its
`generate` has no token callback), its encoder sized to the speech.

Log-mel features come from faster-whisper's numpy extractor (the same computation as
transformers' `WhisperFeatureExtractor`), so this process needs no torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from as2d.drafting.family import (
    ANY_LANGUAGE,
    RUN_ON_SLACK,
    RUN_ON_TOKENS_PER_S,
    DraftCosts,
    guarded,
    sized_frames,
)
from as2d.drafting.torch_whisper import Encoded
from as2d.drafting.warm import WARM_STEPS, busy_s, short_silence, timed_encodes, warm_prompt
from as2d.models.tokenizer import WhisperTokenizer
from as2d.runtime.spec import DrafterSpec
from as2d.types import N_SAMPLES, SAMPLE_RATE


class CT2WhisperDrafter:
    """A CTranslate2 Whisper (a bundled name, joined into the cache on first use, or a
    directory) drafting greedily; its text arrives once per window."""

    streams = False

    def __init__(self, spec: DrafterSpec, model: str) -> None:
        import ctranslate2
        from faster_whisper.feature_extractor import FeatureExtractor

        directory = model if Path(model).is_dir() else str(_bundled_dir(model))
        self.model = ctranslate2.models.Whisper(
            directory, device="cpu", compute_type="int8", intra_threads=spec.threads
        )
        self.features = FeatureExtractor(feature_size=self.model.n_mels)
        self.tokenizer = WhisperTokenizer.from_model_dir(Path(directory))
        self.storage = ctranslate2.StorageView
        self.spec = spec
        self._costs: dict[str, DraftCosts] = {}

    def encode(self, audio: np.ndarray, language: str | None) -> Encoded:
        padded = np.pad(audio[:N_SAMPLES], (0, max(0, N_SAMPLES - len(audio))))
        feats = self.features(padded, padding=0)  # [n_mels, 3000]
        if self.spec.tail_s is not None:
            feats = feats[:, : sized_frames(len(audio))]  # [n_mels, frames]
        hidden = self.model.encode(self.storage.from_array(feats[np.newaxis].astype(np.float32)))
        return Encoded(hidden, language, len(audio) / SAMPLE_RATE)

    def warm_up(self) -> dict[str, DraftCosts]:
        threads = self.spec.threads
        prompt = warm_prompt(self.tokenizer, self.spec)
        if not self.spec.timed:  # first calls only
            encoded = self.encode(short_silence(), "en")
            self.model.generate(encoded.hidden, [prompt], beam_size=1, max_length=len(prompt) + 1)
            return self._costs
        short_s, full_s, encoded = timed_encodes(self, threads, self.spec.tail_s is not None)

        def generate(tokens: int) -> tuple[int, float]:  # end-of-text suppressed: `tokens` made
            start = busy_s(threads)
            (result,) = self.model.generate(
                encoded.hidden, [prompt], beam_size=1, max_length=len(prompt) + tokens,
                suppress_tokens=[-1, self.tokenizer.eot], suppress_blank=False,
            )  # fmt: skip
            return len(result.sequences_ids[0]), busy_s(threads) - start

        generate(1)  # the first call with real encoder states pays one-off set-up
        (few, few_s), (more, more_s) = generate(1), generate(1 + WARM_STEPS)
        # on a loaded machine the difference can vanish: the longer call's mean is an upper bound
        step_s = (more_s - few_s) / (more - few) if more_s > few_s and more > few else more_s / more
        self._costs = {ANY_LANGUAGE: DraftCosts(short_s, full_s, step_s)}
        return self._costs

    def costs(self) -> dict[str, DraftCosts]:
        return self._costs

    def texts(self, encoded: Encoded) -> Iterator[tuple[int, str]]:
        language = encoded.language if self.tokenizer.multilingual else None
        if self.tokenizer.multilingual and language is None:
            language = self.model.detect_language(encoded.hidden)[0][0][0][2:-2]  # "<|en|>"
        prompt = self.tokenizer.prompt(language, self.spec.task)
        most = math.ceil(RUN_ON_TOKENS_PER_S * encoded.seconds) + RUN_ON_SLACK  # RunOnGuard's
        (result,) = self.model.generate(
            encoded.hidden, [prompt], beam_size=1, max_length=len(prompt) + most
        )
        ids = guarded(result.sequences_ids[0], encoded.seconds)
        yield len(ids), self.tokenizer.decode(ids)


def load(spec: DrafterSpec, model: str) -> CT2WhisperDrafter:
    """A `ct2:` drafter (`family.KINDS`): `model` a bundled name or a CT2 directory."""
    return CT2WhisperDrafter(spec, model)


def _bundled_dir(name: str) -> Path:
    """The directory of a bundled CT2 model (joined into the cache once, on first use)."""
    from as2d.models.bundled import ct2_dir

    return ct2_dir(name)
