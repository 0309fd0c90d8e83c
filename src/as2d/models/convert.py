"""Turns CTranslate2 Whisper weights into a ``transformers`` Whisper model, and caches it.

The bundled weights exist only as CTranslate2 "WhisperSpec" files; the target runs in
PyTorch (it needs a KV cache we can roll back and multi-token verify passes), so the
weights are renamed into a ``WhisperForConditionalGeneration`` state dict once and cached
as safetensors. Dimensions come from the weights themselves, not from a name.

What differs between the two layouts (CT2 name -> HF name):
  * self-attention ``linear_0`` is q, k and v stacked on the output axis -> split in 3;
    cross-attention ``linear_0`` is q and ``linear_1`` is k and v stacked -> split in 2.
  * CT2 keeps a bias for k (zeros); HF Whisper has none. Dropping it is exact even if
    it were not zero: it adds ``q·b_k`` to every score of a query, and softmax ignores
    a constant shift.
  * layer norms are ``gamma``/``beta`` -> ``weight``/``bias``.
  * the output projection is an alias of the token embeddings (tied weights).
  * conv weights ``[out, in, kernel]`` and both position tables keep their layout.

The cache directory is a plain Hugging Face model directory (``from_pretrained`` reads
it) plus ``manifest.json``, written last, so a truncated or rewritten cache is noticed and
rebuilt (``cache.py``). Each file is written to a temp name and moved into place
(``as2d.writers.atomic_path``); ``bundled.converted_dir`` holds a file lock around a
conversion, so two processes starting together convert once.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save
from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

from as2d.models.cache import MANIFEST, WEIGHTS, write_json, write_manifest
from as2d.models.ct2 import CT2Model, dequantize
from as2d.models.tokenizer import WhisperTokenizer
from as2d.writers import atomic_path

TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "added_tokens.json")

# Per-layer renames (CT2 scope inside "<encoder|decoder>/layer_<i>/" -> HF scope).
_LAYER_SCOPES = {
    "self_attention/layer_norm": "self_attn_layer_norm",
    "self_attention/linear_1": "self_attn.out_proj",
    "attention/layer_norm": "encoder_attn_layer_norm",
    "attention/linear_0": "encoder_attn.q_proj",
    "attention/linear_2": "encoder_attn.out_proj",
    "ffn/layer_norm": "final_layer_norm",
    "ffn/linear_0": "fc1",
    "ffn/linear_1": "fc2",
}
# Fused projections: CT2 scope -> (HF module, projections stacked along the output axis).
_FUSED_SCOPES = {
    "self_attention/linear_0": ("self_attn", ("q", "k", "v")),
    "attention/linear_1": ("encoder_attn", ("k", "v")),
}
_TOP_SCOPES = {
    "encoder/conv1": "model.encoder.conv1",
    "encoder/conv2": "model.encoder.conv2",
    "encoder/layer_norm": "model.encoder.layer_norm",
    "decoder/layer_norm": "model.decoder.layer_norm",
    "decoder/embeddings": "model.decoder.embed_tokens",
    "decoder/projection": "proj_out",
}
_POSITIONS = {
    "encoder/position_encodings/encodings": "model.encoder.embed_positions.weight",
    "decoder/position_encodings/encodings": "model.decoder.embed_positions.weight",
}
_PARAM = {"gamma": "weight", "beta": "bias", "weight": "weight", "bias": "bias"}
_LAYER_NAME = re.compile(r"^(encoder|decoder)/layer_(\d+)/(.+)/(\w+)$")


def _count_layers(variables: dict[str, np.ndarray], side: str) -> int:
    pattern = re.compile(rf"^{side}/layer_(\d+)/")
    return 1 + max(int(m.group(1)) for n in variables if (m := pattern.match(n)))


def whisper_config(ct2: CT2Model, tokenizer: WhisperTokenizer) -> WhisperConfig:
    """Derives the ``WhisperConfig`` from the CT2 weights' shapes and the tokenizer's ids.

    Args:
        ct2: a read WhisperSpec model.
        tokenizer: the model's tokenizer (special-token ids).

    Returns:
        The architecture config, ``tie_word_embeddings`` set when the projection is an alias.
    """
    v = ct2.variables
    vocab_size, d_model = v["decoder/embeddings/weight"].shape
    tied = ct2.aliases.get("decoder/projection/weight") == "decoder/embeddings/weight"
    return WhisperConfig(
        vocab_size=int(vocab_size),
        num_mel_bins=int(v["encoder/conv1/weight"].shape[1]),  # 80 (128 for large-v3)
        d_model=int(d_model),
        encoder_layers=_count_layers(v, "encoder"),
        decoder_layers=_count_layers(v, "decoder"),
        encoder_attention_heads=int(v["encoder/num_heads"]),
        decoder_attention_heads=int(v["decoder/num_heads"]),
        encoder_ffn_dim=int(v["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
        decoder_ffn_dim=int(v["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
        max_source_positions=int(v["encoder/position_encodings/encodings"].shape[0]),
        max_target_positions=int(v["decoder/position_encodings/encodings"].shape[0]),
        bos_token_id=tokenizer.sot,
        decoder_start_token_id=tokenizer.sot,
        eos_token_id=tokenizer.eot,
        pad_token_id=tokenizer.eot,
        begin_suppress_tokens=ct2.config.get("suppress_ids_begin"),
        suppress_tokens=ct2.config.get("suppress_ids"),
        tie_word_embeddings=tied,
    )


def generation_config(
    config: WhisperConfig,
    tokenizer: WhisperTokenizer,
    alignment_heads: list[list[int]] | None = None,
) -> GenerationConfig:
    """Generation settings for greedy ``model.generate`` without timestamps.

    English-only models get the prompt ``[sot, notimestamps]``; multilingual ones
    ``[sot, <lang>, transcribe, notimestamps]`` (language detected unless passed to
    ``generate(language=...)``).

    Args:
        config: the model config; its (begin_)suppress_tokens are used when set.
        tokenizer: the model's tokenizer (special-token ids, languages).
        alignment_heads: [layer, head] pairs for word timing, when known.

    Returns:
        A config for greedy decoding (``do_sample=False``, ``num_beams=1``).
    """
    languages: dict[str, Any] = {}
    if tokenizer.multilingual:
        languages = {
            "lang_to_id": {f"<|{code}|>": i for code, i in tokenizer.languages.items()},
            "task_to_id": {"transcribe": tokenizer.transcribe, "translate": tokenizer.translate},
            "task": "transcribe",
        }
    return GenerationConfig(
        decoder_start_token_id=tokenizer.sot,
        bos_token_id=tokenizer.sot,
        eos_token_id=tokenizer.eot,
        pad_token_id=tokenizer.eot,
        max_length=config.max_target_positions,
        do_sample=False,
        num_beams=1,
        suppress_tokens=config.suppress_tokens,
        begin_suppress_tokens=config.begin_suppress_tokens,
        alignment_heads=alignment_heads,
        no_timestamps_token_id=tokenizer.no_timestamps,
        return_timestamps=False,
        is_multilingual=tokenizer.multilingual,
        **languages,
    )


def _hf_pieces(name: str, value: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """Yields the HF parameter(s) that CT2 variable ``name`` becomes (none if not a weight)."""
    if name in _POSITIONS:
        yield _POSITIONS[name], value
        return
    scope, _, param = name.rpartition("/")
    if scope in _TOP_SCOPES:
        yield f"{_TOP_SCOPES[scope]}.{_PARAM[param]}", value
        return
    match = _LAYER_NAME.match(name)
    if match is None or match.group(3) not in {*_LAYER_SCOPES, *_FUSED_SCOPES}:
        raise ValueError(f"unexpected CT2 Whisper variable {name}")
    side, index, scope, param = match.groups()
    prefix = f"model.{side}.layers.{index}"
    if scope in _LAYER_SCOPES:
        yield f"{prefix}.{_LAYER_SCOPES[scope]}.{_PARAM[param]}", value
        return
    module, parts = _FUSED_SCOPES[scope]
    for proj, piece in zip(parts, np.split(value, len(parts), axis=0), strict=True):
        if not (proj == "k" and param == "bias"):  # HF has no k bias (see module docstring)
            yield f"{prefix}.{module}.{proj}_proj.{param}", piece


def whisper_state_dict(ct2: CT2Model) -> dict[str, torch.Tensor]:
    """Renames (and splits) CT2 Whisper variables into HF Whisper parameters.

    Args:
        ct2: a read WhisperSpec model; its stored dtype (float16) is kept, quantized
            weights are dequantized to float32.

    Returns:
        HF name -> contiguous tensor; ``proj_out.weight`` is left out when tied.
    """
    state: dict[str, torch.Tensor] = {}
    for name, stored in ct2.variables.items():
        if stored.ndim == 0 or name in ct2.aliases or name.endswith("_scale"):
            continue  # spec scalars; aliases repeat a variable; scales go into dequantize
        value = dequantize(ct2.variables, name)
        for hf_name, piece in _hf_pieces(name, value):
            state[hf_name] = torch.from_numpy(np.ascontiguousarray(piece))
    if "decoder/projection/weight" in ct2.aliases:
        state.pop("proj_out.weight", None)
    return state


def check_state_dict(state: dict[str, torch.Tensor], config: WhisperConfig) -> None:
    """Raises ValueError unless ``state`` has exactly the model's parameters and shapes."""
    with torch.device("meta"):
        expected = WhisperForConditionalGeneration(config).state_dict()
    if config.tie_word_embeddings:
        expected.pop("proj_out.weight")
    missing, extra = expected.keys() - state.keys(), state.keys() - expected.keys()
    wrong = [k for k in expected.keys() & state.keys() if expected[k].shape != state[k].shape]
    if missing or extra or wrong:
        raise ValueError(
            f"converted Whisper state dict: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(extra)[:5]}, wrong shape {sorted(wrong)[:5]}"
        )


