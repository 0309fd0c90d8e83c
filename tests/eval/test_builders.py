"""Building recordings: long-form joins of real clips, Piper and espeak-ng speech, the manifest."""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile as sf

from as2d.api import Transcriber
from as2d.eval.builders import Clip, clean_transcript, join_long_form, write_manifest
from as2d.eval.datasets import DatasetError, load_manifest
from as2d.eval.metrics import wer
from as2d.eval.speech import read_passages, synthesise

ASTERISK = Path(__file__).parents[1] / "data" / "asterisk" / "en"


def clips() -> list[Clip]:
    texts = dict(
        line.split(": ", 1) for line in (ASTERISK / "transcripts.txt").read_text().splitlines()
    )
    return [
        Clip(path, texts[path.stem], sf.info(path).duration)
        for path in sorted(ASTERISK.glob("*.wav"))
    ]


def test_long_form_joins_clips_with_their_references_in_order(tmp_path: Path):
    recordings = join_long_form(clips(), tmp_path, "joined", 2, 0.5, "en")
    assert [r.audio.name for r in recordings] == ["joined-00.flac", "joined-01.flac"]
    by_text = {c.text: c for c in clips()}
    for r in recordings:
        assert r.language == "en" and r.text is not None
        used = [c for text, c in by_text.items() if text in r.text]
        seconds = sf.info(r.audio).duration
        assert 15 <= seconds <= 30 + 0.8  # about half a minute, a clip may end past it
        assert seconds >= sum(c.seconds for c in used)
    again = join_long_form(clips(), tmp_path, "joined", 2, 0.5, "en")
    assert again == recordings  # kept, not rebuilt


def test_manifest_round_trip(tmp_path: Path):
    recordings = join_long_form(clips(), tmp_path / "set", "joined", 1, 0.5, "en")
    assert load_manifest(write_manifest(tmp_path / "set", recordings)) == recordings


@pytest.mark.parametrize("engine", ["piper", "espeak"])
def test_speech_is_read_from_a_text_file(tmp_path: Path, engine: str):
    text = tmp_path / "story.txt"
    text.write_text("Good morning to you.\n\nThe train left\nthe city at noon.\n")
    passages = read_passages(text)
    assert passages == ["Good morning to you.", "The train left the city at noon."]
    recording = synthesise(passages, tmp_path / "story.flac", engine)
    assert recording.text == "Good morning to you. The train left the city at noon."
    audio, rate = sf.read(recording.audio)
    assert 2.0 < len(audio) / rate < 15.0
    with Transcriber(target="whisper-tiny.en", method="target") as transcriber:
        heard = transcriber.transcribe(str(recording.audio)).text
    assert wer([recording.text], [heard]) <= 0.2, heard  # words, not noise
    slow = synthesise(passages, tmp_path / "slow.flac", engine, speed=0.8)
    assert sf.info(slow.audio).duration > len(audio) / rate + 0.3


def test_builder_errors_are_one_line(tmp_path: Path):
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(DatasetError, match="no text"):
        read_passages(tmp_path / "empty.txt")
    with pytest.raises(DatasetError, match="unknown speech engine 'say'"):
        synthesise(["hello"], tmp_path / "x.flac", "say")


def test_clean_transcript():
    assert clean_transcript("Goodbye [door]  (2 seconds of silence) now") == "Goodbye now"
