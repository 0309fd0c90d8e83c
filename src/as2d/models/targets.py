"""Loading any target: the model's config names its family, and the family's adapter loads it.

Each adapter class owns the `config.model_type` values of its family (`MODEL_TYPES`), so
adding a family is adding its class to `ADAPTERS` under its runtime (`Options.runtime`);
nothing else tests model names. Families are imported in turn until one owns the model, so a
Whisper target never imports the Qwen adapters (or transformers, which they need), nor a
torch target MNN.

Example:
    target = load_target("whisper-base")                       # bundled: Whisper
    target = load_target("Qwen/Qwen2-Audio-7B-Instruct", "cuda", torch.bfloat16)
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, Any

from as2d.drafting.family import DrafterFamily
from as2d.models.bundled import BUNDLED, ModelNotFoundError, bundled_names, local_model_dir
from as2d.models.mnn_export import RUNTIME as EXPORT_RUNTIME
from as2d.models.mnn_export import is_export
from as2d.models.tokenizer import language_tokens, read_vocab
from as2d.options import Options

if TYPE_CHECKING:  # torch comes with the adapters: checking a target's name needs none
    import torch

    from as2d.target import TargetAdapter

ADAPTERS = {  # by runtime (`backends.RUNTIMES`): module:class, in the order they are tried
    "torch": (
        "as2d.models.whisper:WhisperTarget",
        "as2d.models.qwen:Qwen2AudioTarget",
        "as2d.models.qwen:OmniThinkerTarget",
    ),
    "mnn": ("as2d.models.mnn_whisper:MnnWhisperTarget",),
}


def adapters(runtime: str = "torch") -> Iterator[Any]:
    """The adapter classes of `ADAPTERS[runtime]`, each imported when it is reached."""
    for where in ADAPTERS[runtime]:
        module, name = where.split(":")
        yield getattr(importlib.import_module(module), name)


def torch_dtype(name: str | None) -> torch.dtype | None:
    """ "float16" -> torch.float16 (a name in `options.DTYPES`); None: the family's default."""
    import torch

    return None if name is None else getattr(torch, name)


def model_type(name_or_path: str) -> str:
    """`config.model_type` of a bundled name, local directory or hub id (config only, read as
    transformers' AutoConfig reads it, without importing it).

    Raises:
        ModelNotFoundError: no such model here or in the HF cache (`local_model_dir`).
    """
    if name_or_path in BUNDLED:
        return "whisper"
    config = local_model_dir(name_or_path) / "config.json"
    try:
        return str(json.loads(config.read_text())["model_type"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ModelNotFoundError(
            f"cannot read the config of {name_or_path!r} ({type(err).__name__}); "
            f"bundled models: {', '.join(bundled_names())}"
        ) from err


def target_languages(name_or_path: str) -> frozenset[str] | None:
    """The language codes a Whisper target knows, from its vocabulary file (empty: English-
    only); None for other families, which take a language's name in their request, and for
    a Whisper whose vocabulary cannot be read here (loading it says why).

    Raises:
        ModelNotFoundError: no such model here or in the HF cache (`local_model_dir`).
    """
    if model_type(name_or_path) != "whisper":
        return None
    try:
        return frozenset(language_tokens(read_vocab(local_model_dir(name_or_path))))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_language(
    target: str, languages: Collection[str] | None, language: str | None, task: str
) -> None:
    """Raises ValueError, one line, for a language or task the target cannot decode.

    Args:
        target: the target's name, for the message.
        languages: the target's codes (`target_languages`; empty: English-only; None: any).
        language: the language asked for (None: detected).
        task: "transcribe", "translate" or "ask".
    """
    if languages is None:
        return
    if not languages:
        if task == "translate":
            raise ValueError(f"{target} is English-only: it cannot translate (try whisper-base)")
        if language is not None and language.lower() != "en":
            raise ValueError(
                f"{target} is English-only: it cannot transcribe {language!r} (try whisper-base)"
            )
    elif language is not None and language.lower() not in languages:
        raise ValueError(
            f"unknown language code {language!r}; {target} knows {', '.join(sorted(languages))}"
        )


def check_target(options: Options) -> None:
    """Raises ValueError (ModelNotFoundError), one line, before any model loads, for a target
    or drafter not on this machine, an export folder for another runtime (`check_export`), or
    a language or task the target cannot decode (`check_language`)."""
    check_export(options.target, options.runtime)
    languages = target_languages(options.target)
    check_language(options.target, languages, options.language, options.task)
    if options.drafter_used is not None:
        DrafterFamily(options.drafter_used).check()


def check_export(name_or_path: str, runtime: str) -> None:
    """Raises ModelNotFoundError, one line, for a folder `as2d export` wrote (MNN graphs, no
    torch weights) asked to run on another runtime."""
    if runtime != EXPORT_RUNTIME and is_export(name_or_path):
        raise ModelNotFoundError(
            f"{name_or_path} is an export for {EXPORT_RUNTIME} (as2d export): run it with "
            f"--runtime {EXPORT_RUNTIME}"
        )


def times_words(name_or_path: str) -> bool:
    """Whether the model's family gives word timings (Whisper, from its cross-attention),
    from its config alone; False for a model that cannot be found (loading it says why)."""
    try:
        return model_type(name_or_path) == "whisper"
    except ModelNotFoundError:
        return False


def adapter_class(name_or_path: str, runtime: str = "torch") -> Any:
    """The adapter class of the model's family on `runtime`, without loading weights.

    Raises:
        ModelNotFoundError: unknown model, a family no adapter of the runtime owns, or an
            export folder (`as2d export`) for another runtime.
    """
    check_export(name_or_path, runtime)
    kind = model_type(name_or_path)
    for adapter in adapters(runtime):
        if kind in adapter.MODEL_TYPES:
            return adapter
    known = ", ".join(t for a in adapters(runtime) for t in a.MODEL_TYPES)
    raise ModelNotFoundError(
        f"{name_or_path!r} is a {kind!r} model; targets supported on {runtime}: {known}"
    )


def load_target(
    name_or_path: str,
    device: str = "cpu",
    dtype: torch.dtype | None = None,
    runtime: str = "torch",
) -> TargetAdapter[Any]:
    """Loads a target for decoding, in eval mode.

    Args:
        name_or_path: a bundled name, a local Hugging Face model directory, or a hub id.
        device: "cpu" or "cuda" (families that support it).
        dtype: parameter dtype; None: the family's default (float32 for Whisper, the
            checkpoint's own dtype for Qwen models).
        runtime: what runs it (`backends.RUNTIMES`): "torch", or "mnn" (Whisper, CPU).

    Raises:
        ModelNotFoundError: unknown model or family.
    """
    adapter = adapter_class(name_or_path, runtime)
    target: TargetAdapter[Any] = adapter.load(name_or_path, device, dtype)
    return target