def convert_to_hf(
    ct2: CT2Model, tokenizer_dir: Path, out_dir: Path, source: dict[str, Any]
) -> Path:
    """Converts a CT2 Whisper model into a Hugging Face model directory (the cache).

    Args:
        ct2: the read CT2 model.
        tokenizer_dir: directory with the model's ``tokenizer.json`` (copied along).
        out_dir: destination; created if needed, files inside replaced atomically.
        source: JSON-able description of the source (e.g. file sizes), kept in the
            manifest so a changed source invalidates the cache.

    Returns:
        ``out_dir``, loadable with ``WhisperForConditionalGeneration.from_pretrained``.
    """
    if ct2.spec != "WhisperSpec":
        raise ValueError(f"expected a WhisperSpec model, got {ct2.spec}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST).unlink(missing_ok=True)  # invalid until everything is written
    tokenizer = WhisperTokenizer.from_model_dir(tokenizer_dir)
    config = whisper_config(ct2, tokenizer)
    state = whisper_state_dict(ct2)
    check_state_dict(state, config)
    # Written here, not by safetensors' save_file (its files are 0600): the weights get the mode
    # of every cache file (0644 under the usual umask), for a cache shared by several users.
    with atomic_path(out_dir / WEIGHTS) as tmp:
        tmp.write_bytes(save(state, metadata={"format": "pt"}))
    write_json(out_dir / "config.json", config.to_dict())
    gen = generation_config(config, tokenizer, ct2.config.get("alignment_heads"))
    write_json(out_dir / "generation_config.json", gen.to_dict())
    files = [WEIGHTS, "config.json", "generation_config.json"]
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).exists():
            with atomic_path(out_dir / name) as tmp:
                shutil.copyfile(tokenizer_dir / name, tmp)
            files.append(name)
    write_manifest(out_dir, source, files)
    return out_dir
