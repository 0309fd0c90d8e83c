"""Live audio (`as2d.live`): every final text is target-only's for the same utterance windows,
whatever the drafter and whether the target worked early; the events come in order."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from as2d.api import Transcriber
from as2d.audio.load import load_audio
from as2d.cli import main
from as2d.eval.live import play, utterances
from as2d.live import LiveEvent, LiveSession
from as2d.types import SAMPLE_RATE

DATA = Path(__file__).resolve().parent / "data"
CLIPS = sorted((DATA / "asterisk" / "en").glob("*.wav"))[:4]
ENDPOINT_MS = 600
TARGET = "whisper-tiny.en"  # fast; the drafter (auto: tiny.en) is another process all the same


@pytest.fixture(scope="module")
def spoken() -> np.ndarray:
    """Four English prompts, each followed by a second of silence: four utterances at least."""
    silence = np.zeros(SAMPLE_RATE, np.float32)
    return np.concatenate([part for clip in CLIPS for part in (load_audio(clip), silence)])


@pytest.fixture(scope="module")
def expected(spoken: np.ndarray) -> list[tuple[float, float, list[int]]]:
    """Target-only's windows and tokens with the same endpoint, the recording read whole."""
    with Transcriber(target=TARGET, method="target", endpoint_ms=ENDPOINT_MS) as transcriber:
        return [(w.start, w.end, w.token_ids) for w in transcriber.transcribe(spoken)]


def finals(events: list[LiveEvent]) -> list[tuple[float, float, list[int]]]:
    done = [e for e in events if e.kind == "completed"]
    assert all(e.result is not None for e in done)
    return [(e.start_s, e.end_s, e.result.token_ids) for e in done]  # type: ignore[union-attr]


def check_order(events: list[LiveEvent]) -> None:
    """Per utterance: started, then stopped, then completed, once each; deltas before the
    completion."""
    items = sorted({e.item for e in events})
    assert items == list(range(len(items)))
    for item in items:
        kinds = [e.kind for e in events if e.item == item]
        assert [k for k in kinds if k != "delta"] == [
            "speech_started",
            "speech_stopped",
            "completed",
        ], kinds
        assert "delta" not in kinds[kinds.index("completed") :]


@pytest.mark.parametrize("fault", [None, "random"])
def test_live_final_texts_are_target_only_s(spoken, expected, fault) -> None:
    """as2d live, with a healthy drafter and with one drafting nonsense, its target on its
    own thread and the audio arriving as fast as it can be read: the completed texts are
    target-only's, window for window, and a pause's early work is used where no speech came."""
    options = {"target": TARGET, "endpoint_ms": ENDPOINT_MS, "drafter_fault": fault}
    with Transcriber(method="as2d", **options) as transcriber:
        session = LiveSession(transcriber, ENDPOINT_MS, language="en")
        events = list(session.run(np.array_split(spoken, len(spoken) // 1600)))
    assert finals(events) == expected
    check_order(events)
    assert len(expected) >= 4


def test_live_session_in_real_time_drafts_early_and_says_provisional_text(spoken, expected) -> None:
    """Played in real time: the drafter's provisional text comes while the user speaks,
    pauses' windows are decoded before their endpoint, and the finals are unchanged."""
    with Transcriber(target=TARGET, method="as2d", endpoint_ms=ENDPOINT_MS) as transcriber:
        timed = play(LiveSession(transcriber, ENDPOINT_MS, language="en"), spoken, "real")
    events = [event for event, _ in timed]
    assert finals(events) == expected
    check_order(events)
    assert any(e.kind == "delta" and e.text for e in events)
    assert any(e.early for e in events if e.kind == "completed")
    rows = list(utterances("spoken", timed))
    assert len(rows) == len(expected)
    assert all(r.stopped_lag_s < 1.0 for r in rows)  # the endpoint heard while the target works


def test_target_only_live_waits_for_the_endpoint(spoken, expected) -> None:
    """Target-only live decodes each utterance once it has ended: nothing early, no
    provisional text, the same finals (its target in `push`, as the simulated clock needs)."""
    with Transcriber(target=TARGET, method="target", endpoint_ms=ENDPOINT_MS) as transcriber:
        timed = play(LiveSession(transcriber, ENDPOINT_MS, background=False), spoken, "simulated")
    events = [event for event, _ in timed]
    assert finals(events) == expected
    assert not any(e.kind == "delta" or e.early for e in events)


def test_a_file_cut_at_endpoints_gives_the_same_text_with_every_method(tmp_path) -> None:
    """`--endpoint-ms` on a file: as2d equals target-only on the utterance windows."""
    outputs = {}
    for method in ("target", "as2d"):
        out = tmp_path / method
        args = ["transcribe", str(DATA / "long_en.flac"), "--target", TARGET, "--no-progress"]
        args += ["--method", method, "--endpoint-ms", str(ENDPOINT_MS), "--format", "json"]
        assert main([*args, "-o", str(out)]) == 0
        windows = json.loads((out / "long_en.json").read_text())["windows"]
        outputs[method] = [(w["start"], w["end"], w["token_ids"]) for w in windows]
    assert outputs["as2d"] == outputs["target"]
    assert len(outputs["target"]) >= 5  # the five prompts, at least


def test_a_bad_endpoint_is_a_usage_error(capsys) -> None:
    assert main(["transcribe", str(CLIPS[0]), "--endpoint-ms", "5"]) == 2
    assert "endpoint" in capsys.readouterr().err


def test_audio_faster_than_the_target_holds_one_provisional_job_and_is_dropped(spoken) -> None:
    """The target busy elsewhere (its lock held) while the whole recording arrives: the open
    utterance's drafts wait as one job, not one copy of it per half second, so the work held
    is bounded by the audio itself; a client gone drops that backlog at once (issue 39, 3)."""
    lock = threading.Lock()
    with Transcriber(target=TARGET, method="as2d", endpoint_ms=ENDPOINT_MS) as transcriber:
        session = LiveSession(transcriber, ENDPOINT_MS, language="en", lock=lock)
        with lock:
            tracemalloc.start()
            for block in np.array_split(spoken, len(spoken) // 1600):
                session.push(block)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            start = time.perf_counter()
            session.drop()
            assert time.perf_counter() - start < 0.5  # the backlog is not waited for
    assert peak < 3 * spoken.nbytes, (peak, spoken.nbytes)
