"""What a drafter name stands for, in one place: which kind of model drafts, how it publishes,
what its encoder reads, and how it is loaded. Without torch: the command line, the parent
process and a CTranslate2 drafter process read it before (or without) torch.

A drafter's text is a hint the target verifies, so a drafter may take every shortcut that
keeps it close (DESIGN.md, Drafters are approximate): its encoder reads the window's speech
plus a short tail instead of Whisper's 30 s (`draft_audio`), which costs a fraction on short
windows but lets the decoder run on past the content; `RunOnGuard` bounds that. Kinds
(`KINDS`):

    whisper-tiny.en, a HF dir/id   torch: the lean WhisperTarget decoder, approximate arithmetic,
                                   text after every token (drafting/torch_whisper.py)
    ct2:NAME, ct2:DIR               CTranslate2 int8, the window's text at its end (ct2_whisper.py)
    auto                            by the window's language: tiny.en for English, the
                                    multilingual bundled base otherwise (by_language.py)

A new kind of drafter is one new module with a `load(spec, model) -> DraftModel` function and
one `DrafterKind` in `KINDS`; nothing else asks which kind a drafter is.
"""

from __future__ import annotations

import importlib
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from as2d.types import HOP, MAX_WINDOW_S, N_FRAMES, N_SAMPLES, SAMPLE_RATE, Window

if TYPE_CHECKING:
    from as2d.runtime.spec import DrafterSpec
    from as2d.target import Backend

AUTO = "auto"
CT2_PREFIX = "ct2:"  # "ct2:<bundled name or CT2 dir>" runs CTranslate2 int8
ENGLISH_DRAFTER = "whisper-tiny.en"  # auto's drafter for English windows (and sd's default)
MULTILINGUAL_DRAFTER = "whisper-base"  # auto's drafter for other languages, or unknown ones
TRANSLATE_DRAFTER = "ct2:whisper-base"  # auto's drafter for --task translate
DEFAULT_TAIL_S = 1.0  # silence after the speech that a sized drafter encoder reads
SHORT_INPUT_S = 4.0  # the shorter of the two encoder inputs timed at start-up (`DraftCosts`)
ANY_LANGUAGE = "*"  # `DraftCosts` keys: a language code, or this for every other language
# RunOnGuard: the most tokens a draft may have per second of its input, plus a few; real
# speech is 2-4 tokens/s in English and up to about twice that in languages Whisper's
# vocabulary splits finer.
RUN_ON_TOKENS_PER_S = 10.0
RUN_ON_SLACK = 8
RUN_ON_NGRAM = 6  # a draft ends where its last RUN_ON_NGRAM tokens occurred
RUN_ON_REPEATS = 2  # this many times before (a phrase said twice may be speech; thrice, a loop)


@dataclass(frozen=True)
class DraftCosts:
    """A drafter's costs in CPU seconds per thread, timed at its start-up: its encoder on
    `SHORT_INPUT_S` and on 30 s of input (equal where it pads to 30 s), and a decoder step."""

    encode_short_s: float
    encode_full_s: float
    step_s: float

    def encode_s(self, seconds: float) -> float:
        """The encoder's cost on `seconds` of input, linear between the two timings.

        Example: DraftCosts(0.02, 0.11, 0.004).encode_s(17.0) -> 0.065
        """
        span = MAX_WINDOW_S - SHORT_INPUT_S
        share = min(1.0, max(0.0, (seconds - SHORT_INPUT_S) / span))
        return self.encode_short_s + share * (self.encode_full_s - self.encode_short_s)


def costs_for(costs: Mapping[str, DraftCosts] | None, language: str | None) -> DraftCosts | None:
    """The costs of the model that drafts `language` (None: not known yet) of a drafter's
    costs by language (`DraftModel.warm_up`)."""
    if not costs:
        return None
    return costs.get(language or ANY_LANGUAGE) or costs.get(ANY_LANGUAGE)


class DraftModel(Protocol):
    """What the drafter process needs from a drafter model."""

    streams: bool  # publishes text as it grows (else once, at the window's end)

    def encode(self, audio: np.ndarray, language: str | None) -> Any:
        """Features and encoder forward of one window's `draft_audio` ([samples] float32)."""
        ...

    def texts(self, encoded: Any) -> Iterator[tuple[int, str]]:
        """Greedy decoding under a `RunOnGuard`; yields (tokens so far, their text)."""
        ...

    def warm_up(self) -> dict[str, DraftCosts]:
        """Makes the first calls; returns the costs per language it drafts (`costs_for`)."""
        ...

    def costs(self) -> dict[str, DraftCosts]:
        """The costs per language timed so far: `warm_up`'s, and those of a model loaded since
        on first need (`ByLanguage`'s multilingual one)."""
        ...


