"""as2d.audio.windows: windows of at most 30 s, cut in silence, covering all speech, streamed."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from as2d.audio.windows import EDGE_PAD_S, SpeechWindower, _Cut, _pause_cut, iter_windows
from as2d.types import MAX_WINDOW_S, SAMPLE_RATE, Window

Reference = Callable[[np.ndarray, int], list[tuple[int, int]]]
FRAME_S = 0.032
LONG_EN = Path(__file__).parents[1] / "data" / "long_en.flac"


def samples(seconds: float) -> int:
    return round(seconds * SAMPLE_RATE)


def check_layout(windows: list[Window], audio: np.ndarray, max_s: float) -> None:
    """Windows are short enough, in order, disjoint, and hold their stretch of the audio."""
    assert [w.index for w in windows] == list(range(len(windows)))
    for window, after in pairwise(windows):
        assert window.end <= after.start
    for window in windows:
        assert 0 < window.end - window.start <= max_s
        piece = audio[samples(window.start) : samples(window.end)]
        np.testing.assert_array_equal(window.audio, piece)
        assert window.speech, "a window holds the speech it was made for"
        for (a, b), (c, _) in pairwise([*window.speech, (window.end, window.end)]):
            assert window.start <= a < b <= c <= window.end  # in order, inside the window


def check_speech_covered(windows: list[Window], speech: list[tuple[int, int]]) -> None:
    """Every speech segment lies inside the windows (to within one sample)."""
    for start, end in speech:
        inside = sum(
            max(0, min(end, samples(w.end)) - max(start, samples(w.start))) for w in windows
        )
        assert inside >= end - start - 1, f"speech {start / SAMPLE_RATE:.2f} s not covered"


def cuts_inside_speech(windows: list[Window], speech: list[tuple[int, int]]) -> list[Window]:
    """Windows whose end falls strictly inside a speech segment (a cut through speech)."""
    return [w for w in windows[:-1] if any(s < samples(w.end) < e for s, e in speech)]


@pytest.mark.parametrize("recording", ["long_en", "joined_clips"])
def test_windows_cut_in_silence_and_cover_all_speech(
    recording: str, request: pytest.FixtureRequest, reference_speech: Reference
) -> None:
    audio = request.getfixturevalue(recording)
    windows = list(iter_windows(audio))
    speech = reference_speech(audio, 30)
    check_layout(windows, audio, MAX_WINDOW_S)
    check_speech_covered(windows, speech)
    assert cuts_inside_speech(windows, speech) == []
    starts = [samples(w.start) for w in windows[1:]]
    assert not any(s < start < e for s, e in speech for start in starts)
    assert len(windows) <= np.ceil(len(audio) / samples(MAX_WINDOW_S)) + 1  # utterances merged


def test_short_windows_cut_inside_speech_only_without_a_pause(
    long_en: np.ndarray, reference_speech: Reference
) -> None:
    windows = list(iter_windows(long_en, max_window_s=4.0))
    speech = reference_speech(long_en, 30)
    check_layout(windows, long_en, 4.0)
    check_speech_covered(windows, speech)
    through_speech = cuts_inside_speech(windows, speech)
    assert 0 < len(through_speech) < len(windows) / 2
    for window in through_speech:  # the cut run of speech began before the window did
        run_start = next(s for s, e in speech if s < samples(window.end) < e)
        assert run_start <= samples(window.start + EDGE_PAD_S + FRAME_S)


def test_a_file_and_its_samples_give_the_same_windows(long_en: np.ndarray) -> None:
    from_file = list(iter_windows(LONG_EN))
    from_array = list(iter_windows(long_en))
    assert len(from_file) == len(from_array) == 4
    for a, b in zip(from_file, from_array, strict=True):
        assert a.start == pytest.approx(b.start, abs=FRAME_S)
        assert a.end == pytest.approx(b.end, abs=FRAME_S)


def test_no_speech_no_windows() -> None:
    noise = np.random.default_rng(0).normal(0, 1e-3, samples(20)).astype(np.float32)
    assert list(iter_windows(np.zeros(samples(45), dtype=np.float32))) == []
    assert list(iter_windows(noise)) == []
    assert list(iter_windows(np.zeros(0, dtype=np.float32))) == []


def test_buffer_stays_bounded_on_a_20_minute_recording(long_en: np.ndarray) -> None:
    repeats = 11  # 11 x 111.6 s = 20.5 min, pushed in 10 s blocks, never joined
    block = samples(10)
    windower, windows, most_buffered = SpeechWindower(), [], 0.0
    for _ in range(repeats):
        for start in range(0, len(long_en), block):
            windows += windower.push(long_en[start : start + block])
            most_buffered = max(most_buffered, windower.buffered_s)
    windows += windower.finish()
    assert most_buffered <= MAX_WINDOW_S + 10 + 0.5  # one window + one block
    assert repeats * 4 <= len(windows) <= repeats * 5
    assert all(w.end - w.start <= MAX_WINDOW_S for w in windows)
    assert windows[-1].end <= repeats * len(long_en) / SAMPLE_RATE


def test_pause_cut_prefers_the_longest_pause_near_the_limit() -> None:
    speech = [(0, 100), (200, 300), (900, 1000)]  # the docstring's example
    assert _pause_cut(speech, limit=400, pad=20, max_len=400, total=2000) == _Cut(320, 600)
    # pauses: 250 samples early on; 20 and 10 in the last third (after 333): 20 wins
    near = [(0, 100), (350, 400), (420, 480), (490, 2000)]
    assert _pause_cut(near, limit=500, pad=20, max_len=500, total=2000) == _Cut(410, 410)
    early = [(0, 100), (300, 2000)]  # a single pause, far from the limit: still taken
    assert _pause_cut(early, limit=500, pad=20, max_len=500, total=2000) == _Cut(120, 200)
    assert _pause_cut([(0, 600)], limit=500, pad=20, max_len=500, total=2000) is None


def test_window_length_is_checked() -> None:
    with pytest.raises(ValueError, match="max_window_s"):
        SpeechWindower(max_window_s=31.0)


# ---------------------------------------------------------------- utterances (endpoints)

ENDPOINT_S = 0.6
BLOCK_S = 0.1  # a live source's blocks


def utterances(audio: np.ndarray, block_s: float) -> list[tuple[Window, float]]:
    """Windows cut at `ENDPOINT_S` pauses from `audio` pushed in blocks of `block_s`, each
    with the seconds of audio pushed when it came out."""
    windower, out = SpeechWindower(endpoint_s=ENDPOINT_S), []
    block = samples(block_s)
    for start in range(0, len(audio), block):
        out += [(w, windower.received_s) for w in windower.push(audio[start : start + block])]
    return out + [(w, windower.received_s) for w in windower.finish()]


def test_an_endpoint_ends_each_utterance_as_soon_as_its_pause_is_heard(
    long_en: np.ndarray,
) -> None:
    """long_en joins five prompts with 0.8 s of silence: each becomes its own window (or
    windows, past 30 s), decided within the endpoint and a block of the speech's end, and no
    window holds a pause as long as the endpoint."""
    live = utterances(long_en, BLOCK_S)
    windows = [w for w, _ in live]
    check_layout(windows, long_en, MAX_WINDOW_S)
    assert len(windows) >= 5
    ended = 0
    for (window, heard_s), (after, _) in pairwise(live):
        speech_end = window.speech[-1][1]
        if after.speech[0][0] - speech_end >= ENDPOINT_S:  # ended by a pause, not by 30 s
            assert heard_s <= speech_end + ENDPOINT_S + BLOCK_S + 2 * FRAME_S, (window, heard_s)
            ended += 1
        for (_, end), (start, _) in pairwise(window.speech):
            assert start - end < ENDPOINT_S  # the utterance's own short pauses only
    assert ended >= 3
    # The same recording read at once (`--endpoint-ms` on a file) cuts the same windows.
    whole = [w for w, _ in utterances(long_en, 10.0)]
    assert [(w.start, w.end, w.speech) for w in whole] == [
        (w.start, w.end, w.speech) for w in windows
    ]


def test_the_tentative_window_of_a_pause_is_the_window_its_endpoint_cuts(
    long_en: np.ndarray,
) -> None:
    """During a pause, `tentative` is the utterance as silence would end it: where no speech
    comes before the endpoint, exactly the window then cut (its work can start early)."""
    windower = SpeechWindower(endpoint_s=ENDPOINT_S)
    block, seen, matched = samples(BLOCK_S), None, 0
    for start in range(0, len(long_en), block):
        for window in windower.push(long_en[start : start + block]):
            if seen is not None and seen.index == window.index:
                assert (seen.start, seen.end, seen.speech) == (
                    window.start,
                    window.end,
                    window.speech,
                )
                np.testing.assert_array_equal(seen.audio, window.audio)
                matched += 1
        seen = windower.tentative()  # None again where speech resumed
    assert matched >= 4  # every utterance of long_en but the last (its end: `finish`)
