"""Qwen2-Audio and Qwen2.5-Omni thinker targets (tiny random weights): lossless decoding.

The models come from `tiny_qwen_dirs` (tests/conftest.py) and load through the public path
(`load_target` on a local directory, family picked from `config.model_type`). Target-only
decoding must equal `generate`; decoding with candidates (a drafter's text with substituted,
inserted and deleted words, re-encoded in the target's vocabulary; request lookup; a silent
drafter) must equal target-only token for token.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from as2d.drafting.aligner import DrafterStreamSource
from as2d.drafting.draft_tokens import DraftTokens
from as2d.drafting.sources import HistoryLookup, PromptLookup
from as2d.engine.decode import decode_target_only
from as2d.engine.policy import AutoBudget, CostModel, FixedBudget
from as2d.engine.speculative import speculative_decode
from as2d.models.qwen import ChatAudioTarget, OmniThinkerTarget, Qwen2AudioTarget
from as2d.models.targets import adapter_class, load_target
from as2d.models.whisper import WhisperTarget
from as2d.target import Request

FAMILIES = {"qwen2_audio": Qwen2AudioTarget, "qwen2_5_omni_thinker": OmniThinkerTarget}
ASK = Request("ask", None, "What is said here? Summarise the recording.")


class ReplayDrafter:
    """A drafter's published text for window 0, as `DraftTokens` reads it."""

    def __init__(self, text: str) -> None:
        self.published = text

    def poll(self) -> None:
        """Nothing arrives: the text is all there."""

    def text(self, index: int) -> str:
        return self.published if index == 0 else ""


def edit_words(text: str, seed: int, rate: float) -> str:
    """Substitutes, inserts and deletes words at random, as a wrong drafter would."""
    rng = random.Random(seed)
    out: list[str] = []
    for word in text.split(" "):
        roll = rng.random()
        if roll < rate / 3:
            out.append(rng.choice(["dog", "the", "Qwen", "message", "x"]))  # substitution
        elif roll < 2 * rate / 3:
            out += [word, rng.choice(["sun", "lazy", "please"])]  # insertion
        elif roll >= rate:
            out.append(word)  # kept (else deleted)
    return " " + " ".join(out)  # Whisper-style leading space: the target's adapter strips it


@pytest.fixture(scope="module", params=list(FAMILIES))
def case(request: pytest.FixtureRequest, tiny_qwen_dirs: dict[str, Path]):
    family = request.param
    target = load_target(str(tiny_qwen_dirs[family]))
    audio = np.random.default_rng(0).standard_normal(16_000 * 3).astype(np.float32) * 0.1
    encoded = target.encode(audio)
    prompt = target.prompt(encoded, ASK)
    expected = decode_target_only(target, encoded, prompt)
    assert len(expected) > 10
    return family, target, encoded, prompt, expected


def test_family_comes_from_the_config(tiny_qwen_dirs: dict[str, Path]) -> None:
    assert adapter_class("whisper-base") is WhisperTarget
    for family, directory in tiny_qwen_dirs.items():
        assert adapter_class(str(directory)) is FAMILIES[family]


def test_prompt_holds_one_placeholder_per_audio_frame(case) -> None:
    _, target, encoded, prompt, _ = case
    assert prompt.count(target.audio_id) == encoded.audio_tokens == 75  # 3 s: 300 frames / 4
    text = target.tokenizer.hf.decode(prompt)
    assert text.endswith("Summarise the recording.<|im_end|>\n<|im_start|>assistant\n")


def test_target_only_equals_generate(case) -> None:
    _, target, encoded, prompt, expected = case
    ids = torch.tensor([prompt])
    generated = target.model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        input_features=encoded.features,
        feature_attention_mask=encoded.mask,
        do_sample=False,
    )[0, len(prompt) :].tolist()
    assert expected == [t for t in generated if t not in target.eot_ids]


@pytest.mark.parametrize("rate", [0.0, 0.2, 0.6])
@pytest.mark.parametrize("k", [1, 5])
def test_edited_drafts_give_target_output(case, rate: float, k: int) -> None:
    _, target, encoded, prompt, expected = case
    text = edit_words(target.tokenizer.decode(expected), seed=k, rate=rate)
    stream = DraftTokens(ReplayDrafter(text), 0, target.tokenizer, target.leading_space)
    sources = [DrafterStreamSource(stream.tokens), HistoryLookup()]
    tokens, counts = speculative_decode(target, encoded, prompt, sources, FixedBudget(k))
    assert tokens == expected
    assert counts.verify_passes + counts.plain_steps + counts.accepted_tokens == len(expected)
    if rate == 0.0:  # k + 1 tokens a pass, but for the first word (drafter: " dog", target: "dog")
        assert counts.verify_passes + counts.plain_steps <= len(expected) // (k + 1) + 3, counts


