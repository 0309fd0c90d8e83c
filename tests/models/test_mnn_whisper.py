"""The MNN Whisper target decodes a real clip to the same greedy tokens as `WhisperTarget`, on
any thread count between calls, and as2d over it gives target-only's tokens on MNN."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from as2d.api import Options, compare
from as2d.audio.load import load_audio
from as2d.models.bundled import load_whisper_net
from as2d.models.mnn_graphs import export
from as2d.models.mnn_whisper import MnnWhisperTarget, greedy, mnn_available
from as2d.models.whisper import WhisperTarget
from as2d.target import Request

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
    return MnnWhisperTarget(directory, net.shape, net.suppression, tokenizer)


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


def test_threads_change_between_calls(mnn_target: MnnWhisperTarget, audio) -> None:
    """Core lending sets the backend's threads between passes: the next pass runs on them,
    with the same scores (MNN's kernels split work by rows, not by thread count)."""
    prompt = mnn_target.tokenizer.prompt("en", "transcribe")
    encoded = mnn_target.encode(audio)
    mnn_target.prefill(encoded, prompt)
    one = mnn_target.forward([40, 1101]).clone()

    mnn_target.backend.set_threads(2)
    try:
        mnn_target.prefill(encoded, prompt)
        two = mnn_target.forward([40, 1101])
        decoder = mnn_target.graphs["decoder"]
        assert sorted(decoder._modules) == [1, 2]
    finally:
        mnn_target.backend.set_threads(1)
    assert int(one.argmax(-1)[-1]) == int(two.argmax(-1)[-1])


def test_one_thread_means_one_core(mnn_target: MnnWhisperTarget, audio) -> None:
    """A pass on one thread keeps to one core, also after a pass on two, so that a drafter on
    the other core does not slow it (MNN's own `thread_num` argument ran two threads whatever
    it was given, and its thread pool, one per process, keeps the size it was made with: the
    process's CPU time was twice the wall time)."""
    encoder = mnn_target.graphs["encoder"]
    features = np.zeros((1, mnn_target.n_mels, 3000), dtype=np.float32)
    encoder(features)  # loads the one-thread module
    mnn_target.backend.set_threads(2)
    try:
        encoder(features)  # and the two-thread one, made last
    finally:
        mnn_target.backend.set_threads(1)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(3):
        encoder(features)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu

    assert cpu < 1.25 * wall, f"{cpu:.2f} s of CPU in {wall:.2f} s on one thread"


def test_options_refuse_what_mnn_cannot_run() -> None:
    with pytest.raises(ValueError, match="timestamps are not available on mnn"):
        compare(CLIP, Options(target=MODEL, runtime="mnn", timestamps="word"), ("target",))
    with pytest.raises(ValueError, match="float32 on the CPU"):
        compare(CLIP, Options(target=MODEL, runtime="mnn", dtype="float16"), ("target",))


def test_as2d_over_mnn_equals_mnn_target_only() -> None:
    """`as2d transcribe --runtime mnn` against `--method target --runtime mnn`, token for
    token, on a real clip (the torch drafter's text verified by the MNN target, the guard at
    MNN's rounding bound)."""
    options = Options(target=MODEL, runtime="mnn", language="en", drafts="off", draft_gate=False)

    target, as2d = compare(str(CLIP), options, ("target", "as2d"))

    assert [r.token_ids for r in as2d.results] == [r.token_ids for r in target.results]
    assert sum(len(r.token_ids) for r in target.results) > 10
    assert sum(r.accepted_tokens for r in as2d.results) > 0  # drafts were verified
