"""A picture of who works when: target and drafter activity per window over one recording.

AS²D's claim is concurrency: the drafter runs ahead over the windows on its own cores
while the target verifies (DESIGN.md, Concurrency). A timeline shows whether that
happens: one lane for the target (encode, then decode, per window), one for the
drafter (its busy interval per window, encode part shaded apart), on one clock
(`time.perf_counter()`, system-wide on Linux), in seconds from the start of the run.
Where the target decodes a window the drafter has not finished, the target can only
verify the part that is ready and steps alone on the rest.

Example:
    run = transcriber.transcribe("talk.flac")
    results, stats = list(run), run.stats
    timeline = recording_timeline(transcriber, results, stats, title="talk.flac")
    plot_timeline(timeline, Path("timeline.png"))
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from as2d.runtime.drafter import BusyInterval, DrafterProcess
from as2d.types import RunStats, WindowResult
from as2d.writers import FileResult, atomic_path

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.patches import Patch

    from as2d.api import Transcriber

LATE_DONE_WAIT_S = 1.0  # how long to wait for the drafter's report on the last window
LABEL_PT = 30.0  # a bar narrower than this (points) gets only its window number
TARGET_COLORS = ("#9ecae1", "#2171b5")  # encode, decode
DRAFTER_COLORS = ("#fdae6b", "#d94801")  # encode, decode


@dataclass(frozen=True)
class Span:
    """One window's work in one lane, in seconds from the start of the run.

    Attributes:
        window: the recording's window index.
        start: when work on the window began.
        encoded: when its encoding ended (decoding starts here).
        end: when work on it ended.
        tokens: tokens produced (the drafter's own tokens in the drafter lane).
        finished: False for a drafter window abandoned because the target was done.
        accepted: target lane: tokens taken from verified candidates (None: no speculation).
    """

    window: int
    start: float
    encoded: float
    end: float
    tokens: int
    finished: bool = True
    accepted: int | None = None


@dataclass(frozen=True)
class Timeline:
    """Both lanes of one recording's run; `wall_s` is the run's length."""

    title: str
    wall_s: float
    target: tuple[Span, ...]
    drafter: tuple[Span, ...]  # empty for methods without a drafter


def target_spans(
    results: Sequence[WindowResult], origin: float, speculative: bool
) -> tuple[Span, ...]:
    """The target lane: encode then decode of each window, relative to `origin`.

    Example:
        WindowResult(index=0, encode_s=1.0, decode_s=2.0, started_at=10.5, ...), origin 10.0
        -> Span(window=0, start=0.5, encoded=1.5, end=3.5, tokens=len(token_ids))
    """
    spans = []
    for r in results:
        start = r.started_at - origin
        encoded = start + r.encode_s
        accepted = r.accepted_tokens if speculative else None
        spans.append(
            Span(r.index, start, encoded, encoded + r.decode_s, len(r.token_ids), True, accepted)
        )
    return tuple(spans)


def drafter_spans(
    intervals: Sequence[BusyInterval], base: int, windows: int, origin: float
) -> tuple[Span, ...]:
    """The drafter lane: its intervals for windows `base .. base + windows - 1`, renumbered.

    The drafter numbers windows across recordings (`SpeculativeDecoder.base`); intervals
    of other recordings are left out.
    """
    return tuple(
        Span(
            i.index - base,
            i.start - origin,
            i.start + i.encode_s - origin,
            i.end - origin,
            i.tokens,
            i.finished,
        )
        for i in sorted(intervals, key=lambda i: i.start)
        if base <= i.index < base + windows
    )


def recording_timeline(
    transcriber: Transcriber, results: Sequence[WindowResult], stats: RunStats, title: str
) -> Timeline:
    """The timeline of the recording `transcriber` decoded last (call right after it).

    Args:
        transcriber: the Transcriber that produced `results`; its drafter (if any) is
            polled for up to LATE_DONE_WAIT_S so the last window's report can come in.
        results: every window of the run, in order.
        stats: the run's stats (`started_at` is the origin of the time axis).
        title: shown above the plot.
    """
    decoder, drafter = transcriber.decoder, transcriber.drafter
    lanes: tuple[Span, ...] = ()
    if drafter is not None:
        base = decoder.base - len(results)  # the decoder has moved past this recording
        _await_last_report(drafter, base + len(results) - 1)
        lanes = drafter_spans(drafter.intervals, base, len(results), stats.started_at)
    target = target_spans(results, stats.started_at, transcriber.options.method != "target")
    return Timeline(title, stats.wall_s, target, lanes)


def _await_last_report(drafter: DrafterProcess, index: int) -> None:
    """Polls the drafter until it reported on window `index`, or LATE_DONE_WAIT_S passed."""
    deadline = time.perf_counter() + LATE_DONE_WAIT_S
    while drafter.alive and time.perf_counter() < deadline:
        drafter.poll()
        if any(i.index >= index for i in drafter.intervals):
            return
        time.sleep(0.02)


def timeline_path(path: Path, input_file: str, several: bool) -> Path:
    """Where to write one input's timeline: `path`, or `<stem>-<input stem><suffix>` for several.

    Example:
        timeline_path(Path("out/timeline.png"), "talks/a.flac", several=True)
        -> Path("out/timeline-a.png")
    """
    if not several:
        return path
    return path.with_name(f"{path.stem}-{Path(input_file).stem}{path.suffix or '.png'}")


def plot_timeline(timeline: Timeline, path: Path) -> None:
    """Draws `timeline` into a PNG at `path`, written atomically (matplotlib's Agg canvas, no
    pyplot state)."""
    from matplotlib.figure import Figure

    lanes = [("target", timeline.target, TARGET_COLORS)]
    if timeline.drafter:
        lanes.insert(0, ("drafter", timeline.drafter, DRAFTER_COLORS))
    x_max = max([timeline.wall_s, *(s.end for _, spans, _ in lanes for s in spans)]) * 1.01
    width_in = min(24.0, max(10.0, 0.12 * x_max + 4))
    fig = Figure(figsize=(width_in, 1.2 + 0.9 * len(lanes)), layout="constrained")
    ax = fig.add_subplot()
    label_s = LABEL_PT / 72 / (0.8 * width_in) * x_max  # seconds that LABEL_PT spans
    for y, (_, spans, colors) in enumerate(lanes):
        for span in spans:
            _draw_span(ax, span, y, colors, label_s)
    ax.set_yticks(range(len(lanes)), [name for name, _, _ in lanes])
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlim(0, x_max)
    ax.set_xlabel("seconds from the start of the run")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(timeline.title, loc="left", fontsize=10)
    ax.legend(handles=_legend(bool(timeline.drafter)), loc="upper left", bbox_to_anchor=(1, 1))
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")


def _legend(with_drafter: bool) -> list[Patch]:
    from matplotlib.patches import Patch

    handles = [
        Patch(color=TARGET_COLORS[0], label="target encode"),
        Patch(color=TARGET_COLORS[1], label="target decode"),
    ]
    if with_drafter:
        handles += [
            Patch(color=DRAFTER_COLORS[0], label="drafter encode"),
            Patch(color=DRAFTER_COLORS[1], label="drafter decode"),
            Patch(facecolor="white", edgecolor="black", hatch="///", label="abandoned"),
        ]
    return handles


def _draw_span(ax: Axes, span: Span, y: int, colors: tuple[str, str], label_s: float) -> None:
    """One window's bar: encode part, decode part, window number (and tokens if it fits)."""
    hatch = None if span.finished else "///"
    for start, end, color in (
        (span.start, span.encoded, colors[0]),
        (span.encoded, span.end, colors[1]),
    ):
        ax.barh(
            y,
            end - start,
            left=start,
            height=0.6,
            color=color,
            edgecolor="black",
            linewidth=0.5,
            hatch=hatch,
        )
    ax.text(
        (span.start + span.end) / 2,
        y,
        _label(span, wide=span.end - span.start > label_s),
        ha="center",
        va="center",
        fontsize=7,
        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.75, "lw": 0},
    )


def _label(span: Span, wide: bool) -> str:
    """`w3` on a narrow bar; if wide, also its tokens and (target) the accepted draft tokens."""
    if not wide:
        return str(span.window)
    lines = [f"w{span.window}", f"{span.tokens} tok"]
    if span.accepted is not None:
        lines.append(f"{span.accepted} accepted")
    return "\n".join(lines)


def write_timeline(transcriber: Transcriber, result: FileResult, path: Path) -> None:
    """Draws the timeline of the file `transcriber` just decoded into the PNG `path`."""
    title = f"{result.file}: {result.method}, target {result.target}"
    if result.drafter is not None:
        title += f", drafter {result.drafter}"
    title += f" ({result.stats.audio_s:.0f} s of audio in {result.stats.wall_s:.1f} s)"
    plot_timeline(recording_timeline(transcriber, result.windows, result.stats, title), path)
