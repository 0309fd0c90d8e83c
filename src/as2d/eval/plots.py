"""Benchmark pictures: pooled speed-up per configuration, per-window speed-up as a CDF, and
the timeline of one recording; every file written atomically."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from as2d.eval.catalog import Config
from as2d.writers import atomic_path

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from as2d.eval.summary import ConfigSummary, RuntimePart


def plot_speedups(rows: Sequence[ConfigSummary], baseline: str, path: Path) -> None:
    """Bars: pooled speed-up of each configuration over `baseline` (1 marked), a colour per
    method."""
    fig = Figure(figsize=(max(6.0, 0.6 * len(rows) + 2), 4.5), layout="constrained")
    ax = fig.add_subplot()
    names = [r.name for r in rows]
    methods = list(dict.fromkeys(r.method for r in rows if r.method != "target"))
    colors = [
        "#bdbdbd" if r.method == "target" else f"C{methods.index(r.method) % 10}"  # tab10
        for r in rows
    ]
    bars = ax.bar(range(len(rows)), [r.speedup for r in rows], color=colors)
    ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), names, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel(f"pooled speed-up over {baseline}")
    _save(fig, path)


def plot_cdf(parts: Sequence[RuntimePart], path: Path) -> None:
    """Per-window speed-up (baseline time / configuration time) as a CDF per configuration,
    each against its own runtime's baseline: a colour per method, drafter and runtime, solid
    for `auto` and dashed for fixed budgets."""
    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.add_subplot()
    configs = [c for part in parts for c in part.bench.configs]
    groups = list(dict.fromkeys((c.method, c.drafter, c.runtime) for c in configs))
    for part in parts:
        m = part.m
        base = m.times[m.baseline.name]
        for config in part.bench.configs:
            if config == m.baseline:
                continue
            mine = m.times[config.name]
            ratios = np.sort([base[key] / mine[key] for key in mine if mine[key] > 0])
            if len(ratios):  # from (first ratio, 0): the share of windows at or below each ratio
                group = groups.index((config.method, config.drafter, config.runtime))
                _step(ax, ratios, config, f"C{group % 10}")  # tab10
    reference = parts[0].m.baseline.name if len(parts) == 1 else "each runtime's target-only"
    ax.axvline(1.0, color="black", linestyle="--", linewidth=0.8, label=f"{reference} = 1")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks([0.5, 0.7, 1.0, 1.5, 2.0, 3.0])
    ax.set_xlabel("per-window speed-up over target-only (log)")
    ax.set_ylabel("share of windows")
    fig.legend(loc="outside right upper", fontsize=7)
    _save(fig, path)


def _step(ax: Axes, ratios: np.ndarray, config: Config, color: str) -> None:
    """One configuration's CDF of sorted per-window `ratios`, from (first ratio, 0)."""
    shares = np.arange(len(ratios) + 1) / len(ratios)
    k = config.budget
    ax.step(
        np.r_[ratios[0], ratios],
        shares,
        where="post",
        label=config.name,
        color=color,
        linestyle="-" if k is None else _DASHES[k.bit_length() % len(_DASHES)],
        linewidth=2.0 if k is None else 1.0,
    )


_DASHES = [(0, (4, 1.5)), (0, (1, 1)), (0, (4, 1.5, 1, 1.5)), (0, (8, 2))]  # fixed budgets


def _save(fig: Figure, path: Path) -> None:
    """Save as PNG, atomically."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
