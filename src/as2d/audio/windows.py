"""Cut a recording into speech windows of at most 30 s, in silences, losing no speech.

Whisper decoded without timestamps over a plain 30 s cut drops words at the cut and
often whole sentences when a window holds several utterances, so windows are placed
by voice activity (see `vad.py`):

- a window starts a little (EDGE_PAD_S) before its first speech and holds as many
  utterances as fit in `max_window_s` (fewer windows = fewer encoder passes);
- it ends in a pause: the longest pause in the last third of the window, else the
  latest pause; the edges are padded by EDGE_PAD_S but neighbours never overlap;
- only a single run of speech longer than the window is cut inside speech, at the
  quietest 100 ms of its second half;
- audio without speech produces no window.

With an endpoint (`endpoint_s`, live audio and `--endpoint-ms`), a window is an utterance
instead: it ends at the first pause of at least `endpoint_s`, decided as soon as that much
silence has been heard (or at 30 s, as above), never by waiting for speech to come.

The audio is streamed: `SpeechWindower` holds at most one window plus one input block
(≈ 40 s with the default 10 s blocks), so an hour of audio never sits in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

import numpy as np

from as2d.audio.load import iter_audio_blocks
from as2d.audio.vad import FRAME, MIN_SILENCE, SileroVad, SpeechTracker
from as2d.types import MAX_WINDOW_S, SAMPLE_RATE, Window

EDGE_PAD_S = 0.2  # audio kept before and after speech at a window's edges
NEAR_LIMIT = 1 / 3  # pauses in this last fraction of a window are preferred for the cut
QUIET_SPAN = 3  # frames (96 ms) averaged when looking for the quietest point in speech
_NEVER = 2**62  # sample index standing for "no later speech known"


class _Cut(NamedTuple):
    """Where a window ends and where the next one may start, in samples."""

    end: int
    resume: int


_UNDECIDED = _Cut(-1, -1)  # `_endpoint_cut`: the pause so far may still become an endpoint


class SpeechWindower:
    """Turn a stream of 16 kHz blocks into speech windows with bounded memory.

    Feed blocks with `push`, then call `finish` once; each returns the windows
    completed so far, in order.
    """

    def __init__(
        self,
        max_window_s: float = MAX_WINDOW_S,
        vad: SileroVad | None = None,
        endpoint_s: float | None = None,
    ) -> None:
        """Set up an empty stream.

        Args:
            max_window_s: longest window, seconds (at most MAX_WINDOW_S).
            vad: the voice activity detector; a fresh SileroVad by default.
            endpoint_s: a pause this long ends an utterance's window (None: windows hold as
                many utterances as fit).
        """
        if not 0 < max_window_s <= MAX_WINDOW_S:
            raise ValueError(f"max_window_s must be in (0, {MAX_WINDOW_S}], got {max_window_s}")
        if endpoint_s is not None and endpoint_s <= 0:
            raise ValueError(f"endpoint_s must be positive, got {endpoint_s}")
        self._endpoint = None if endpoint_s is None else round(endpoint_s * SAMPLE_RATE)
        self._max_len = round(max_window_s * SAMPLE_RATE)
        self._pad = min(round(EDGE_PAD_S * SAMPLE_RATE), self._max_len // 4)
        self._vad = vad or SileroVad()
        self._tracker = SpeechTracker()
        self._speech: list[tuple[int, int]] = []  # closed segments not yet fully windowed
        self._audio = np.zeros(0, dtype=np.float32)  # [samples] from self._offset on
        self._offset = 0  # recording sample index of self._audio[0]
        self._scored = 0  # samples scored by the VAD so far (whole frames)
        self._floor = 0  # the next window starts here or later
        self._index = 0

    @property
    def buffered_s(self) -> float:
        """Seconds of audio held in the buffer now."""
        return len(self._audio) / SAMPLE_RATE

    @property
    def received_s(self) -> float:
        """Seconds of audio pushed so far: the recording's length once it is finished (its
        last window may end earlier, in silence)."""
        return self._end / SAMPLE_RATE

    def windows(self, source: str | Path | np.ndarray) -> Iterator[Window]:
        """Pushes `source` (see `iter_windows`) block by block, yielding windows as they
        complete, and finishes the stream."""
        for block in iter_audio_blocks(source):
            yield from self.push(block)
        yield from self.finish()

    def push(self, block: np.ndarray) -> list[Window]:
        """Append a block of 16 kHz mono float32 samples; return completed windows."""
        self._audio = np.concatenate([self._audio, block.astype(np.float32, copy=False)])
        whole = (self._end - self._scored) // FRAME
        self._score(self._slice(self._scored, self._scored + whole * FRAME).reshape(whole, FRAME))
        return self._drain(final=False)

    def finish(self) -> list[Window]:
        """End the stream; return the remaining windows."""
        rest = self._slice(self._scored, self._end)
        if len(rest):
            last = np.zeros((1, FRAME), dtype=np.float32)  # zero-padded, as Silero does
            last[0, : len(rest)] = rest
            self._score(last)
        self._speech += self._tracker.finish(self._end)
        return self._drain(final=True)

    @property
    def _end(self) -> int:
        """Recording sample index just past the audio received so far."""
        return self._offset + len(self._audio)

    def _slice(self, start: int, end: int) -> np.ndarray:
        """Buffered samples [start, end) in recording sample indices."""
        return self._audio[start - self._offset : end - self._offset]

    def _score(self, frames: np.ndarray) -> None:
        """Run the VAD on the next frames and collect the segments they close."""
        self._speech += self._tracker.push(self._vad(frames), self._scored)
        self._scored += len(frames) * FRAME

    def _pending(self) -> list[tuple[int, int]]:
        """Speech not yet in a window, the run in progress last (open-ended)."""
        pending = [(max(start, self._floor), end) for start, end in self._speech]
        if self._tracker.start is not None:
            pending.append((max(self._tracker.start, self._floor), _NEVER))
        return pending

    def _drain(self, final: bool) -> list[Window]:
        """Emit every window that can be decided now, then drop audio no longer needed."""
        windows = []
        while (window := self._next_window(final)) is not None:
            windows.append(window)
        pending = self._pending()
        keep = pending[0][0] - self._pad if pending else self._scored - self._pad
        keep = min(max(keep, self._floor, self._offset), self._scored)
        self._audio = self._audio[keep - self._offset :]
        self._offset = keep
        return windows

    @property
    def in_speech(self) -> bool:
        """Whether speech not yet in a window has been heard (the utterance open now)."""
        return bool(self._pending())

    def open_utterance(self) -> Window | None:
        """The speech not yet in a window, from its start to the audio heard so far (at most
        a window long), for drafting while it grows; None in silence. Nothing changes."""
        pending = self._pending()
        if not pending:
            return None
        start = max(self._floor, pending[0][0] - self._pad)
        end = min(self._end, start + self._max_len)
        speech = tuple(
            (max(s, start) / SAMPLE_RATE, min(e, end) / SAMPLE_RATE)
            for s, e in pending
            if s < end and e > start
        )
        return Window(
            self._index,
            start / SAMPLE_RATE,
            end / SAMPLE_RATE,
            self._slice(start, end).copy(),
            speech,
        )

    def tentative(self) -> Window | None:
        """The window that silence from now on would cut next (`endpoint_s` only): during a
        pause in speech, the utterance as it is if it ended there; None while speech runs,
        or before the pause holds the window's end padding. Nothing changes."""
        if self._endpoint is None or self._tracker.start is not None:
            return None
        decided = self._decide(final=True)
        if decided is None or decided[1].end >= self._end:  # its padding not all heard yet
            return None
        return decided[0]

    def _next_window(self, final: bool) -> Window | None:
        """The next window, or None when there is no speech or not enough audio yet."""
        decided = self._decide(final)
        if decided is None:
            return None
        window, cut = decided
        self._index += 1
        self._floor = cut.resume
        self._speech = [(s, e) for s, e in self._speech if e > cut.resume]
        return window

    def _decide(self, final: bool) -> tuple[Window, _Cut] | None:
        """The next window and its cut, if they can be decided now."""
        pending = self._pending()
        if not pending:
            return None
        start = max(self._floor, pending[0][0] - self._pad)
        limit = start + self._max_len
        cut = self._endpoint_cut(pending, limit, final) if self._endpoint is not None else None
        if cut is _UNDECIDED:
            return None
        if cut is None and not final and self._scored < limit + MIN_SILENCE + FRAME:
            return None  # a pause before `limit` might still be undecided
        if cut is None:
            cut = _pause_cut(pending, limit, self._pad, self._max_len, self._end)
        if cut is None:
            cut = _quiet_cut(self._slice(start, limit), start, self._max_len)
        speech = tuple(
            (max(s, start) / SAMPLE_RATE, min(e, cut.end) / SAMPLE_RATE)
            for s, e in pending
            if s < cut.end and e > start
        )
        window = Window(
            self._index,
            start / SAMPLE_RATE,
            cut.end / SAMPLE_RATE,
            self._slice(start, cut.end).copy(),
            speech,
        )
        return window, cut

    def _endpoint_cut(self, pending: list[tuple[int, int]], limit: int, final: bool) -> _Cut | None:
        """Where the utterance that starts `pending` ends: after its first pause of at least
        `endpoint_s`, once heard (`_UNDECIDED` until then); None where speech runs to
        `limit` without such a pause (the window is cut as any other)."""
        assert self._endpoint is not None
        for (_, end), (next_start, _) in pairwise([*pending, (_NEVER, _NEVER)]):
            if end >= limit:
                return None
            heard = next_start if next_start < _NEVER else self._scored
            if heard - end < self._endpoint and not (final and next_start == _NEVER):
                if next_start < _NEVER:
                    continue  # a short pause inside the utterance
                return _UNDECIDED  # silence so far, not yet long enough
            middle = (end + next_start) // 2 if next_start < _NEVER else 0
            cut_end = min(end + self._pad, limit, self._end)
            return _Cut(cut_end, max(middle, cut_end))
        return None


