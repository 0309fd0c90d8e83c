"""Word and segment timestamps: the pure parts on small arrays, then the bundled whisper-base
against real recordings whose word times were measured by others (tests/data/alignment:
praatio's hand-made TextGrids, pocketsphinx's forced alignments of LibriVox clips)."""

from __future__ import annotations

import difflib
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from as2d.api import Options, Transcriber
from as2d.audio.load import load_audio
from as2d.cli import main
from as2d.timestamps import (
    _Span,
    bound_long_words,
    dtw,
    fit_to_speech,
    group_segments,
    median_filter,
    merge_punctuation,
    split_words,
    to_words,
)
from as2d.types import SAMPLE_RATE, Word

ALIGNMENT = Path(__file__).parent / "data" / "alignment"
PAUSE_S = 1.5  # silence between recordings joined into one file


def _brute_force_dtw_cost(cost: np.ndarray) -> float:
    n, t = cost.shape
    total = np.full((n + 1, t + 1), np.inf)
    total[0, 0] = 0
    for i, j in itertools.product(range(1, n + 1), range(1, t + 1)):
        before = min(total[i - 1, j - 1], total[i - 1, j], total[i, j - 1])
        total[i, j] = cost[i - 1, j - 1] + before
    return float(total[n, t])


def test_dtw_finds_the_cheapest_monotonic_path() -> None:
    rows, cols = dtw(np.array([[0.0, 9.0, 9.0], [9.0, 0.0, 0.0]]))
    assert rows.tolist() == [0, 1, 1] and cols.tolist() == [0, 1, 2]
    rng = np.random.default_rng(0)
    for n, t in [(1, 5), (5, 1), (4, 9), (7, 30)]:
        cost = rng.normal(size=(n, t))
        rows, cols = dtw(cost)
        assert (rows[0], cols[0], rows[-1], cols[-1]) == (0, 0, n - 1, t - 1)
        steps = np.stack([np.diff(rows), np.diff(cols)])
        assert set(map(tuple, steps.T)) <= {(0, 1), (1, 0), (1, 1)}  # one step at a time
        assert cost[rows, cols].sum() == pytest.approx(_brute_force_dtw_cost(cost))


def test_median_filter_equals_a_sliding_median_with_mirrored_edges() -> None:
    x = np.random.default_rng(1).normal(size=(2, 3, 50))
    padded = np.pad(x, [(0, 0), (0, 0), (3, 3)], mode="reflect")
    expected = np.median(sliding_window_view(padded, 7, axis=-1), axis=-1)
    assert np.array_equal(median_filter(x), expected)
    assert np.array_equal(median_filter(x[..., :2]), x[..., :2])  # too short to filter


def test_words_split_at_spaces_and_punctuation_and_keep_whole_characters(
    english_tokenizer,
) -> None:
    tokenizer = english_tokenizer
    text = " Hello, naïve world! 日本"
    tokens = tokenizer.encode(text)
    words = split_words(tokens, tokenizer.token_bytes)
    assert [w for w, _ in words] == [" Hello", ",", " naïve", " world", "!", " 日本"]
    assert "".join(tokenizer.decode(tokens[a:]) for _, a in words[-1:]) == " 日本"
    firsts = [first for _, first in words]
    assert firsts == sorted(firsts) and firsts[0] == 0
    unspaced = split_words(tokenizer.encode("日本語"), tokenizer.token_bytes, spaced=False)
    assert [w for w, _ in unspaced] == ["日", "本", "語"]


def test_punctuation_joins_its_word_and_the_word_keeps_its_time() -> None:
    spans = [
        _Span(' "', 0.0, 0.1, [0.5]),
        _Span("Hi", 0.1, 0.4, [1.0]),
        _Span('!"', 0.4, 0.5, [0.8]),
        _Span(" you", 0.5, 0.9, [0.9]),
    ]
    merged = merge_punctuation(spans)
    assert [(s.text, s.start, s.end) for s in merged] == [(' "Hi!"', 0.1, 0.4), (" you", 0.5, 0.9)]
    assert merged[0].probabilities == [0.5, 1.0, 0.8]


def test_long_words_at_window_and_sentence_edges_are_cut_back() -> None:
    spans = [_Span(w, a, b) for w, a, b in [
        (" Well", 0.0, 2.0), (" it", 2.0, 2.2), (" is.", 2.2, 2.5),
        (" Then", 2.5, 5.0), (" we", 5.0, 5.3), (" go", 5.3, 8.0),
    ]]  # fmt: skip
    bound_long_words(spans)
    longest = 2 * 0.7  # twice the median word (1.15 s), which counts as at most 0.7 s
    assert spans[0].start == pytest.approx(2.0 - longest)  # first word: starts later
    assert spans[3].start == pytest.approx(5.0 - longest)  # after a sentence: starts later
    assert spans[5].end == pytest.approx(5.3 + longest)  # last word: ends earlier
    assert (spans[1].start, spans[1].end) == (2.0, 2.2)


