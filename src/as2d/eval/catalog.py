"""The configurations a benchmark compares: runtimes x methods x drafters x budgets, as data.

A `Config` is one way to decode (the target's runtime, a method, its drafter and budget, the
target's threads); `catalog` expands the axes chosen on the command line into the list of
configurations. Methods are passed through to `Options(method=...)` unchanged, so a method
the library gains (such as `sd`) is benchmarked without a change here.

Example:
    catalog(["target", "as2d"], ["whisper-tiny.en"], [None, 4], cores=2)
    -> [target 1t, target 2t, as2d whisper-tiny.en k=auto, as2d whisper-tiny.en k=4]
    catalog(["target", "pld"], [], [4], cores=2, runtimes=["torch", "mnn"])
    -> [target 1t torch, target 2t torch, pld k=4 torch, target 1t mnn, target 2t mnn,
        pld k=4 mnn]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from as2d.drafting.family import DrafterFamily
from as2d.options import Options

DRAFTERS = ("auto", "whisper-tiny.en", "ct2:whisper-tiny.en", "ct2:whisper-base")
BUDGETS: tuple[int | None, ...] = (None, 2, 4, 8, 16)  # None: auto, chosen per step
DRAFTER_METHODS = frozenset({"as2d", "sd"})  # methods that run a drafter model
TARGET_ONLY = "target"


@dataclass(frozen=True)
class Config:
    """One way to decode, compared against the others."""

    method: str
    drafter: str | None = None  # DRAFTER_METHODS only
    budget: int | None = None  # None: auto (speculative methods only)
    threads: int | None = None  # the target's threads; None: the library's default split
    drafts_ready: bool = False  # as2d: every draft made before the run, no drafter process
    prepared: bool = False  # the target's encoder output of every window made before the run
    runtime: str = "torch"  # what runs the target (`backends.RUNTIMES`)
    show_runtime: bool = False  # the name ends with the runtime: the bench compares several

    @property
    def budget_label(self) -> str:
        """ "-" for target-only, "auto" or the fixed k."""
        if self.method == TARGET_ONLY:
            return "-"
        return "auto" if self.budget is None else str(self.budget)

    @property
    def name(self) -> str:
        """e.g. "target 2t", "pld k=4", "as2d whisper-tiny.en k=auto"; "target 2t mnn" where
        runtimes are compared."""
        drafter = f" {self.drafter}" if self.drafter else ""
        ready = " drafts ready" if self.drafts_ready else ""
        prepared = " prepared" if self.prepared else ""
        runtime = f" {self.runtime}" if self.show_runtime else ""
        if self.method == TARGET_ONLY:
            return f"target {self.threads}t{prepared}{runtime}"
        return f"{self.method}{drafter} k={self.budget_label}{ready}{prepared}{runtime}"

    def options(self, base: Options) -> Options:
        """`base` (target, language, task) with this configuration's method and settings."""
        return replace(
            base,
            method=self.method,
            runtime=self.runtime,
            drafter=self.drafter or base.drafter,
            budget=self.budget,
            threads=self.threads,
            drafts="auto" if self.drafts_ready else base.drafts,
            prepared="auto" if self.prepared else "off",  # else the cold figure is not cold
        )


def catalog(
    methods: Sequence[str],
    drafters: Sequence[str],
    budgets: Sequence[int | None],
    cores: int,
    runtimes: Sequence[str] = ("torch",),
) -> list[Config]:
    """Every configuration of the chosen axes, runtime by runtime, each runtime's target-only
    first (always: it is that runtime's baseline).

    Target-only runs at 1 thread and at `cores` threads (the faster is the baseline);
    methods with a drafter take every drafter x budget (sd: on torch only, with PyTorch
    drafters only, as it needs the drafter's KV cache beside the target's); other methods
    every budget. With more than one runtime every name ends with its runtime.
    """
    shown = len(set(runtimes)) > 1
    return [
        replace(config, runtime=runtime, show_runtime=shown)
        for runtime in dict.fromkeys(runtimes)
        for config in _one_runtime(methods, drafters, budgets, cores, runtime)
    ]


def _one_runtime(
    methods: Sequence[str],
    drafters: Sequence[str],
    budgets: Sequence[int | None],
    cores: int,
    runtime: str,
) -> list[Config]:
    """`catalog` on one runtime (the configurations' runtime is set by the caller)."""
    configs: list[Config] = []
    for method in dict.fromkeys([TARGET_ONLY, *methods]):
        if method == TARGET_ONLY:
            configs += [Config(method, threads=t) for t in sorted({1, cores})]
        elif method == "sd" and runtime != "torch":
            continue  # Options refuses it there (options._check_runtime)
        elif method in DRAFTER_METHODS:
            usable = [d for d in drafters if method != "sd" or DrafterFamily(d).coupled]
            configs += [Config(method, d, k) for d in usable for k in budgets]
        else:
            configs += [Config(method, budget=k) for k in budgets]
    return sorted(configs, key=lambda c: c.method != TARGET_ONLY)


def with_drafts_ready(configs: Sequence[Config], mode: str) -> list[Config]:
    """`mode` "live": as they are; "ready": as2d configurations with every draft made ahead
    instead; "both": each as2d configuration, then its drafts-ready twin."""
    out: list[Config] = []
    for config in configs:
        if config.method != "as2d" or mode == "live":
            out.append(config)
            continue
        if mode == "both":
            out.append(config)
        out.append(replace(config, drafts_ready=True))
    return out


def with_prepared(configs: Sequence[Config]) -> list[Config]:
    """Each target-only and drafts-ready configuration, then its twin whose target finds every
    window's encoder output made ahead (`as2d bench --prepared`): target-only cold and
    prepared, as2d with drafts ready and prepared (drafts and encoder ahead)."""
    out: list[Config] = []
    for config in configs:
        out.append(config)
        if config.method == TARGET_ONLY or config.drafts_ready:
            out.append(replace(config, prepared=True))
    return out