def _pause_cut(
    speech: list[tuple[int, int]], limit: int, pad: int, max_len: int, total: int
) -> _Cut | None:
    """Choose the pause to end a window in: the longest near `limit`, else the latest.

    Args:
        speech: pending speech segments (start, end) in order; the window starts
            before the first one; an end of _NEVER means still speaking.
        limit: sample index the window must not end after.
        pad: samples of padding wanted after the last speech.
        max_len: the longest window, samples (sets the "near the limit" zone).
        total: samples received; no window ends after it.

    Returns:
        The cut, or None when speech runs past `limit` without a pause.

    Example:
        speech [(0, 100), (200, 300), (900, 1000)], limit 400, pad 20, max_len 400:
        of the pauses 100-200 and 300-900 only the second ends the window in its last
        third (after 267), so the window ends at 320 (padded) and the next may start
        at 600 (mid-pause).
    """
    best = None
    for (_, end), (next_start, _) in pairwise([*speech, (_NEVER, _NEVER)]):
        if end >= limit:
            break
        middle = (end + next_start) // 2
        cut = _Cut(min(end + pad, middle, limit, total), middle if next_start < _NEVER else 0)
        cut = cut._replace(resume=max(cut.resume, cut.end))
        near = cut.end >= limit - max_len * NEAR_LIMIT
        key = (near, next_start - end if near else 0, cut.end)
        if best is None or key >= best[0]:
            best = (key, cut)
    return None if best is None else best[1]


