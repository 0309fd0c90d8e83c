"""What the drafter process is asked to run, and what it reports per window."""

from __future__ import annotations

from dataclasses import dataclass

from as2d.drafting.family import DEFAULT_TAIL_S, DrafterFamily

FAULTS = ("random", "empty", "sleep", "crash")  # DrafterSpec.fault values (tests only)
CRASH_EXIT_CODE = 70  # exit status of a drafter with fault="crash"
SLEEP_FAULT_S = 3600.0  # a drafter with fault="sleep" sleeps this long before each token


@dataclass(frozen=True)
class DrafterSpec:
    """Which drafter to run, and how.

    Attributes:
        name: a drafter name (`DrafterFamily`): "auto", a Whisper name or path for a
            PyTorch drafter, or "ct2:<bundled name or CT2 dir>" for CTranslate2 at int8.
        threads: CPU threads of the drafter process (intra-op; one interop thread).
        language: language code for multilingual drafters; None detects it per window.
        task: "transcribe" or "translate".
        lookahead: how many windows the drafter may be given beyond the target's.
        tail_s: the encoder reads each window's speech and this much silence after it
            (`draft_audio`); None: Whisper's 30 s.
        timed: whether the models' warm-up is timed (`DraftCosts`); False where earlier runs'
            costs are kept: first calls only, and the drafter is ready a few tenths sooner.
        fault: FOR TESTS AND ROBUSTNESS BENCHMARKS ONLY: a deliberately bad drafter
            that the target must survive with unchanged output. "random": random words
            instead of the transcript; "empty": publishes nothing; "sleep": sleeps
            `SLEEP_FAULT_S` before each token (a hang); "crash": `os._exit` right after
            publishing the first text of a window.
    """

    name: str = "whisper-tiny.en"
    threads: int = 1
    language: str | None = None
    task: str = "transcribe"
    lookahead: int = 2
    fault: str | None = None
    tail_s: float | None = DEFAULT_TAIL_S
    timed: bool = True

    def __post_init__(self) -> None:
        if self.threads < 1 or self.lookahead < 0 or (self.tail_s or 0) < 0:
            raise ValueError(f"need threads >= 1 and lookahead >= 0, got {self}")
        if self.fault is not None and self.fault not in FAULTS:
            raise ValueError(f"fault must be None or one of {FAULTS}, got {self.fault!r}")

    @property
    def label(self) -> str:
        """Its name, with its encoder's input where that is not the default: e.g.
        "whisper-base (full input)", "whisper-tiny.en (tail 2.0 s)"."""
        if self.tail_s == DEFAULT_TAIL_S:
            return self.name
        return f"{self.name} ({'full input' if self.tail_s is None else f'tail {self.tail_s} s'})"

    @property
    def family(self) -> DrafterFamily:
        """What kind of drafter `name` stands for."""
        return DrafterFamily(self.name)


@dataclass(frozen=True)
class BusyInterval:
    """One window's drafting, for the timeline plot and the drafter's speed.

    Attributes:
        index: the window.
        start: when the drafter started it (`time.perf_counter()`, any process).
        end: when it finished or abandoned it.
        encode_s: features + encoder forward.
        tokens: drafter tokens produced.
        finished: False if abandoned because the target was already done with the window.
    """

    index: int
    start: float
    end: float
    encode_s: float
    tokens: int
    finished: bool
    stopped_s: float = 0.0  # of it, stopped while the target had its cores (`stop`)
