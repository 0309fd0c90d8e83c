"""The drafter process itself: load a small model, then draft windows in order.

Runs in a spawned child (see `drafter.py` for the parent side and the message list). It
decodes each window greedily following its own history and publishes the text as it grows;
it skips or abandons windows the target is already done with.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import random
import signal
import string
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from as2d.models.tokenizer import WhisperTokenizer
from as2d.runtime.frames import Outbox
from as2d.runtime.spec import CRASH_EXIT_CODE, SLEEP_FAULT_S, DrafterSpec
from as2d.sequences import common_prefix
from as2d.types import N_SAMPLES

_IDLE_CHECK_S = 0.5  # an idle child checks this often that its parent is still alive
_PR_SET_PDEATHSIG = 1  # prctl option (Linux): a signal the kernel sends when the parent dies
_WARM_STEPS = 8  # decoder steps timed at start-up


@dataclass(frozen=True)
class ChildLink:
    """The child's ends of what it shares with the parent (pickled into it at spawn)."""

    windows: Connection  # reads (index, slot, samples) per submitted window
    results: Connection  # writes framed messages (module docstring)
    released: Any  # RawValue("q"): the last window the target is done with
    audio: Any  # RawArray("f", slots * N_SAMPLES): window audio, one slot per window in flight

    def slots(self) -> np.ndarray:
        """The audio slots as an array view: [slots, N_SAMPLES] float32."""
        return np.frombuffer(self.audio, dtype=np.float32).reshape(-1, N_SAMPLES)


class _ChildDrafter(Protocol):
    """What the child loop needs from a drafter model."""

    def encode(self, audio: np.ndarray) -> Any:
        """Features + encoder forward of one window ([samples] float32, 16 kHz)."""
        ...

    def texts(self, encoded: Any) -> Iterator[tuple[int, str]]:
        """Greedy decoding; yields (tokens so far, their text) as the text grows."""
        ...

    def warm_up(self) -> tuple[float, float]:
        """Makes the first calls; returns the seconds of a window's encoder and of a token."""
        ...


def _busy_s(threads: int) -> float:
    """This process's CPU seconds per thread: the time a call takes on the drafter's own
    cores, not inflated by the parent, which loads and warms up the target at the same time."""
    return time.process_time() / threads


def _timed_encode(drafter: _ChildDrafter, threads: int) -> tuple[Any, float]:
    """A silent window encoded twice (the first call pays one-off set-up); the second's time."""
    silence = np.zeros(N_SAMPLES // 30, np.float32)  # any length: padded to 30 s
    drafter.encode(silence)
    start = _busy_s(threads)
    encoded = drafter.encode(silence)
    return encoded, _busy_s(threads) - start


def _warm_prompt(tokenizer: WhisperTokenizer, spec: DrafterSpec) -> list[int]:
    """The prompt of the warm-up steps: the spec's language, else English."""
    language = (spec.language or "en") if tokenizer.multilingual else None
    return tokenizer.prompt(language, spec.task)


class _TorchDrafter:
    """Any Whisper through the lean `WhisperTarget` decoder, yielding text after every token.

    torch and transformers are imported here, in the child, so a CTranslate2 drafter
    process never loads them (seconds of start-up and hundreds of MB saved).
    """

    def __init__(self, spec: DrafterSpec) -> None:
        import torch

        from as2d.models.whisper import WhisperTarget

        torch.set_num_threads(spec.threads)
        # In-process drafting (`drafts.py`) where torch already ran cannot change it.
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(1)
        # A drafter need not be exact: bfloat16 encoder, int8 decoder (see WhisperTarget).
        self.model = WhisperTarget.load(spec.name, approximate=True)
        self.tokenizer = self.model.tokenizer
        self.spec = spec

    def encode(self, audio: np.ndarray) -> Any:
        return self.model.encode(audio)

    def warm_up(self) -> tuple[float, float]:
        threads = self.spec.threads
        encoded, encode_s = _timed_encode(self, threads)
        self.model.prefill(encoded, _warm_prompt(self.tokenizer, self.spec))
        start = _busy_s(threads)
        for _ in range(_WARM_STEPS):
            self.model.forward([self.tokenizer.eot])  # any token: a step costs the same
        return encode_s, (_busy_s(threads) - start) / _WARM_STEPS

    def texts(self, encoded: Any) -> Iterator[tuple[int, str]]:
        language = self.spec.language
        if self.tokenizer.multilingual and language is None:
            language = self.model.detect_language(encoded)
        prompt = self.tokenizer.prompt(language, self.spec.task)
        scores = self.model.prefill(encoded, prompt)  # [V]
        tokens: list[int] = []
        while True:
            token = int(scores.argmax())
            if token in self.model.eot_ids or self.model.length >= self.model.max_length:
                return
            tokens.append(token)
            yield len(tokens), self.tokenizer.decode(tokens)
            scores = self.model.forward([token])[-1]


class _CT2Drafter:
    """A CTranslate2 Whisper at int8: greedy, no timestamps, one text per window.

    Log-mel features come from faster-whisper's numpy extractor (the same computation
    as transformers' `WhisperFeatureExtractor`), so this process needs no torch.
    """

    def __init__(self, spec: DrafterSpec, directory: str) -> None:
        import ctranslate2
        from faster_whisper.feature_extractor import FeatureExtractor

        self.model = ctranslate2.models.Whisper(
            directory, device="cpu", compute_type="int8", intra_threads=spec.threads
        )
        self.features = FeatureExtractor(feature_size=self.model.n_mels)
        self.tokenizer = WhisperTokenizer.from_model_dir(Path(directory))
        self.storage = ctranslate2.StorageView
        self.spec = spec

    def encode(self, audio: np.ndarray) -> Any:
        padded = np.pad(audio[:N_SAMPLES], (0, max(0, N_SAMPLES - len(audio))))
        feats = self.features(padded, padding=0)[np.newaxis]  # [1, n_mels, 3000]
        return self.model.encode(self.storage.from_array(feats.astype(np.float32)))

    def warm_up(self) -> tuple[float, float]:
        threads = self.spec.threads
        encoded, encode_s = _timed_encode(self, threads)
        prompt = _warm_prompt(self.tokenizer, self.spec)

        def generate(tokens: int) -> tuple[int, float]:  # end-of-text suppressed: `tokens` made
            start = _busy_s(threads)
            (result,) = self.model.generate(
                encoded, [prompt], beam_size=1, max_length=len(prompt) + tokens,
                suppress_tokens=[-1, self.tokenizer.eot], suppress_blank=False,
            )  # fmt: skip
            return len(result.sequences_ids[0]), _busy_s(threads) - start

        (few, few_s), (more, more_s) = generate(1), generate(1 + _WARM_STEPS)
        return encode_s, max(0.0, more_s - few_s) / max(1, more - few)

    def texts(self, encoded: Any) -> Iterator[tuple[int, str]]:
        language = self.spec.language
        if self.tokenizer.multilingual and language is None:
            language = self.model.detect_language(encoded)[0][0][0][2:-2]  # "<|en|>" -> "en"
        prompt = self.tokenizer.prompt(language, self.spec.task)
        (result,) = self.model.generate(encoded, [prompt], beam_size=1)
        ids = result.sequences_ids[0]
        yield len(ids), self.tokenizer.decode(ids)


def _with_fault(
    fault: str | None, texts: Iterator[tuple[int, str]], seed: int
) -> Iterator[tuple[int, str]]:
    """Applies `DrafterSpec.fault` (tests and robustness benchmarks only) to a text stream."""
    if fault is None:
        yield from texts
        return
    if fault == "empty":
        return
    rng = random.Random(seed)
    noise = ""
    for n, text in texts:
        if fault == "sleep":
            time.sleep(SLEEP_FAULT_S)
        if fault == "random":
            noise += " " + "".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 8)))
        yield n, noise if fault == "random" else text
        if fault == "crash":
            os._exit(CRASH_EXIT_CODE)


