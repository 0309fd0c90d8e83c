"""Conventional speculative decoding's drafter: a small model drafting from the target's prefix.

Unlike as2d's drafter process, this drafter is coupled to the target (DESIGN.md, Why it
works): every step it is conditioned on the target's verified tokens, drafts k tokens
greedily and waits for their verification. Its KV cache is re-synchronised, never
recomputed: it keeps the longest prefix of its tokens that the verified output still agrees
with, and only the rest (typically the target's correction, one or two tokens) is fed.

When the drafter's vocabulary differs from the target's (tiny.en is English GPT-2 BPE, base
is multilingual), tokens cross over through text, as transformers' universal assisted
generation does: the verified text is spelled in drafter tokens and the drafted text is
encoded with the target's tokenizer. Two boundaries need care:

- drafter side: the drafter's own earlier tokens are kept while their bytes spell the
  verified text, but never up to the middle of a word (a pre-token of GPT-2's pattern): the
  unfinished word is encoded again whole, so the drafter sees the split it would make itself;
- target side: the drafted text continues the verified text exactly where it ends, so it is
  encoded on its own; a verified text that ends inside a UTF-8 character drafts nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from as2d.drafting.sources import Candidate
from as2d.engine.policy import BudgetPolicy
from as2d.models.tokenizer import WhisperTokenizer
from as2d.models.whisper import EncodedAudio, WhisperTarget
from as2d.sequences import common_prefix


class CachedDrafter:
    """Greedy continuation of a token prefix by a Whisper decoder whose cache follows the prefix.

    Between calls the KV cache holds the prompt and the tokens fed so far; a new prefix rolls
    the cache back to where it agrees with them and feeds only the rest.

    Attributes:
        model: the drafter model (its own vocabulary).
        computed: decoder positions computed after prompts (re-synchronisation and drafting).
        drafted: tokens drafted.
        last: the previous call's prefix and drafted tokens (the last drafted one is not fed).
    """

    def __init__(self, model: WhisperTarget) -> None:
        self.model = model
        self.computed = 0
        self.drafted = 0
        self.last: list[int] = []
        self._fed: list[int] = []  # tokens after the prompt whose keys/values are cached
        self._first: torch.Tensor | None = None  # [V] scores of the first output position

    def encode(self, audio: np.ndarray) -> EncodedAudio:
        """The drafter's own encoder forward over one window."""
        return self.model.encode(audio)

    def start(self, encoded: EncodedAudio, prompt: Sequence[int]) -> None:
        """Starts a window: cross-attention and the drafter's prompt."""
        self._first = self.model.prefill(encoded, prompt)
        self._fed, self.last = [], []

    def draft(self, prefix: Sequence[int], n: int) -> list[int]:
        """Up to `n` greedy tokens after prompt + `prefix`; fewer at end-of-text or a full cache.

        Example:
            draft([5, 6], 3) -> [7, 8, 9]   # cache: prompt, 5, 6, 7, 8 (9 is not fed)
            draft([5, 6, 7, 3], 3)          # keeps prompt, 5, 6, 7; feeds 3; drafts on
        """
        model = self.model
        if model.prompt_length + len(prefix) >= model.max_length:
            return []
        scores = self._sync(list(prefix))  # [V]
        drafted: list[int] = []
        while len(drafted) < n:
            token = int(scores.argmax())
            if token in model.eot_ids:
                break
            drafted.append(token)
            if len(drafted) == n or model.length >= model.max_length:
                break
            scores = self._feed([token])
        self.last = [*prefix, *drafted]
        self.drafted += len(drafted)
        return drafted

    def _sync(self, prefix: list[int]) -> torch.Tensor:
        """Rolls the cache back to its agreement with `prefix`, feeds the rest: [V] scores after it.

        The prefix's last token is fed again when nothing else is new (its scores are not kept).
        """
        if not prefix:
            self.model.rollback(self.model.prompt_length)
            self._fed = []
            assert self._first is not None, "start() a window first"
            return self._first
        keep = min(common_prefix(self._fed, prefix), len(prefix) - 1)
        self.model.rollback(self.model.prompt_length + keep)
        del self._fed[keep:]
        return self._feed(prefix[keep:])

    def _feed(self, tokens: list[int]) -> torch.Tensor:
        scores = self.model.forward(tokens)[-1]
        self._fed.extend(tokens)
        self.computed += len(tokens)
        return scores


