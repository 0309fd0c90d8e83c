"""What a Qwen audio checkpoint defines besides its weights, read the way its `transformers`
processor reads it: tokenizer, chat template, feature extractor, generation config, and how
its weights reach the device. `qwen.py` builds the targets from these."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import (
    AutoFeatureExtractor,
    AutoTokenizer,
    GenerationConfig,
    WhisperFeatureExtractor,
)
from transformers.models.whisper.tokenization_whisper import LANGUAGES
from transformers.processing_utils import ProcessorMixin

from as2d.types import SAMPLE_RATE


class HFTokenizer:
    """A Hugging Face tokenizer as the engine uses it: plain text in, plain text out."""

    def __init__(self, tokenizer: Any) -> None:
        self.hf = tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` without any special token added (`<|...|>` stays special)."""
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens dropped."""
        return str(self.hf.decode(list(ids), skip_special_tokens=True))

    def token_id(self, token: str) -> int | None:
        """Id of a special token such as `<|im_end|>`; None if the vocabulary lacks it."""
        found = self.hf.convert_tokens_to_ids(token)  # the unknown token's id if absent
        known = isinstance(found, int) and self.hf.convert_ids_to_tokens(found) == token
        return found if known else None


@dataclass(frozen=True)
class ChatProcessing:
    """What a checkpoint's processor files define besides its weights."""

    tokenizer: HFTokenizer
    chat_template: str  # Jinja, rendered by `apply_chat_template`
    features: Any  # Whisper log-mel feature extractor, as in preprocessor_config.json


def device_map(device: str) -> str | None:
    """`from_pretrained`'s device_map: a GPU loads the safetensors shards straight into its
    memory, no copy through the host; the CPU keeps the default (the model is built on the
    meta device, then takes the tensors read from the files, so no second copy either).

    transformers 5 always loads that way (`low_cpu_mem_usage` is gone), so nothing else is
    needed.
    """
    return None if torch.device(device).type == "cpu" else device


def load_processing(
    name_or_path: str, local: bool, builtin_template: str, mel_bins: int
) -> ChatProcessing:
    """The tokenizer, chat template and feature extractor of a checkpoint, as its processor
    loads them.

    Without a chat template: `builtin_template`; without `preprocessor_config.json`: Whisper
    features of `mel_bins` bins; either with one warning line. The tokenizer's own template
    (in `tokenizer_config.json`) is no fallback: the processor does not use it, and Qwen's is
    text-only ChatML with no place for audio.
    """
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, local_files_only=local)
    template = processor_chat_template(name_or_path, local)
    try:
        features = AutoFeatureExtractor.from_pretrained(name_or_path, local_files_only=local)
    except OSError:
        features = None
    lacks = {}  # what the checkpoint lacks: what as2d uses instead
    if template is None:
        lacks["chat template"] = "prompt"
    if features is None:
        lacks["preprocessor_config.json"] = "Whisper features"
    if lacks:
        warnings.warn(
            f"as2d: {name_or_path} has no {' and no '.join(lacks)}; "
            f"using as2d's built-in {' and '.join(lacks.values())}",
            UserWarning,
            stacklevel=4,
        )
    if features is None:
        features = WhisperFeatureExtractor(feature_size=mel_bins, sampling_rate=SAMPLE_RATE)
    if features.sampling_rate != SAMPLE_RATE:
        raise ValueError(
            f"{name_or_path} takes {features.sampling_rate} Hz audio, not {SAMPLE_RATE}"
        )
    return ChatProcessing(HFTokenizer(tokenizer), template or builtin_template, features)


def processor_chat_template(name_or_path: str, local: bool) -> str | None:
    """The chat template the checkpoint's processor uses (`chat_template.jinja`, the legacy
    `chat_template.json`, or the default of `chat_templates/`); None where it has none."""
    processor_dict, _ = ProcessorMixin.get_processor_dict(name_or_path, local_files_only=local)
    template = processor_dict.get("chat_template")
    if isinstance(template, dict):
        template = template.get("default")
    return template if isinstance(template, str) else None


def warn_unless_greedy(config: GenerationConfig, name_or_path: str) -> None:
    """Warns, in one line, when the checkpoint's generation config would not decode greedily:
    `generate` would sample, search or penalise repeats, and as2d's output is greedy."""
    found = not_greedy(config)
    if found:
        warnings.warn(
            f"as2d: the generation config of {name_or_path} ({', '.join(found)}) does not "
            "decode greedily; as2d decodes greedily and ignores it",
            UserWarning,
            stacklevel=4,
        )


def not_greedy(config: GenerationConfig) -> list[str]:
    """The settings of `config` that make `generate` differ from greedy decoding.

    Example:
        GenerationConfig(do_sample=True, top_p=0.5, repetition_penalty=1.1)
        -> ["do_sample=True", "repetition_penalty=1.1"]  (top_p only acts through sampling)
    """
    found = []
    if config.do_sample:
        found.append("do_sample=True")
    if (config.num_beams or 1) > 1:
        found.append(f"num_beams={config.num_beams}")
    if config.repetition_penalty not in (None, 1.0):
        found.append(f"repetition_penalty={config.repetition_penalty}")
    if config.no_repeat_ngram_size:
        found.append(f"no_repeat_ngram_size={config.no_repeat_ngram_size}")
    return found


def language_name(code: str | None) -> str | None:
    """ "fr" -> "French" (Whisper's language codes); a name or an unknown code stays as given."""
    if code is None:
        return None
    name = LANGUAGES.get(code.lower())
    return name.title() if name else code
