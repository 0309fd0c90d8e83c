"""External reference: the same windows through faster-whisper (CTranslate2) greedy decoding.

The speed a user gets today without as2d, from the same base weights (the bundled
CTranslate2 conversion) in int8 and float32, greedy, without timestamps or conditioning on
earlier text. A different runtime: reported beside our numbers, never mixed with them.
Needs the `faster-whisper` package (a dev dependency).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from as2d.audio.windows import iter_windows
from as2d.eval.bench import BenchRun, BenchSettings, rotation
from as2d.eval.summary import measured, split_by_runtime
from as2d.models.bundled import ct2_dir
from as2d.types import Window

COMPUTE_TYPES = ("int8", "float32")


@dataclass
class ExternalResult:
    """Pooled figures of one CTranslate2 compute type over the dataset (median-free sums)."""

    runtime: str
    compute_type: str
    threads: int
    tokens: int
    seconds: float
    pooled_tokens_per_s: float


def external_reference(bench: BenchRun, settings: BenchSettings) -> list[dict[str, object]]:
    """CTranslate2 greedy on every recording's windows, per compute type, interleaved, at
    the thread count of our faster target-only configuration."""
    try:
        from faster_whisper import WhisperModel
    except ImportError as err:
        raise ValueError("--external needs faster-whisper (pip install faster-whisper)") from err
    ours = measured(split_by_runtime(bench)[0])  # the first runtime's target-only
    threads = ours.baseline.threads or 1  # its faster thread count
    models = {
        compute: WhisperModel(
            str(ct2_dir(settings.base.target)), compute_type=compute, cpu_threads=threads
        )
        for compute in COMPUTE_TYPES
    }
    language = settings.base.language
    windows = {r.name: list(iter_windows(r.audio)) for r in bench.recordings}
    totals = {compute: [0, 0.0] for compute in COMPUTE_TYPES}
    for model in models.values():  # warm-up, untimed
        _decode(model, next(iter(windows.values()))[:1], language, settings.base.task)
    turn = 0
    for _ in range(settings.repeats):
        for recording in bench.recordings:
            for compute in rotation(list(COMPUTE_TYPES), turn):
                start = time.perf_counter()
                said = language or recording.language
                tokens = _decode(models[compute], windows[recording.name], said, settings.base.task)
                totals[compute][0] += tokens
                totals[compute][1] += time.perf_counter() - start
            turn += 1
    return [
        asdict(
            ExternalResult(
                "faster-whisper (CTranslate2)", c, threads, int(t), s, t / s if s else 0.0
            )
        )
        for c, (t, s) in totals.items()
    ]


def _decode(model: object, windows: Sequence[Window], language: str | None, task: str) -> int:
    """Output tokens of greedy decoding of each window on its own."""
    tokens = 0
    for w in windows:
        segments, _ = model.transcribe(  # type: ignore[attr-defined]
            w.audio,
            language=language,
            task=task,
            beam_size=1,
            temperature=0.0,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        tokens += sum(len(segment.tokens) for segment in segments)
    return tokens
