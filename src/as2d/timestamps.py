"""Word and segment times for a window's output, found after decoding without changing it.

Whisper's decoder attends to the encoder frames (20 ms each) where the token it reads was
said, and a few of its heads (each checkpoint's `alignment_heads`) do so sharply. As
openai-whisper's `timing.py` does: one teacher-forced pass over the committed tokens gives
those heads' cross-attention; it is normalised per token row, median-filtered along time,
averaged over heads, and dynamic time warping (DTW) finds the cheapest monotonic path of the
tokens through the frames. A word starts where the path reaches the token that opens it.
Punctuation then joins its word, over-long words are cut back at sentence and window edges,
word edges left in a silence the voice activity detector found move to the speech, and
words are grouped into sentence-like segments of at most `MAX_SEGMENT_S`. A chat target's
transcript is timed the same way by a Whisper aligner that reads it (`forced_words`).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from as2d.types import N_SAMPLES, SAMPLE_RATE, Segment, Window, Word

SAMPLES_PER_FRAME = 320  # one encoder frame: two 10 ms mel hops at 16 kHz
FRAME_S = SAMPLES_PER_FRAME / SAMPLE_RATE  # 0.02 s
MEDIAN_WIDTH = 7  # frames, as openai-whisper
_SORT_7 = (  # a sorting network for 7 values (Knuth, TAOCP 5.3.4): pairs to compare-exchange
    (0, 6), (2, 3), (4, 5), (0, 2), (1, 4), (3, 6), (0, 1), (2, 5),
    (3, 4), (1, 2), (4, 6), (2, 3), (4, 5), (1, 2), (3, 4), (5, 6),
)  # fmt: skip
PREPENDED = "\"'“¿([{-"  # punctuation that joins the word after it
# Full-width forms are meant (Chinese, Japanese punctuation).
APPENDED = "\"'.。,，!！?？:：”)]}、"  # noqa: RUF001  punctuation that joins the word before it
SENTENCE_END = ".。!！?？"  # noqa: RUF001
CLAUSE_END = ",，;；:："  # noqa: RUF001
UNSPACED_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})  # a word per character
MAX_SEGMENT_S = 7.0  # the longest segment (a subtitle cue)
PAUSE_S = 0.6  # a silence this long between words ends a segment


class AligningTarget(Protocol):
    """A target that times its words (`WhisperTarget`)."""

    tokenizer: Any  # WhisperTokenizer: `token_bytes`

    def alignment(
        self, prompt: Sequence[int], tokens: Sequence[int], frames: int, probabilities: bool
    ) -> Alignment:
        """The alignment heads' attention over a decoded window's output (`Alignment`)."""
        ...


@dataclass(frozen=True)
class Alignment:
    """What a teacher-forced pass over a window's output gives for timing its words."""

    weights: np.ndarray  # [heads, rows, frames] alignment heads' scores before the softmax
    probabilities: np.ndarray  # [tokens] the target's probability of each token (or zeros)
    first_row: int  # the row that reads the last prompt token (it predicts the first token)