def test_word_edges_left_in_a_silence_move_to_the_speech() -> None:
    spans = [_Span(" a", 0.2, 1.6), _Span(" b", 1.6, 2.4), _Span(" c", 2.4, 2.9)]
    fit_to_speech(spans, [(0.0, 1.0), (2.0, 3.0)])
    assert [(s.start, s.end) for s in spans] == [(0.2, 1.0), (2.0, 2.4), (2.4, 2.9)]
    unknown = [_Span(" a", 1.2, 1.6)]
    fit_to_speech(unknown, [])
    assert (unknown[0].start, unknown[0].end) == (1.2, 1.6)


def test_words_are_placed_in_the_recording_within_their_window() -> None:
    words = to_words([_Span(" a", -0.1, 0.5, [1.0]), _Span(" b", 0.5, 9.0, [])], 10.0, 15.0)
    assert [(w.start, w.end) for w in words] == [(10.0, 10.5), (10.5, 15.0)]
    assert words[1].probability == 0.0


def _words(spec: str) -> list[Word]:
    """' Hi.@0-1 there@1-2' -> Words."""
    out = []
    for item in spec.split("|"):
        text, times = item.rsplit("@", 1)
        start, end = map(float, times.split("-"))
        out.append(Word(text, start, end, 1.0))
    return out


def test_segments_end_at_sentences_pauses_and_their_longest() -> None:
    def texts(words: list[Word], **kw: float) -> list[str]:
        return ["".join(w.word for w in seg).strip() for seg in group_segments(words, **kw)]

    assert texts(_words(" Hi.@0-1| How@1-2| are@2-3| you?@3-4")) == ["Hi.", "How are you?"]
    assert texts(_words(" one@0-1| two@3-4")) == ["one", "two"]  # a 2 s pause
    long = _words(" a@0-2| b,@2-4| c@4-6| d@6-8| e@8-10")
    assert texts(long, max_s=7.0) == ["a b,", "c d e"]  # after the clause, not mid-way
    for segment in group_segments(long, max_s=7.0):
        assert segment[-1].end - segment[0].start <= 7.0
    assert texts(_words(" a,@0-0.5| b@0.5-4| c@4-8"), max_s=7.0) == ["a, b", "c"]


# The bundled target against real references.


def _normal(word: str) -> str:
    return re.sub(r"[^a-z0-9']", "", word.lower())


def _errors(reference: list[list], words: list[Word], offset: float = 0.0) -> tuple[list, int]:
    """|start| and |end| differences of the words both sides agree on, and how many."""
    matcher = difflib.SequenceMatcher(
        a=[r[0] for r in reference], b=[_normal(w.word) for w in words], autojunk=False
    )
    errors = []
    for a, b, n in matcher.get_matching_blocks():
        for (_, start, end), word in zip(reference[a : a + n], words[b : b + n], strict=True):
            errors += [abs(start + offset - word.start), abs(end + offset - word.end)]
    return errors, len(errors) // 2


@pytest.fixture(scope="module")
def references() -> dict[str, list[list]]:
    return json.loads((ALIGNMENT / "words.json").read_text())


@pytest.fixture(scope="module")
def joined_audio(references) -> tuple[np.ndarray, list[float]]:
    """Every recording in one, each followed by a pause; and where each starts."""
    pause = np.zeros(int(PAUSE_S * SAMPLE_RATE), dtype=np.float32)
    parts = [x for n in references for x in (load_audio(ALIGNMENT / f"{n}.flac"), pause)]
    starts = np.cumsum([0] + [len(p) for p in parts])[0::2][:-1] / SAMPLE_RATE
    return np.concatenate(parts), starts.tolist()


@pytest.fixture(scope="module")
def timed(references, joined_audio):
    """Word times of each recording alone, and of all of them joined (with their offsets)."""
    with Transcriber(Options(method="target", language="en", timestamps="word")) as transcriber:
        alone = {
            name: list(transcriber.transcribe(ALIGNMENT / f"{name}.flac")) for name in references
        }
        joined = list(transcriber.transcribe(joined_audio[0]))
    return alone, joined, joined_audio[1]


