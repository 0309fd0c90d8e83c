"""The lean Whisper decoder and the target-only loop against transformers' own forward."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers import WhisperFeatureExtractor

from as2d.engine.decode import decode_target_only
from as2d.models.whisper import WhisperTarget
from as2d.models.whisper_net import WhisperNet
from as2d.target import Request


def _audio(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(16_000 * 3).astype(np.float32) * 0.1


def _reference_scores(model: Any, audio: np.ndarray, ids: list[int]) -> torch.Tensor:
    """transformers' features and full forward without a cache: [len(ids), V] logits."""
    extractor = WhisperFeatureExtractor(feature_size=model.config.num_mel_bins)
    feats = extractor(audio, sampling_rate=16_000, return_tensors="pt").input_features
    with torch.inference_mode():
        out = model(input_features=feats, decoder_input_ids=torch.tensor([ids]))
    return out.logits[0]


def test_forward_matches_transformers(tiny_random_whisper, english_tokenizer):
    target = WhisperTarget(WhisperNet.from_transformers(tiny_random_whisper), english_tokenizer)
    audio = _audio(1)
    ids = [english_tokenizer.sot, english_tokenizer.no_timestamps, 464, 2068, 7586, 21831]
    target.prefill(target.encode(audio), ids[:2])
    ours = target.forward(ids[2:])  # one pass of 4 tokens over a cache of 2
    reference = _reference_scores(tiny_random_whisper, audio, ids)[2:]  # rows after ids[2..5]
    # float32 noise between sdpa and our attention reaches 1.6e-4 on some CPUs (AMX hosts);
    # a wrong mask, position or cache row differs by orders of magnitude more.
    torch.testing.assert_close(ours, reference, rtol=1e-4, atol=5e-4)


def test_rollback_then_forward_gives_the_same_scores(tiny_random_whisper, english_tokenizer):
    target = WhisperTarget(WhisperNet.from_transformers(tiny_random_whisper), english_tokenizer)
    encoded = target.encode(_audio(2))
    prompt = [english_tokenizer.sot, english_tokenizer.no_timestamps]
    target.prefill(encoded, prompt)
    first = target.forward([464, 2068, 7586]).clone()
    target.rollback(len(prompt) + 1)  # keep 464, reject the rest
    again = target.forward([2068, 7586])
    torch.testing.assert_close(again, first[1:], rtol=1e-5, atol=1e-5)
    assert target.length == len(prompt) + 3


def test_greedy_equals_recomputed_greedy(tiny_random_whisper, english_tokenizer):
    """Each token equals the argmax of a cache-free forward over the whole sequence."""
    target = WhisperTarget(WhisperNet.from_transformers(tiny_random_whisper), english_tokenizer)
    audio = _audio(3)
    prompt = [english_tokenizer.sot, english_tokenizer.no_timestamps]
    tokens = decode_target_only(target, target.encode(audio), prompt)
    assert len(prompt) + len(tokens) <= target.max_length
    scores = _reference_scores(tiny_random_whisper, audio, prompt + tokens)
    expected = scores[len(prompt) - 1 :].argmax(-1).tolist()
    assert tokens == expected[: len(tokens)]
    if len(prompt) + len(tokens) < target.max_length:
        assert expected[len(tokens)] == english_tokenizer.eot


def test_encode_calls_between_before_each_layer_and_keeps_its_output(
    tiny_random_whisper, english_tokenizer
):
    target = WhisperTarget(WhisperNet.from_transformers(tiny_random_whisper), english_tokenizer)
    audio = _audio(3)
    calls: list[int] = []
    hooked = target.encode(audio, between=lambda: calls.append(torch.get_num_threads()))
    layers = len(tiny_random_whisper.model.encoder.layers)
    assert len(calls) == 1 + layers  # before the encoder, then before each layer
    assert torch.equal(hooked.hidden, target.encode(audio).hidden)  # hooks removed, same bits
    assert len(calls) == 1 + layers


def test_earlier_text_goes_before_the_prompt_as_openai_whisper_puts_it(
    tiny_random_whisper, english_tokenizer
):
    target = WhisperTarget(WhisperNet.from_transformers(tiny_random_whisper), english_tokenizer)
    encoded = target.encode(_audio(4))
    plain = target.prompt(encoded, Request())
    assert plain == english_tokenizer.prompt(None, "transcribe")
    previous = target.prompt(encoded, Request(previous="  Asterisk and Digium "))
    words = english_tokenizer.encode(" Asterisk and Digium")
    assert previous == [english_tokenizer.sot_prev, *words, *plain]
    long = target.prompt(encoded, Request(previous="word " * 1000))
    assert long[0] == english_tokenizer.sot_prev and long[-len(plain) :] == plain
    assert len(long) - len(plain) - 1 == target.max_length // 2 - 1  # the last tokens only
    tokens = decode_target_only(target, encoded, previous)  # decodes after a long prefix too
    assert len(previous) + len(tokens) <= target.max_length
