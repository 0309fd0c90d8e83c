"""Windows that lose no speech: a long recording transcribes as well as its clips one by one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from as2d.api import Transcriber
from as2d.audio.load import load_audio
from as2d.eval.metrics import wer

CLIPS = Path(__file__).parent / "data" / "asterisk" / "en"


def _references() -> dict[str, str]:
    lines = (CLIPS / "transcripts.txt").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip())


@pytest.fixture(scope="module")
def transcriber() -> Transcriber:
    return Transcriber(target="whisper-tiny.en", method="target")


def test_long_recording_wer_matches_clip_by_clip(transcriber):
    refs = _references()
    clips = [load_audio(CLIPS / f"{name}.wav") for name in refs]
    gap = np.zeros(8_000, dtype=np.float32)  # 0.5 s between prompts
    joined = np.concatenate([x for clip in clips for x in (clip, gap)])
    assert len(joined) / 16_000 > 60  # several windows' worth: cuts must fall between prompts

    run = transcriber.transcribe(joined)
    long_wer = wer([" ".join(refs.values())], [run.text])
    one_by_one = [transcriber.transcribe(clip).text for clip in clips]
    clip_wer = wer([" ".join(refs.values())], [" ".join(one_by_one)])

    assert len(run.results) >= 3
    assert long_wer <= clip_wer + 0.02, (long_wer, clip_wer)
