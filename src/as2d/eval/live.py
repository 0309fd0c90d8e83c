"""The live path measured: recordings played to a `LiveSession` as a microphone would, with
a second of silence after each, and per utterance the delays a user feels.

Two clocks: "real" plays blocks when they would arrive (the session's work delays what
arrives meanwhile, as on a live device); "simulated" skips the waits and charges each block's
work to a virtual clock that never runs ahead of the audio (the same figures, without idle
time, on a quiet machine).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from as2d.live import LiveEvent, LiveSession, blocks_of
from as2d.types import SAMPLE_RATE

CLOCKS = ("real", "simulated")


@dataclass
class Utterance:
    """One utterance's delays (seconds) in one live run.

    Attributes:
        recording, item: which.
        start_s, end_s: its window (its last speech and 0.2 s).
        first_text_s: the first provisional text after its speech started (None: none).
        stopped_lag_s: `speech_stopped` after the audio that decided it arrived.
        final_s: `completed` after `speech_stopped`.
        final_after_audio_s: `completed` after the end of its window arrived.
        tokens: the final text's tokens (compared across methods).
    """

    recording: str
    item: int
    start_s: float
    end_s: float
    first_text_s: float | None
    stopped_lag_s: float
    final_s: float
    final_after_audio_s: float
    tokens: list[int]


def play(
    session: LiveSession,
    audio: np.ndarray,
    clock: str = "real",
    block_s: float = 0.1,
    silence_s: float = 1.0,
) -> list[tuple[LiveEvent, float]]:
    """Plays `audio` and `silence_s` of silence to `session`; each event with its time in
    seconds from the start of the audio (on `clock`)."""
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    stream = np.concatenate([audio, np.zeros(round(silence_s * SAMPLE_RATE), np.float32)])
    timed: list[tuple[LiveEvent, float]] = []
    start, now, heard = time.perf_counter(), 0.0, 0
    for block in [*blocks_of(stream, block_s), None]:
        heard += 0 if block is None else len(block)
        arrived = heard / SAMPLE_RATE
        if clock == "real":
            time.sleep(max(0.0, start + arrived - time.perf_counter()))
            now = time.perf_counter() - start
        else:
            now = max(now, arrived)
        began = time.perf_counter()
        events = session.finish() if block is None else session.push(block)
        timed += [(event, now + event.wall - began) for event in events]
        if clock == "simulated":
            now += time.perf_counter() - began
    return timed


def utterances(recording: str, timed: Sequence[tuple[LiveEvent, float]]) -> Iterator[Utterance]:
    """The delays of each utterance that completed, from `play`'s events."""
    by_item: dict[int, dict[str, tuple[LiveEvent, float]]] = {}
    for event, at in timed:
        by_item.setdefault(event.item, {}).setdefault(event.kind, (event, at))
    for item, kinds in sorted(by_item.items()):
        if "completed" not in kinds:
            continue
        started, stopped, completed = (
            kinds[k] for k in ("speech_started", "speech_stopped", "completed")
        )
        result = completed[0].result
        assert result is not None
        delta = kinds.get("delta")
        yield Utterance(
            recording,
            item,
            completed[0].start_s,
            completed[0].end_s,
            None if delta is None else delta[1] - started[0].start_s,
            stopped[1] - stopped[0].audio_s,
            completed[1] - stopped[1],
            completed[1] - completed[0].end_s,
            list(result.token_ids),
        )


def summary(rows: Sequence[Utterance]) -> dict[str, float | int | None]:
    """Medians and 95th percentiles of a method's utterances."""

    def pct(values: list[float], q: float) -> float | None:
        if not values:
            return None
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    out: dict[str, float | int | None] = {"utterances": len(rows)}
    for name in ("first_text_s", "stopped_lag_s", "final_s", "final_after_audio_s"):
        values = [v for r in rows if (v := getattr(r, name)) is not None]
        out[f"{name}_p50"] = statistics.median(values) if values else None
        out[f"{name}_p95"] = pct(values, 0.95)
    return out


def as_dicts(rows: Sequence[Utterance]) -> list[dict[str, object]]:
    return [asdict(r) for r in rows]
