"""Audio LLM targets: Qwen2-Audio (Instruct) and the Qwen2.5-Omni thinker, text output.

Both are a Whisper-style audio encoder whose frames replace `<|AUDIO|>` placeholders in a
ChatML prompt, followed by a Qwen2 decoder. A window is decoded like this:

    encode:  log-mel features of the window (padded to 30 s) and its audio-token count
    prefill: the model's own forward over the chat prompt (system, audio turn with the
             request, assistant start) with the features: audio encoder + decoder, into
             a fresh `DynamicCache`
    forward: k tokens on top of the cache; scores for the position after each
    rollback: `DynamicCache.crop`

The forward passes are the `transformers` modules themselves (`model.model` then
`model.lm_head`), so positions (plain for Qwen2-Audio, multimodal rope for the Omni thinker)
are the ones `generate` uses; tests check that greedy output equals `generate`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from transformers import (
    AutoConfig,
    AutoTokenizer,
    DynamicCache,
    PreTrainedModel,
    Qwen2_5OmniForConditionalGeneration,
    Qwen2_5OmniThinkerForConditionalGeneration,
    Qwen2AudioForConditionalGeneration,
    WhisperFeatureExtractor,
)

from as2d.engine.target import Request
from as2d.types import MAX_WINDOW_S, SAMPLE_RATE

N_SAMPLES = int(MAX_WINDOW_S * SAMPLE_RATE)  # 480_000 samples = 3000 mel frames
MAX_NEW_TOKENS = 512  # output tokens per window unless the generation config says otherwise
END_TOKENS = ("<|im_end|>", "<|endoftext|>")  # end of the assistant turn, end of text
AUDIO_TOKEN = "<|AUDIO|>"  # placeholder, repeated once per audio frame the encoder emits
TASK_REQUESTS = {
    "transcribe": "Transcribe the audio.",
    "translate": "Translate the speech into English.",
}


@dataclass
class EncodedWindow:
    """One window's audio features, ready for the prefill."""

    features: torch.Tensor  # [1, n_mels, 3000] log-mel, padded to 30 s
    mask: torch.Tensor  # [1, 3000] 1 on frames of the window's audio, 0 on padding
    audio_tokens: int  # how many <|AUDIO|> placeholders its encoder output fills


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


