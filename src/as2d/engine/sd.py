"""Conventional speculative decoding (`sd`) over a recording: the baseline as2d is measured against.

Per window the drafter model encodes the audio too (counted as the window's encode time),
then the target decodes with one candidate source, the `CoupledDrafter`: it drafts k tokens
from the target's verified prefix and waits for their verification, in the target's process
and on the target's threads, one after the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from as2d.drafting.coupled import CachedDrafter, CoupledDrafter
from as2d.engine.policy import BudgetPolicy, CostModel, FixedBudget
from as2d.engine.speculative import StepCounts, speculative_decode
from as2d.engine.verify import Rule
from as2d.models.tokenizer import WhisperTokenizer
from as2d.models.whisper import EncodedAudio, WhisperTarget
from as2d.runtime.cores import CoreLoan
from as2d.runtime.drafter import DrafterProcess
from as2d.types import SAMPLE_RATE, DrafterActivity, Window


class CoupledDecoder:
    """Decodes windows with a drafter model coupled to the target's verified prefix.

    Args:
        target: the target model.
        tokenizer: the target's tokenizer.
        drafter: the drafter model (any Whisper; its vocabulary may differ).
        drafter_tokenizer: the drafter's tokenizer.
        policy: sizes each draft and learns from its verification (see `CoupledDrafter`).
        max_k: the largest budget.
        name: the drafter's name, for stats.
    """

    drafter: DrafterProcess | None = None  # no drafter process: the drafter runs in turn here
    base = 0  # window numbering across recordings (only used with a drafter process)

    def __init__(
        self,
        target: WhisperTarget,
        tokenizer: WhisperTokenizer,
        drafter: WhisperTarget,
        drafter_tokenizer: WhisperTokenizer,
        policy: BudgetPolicy,
        max_k: int = 16,
        name: str = "whisper-tiny.en",
    ) -> None:
        self.target = target
        self.tokenizer = tokenizer
        self.policy = policy
        self.max_k = max_k
        self._verify_all = FixedBudget(max_k)  # the source has sized the draft already
        self.name = name
        self.source = CoupledDrafter(CachedDrafter(drafter), drafter_tokenizer, tokenizer, policy)
        self._drafter_tokenizer = drafter_tokenizer
        self._same_vocabulary = drafter_tokenizer.same_vocabulary(tokenizer)
        self._encoded: EncodedAudio | None = None
        self._windows = 0  # the current recording's (`activity`)
        self._busy_before = 0.0  # the drafter's busy seconds before the current recording

    def warm_up(self) -> EncodedAudio:
        """Drafter encoder, prefill and passes of 1 and 8 tokens, so timings skip first calls."""
        model = self.source.drafter.model
        encoded = model.encode(np.zeros(SAMPLE_RATE, dtype=np.float32))
        prompt = self._own_prompt("en", "transcribe")
        model.prefill(encoded, prompt)
        model.forward([prompt[-1]])
        model.forward([prompt[-1]] * 8)
        return encoded

    def windows(self, windows: Iterable[Window]) -> Iterator[Window]:
        """The windows as they come: nothing is drafted ahead."""
        self._windows, self._busy_before = 0, self.source.busy_s
        yield from windows

    def lend_cores(self, window: Window) -> AbstractContextManager[CoreLoan | None]:
        """Nothing to lend: the drafter runs in turn with the target, on its threads."""
        return nullcontext(None)

    def prepare(self, window: Window, language: str | None) -> None:
        """The drafter's encoder forward over the window (part of the window's encode time)."""
        self._encoded = self.source.drafter.encode(window.audio)
        self._windows += 1

    def decode(
        self,
        window: Window,
        encoded: EncodedAudio,
        prompt: Sequence[int],
        rule: Rule,
        request: Sequence[int] = (),
    ) -> tuple[list[int], StepCounts]:
        """One window's output (greedy: equal to target-only), with its step counts.

        `request` is unused: sd runs Whisper targets, which take no requests.
        """
        assert self._encoded is not None, "prepare(window) first"
        self.source.start(self._encoded, self._prompt(prompt))
        return speculative_decode(
            self.target, encoded, prompt, [self.source], self._verify_all, self.max_k, rule
        )

    def activity(self) -> DrafterActivity:
        """Seconds spent drafting (encoder forwards excluded) and windows drafted, in the
        current recording."""
        busy_s = self.source.busy_s - self._busy_before
        return DrafterActivity(self.name, busy_s, self._windows, lost=False)

    def forget(self) -> None:
        """Nothing carries over from one recording to the next."""

    def _prompt(self, target_prompt: Sequence[int]) -> list[int]:
        """The drafter's prompt: the target's when the vocabulary is the same, else its own
        start-of-transcript sequence with the target prompt's language and task."""
        if self._same_vocabulary:
            return list(target_prompt)
        codes = {token: code for code, token in self.tokenizer.languages.items()}
        language = next((codes[t] for t in target_prompt if t in codes), "en")
        task = "translate" if self.tokenizer.translate in target_prompt else "transcribe"
        return self._own_prompt(language, task)

    def _own_prompt(self, language: str, task: str) -> list[int]:
        """[sot, (language, task,)] + [notimestamps] in the drafter's vocabulary."""
        return self._drafter_tokenizer.prompt(language, task)


def with_drafting(cost: CostModel, drafter_step_s: float) -> CostModel:
    """The cost of one sd round of budget k: the target's verify pass plus k drafter forwards.

    Drafting k tokens takes k drafter forwards (the first also feeds the target's correction);
    a plain step (k = 0) drafts nothing. AutoBudget then weighs the drafter's time too.

    Example:
        with_drafting(CostModel((1.0, 1.1, 1.2)), 0.3).latency_s -> (1.0, 1.4, 1.8)
    """
    return CostModel(tuple(s + k * drafter_step_s for k, s in enumerate(cost.latency_s)))
