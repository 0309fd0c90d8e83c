"""The hard set's plans and recordings, on the bundled real prompts (no download)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from as2d.eval.builders import Clip, fetch_debian, write_manifest, write_recording, written
from as2d.eval.datasets import DatasetError, load_manifest
from as2d.eval.hard_set import (
    IN_TURN_GAP_S,
    SHORT_S,
    TURN_GAP_S,
    Degradation,
    Plan,
    Sources,
    Voice,
    plan_conversation,
    plan_short,
    prompt_clips,
    render,
)
from as2d.types import SAMPLE_RATE

DATA = Path(__file__).parents[1] / "data" / "asterisk"


def voice(name: str, language: str) -> Voice:
    """The bundled prompts of `language` as a voice, with their transcripts."""
    folder = DATA / language
    lines = (folder / "transcripts.txt").read_text(encoding="utf-8").splitlines()
    texts = dict(line.split(": ", 1) for line in lines)
    clips = [Clip(p, texts[p.stem], sf.info(p).duration) for p in sorted(folder.glob("*.wav"))]
    return Voice(name, language, tuple(clips))


@pytest.fixture
def sources(tmp_path: Path) -> Sources:
    """Sources whose voices are already there: nothing is fetched or synthesised."""
    sources = Sources(tmp_path)
    sources.allison = voice("allison", "en")
    sources.joe = voice("joe", "es")  # another voice to alternate with (same words or not)
    sources.others = voice("others", "fr")
    sources.varied = [voice("june", "fr"), voice("july", "es")]
    return sources


def test_conversation_alternates_voices_with_pauses_between_turns(sources: Sources):
    plans = plan_conversation(sources, np.random.default_rng(0))
    again = plan_conversation(sources, np.random.default_rng(0))
    assert plans == again  # seeded
    owner = {
        clip.path: v.name
        for v in (sources.allison, sources.joe, sources.others)
        for clip in v.clips
    }
    for plan in plans:
        assert plan.subset == "conversation" and plan.language == "en"
        voices = [owner[clip.path] for clip in plan.clips]
        assert set(voices) == {"allison", "joe", "others"}
        for this, following, gap in zip(voices, voices[1:], plan.gaps, strict=False):
            low, high = TURN_GAP_S if this != following else IN_TURN_GAP_S
            assert low <= gap <= high
        assert 60 <= sum(c.seconds for c in plan.clips) + sum(plan.gaps) <= 5 * 60


def test_short_utterances_are_single_clips_of_one_to_eight_seconds(sources: Sources):
    used = {sources.varied[0].clips[0].path}
    plans = plan_short(sources, used, np.random.default_rng(0))
    assert len({p.name for p in plans}) == len(plans)
    assert all(len(p.clips) == 1 and SHORT_S[0] <= p.clips[0].seconds <= SHORT_S[1] for p in plans)
    assert not used & {p.clips[0].path for p in plans}
    languages = {p.name.split("-")[2]: p.language for p in plans}
    assert languages == {"others": "fr", "june": "fr", "july": "es", "allison": "en"}


def test_render_joins_clips_then_degrades(sources: Sources):
    clips = sources.allison.clips[:2]
    plan = Plan("x", "degraded", "en", clips, (0.5, 0.25))
    clean = render(plan, sources)
    assert len(clean) == pytest.approx(
        sum(c.seconds for c in clips) * SAMPLE_RATE + 0.75 * SAMPLE_RATE, abs=2
    )
    fast = render(
        Plan("x", "degraded", "en", clips, (0.5, 0.25), Degradation("f", speed=1.1)), sources
    )
    assert len(fast) == pytest.approx(len(clean) / 1.1, abs=2)


def test_prompt_packages_skip_beeps_and_silence(tmp_path: Path):
    unpacked = tmp_path / "debian" / "asterisk-prompt-xx"
    sounds = unpacked / "usr/share/asterisk/sounds/xx"
    for name in ("vm-intro.wav", "beep.wav", "silence/1.wav", "digits/1.wav"):
        (sounds / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / "fr" / "demo-nogo.wav", sounds / name)
    (unpacked / ".done").touch()  # as fetch_debian leaves an unpacked package
    clips = prompt_clips(tmp_path, "asterisk-prompt-xx")
    assert [c.path.relative_to(sounds).as_posix() for c in clips] == [
        "digits/1.wav",
        "vm-intro.wav",
    ]
    assert all(c.text is None and c.seconds > 1.0 for c in clips)


def test_a_package_that_cannot_be_fetched_is_one_line(tmp_path: Path):
    with pytest.raises(DatasetError, match="cannot fetch Debian package as2d-no-such-pkg") as err:
        fetch_debian(tmp_path, ["as2d-no-such-pkg"], "debian/none")
    assert "\n" not in str(err.value)


def test_manifest_keeps_subsets_and_missing_references(tmp_path: Path):
    tone = [np.zeros(SAMPLE_RATE, dtype=np.float32)]
    write_recording(tmp_path / "a.flac", tone, SAMPLE_RATE, "hello")
    write_recording(tmp_path / "b.flac", tone, SAMPLE_RATE, None)
    recordings = [
        written(tmp_path / "a.flac", "en", "short"),
        written(tmp_path / "b.flac", "fr", "varied"),
    ]
    assert [(r.text, r.subset) for r in recordings] == [("hello", "short"), (None, "varied")]
    assert not (tmp_path / "b.txt").exists()
    assert load_manifest(write_manifest(tmp_path, recordings)) == recordings
