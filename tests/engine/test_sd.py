"""sd's round cost and the drafter's prompt, with the real vocabularies; its stats over recordings
with the bundled models."""

from __future__ import annotations

from pathlib import Path

import pytest

from as2d.api import Transcriber
from as2d.engine.policy import CostModel, FixedBudget, choose_budget
from as2d.engine.sd import CoupledDecoder, with_drafting
from as2d.models.bundled import source_files
from as2d.models.tokenizer import WhisperTokenizer
from as2d.models.whisper import WhisperTarget
from as2d.models.whisper_net import WhisperNet
from as2d.options import Options

CLIP = Path(__file__).resolve().parents[1] / "data" / "asterisk" / "en" / "demo-nogo.wav"


def test_with_drafting_adds_k_drafter_forwards():
    cost = with_drafting(CostModel((1.0, 1.1, 1.2)), 0.3)
    assert cost.latency_s == pytest.approx((1.0, 1.4, 1.8))
    # at alpha = 0.8, a drafter as slow as the target never pays; a cheap one drafts long
    flat = CostModel((1.0,) * 9)
    assert choose_budget(0.8, with_drafting(flat, 1.0), 8) == 0
    assert choose_budget(0.8, with_drafting(flat, 0.3), 8) == 3  # 2.95 tokens / 1.9
    assert choose_budget(0.8, with_drafting(flat, 0.05), 8) == 8


@pytest.fixture(scope="module")
def multilingual() -> WhisperTokenizer:
    return WhisperTokenizer.from_model_dir(source_files("whisper-base")[0])


def test_drafter_prompt_follows_the_target_prompt(
    tiny_random_whisper, english_tokenizer, multilingual
):
    english = WhisperTarget(WhisperNet.from_transformers(tiny_random_whisper), english_tokenizer)
    target = WhisperTarget(
        WhisperNet.from_transformers(tiny_random_whisper), multilingual
    )  # only its tokenizer matters here
    en_prompt = [english_tokenizer.sot, english_tokenizer.no_timestamps]
    fr = [*multilingual.sot_sequence("fr", "translate"), multilingual.no_timestamps]
    # different vocabularies: the drafter's own prompt, with the target's language and task
    tiny = CoupledDecoder(target, multilingual, english, english_tokenizer, FixedBudget(4))
    assert tiny._prompt(fr) == en_prompt  # English-only: no language or task token
    base = CoupledDecoder(english, english_tokenizer, target, multilingual, FixedBudget(4))
    en = [*multilingual.sot_sequence("en", "transcribe"), multilingual.no_timestamps]
    assert base._prompt(en_prompt) == en  # an English-only target speaks English
    # same vocabulary: the target's prompt as it is
    same = CoupledDecoder(target, multilingual, target, multilingual, FixedBudget(4))
    assert same._prompt(fr) == fr


def test_sd_reports_each_recording_s_drafting_alone() -> None:
    """sd drafts every window in turn with the target: a recording's drafting is within its
    time, its windows its own."""
    with Transcriber(Options(target="whisper-base", language="en", method="sd")) as transcriber:
        runs = [transcriber.transcribe(CLIP) for _ in range(2)]
        stats = [run.stats for run in runs]
    for run, s in zip(runs, stats, strict=True):
        assert s.drafter is not None and s.drafter.windows_drafted == len(run.results)
        assert 0 < s.drafter.busy_s < s.wall_s
