"""A Transcriber's hold on the process: its drafter and torch's thread count, on every path."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from as2d.api import Transcriber
from as2d.audio.load import load_audio
from as2d.models.bundled import ModelNotFoundError, ct2_dir
from as2d.options import Options
from as2d.runtime.drafter import DrafterProcess, DrafterSpec
from as2d.types import SAMPLE_RATE

CT2_TINY = "ct2:whisper-tiny.en"
DATA = Path(__file__).parent.parent / "data"


@pytest.fixture
def caller_threads() -> Iterator[int]:
    """torch set to a caller's own thread count, one more than the cores (a Transcriber never
    picks it), for the test; the previous setting back after it."""
    before, threads = torch.get_num_threads(), len(os.sched_getaffinity(0)) + 1
    torch.set_num_threads(threads)
    yield threads
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def ct2_ready() -> None:
    try:
        ct2_dir("whisper-tiny.en")
    except (ModelNotFoundError, OSError) as err:
        pytest.skip(f"bundled CT2 tiny.en not available: {err}")


def _interrupted(*args: object) -> bool:
    raise KeyboardInterrupt


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["unknown target", "unknown option", "Ctrl-C at the drafter"])
def test_a_failed_construction_leaves_no_drafter_and_the_threads_as_they_were(
    failure: str, caller_threads: int, ct2_ready: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(multiprocessing.active_children())
    options = Options(target="whisper-tiny.en", drafter=CT2_TINY, language="en", budget=4)
    if failure == "unknown target":  # a drafter handed over, as the command line does
        drafter = DrafterProcess(DrafterSpec(CT2_TINY))
        drafter.start()
        with pytest.raises((ModelNotFoundError, ValueError)):
            Transcriber(Options(target="whisper-nonexistent"), drafter_process=drafter)
    elif failure == "unknown option":
        drafter = DrafterProcess(DrafterSpec(CT2_TINY))
        drafter.start()
        with pytest.raises(TypeError):
            Transcriber(drafter_process=drafter, no_such_option=1)
    else:  # the target is loaded and warmed up, the drafter started here
        monkeypatch.setattr(DrafterProcess, "wait_ready", _interrupted)
        with pytest.raises(KeyboardInterrupt):
            Transcriber(options)
    assert set(multiprocessing.active_children()) == before, "the drafter process is closed"
    assert torch.get_num_threads() == caller_threads


@pytest.mark.slow
@pytest.mark.parametrize("method", ["target", "as2d"])
def test_close_gives_back_the_thread_count(method: str, caller_threads: int) -> None:
    before = set(multiprocessing.active_children())
    options = Options(target="whisper-tiny.en", method=method, drafter=CT2_TINY, budget=4)
    with Transcriber(options, warm=False) as transcriber:
        assert torch.get_num_threads() == transcriber.threads != caller_threads
    assert torch.get_num_threads() == caller_threads
    assert set(multiprocessing.active_children()) == before


@pytest.mark.slow
def test_a_short_request_is_decoded_alone_on_every_core_and_a_long_one_drafted(
    ct2_ready: None,
) -> None:
    """A few seconds of speech cannot pay for a drafter encoder padded to 30 s (`DraftGate`):
    the target decodes 2 s alone on every core, prefill included, as target-only does; 30 s
    of speech is drafted. Output equal to target-only's either way."""
    short = load_audio(DATA / "asterisk" / "en" / "dir-instr.wav")[: 2 * SAMPLE_RATE]  # 9 tokens
    long = load_audio(DATA / "long_en.flac")[: 30 * SAMPLE_RATE]
    common = {"target": "whisper-base", "language": "en"}
    with Transcriber(Options(**common, method="target")) as target_only:
        expected = [[w.token_ids for w in target_only.transcribe(a)] for a in (short, long)]
    padded = Options(**common, method="as2d", drafter=CT2_TINY, drafter_tail_s=None)
    with Transcriber(padded) as as2d:
        (window,) = as2d.transcribe(short)
        drafter = as2d.decoder.activity()
        assert drafter is not None and drafter.windows_drafted == 0
        assert window.token_ids == expected[0][0]
        assert window.alone == window.verify_passes + window.plain_steps > 0
        long_windows = list(as2d.transcribe(long))
        drafter = as2d.decoder.activity()
        assert drafter is not None and drafter.windows_drafted >= 1
        assert [w.token_ids for w in long_windows] == expected[1]
        assert sum(w.accepted_tokens for w in long_windows) > 0
