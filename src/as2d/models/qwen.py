"""Audio LLM targets: Qwen2-Audio and the Qwen2.5-Omni thinker, text output.

Both are a Whisper-style audio encoder whose frames replace `<|AUDIO|>` placeholders in a
chat prompt, followed by a Qwen2 decoder. A window is decoded like this:

    encode:  log-mel features of the window, then the audio tower over them: one
             embedding per `<|AUDIO|>` placeholder
    prefill: the prompt's embeddings, audio embeddings in the placeholders' places, through
             the model's own forward into a fresh `DynamicCache`
    forward: k tokens on top of the cache; scores for the position after each
    rollback: `DynamicCache.crop`

Prompt and features are the checkpoint's own, as its `transformers` processor builds them:
the processor's chat template (`chat_template.jinja`, or the older `chat_template.json`)
through `apply_chat_template`, and the feature extractor of `preprocessor_config.json`. So a
base or fine-tuned checkpoint gets the prompt it was trained with. A checkpoint without them
gets as2d's built-in prompt or features, with a one-line warning (`qwen_checkpoint.py` reads
them).

The forward passes are the `transformers` modules themselves (`model.model` then
`model.lm_head`), so positions (plain for Qwen2-Audio, multimodal rope for the Omni thinker)
are the ones `generate` uses; tests check that greedy output equals `generate`'s, and prompt
and features the processor's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from transformers import (
    AutoConfig,
    DynamicCache,
    PreTrainedModel,
    Qwen2_5OmniForConditionalGeneration,
    Qwen2_5OmniThinkerForConditionalGeneration,
    Qwen2AudioForConditionalGeneration,
)
from transformers.masking_utils import create_bidirectional_mask

from as2d.backends.torch_backend import TorchBackend
from as2d.models.qwen_checkpoint import (
    ChatProcessing,
    device_map,
    language_name,
    load_processing,
    warn_unless_greedy,
)
from as2d.target import Backend, Request
from as2d.types import N_SAMPLES, SAMPLE_RATE

MAX_NEW_TOKENS = 512  # output tokens per window unless the generation config says otherwise
END_TOKENS = ("<|im_end|>", "<|endoftext|>")  # end of the assistant turn, end of text
AUDIO_TOKEN = "<|AUDIO|>"  # placeholder, repeated once per audio frame the encoder emits
TASK_REQUESTS = {  # {spoken}: "French " where the request names the language, else ""
    "transcribe": "Transcribe the {spoken}audio.",
    "translate": "Translate the {spoken}speech into English.",
}


@dataclass
class EncodedWindow:
    """One window's audio features and the audio tower's output, ready for the prefill."""

    features: torch.Tensor  # [1, n_mels, 3000] log-mel, padded to 30 s
    mask: torch.Tensor  # [1, 3000] 1 on frames of the window's audio, 0 on padding
    audio: torch.Tensor  # [audio_tokens, d] audio tower output, in the decoder's width

    @property
    def audio_tokens(self) -> int:
        """How many `<|AUDIO|>` placeholders the window's audio fills."""
        return int(self.audio.shape[0])


