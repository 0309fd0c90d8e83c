"""Summary figures from hand-made timings: speed-up, slower windows, identity, oracle share."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from as2d.eval.bench import BenchRun, RecordingRun
from as2d.eval.catalog import Config
from as2d.eval.datasets import Recording
from as2d.eval.report import render_report
from as2d.eval.summary import RunInfo, by_runtime, measured, summarise, summary
from as2d.types import RunStats, WindowResult

T1, T2 = Config("target", threads=1), Config("target", threads=2)
AUTO, K4 = Config("as2d", "whisper-tiny.en", None), Config("as2d", "whisper-tiny.en", 4)
PLD = Config("pld", budget=4)
REC = Recording(Path("a.flac"), "one two", "en")


def run(
    config: Config,
    seconds: list[float],
    tokens: list[list[int]],
    threads: int = 1,
    repeat: int = 0,
    recording: Recording = REC,
) -> RecordingRun:
    """`recording` decoded by `config`: window i (i to i + 1 s) took seconds[i] to decode."""
    windows = [
        WindowResult(i, i, i + 1, "one two" if i == 0 else "", t, 0.0, s, 2, 0, 3)
        for i, (s, t) in enumerate(zip(seconds, tokens, strict=True))
    ]
    stats = RunStats(sum(seconds), 2.0, sum(map(len, tokens)), 0.0, 0.0)
    return RecordingRun(config, recording, repeat, 0, threads, windows, stats, 0.0)


def bench() -> BenchRun:
    same = [[1, 2, 3, 4], [5, 6, 7, 8]]  # 8 tokens over 2 windows
    b = BenchRun([T1, T2, AUTO, K4, PLD], [REC], audio_s=2.0)
    b.runs = [
        run(T1, [2.0, 2.0], same),
        run(T2, [1.0, 3.0], same, threads=2),  # 8 tokens / 4 s too, tie: first wins
        run(AUTO, [1.0, 1.5], same),
        run(K4, [0.5, 2.5], same),
        run(PLD, [2.0, 1.0], [[1, 2, 3, 4], [5, 6, 7, 9]], threads=2),  # differs on window 1
    ]
    return b


def test_figures_against_the_faster_target_only():
    b = bench()
    m = measured(b)
    assert m.baseline == T1
    rows = {r.name: r for r in summarise(b, m)}
    assert rows["target 1t"].pooled_tokens_per_s == pytest.approx(2.0)
    assert rows["as2d whisper-tiny.en k=auto"].speedup == pytest.approx(4.0 / 2.5)
    assert rows["as2d whisper-tiny.en k=4"].frac_windows_slower == pytest.approx(0.5)
    assert rows["target 2t"].frac_windows_slower == pytest.approx(0.5)
    assert rows["as2d whisper-tiny.en k=auto"].mean_accepted == pytest.approx(1.5)
    assert rows["as2d whisper-tiny.en k=auto"].wer == 0.0
    assert [r.identical for r in rows.values()] == [True, True, True, True, False]


def test_summary_keys_and_oracle():
    b = bench()
    content = summary(b, by_runtime(b), RunInfo("whisper-base", "set", "as2d bench", 1))
    assert {"machine", "target", "audio_s", "windows", "configs", "oracle"} <= content.keys()
    assert {"pooled_tokens_per_s", "speedup"} <= content["oracle"].keys()
    names = ["method", "drafter", "budget", "pooled_tokens_per_s", "speedup"]
    names += ["frac_windows_slower", "identical", "wer", "mean_accepted"]
    assert all(set(names) <= c.keys() for c in content["configs"])
    # oracle over target 1t, auto, k=4 (not pld, not target 2t): 0.5 + 1.5 s for 8 tokens
    assert content["oracle"]["pooled_tokens_per_s"] == pytest.approx(8 / 2.0)
    assert content["oracle"]["speedup"] == pytest.approx(2.0)
    assert content["as2d_auto_frac_of_oracle"] == pytest.approx((8 / 2.5) / 4.0)
    assert "held_out_tokens_per_s" not in content["oracle"]  # one repeat: nothing held out
    assert "subsets" not in content  # the recording belongs to none


def test_held_out_oracle_in_the_summary_with_repeats():
    same = [[1, 2, 3, 4], [5, 6, 7, 8]]
    b = BenchRun([T1, AUTO, K4], [REC], audio_s=2.0)
    b.runs = [
        run(T1, [2.0, 2.0], same),
        run(AUTO, [1.0, 1.0], same),
        run(K4, [0.5, 2.0], same),
        run(T1, [2.0, 2.0], same, repeat=1),
        run(AUTO, [1.0, 1.0], same, repeat=1),
        run(K4, [1.5, 2.0], same, repeat=1),  # k=4 was lucky on window 0 of repeat 0
    ]
    content = summary(b, by_runtime(b), RunInfo("whisper-base", "set", "as2d bench", 2))
    oracle = content["oracle"]
    # hindsight on medians: k=4 on window 0 (median 1.0, a tie with auto: first wins), auto on 1
    assert oracle["pooled_tokens_per_s"] == pytest.approx(8 / 2.0)
    # held out: window 0 charged 1.0 (auto) with repeat 0 held out (picked on repeat 1:
    # auto 1.0 < k=4 1.5) and 1.5 (k=4) with repeat 1 held out (picked on repeat 0, 0.5);
    # window 1: auto both times (1.0)
    assert oracle["held_out_tokens_per_s"] == pytest.approx(8 / 2.25)
    assert oracle["as2d_auto_frac_of_held_out"] == pytest.approx((8 / 2.0) / (8 / 2.25))
    assert oracle["as2d_auto_frac_of_own_best"] == 1.0  # auto took the same time in both


def test_the_oracles_luck_is_auto_against_the_best_of_its_own_repeats():
    same = [[1, 2, 3, 4], [5, 6, 7, 8]]
    b = BenchRun([T1, AUTO], [REC], audio_s=2.0)
    b.runs = [
        run(T1, [2.0, 2.0], same),
        run(AUTO, [1.0, 1.0], same),
        run(T1, [2.0, 2.0], same, repeat=1),
        run(AUTO, [2.0, 1.0], same, repeat=1),  # a slow repeat on window 0
    ]
    content = summary(b, by_runtime(b), RunInfo("whisper-base", "set", "as2d bench", 2))
    # mean times 1.5 + 1.0 -> 8 / 2.5 tokens/s; best of the repeats 1.0 + 1.0 -> 8 / 2.0
    assert content["oracle"]["as2d_auto_frac_of_own_best"] == pytest.approx((8 / 2.5) / (8 / 2.0))


def test_each_subset_is_reported_against_the_whole_sets_baseline():
    short = Recording(Path("s.flac"), None, "en", "short")
    varied = Recording(Path("v.flac"), None, "fr", "varied")
    b = BenchRun([T1, AUTO], [short, varied], audio_s=3.0)
    b.runs = [
        run(T1, [1.0], [[1, 2]], recording=short),
        run(AUTO, [2.0], [[1, 2]], recording=short),  # slower on the short one
        run(T1, [2.0, 2.0], [[1, 2, 3, 4], [5, 6, 7, 8]], recording=varied),
        run(AUTO, [1.0, 3.0], [[1, 2, 3, 4], [5, 6, 7, 8]], recording=varied),
    ]
    m = measured(b)
    rows = summarise(b, m)
    content = summary(b, by_runtime(b), RunInfo("whisper-base", "hard", "as2d bench hard", 1))
    whole = {r.name: r for r in rows}["as2d whisper-tiny.en k=auto"]
    assert whole.speedup == pytest.approx((10 / 6) / (10 / 5))  # the whole set, as before
    assert whole.frac_windows_slower == pytest.approx(2 / 3)
    subsets = content["subsets"]
    assert list(subsets) == ["short", "varied"]
    assert (subsets["short"]["windows"], subsets["varied"]["windows"]) == (1, 2)
    assert (subsets["short"]["audio_s"], subsets["varied"]["audio_s"]) == (1.0, 2.0)
    auto = {name: part["configs"][1] for name, part in subsets.items()}
    assert auto["short"]["speedup"] == pytest.approx(0.5)
    assert auto["short"]["frac_windows_slower"] == 1.0
    assert auto["varied"]["speedup"] == pytest.approx(1.0)
    assert auto["varied"]["frac_windows_slower"] == 0.5
    assert auto["varied"]["tokens"] == 8 and auto["varied"]["identical"]
    report = render_report(content, rows, b)
    assert "## Per subset" in report
    assert "| configuration | short (0.0 min, 1 windows) | varied (0.0 min, 2 windows) |" in report
    assert (
        "| as2d whisper-tiny.en k=auto | 0.50x / 100.0 %; > 3 %: 100.0 % | "
        "1.00x / 50.0 %; > 3 %: 50.0 % |" in report
    )
    assert "| noise floor (> 3 %, target-only against itself) | - | - |" in report


def test_windows_decoded_as_target_only_are_counted_apart_from_the_slower_share():
    def alone(index: int, seconds: float) -> WindowResult:  # no candidate, every step alone
        return WindowResult(index, index, index + 1, "", [1, 2], 0.0, seconds, 0, 2, alone=2)

    def auto(repeat: int, first: WindowResult) -> RecordingRun:
        windows = [first, alone(1, 1.1), WindowResult(2, 2, 3, "", [5, 6], 0.0, 0.5, 1, 0, 1)]
        return RecordingRun(AUTO, REC, repeat, 0, 1, windows, RunStats(1, 3, 6, 0, 0), 0.0)

    same = [[1, 2], [1, 2], [5, 6]]
    b = BenchRun([T1, AUTO], [REC], audio_s=3.0)
    b.runs = [
        run(T1, [1.0, 1.0, 1.0], same),
        run(T1, [1.0, 1.0, 1.0], same, repeat=1),
        auto(0, alone(0, 1.2)),  # window 0: alone in one repeat, a verify pass in the other
        auto(1, WindowResult(0, 0, 1, "", [1, 2], 0.0, 1.2, 1, 1, 1)),
    ]
    m = measured(b)
    rows = {r.name: r for r in summarise(b, m)}
    a = rows["as2d whisper-tiny.en k=auto"]
    assert a.frac_windows_slower == pytest.approx(2 / 3)  # windows 0 and 1
    assert a.frac_windows_alone == pytest.approx(1 / 3)  # window 1 only, in every repeat
    assert a.frac_others_slower == pytest.approx(1 / 2)  # window 0 of windows 0 and 2
    assert rows["target 1t"].frac_windows_alone == 0.0  # target-only has nothing apart
    content = summary(b, by_runtime(b), RunInfo("whisper-base", "set", "bench", 2))
    report = render_report(content, list(rows.values()), b)
    assert "| 66.7 % (33 % alone; 50.0 % of the rest); > 3 %: 66.7 % |" in report


def test_slower_by_more_than_3_percent_beside_the_noise_floor():
    """A window 2 % slower is slower, not slower by more than 3 %; the noise floor is
    target-only's earlier repeats against its later ones (here window 1: 1.10 against 1.00)."""
    same = [[1, 2], [3, 4], [5, 6]]
    b = BenchRun([T1, AUTO], [REC], audio_s=3.0)
    b.runs = [
        run(T1, [1.0, 1.1, 1.0], same),
        run(T1, [1.0, 1.0, 1.0], same, repeat=1),
        run(AUTO, [1.02, 1.2, 0.5], same),
        run(AUTO, [1.02, 1.2, 0.5], same, repeat=1),
    ]
    m = measured(b)
    rows = {r.name: r for r in summarise(b, m)}
    a = rows["as2d whisper-tiny.en k=auto"]
    assert a.frac_windows_slower == pytest.approx(2 / 3)  # medians 1.0 / 1.05 / 1.0
    assert a.frac_slower_3pct == pytest.approx(1 / 3)  # only window 1: 1.2 > 1.03 x 1.05
    content = summary(b, by_runtime(b), RunInfo("whisper-base", "set", "bench", 2))
    assert content["noise_floor_slower_3pct"] == pytest.approx(1 / 3)
    report = render_report(content, list(rows.values()), b)
    assert "against itself (its earlier repeats against its later ones): 33.3 %." in report


