"""The coupled drafter of `sd`: lossless, its KV cache re-synchronised, never recomputed."""

from __future__ import annotations

import numpy as np
import pytest

from as2d.drafting.coupled import CachedDrafter, CoupledDrafter, _inside_pretoken, respell
from as2d.engine.decode import decode_target_only
from as2d.engine.policy import AutoBudget, CostModel, FixedBudget
from as2d.engine.speculative import speculative_decode
from as2d.models.bundled import source_files
from as2d.models.tokenizer import WhisperTokenizer
from as2d.models.whisper import WhisperTarget
from as2d.models.whisper_net import WhisperNet

AUDIO = np.random.default_rng(7).standard_normal(16_000 * 4).astype(np.float32) * 0.1


@pytest.fixture(scope="module")
def multilingual() -> WhisperTokenizer:
    return WhisperTokenizer.from_model_dir(source_files("whisper-base")[0])


@pytest.fixture(scope="module")
def target(tiny_random_whisper, english_tokenizer):
    return WhisperTarget(WhisperNet.from_transformers(tiny_random_whisper), english_tokenizer)


@pytest.fixture(scope="module")
def expected(target):
    """The target's encoder output and target-only greedy tokens."""
    return _expected(target, [target.tokenizer.sot, target.tokenizer.no_timestamps])


@pytest.fixture(scope="module")
def other_drafter(english_tokenizer, random_whisper):
    """Another random model with the same (tiny.en) vocabulary."""
    return WhisperTarget(
        WhisperNet.from_transformers(random_whisper(english_tokenizer, 1)), english_tokenizer
    )


def _expected(target: WhisperTarget, prompt: list[int]) -> tuple[object, list[int]]:
    encoded = target.encode(AUDIO)
    expected = decode_target_only(target, encoded, prompt)
    assert len(expected) > 10
    return encoded, expected


def _source(drafter: WhisperTarget, target: WhisperTarget, policy, prompt) -> CoupledDrafter:
    source = CoupledDrafter(CachedDrafter(drafter), drafter.tokenizer, target.tokenizer, policy)
    source.start(drafter.encode(AUDIO), prompt)
    return source


@pytest.mark.parametrize("k", [1, 5])
def test_drafter_equal_to_target_is_fully_accepted_and_its_cache_reused(target, expected, k):
    """Same weights: every draft is accepted; the drafter computes each position about once."""
    prompt = [target.tokenizer.sot, target.tokenizer.no_timestamps]
    encoded, expected = expected
    drafter = WhisperTarget(target.model, target.tokenizer)  # its own cache
    source = _source(drafter, target, FixedBudget(k), prompt)
    tokens, counts = speculative_decode(target, encoded, prompt, [source], FixedBudget(k))
    assert tokens == expected
    assert counts.plain_steps <= 1  # the last step, when the drafter ends the window too
    assert counts.accepted_tokens == counts.drafted_tokens
    assert counts.verify_passes <= len(expected) // (k + 1) + 1
    # Per round: feed the last draft and the bonus, then draft k - 1 more. Recomputing the
    # prefix every round would cost about len(expected)^2 / (2 (k + 1)) positions.
    assert source.drafter.computed <= len(expected) + 2 * counts.verify_passes


@pytest.mark.parametrize("policy", [FixedBudget(1), FixedBudget(3), "auto"])
def test_other_drafter_same_vocabulary_gives_target_output(target, expected, other_drafter, policy):
    if policy == "auto":
        policy = AutoBudget(CostModel(tuple(1.0 + 0.05 * k for k in range(17))))
    prompt = [target.tokenizer.sot, target.tokenizer.no_timestamps]
    encoded, expected = expected
    source = _source(other_drafter, target, policy, prompt)
    tokens, counts = speculative_decode(target, encoded, prompt, [source], FixedBudget(16))
    assert tokens == expected
    assert counts.verify_passes + counts.plain_steps <= len(expected) + 1
    if isinstance(policy, AutoBudget):  # the source fed the verify outcomes back
        assert policy.estimate.alpha("sd") != AutoBudget(policy.cost).estimate.alpha("sd")


@pytest.mark.parametrize("k", [4])
def test_drafter_with_another_vocabulary_gives_target_output(
    multilingual, other_drafter, random_whisper, k
):
    """Multilingual target, English-only drafter: drafts cross over through text."""
    target = WhisperTarget(
        WhisperNet.from_transformers(random_whisper(multilingual, 2)), multilingual
    )
    prompt = [*multilingual.sot_sequence("en", "transcribe"), multilingual.no_timestamps]
    encoded, expected = _expected(target, prompt)
    drafter, english_tokenizer = other_drafter, other_drafter.tokenizer
    d_prompt = [english_tokenizer.sot, english_tokenizer.no_timestamps]
    source = _source(drafter, target, FixedBudget(k), d_prompt)
    tokens, counts = speculative_decode(target, encoded, prompt, [source], FixedBudget(k))
    assert tokens == expected
    assert counts.drafted_tokens > 0


def test_resynchronised_cache_drafts_as_a_fresh_one(target, expected):
    """Rolling back and feeding gives the same drafts as recomputing from the prompt."""
    prompt = [target.tokenizer.sot, target.tokenizer.no_timestamps]
    encoded, _ = expected
    kept = CachedDrafter(WhisperTarget(target.model, target.tokenizer))
    kept.start(encoded, prompt)
    first = kept.draft([], 6)
    prefixes = [first[:3], [*first[:3], 11, 12], first[:1], [], [*first, 7], [*first, 7, 8]]
    for prefix in prefixes:
        fresh = CachedDrafter(WhisperTarget(target.model, target.tokenizer))
        fresh.start(encoded, prompt)
        assert kept.draft(prefix, 5) == fresh.draft(prefix, 5), prefix
        assert kept.last[: len(prefix)] == prefix


def test_respell_keeps_the_drafters_tokens_up_to_a_word_start(english_tokenizer):
    tok = english_tokenizer
    previous = tok.encode(" the cat sat on")
    assert respell(b" the cat sits", previous, tok) == [*previous[:2], *tok.encode(" sits")]
    assert respell(b" the cat sat", previous, tok) == previous[:3]
    assert respell(b" the cat sat on the mat", previous, tok) == [
        *previous,
        *tok.encode(" the mat"),
    ]
    # the drafter split a word its own way (" trans" + "cribe"): the split is kept while the
    # text goes on past the word, and the unfinished word is encoded again whole
    split = [*tok.encode(" trans"), *tok.encode("cribe"), *tok.encode(" it")]
    assert respell(b" transcribe it", split, tok) == split
    assert respell(b" transcribed", split, tok) == tok.encode(" transcribed")
    assert respell(b" words", [], tok) == tok.encode(" words")


def test_inside_pretoken():
    assert not _inside_pretoken(b" cat sat", 4)  # " cat" | " sat"
    assert _inside_pretoken(b" cat sat", 3)  # " ca" | "t"
    assert _inside_pretoken(b" cat sat", 5)  # " cat " | "sat": the space belongs to "sat"
    assert not _inside_pretoken(b" cat, sat", 4)  # " cat" | ","
    assert _inside_pretoken(" é".encode(), 2)  # inside a UTF-8 character
