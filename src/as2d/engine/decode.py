"""Target-only decoding of one window: the baseline every method must equal."""

from __future__ import annotations

from collections.abc import Sequence

from as2d.engine.target import Encoded, Target
from as2d.verify import Greedy, Rule


def decode_target_only(
    target: Target[Encoded], encoded: Encoded, prompt: Sequence[int], rule: Rule | None = None
) -> list[int]:
    """Plain decoding with the KV cache: one target forward per output token.

    Args:
        target: the model, its cache reset by `prefill`.
        encoded: the window's encoder output from `target.encode`.
        prompt: the decoder prompt (e.g. Whisper's start-of-transcript sequence).
        rule: Greedy() (default) or Sampling(temperature, generator).

    Returns:
        The output token ids, without prompt or end-of-text.
    """
    rule = rule or Greedy()
    scores = target.prefill(encoded, prompt)  # [V]
    tokens: list[int] = []
    while True:
        token = rule.next_token(scores)
        if token in target.eot_ids or target.length >= target.max_length:
            return tokens
        tokens.append(token)
        scores = target.forward([token])[-1]
