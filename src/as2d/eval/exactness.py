"""`as2d exactness`: does every method commit, position by position, target-only's tokens?

Lossless output is the promise every speedup rests on (DESIGN.md). `as2d bench` says per
configuration whether whole outputs were identical; this module counts the token positions
that differ, over a whole dataset, so a rare flip (a near-tie decided differently by a verify
pass of k tokens than by a step of one) shows up as a number with the place it first happened.

The reference is target-only at the most threads, the baseline users compare with; every other
configuration, target-only at 1 thread included (output must not depend on thread count), is
compared with it. With several runtimes (`--runtime torch,mnn`) each has its own reference, its
target-only: another runtime's target may round to other tokens. One target model per runtime
is loaded once and shared; configurations are built and closed one at a time, so at most one
drafter process runs.

Example:
    report = check_exactness(catalog(["target", "pld"], [], [None, 4], cores=2), recordings,
                             Options(language="en"))
    report.mismatches, report_dict(report)["methods"][0]["first_mismatch"]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import zip_longest
from typing import Any

from tqdm import tqdm

from as2d.api import Transcriber
from as2d.eval.catalog import TARGET_ONLY, Config
from as2d.eval.datasets import Recording
from as2d.options import Options
from as2d.sequences import common_prefix
from as2d.target import TargetAdapter
from as2d.types import WindowResult

DRAFTER_READY_S = 300.0  # the most to wait for a drafter's model to load before decoding


@dataclass(frozen=True)
class Mismatch:
    """Where a configuration first committed a token other than the reference's."""

    recording: str  # Recording.name
    window: int  # WindowResult.index
    position: int  # index into the window's token_ids


@dataclass
class MethodExactness:
    """One configuration's agreement with the reference, summed over every window."""

    name: str  # Config.name
    positions: int = 0  # tokens this configuration committed
    mismatches: int = 0  # positions where its token differs from the reference's (or is missing)
    guarded: int = 0  # positions the guard recomputed as target-only would
    min_margin: float = math.inf  # smallest top-2 logit margin of any decision; inf: none seen
    first_mismatch: Mismatch | None = None

    def add(
        self, recording: str, window: int, reference: WindowResult | None, out: WindowResult | None
    ) -> None:
        """Counts window `window` of `recording`; one missing on either side counts as empty."""
        ref_ids = reference.token_ids if reference else []
        out_ids = out.token_ids if out else []
        self.positions += len(out_ids)
        self.mismatches += count_mismatches(ref_ids, out_ids)
        if out is not None:
            self.guarded += out.guarded
            self.min_margin = min(self.min_margin, window_margin(out))
        at = first_difference(ref_ids, out_ids)
        if at is not None and self.first_mismatch is None:
            self.first_mismatch = Mismatch(recording, window, at)


@dataclass
class ExactnessReport:
    """Every compared configuration against its runtime's reference; totals exclude the
    references."""

    reference: str  # Config.name of the first runtime's reference, e.g. "target 2t"
    methods: list[MethodExactness] = field(default_factory=list)
    recordings: int = 0
    windows: int = 0  # the reference's windows
    references: dict[str, str] = field(default_factory=dict)  # runtime -> its reference

    @property
    def positions(self) -> int:
        return sum(m.positions for m in self.methods)

    @property
    def mismatches(self) -> int:
        return sum(m.mismatches for m in self.methods)

    @property
    def guarded(self) -> int:
        return sum(m.guarded for m in self.methods)

    @property
    def min_margin(self) -> float:
        return min((m.min_margin for m in self.methods), default=math.inf)


def count_mismatches(reference: Sequence[int], out: Sequence[int]) -> int:
    """Positions where `out` differs from `reference`; a token missing on one side differs.

    Example:
        count_mismatches([1, 2, 3], [1, 5]) -> 2  (5 != 2, and 3 has no counterpart)
    """
    n = max(len(reference), len(out))
    return sum(i >= len(reference) or i >= len(out) or out[i] != reference[i] for i in range(n))


def first_difference(reference: Sequence[int], out: Sequence[int]) -> int | None:
    """The first position where the two differ (or one ends first); None when equal.

    Example:
        first_difference([1, 2, 3], [1, 2]) -> 2
    """
    if list(reference) == list(out):
        return None
    return common_prefix(reference, out)


def window_margin(window: WindowResult) -> float:
    """The window's smallest decision margin; inf when none was measured."""
    return math.inf if window.min_margin is None else window.min_margin


