"""`as2d bench` end to end on two short clips, and its one-line errors for bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from as2d.api import Options
from as2d.cli import build_parser, main
from as2d.engine.policy import FixedBudget
from as2d.eval.bench import BenchSettings, _load, run_bench
from as2d.eval.catalog import Config, catalog
from as2d.eval.commands import dataset_configs
from as2d.eval.datasets import load_dataset
from as2d.eval.report import write_outputs
from as2d.eval.summary import RunInfo
from as2d.models.mnn_whisper import mnn_available
from as2d.models.whisper import WhisperTarget
from as2d.models.whisper_net import WhisperNet

ASTERISK = Path(__file__).parents[1] / "data" / "asterisk" / "en"
CLIPS = {  # name: reference (tests/data/asterisk/en/transcripts.txt)
    "dir-instr": "If this is the person you are looking for press 1 now, "
    "otherwise please press star now.",
    "vm-newuser": "Welcome to Comedian Mail. "
    "First, I will guide you through a short setup process.",
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A manifest of two asterisk clips with their references, plus one unused clip."""
    root = tmp_path_factory.mktemp("set")
    rows = []
    for name, text in [*CLIPS.items(), ("demo-nogo", None)]:
        shutil.copy(ASTERISK / f"{name}.wav", root / f"{name}.wav")
        rows.append(json.dumps({"audio": f"{name}.wav", "text": text, "language": "en"}))
    (root / "manifest.jsonl").write_text("\n".join(rows) + "\n")
    return root / "manifest.jsonl"


