"""Whisper as a target: encoder once per window, then a lean decoder with a static KV cache.

The decoder takes the weights of a checkpoint (`WhisperNet`, transformers' names) but runs
its own forward pass, because speculative decoding needs two things the stock forward makes
expensive: a verify pass of k tokens that costs about as much as one token, and a rollback of
the KV cache that is free. Here the self-attention cache is a preallocated tensor and rollback
moves a length pointer. Greedy output is the same as `model.generate` (tests guard it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from as2d.audio.mel import log_mel
from as2d.backends.torch_backend import TorchBackend
from as2d.models.bundled import load_whisper_net
from as2d.models.linear import (
    Affine,
    Arithmetic,
    choose_arithmetic,
    decoder_linear,
    encoder_on_onednn,
    fast_bfloat16,
)
from as2d.models.tokenizer import WhisperTokenizer
from as2d.models.whisper_net import WhisperNet
from as2d.target import Backend, Encoded, Request, Target
from as2d.timestamps import Alignment
from as2d.types import N_SAMPLES

DEFAULT_DTYPE = {False: torch.float32, True: torch.float16}  # by "on a GPU"
ENCODER_FRAMES = N_SAMPLES // 320  # 1500 rows through the encoder's linear layers


@dataclass(frozen=True)
class _LayerNorm:
    weight: torch.Tensor
    bias: torch.Tensor
    eps: float

    @classmethod
    def of(cls, norm: torch.nn.LayerNorm) -> _LayerNorm:
        return cls(norm.weight.detach(), norm.bias.detach(), norm.eps)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


@dataclass(frozen=True)
class _Attention:
    q: Affine
    k: Affine
    v: Affine
    out: Affine

    @classmethod
    def of(cls, attn: Any, arithmetic: Arithmetic) -> _Attention:
        layers = (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj)
        return cls(*(decoder_linear(x.weight, x.bias, arithmetic) for x in layers))


@dataclass(frozen=True)
class _DecoderLayer:
    self_norm: _LayerNorm
    self_attn: _Attention
    cross_norm: _LayerNorm
    cross_attn: _Attention
    mlp_norm: _LayerNorm
    fc1: Affine
    fc2: Affine

    @classmethod
    def of(cls, layer: Any, arithmetic: Arithmetic) -> _DecoderLayer:
        return cls(
            _LayerNorm.of(layer.self_attn_layer_norm),
            _Attention.of(layer.self_attn, arithmetic),
            _LayerNorm.of(layer.encoder_attn_layer_norm),
            _Attention.of(layer.encoder_attn, arithmetic),
            _LayerNorm.of(layer.final_layer_norm),
            decoder_linear(layer.fc1.weight, layer.fc1.bias, arithmetic),
            decoder_linear(layer.fc2.weight, layer.fc2.bias, arithmetic),
        )


@dataclass
class EncodedAudio:
    """The encoder's output for one window, ready for the decoder."""

    hidden: torch.Tensor  # [1500, d_model]


