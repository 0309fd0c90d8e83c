"""Options defaults a user relies on: thread split, task-dependent drafter."""

from __future__ import annotations

import pytest

from as2d.options import Options, parse_budget
from as2d.runtime.cores import thread_split


def test_on_a_gpu_the_drafter_takes_the_spare_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("as2d.runtime.cores._cores", lambda: 8)
    assert thread_split(Options(device="cuda")) == (1, 7)
    assert thread_split(Options(device="cuda", method="target")) == (1, 0)
    assert thread_split(Options(device="cpu")) == (4, 4)
    assert thread_split(Options(device="cpu", method="target")) == (8, 0)


def test_translation_drafts_with_a_multilingual_drafter_by_default() -> None:
    assert Options().drafter == "auto"  # a model per window, by its language
    assert Options(task="translate").drafter == "ct2:whisper-base"  # tiny.en cannot translate
    assert Options(method="sd").drafter == "whisper-tiny.en"  # sd runs one model
    assert Options(method="sd", language="fr").drafter == "whisper-base"
    assert Options(task="translate", drafter="whisper-tiny.en").drafter == "whisper-tiny.en"


def test_parse_budget() -> None:
    assert parse_budget("auto") is None
    assert parse_budget("16") == 16
    with pytest.raises(ValueError, match="auto or a number"):
        parse_budget("-1")
