"""The drafter worker: a small audio model in its own process, drafting windows ahead of the target.

AS²D's drafter transcribes each window greedily on its own, following its own history,
and publishes a growing text per window; the target reads whatever is there without
ever waiting (DESIGN.md, Concurrency). A separate process gives the drafter its own
cores and its own interpreter (no GIL contention with the target), and makes it
disposable: if it crashes, hangs or falls behind, the target carries on alone.

IPC, chosen so that no parent-side call can block (no threads, no locks, no big pickles):

    parent ── window audio copied into shared memory: one 30 s slot per window in flight ──► child
    parent ── (index, slot, samples) on a pipe, a few bytes per window ─────────────────────► child
    parent ◄── length-prefixed pickled tuples on a pipe, read with O_NONBLOCK ─────────────── child
    parent ── `released`: shared int, the last window the target is done with ──────────────► child

At most `lookahead + 1` windows are in flight (see `DrafterProcess.wants`), so window i's
slot (i mod lookahead + 1) is reused only once the target is done with window i; the
child copies a window out of its slot before drafting it, and a window it is still on
when the slot is reused is one the target no longer wants (the child abandons it).

Messages from the child (times are `time.perf_counter()`: CLOCK_MONOTONIC on Linux,
one system-wide clock, so child and parent times are directly comparable):

    ("ready", t)                             model loaded
    ("start", index, t) / ("encoded", index, t)
    ("text", index, keep, delta)             window text is now text[:keep] + delta
    ("done", index, start, end, tokens, finished)
    ("error", message)                       the drafter failed to load or run

Text, not token ids, crosses the pipe: the drafter's vocabulary may differ from the
target's, and `DraftTokens` re-encodes it with the target's tokenizer. A torch drafter
publishes after every token: batching is not worth it, as a message costs 5-100 µs of
CPU on each side (pickle + one write; one read + unpickle) against 15-25 ms per tiny.en
token on one thread (measured on a busy 2-core VM). A CTranslate2 drafter has no token
callback, so it publishes each window's text once, when done.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import random
import string
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from as2d.models.tokenizer import WhisperTokenizer
from as2d.types import MAX_WINDOW_S, SAMPLE_RATE, Window

CT2_PREFIX = "ct2:"  # DrafterSpec.name "ct2:<bundled name or CT2 dir>" runs CTranslate2 int8
FAULTS = ("random", "empty", "sleep", "crash")  # DrafterSpec.fault values (tests only)
CRASH_EXIT_CODE = 70  # exit status of a drafter with fault="crash"
SLEEP_FAULT_S = 3600.0  # a drafter with fault="sleep" sleeps this long before each token
_HEADER = struct.Struct("<I")  # frame header: payload length in bytes
_READ_CHUNK = 1 << 16  # bytes per os.read; a poll reads at most _MAX_POLL_BYTES
_MAX_POLL_BYTES = 1 << 20
_IDLE_CHECK_S = 0.5  # an idle child checks this often that its parent is still alive
N_SAMPLES = int(MAX_WINDOW_S * SAMPLE_RATE)  # 480_000 samples: a window's slot, 1.9 MB float32
_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_CHILD_ENV = (
    ("OMP_WAIT_POLICY", "PASSIVE"),  # idle drafter threads sleep instead of spinning on cores
    # No progress bars in the drafter: no noise on the terminal, and no tqdm lock, a
    # semaphore that a terminated child would leave to the resource tracker.
    ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
)


@dataclass(frozen=True)
class DrafterSpec:
    """Which drafter to run, and how.

    Attributes:
        name: a `load_whisper` name or path ("whisper-tiny.en", a local HF dir, a hub
            id) for a PyTorch drafter, or "ct2:<bundled name or CT2 dir>" for a
            CTranslate2 drafter at int8.
        threads: CPU threads of the drafter process (intra-op; one interop thread).
        language: language code for multilingual drafters; None detects it per window.
        task: "transcribe" or "translate".
        lookahead: how many windows the drafter may be given beyond the target's.
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

    def __post_init__(self) -> None:
        if self.threads < 1 or self.lookahead < 0:
            raise ValueError(f"need threads >= 1 and lookahead >= 0, got {self}")
        if self.fault is not None and self.fault not in FAULTS:
            raise ValueError(f"fault must be None or one of {FAULTS}, got {self.fault!r}")

    @property
    def ct2_model(self) -> str | None:
        """The bundled name or directory after "ct2:", or None for a PyTorch drafter."""
        return self.name.removeprefix(CT2_PREFIX) if self.name.startswith(CT2_PREFIX) else None


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


