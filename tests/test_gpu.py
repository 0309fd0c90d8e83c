"""The target on a CUDA GPU, the drafter process on the CPU (skipped without a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from as2d.api import Options, Transcriber

LONG = Path(__file__).parent / "data" / "long_en.flac"
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


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
