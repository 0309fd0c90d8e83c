"""sd with the real bundled models: whisper-base target, tiny.en drafter, target-only output.

The drafter's vocabulary (English GPT-2) differs from the target's (multilingual), so drafts
cross over through text; the drafter's KV cache must be re-synchronised after each verify,
not recomputed: it computes about one position per token it drafts.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from as2d.api import Options, Transcriber
from as2d.audio.load import load_audio
from as2d.engine.sd import CoupledDecoder
from as2d.types import SAMPLE_RATE

pytestmark = pytest.mark.slow

CLIP_S = 24.0  # the first prompts of the long recording: one window, ~70 tokens


def test_sd_equals_target_only_and_reuses_the_drafter_cache():
    audio = load_audio(Path(__file__).parent / "data" / "long_en.flac")[: int(CLIP_S * SAMPLE_RATE)]
    options = Options(target="whisper-base", language="en", budget=4)
    with Transcriber(replace(options, method="target")) as transcriber:
        expected = [w.token_ids for w in transcriber.transcribe(audio)]
    with Transcriber(replace(options, method="sd")) as transcriber:
        windows = list(transcriber.transcribe(audio))
        coupled = transcriber.decoder
    assert isinstance(coupled, CoupledDecoder)
    assert [w.token_ids for w in windows] == expected
    tokens = sum(len(w.token_ids) for w in windows)
    passes = sum(w.verify_passes for w in windows)
    accepted = sum(w.accepted_tokens for w in windows)
    assert accepted > tokens / 2  # tiny.en agrees with base on most of this clear speech
    assert sum(w.drafted_tokens for w in windows) <= 4 * passes
    drafter = coupled.source.drafter
    # per verify: the correction (a word at most re-encoded) fed, then k - 1 drafted tokens fed
    assert drafter.computed <= drafter.drafted + 3 * passes
    assert drafter.computed < tokens * 2  # recomputing each prefix: ~tokens^2 / (2 (k + 1))