def _check_torch(model: str) -> None:
    """A Whisper name, directory or id that PyTorch can load from this machine."""
    from as2d.models.bundled import local_model_dir

    local_model_dir(model)


def _check_ct2(model: str) -> None:
    """A bundled name or a CTranslate2 model's directory."""
    from as2d.models.bundled import BUNDLED, ModelNotFoundError

    if model not in BUNDLED and not Path(model).is_dir():
        raise ModelNotFoundError(
            f"unknown drafter {CT2_PREFIX + model!r}: ct2: takes a bundled model "
            f"({', '.join(sorted(BUNDLED))}) or a CTranslate2 model's directory"
        )


def _check_nothing(model: str) -> None:
    """`auto`'s models are bundled."""


@dataclass(frozen=True)
class DrafterKind:
    """One kind of drafter: which names are its, how its model loads and runs.

    Attributes:
        kind: its name ("torch", "ct2", "auto").
        module: the module whose `load(spec, model) -> DraftModel` loads it (imported then).
        prefix: names starting with it are this kind, the model after it ("ct2:"); "" for
            the kind of every other name (the last in `KINDS`).
        exact: the name is the prefix itself ("auto"), which is also its model.
        backend: "module:Class" of its runtime's `Backend` (constructed without arguments),
            which sets an in-process drafter's threads; None where they are fixed when the
            model loads (CTranslate2's come from the spec).
        streams: publishes text token by token (else only at a window's end).
        coupled: sd can run it in the target's process (a PyTorch model with a KV cache).
        by_language: the model that drafts a window depends on its language.
        check: raises ModelNotFoundError where its model is not on this machine.
    """

    kind: str
    module: str
    prefix: str
    exact: bool = False
    backend: str | None = "as2d.backends.torch_backend:TorchBackend"
    streams: bool = True
    coupled: bool = True
    by_language: bool = False
    check: Callable[[str], None] = _check_nothing

    def owns(self, name: str) -> bool:
        """Whether the drafter `name` is of this kind."""
        return name == self.prefix if self.exact else name.startswith(self.prefix)


KINDS = (  # the first that owns a name is its kind
    DrafterKind("auto", "as2d.drafting.by_language", AUTO, exact=True, by_language=True),
    DrafterKind(
        "ct2",
        "as2d.drafting.ct2_whisper",
        CT2_PREFIX,
        backend=None,
        streams=False,
        coupled=False,
        check=_check_ct2,
    ),
    DrafterKind("torch", "as2d.drafting.torch_whisper", "", check=_check_torch),
)


@dataclass(frozen=True)
class DrafterFamily:
    """The kind of drafter a name stands for (`KINDS`).

    Attributes:
        name: as given: "auto", "ct2:<bundled name or CT2 dir>", or a Whisper name, local
            directory or hub id (PyTorch).
    """

    name: str

    @property
    def entry(self) -> DrafterKind:
        """Its kind's registration in `KINDS`."""
        return next(k for k in KINDS if k.owns(self.name))

    @property
    def kind(self) -> str:
        """ "auto", "ct2" or "torch"."""
        return self.entry.kind

    @property
    def model(self) -> str:
        """The model after any prefix: "ct2:whisper-base" -> "whisper-base"."""
        kind = self.entry
        return self.name if kind.exact else self.name.removeprefix(kind.prefix)

    @property
    def streams(self) -> bool:
        """Whether its text arrives token by token (CTranslate2's only at a window's end)."""
        return self.entry.streams

    @property
    def coupled(self) -> bool:
        """Whether sd can run it in the target's process (a PyTorch model with a KV cache)."""
        return self.entry.coupled

    @property
    def by_language(self) -> bool:
        """Whether the model that drafts a window depends on its language (`model_for`)."""
        return self.entry.by_language

    def warm_keys(self, language: str | None) -> tuple[str, ...]:
        """The `DraftCosts` keys its start-up times for a drafter given `language`: "en" for
        `auto`'s English model (loaded at once unless another language is given), else "*"."""
        return ("en",) if self.by_language and language in (None, "en") else (ANY_LANGUAGE,)

    def model_for(self, language: str | None) -> str:
        """The Whisper model that drafts `language` (None: not known yet)."""
        if not self.by_language:
            return self.model
        return ENGLISH_DRAFTER if language == "en" else MULTILINGUAL_DRAFTER

    def aligner(self, language: str | None) -> str:
        """The Whisper model (in PyTorch) that times a chat target's transcript in `language`:
        the drafter's own, or the multilingual base where it is English-only."""
        name = self.model_for(language)
        return MULTILINGUAL_DRAFTER if name.endswith(".en") and language != "en" else name

    def check(self) -> None:
        """Raises ModelNotFoundError (a ValueError), one line, where the drafter's model is
        not on this machine: neither bundled nor a directory (nor, for PyTorch, in the local
        Hugging Face cache). Nothing is loaded."""
        self.entry.check(self.model)

    def load(self, spec: DrafterSpec) -> DraftModel:
        """The drafter model of `spec`, loaded in this process (a bundled CT2 name becomes its
        directory, joined into the cache on first use)."""
        module = importlib.import_module(self.entry.module)
        model: DraftModel = module.load(spec, self.model)
        return model

    def threads(self, threads: int) -> AbstractContextManager[None]:
        """Its runtime on `threads` in the block, then back (an in-process drafter sharing the
        target's process); nothing where its threads are fixed when it loads."""
        from as2d.target import threads_set

        where = self.entry.backend
        if where is None:
            return nullcontext()
        module, name = where.split(":")
        backend: Backend = getattr(importlib.import_module(module), name)()
        return threads_set(backend, threads)


