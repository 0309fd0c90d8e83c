"""The MNN Whisper target decodes a real clip to the same greedy tokens as `WhisperTarget`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from as2d.audio.load import load_audio
from as2d.engine.target import Request
from as2d.models.bundled import load_whisper_net
from as2d.models.mnn_whisper import MnnWhisperTarget, export, greedy, mnn_available
from as2d.models.whisper import WhisperTarget

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not mnn_available(), reason="MNN is not installed: pip install as2d[mnn]"),
]

CLIP = Path(__file__).parents[1] / "data" / "asterisk" / "en" / "demo-nogo.wav"
MODEL = "whisper-tiny.en"


@pytest.fixture(scope="module")
def mnn_target(tmp_path_factory: pytest.TempPathFactory) -> MnnWhisperTarget:
    net, tokenizer = load_whisper_net(MODEL, torch.float32)
    directory = tmp_path_factory.mktemp("mnn")
    export(net, directory)
    return MnnWhisperTarget(directory, net, tokenizer)


@pytest.fixture(scope="module")
def audio() -> np.ndarray:
    return load_audio(str(CLIP))


def test_greedy_tokens_equal_torch_targets(mnn_target: MnnWhisperTarget, audio) -> None:
    reference = WhisperTarget(*load_whisper_net(MODEL, torch.float32))
    encoded = reference.encode(audio)
    prompt = reference.prompt(encoded, Request(language="en"))

    tokens = greedy(mnn_target, mnn_target.encode(audio), prompt)

    assert tokens == greedy(reference, encoded, prompt)
    assert mnn_target.length == len(prompt) + len(tokens)


def test_rollback_then_the_same_pass_gives_the_same_scores(
    mnn_target: MnnWhisperTarget, audio
) -> None:
    prompt = mnn_target.tokenizer.prompt("en", "transcribe")
    mnn_target.prefill(mnn_target.encode(audio), prompt)
    first = mnn_target.forward([40, 1101, 7025]).clone()  # [3, V]

    mnn_target.rollback(len(prompt))
    again = mnn_target.forward([40, 1101, 7025])

    assert mnn_target.length == len(prompt) + 3
    torch.testing.assert_close(again, first, rtol=0, atol=0)
