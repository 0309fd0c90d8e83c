"""The target on a CUDA GPU, the drafter process on the CPU (skipped without a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from as2d.api import Options, Transcriber, thread_split

LONG = Path(__file__).parent / "data" / "long_en.flac"
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_on_a_gpu_the_drafter_takes_the_spare_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("as2d.api._cores", lambda: 8)
    assert thread_split(Options(device="cuda")) == (1, 7)
    assert thread_split(Options(device="cuda", method="target")) == (1, 0)
    assert thread_split(Options(device="cpu")) == (4, 4)


@gpu
@pytest.mark.slow
def test_as2d_on_the_gpu_equals_target_only_on_the_gpu() -> None:
    runs = {}
    for method in ("target", "as2d"):
        with Transcriber(Options(method=method, device="cuda", language="en")) as t:
            run = t.transcribe(LONG)
            runs[method] = [r.token_ids for r in run]
            assert run.stats.wall_s > 0
            assert t.target.device.type == "cuda"
    assert runs["as2d"] == runs["target"]
