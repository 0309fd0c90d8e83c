"""Loading any target: the model's config names its family, and the family's adapter loads it.

Each adapter class owns the `config.model_type` values of its family (`MODEL_TYPES`), so
adding a family is adding its class to `ADAPTERS`; nothing else tests model names.

Example:
    target = load_target("whisper-base")                       # bundled: Whisper
    target = load_target("Qwen/Qwen2-Audio-7B-Instruct", "cuda", torch.bfloat16)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig

from as2d.engine.target import TargetAdapter
from as2d.models.bundled import BUNDLED, ModelNotFoundError, bundled_names
from as2d.models.qwen import OmniThinkerTarget, Qwen2AudioTarget
from as2d.models.whisper import WhisperTarget

ADAPTERS: tuple[Any, ...] = (WhisperTarget, Qwen2AudioTarget, OmniThinkerTarget)


def torch_dtype(name: str | None) -> torch.dtype | None:
    """ "float16" -> torch.float16 (a name in `options.DTYPES`); None: the family's default."""
    return None if name is None else getattr(torch, name)


def model_type(name_or_path: str) -> str:
    """`config.model_type` of a bundled name, local directory or hub id (config only).

    Raises:
        ModelNotFoundError: no such model here, in the HF cache, or on a reachable hub.
    """
    if name_or_path in BUNDLED:
        return "whisper"
    try:
        config = AutoConfig.from_pretrained(
            name_or_path, local_files_only=Path(name_or_path).is_dir()
        )
    except (OSError, ValueError) as err:
        raise ModelNotFoundError(
            f"cannot read the config of {name_or_path!r} ({type(err).__name__}); "
            f"bundled models: {', '.join(bundled_names())}"
        ) from err
    return str(config.model_type)


def adapter_class(name_or_path: str) -> Any:
    """The adapter class of the model's family, without loading weights.

    Raises:
        ModelNotFoundError: unknown model, or a family no adapter owns.
    """
    kind = model_type(name_or_path)
    for adapter in ADAPTERS:
        if kind in adapter.MODEL_TYPES:
            return adapter
    known = ", ".join(t for a in ADAPTERS for t in a.MODEL_TYPES)
    raise ModelNotFoundError(f"{name_or_path!r} is a {kind!r} model; targets supported: {known}")


def load_target(
    name_or_path: str, device: str = "cpu", dtype: torch.dtype | None = None
) -> TargetAdapter[Any]:
    """Loads a target for decoding, in eval mode.

    Args:
        name_or_path: a bundled name, a local Hugging Face model directory, or a hub id.
        device: "cpu" or "cuda" (families that support it).
        dtype: parameter dtype; None: the family's default (float32 for Whisper, the
            checkpoint's own dtype for Qwen models).

    Raises:
        ModelNotFoundError: unknown model or family.
    """
    target: TargetAdapter[Any] = adapter_class(name_or_path).load(name_or_path, device, dtype)
    return target
