"""Builds the window decoder that `Options.method` asks for, around a loaded target (the one
place that knows every method): budget policies from the target's measured costs (measured
once per machine, then cached), as2d/pld's `SpeculativeDecoder`, sd's `CoupledDecoder`,
`TargetOnlyDecoder`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from as2d.engine.as2d import SpeculativeDecoder
from as2d.engine.calibrate import cached_cost
from as2d.engine.costs import cost_path, target_cost_name
from as2d.engine.decode import TargetOnlyDecoder, WindowDecoder
from as2d.engine.policy import AutoBudget, BudgetPolicy, CostModel, FixedBudget
from as2d.engine.sd import CoupledDecoder, with_drafting
from as2d.models.bundled import cache_root
from as2d.models.whisper import WhisperTarget
from as2d.options import Options
from as2d.runtime.drafter import DrafterProcess
from as2d.target import Request, TargetAdapter, threads_set
from as2d.types import SAMPLE_RATE


class DecoderFactory:
    """The decoders and budget policies of `options` for `target`.

    Args:
        options: the method, budget, drafter and device.
        target: the loaded target.
        cores: (the target's threads, the drafter process's; 0 without one).
        warm_up: warms the target up and returns a window it encoded, to measure costs on;
            called once, when the first cost not cached yet is measured.
    """

    def __init__(
        self,
        options: Options,
        target: TargetAdapter[Any],
        cores: tuple[int, int],
        warm_up: Callable[[], Any],
    ) -> None:
        self.options = options
        self.target = target
        self.threads, self.drafter_threads = cores
        self._warm_up = warm_up
        self._encoded: Any = None

    def decoder(self, drafter: DrafterProcess | None) -> WindowDecoder:
        """The window decoder of `options.method`; `drafter`: as2d's process."""
        method = self.options.method
        if method == "target":
            return TargetOnlyDecoder(self.target)
        if method == "sd":
            return self._coupled()
        return self._speculative(drafter)

    def budget_policy(self, budget: int | None) -> BudgetPolicy:
        """A fixed budget k, or (None) k chosen per step from the target's measured cost on
        its threads, and on every core where a drafter process has some."""
        if budget is not None:
            return FixedBudget(budget)
        alone = None
        if self.drafter_threads and self.options.device == "cpu":
            alone = self.cost(self.threads + self.drafter_threads)
        return AutoBudget(self.cost(self.threads), alone_cost=alone)

    def cost(self, threads: int) -> CostModel:
        """The target's measured pass cost on `threads` (measured once, then cached)."""
        o = self.options
        name = target_cost_name(o.target, o.device, o.dtype)
        path = cost_path(cache_root(), name, self.target.backend.cost_key(), threads)
        with threads_set(self.target.backend, threads):
            return cached_cost(path, self.target, self._window, o.max_k)

    def _speculative(self, drafter: DrafterProcess | None) -> SpeculativeDecoder:
        """as2d (with `drafter`) or pld (without): where the target may take the drafter's
        cores, the gate and core loans weigh the target's step on its threads and on all."""
        o, t = self.options, self.target
        cores, alone_step_s, shared_step_s = None, None, None
        if drafter is not None and o.lend_cores and o.device == "cpu":
            cores = (self.threads, self.drafter_threads)
            alone_step_s = self.cost(self.threads + self.drafter_threads)[0]
            shared_step_s = self.cost(self.threads)[0]
        return SpeculativeDecoder(
            t, t.tokenizer, self.budget_policy(o.budget), drafter, o.max_k, t.leading_space,
            cores, alone_step_s=alone_step_s, shared_step_s=shared_step_s, gate=o.draft_gate,
        )  # fmt: skip

    def _coupled(self) -> CoupledDecoder:
        """sd: the drafter model loaded here, drafting in turn with the target on its threads.

        With budget None the policy is AutoBudget over the cost of a round (the target's
        verify pass plus k drafter forwards, `with_drafting`).
        """
        o, target = self.options, self.target
        assert isinstance(target, WhisperTarget)  # checked by Transcriber
        drafter = WhisperTarget.load(o.drafter, approximate=True)  # as fast as as2d's drafter
        tokenizer = drafter.tokenizer
        policy: BudgetPolicy = FixedBudget(o.budget) if o.budget is not None else AutoBudget(
            with_drafting(self.cost(self.threads), self._drafter_step_s(drafter))
        )  # fmt: skip
        coupled = CoupledDecoder(
            target, target.tokenizer, drafter, tokenizer, policy, o.max_k, o.drafter
        )
        coupled.warm_up()
        return coupled

    def _drafter_step_s(self, drafter: WhisperTarget) -> float:
        """sd's drafter model: its plain step on the target's threads (measured, cached)."""

        def silence() -> tuple[Any, list[int]]:
            encoded = drafter.encode(np.zeros(SAMPLE_RATE, dtype=np.float32))
            return encoded, drafter.tokenizer.prompt(None, "transcribe")

        path = cost_path(
            cache_root(), self.options.drafter, drafter.backend.cost_key(), self.threads
        )
        return cached_cost(path, drafter, silence, 0)[0]

    def _window(self) -> tuple[Any, list[int]]:
        """The warm-up's encoded window and the prompt costs are measured with."""
        if self._encoded is None:
            self._encoded = self._warm_up()
        o = self.options
        return self._encoded, self.target.prompt(self._encoded, Request(o.task, "en", o.request))
