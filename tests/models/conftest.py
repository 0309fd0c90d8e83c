"""Shared fixtures for the model tests: an isolated cache, English features, greedy outputs.

The greedy transcripts of both bundled models are computed once per session (batched,
to keep ``make test`` short on two cores) and shared by the tokenizer and proof tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import ctranslate2
import numpy as np
import pytest
import soundfile as sf
import soxr
import torch
from transformers import WhisperFeatureExtractor

from as2d.models.bundled import bundled_names, ct2_dir, load_whisper
from as2d.models.tokenizer import WhisperTokenizer
from as2d.types import SAMPLE_RATE

EN_DIR = Path(__file__).resolve().parents[1] / "data" / "asterisk" / "en"


@dataclass(frozen=True)
class Greedy:
    """Greedy, no-timestamp outputs of one bundled model on the English recordings."""

    name: str
    tokenizer: WhisperTokenizer
    clips: list[str]
    hf: list[list[int]]  # converted model, transformers generate
    ct2: list[list[int]]  # original CT2 weights, ctranslate2 generate


@pytest.fixture(scope="session")
def as2d_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Points $AS2D_CACHE at a fresh directory for the whole session."""
    root = tmp_path_factory.mktemp("as2d-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AS2D_CACHE", str(root))
        yield root


@pytest.fixture(scope="session")
def en_features() -> tuple[list[str], np.ndarray]:
    """English test clips (8 kHz wav resampled to 16 kHz) as log-mel features [clips, 80, 3000]."""
    extractor = WhisperFeatureExtractor(feature_size=80)
    names, features = [], []
    for wav in sorted(EN_DIR.glob("*.wav")):
        audio, rate = sf.read(wav, dtype="float32")
        audio = soxr.resample(audio, rate, SAMPLE_RATE)
        names.append(wav.stem)
        features.append(
            extractor(audio, sampling_rate=SAMPLE_RATE, return_tensors="np").input_features
        )
    return names, np.concatenate(features).astype(np.float32)


def _hf_greedy(name: str, features: np.ndarray) -> tuple[WhisperTokenizer, list[list[int]]]:
    model, tokenizer = load_whisper(name)
    language = {"language": "en"} if tokenizer.multilingual else {}
    with torch.inference_mode():
        out = model.generate(torch.from_numpy(features), **language)  # [clips, tokens]
    return tokenizer, [[t for t in row if t < tokenizer.eot] for row in out.tolist()]


def _ct2_greedy(name: str, tokenizer: WhisperTokenizer, features: np.ndarray) -> list[list[int]]:
    whisper = ctranslate2.models.Whisper(
        str(ct2_dir(name)), device="cpu", compute_type="float32", intra_threads=2
    )
    prompt = tokenizer.prompt("en" if tokenizer.multilingual else None, "transcribe")
    batch = ctranslate2.StorageView.from_array(np.ascontiguousarray(features))
    results = whisper.generate(batch, [prompt] * len(features), beam_size=1)
    return [r.sequences_ids[0] for r in results]


@pytest.fixture(scope="session", params=bundled_names())
def greedy(
    request: pytest.FixtureRequest, as2d_cache: Path, en_features: tuple[list[str], np.ndarray]
) -> Greedy:
    """Greedy transcripts of one bundled model, from both the converted and the CT2 weights."""
    clips, features = en_features
    tokenizer, hf = _hf_greedy(request.param, features)
    return Greedy(
        request.param, tokenizer, clips, hf, _ct2_greedy(request.param, tokenizer, features)
    )
