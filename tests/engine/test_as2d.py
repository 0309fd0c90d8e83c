"""AS²D over several recordings (`engine/as2d.py`): one drafter process serves them all, and
each recording reports the drafter's work on its own windows."""

from __future__ import annotations

from pathlib import Path

from as2d.api import Transcriber
from as2d.options import Options

CLIP = Path(__file__).resolve().parents[1] / "data" / "asterisk" / "en" / "demo-nogo.wav"


def test_each_recording_reports_the_drafter_s_work_on_its_own_windows() -> None:
    """Every window goes to the drafter (no gate); the busy seconds and windows of the
    recordings add up to the process's, none counted twice."""
    options = Options(target="whisper-base", language="en", draft_gate=False)
    with Transcriber(options) as transcriber:
        runs = [transcriber.transcribe(CLIP) for _ in range(3)]
        stats = [run.stats for run in runs]  # decoded one after the other
        drafter = transcriber.drafter
        assert drafter is not None
        busy_s, drafted = drafter.busy_s, drafter.windows_drafted
    activity = [s.drafter for s in stats if s.drafter is not None]
    assert len(activity) == 3 and activity[0].busy_s > 0
    for run, work in zip(runs, activity, strict=True):
        assert work.windows_drafted <= len(run.results)
    assert sum(a.busy_s for a in activity) <= busy_s + 1e-9
    assert sum(a.windows_drafted for a in activity) <= drafted
