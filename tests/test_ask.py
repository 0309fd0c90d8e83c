"""The ask task end to end: the CLI and the Transcriber with tiny random Qwen targets.

Every speculative configuration (a real whisper-tiny.en drafter process, a crashing one,
request/history lookup alone) must give target-only's tokens, window by window; Whisper
targets refuse `ask` with one line and exit status 2, before loading any weights.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest

from as2d.api import Options, Transcriber
from as2d.cli import main

CLIP = Path(__file__).parent / "data" / "asterisk" / "en" / "vm-newuser.wav"  # 5 s, one window
REQUEST = "Who is speaking, and what do they want?"
# (family, method, drafter fault): each compared with target-only on the same family.
CONFIGS = [
    ("qwen2_audio", "as2d", None),
    ("qwen2_audio", "pld", None),
    ("qwen2_5_omni_thinker", "as2d", "crash"),
    ("qwen2_5_omni_thinker", "pld", None),
]


def ask(directory: Path, method: str, fault: str | None = None, task: str = "ask") -> list:
    """Window results of one run (fixed budget: no cost calibration written to the cache)."""
    options = Options(
        target=str(directory),
        method=method,
        task=task,
        request=REQUEST,
        budget=4,
        drafter_fault=fault,
        threads=1,
        drafter_threads=1,
        draft_gate=False,  # the drafter gets the clip, however short: it is under test here
    )
    with Transcriber(options) as transcriber:
        run = transcriber.transcribe(CLIP)
        _ = run.stats
    return run.results


@pytest.mark.parametrize(("family", "method", "fault"), CONFIGS)
def test_ask_output_is_target_output(tiny_qwen_dirs, family, method, fault) -> None:
    expected = ask(tiny_qwen_dirs[family], "target")
    got = ask(tiny_qwen_dirs[family], method, fault)
    assert [w.token_ids for w in got] == [w.token_ids for w in expected]
    assert all(len(w.token_ids) > 0 for w in expected)
    for w in got:
        assert len(w.token_ids) == w.verify_passes + w.plain_steps + w.accepted_tokens


def test_transcribe_with_a_qwen_target(tiny_qwen_dirs) -> None:
    """transcribe/translate send the task's fixed request; pld still equals target-only."""
    directory = tiny_qwen_dirs["qwen2_audio"]
    for task in ("transcribe", "translate"):
        expected = ask(directory, "target", task=task)
        assert [w.token_ids for w in ask(directory, "pld", task=task)] == [
            w.token_ids for w in expected
        ]


def test_ask_cli_writes_the_answer(tiny_qwen_dirs, capsys, tmp_path) -> None:
    target = str(tiny_qwen_dirs["qwen2_5_omni_thinker"])
    args = ["ask", str(CLIP), REQUEST, "--target", target, "--method", "target"]
    code = main([*args, "--no-progress", "--format", "json", "-o", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    answer = json.loads((tmp_path / "vm-newuser.json").read_text())
    assert answer["target"] == target and answer["windows"][0]["token_ids"]


def test_ask_with_whisper_is_one_line_and_exit_2(capsys) -> None:
    start = time.perf_counter()
    code = main(["ask", str(CLIP), REQUEST, "--target", "whisper-base", "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "cannot follow requests" in err, err
    assert time.perf_counter() - start < 5  # refused before loading weights or a drafter


@pytest.mark.parametrize("request_text", ["", "   "])
def test_ask_needs_a_request(tiny_qwen_dirs, capsys, request_text) -> None:
    target = str(tiny_qwen_dirs["qwen2_audio"])
    code = main(["ask", str(CLIP), request_text, "--target", target, "--no-progress"])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "needs a request" in err, err


def test_unknown_target_family_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    code = main(["ask", str(CLIP), REQUEST, "--target", str(tmp_path), "--no-progress"])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "'gpt2'" in err, err


def test_auto_budget_with_a_long_chat_prompt(tiny_qwen_dirs, tmp_path, monkeypatch) -> None:
    """The cost calibration runs on the warm-up prompt, longer than its usual context here."""
    monkeypatch.setenv("AS2D_CACHE", str(tmp_path))  # the measured cost is stored there
    directory = tiny_qwen_dirs["qwen2_5_omni_thinker"]
    options = Options(target=str(directory), method="pld", task="ask", request=REQUEST, threads=1)
    with Transcriber(options) as transcriber:
        got = transcriber.transcribe(CLIP)
        _ = got.stats
    assert [w.token_ids for w in got.results] == [w.token_ids for w in ask(directory, "target")]
    assert list((tmp_path / "cost").glob("*/*/*.json"))  # cost/VERSION/MACHINE/


def test_a_chat_target_s_transcript_is_timed_by_a_whisper_aligner(tiny_qwen_dirs) -> None:
    """Approximate segments: the target's text, timed by whisper-tiny.en's cross-attention."""
    options = Options(
        target=str(tiny_qwen_dirs["qwen2_audio"]), method="target", language="en",
        timestamps="word", threads=1,
    )  # fmt: skip
    with Transcriber(options) as transcriber:
        windows = list(transcriber.transcribe(CLIP))
        with pytest.raises(ValueError, match="task 'ask' gives none to time"):
            transcriber.transcribe(CLIP, task="ask", request=REQUEST)
    for window in windows:
        assert window.segments and all(s.approximate for s in window.segments)
        assert " ".join(s.text for s in window.segments) == window.text
        words = [w for s in window.segments for w in s.words]
        assert all(window.start <= w.start <= w.end <= window.end for w in words)
        assert all(a.end <= b.start for a, b in itertools.pairwise(words))