class WhisperTarget:
    """Greedy-decoding target around a Whisper model: prefill, forward k tokens, roll back.

    Scores returned by `prefill` and `forward` already carry Whisper's token suppression
    (`suppress_tokens` at every position, `begin_suppress_tokens` at the first output
    position), so the greedy token is their argmax, as in `model.generate`.
    """

    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("whisper",)
    follows_requests = False  # transcribes or translates; cannot answer free requests
    takes_previous = True  # <|startofprev|> and earlier text before the prompt
    times_words = True  # word timings from cross-attention (`alignment`)
    leading_space = True  # output text starts with a space: " Hello"
    encoded_type = EncodedAudio  # what `encode` returns, and the store of prepared ones keeps

    def __init__(
        self,
        model: WhisperNet,
        tokenizer: WhisperTokenizer,
        approximate: bool = False,
    ) -> None:
        """`approximate`: cheaper arithmetic that changes the output, for drafters only (their
        drafts need not be exact, a target's output must be): on a CPU, the encoder in
        bfloat16 where the CPU has it natively (tiny.en's encoder 0.50 -> 0.21 s a window) and
        the decoder's linear layers in int8 (a step 8 -> 5 ms). A target keeps float32: its
        encoder's linear layers run on oneDNN (`EncoderLinear`, swapped into `model`), and
        oneDNN copies of the decoder's weights serve verify passes (`DecoderLinear`)."""
        dims = model.shape
        self.model = model.eval()
        self.device = model.device
        self.tokenizer = tokenizer
        self.eot_ids = frozenset({tokenizer.eot})
        self.max_length = dims.max_target_positions  # 448 decoder positions
        self.n_heads = dims.decoder_attention_heads
        self.head_dim = dims.d_model // self.n_heads
        self.n_mels = dims.num_mel_bins
        decoder = model.model.decoder
        self.embed_tokens = decoder.embed_tokens.weight.detach()  # [V, d]
        self.embed_positions = decoder.embed_positions.weight.detach()  # [448, d]
        self.dtype = model.proj_out.weight.dtype
        self.backend: Backend = TorchBackend(self.device, self.dtype)
        arithmetic = choose_arithmetic(model.proj_out.weight, approximate)
        self.layers = [_DecoderLayer.of(layer, arithmetic) for layer in decoder.layers]
        self.final_norm = _LayerNorm.of(decoder.layer_norm)
        self.proj = decoder_linear(model.proj_out.weight, None, arithmetic)  # [n, d] -> [n, V]
        self.suppress, self.begin_suppress = _suppression(model, model.proj_out.weight.shape[0])
        shape = (len(self.layers), self.n_heads, self.max_length, self.head_dim)
        self.self_k = torch.zeros(shape, dtype=self.dtype, device=self.device)  # [L,H,T,Dh]
        self.self_v = torch.zeros_like(self.self_k)
        self.cross_kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.length = 0  # positions held in the self-attention cache
        self.prompt_length = 0
        self.alignment_heads: dict[int, list[int]] = {}  # layer -> heads that follow the speech
        for layer, head in model.alignment_heads:
            self.alignment_heads.setdefault(layer, []).append(head)
        self._captured: list[torch.Tensor] | None = None  # `alignment`'s, while it runs
        self.encoder_dtype = self.dtype
        if approximate and self.device.type == "cpu" and fast_bfloat16():
            self.encoder_dtype = torch.bfloat16  # a drafter's only
            model.model.encoder.to(self.encoder_dtype)
        if arithmetic == "float32+rows":
            encoder_on_onednn(model.model.encoder.layers, ENCODER_FRAMES)

    @classmethod
    def load(
        cls,
        name_or_path: str,
        device: str = "cpu",
        dtype: torch.dtype | None = None,
        approximate: bool = False,
    ) -> WhisperTarget:
        """Loads a bundled name, local directory or hub id (see `load_whisper_net`).

        dtype None: float32 on the CPU, float16 on a GPU.
        """
        on_gpu = torch.device(device).type != "cpu"
        model, tokenizer = load_whisper_net(name_or_path, dtype or DEFAULT_DTYPE[on_gpu])
        return cls(model.to(device), tokenizer, approximate)

    def prompt(self, encoded: EncodedAudio, request: Request) -> list[int]:
        """Whisper's decoder prompt (`whisper_prompt`)."""
        return whisper_prompt(self.tokenizer, self.max_length, request)

    def language(self, encoded: EncodedAudio, given: str | None) -> str | None:
        """`given`, else the detected language (`spoken_language`)."""
        return spoken_language(self, self.tokenizer, encoded, given)

    @torch.inference_mode()
    def encode(
        self,
        audio: np.ndarray,
        between: Callable[[], object] | None = None,
        frames: int | None = None,
    ) -> EncodedAudio:
        """Log-mel features of a ≤ 30 s window (padded to 30 s) and the encoder forward.

        `between`: called before the encoder and before each of its layers. `frames`: the
        encoder reads only the first `frames` (even) log-mel frames, not Whisper's 3000: a
        drafter's input sized to its speech, whose output changes (drafts need not be exact).
        """
        feats = log_mel(audio, self.n_mels)[:, :, :frames]  # [1, n_mels, frames or 3000]
        feats = feats.to(self.device, self.encoder_dtype)
        encoder = self.model.model.encoder
        hooks = [] if between is None else _call_before_layers(encoder.layers, between)
        try:
            hidden = encoder(feats)[0]  # [1500, d]
        finally:
            for hook in hooks:
                hook.remove()
        return EncodedAudio(hidden.to(self.dtype))

    @torch.inference_mode()
    def prefill(self, encoded: EncodedAudio, prompt: Sequence[int]) -> torch.Tensor:
        """Start a window: cross-attention keys/values, then the prompt. Returns [V] scores."""
        scale = self.head_dim**-0.5
        self.cross_kv = [
            (
                (self._heads(layer.cross_attn.k(encoded.hidden)) * scale)
                .transpose(1, 2)
                .contiguous(),
                self._heads(layer.cross_attn.v(encoded.hidden)).contiguous(),
            )
            for layer in self.layers
        ]  # per layer: keys [H, Dh, 1500] pre-scaled and transposed, values [H, 1500, Dh]
        self.length = 0
        self.prompt_length = len(prompt)
        return self.forward(prompt)[-1]

    @torch.inference_mode()
    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        """Append `tokens` to the cache; return the scores for the position after each: [n, V]."""
        start = self.length
        x = self._decoder_pass(tokens)  # [n, d]
        return self._suppress(self.proj(self.final_norm(x)), start)

    def _decoder_pass(self, tokens: Sequence[int]) -> torch.Tensor:
        """Append `tokens` to the cache; return the last layer's output [n, d]."""
        n, start = len(tokens), self.length
        if start + n > self.max_length:
            raise ValueError(f"decoder context full: {start} + {n} > {self.max_length}")
        ids = torch.tensor(tokens, dtype=torch.long, device=self.device)
        x = self.embed_tokens[ids] + self.embed_positions[start : start + n]  # [n, d]
        mask = _causal_mask(n, start, self.device)
        for i, layer in enumerate(self.layers):
            x = x + self._self_attention(i, layer, layer.self_norm(x), start, mask)
            x = x + self._cross_attention(i, layer, layer.cross_norm(x))
            x = x + layer.fc2(F.gelu(layer.fc1(layer.mlp_norm(x))))
        self.length = start + n
        return x

    @torch.inference_mode()
    def alignment(
        self, prompt: Sequence[int], tokens: Sequence[int], frames: int, probabilities: bool
    ) -> Alignment:
        """Cross-attention of the alignment heads over a window's output, for word timings.

        Call it after the window is decoded (the cross-attention cache is still the window's):
        one teacher-forced pass over the prompt's start of transcript, `tokens` and
        end-of-text, as openai-whisper aligns (earlier text, `<|startofprev|>`, is left out).
        `probabilities`: also each token's, from scores computed as decoding computed them
        (the projection onto the vocabulary is a third of the pass).
        """
        start = list(prompt).index(self.tokenizer.sot)
        sequence = [*prompt[start:], *tokens, self.tokenizer.eot][: self.max_length]
        self.length, self.prompt_length = 0, len(prompt) - start
        self._captured = []
        try:
            x = self._decoder_pass(sequence)  # [rows, d]
            weights = torch.cat(self._captured)[:, :, :frames]  # [heads, rows, frames]
        finally:
            self._captured = None
        first_row = self.prompt_length - 1  # reads the last prompt token
        chance = np.zeros(len(tokens), dtype=np.float32)
        if probabilities:
            rows = x[first_row : first_row + len(tokens)]
            scores = self._suppress(self.proj(self.final_norm(rows)), first_row).float()
            ids = torch.tensor(tokens, dtype=torch.long, device=self.device)
            chance = scores.softmax(-1)[torch.arange(len(tokens)), ids].cpu().numpy()
        return Alignment(weights.float().cpu().numpy(), chance, first_row)

    @torch.inference_mode()
    def detect_language(self, encoded: EncodedAudio) -> str:
        """The most likely language code after `<|startoftranscript|>` (multilingual models)."""
        return detect_language(self, self.tokenizer, encoded)

    def rollback(self, length: int) -> None:
        """Forget every cached position from `length` on (a rejected verify suffix)."""
        if not self.prompt_length <= length <= self.length:
            raise ValueError(f"cannot roll back to {length} (holding {self.length})")
        self.length = length

    def _self_attention(
        self, i: int, layer: _DecoderLayer, x: torch.Tensor, start: int, mask: torch.Tensor | None
    ) -> torch.Tensor:
        end = start + x.shape[0]
        self.self_k[i, :, start:end] = self._heads(layer.self_attn.k(x))
        self.self_v[i, :, start:end] = self._heads(layer.self_attn.v(x))
        q = self._heads(layer.self_attn.q(x)) * self.head_dim**-0.5  # [H, n, Dh]
        weights = q @ self.self_k[i, :, :end].transpose(1, 2)  # [H, n, end]
        if mask is not None:
            weights = weights.masked_fill(mask, -torch.inf)
        out = weights.softmax(-1) @ self.self_v[i, :, :end]  # [H, n, Dh]
        return layer.self_attn.out(self._merge(out))

    def _cross_attention(self, i: int, layer: _DecoderLayer, x: torch.Tensor) -> torch.Tensor:
        keys_t, values = self.cross_kv[i]
        weights = self._heads(layer.cross_attn.q(x)) @ keys_t  # [H, n, 1500]
        if self._captured is not None and i in self.alignment_heads:
            self._captured.append(weights[self.alignment_heads[i]])
        out = weights.softmax(-1) @ values  # [H, n, Dh]
        return layer.cross_attn.out(self._merge(out))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """[n, d] -> [H, n, Dh]"""
        return x.view(x.shape[0], self.n_heads, self.head_dim).transpose(0, 1)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        """[H, n, Dh] -> [n, d]"""
        return x.transpose(0, 1).reshape(x.shape[1], -1)

    def _suppress(self, scores: torch.Tensor, start: int) -> torch.Tensor:
        """`suppress` for rows from position `start` on."""
        return suppress(scores, self.suppress, self.begin_suppress, self.prompt_length - 1 - start)


