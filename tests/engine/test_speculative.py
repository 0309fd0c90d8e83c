"""Speculative decoding is lossless: the output equals target-only greedy for any candidates."""

from __future__ import annotations

import random

import numpy as np
import pytest

from as2d.drafting.aligner import DrafterStreamSource
from as2d.drafting.sources import HistoryLookup, PromptLookup
from as2d.engine.decode import decode_target_only
from as2d.engine.policy import AutoBudget, CostModel, FixedBudget
from as2d.engine.speculative import speculative_decode
from as2d.models.whisper import WhisperTarget
from as2d.models.whisper_net import WhisperNet


def _edit(tokens: list[int], seed: int, rate: float) -> list[int]:
    """Substitute, insert and delete tokens at random, as a wrong drafter would."""
    rng = random.Random(seed)
    out: list[int] = []
    for token in tokens:
        roll = rng.random()
        if roll < rate / 3:
            out.append(rng.randrange(50_000))  # substitution
        elif roll < 2 * rate / 3:
            out += [token, rng.randrange(50_000)]  # insertion
        elif roll >= rate:
            out.append(token)  # kept (else deleted)
    return out


@pytest.fixture(scope="module")
def case(tiny_random_whisper, english_tokenizer):
    target = WhisperTarget(WhisperNet.from_transformers(tiny_random_whisper), english_tokenizer)
    audio = np.random.default_rng(7).standard_normal(16_000 * 4).astype(np.float32) * 0.1
    encoded = target.encode(audio)
    prompt = [english_tokenizer.sot, english_tokenizer.no_timestamps]
    expected = decode_target_only(target, encoded, prompt)
    assert len(expected) > 10
    return target, encoded, prompt, expected


@pytest.mark.parametrize("rate", [0.0, 0.1, 0.3, 1.0])
@pytest.mark.parametrize("k", [1, 4, 16])
def test_edited_drafts_give_target_output(case, rate, k):
    target, encoded, prompt, expected = case
    draft = _edit(expected, seed=int(rate * 100) + k, rate=rate)
    source = DrafterStreamSource(lambda: draft)
    tokens, counts = speculative_decode(target, encoded, prompt, [source], FixedBudget(k))
    assert tokens == expected
    assert counts.accepted_tokens <= counts.drafted_tokens
    if rate == 0.0:
        assert counts.verify_passes <= len(expected) // (k + 1) + 1  # k + 1 tokens a pass


def test_random_and_empty_drafts_give_target_output(case):
    target, encoded, prompt, expected = case
    noise = [random.Random(1).randrange(50_000) for _ in range(200)]
    for draft in (noise, []):
        source = DrafterStreamSource(lambda d=draft: d)
        tokens, _ = speculative_decode(target, encoded, prompt, [source], FixedBudget(8))
        assert tokens == expected


def test_auto_budget_and_several_sources(case):
    target, encoded, prompt, expected = case
    sources = [
        DrafterStreamSource(lambda: _edit(expected, seed=3, rate=0.2)),
        PromptLookup(expected[:5]),
        HistoryLookup(),
    ]
    policy = AutoBudget(CostModel(tuple(1.0 + 0.05 * k for k in range(17))))
    tokens, counts = speculative_decode(target, encoded, prompt, sources, policy)
    assert tokens == expected
    assert counts.verify_passes + counts.plain_steps < len(expected) + 1


def test_drafts_running_into_the_context_limit(case):
    """Candidates longer than the room left in the cache are cut, not verified past it."""
    target, encoded, prompt, expected = case
    endless = expected + expected * 20  # the target may stop at max_length
    tokens, _ = speculative_decode(
        target, encoded, prompt, [DrafterStreamSource(lambda: endless)], FixedBudget(16)
    )
    assert tokens == expected