def window_words(
    target: AligningTarget,
    window: Window,
    prompt: Sequence[int],
    tokens: Sequence[int],
    language: str | None,
    probabilities: bool = True,
) -> list[Word]:
    """The words of a window's output `tokens`, timed in the recording. Call it right after
    the window is decoded with `prompt` (see `WhisperTarget.alignment`). `probabilities`
    False: every word's is 0.0, and the pass is cheaper."""
    if not tokens:
        return []
    frames = min(-(-len(window.audio) // SAMPLES_PER_FRAME), N_SAMPLES // SAMPLES_PER_FRAME)
    alignment = target.alignment(prompt, tokens, frames, probabilities)
    words = split_words(tokens, target.tokenizer.token_bytes, spaced_language(language))
    spans = merge_punctuation(word_spans(alignment, words))
    bound_long_words(spans)
    speech = [(a - window.start, b - window.start) for a, b in window.speech]
    fit_to_speech(spans, speech)
    return to_words(spans, window.start, window.end)


def forced_words(
    aligner: Any, window: Window, text: str, language: str | None, probabilities: bool
) -> list[Word]:
    """Another model's `text` for `window`, timed by a Whisper `aligner` (a WhisperTarget)
    reading it as if it had said it: the same cross-attention method, on text it did not
    choose, so the times are approximate (and probabilities are the aligner's)."""
    from as2d.target import Request

    if not text.strip():
        return []
    encoded = aligner.encode(window.audio)
    prompt = aligner.prompt(encoded, Request("transcribe", language))
    tokens = aligner.tokenizer.encode(" " + text.strip())[: aligner.max_length - len(prompt) - 1]
    aligner.prefill(encoded, prompt)
    return window_words(aligner, window, prompt, tokens, language, probabilities)


@dataclass
class _Span:
    """A word while it is being timed: its text, time and its tokens' probabilities."""

    text: str
    start: float
    end: float
    probabilities: list[float] = field(default_factory=list)


def median_filter(x: np.ndarray) -> np.ndarray:
    """The median of each value and its 3 neighbours either side along the last axis, edges
    mirrored: [..., T] -> [..., T]. A sorting network of 16 compare-exchanges over 7 shifted
    views, several times faster than `np.median` over a sliding window, with the same result.

    Example:
        median_filter(np.array([0., 9., 0., 0., 5., 0., 0., 0.])) -> all zeros
    """
    pad = MEDIAN_WIDTH // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    n = x.shape[-1]
    v = [padded[..., i : i + n] for i in range(MEDIAN_WIDTH)]
    for i, j in _SORT_7:
        v[i], v[j] = np.minimum(v[i], v[j]), np.maximum(v[i], v[j])
    return v[pad]


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest path through `cost` [N, T] from (0, 0) to (N-1, T-1) that moves down a row,
    right a column, or both, at each step. Returns the rows and columns it visits, in order.

    Row by row: entering row i at column k (from above or the diagonal) and walking right to
    column j costs enter[k] + S[j] - S[k-1], S the prefix sums of the row, so the row's best
    totals are one running minimum instead of a loop over columns.

    Example:
        dtw(np.array([[0., 9., 9.], [9., 0., 0.]])) -> ([0, 1, 1], [0, 1, 2])
    """
    n, t = cost.shape
    total = np.full((n + 1, t + 1), np.inf)
    total[0, 0] = 0.0
    came_left = np.zeros((n + 1, t + 1), dtype=bool)
    came_diagonal = np.zeros((n + 1, t + 1), dtype=bool)
    for i in range(1, n + 1):
        diagonal, above = total[i - 1, :-1], total[i - 1, 1:]  # [T] each, for columns 1..T
        enter = np.minimum(diagonal, above)
        sums = np.cumsum(cost[i - 1])
        entry = enter - np.concatenate(([0.0], sums[:-1]))  # enter[k] - S[k-1]
        best = np.minimum.accumulate(entry)
        total[i, 1:] = sums + best
        came_left[i, 2:] = best[:-1] < entry[1:]
        came_diagonal[i, 1:] = diagonal <= above
    rows, cols = [], []
    i, j = n, t
    while i > 0 and j > 0:
        rows.append(i - 1)
        cols.append(j - 1)
        if came_left[i, j]:
            j -= 1
        elif came_diagonal[i, j]:
            i, j = i - 1, j - 1
        else:
            i -= 1
    return np.array(rows[::-1], dtype=int), np.array(cols[::-1], dtype=int)


def split_words(
    tokens: Sequence[int], token_bytes: Callable[[int], bytes], spaced: bool = True
) -> list[tuple[str, int]]:
    """Splits output tokens into words: (text, index of its first token).

    Tokens are first joined into pieces that decode to whole characters (a character may
    span tokens). In spaced languages a word starts at a piece that begins with a space or is
    punctuation; elsewhere every piece is a word.

    Example:
        tokens of " Hello, world" -> [(" Hello", 0), (",", 1), (" world", 2)]
    """
    pieces: list[tuple[str, int]] = []
    pending, first = b"", 0
    for index, token in enumerate(tokens):
        if not pending:
            first = index
        pending += token_bytes(token)
        try:
            text = pending.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text:  # a special token (no text) stays with the word before it
            pieces.append((text, first))
        pending = b""
    words: list[tuple[str, int]] = []
    for text, first in pieces:
        starts_word = text.startswith(" ") or text.strip() in string.punctuation
        if not spaced or starts_word or not words:
            words.append((text, first))
        else:
            words[-1] = (words[-1][0] + text, words[-1][1])
    return words


def word_spans(alignment: Alignment, words: Sequence[tuple[str, int]]) -> list[_Span]:
    """Times of `words` (`split_words` of the output) in seconds from the window's start."""
    probabilities, first_row = alignment.probabilities, alignment.first_row
    n_tokens = len(probabilities)
    attention = _softmax(alignment.weights)
    mean, std = attention.mean(axis=-2, keepdims=True), attention.std(axis=-2, keepdims=True)
    attention = median_filter((attention - mean) / np.maximum(std, 1e-10))
    matrix = attention.mean(axis=0)[first_row : first_row + n_tokens + 1]  # [tokens + 1, T]
    rows, cols = dtw(-matrix)
    jumps = np.concatenate(([True], np.diff(rows) > 0))
    row_start = cols[jumps] * FRAME_S  # [tokens + 1] when each row's stretch of the path begins
    bounds = [first for _, first in words] + [n_tokens]
    return [
        _Span(text, float(row_start[a]), float(row_start[b]), probabilities[a:b].tolist())
        for (text, _), a, b in zip(words, bounds[:-1], bounds[1:], strict=True)
    ]


def merge_punctuation(spans: list[_Span]) -> list[_Span]:
    """Opening punctuation joins the next word, closing punctuation the previous one; the
    word keeps its own time.

    Example:
        [' "', 'Hi', '!"'] -> [' "Hi!"']
    """
    merged: list[_Span] = []
    opening: _Span | None = None
    for span in spans:
        if opening is not None:
            span = _Span(opening.text + span.text.lstrip(), span.start, span.end,
                         opening.probabilities + span.probabilities)  # fmt: skip
            opening = None
        bare = span.text.strip()
        if merged and bare and all(c in APPENDED for c in bare) and not span.text[0].isspace():
            last = merged[-1]
            last.text += span.text
            last.probabilities += span.probabilities
        elif bare and all(c in PREPENDED for c in bare):
            opening = span
        else:
            merged.append(span)
    if opening is not None:  # opening punctuation at the very end: keep it as a word
        merged.append(opening)
    return merged


def bound_long_words(spans: list[_Span]) -> None:
    """Cuts words longer than twice the median word (at most 1.4 s) where DTW tends to
    stretch them over silence: the first word of the window or of a sentence starts later,
    the last word of the window or of a sentence ends earlier."""
    durations = [s.end - s.start for s in spans if s.end > s.start]
    if not durations:
        return
    longest = 2 * min(0.7, float(np.median(durations)))
    for i, span in enumerate(spans):
        if span.end - span.start <= longest:
            continue
        if i == 0 or _ends_sentence(spans[i - 1].text):
            span.start = span.end - longest
        elif i == len(spans) - 1 or _ends_sentence(span.text):
            span.end = span.start + longest


def fit_to_speech(spans: list[_Span], speech: Sequence[tuple[float, float]]) -> None:
    """Moves a word edge that DTW left in a silence the voice activity detector found to that
    silence's edge, where the word keeps some length: a start to where speech resumes, an end
    to where it stopped. `speech`: (start, end) in the spans' time, in order; none: no change.

    Example:
        speech [(0, 1), (2, 3)]: a word at 1.5-2.4 -> 2.0-2.4; a word at 0.5-1.6 -> 0.5-1.0
    """
    if not speech:
        return
    starts = np.array([a for a, _ in speech])
    ends = np.array([b for _, b in speech])
    for span in spans:
        i = int(np.searchsorted(ends, span.start, side="right"))  # first speech ending after
        if i < len(starts) and span.start < starts[i] < span.end:
            span.start = float(starts[i])
        j = int(np.searchsorted(starts, span.end, side="left")) - 1  # last speech starting before
        if j >= 0 and span.start < ends[j] < span.end:
            span.end = float(ends[j])


def to_words(spans: Sequence[_Span], offset: float, limit: float) -> list[Word]:
    """Words at times in the recording: `offset` added, within [offset, limit], rounded to ms."""

    def at(t: float) -> float:
        return round(min(max(offset + t, offset), limit), 3)

    return [
        Word(s.text, at(s.start), at(s.end), round(float(np.mean(s.probabilities or [0.0])), 4))
        for s in spans
    ]


def group_segments(
    words: Sequence[Word], max_s: float = MAX_SEGMENT_S, pause_s: float = PAUSE_S
) -> list[list[Word]]:
    """Sentence-like groups: a segment ends after a sentence's last word, before a pause of
    `pause_s`, and before it would grow past `max_s` (then after its last clause, if one
    ends a third of the way in or later).

    Example:
        " Hi. How are you?" -> [[" Hi."], [" How", " are", " you?"]]
    """
    segments: list[list[Word]] = []
    current: list[Word] = []
    for word in words:
        paused = bool(current) and word.start - current[-1].end >= pause_s
        if paused or (current and word.end - current[0].start > max_s):
            segments.append(_cut(current, paused))
        current.append(word)
        if _ends_sentence(word.word):
            segments.append(current)
            current = []
    if current:
        segments.append(current)
    return [s for s in segments if s]


def _cut(current: list[Word], at_pause: bool) -> list[Word]:
    """Takes the segment to close from the front of `current`, leaving the rest in it: all of
    it at a pause, else up to its last clause end that keeps a third of it or more."""
    cut = len(current)
    if not at_pause:
        span = current[-1].end - current[0].start
        clauses = [
            i + 1
            for i, w in enumerate(current[:-1])
            if w.word.rstrip()[-1:] in CLAUSE_END and w.end - current[0].start >= span / 3
        ]
        cut = clauses[-1] if clauses else cut
    closed = current[:cut]
    del current[:cut]
    return closed


def segments_of(
    words: Sequence[Word], with_words: bool, approximate: bool = False
) -> list[Segment]:
    """`group_segments` as Segments (a word holds its own leading space, if any); their words
    kept only `with_words`."""
    return [
        Segment(
            group[0].start,
            group[-1].end,
            "".join(w.word for w in group).strip(),
            list(group) if with_words else [],
            approximate,
        )
        for group in group_segments(words)
    ]


def spaced_language(language: str | None) -> bool:
    """Whether words are separated by spaces (not Chinese, Japanese, Thai, Lao, Burmese)."""
    return language not in UNSPACED_LANGUAGES


def _ends_sentence(text: str) -> bool:
    bare = text.rstrip().rstrip("\"'”)]}")
    return bool(bare) and bare[-1] in SENTENCE_END


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