def draft_seconds(window: Window, tail_s: float | None) -> float:
    """Seconds of input a drafter encodes for `window`: up to the end of its speech (the
    window's end where the voice activity detector's spans are unknown) plus `tail_s` of
    silence, at most 30 s; None: Whisper's 30 s.

    Example: a window 10.0-16.0 s with speech to 13.2 s, tail 1.0 -> 4.2
    """
    if tail_s is None:
        return MAX_WINDOW_S
    speech_end = max((end for _, end in window.speech), default=window.end)
    return min(MAX_WINDOW_S, max(0.0, min(speech_end, window.end) - window.start) + tail_s)


def draft_audio(window: Window, tail_s: float | None) -> np.ndarray:
    """The samples a drafter encodes for `window` (`draft_seconds`): cut after the speech's
    tail and padded with silence to it; None: the window's audio as it is (the drafter pads
    to 30 s)."""
    if tail_s is None:
        return window.audio[:N_SAMPLES]
    samples = min(N_SAMPLES, max(1, round(draft_seconds(window, tail_s) * SAMPLE_RATE)))
    audio = window.audio[:samples]
    return np.pad(audio, (0, samples - len(audio))) if len(audio) < samples else audio


def sized_frames(samples: int) -> int:
    """Log-mel frames a sized encoder reads for `samples` of audio: every 10 ms frame that
    holds audio, an even count (the encoder's second convolution halves it), at most 3000.

    Example: sized_frames(16000) -> 100 (1 s: 50 encoder positions)
    """
    frames = -(-samples // HOP)
    return min(N_FRAMES, max(2, frames + frames % 2))


class RunOnGuard:
    """Ends a draft that runs on past its audio's content: more tokens than
    `RUN_ON_TOKENS_PER_S` per second of its input plus `RUN_ON_SLACK`, or a token that closes
    an n-gram of `RUN_ON_NGRAM` tokens seen `RUN_ON_REPEATS` times before in the window (an
    encoder sized to the speech may loop over its last words; a target verifies every token
    anyway, so a draft cut early costs candidates, never output).

    Example:
        guard = RunOnGuard(seconds=3.0)
        [guard.stops(t) for t in [1, 2, 3] * 4]  # "Thank you." over and over
        -> [False] * 11 + [True]  # the 6-gram 1 2 3 1 2 3 ends at tokens 6, 9 and 12
    """

    def __init__(self, seconds: float) -> None:
        self.limit = math.ceil(RUN_ON_TOKENS_PER_S * seconds) + RUN_ON_SLACK
        self.tokens: list[int] = []
        self._seen: Counter[tuple[int, ...]] = Counter()

    def stops(self, token: int) -> bool:
        """Whether the draft ends before `token`; else `token` is taken."""
        if len(self.tokens) >= self.limit:
            return True
        if len(self.tokens) >= RUN_ON_NGRAM - 1:
            ngram = (*self.tokens[len(self.tokens) - RUN_ON_NGRAM + 1 :], token)
            if self._seen[ngram] >= RUN_ON_REPEATS:
                return True
            self._seen[ngram] += 1
        self.tokens.append(token)
        return False


def guarded(tokens: Sequence[int], seconds: float) -> list[int]:
    """`tokens` up to where a `RunOnGuard` for `seconds` of input ends them."""
    guard = RunOnGuard(seconds)
    for token in tokens:
        if guard.stops(token):
            break
    return guard.tokens