def _call_before_layers(layers: Iterable[torch.nn.Module], call: Callable[[], object]) -> list[Any]:
    """Calls `call` now and before every forward of each layer; returns the hooks' handles."""

    def hook(*_: object) -> None:  # returns None: a pre-hook's result would replace the inputs
        call()

    call()
    return [layer.register_forward_pre_hook(hook) for layer in layers]


def _causal_mask(n: int, start: int, device: torch.device) -> torch.Tensor | None:
    """[n, start + n] boolean mask, True where new token i must not look (later new tokens)."""
    if n == 1:
        return None
    return torch.ones(n, start + n, dtype=torch.bool, device=device).triu(diagonal=start + 1)


def _suppression(model: WhisperNet, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids that greedy decoding never emits, everywhere and at the first position."""
    always = [t for t in model.suppression.suppress_tokens if t < vocab]
    begin = [t for t in model.suppression.begin_suppress_tokens if t < vocab]
    return (
        torch.tensor(always, dtype=torch.long, device=model.device),
        torch.tensor(begin, dtype=torch.long, device=model.device),
    )


def whisper_prompt(tokenizer: WhisperTokenizer, max_length: int, request: Request) -> list[int]:
    """Whisper's decoder prompt: earlier text if given (`Request.previous`), start of
    transcript, language, task, no timestamps (every Whisper target's, whatever its runtime).

    Raises:
        ValueError: task "ask" (Whisper cannot follow requests).
    """
    if request.task == "ask":
        raise ValueError("Whisper cannot follow requests (task 'ask')")
    prompt = tokenizer.prompt(request.language, request.task)
    if not (request.previous and request.previous.strip()):
        return prompt
    # As openai-whisper conditions on earlier text: <|startofprev|>, the text's last tokens
    # (at most half the context), then the usual prompt.
    previous = tokenizer.encode(" " + request.previous.strip())
    return [tokenizer.sot_prev, *previous[-(max_length // 2 - 1) :], *prompt]


def spoken_language(
    target: Target[Encoded], tokenizer: WhisperTokenizer, encoded: Encoded, given: str | None
) -> str | None:
    """`given`, else the window's detected language (multilingual models; English-only ones
    say "en", the only language they decode)."""
    if given is not None:
        return given
    if not tokenizer.multilingual:
        return "en"
    return detect_language(target, tokenizer, encoded)


def detect_language(target: Target[Encoded], tokenizer: WhisperTokenizer, encoded: Encoded) -> str:
    """The most likely language code after `<|startoftranscript|>` (multilingual models)."""
    codes = tokenizer.languages
    scores = target.prefill(encoded, [tokenizer.sot])  # [V]
    ids = torch.tensor(list(codes.values()), device=scores.device)
    return list(codes)[int(scores[ids].argmax())]


def suppress(
    scores: torch.Tensor, always: torch.Tensor, begin: torch.Tensor, first: int
) -> torch.Tensor:
    """Whisper's token suppression on a pass's scores, in place, as `model.generate` applies
    it: `always` at every row, `begin` also at row `first` (the one that predicts the first
    output token: the prompt's length - 1 - the pass's start; outside the pass: none).

    scores: [n, V]; always, begin: [S] token ids.
    """
    scores[:, always] = -torch.inf
    if 0 <= first < scores.shape[0]:
        scores[first, begin] = -torch.inf
    return scores
