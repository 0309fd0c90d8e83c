"""Whisper read without transformers (`whisper_net.py`, `audio/mel.py`) computes what
transformers computes: the same features and encoder output, bit for bit, the same weights."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
import soxr
import torch
from transformers import WhisperFeatureExtractor

from as2d.audio.mel import log_mel
from as2d.models.bundled import converted_dir, load_whisper, load_whisper_net
from as2d.models.whisper import WhisperTarget
from as2d.models.whisper_net import WhisperNet
from as2d.types import SAMPLE_RATE

from .conftest import EN_DIR


def _speech() -> np.ndarray:
    audio, rate = sf.read(EN_DIR / "dir-intro.wav", dtype="float32")
    return soxr.resample(audio, rate, SAMPLE_RATE)


@pytest.mark.parametrize("n_mels", [80, 128])  # Whisper up to medium; large-v3
def test_log_mel_equals_transformers_features(n_mels: int) -> None:
    audio = _speech()
    extractor = WhisperFeatureExtractor(feature_size=n_mels)
    expected = extractor(audio, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
    assert torch.equal(log_mel(audio, n_mels), expected)
    long = np.concatenate([audio] * 5)  # past 30 s: both keep the first 30
    expected = extractor(long, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
    assert torch.equal(log_mel(long, n_mels), expected)


def test_bundled_model_read_without_transformers_equals_transformers_model(as2d_cache) -> None:
    name = "whisper-tiny.en"
    reference, _ = load_whisper(name)
    net, tokenizer = load_whisper_net(name)
    expected = reference.state_dict()
    assert set(net.state_dict()) == set(expected)
    for key, tensor in net.state_dict().items():
        assert torch.equal(tensor, expected[key]), key
    gen = reference.generation_config
    assert list(net.suppression.suppress_tokens) == list(gen.suppress_tokens)
    assert list(net.suppression.begin_suppress_tokens) == list(gen.begin_suppress_tokens)
    features = log_mel(_speech(), 80)
    with torch.inference_mode():
        ours = net.model.encoder(features)
        theirs = reference.model.encoder(features).last_hidden_state
    assert torch.equal(ours, theirs)
    assert tokenizer.eot == WhisperTarget(net, tokenizer).tokenizer.eot


def test_a_checkpoint_with_its_suppression_in_config_json_keeps_it(
    tmp_path, as2d_cache, tiny_random_whisper
) -> None:
    """Older checkpoints carry `suppress_tokens` in config.json, not generation_config.json."""
    source = converted_dir("whisper-tiny.en")
    tiny_random_whisper.save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
    config = json.loads((tmp_path / "config.json").read_text())
    config["suppress_tokens"], config["begin_suppress_tokens"] = [1, 2, 3], [220]
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "generation_config.json").unlink()
    net, _ = load_whisper_net(str(tmp_path))
    assert net.suppression.suppress_tokens == (1, 2, 3)
    assert net.suppression.begin_suppress_tokens == (220,)
    same = WhisperNet.from_transformers(tiny_random_whisper)
    for key, tensor in net.state_dict().items():
        assert torch.equal(tensor, same.state_dict()[key]), key


def test_a_whisper_target_imports_no_transformers(as2d_cache) -> None:
    """A one-off command on a Whisper target saves transformers' ~3 s of imports."""
    converted_dir("whisper-tiny.en")  # converting does need transformers; loading must not
    code = (
        "import sys, numpy as np\n"
        "from as2d.models.targets import load_target\n"
        "target = load_target('whisper-tiny.en')\n"
        "target.prefill(target.encode(np.zeros(16000, np.float32)), [target.tokenizer.sot])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