def reference_config(configs: Sequence[Config]) -> Config:
    """Target-only at the most threads: the baseline every other configuration must match.

    Raises:
        ValueError: no target-only configuration (the catalog always has one).
    """
    target_only = [c for c in configs if c.method == TARGET_ONLY]
    if not target_only:
        raise ValueError("exactness needs a target-only configuration as its reference")
    return max(target_only, key=lambda c: c.threads or 0)


def check_exactness(
    configs: Sequence[Config],
    recordings: Sequence[Recording],
    base: Options,
    progress: bool = False,
) -> ExactnessReport:
    """Decodes `recordings` with the reference of each runtime, then with every other
    configuration of that runtime, and compares every committed token position.

    Args:
        configs: the catalog, target-only of every runtime included (the references are
            chosen among it).
        recordings: the dataset.
        base: target, language, task, device, dtype; method and the rest come per config.
        progress: a tqdm bar (one step per configuration x recording) on stderr.

    Returns:
        The report: per compared configuration, positions, mismatches and the first mismatch.
    """
    runtimes = dict.fromkeys(c.runtime for c in configs)
    groups = {runtime: [c for c in configs if c.runtime == runtime] for runtime in runtimes}
    references = {runtime: reference_config(mine) for runtime, mine in groups.items()}
    names = {runtime: reference.name for runtime, reference in references.items()}
    report = ExactnessReport(next(iter(names.values())), [], len(recordings), references=names)
    total = len(configs) * len(recordings)
    bar = tqdm(total=total, desc="decoding", unit="run", disable=not progress or None)
    with bar:
        for runtime, mine in groups.items():
            compared = [c for c in mine if c != references[runtime]]
            windows = _check_runtime(references[runtime], compared, recordings, base, report, bar)
            report.windows = report.windows or windows  # the first runtime's reference's
    return report


def _check_runtime(
    reference: Config,
    compared: Sequence[Config],
    recordings: Sequence[Recording],
    base: Options,
    report: ExactnessReport,
    bar: tqdm,
) -> int:
    """Decodes with `reference`, then with each of `compared` (all on its runtime, sharing its
    target), adding each one's agreement to `report`; returns the reference's windows."""
    expected, target = decode_dataset(reference, recordings, base, None, bar)
    for config in compared:
        method = MethodExactness(config.name)
        decoded, target = decode_dataset(config, recordings, base, target, bar)
        for recording, want, got in zip(recordings, expected, decoded, strict=True):
            for window, (ref, out) in enumerate(zip_longest(want, got)):
                method.add(recording.name, window, ref, out)
        report.methods.append(method)
    return sum(map(len, expected))


def decode_dataset(
    config: Config,
    recordings: Sequence[Recording],
    base: Options,
    target: TargetAdapter[Any] | None,
    bar: tqdm,
) -> tuple[list[list[WindowResult]], TargetAdapter[Any]]:
    """Every recording's windows under `config`, with `target` shared (None: load it here).

    Returns:
        The windows per recording, and the target (to share with the next configuration).
    """
    with Transcriber(config.options(base), shared_target=target) as transcriber:
        drafter = transcriber.drafter
        if drafter is not None:  # drafts must be there to be checked: wait for the model
            drafter.wait_ready(DRAFTER_READY_S)
        decoded = []
        for recording in recordings:
            bar.set_postfix_str(f"{recording.name}: {config.name}", refresh=False)
            decoded.append(list(transcriber.transcribe(recording.audio)))
            bar.update()
        return decoded, transcriber.target


def report_dict(report: ExactnessReport) -> dict[str, object]:
    """The report as JSON-ready data; an infinite margin (none seen) becomes None."""
    return {
        "positions": report.positions,
        "mismatches": report.mismatches,
        "guarded": report.guarded,
        "min_margin": _finite(report.min_margin),
        "methods": [_method_dict(m) for m in report.methods],
        "reference": report.reference,
        "references": report.references,
        "recordings": report.recordings,
        "windows": report.windows,
    }


def _method_dict(method: MethodExactness) -> dict[str, object]:
    first = method.first_mismatch
    return {
        "name": method.name,
        "positions": method.positions,
        "mismatches": method.mismatches,
        "guarded": method.guarded,
        "min_margin": _finite(method.min_margin),
        "first_mismatch": None if first is None else asdict(first),
    }


def _finite(value: float) -> float | None:
    """JSON has no infinity: None stands for 'no margin seen'."""
    return value if math.isfinite(value) else None
