"""The target's encoder output computed ahead (`runtime/prepared.py`, `as2d prepare`): stored
byte for byte, keyed by everything that could change it, bounded, damaged files recomputed, and
every method's tokens those of target-only with and without it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from as2d.api import Transcriber
from as2d.audio.windows import iter_windows
from as2d.models.qwen import EncodedWindow
from as2d.models.whisper import EncodedAudio, WhisperTarget
from as2d.options import Options, drafter_spec
from as2d.runtime.drafts import AheadDrafter, DraftStore, audio_hash
from as2d.runtime.prepared import (
    EncoderIdentity,
    EncoderStore,
    encoder_key,
    encoder_store,
    pack,
    prepare,
)
from as2d.types import SAMPLE_RATE, Window

DATA = Path(__file__).resolve().parents[1] / "data"
CLIP = DATA / "asterisk" / "en" / "demo-nogo.wav"
LONG = DATA / "long_en.flac"
WHO = EncoderIdentity("whisper-base", "torch.float32", "cpu", 2)


def _window(start: float = 0.0, end: float = 10.0, index: int = 0) -> Window:
    return Window(index, start, end, np.zeros(SAMPLE_RATE, dtype=np.float32))


def test_the_key_names_the_audio_window_target_dtype_device_threads_and_runtime():
    keys = {
        encoder_key("a" * 32, _window(), WHO),
        encoder_key("b" * 32, _window(), WHO),
        encoder_key("a" * 32, _window(0.0, 10.5), WHO),
        encoder_key("a" * 32, _window(), replace(WHO, target="whisper-small")),
        encoder_key("a" * 32, _window(), replace(WHO, dtype="torch.bfloat16")),
        encoder_key("a" * 32, _window(), replace(WHO, device="cuda")),
        encoder_key("a" * 32, _window(), replace(WHO, threads=1)),
        encoder_key("a" * 32, _window(), replace(WHO, runtime="mnn")),
    }
    assert len(keys) == 8
    assert all(key.startswith(("a" * 32 + "/", "b" * 32 + "/")) for key in keys)


def test_any_familys_encoder_output_round_trips_bit_for_bit(tmp_path):
    """Whisper's states and a Qwen window's features, mask and projected audio (bfloat16
    included, which numpy lacks) come back with the same dtypes, shapes and bytes."""
    store = EncoderStore(tmp_path)
    qwen = EncodedWindow(
        torch.randn(1, 128, 3000, dtype=torch.bfloat16),
        torch.ones(1, 3000, dtype=torch.int32),
        torch.randn(750, 64, dtype=torch.float16),
    )
    for key, encoded in (("a/w", EncodedAudio(torch.randn(1500, 8))), ("a/q", qwen)):
        store.save(key, encoded)
        back = store.load(key, type(encoded), torch.device("cpu"))
        assert type(back) is type(encoded)
        for name in vars(encoded):
            mine, theirs = getattr(back, name), getattr(encoded, name)
            assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
            assert mine.view(torch.uint8).numpy().tobytes() == (
                theirs.view(torch.uint8).numpy().tobytes()
            )
    assert store.load("a/w", EncodedWindow, torch.device("cpu")) is None  # another family's


DAMAGE = ("cut short", "a byte flipped", "empty", "not ours", "a header that lies")


def _damaged(data: bytes) -> dict[str, bytes]:
    return {
        "cut short": data[: len(data) // 2],
        "a byte flipped": data[:-5] + bytes([data[-5] ^ 1]) + data[-4:],
        "empty": b"",
        "not ours": b"\x00" * 64,
        "a header that lies": data.replace(b'"sizes": [', b'"sizes": [1, '),
    }


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_file_is_removed_and_ignored(tmp_path, case):
    store = EncoderStore(tmp_path)
    data = pack("a/k", EncodedAudio(torch.randn(1500, 8)))
    path = store.path("a/k")
    path.parent.mkdir(parents=True)
    path.write_bytes(_damaged(data)[case])
    assert store.load("a/k", EncodedAudio, torch.device("cpu")) is None
    assert not path.exists()


def test_the_store_keeps_the_most_recently_used_within_its_size(tmp_path):
    store = EncoderStore(tmp_path, max_bytes=3 * 33_000)  # three 32 KB outputs and headers
    for i in range(3):
        store.save(f"a/{i}", EncodedAudio(torch.randn(1000, 8)))
    assert store.load("a/0", EncodedAudio, torch.device("cpu")) is not None  # used: kept
    store.save("b/3", EncodedAudio(torch.randn(1000, 8)))
    kept = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("*/*.enc"))
    assert kept == ["a/0.enc", "a/2.enc", "b/3.enc"]  # a/1, the least recently used, went
    assert not list(tmp_path.glob("*/.*.tmp"))  # no temporary file left
    store.remove("a")
    assert store.windows("a") == 0 and store.windows("b") == 1


@pytest.mark.slow
def test_a_stored_encoder_output_equals_a_fresh_one_byte_for_byte(tmp_path):
    target = WhisperTarget.load("whisper-base")
    audio = next(iter_windows(CLIP)).audio
    store = EncoderStore(tmp_path)
    store.save("a/k", target.encode(audio))
    stored = store.load("a/k", EncodedAudio, target.device)
    fresh = target.encode(audio)
    assert stored is not None and stored.hidden.shape == (1500, 512)
    assert stored.hidden.numpy().tobytes() == fresh.hidden.numpy().tobytes()


def _tokens(transcriber: Transcriber, audio: Path) -> list[list[int]]:
    transcriber.forget()
    return [w.token_ids for w in transcriber.transcribe(audio)]


class _Counting:
    """Counts the target's encoder calls: prepared windows must make none."""

    def __init__(self, target: Any) -> None:
        self.calls = 0
        self._encode = target.encode

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self._encode(*args, **kwargs)