class CoupledDrafter:
    """Candidate source of conventional speculative decoding (`sd`): drafts on demand.

    The budget is decided here, where drafting costs: `propose` runs the drafter for
    `policy.choose(...)` tokens (a fixed budget k drafts k tokens, the automatic budget
    nothing when a plain step is expected to be faster) and `observe` feeds the verify
    outcome back to that policy. The decode loop then verifies the whole candidate
    (`FixedBudget(max_k)`), so one decision, probes included, is never taken twice.

    Args:
        drafter: the drafter model and its cache.
        tokenizer: the drafter's tokenizer.
        target_tokenizer: the target's; with the same vocabulary tokens pass unchanged.
        policy: the budget policy that sizes the drafts and learns from their verification.
        name: source name for stats and the policy.
    """

    def __init__(
        self,
        drafter: CachedDrafter,
        tokenizer: WhisperTokenizer,
        target_tokenizer: WhisperTokenizer,
        policy: BudgetPolicy,
        name: str = "sd",
    ) -> None:
        self.drafter = drafter
        self.name = name
        self.busy_s = 0.0  # seconds spent drafting
        self._tokenizer = tokenizer
        self._target_tokenizer = target_tokenizer
        self._same_vocabulary = tokenizer.same_vocabulary(target_tokenizer)
        self._policy = policy

    def start(self, encoded: EncodedAudio, prompt: Sequence[int]) -> None:
        """Starts a window with the drafter's encoder output and its own prompt."""
        self.drafter.start(encoded, prompt)

    def propose(self, verified: Sequence[int], max_tokens: int) -> Candidate | None:
        """The drafter's greedy continuation of `verified`, in target tokens; None if empty."""
        n = self._policy.choose(max_tokens, self.name)
        if n < 1:
            return None
        start = time.perf_counter()
        tokens = self._draft(verified, n)
        self.busy_s += time.perf_counter() - start
        return Candidate(tuple(tokens[:n]), self.name) if tokens else None

    def observe(self, verified: Sequence[int], accepted: int, proposed: int) -> None:
        """Tells the policy how the draft fared (the cache is re-synchronised at `propose`)."""
        if proposed > 0:
            self._policy.observe(self.name, accepted, proposed)

    def _draft(self, verified: Sequence[int], n: int) -> list[int]:
        if self._same_vocabulary:
            return self.drafter.draft(verified, n)
        text = self._target_tokenizer.decode(verified)
        if text.endswith("\ufffd"):  # a character split across target tokens: wait for the rest
            return []
        prefix = respell(text.encode(), self.drafter.last, self._tokenizer)
        drafted = self.drafter.draft(prefix, n)
        continuation = b"".join(self._tokenizer.token_bytes(t) for t in drafted)
        return self._target_tokenizer.encode(continuation.decode(errors="ignore"))


def respell(text: bytes, previous: Sequence[int], tokenizer: WhisperTokenizer) -> list[int]:
    """`text` in the drafter's tokens: its `previous` tokens while they spell it, then encoded.

    The kept tokens stop at a pre-token boundary of GPT-2's pattern, so the unfinished word at
    the junction is encoded whole, as the drafter would split it.

    Args:
        text: the target's verified text, UTF-8.
        previous: the drafter's tokens of its last draft (its prefix and what it drafted).
        tokenizer: the drafter's tokenizer.

    Example (words as tokens):
        previous " the| cat| sat| on", text " the cat sits" -> " the| cat" kept and " sits"
        encoded (" sat" differs); with text " the cat sat" the three words are kept.
    """
    kept, end = 0, 0
    for token in previous:
        piece = tokenizer.token_bytes(token)
        if not piece or not text.startswith(piece, end):
            break
        kept, end = kept + 1, end + len(piece)
    while kept > 0 and end < len(text) and _inside_pretoken(text, end):
        kept -= 1
        end -= len(tokenizer.token_bytes(previous[kept]))
    return [*previous[:kept], *tokenizer.encode(text[end:].decode(errors="replace"))]


def _byte_class(byte: int) -> str:
    """GPT-2 pre-token class of a byte: letters (any non-ASCII byte too), digits, spaces, marks."""
    char = chr(byte)
    if byte >= 0x80 or char.isalpha():
        return "letter"
    if char.isdigit():
        return "digit"
    return "space" if char.isspace() else "mark"


def _inside_pretoken(text: bytes, cut: int) -> bool:
    """True if GPT-2's pre-tokenization may join text[cut - 1] and text[cut] into one pre-token.

    Example:
        _inside_pretoken(b" cat sat", 4) -> False   # " cat" | " sat"
        _inside_pretoken(b" cat sat", 3) -> True    # " ca" | "t"
        _inside_pretoken(b" cat sat", 5) -> True    # " cat " | "sat": the space joins "sat"
    """
    left, right = _byte_class(text[cut - 1]), _byte_class(text[cut])
    return (left == "space" and right != "space") or (left == right != "space")