def _quiet_cut(audio: np.ndarray, start: int, max_len: int) -> _Cut:
    """Cut inside speech at the quietest QUIET_SPAN frames of the window's second half.

    Args:
        audio: [samples] the window's audio from `start` up to its limit.
        start: recording sample index of audio[0].
        max_len: the longest window, samples.

    Returns:
        A cut whose end and resume are the same sample (no padding inside speech).
    """
    first = max_len // 2
    frames = len(audio[first:]) // FRAME
    if frames < QUIET_SPAN:
        return _Cut(start + len(audio), start + len(audio))
    energy = np.square(audio[first : first + frames * FRAME].reshape(frames, FRAME)).mean(axis=1)
    smoothed = np.convolve(energy, np.ones(QUIET_SPAN) / QUIET_SPAN, mode="valid")
    quietest = int(np.argmin(smoothed)) + QUIET_SPAN // 2  # centre frame of the quietest span
    point = start + first + quietest * FRAME + FRAME // 2
    return _Cut(point, point)


def iter_windows(
    source: str | Path | np.ndarray,
    max_window_s: float = MAX_WINDOW_S,
    endpoint_s: float | None = None,
) -> Iterator[Window]:
    """Yield the speech windows of a recording, streaming it block by block.

    Args:
        source: path of an audio file, or a 1-D array of 16 kHz mono samples.
        max_window_s: longest window, seconds (at most MAX_WINDOW_S).
        endpoint_s: a pause this long ends an utterance's window (`SpeechWindower`).

    Returns:
        An iterator of windows in order; none for audio without speech.

    Raises:
        AudioError: the source cannot be read as audio.
    """
    return SpeechWindower(max_window_s, endpoint_s=endpoint_s).windows(source)
