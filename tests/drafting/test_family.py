"""Drafter families: what a name stands for, the sized encoder's input, the run-on guard."""

from __future__ import annotations

import glob
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import as2d.drafting.family as family
from as2d.audio.windows import iter_windows
from as2d.drafting.family import (
    RUN_ON_NGRAM,
    DraftCosts,
    DrafterFamily,
    RunOnGuard,
    costs_for,
    draft_audio,
    draft_seconds,
    guarded,
    sized_frames,
)
from as2d.runtime.spec import DrafterSpec
from as2d.types import SAMPLE_RATE, Window

DATA = Path(__file__).parent.parent / "data"


def window(start: float, end: float, speech: tuple[tuple[float, float], ...] = ()) -> Window:
    audio = np.ones(round((end - start) * SAMPLE_RATE), np.float32)
    return Window(0, start, end, audio, speech)


def test_families_know_their_kind_and_what_they_can_do() -> None:
    assert DrafterFamily("ct2:whisper-base").kind == "ct2"
    assert not DrafterFamily("ct2:whisper-base").streams
    assert not DrafterFamily("ct2:/models/x").coupled
    assert DrafterFamily("whisper-tiny.en").kind == "torch"
    assert DrafterFamily("auto").kind == "auto"
    assert DrafterFamily("auto").aligner("en") == "whisper-tiny.en"
    assert DrafterFamily("auto").aligner("fr") == "whisper-base"
    assert DrafterFamily("ct2:whisper-tiny.en").aligner("de") == "whisper-base"


def test_the_sized_input_is_the_speech_and_its_tail_at_most_30_s() -> None:
    w = window(10.0, 16.0, speech=((10.5, 13.2),))
    assert draft_seconds(w, 1.0) == pytest.approx(4.2)
    assert len(draft_audio(w, 1.0)) == round(4.2 * SAMPLE_RATE)
    assert draft_audio(w, 1.0)[-1] == 1.0, "cut inside the window's own audio"
    short = window(0.0, 2.0, speech=((0.2, 2.0),))
    padded = draft_audio(short, 1.0)
    assert len(padded) == 3 * SAMPLE_RATE and padded[-1] == 0.0, "the tail is silence"
    assert draft_seconds(window(0.0, 30.0, ((0.0, 30.0),)), 1.0) == 30.0
    assert draft_seconds(window(0.0, 5.0), 0.5) == 5.5, "no speech spans: the window's end"
    assert draft_seconds(w, None) == 30.0
    assert len(draft_audio(w, None)) == len(w.audio), "Whisper's input: padded by the drafter"


def test_sized_frames_are_even_and_bounded() -> None:
    assert sized_frames(SAMPLE_RATE) == 100
    assert sized_frames(161) == 2
    assert sized_frames(SAMPLE_RATE + 161) == 102
    assert sized_frames(40 * SAMPLE_RATE) == 3000


def test_encoder_cost_grows_with_its_input() -> None:
    costs = DraftCosts(0.02, 0.11, 0.004)
    assert costs.encode_s(1.0) == 0.02
    assert costs.encode_s(17.0) == pytest.approx(0.065)
    assert costs.encode_s(30.0) == 0.11
    by_language = {"en": costs, "*": DraftCosts(0.05, 0.2, 0.01)}
    assert costs_for(by_language, "en") is costs
    assert costs_for(by_language, "fr") is costs_for(by_language, None) is by_language["*"]
    assert costs_for(None, "en") is None


def test_run_on_guard_ends_a_loop_and_a_draft_past_its_budget() -> None:
    thanks = [1, 2, 3] * 10  # "Thank you." over and over
    assert guarded(thanks, seconds=10.0) == thanks[:11]
    said_twice = [5, 6, 7, 8, 9, 10, 11] * 2  # a sentence said twice may be speech
    assert guarded(said_twice, seconds=10.0) == said_twice
    many = list(range(1000))  # no repeats, but far more tokens than 2 s of speech hold
    assert len(guarded(many, seconds=2.0)) == RunOnGuard(2.0).limit == 28


def _thrice(tokens: list[int]) -> bool:
    """Whether some n-gram the guard watches occurs three times."""
    grams = Counter(tuple(tokens[i : i + RUN_ON_NGRAM]) for i in range(len(tokens)))
    return any(n >= 3 for gram, n in grams.items() if len(gram) == RUN_ON_NGRAM)


@pytest.mark.slow
def test_run_on_guard_ends_the_loops_of_a_real_drafter_cut_to_the_speech(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tiny.en's encoder cut right after the speech (no tail) loops over its last sentence
    on some of the test prompts; the guarded draft stops there, its content intact."""
    spec = DrafterSpec("whisper-tiny.en", language="en", tail_s=0.0)
    drafter = spec.family.load(spec)
    looped = 0
    for path in sorted(glob.glob(str(DATA / "asterisk" / "en" / "*.wav"))):
        for w in iter_windows(path):
            encoded = drafter.encode(draft_audio(w, spec.tail_s), "en")
            ids = drafter.tokenizer.encode  # the draft's tokens, from its text
            draft = ids(list(drafter.texts(encoded))[-1][1])
            with monkeypatch.context() as unguarded:
                unguarded.setattr(family, "RUN_ON_REPEATS", 10**6)
                unguarded.setattr(family, "RUN_ON_TOKENS_PER_S", 1000.0)
                raw = ids(list(drafter.texts(encoded))[-1][1])
            assert not _thrice(draft), (path, draft)
            assert raw[: len(draft)] == draft, path
            looped += _thrice(raw)
    assert looped >= 1, "no loop to end: the sized encoder looped on some clips when written"
