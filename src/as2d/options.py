"""Options: how to decode (target, runtime, method, task, drafter, budget, threads, device),
and checks.

Shared by the API, the command line and the benchmark; nothing here loads a model, and torch
is imported only inside the functions that use it, so the command line parses without it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from as2d.backends import RUNTIMES
from as2d.drafting.family import (
    AUTO,
    CT2_PREFIX,
    DEFAULT_TAIL_S,
    ENGLISH_DRAFTER,
    MULTILINGUAL_DRAFTER,
    TRANSLATE_DRAFTER,
    DrafterFamily,
)
from as2d.runtime.cores import thread_split
from as2d.runtime.spec import DrafterSpec

if TYPE_CHECKING:
    from as2d.engine.verify import Rule

METHODS = ("as2d", "target", "pld", "sd")
DTYPES = ("float32", "float16", "bfloat16")  # Options.dtype: names of torch dtypes
TASKS = ("transcribe", "translate", "ask")
TIMESTAMPS = ("none", "segment", "word")  # Options.timestamps: WindowResult.segments, words


@dataclass(frozen=True)
class Options:
    """How to decode, shared by every recording of a Transcriber."""

    target: str = "whisper-base"  # bundled name, local directory or Hugging Face id
    runtime: str = "torch"  # what runs the target: one of backends.RUNTIMES ("mnn": CPU)
    device: str = "cpu"  # the target's device: "cpu" or "cuda" (the drafter stays on the CPU)
    dtype: str | None = None  # the target's weights: float32/float16/bfloat16; None: default
    method: str = "as2d"  # one of METHODS
    language: str | None = None  # None: detected from the first window (multilingual targets)
    task: str = "transcribe"  # "transcribe", "translate" (to English) or "ask" (audio LLMs)
    request: str | None = None  # the user's request about the audio (task "ask")
    temperature: float = 0.0  # 0: greedy (exact tokens); > 0: sampling (exact distribution)
    seed: int | None = None  # sampling seed, for reproducible runs
    # Speculation (as2d, sd, pld)
    drafter: str = AUTO  # "auto" (by language), a Whisper name/path, "ct2:NAME" (int8)
    drafter_tail_s: float | None = DEFAULT_TAIL_S  # silence its encoder reads after the
    # speech (`draft_audio`); None: Whisper's 30 s
    budget: int | None = None  # None: chosen per step from the measured cost; else fixed k
    max_k: int = 16  # the largest budget considered
    lookahead: int = 2  # windows the drafter may run ahead of the target
    drafts: str = "auto"  # as2d: "auto" uses drafts stored before (runtime/drafts.py); "off"
    drafts_dir: str | None = None  # the draft store; None: $AS2D_CACHE/drafts
    prepared: str = "auto"  # "auto" uses the target's encoder outputs stored ahead (`as2d
    # prepare`, runtime/prepared.py, under drafts_dir); "off" computes every one
    # Threads: default splits the cores between target and drafter (as2d), else all cores
    threads: int | None = None  # the target's threads (on its runtime)
    drafter_threads: int | None = None
    lend_cores: bool = True  # as2d, CPU: the drafter stops for the target's encoder (see as2d.py)
    draft_gate: bool = True  # as2d, CPU: windows too short to pay for drafting are decoded alone
    drafter_fault: str | None = None  # tests and robustness benchmarks only (DrafterSpec.fault)
    # Windows: None holds as many utterances as fit in 30 s; else each utterance is a window,
    # ended by a pause of this many ms (as live audio is cut: `SpeechWindower`)
    endpoint_ms: int | None = None
    # Output
    timestamps: str = "none"  # "segment": WindowResult.segments; "word": with their words

    @property
    def drafter_used(self) -> str | None:
        """The drafter model this method decodes with (as2d, sd), else None: what outputs
        name as the run's drafter."""
        return self.drafter if self.method in ("as2d", "sd") else None

    def __post_init__(self) -> None:
        """ "auto" stays for as2d's transcripts (a drafter per window by language); a
        translation keeps the multilingual int8 base, and sd one model in its own process."""
        if self.drafter != AUTO or (self.method != "sd" and self.task != "translate"):
            return
        english = self.task != "translate" and self.language in (None, "en")
        if self.method == "sd":
            default = ENGLISH_DRAFTER if english else MULTILINGUAL_DRAFTER
        else:
            default = TRANSLATE_DRAFTER
        object.__setattr__(self, "drafter", default)


def parse_budget(text: str) -> int | None:
    """ "auto" -> None (`Options.budget`: chosen per step); "4" -> 4. Raises ValueError else."""
    if text == "auto":
        return None
    if not text.isdigit():
        raise ValueError(f"budget must be auto or a number, got {text!r}")
    return int(text)


def drafter_spec(options: Options) -> DrafterSpec | None:
    """The drafter process that `options` ask for (method as2d), on its share of the cores."""
    o = options
    if o.method != "as2d":
        return None
    task = "transcribe" if o.task == "ask" else o.task  # ask: drafts are the transcript
    return DrafterSpec(
        o.drafter, thread_split(o)[1], o.language, task, o.lookahead, o.drafter_fault,
        o.drafter_tail_s,
    )  # fmt: skip