def _publish(out: Outbox, index: int, sent: str, text: str) -> str:
    """Sends what changed between the published `sent` and `text`; returns the new published text.

    A trailing U+FFFD (a UTF-8 character split across tokens) is held back until complete.
    """
    text = text.rstrip("\ufffd")
    if text == sent:
        return sent
    keep = len(sent) if text.startswith(sent) else common_prefix(sent, text)
    out.send("text", index, keep, text[keep:])
    return text


def _die_with_parent() -> None:
    """Asks Linux to kill this process when its parent dies, even while it is stopped
    (`DrafterProcess.stop`); elsewhere the idle check in `_next_window` must do.

    The kernel sends the signal when the *thread* that started this process exits, so the
    parent starts it from a thread that lives as long as the process (`DrafterProcess.start`).
    A parent already gone before the request is noticed by `getppid` (we were re-parented).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux
        return
    parent = mp.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(0)


def _ignore_interrupts() -> None:
    """Leaves Ctrl-C to the parent: it reaches the whole process group, and the parent
    closes this process when it is interrupted. The parent starts this process with SIGINT
    blocked (`DrafterProcess.start`), so a Ctrl-C during start-up is held pending until now,
    when ignoring SIGINT discards it: no traceback from a half-started interpreter."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # POSIX
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _draft_window(
    spec: DrafterSpec,
    drafter: _ChildDrafter,
    out: Outbox,
    link: ChildLink,
    index: int,
    audio: np.ndarray,
) -> None:
    """Drafts one window, publishing its text as it grows; abandons it once the target is done."""
    start = time.perf_counter()
    out.send("start", index, start)
    encoded = drafter.encode(audio)
    out.send("encoded", index, time.perf_counter())
    sent, tokens, finished = "", 0, True
    for count, text in _with_fault(spec.fault, drafter.texts(encoded), index):
        if link.released.value >= index:
            finished = False
            break
        sent, tokens = _publish(out, index, sent, text), count
    out.send("done", index, start, time.perf_counter(), tokens, finished)


def _next_window(link: ChildLink) -> tuple[int, np.ndarray] | None:
    """Waits for the next window, copied out of its slot; None once the parent is gone."""
    parent = mp.parent_process()
    try:
        while parent is None or parent.is_alive():
            if link.windows.poll(_IDLE_CHECK_S):
                index, slot, samples = link.windows.recv()
                return index, link.slots()[slot, :samples].copy()
    except EOFError:  # the parent closed its end
        pass
    return None


def make_drafter(spec: DrafterSpec) -> _ChildDrafter:
    """The drafter model of `spec` (its CTranslate2 name already a directory)."""
    ct2 = spec.ct2_model
    return _CT2Drafter(spec, ct2) if ct2 else _TorchDrafter(spec)


def child_main(spec: DrafterSpec, link: ChildLink) -> None:
    """Entry point of the drafter process: load the model, then draft windows in order."""
    _ignore_interrupts()
    _die_with_parent()
    out = Outbox(link.results.fileno())
    try:
        drafter = make_drafter(spec)
        out.send("ready", time.perf_counter(), *drafter.warm_up())
        while (item := _next_window(link)) is not None:
            index, audio = item
            if index > link.released.value:
                _draft_window(spec, drafter, out, link, index, audio)
    except BrokenPipeError:  # the parent is gone: nobody to tell
        return
    except Exception as err:
        out.send("error", f"{type(err).__name__}: {err}")
        raise


# ---------------------------------------------------------------- parent side