def test_request_lookup_and_auto_budget(case) -> None:
    _, target, encoded, prompt, expected = case
    text = edit_words(target.tokenizer.decode(expected), seed=3, rate=0.3)
    stream = DraftTokens(ReplayDrafter(text), 0, target.tokenizer, target.leading_space)
    sources = [
        DrafterStreamSource(stream.tokens),
        PromptLookup(target.tokenizer.encode(ASK.text or ""), max_ngram=4),
        HistoryLookup(),
    ]
    policy = AutoBudget(CostModel(tuple(1.0 + 0.05 * k for k in range(17))))
    tokens, _ = speculative_decode(target, encoded, prompt, sources, policy)
    assert tokens == expected


def test_silent_drafter_gives_target_output(case) -> None:
    _, target, encoded, prompt, expected = case
    stream = DraftTokens(ReplayDrafter(""), 0, target.tokenizer, target.leading_space)
    source = DrafterStreamSource(stream.tokens)
    tokens, counts = speculative_decode(target, encoded, prompt, [source], FixedBudget(8))
    assert tokens == expected
    assert counts.plain_steps == len(expected)


def test_rollback_restores_the_scores(case) -> None:
    _, target, encoded, prompt, expected = case
    target.prefill(encoded, prompt)
    first = target.forward(expected[:3])
    target.forward([7, 8, 9, 10])
    target.rollback(len(prompt) + 1)
    again = target.forward(expected[1:3])
    torch.testing.assert_close(again, first[1:])
    assert isinstance(target, ChatAudioTarget)


def test_full_omni_checkpoint_loads_its_thinker(tiny_qwen_dirs: dict[str, Path], tmp_path) -> None:
    """A whole Qwen2.5-Omni checkpoint ("qwen2_5_omni": thinker + talker) decodes with its
    thinker; here one saved without the talker, as `enable_audio_output=False` does."""
    from transformers import (
        AutoTokenizer,
        Qwen2_5OmniConfig,
        Qwen2_5OmniForConditionalGeneration,
        Qwen2_5OmniThinkerConfig,
    )

    thinker_dir = tiny_qwen_dirs["qwen2_5_omni_thinker"]
    thinker = Qwen2_5OmniThinkerConfig.from_pretrained(thinker_dir)
    config = Qwen2_5OmniConfig(thinker_config=thinker.to_dict(), enable_audio_output=False)
    torch.manual_seed(0)
    full = Qwen2_5OmniForConditionalGeneration(config).eval()
    full.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(thinker_dir).save_pretrained(tmp_path)
    torch.save({}, tmp_path / "spk_dict.pt")  # voices: read by from_pretrained, unused here
    target = load_target(str(tmp_path))
    assert isinstance(target, OmniThinkerTarget)
    torch.testing.assert_close(target.model.lm_head.weight, full.thinker.lm_head.weight)
    encoded = target.encode(np.zeros(16_000, dtype=np.float32))
    prompt = target.prompt(encoded, Request("transcribe"))
    assert prompt.count(target.audio_id) == encoded.audio_tokens == 25  # 1 s: 100 frames / 4
    assert target.prefill(encoded, prompt).shape == (full.thinker.vocab_size,)


@pytest.mark.parametrize(
    "text",
    [
        " Welcome to Comedian Mail. First, I will guide you through a short setup process.",
        " It's 3:45pm -- don't   stop!\nNew line, 12,000 items... ok?  Ünïcødé naïve café 日本語",
        " Press 1 now, otherwise press star now. 7 key for Q and the 9 key for Z.",
    ],
)
def test_draft_tokens_equal_a_full_qwen_encode_at_every_step(
    text: str, tiny_qwen_dirs: dict[str, Path]
) -> None:
    """Incremental re-encoding cuts before a space that starts a word: safe under Qwen2's
    pre-tokenizer too. Whisper's leading space is dropped for these targets."""
    from transformers import AutoTokenizer

    from as2d.models.qwen_checkpoint import HFTokenizer

    tokenizer = HFTokenizer(AutoTokenizer.from_pretrained(tiny_qwen_dirs["qwen2_audio"]))
    drafter = ReplayDrafter("")
    stream = DraftTokens(drafter, 0, tokenizer, leading_space=False)
    for end in range(len(text) + 1):
        drafter.published = text[:end]
        assert stream.tokens() == tokenizer.encode(text[:end].lstrip()), text[:end]