@pytest.mark.slow
def test_every_methods_tokens_are_target_onlys_with_and_without_the_store(tmp_path):
    """long_en.flac (4 windows) prepared with drafts and encoder outputs: target-only, pld and
    as2d (its drafts stored: no drafter process, as the command line decodes then) find every
    window's encoder output, run no encoder, and give target-only's tokens without the store."""
    # A fixed budget and no gate: nothing measured on first use (the costs of `auto`)
    base = Options(drafts_dir=str(tmp_path / "store"), language="en", budget=4, draft_gate=False)
    cold = Transcriber(replace(base, method="target", prepared="off"), warm=False)
    target = cold.target
    expected = _tokens(cold, LONG)
    spec = drafter_spec(base)
    assert spec is not None
    drafter = AheadDrafter(DraftStore(tmp_path / "store"), spec)
    done = prepare(LONG, cold, drafter)
    assert done.complete and done.encoded == len(expected) == len(done.drafts) == 4
    assert encoder_store(base.drafts_dir).windows(audio_hash(LONG)) == 4
    counting = _Counting(target)
    target.encode = counting
    try:
        for method in ("target", "pld", "as2d"):
            options = replace(base, method=method)
            with Transcriber(options, target, spawn_drafter=False, warm=False) as transcriber:
                assert transcriber.threads == cold.threads  # the key's thread count
                assert _tokens(transcriber, LONG) == expected, method
        assert counting.calls == 0
        off = replace(base, method="as2d", prepared="off", drafts="off")
        with Transcriber(off, target, spawn_drafter=False, warm=False) as transcriber:
            assert _tokens(transcriber, LONG) == expected
        assert counting.calls == 4
    finally:
        del target.encode
        cold.close()


@pytest.mark.slow
def test_prepare_then_transcribe_over_a_damaged_store(tmp_path):
    """`as2d prepare` stores both kinds of work; a damaged encoder file is recomputed by the
    request, silently, and the output is target-only's."""
    store = tmp_path / "store"
    cli = [sys.executable, "-m", "as2d.cli"]
    run = subprocess.run(
        [*cli, "prepare", str(CLIP), "--store", str(store)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert "prepared 1 window" in run.stderr
    assert "drafts (ct2:whisper-base)" in run.stderr  # the most accurate, not the fastest
    (enc,) = store.glob("encoder/*/*.enc")
    enc.write_bytes(enc.read_bytes()[:1000])
    outs = []
    for method in ("target", "as2d"):
        out = tmp_path / method
        command = [*cli, "transcribe", str(CLIP), "--method", method, "--store", str(store)]
        run = subprocess.run(
            [*command, "--format", "json", "-o", str(out), "--no-progress"],
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
        outs.append(json.loads((out / f"{CLIP.stem}.json").read_text()))
    assert outs[0]["windows"][0]["token_ids"] == outs[1]["windows"][0]["token_ids"]
    assert not enc.exists()  # removed when found damaged (a request does not store)


def test_prepare_refuses_bad_input_in_one_line(tmp_path):
    cli = [sys.executable, "-m", "as2d.cli", "prepare"]
    for args in ([str(tmp_path / "none.wav")], [str(CLIP), "--threads", "0"]):
        run = subprocess.run([*cli, *args], capture_output=True, text=True)
        assert run.returncode == 2
        assert run.stderr.count("\n") == 1 and run.stderr.startswith("as2d: error:")