@dataclass(frozen=True)
class _ChildLink:
    """The child's ends of what it shares with the parent (pickled into it at spawn)."""

    windows: Connection  # reads (index, slot, samples) per submitted window
    results: Connection  # writes framed messages (module docstring)
    released: Any  # RawValue("q"): the last window the target is done with
    audio: Any  # RawArray("f", slots * N_SAMPLES): window audio, one slot per window in flight

    def slots(self) -> np.ndarray:
        """The audio slots as an array view: [slots, N_SAMPLES] float32."""
        return np.frombuffer(self.audio, dtype=np.float32).reshape(-1, N_SAMPLES)


# ---------------------------------------------------------------- child process


class _Outbox:
    """Child -> parent: length-prefixed pickles on the pipe (only the child ever blocks)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def send(self, *message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(self._fd, view) :]


class _ChildDrafter(Protocol):
    """What the child loop needs from a drafter model."""

    def encode(self, audio: np.ndarray) -> Any:
        """Features + encoder forward of one window ([samples] float32, 16 kHz)."""
        ...

    def texts(self, encoded: Any) -> Iterator[tuple[int, str]]:
        """Greedy decoding; yields (tokens so far, their text) as the text grows."""
        ...


def _prompt(tokenizer: WhisperTokenizer, language: str | None, task: str) -> list[int]:
    """The decoder prompt without timestamps: [sot, (language, task,)] + [notimestamps]."""
    return [*tokenizer.sot_sequence(language, task), tokenizer.no_timestamps]


class _TorchDrafter:
    """Any Whisper through the lean `WhisperTarget` decoder, yielding text after every token.

    torch and transformers are imported here, in the child, so a CTranslate2 drafter
    process never loads them (seconds of start-up and hundreds of MB saved).
    """

    def __init__(self, spec: DrafterSpec) -> None:
        import torch

        from as2d.models.bundled import load_whisper
        from as2d.models.whisper import WhisperTarget

        torch.set_num_threads(spec.threads)
        torch.set_num_interop_threads(1)
        model, self.tokenizer = load_whisper(spec.name)
        self.model = WhisperTarget(model, self.tokenizer)
        self.spec = spec

    def encode(self, audio: np.ndarray) -> Any:
        return self.model.encode(audio)

    def texts(self, encoded: Any) -> Iterator[tuple[int, str]]:
        language = self.spec.language
        if self.tokenizer.multilingual and language is None:
            language = self.model.detect_language(encoded)
        prompt = _prompt(self.tokenizer, language, self.spec.task)
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

    def texts(self, encoded: Any) -> Iterator[tuple[int, str]]:
        language = self.spec.language
        if self.tokenizer.multilingual and language is None:
            language = self.model.detect_language(encoded)[0][0][0][2:-2]  # "<|en|>" -> "en"
        prompt = _prompt(self.tokenizer, language, self.spec.task)
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


def _publish(out: _Outbox, index: int, sent: str, text: str) -> str:
    """Sends what changed between the published `sent` and `text`; returns the new published text.

    A trailing U+FFFD (a UTF-8 character split across tokens) is held back until complete.
    """
    text = text.rstrip("\ufffd")
    if text == sent:
        return sent
    keep = len(sent) if text.startswith(sent) else _common_prefix(sent, text)
    out.send("text", index, keep, text[keep:])
    return text


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of `a` and `b`."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _draft_window(
    spec: DrafterSpec,
    drafter: _ChildDrafter,
    out: _Outbox,
    released: Any,
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
        if released.value >= index:
            finished = False
            break
        sent, tokens = _publish(out, index, sent, text), count
    out.send("done", index, start, time.perf_counter(), tokens, finished)


def _next_window(link: _ChildLink) -> tuple[int, np.ndarray] | None:
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


def _child_main(spec: DrafterSpec, link: _ChildLink) -> None:
    """Entry point of the drafter process: load the model, then draft windows in order."""
    out = _Outbox(link.results.fileno())
    try:
        ct2 = spec.ct2_model
        drafter: _ChildDrafter = _CT2Drafter(spec, ct2) if ct2 else _TorchDrafter(spec)
        out.send("ready", time.perf_counter())
        while (item := _next_window(link)) is not None:
            index, audio = item
            if index > link.released.value:
                _draft_window(spec, drafter, out, link.released, index, audio)
    except BrokenPipeError:  # the parent is gone: nobody to tell
        return
    except Exception as err:
        out.send("error", f"{type(err).__name__}: {err}")
        raise


# ---------------------------------------------------------------- parent side


class _FrameReader:
    """Parent side of the pipe: non-blocking reads, whole frames out, partial frames kept."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._buffer = bytearray()
        self.eof = False  # the child's end is closed: it exited

    def messages(self) -> list[tuple[Any, ...]]:
        """Every complete message available now (never waits)."""
        self._fill()
        found, pos, buffer = [], 0, self._buffer
        while len(buffer) - pos >= _HEADER.size:
            (size,) = _HEADER.unpack_from(buffer, pos)
            if len(buffer) - pos - _HEADER.size < size:
                break
            found.append(pickle.loads(buffer[pos + _HEADER.size : pos + _HEADER.size + size]))
            pos += _HEADER.size + size
        del buffer[:pos]
        return found

    def _fill(self) -> None:
        while len(self._buffer) < _MAX_POLL_BYTES:
            try:
                chunk = os.read(self._fd, _READ_CHUNK)
            except BlockingIOError:
                return
            if not chunk:
                self.eof = True
                return
            self._buffer += chunk