def preparing(options: Options) -> Options:
    """`options` with the drafter of work nobody waits for (`as2d prepare`, a server's
    recordings sent ahead): the one that agrees best with the target, not the fastest. For a
    bundled Whisper target that is its own CTranslate2 int8 copy, whatever the language: on
    the hard set it covers 83 % of whisper-base's tokens where tiny.en covers 50 % (`as2d
    bench --drafts ready`). The target's own weights on its full 30 s input tie with it there
    (81 %; 1.44x against 1.45x), though they cover short requests better (75 % against 71 %).
    A drafter the user named, or any other target's, stays."""
    from as2d.models.bundled import BUNDLED

    if options.drafter == AUTO and options.target in BUNDLED and options.runtime == "torch":
        return replace(options, drafter=CT2_PREFIX + options.target)
    return options


def aligner_name(options: Options, language: str | None) -> str:
    """The Whisper model that times a chat target's transcript (`DrafterFamily.aligner`)."""
    return DrafterFamily(options.drafter).aligner(language)


def rule(options: Options, bound: float = 0.0) -> Rule:
    """Greedy, or temperature sampling with its own seeded generator; `bound`: the guard's
    (`Backend.bound` of the target's runtime)."""
    import torch

    from as2d.engine.verify import Greedy, Sampling

    if options.temperature == 0:
        return Greedy(bound)
    generator = torch.Generator()
    generator.manual_seed(options.seed if options.seed is not None else torch.seed())
    return Sampling(options.temperature, generator, bound)


def _check_runtime(options: Options) -> None:
    """Raises ValueError, one line, for a runtime that cannot run these options."""
    if options.runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {options.runtime!r}; choose from {', '.join(RUNTIMES)}")
    if options.runtime == "torch":
        return
    if options.device != "cpu" or options.dtype not in (None, "float32"):
        raise ValueError(f"the {options.runtime} runtime runs float32 on the CPU")
    if options.method == "sd":
        raise ValueError(f"sd runs its drafter beside a torch target, not on {options.runtime}")
    if options.timestamps != "none":
        raise ValueError(f"timestamps are not available on {options.runtime} (use torch)")


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def check_timestamps(timestamps: str) -> None:
    """Raises ValueError, one line, unless `timestamps` is one of TIMESTAMPS."""
    if timestamps not in TIMESTAMPS:
        raise ValueError(f"timestamps must be one of {', '.join(TIMESTAMPS)}, got {timestamps!r}")


def has_transcript_to_time(task: str, times_words: bool) -> bool:
    """Whether timestamps can be had: a target that times its own words (Whisper, any task),
    or a chat target's transcription (forced through a Whisper aligner); an answer to a
    request or a chat target's translation is not said in the audio."""
    return times_words or task == "transcribe"


def check(options: Options) -> None:
    """Raises ValueError, one line, for options no Transcriber can run."""
    if options.method not in METHODS:
        raise ValueError(f"unknown method {options.method!r}; choose from {', '.join(METHODS)}")
    if options.task not in TASKS:
        raise ValueError(f"unknown task {options.task!r}; choose from {', '.join(TASKS)}")
    if options.task == "ask" and not (options.request and options.request.strip()):
        raise ValueError("the ask task needs a request, e.g. 'Summarise the recording.'")
    if options.temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {options.temperature}")
    _check_runtime(options)
    if options.dtype is not None and options.dtype not in DTYPES:
        raise ValueError(f"unknown dtype {options.dtype!r}; choose from {', '.join(DTYPES)}")
    if options.device != "cpu" and not options.device.startswith("cuda"):
        raise ValueError(f"unknown device {options.device!r}; use cpu or cuda[:N]")
    if options.device.startswith("cuda") and not _cuda_available():
        raise ValueError(f"device {options.device} asked for, but torch sees no CUDA GPU here")
    if options.method == "sd" and not DrafterFamily(options.drafter).coupled:
        raise ValueError(
            f"sd needs a PyTorch drafter (its KV cache follows the target), not {options.drafter!r}"
        )
    if options.drafter_tail_s is not None and not 0 <= options.drafter_tail_s <= 30:
        raise ValueError(f"the drafter's tail must be 0-30 s, got {options.drafter_tail_s}")
    check_timestamps(options.timestamps)
    if options.endpoint_ms is not None and not 100 <= options.endpoint_ms <= 10_000:
        raise ValueError(f"the endpoint must be 100-10000 ms, got {options.endpoint_ms}")
    if options.drafts not in ("auto", "off"):
        raise ValueError(f"drafts must be auto or off, got {options.drafts!r}")
    if options.prepared not in ("auto", "off"):
        raise ValueError(f"prepared must be auto or off, got {options.prepared!r}")
    if options.budget is not None and not 0 <= options.budget <= options.max_k:
        raise ValueError(f"budget must be between 0 and {options.max_k}, got {options.budget}")