def test_word_times_are_within_a_tenth_and_a_half_of_real_references(references, timed) -> None:
    alone, _, _ = timed
    errors, matched = [], 0
    for name, reference in references.items():
        words = [w for window in alone[name] for s in window.segments for w in s.words]
        errs, n = _errors(reference, words)
        errors += errs
        matched += n
    total = sum(map(len, references.values()))
    assert matched >= 0.9 * total  # the target heard the words the references time
    assert np.mean(errors) <= 0.15 and max(errors) <= 0.5, (np.mean(errors), max(errors))


def test_in_one_file_segments_start_where_their_first_word_was_said(references, timed) -> None:
    _, joined, offsets = timed
    segments = [s for window in joined for s in window.segments]
    words = [w for s in segments for w in s.words]
    assert all(a.end <= b.start for a, b in itertools.pairwise(words))  # monotonic
    assert all(a.start <= a.end for a in words)
    said = [
        (_normal(word), start + offset)
        for reference, offset in zip(references.values(), offsets, strict=True)
        for word, start, _ in reference
    ]
    matcher = difflib.SequenceMatcher(
        a=[w for w, _ in said], b=[_normal(w.word) for w in words], autojunk=False
    )
    said_at = {b + k: said[a + k][1] for a, b, n in matcher.get_matching_blocks() for k in range(n)}
    checked = 0
    first = 0
    for segment in segments:
        if first in said_at:
            assert abs(segment.start - said_at[first]) <= 0.5, segment
            checked += 1
        first += len(segment.words)
    assert checked >= len(references)  # at least a segment per recording was checked
    errors = []
    for window in joined:
        for segment in window.segments:
            assert window.start <= segment.start <= segment.end <= window.end
            assert segment.text == "".join(w.word for w in segment.words).strip()
        assert " ".join(s.text for s in window.segments) == window.text
    for i, w in enumerate(words):
        if i in said_at:
            errors.append(abs(w.start - said_at[i]))
    assert np.mean(errors) <= 0.15


@pytest.fixture(scope="module")
def untimed(joined_audio) -> list[list[int]]:
    with Transcriber(Options(method="target", language="en")) as transcriber:
        return [w.token_ids for w in transcriber.transcribe(joined_audio[0])]


@pytest.mark.parametrize("method", ["target", "as2d", "pld", "sd"])
def test_timing_words_changes_no_token_of_any_method(method, joined_audio, untimed) -> None:
    options = Options(method=method, language="en", timestamps="word")
    with Transcriber(options) as transcriber:
        windows = list(transcriber.transcribe(joined_audio[0]))
    assert [w.token_ids for w in windows] == untimed
    assert all(w.segments and w.align_s > 0 for w in windows)


def _srt_cues(srt: str) -> list[tuple[float, float, str]]:
    """(start, end, text) of each cue of an srt file."""

    def seconds(stamp: str) -> float:
        h, m, s = stamp.replace(",", ".").split(":")
        return 3600 * int(h) + 60 * int(m) + float(s)

    cues = []
    for block in srt.strip().split("\n\n"):
        _, times, text = block.split("\n", 2)
        start, end = times.split(" --> ")
        cues.append((seconds(start), seconds(end), text))
    return cues


def test_subtitles_of_the_long_recording_are_short_cues_that_follow_the_speech(capsys) -> None:
    """The bundled 111 s recording (five prompts, 0.8 s of silence between them): every cue
    lasts at most 7 s, the cues are in order and do not overlap, they hold the whole text,
    and they are where the speech is: mostly loud, and none starts or ends in a silence."""
    long = Path(__file__).parent / "data" / "long_en.flac"
    code = main(["transcribe", str(long), "--format", "srt", "--method", "target", "--no-progress"])
    srt = capsys.readouterr().out
    assert code == 0
    code = main(["transcribe", str(long), "--method", "target", "--no-progress"])
    text = capsys.readouterr().out.strip()
    cues = _srt_cues(srt)
    assert " ".join(t for _, _, t in cues) == text and len(cues) >= 15
    assert all(0 < end - start <= 7.0 for start, end, _ in cues)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(cues))
    audio = load_audio(long)
    frames = audio[: len(audio) // 1600 * 1600].reshape(-1, 1600)  # 0.1 s frames
    silent = np.sqrt((frames**2).mean(axis=1)) < 1e-3  # the digital silence between prompts
    for start, end, _ in cues:
        first, last = int(start * 10), int(np.ceil(end * 10))
        assert silent[first:last].mean() < 0.5, (start, end)  # mostly speech
        # speech within 0.3 s of either edge: no cue starts or ends in a silence
        assert not silent[first : first + 3].all() and not silent[last - 3 : last].all()