@dataclass
class _WindowDraft:
    text: str = ""
    done: bool = False


class DrafterProcess:
    """Parent-side handle of a drafter process; every method returns at once.

    Args:
        spec: the drafter.
        stall_s: `lost` once the drafter has work but sends nothing for this long.
        startup_s: the same limit before the model is loaded.

    Example:
        with DrafterProcess(DrafterSpec("whisper-tiny.en")) as drafter:
            for w in windows_ahead:                    # as the target moves on
                if drafter.wants(w.index):
                    drafter.submit(w)
            drafter.poll()
            drafter.text(0)  -> " Welcome to Comedian Mail."   # whatever is ready
            drafter.release(0)                         # target done with window 0
    """

    def __init__(self, spec: DrafterSpec, stall_s: float = 30.0, startup_s: float = 300.0) -> None:
        self.spec = spec
        self.stall_s = stall_s
        self.startup_s = startup_s
        self.lost = False
        self.reason: str | None = None  # why the drafter was lost
        self.ready = False  # model loaded
        self.intervals: list[BusyInterval] = []  # one small record per window drafted
        self._ctx = mp.get_context("spawn")
        self._process: Any = None
        self._drafts: dict[int, _WindowDraft] = {}
        self._submitted = -1  # highest window index submitted
        self._released: Any = self._ctx.RawValue("q", -1)  # shared with the child
        self._encoded: dict[int, float] = {}  # window -> time its encoding ended
        self._last_heard = 0.0
        self._closed = False
        self._slots = spec.lookahead + 1  # windows in flight, each with a 30 s audio slot
        self._audio: Any = None  # set by start(): the shared RawArray
        self._slot_audio = np.empty((0, N_SAMPLES), np.float32)  # [slots, N_SAMPLES] view of it
        self._windows: Any = None  # our end of the windows pipe
        self._results: Any = None  # our end of the results pipe
        self._frames: Any = None

    def __enter__(self) -> DrafterProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Spawns the drafter process; it loads its model in the background.

        A bundled CT2 name is resolved to its directory here (split model files are
        joined into the cache once, on first use), so the child never imports torch.
        """
        try:
            spec = _with_ct2_dir(self.spec)
        except ValueError as err:  # ModelNotFoundError: the target carries on alone
            self._lose(f"drafter failed: {err}")
            return
        self._audio = self._ctx.RawArray("f", self._slots * N_SAMPLES)
        self._slot_audio = np.frombuffer(self._audio, np.float32).reshape(self._slots, N_SAMPLES)
        windows, self._windows = self._ctx.Pipe(duplex=False)
        self._results, results = self._ctx.Pipe(duplex=False)
        link = _ChildLink(windows, results, self._released, self._audio)
        self._process = self._ctx.Process(target=_child_main, args=(spec, link), daemon=True)
        with _child_env(self.spec.threads):
            self._process.start()
        windows.close()  # the child holds the other ends: EOF on results means it is gone
        results.close()
        os.set_blocking(self._windows.fileno(), False)  # a full pipe must not block submit
        self._frames = _FrameReader(self._results.fileno())
        self._last_heard = time.perf_counter()

    @property
    def alive(self) -> bool:
        """Started, not lost and not closed (as of the last `poll`)."""
        return self._process is not None and not self.lost and not self._closed

    @property
    def busy_s(self) -> float:
        """Seconds the drafter spent on windows (finished or abandoned) so far."""
        return sum(i.end - i.start for i in self.intervals)

    @property
    def windows_drafted(self) -> int:
        """Windows the drafter finished."""
        return sum(i.finished for i in self.intervals)

    @property
    def held_windows(self) -> int:
        """Windows whose draft is held in memory (submitted and not released)."""
        return len(self._drafts)

    def wants(self, index: int) -> bool:
        """Whether to submit window `index` now.

        True for the next window not yet submitted while it is at most `spec.lookahead`
        windows beyond the target's (the target is on the window after the last one
        released), and the drafter is not lost.
        """
        target_on = self._released.value + 1
        return self.alive and index > self._submitted and index <= target_on + self.spec.lookahead

    def submit(self, window: Window) -> None:
        """Hands a window to the drafter: copies its audio (≤ 30 s) into its shared slot.

        Raises:
            ValueError: `wants(window.index)` is False while the drafter is alive.
        """
        if not self.alive:
            return
        if not self.wants(window.index):
            raise ValueError(f"window {window.index} is not wanted now (see wants)")
        if not self._outstanding():
            self._last_heard = time.perf_counter()  # the stall clock starts with the work
        samples, slot = min(len(window.audio), N_SAMPLES), window.index % self._slots
        self._slot_audio[slot, :samples] = window.audio[:samples]
        self._drafts[window.index] = _WindowDraft()
        self._submitted = window.index
        try:
            self._windows.send((window.index, slot, samples))
        except OSError as err:  # the child is gone, or has not read windows for ages
            self._lose(f"drafter does not take windows ({type(err).__name__})")

    def poll(self) -> None:
        """Takes in everything the drafter sent, and checks that it is alive and answering."""
        if not self.alive:
            return
        gone = not self._process.is_alive()  # checked first: then its last words are read below
        for message in self._frames.messages():
            self._handle(message)
        self._check_health(gone)

    def text(self, index: int) -> str:
        """The drafted text of window `index` so far ("" if none, or released)."""
        draft = self._drafts.get(index)
        return draft.text if draft is not None else ""

    def done(self, index: int) -> bool:
        """Whether the drafter finished window `index` (its text is final)."""
        draft = self._drafts.get(index)
        return draft is not None and draft.done

    def release(self, index: int) -> None:
        """The target is done with window `index` and all before it: forget their drafts.

        The drafter skips those windows, or abandons the one it is on.
        """
        self._released.value = max(self._released.value, index)
        for i in [i for i in self._drafts if i <= index]:
            del self._drafts[i]
        for i in [i for i in self._encoded if i <= index]:
            del self._encoded[i]

    def close(self) -> None:
        """Stops the drafter process: terminate, then kill; waits at most about 2 s."""
        if self._process is None or self._closed:
            return
        self._closed = True
        self._windows.close()  # an idle child exits on its own at EOF
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=1.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=1.0)
        self._results.close()
        self._audio, self._slot_audio = None, np.empty((0, N_SAMPLES), np.float32)

    def _handle(self, message: tuple[Any, ...]) -> None:
        """Applies one message from the child to the per-window state."""
        self._last_heard = time.perf_counter()
        kind, *args = message
        if kind == "text" and args[0] in self._drafts:
            index, keep, delta = args
            draft = self._drafts[index]
            draft.text = draft.text[:keep] + delta
        elif kind == "encoded":
            self._encoded[args[0]] = args[1]
        elif kind == "done":
            self._finish(*args)
        elif kind == "ready":
            self.ready = True
        elif kind == "error":
            self._lose(f"drafter failed: {args[0]}")

    def _finish(self, index: int, start: float, end: float, tokens: int, finished: bool) -> None:
        encoded = self._encoded.pop(index, end)
        self.intervals.append(BusyInterval(index, start, end, encoded - start, tokens, finished))
        if index in self._drafts:
            self._drafts[index].done = finished

    def _outstanding(self) -> bool:
        return any(not d.done for d in self._drafts.values())

    def _check_health(self, gone: bool) -> None:
        if gone:
            self._lose(f"drafter process exited (exit code {self._process.exitcode})")
            return
        limit = self.stall_s if self.ready else self.startup_s
        silent = time.perf_counter() - self._last_heard
        if self._outstanding() and silent > limit:
            self._lose(f"drafter sent nothing for {silent:.1f} s (limit {limit:.1f} s)")
            self._process.kill()  # free its cores; `close` reaps it

    def _lose(self, reason: str) -> None:
        if not self.lost:
            self.lost, self.reason = True, reason


def _with_ct2_dir(spec: DrafterSpec) -> DrafterSpec:
    """`spec` with a bundled CT2 name ("ct2:whisper-base") replaced by its directory."""
    ct2 = spec.ct2_model
    if ct2 is None or Path(ct2).is_dir():
        return spec
    from as2d.models.bundled import ct2_dir  # torch comes with it; the target has it anyway

    return replace(spec, name=CT2_PREFIX + str(ct2_dir(ct2)))


@contextmanager
def _child_env(threads: int) -> Iterator[None]:
    """Sets the variables a spawned child inherits: thread counts (read when torch loads)."""
    values = {**{name: str(threads) for name in _THREAD_ENV}, **dict(_CHILD_ENV)}
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


class _TextSource(Protocol):
    def poll(self) -> None: ...

    def text(self, index: int) -> str: ...


class DraftTokens:
    """A window's drafted text in the TARGET's vocabulary, re-encoded only where it changed.

    Whisper text keeps its leading space (" Hello"), as the model emits it. Encoding is
    incremental: the text before the last safe cut (a space that starts a word, after a
    non-space) tokenizes the same alone as inside the whole text under Whisper's GPT-2
    pre-tokenization, so only the text after the cut is encoded again.

    Args:
        drafter: where the text comes from (a `DrafterProcess`); polled on every read.
        index: the window.
        tokenizer: the target's tokenizer.

    Example:
        stream = DraftTokens(drafter, 0, target.tokenizer)
        DrafterStreamSource(stream.tokens)   # the aligner reads it without blocking
    """

    def __init__(self, drafter: _TextSource, index: int, tokenizer: _Encoder) -> None:
        self._drafter = drafter
        self._index = index
        self._tokenizer = tokenizer
        self._text = ""
        self._cut = 0  # text[:cut] encodes to tokens[:cut_tokens], whatever follows
        self._cut_tokens = 0
        self._tokens: list[int] = []

    def tokens(self) -> list[int]:
        """The current drafted tokens (target vocabulary); never waits."""
        self._drafter.poll()
        text = self._drafter.text(self._index)
        if text != self._text:
            self._update(text)
        return self._tokens

    def _update(self, text: str) -> None:
        if text[: self._cut] != self._text[: self._cut]:
            self._cut = self._cut_tokens = 0  # rewritten before the cut: start over
        head = self._tokens[: self._cut_tokens]
        tail = text[self._cut :]
        split = _last_cut(tail)
        stable = self._tokenizer.encode(tail[:split])
        self._tokens = head + stable + self._tokenizer.encode(tail[split:])
        self._cut += split
        self._cut_tokens += len(stable)
        self._text = text


def _last_cut(text: str) -> int:
    """Position of the last space that starts a word after a non-space (0 if none).

    GPT-2 pre-tokens never span such a space, and none of them looks past it, so
    `encode(text) == encode(text[:cut]) + encode(text[cut:])`.
    """
    cut = len(text) - 1
    while cut > 0:
        cut = text.rfind(" ", 0, cut)
        if cut > 0 and text[cut + 1].isalpha() and not text[cut - 1].isspace():
            return cut
    return 0