class ChatAudioTarget:
    """Greedy-decoding target around a Qwen audio LLM: prefill, forward k tokens, roll back.

    Subclasses own one family: its model class, `config.model_type` values and chat text.
    """

    MODEL_TYPES: ClassVar[tuple[str, ...]] = ()
    MODEL_CLASS: ClassVar[Any] = None
    SYSTEM: ClassVar[str] = "You are a helpful assistant."
    AUDIO_TURN: ClassVar[str] = "<|audio_bos|><|AUDIO|><|audio_eos|>"  # before the request
    follows_requests = True  # answers free requests (`ask`)
    leading_space = False  # output starts "Hello", not Whisper's " Hello"

    def __init__(self, model: PreTrainedModel, tokenizer: HFTokenizer) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = model.device
        self.dtype = model.dtype
        self.eot_ids = frozenset(i for t in END_TOKENS if (i := tokenizer.token_id(t)) is not None)
        audio_id = tokenizer.token_id(AUDIO_TOKEN)
        if not self.eot_ids or audio_id is None:
            raise ValueError(f"tokenizer lacks {AUDIO_TOKEN} or {' / '.join(END_TOKENS)}")
        self.audio_id = audio_id
        text_config = model.config.get_text_config()
        self.max_positions = text_config.max_position_embeddings
        self.max_new_tokens = model.generation_config.max_new_tokens or MAX_NEW_TOKENS
        self.max_length = self.max_positions  # set per window by prefill
        mels = model.config.audio_config.num_mel_bins
        self.features = WhisperFeatureExtractor(feature_size=mels, sampling_rate=SAMPLE_RATE)
        self.cache = DynamicCache(config=text_config)
        self.length = 0  # positions held in the cache
        self.prompt_length = 0

    @classmethod
    def load(cls, name_or_path: str, device: str = "cpu", dtype: torch.dtype | None = None) -> Any:
        """Loads the model and tokenizer from a local directory or a Hugging Face id."""
        local = Path(name_or_path).is_dir()
        model = cls.MODEL_CLASS.from_pretrained(
            name_or_path, dtype=dtype or "auto", local_files_only=local
        ).to(device)
        hf_tokenizer = AutoTokenizer.from_pretrained(name_or_path, local_files_only=local)
        return cls(model, HFTokenizer(hf_tokenizer))

    @torch.inference_mode()
    def encode(self, audio: np.ndarray, between: Callable[[], None] | None = None) -> EncodedWindow:
        """Log-mel features of a ≤ 30 s window, padded to 30 s, as the Qwen processors do.

        The audio tower runs in `prefill`, so `between` is only called once, now.
        """
        if between is not None:
            between()
        out = self.features(
            audio[:N_SAMPLES],
            sampling_rate=SAMPLE_RATE,
            padding="max_length",
            return_attention_mask=True,
            return_tensors="pt",
        )
        mask = out.attention_mask.to(self.device)  # [1, 3000]
        audio_tower: Any = self.model.model.audio_tower
        _, tokens = audio_tower._get_feat_extract_output_lengths(mask.sum(-1))
        features = out.input_features.to(self.device, self.model.dtype)
        return EncodedWindow(features, mask, int(tokens[0]))

    def prompt(self, encoded: EncodedWindow, request: Request) -> list[int]:
        """The chat prompt: system turn, user turn (audio, then the request), assistant start.

        `<|AUDIO|>` is expanded to one placeholder per audio frame of the window.
        """
        text = (
            f"<|im_start|>system\n{self.SYSTEM}<|im_end|>\n"
            f"<|im_start|>user\n{self.AUDIO_TURN}{self.request_text(request)}<|im_end|>\n"
            "<|im_start|>assistant\n"
        )
        ids = self.tokenizer.encode(text)
        at = ids.index(self.audio_id)
        return [*ids[:at], *[self.audio_id] * encoded.audio_tokens, *ids[at + 1 :]]

    def request_text(self, request: Request) -> str:
        """What the user asks: the request itself (`ask`), else the task's fixed request."""
        if request.task == "ask":
            if not request.text:
                raise ValueError("the ask task needs a request")
            return request.text
        return TASK_REQUESTS[request.task]

    def language(self, encoded: EncodedWindow, given: str | None) -> str | None:
        """The language as given: these models take it from the request, not a token."""
        return given

    @torch.inference_mode()
    def prefill(self, encoded: EncodedWindow, prompt: Sequence[int]) -> torch.Tensor:
        """Start a window: audio encoder and the prompt into a fresh cache. Returns [V] scores."""
        self.cache = DynamicCache(config=self.model.config.get_text_config())
        self.length = 0
        self.prompt_length = len(prompt)
        self.max_length = min(self.max_positions, len(prompt) + self.max_new_tokens)
        ids = torch.tensor([list(prompt)], dtype=torch.long, device=self.device)  # [1, n]
        hidden = self.model.model(
            input_ids=ids,
            input_features=encoded.features,
            feature_attention_mask=encoded.mask,
            attention_mask=torch.ones_like(ids),
            cache=self.cache,
            use_cache=True,
        ).last_hidden_state  # [1, n, d]
        self.length = len(prompt)
        return self._scores(hidden[0, -1:])[0]

    @torch.inference_mode()
    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        """Append `tokens` to the cache; return the scores for the position after each: [n, V]."""
        n = len(tokens)
        if self.length + n > self.max_positions:
            raise ValueError(f"context full: {self.length} + {n} > {self.max_positions}")
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)  # [1, n]
        hidden = self.model.model(input_ids=ids, cache=self.cache, use_cache=True)
        self.length += n
        return self._scores(hidden.last_hidden_state[0])

    def rollback(self, length: int) -> None:
        """Forget every cached position from `length` on (a rejected verify suffix)."""
        if not self.prompt_length <= length <= self.length:
            raise ValueError(f"cannot roll back to {length} (holding {self.length})")
        if length < self.length:
            self.cache.crop(length - self.length)  # a negative count: positions to drop
        self.length = length

    def _scores(self, hidden: torch.Tensor) -> torch.Tensor:
        """[n, d] -> [n, V] float32 logits."""
        return self.model.lm_head(hidden).float()


class Qwen2AudioTarget(ChatAudioTarget):
    """`Qwen2AudioForConditionalGeneration`, prompted as Qwen2-Audio-7B-Instruct's template."""

    MODEL_TYPES = ("qwen2_audio",)
    MODEL_CLASS = Qwen2AudioForConditionalGeneration
    AUDIO_TURN = "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\n"


class OmniThinkerTarget(ChatAudioTarget):
    """The text-output half of Qwen2.5-Omni (`Qwen2_5OmniThinkerForConditionalGeneration`).

    A full Qwen2.5-Omni checkpoint (`model_type` "qwen2_5_omni") loads its thinker only.
    """

    MODEL_TYPES = ("qwen2_5_omni_thinker", "qwen2_5_omni")
    MODEL_CLASS = Qwen2_5OmniThinkerForConditionalGeneration
    SYSTEM = (
        "You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable of "
        "perceiving auditory and visual inputs, as well as generating text and speech."
    )

    @classmethod
    def load(cls, name_or_path: str, device: str = "cpu", dtype: torch.dtype | None = None) -> Any:
        """Loads a thinker checkpoint, or the thinker of a full Qwen2.5-Omni checkpoint."""
        local = Path(name_or_path).is_dir()
        config = AutoConfig.from_pretrained(name_or_path, local_files_only=local)
        if config.model_type == "qwen2_5_omni_thinker":
            return super().load(name_or_path, device, dtype)
        full = Qwen2_5OmniForConditionalGeneration.from_pretrained(
            name_or_path, dtype=dtype or "auto", local_files_only=local, enable_audio_output=False
        )
        hf_tokenizer = AutoTokenizer.from_pretrained(name_or_path, local_files_only=local)
        return cls(full.thinker.to(device), HFTokenizer(hf_tokenizer))
