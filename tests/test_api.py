"""The Transcriber's controls between recordings: `forget` and `set_budget`, with the real
bundled whisper-base on a real recording (pld: no drafter process, so nothing races)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from as2d.api import Transcriber
from as2d.audio.load import load_audio
from as2d.options import Options

pytestmark = pytest.mark.slow

CLIP = load_audio(Path(__file__).parent / "data" / "asterisk" / "en" / "vm-msginstruct.wav")
ENGLISH = {"target": "whisper-base", "language": "en", "threads": 1}


def accepted(transcriber: Transcriber) -> tuple[list[list[int]], int]:
    """The clip's tokens per window, and the candidate tokens the target accepted."""
    windows = list(transcriber.transcribe(CLIP))
    return [w.token_ids for w in windows], sum(w.accepted_tokens for w in windows)


def test_forget_drops_earlier_recordings_from_the_history_lookup() -> None:
    with Transcriber(Options(**ENGLISH, method="target")) as target_only:
        expected, _ = accepted(target_only)
    with Transcriber(Options(**ENGLISH, method="pld", budget=4)) as pld:
        first = accepted(pld)
        again = accepted(pld)  # the first decode's text is there to look up
        pld.forget()
        afresh = accepted(pld)
    assert first[0] == again[0] == afresh[0] == expected
    assert again[1] > first[1]
    assert afresh[1] == first[1]


def test_set_budget_changes_k_and_keeps_the_output() -> None:
    with Transcriber(Options(**ENGLISH, method="pld", budget=1)) as pld:
        one = list(pld.transcribe(CLIP))
        pld.set_budget(8)
        pld.forget()
        eight = list(pld.transcribe(CLIP))
    assert [w.token_ids for w in one] == [w.token_ids for w in eight]
    assert all(w.drafted_tokens <= w.verify_passes for w in one)  # at most 1 per pass
    assert sum(w.drafted_tokens for w in eight) > sum(w.drafted_tokens for w in one)


def test_set_budget_of_a_method_without_one_is_a_clear_error() -> None:
    target_only = Transcriber(Options(**ENGLISH, method="target"), warm=False)
    with target_only, pytest.raises(ValueError, match="method target has no budget"):
        target_only.set_budget(4)


def test_as2d_without_a_drafter_process_decodes_on_every_core_as_target_only() -> None:
    """What a one-off command runs where no recording is long enough for drafting to pay."""
    options = Options(target="whisper-base", language="en", method="as2d")
    with Transcriber(options, spawn_drafter=False) as as2d:
        assert as2d.drafter is None and as2d.threads == len(os.sched_getaffinity(0))
        windows = list(as2d.transcribe(CLIP))
        assert as2d.decoder.activity() is None
    with Transcriber(Options(**ENGLISH, method="target")) as target_only:
        expected, _ = accepted(target_only)
    assert [w.token_ids for w in windows] == expected