def test_outputs_on_two_clips_with_a_tiny_random_target(
    dataset, tmp_path, capsys, tiny_random_whisper, english_tokenizer
):
    """Mechanics in seconds: target-only and pld (k=4) share one tiny random-weight target."""
    target = WhisperTarget(WhisperNet.from_transformers(tiny_random_whisper), english_tokenizer)
    configs = [Config("target", threads=1), Config("pld", budget=4, threads=1)]
    settings = BenchSettings(Options(target="tiny-random", language="en"), 2)
    recordings = load_dataset(str(dataset), tmp_path)[:2]
    bench = run_bench(configs, recordings, settings, {"torch": target})
    counted = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    assert [line.split()[0] for line in counted] == [f"[{i}/8]" for i in range(1, 9)]
    assert [(r.recording.name, r.repeat) for r in bench.runs[:4]] == [
        ("dir-instr", 0),
        ("dir-instr", 0),
        ("vm-newuser", 0),
        ("vm-newuser", 0),
    ]
    assert [r.config for r in bench.runs[:4]] == [*configs, *configs[::-1]]  # rotating order
    out = tmp_path / "out"
    info = RunInfo("tiny-random", str(dataset), "as2d bench (test)", repeats=2)
    summary = write_outputs(bench, out, info)
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["windows"] == 2 and summary["baseline"] == "target 1t"
    assert summary["oracle"] is None and summary["as2d_auto_frac_of_oracle"] is None
    assert [c["identical"] for c in summary["configs"]] == [True, True]
    assert all(c["pooled_tokens_per_s"] > 0 and c["wer"] > 0.5 for c in summary["configs"])
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 2  # windows x configurations x repeats
    assert len({r["tokens_hash"] for r in rows if r["recording"] == "dir-instr"}) == 1
    assert "| pld k=4 |" in (out / "report.md").read_text()
    for picture in ("speedup.png", "window_speedup_cdf.png"):
        assert (out / picture).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_bench_command_with_the_real_tiny_model(dataset, tmp_path, capsys):
    """The command end to end: real tiny.en target, target-only at 1 and 2 threads, pld, and
    the CTranslate2 reference; word timings measured apart from decoding."""
    out = tmp_path / "out"
    args = ["bench", str(dataset), "--target", "whisper-tiny.en", "--methods", "target,pld"]
    args += ["--budgets", "4", "--limit", "1", "--external", "--no-progress"]
    args += ["--timestamps", "word"]
    code = main([*args, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "| pld k=4 |" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["target"] == "whisper-tiny.en"
    assert [c["name"] for c in summary["configs"]] == ["target 1t", "target 2t", "pld k=4"]
    assert all(c["identical"] and c["wer"] < 0.2 for c in summary["configs"])
    assert summary["command"] in (out / "report.md").read_text()
    external = summary["external"]  # faster-whisper, int8 and float32, the same windows
    assert [e["compute_type"] for e in external] == ["int8", "float32"]
    assert all(e["tokens"] > 10 and e["pooled_tokens_per_s"] > 0 for e in external)
    assert "## External reference (a different runtime)" in (out / "report.md").read_text()
    timing = summary["timestamps"]  # per configuration, apart from its decode time
    assert set(timing) == {"target 1t", "target 2t", "pld k=4"}
    assert all(0 < t["align_s"] < t["decode_s"] for t in timing.values())
    assert "Word timing (`--timestamps`)" in (out / "report.md").read_text()


def test_bench_with_drafts_made_ahead(dataset, tmp_path, capsys):
    """`--drafts both`: as2d with its drafter process and with every draft made before the
    timed runs (no drafter process), both identical to target-only; the drafting cost is
    reported beside them."""
    out = tmp_path / "out"
    args = ["bench", str(dataset), "--methods", "target,as2d", "--drafters", "whisper-tiny.en"]
    args += ["--budgets", "4", "--limit", "1", "--drafts", "both", "--no-progress"]
    code = main([*args, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    names = [c["name"] for c in summary["configs"]]
    assert "as2d whisper-tiny.en k=4" in names and "as2d whisper-tiny.en k=4 drafts ready" in names
    assert all(c["identical"] for c in summary["configs"])
    ready = next(c for c in summary["configs"] if c["name"].endswith("drafts ready"))
    assert ready["mean_accepted"] > 0
    assert summary["drafting_s"]["whisper-tiny.en"] > 0
    assert "every draft made before the timed runs" in (out / "report.md").read_text()
    assert list((out / "drafts").glob("*.json"))  # the drafts it used, kept with the results


@pytest.mark.parametrize(("given", "tail_s"), [([], 1.0), (["--drafter-tail", "full"], None)])
def test_bench_and_exactness_run_the_drafters_on_the_encoder_input_asked(dataset, given, tail_s):
    """`--drafter-tail S|full` reaches every configuration's drafter, as it does a request's
    (drafts made ahead on Whisper's full input are another drafter's: `DraftStore.key`)."""
    for command, more in (("bench", ["--out", "x"]), ("exactness", [])):
        args = build_parser().parse_args([command, str(dataset), *more, *given])
        assert dataset_configs(args)[2].drafter_tail_s == tail_s


def test_bench_prepared_times_requests_with_and_without_the_work_made_ahead(dataset, tmp_path):
    """`--drafts both --prepared`: target-only cold and prepared, as2d with drafts ready and
    prepared (drafts and encoder ahead), every one identical to target-only, each with its
    pooled request time and what was made ahead for it, in core-seconds."""
    out = tmp_path / "out"
    args = ["bench", str(dataset), "--methods", "target,as2d", "--drafters", "whisper-tiny.en"]
    args += ["--budgets", "4", "--limit", "1", "--drafts", "both", "--prepared", "--no-progress"]
    assert main([*args, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = {c["name"]: c for c in summary["configs"]}
    four = {
        "target 2t": ("live", False),
        "target 2t prepared": ("live", True),
        "as2d whisper-tiny.en k=4 drafts ready": ("ready", False),
        "as2d whisper-tiny.en k=4 drafts ready prepared": ("ready", True),
    }
    for name, (drafts, prepared) in four.items():
        row = rows[name]
        assert (row["drafts"], row["prepared"], row["identical"]) == (drafts, prepared, True)
        assert row["request_s"] > 0
        assert (row["preparation_core_s"] > 0) == (drafts == "ready" or prepared)
    assert summary["baseline"] in ("target 1t", "target 2t")  # cold: it runs its own encoder
    requests = summary["requests"]["as2d whisper-tiny.en k=4 drafts ready prepared"]
    assert list(requests["request_s"]) == ["dir-instr"]
    assert list((out / "drafts" / "encoder").glob("*/*.enc"))
    assert "## Time from request to answer" in (out / "report.md").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nowhere.jsonl"], "nowhere.jsonl: no such manifest or folder"),
        (["DATASET", "--methods", "target,warp"], "unknown method 'warp'"),
        (["DATASET", "--runtime", "torch,tpu"], "unknown runtime 'tpu'; choose from torch, mnn"),
        (["DATASET", "--budgets", "auto,big"], "budget must be auto or a number"),
        (["DATASET", "--limit", "0"], "--limit must be at least 1"),
        (["DATASET", "--repeats", "0"], "--repeats must be at least 1"),
        (["asterisk:xx"], "asterisk:xx: choose from en, fr, es"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(dataset, tmp_path, capsys, args, message):
    args = [str(dataset) if a == "DATASET" else a for a in args]
    assert main(["bench", *args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_bad_manifest_line_is_one_line(tmp_path, capsys):
    (tmp_path / "m.jsonl").write_text('{"audio": 3}\n')
    assert main(["bench", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "out")]) == 2
    assert 'm.jsonl:1: expected an object with an "audio" path' in capsys.readouterr().err


def test_budgets_share_one_transcriber_with_their_own_policy(
    tiny_random_whisper, english_tokenizer
):
    target = WhisperTarget(WhisperNet.from_transformers(tiny_random_whisper), english_tokenizer)
    configs = [Config("target", threads=1), Config("pld", budget=2), Config("pld", budget=8)]
    loaded = _load(configs, Options(target="tiny-random", language="en"), {"torch": target})
    try:
        t_target, t_k2, t_k8 = (loaded.transcribers[c] for c in configs)
        assert t_k2 is t_k8 and t_target is not t_k2
        assert all(t.target is target for t in (t_target, t_k2))  # one target model
        assert isinstance(loaded.use(configs[2]).decoder.policy, FixedBudget)
        assert loaded.use(configs[2]).decoder.policy.k == 8
        assert loaded.use(configs[1]).decoder.policy.k == 2
    finally:
        loaded.close()


def test_each_runtime_shares_its_own_target(tiny_random_whisper, random_whisper, english_tokenizer):
    """Runtimes side by side: a configuration decodes with its own runtime's target, never
    another's (a second random model stands in for the MNN target)."""
    torch_target = WhisperTarget(
        WhisperNet.from_transformers(tiny_random_whisper), english_tokenizer
    )
    stand_in = WhisperTarget(
        WhisperNet.from_transformers(random_whisper(english_tokenizer, 1)), english_tokenizer
    )
    configs = catalog(["pld"], [], [2, 8], 1, runtimes=["torch", "mnn"])
    targets = {"torch": torch_target, "mnn": stand_in}
    loaded = _load(configs, Options(target="tiny-random", language="en"), targets)
    try:
        for config in configs:
            assert loaded.transcribers[config].target is targets[config.runtime], config.name
        pld = [loaded.transcribers[c] for c in configs if c.method == "pld"]
        assert len({id(t) for t in pld}) == 2  # budgets share one Transcriber per runtime
    finally:
        loaded.close()


@pytest.mark.slow
@pytest.mark.skipif(not mnn_available(), reason="MNN is not installed: pip install as2d[mnn]")
def test_bench_torch_and_mnn_side_by_side(dataset, tmp_path, capsys):
    """`--runtime torch,mnn`: target-only and pld on both runtimes over the same windows, each
    identical to its own runtime's target-only, in one report with the runtimes compared."""
    out = tmp_path / "out"
    args = ["bench", str(dataset), "--target", "whisper-tiny.en", "--runtime", "torch,mnn"]
    args += ["--methods", "target,pld", "--budgets", "4", "--limit", "1", "--no-progress"]
    code = main([*args, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert [c["name"] for c in summary["configs"]] == [
        "target 1t torch",
        "target 2t torch",
        "pld k=4 torch",
        "target 1t mnn",
        "target 2t mnn",
        "pld k=4 mnn",
    ]
    assert [c["runtime"] for c in summary["configs"]] == ["torch"] * 3 + ["mnn"] * 3
    assert all(c["identical"] and c["pooled_tokens_per_s"] > 0 for c in summary["configs"])
    assert set(summary["baselines"]) == {"torch", "mnn"}
    assert summary["baseline"] == summary["baselines"]["torch"]
    assert summary["baselines"]["mnn"].endswith(" mnn")
    assert summary["runtimes"]["torch"]["frac_windows_same_tokens"] == 1.0
    assert summary["runtimes"]["mnn"]["pooled_tokens_per_s"] > 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["runtime"] for r in rows} == {"torch", "mnn"}
    report = (out / "report.md").read_text()
    assert "## Runtimes side by side" in report and "| mnn | target " in report