def side_by_side(config: Config, runtime: str) -> Config:
    """`config` on `runtime`, named with it (a bench comparing runtimes)."""
    return replace(config, runtime=runtime, show_runtime=True)


def test_runtimes_side_by_side_are_figured_each_against_its_own_target_only():
    """Torch and MNN on the same windows: MNN's target rounds to other tokens on window 1, so
    its as2d is identical to MNN's target-only (not torch's); every speed-up is over the
    faster target-only of its own runtime, and the oracle is per runtime."""
    torch_t1, torch_t2, torch_auto = (side_by_side(c, "torch") for c in (T1, T2, AUTO))
    mnn_t1, mnn_t2, mnn_auto = (side_by_side(c, "mnn") for c in (T1, T2, AUTO))
    same, other = [[1, 2, 3, 4], [5, 6, 7, 8]], [[1, 2, 3, 4], [5, 6, 9]]  # 8 and 7 tokens
    b = BenchRun([torch_t1, torch_t2, torch_auto, mnn_t1, mnn_t2, mnn_auto], [REC], audio_s=2.0)
    b.runs = [
        run(torch_t1, [2.0, 2.0], same),  # 2 tokens/s: torch's baseline (a tie, first wins)
        run(torch_t2, [1.0, 3.0], same, threads=2),
        run(torch_auto, [1.0, 1.0], same),  # 4 tokens/s
        run(mnn_t1, [1.0, 1.0], other),  # 3.5 tokens/s
        run(mnn_t2, [0.5, 0.5], other, threads=2),  # 7 tokens/s: MNN's baseline
        run(mnn_auto, [0.5, 0.25], other),  # 7 / 0.75 tokens/s
    ]
    parts = by_runtime(b)
    content = summary(b, parts, RunInfo("whisper-base", "set", "as2d bench", 1))
    assert content["baseline"] == "target 1t torch"  # the first runtime's
    assert content["baselines"] == {"torch": "target 1t torch", "mnn": "target 2t mnn"}
    rows = {c["name"]: c for c in content["configs"]}
    assert rows["as2d whisper-tiny.en k=auto torch"]["speedup"] == pytest.approx(2.0)
    assert rows["as2d whisper-tiny.en k=auto mnn"]["speedup"] == pytest.approx((7 / 0.75) / 7)
    assert rows["target 1t mnn"]["speedup"] == pytest.approx(0.5)
    assert all(c["identical"] for c in content["configs"])  # MNN against MNN's target-only
    assert [c["runtime"] for c in content["configs"]] == ["torch"] * 3 + ["mnn"] * 3
    runtimes = content["runtimes"]
    assert runtimes["mnn"]["pooled_tokens_per_s"] == pytest.approx(7.0)
    assert runtimes["mnn"]["frac_windows_same_tokens"] == 0.5  # window 1 differs from torch's
    assert runtimes["torch"]["frac_windows_same_tokens"] == 1.0
    # each oracle over its own runtime: MNN's picks its target-only (a tie) and auto, 0.75 s
    assert runtimes["mnn"]["oracle"]["candidates"] == ["target 2t mnn", mnn_auto.name]
    assert runtimes["mnn"]["oracle"]["pooled_tokens_per_s"] == pytest.approx(7 / 0.75)
    assert runtimes["mnn"]["as2d_auto_frac_of_oracle"] == pytest.approx(1.0)
    assert content["oracle"] == runtimes["torch"]["oracle"]
    report = render_report(content, [r for part in parts for r in part.rows], b)
    assert "## Runtimes side by side" in report
    assert (
        "| mnn | target 2t mnn | 7.0 | 3.50x | 50.0 % | as2d whisper-tiny.en k=auto mnn | "
        "9.3 | 1.33x | 4.67x |" in report
    )
    assert "Baselines: `target 1t torch`, `target 2t mnn`" in report