class ChatAudioTarget(ABC):
    """Greedy-decoding target around a Qwen audio LLM: prefill, forward k tokens, roll back.

    Subclasses own one family: its model class, `config.model_type` values, audio tower call
    and built-in chat template (for checkpoints without one).
    """

    MODEL_TYPES: ClassVar[tuple[str, ...]] = ()
    MODEL_CLASS: ClassVar[Any] = None
    BUILTIN_TEMPLATE: ClassVar[str] = ""  # Jinja chat template for checkpoints without one
    follows_requests = True  # answers free requests (`ask`)
    takes_previous = False  # its prompt is the request; earlier text has no place in it
    times_words = False  # no cross-attention over the audio to time words with
    leading_space = False  # output starts "Hello", not Whisper's " Hello"
    encoded_type = EncodedWindow  # what `encode` returns, and the store of prepared ones keeps

    def __init__(self, model: PreTrainedModel, processing: ChatProcessing) -> None:
        self.model = model.eval()
        self.tokenizer = processing.tokenizer
        self.chat_template = processing.chat_template
        self.features = processing.features
        self.device = model.device
        self.dtype = model.dtype
        self.backend: Backend = TorchBackend(self.device, self.dtype)
        ends = (self.tokenizer.token_id(t) for t in END_TOKENS)
        self.eot_ids = frozenset(i for i in ends if i is not None)
        audio_id = self.tokenizer.token_id(AUDIO_TOKEN)
        if not self.eot_ids or audio_id is None:
            raise ValueError(f"tokenizer lacks {AUDIO_TOKEN} or {' / '.join(END_TOKENS)}")
        self.audio_id = audio_id
        text_config = model.config.get_text_config()
        self.max_positions = text_config.max_position_embeddings
        self.max_new_tokens = model.generation_config.max_new_tokens or MAX_NEW_TOKENS
        self.max_length = self.max_positions  # set per window by prefill
        self.cache = DynamicCache(config=text_config)
        self.length = 0  # positions held in the cache
        self.prompt_length = 0

    @classmethod
    def load(cls, name_or_path: str, device: str = "cpu", dtype: torch.dtype | None = None) -> Any:
        """Loads the model and its processor files from a local directory or a Hugging Face id.

        On a GPU the weights go from the safetensors files straight to the device.
        """
        local = Path(name_or_path).is_dir()
        model = cls.MODEL_CLASS.from_pretrained(
            name_or_path,
            dtype=dtype or "auto",
            local_files_only=local,
            device_map=device_map(device),
        )
        return cls._from_model(model, name_or_path, local)

    @classmethod
    def _from_model(cls, model: PreTrainedModel, name_or_path: str, local: bool) -> Any:
        """The target around a loaded model, with its checkpoint's processor files."""
        warn_unless_greedy(model.generation_config, name_or_path)
        mels = model.config.audio_config.num_mel_bins
        return cls(model, load_processing(name_or_path, local, cls.BUILTIN_TEMPLATE, mels))

    @torch.inference_mode()
    def encode(
        self, audio: np.ndarray, between: Callable[[], object] | None = None
    ) -> EncodedWindow:
        """Log-mel features of a ≤ 30 s window, as the processor computes them, and the audio
        tower over them (encode time covers it; the prefill runs only the decoder).

        Features are padded to 30 s: the processor pads to its `n_samples`, 300 s for
        Qwen2.5-Omni, whose audio tower drops every padding frame anyway (the window's frames
        are the same either way). `between` is called once, before.
        """
        if between is not None:
            between()
        out = self.features(
            audio[:N_SAMPLES],
            sampling_rate=SAMPLE_RATE,
            padding="max_length",
            max_length=min(N_SAMPLES, self.features.n_samples),
            return_attention_mask=True,
            return_tensors="pt",
        )
        mask = out.attention_mask.to(self.device)  # [1, 3000]
        features = out.input_features.to(self.device, self.dtype)  # [1, n_mels, 3000]
        return EncodedWindow(features, mask, self._audio_features(features, mask))

    @abstractmethod
    def _audio_features(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[1, n_mels, 3000] features, [1, 3000] mask -> [audio_tokens, d] audio embeddings
        (each family calls its own audio tower)."""

    def prompt(self, encoded: EncodedWindow, request: Request) -> list[int]:
        """The checkpoint's chat prompt for one user turn (the audio, then the request) and the
        assistant's start, with `<|AUDIO|>` expanded to one placeholder per audio frame.
        """
        ids = self.tokenizer.encode(self.prompt_text(request))
        if ids.count(self.audio_id) != 1:
            raise ValueError(
                f"the chat template gives {ids.count(self.audio_id)} {AUDIO_TOKEN}, not 1"
            )
        at = ids.index(self.audio_id)
        return [*ids[:at], *[self.audio_id] * encoded.audio_tokens, *ids[at + 1 :]]

    def prompt_text(self, request: Request) -> str:
        """The chat template rendered for `request`, one `<|AUDIO|>` in it.

        No system turn is given: the template's default is the one the checkpoint was trained
        with (Qwen2.5-Omni's persona prompt is needed only for speech output).
        """
        content = [{"type": "audio"}, {"type": "text", "text": self.request_text(request)}]
        text = self.tokenizer.hf.apply_chat_template(
            [{"role": "user", "content": content}],
            chat_template=self.chat_template,
            add_generation_prompt=True,
            tokenize=False,
        )
        return str(text)

    def request_text(self, request: Request) -> str:
        """What the user asks: the request itself (`ask`), else the task's request, naming the
        spoken language where it is given ("Transcribe the French audio.")."""
        if request.task == "ask":
            if not request.text:
                raise ValueError("the ask task needs a request")
            return request.text
        language = language_name(request.language)
        return TASK_REQUESTS[request.task].format(spoken=f"{language} " if language else "")

    def language(self, encoded: EncodedWindow, given: str | None) -> str | None:
        """The language as given: these models take it from the request, not a token."""
        return given

    @torch.inference_mode()
    def prefill(self, encoded: EncodedWindow, prompt: Sequence[int]) -> torch.Tensor:
        """Start a window: the prompt, audio embeddings in place, into a fresh cache; [V] scores."""
        self.cache = DynamicCache(config=self.model.config.get_text_config())
        self.length = 0
        self.prompt_length = len(prompt)
        self.max_length = min(self.max_positions, len(prompt) + self.max_new_tokens)
        ids = torch.tensor([list(prompt)], dtype=torch.long, device=self.device)  # [1, n]
        embeds = self.model.get_input_embeddings()(ids)  # [1, n, d]
        slots = (ids == self.audio_id).unsqueeze(-1)  # [1, n, 1]
        embeds = embeds.masked_scatter(slots, encoded.audio.to(embeds.dtype))
        hidden = self.model.model(
            input_ids=ids,  # with the mask, the Omni thinker's multimodal positions
            inputs_embeds=embeds,
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
    """`Qwen2AudioForConditionalGeneration` (Qwen2-Audio-7B and -Instruct)."""

    MODEL_TYPES = ("qwen2_audio",)
    MODEL_CLASS = Qwen2AudioForConditionalGeneration
    # The prompt of Qwen2AudioProcessor's default template (Qwen2-Audio-7B-Instruct's).
    BUILTIN_TEMPLATE = (
        "{% for message in messages %}"
        "{% if loop.first and message['role'] != 'system' %}"
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
        "<|im_start|>{{ message['role'] }}\n"
        "{% for part in message['content'] %}"
        "{% if part['type'] == 'audio' %}Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\n"
        "{% else %}{{ part['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )

    def _audio_features(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The audio tower over all 3000 frames, attending only to the window's, then the
        projector; as `Qwen2AudioModel.forward` computes them before merging."""
        model: Any = self.model.model
        lengths, tokens = model.audio_tower._get_feat_extract_output_lengths(mask.sum(-1))
        frames = (features.shape[-1] - 2) // 2 + 1  # 1500 encoder positions
        valid = torch.arange(frames, device=mask.device)[None, :] < lengths[:, None]  # [1, 1500]
        attention = create_bidirectional_mask(
            config=model.audio_tower.config,
            inputs_embeds=features.new_zeros(1, frames, 1),
            attention_mask=valid.long(),
        )
        hidden = model.audio_tower(features, attention_mask=attention).last_hidden_state
        return model.multi_modal_projector(hidden)[0, : int(tokens[0])]  # [audio_tokens, d]


class OmniThinkerTarget(ChatAudioTarget):
    """The text-output half of Qwen2.5-Omni (`Qwen2_5OmniThinkerForConditionalGeneration`).

    A full Qwen2.5-Omni checkpoint (`model_type` "qwen2_5_omni") loads its thinker only.
    """

    MODEL_TYPES = ("qwen2_5_omni_thinker", "qwen2_5_omni")
    MODEL_CLASS = Qwen2_5OmniThinkerForConditionalGeneration
    # as2d's prompt before checkpoints brought their own: Qwen2.5-Omni's template, with the
    # persona system prompt of its model card.
    BUILTIN_TEMPLATE = (
        "<|im_start|>system\nYou are Qwen, a virtual human developed by the Qwen Team, Alibaba "
        "Group, capable of perceiving auditory and visual inputs, as well as generating text and "
        "speech.<|im_end|>\n"
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{% for part in message['content'] %}"
        "{% if part['type'] == 'audio' %}<|audio_bos|><|AUDIO|><|audio_eos|>"
        "{% else %}{{ part['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )

    @classmethod
    def load(cls, name_or_path: str, device: str = "cpu", dtype: torch.dtype | None = None) -> Any:
        """Loads a thinker checkpoint, or the thinker of a full Qwen2.5-Omni checkpoint (its
        talker and vocoder weights are not read)."""
        local = Path(name_or_path).is_dir()
        config = AutoConfig.from_pretrained(name_or_path, local_files_only=local)
        if config.model_type == "qwen2_5_omni_thinker":
            return super().load(name_or_path, device, dtype)
        full = Qwen2_5OmniForConditionalGeneration.from_pretrained(
            name_or_path,
            dtype=dtype or "auto",
            local_files_only=local,
            enable_audio_output=False,
            device_map=device_map(device),
        )
        full.thinker.generation_config = full.generation_config  # the checkpoint's file
        return cls._from_model(full.thinker, name_or_path, local)

    def _audio_features(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The audio tower over the window's frames only (padding frames dropped)."""
        model: Any = self.model.model
        return model.get_audio_features(features, mask).last_hidden_state  # [audio_tokens, d]
