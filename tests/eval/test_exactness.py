"""`as2d exactness`: the counting rules on tiny lists, and the command end to end."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from as2d.cli import main
from as2d.eval.catalog import Config
from as2d.eval.exactness import (
    ExactnessReport,
    MethodExactness,
    count_mismatches,
    first_difference,
    reference_config,
    report_dict,
)
from as2d.models.mnn_whisper import mnn_available
from as2d.types import WindowResult

ASTERISK = Path(__file__).parents[1] / "data" / "asterisk" / "en"


def window(index: int, token_ids: list[int], **extra: object) -> WindowResult:
    result = WindowResult(index, 0.0, 1.0, "", token_ids, 0.0, 0.0)
    for name, value in extra.items():
        setattr(result, name, value)
    return result


@pytest.mark.parametrize(
    ("reference", "out", "count", "first"),
    [
        ([1, 2, 3], [1, 2, 3], 0, None),
        ([1, 2, 3], [1, 5], 2, 1),
        ([1, 2], [1, 2, 3, 4], 2, 2),
        ([], [7], 1, 0),
    ],
)
def test_mismatches_count_missing_tokens(reference, out, count, first):
    assert count_mismatches(reference, out) == count
    assert first_difference(reference, out) == first


def test_reference_is_target_only_at_the_most_threads():
    configs = [Config("target", threads=1), Config("target", threads=4), Config("pld", budget=4)]
    assert reference_config(configs).name == "target 4t"


def test_method_totals_first_mismatch_and_json():
    method = MethodExactness("pld k=4")
    method.add("a", 0, window(0, [1, 2]), window(0, [1, 2], guarded=1, min_margin=None))
    method.add("a", 1, window(1, [3, 4]), window(1, [3, 9], min_margin=0.5))
    method.add("b", 0, window(0, [5]), None)  # a window the method never produced
    assert (method.positions, method.mismatches, method.guarded) == (4, 2, 1)
    assert method.min_margin == 0.5
    report = ExactnessReport("target 2t", [method, MethodExactness("target 1t")], 2, 3)
    data = json.loads(json.dumps(report_dict(report)))
    assert data["mismatches"] == 2 and data["min_margin"] == 0.5
    assert data["methods"][0]["first_mismatch"] == {"recording": "a", "window": 1, "position": 1}
    assert data["methods"][1]["min_margin"] is None  # no margin seen: JSON has no infinity
    assert MethodExactness("x").min_margin == math.inf


@pytest.mark.slow
def test_exactness_command_on_two_clips(tmp_path, capsys):
    """The real bundled target, target-only at 1 and all threads, pld auto and k=4."""
    for name in ("dir-instr", "vm-newuser"):
        shutil.copy(ASTERISK / f"{name}.wav", tmp_path / f"{name}.wav")
    args = ["exactness", str(tmp_path), "--methods", "target,pld", "--budgets", "auto,4"]
    code = main([*args, "--language", "en", "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    assert report["positions"] > 0 and report["mismatches"] == 0
    assert report["reference"].startswith("target")
    assert report["recordings"] == 2 and report["windows"] >= 2
    names = [m["name"] for m in report["methods"]]
    assert names[-2:] == ["pld k=auto", "pld k=4"]
    assert len(names) in (2, 3)  # target 1t is compared too, unless 1 thread is all cores
    assert all(m["first_mismatch"] is None for m in report["methods"])


@pytest.mark.slow
def test_subset_takes_only_its_rows(tmp_path, capsys):
    """`--subset NAME`: the manifest's rows of that subset, the others left out; a subset the
    manifest lacks is one line naming those it has."""
    rows = [("dir-instr", "short"), ("vm-newuser", "long"), ("demo-nogo", "long")]
    for name, _ in rows:
        shutil.copy(ASTERISK / f"{name}.wav", tmp_path / f"{name}.wav")
    lines = [json.dumps({"audio": f"{n}.wav", "subset": s, "language": "en"}) for n, s in rows]
    (tmp_path / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    args = ["exactness", str(tmp_path), "--target", "whisper-tiny.en", "--methods", "target"]
    assert main([*args, "--subset", "short", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["recordings"] == 1
    assert main([*args, "--subset", "medium", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--subset medium: the dataset has long, short" in err, err


def test_missing_dataset_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["exactness", str(tmp_path / "nowhere"), "--no-progress"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("as2d: error: ")
    assert "no such manifest or folder" in err


@pytest.mark.slow
@pytest.mark.skipif(not mnn_available(), reason="MNN is not installed: pip install as2d[mnn]")
def test_exactness_on_torch_and_mnn_checks_each_against_its_own_target_only(tmp_path, capfd):
    shutil.copy(ASTERISK / "dir-instr.wav", tmp_path / "dir-instr.wav")
    args = ["exactness", str(tmp_path), "--target", "whisper-tiny.en", "--runtime", "torch,mnn"]
    code = main([*args, "--methods", "target,pld", "--budgets", "4", "--no-progress"])
    out, err = capfd.readouterr()  # what MNN's C++ prints on stdout too: none may reach it
    assert code == 0, err
    report = json.loads(out)
    references = report["references"]  # each runtime's target-only at the most threads
    assert list(references) == ["torch", "mnn"] and report["reference"] == references["torch"]
    assert references["mnn"].startswith("target ") and references["mnn"].endswith(" mnn")
    assert report["mismatches"] == 0 and report["positions"] > 0
    names = [m["name"] for m in report["methods"]]
    assert [n for n in names if n.startswith("pld")] == ["pld k=4 torch", "pld k=4 mnn"]
    assert names.index("pld k=4 torch") < min(i for i, n in enumerate(names) if "mnn" in n)
