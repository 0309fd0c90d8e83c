"""Drafts made before the request: a drafter's text for each speech window of a recording,
kept on disk so that decoding later needs no drafter at all.

A recording often exists before anyone asks about it (a server receives it first, or
`as2d draft` runs overnight). Its drafts are made then, on whatever cores are free, and
stored under `$AS2D_CACHE/drafts` keyed by the audio's content hash, the drafter, the task
and the language. When every window's draft is stored, as2d decodes with the target alone on
every core (encoder included) and the stored text as its candidates; the output is the
target's either way. Files are written atomically and the store is bounded: the least
recently used drafts go first.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from as2d.drafting.family import DEFAULT_TAIL_S, DraftModel, draft_audio
from as2d.options import Options, drafter_spec, preparing
from as2d.runtime.spec import DrafterSpec
from as2d.types import Window
from as2d.writers import write_atomic

MAX_STORE_BYTES = 256 << 20  # about a million windows of text
# A command's audio up to which its drafter process is not started: its start-up (torch's
# import and its model, 2-4 s beside the target's own) outlasts the target's work on one
# window. One-off `as2d transcribe` on a 2-core Xeon, target-only -> as2d: 10.5 s of speech
# 3.7 -> 4.0 s (the drafter ready after the target's encoder), 45 s 5.3 -> 4.9 s, 112 s
# 9.1 -> 7.8 s.
ONE_OFF_MIN_S = 30.0
_BOUNDS_S = 1e-3  # a stored window matches a window cut now within this


def audio_hash(path: Path) -> str:
    """An audio file's content hash: its name in every store (a server recording's id is
    "rec_" and this)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class StoredDraft:
    """One window's draft: where the window lies in the recording, and the drafter's text."""

    start: float
    end: float
    text: str


class Drafts:
    """A recording's stored drafts, read as a `DrafterProcess`'s text is (`DraftTokens`).

    `complete`: every window is drafted; else the first windows only (a recording still being
    prepared: a request takes those and drafts the rest live)."""

    def __init__(self, windows: Sequence[StoredDraft], complete: bool = True) -> None:
        self.windows = list(windows)
        self.complete = complete

    def covers(self, window: Window) -> bool:
        """Whether the draft of `window` (its index in the recording) is stored."""
        if window.index >= len(self.windows):
            return False
        stored = self.windows[window.index]
        return (
            abs(stored.start - window.start) < _BOUNDS_S
            and abs(stored.end - window.end) < _BOUNDS_S
        )

    def poll(self) -> None:
        """Nothing arrives: every draft is complete."""

    def text(self, index: int) -> str:
        return self.windows[index].text


class DraftStore:
    """Drafts on disk, one JSON file per (audio, drafter, task, language)."""

    def __init__(self, root: Path, max_bytes: int = MAX_STORE_BYTES) -> None:
        self.root = root
        self.max_bytes = max_bytes

    @staticmethod
    def key(audio: Path, spec: DrafterSpec) -> str:
        """The audio's content hash, with what made the drafts (the encoder's input where it
        is not the default one: drafts of the same drafter on another input differ)."""
        maker = f"{spec.name}|{spec.task}|{spec.language}"
        if spec.tail_s != DEFAULT_TAIL_S:
            maker += f"|tail={'full' if spec.tail_s is None else spec.tail_s}"
        return audio_hash(audio) + "-" + hashlib.sha256(maker.encode()).hexdigest()[:12]

    def load(self, key: str) -> Drafts | None:
        """The drafts stored under `key`, else None. A draft is only a hint: a file that is
        not what `save` writes (damaged, edited, another version's) is removed and ignored."""
        path = self._path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            content = json.loads(data)
            windows = [_stored_draft(w) for w in content["windows"]]
            complete = content.get("complete", True)
            if not isinstance(complete, bool):
                raise ValueError("not a store file")
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            with suppress(OSError):  # a read-only store: ignored all the same
                path.unlink(missing_ok=True)
            return None
        with suppress(OSError):  # removed meanwhile (another process): read all the same
            os.utime(path)  # recently used: evicted last
        return Drafts(windows, complete)

    def save(self, key: str, windows: Iterable[StoredDraft], complete: bool = True) -> None:
        """Stores `windows` under `key`; `complete` False: the recording's first windows only."""
        self.root.mkdir(parents=True, exist_ok=True)
        content = {"windows": [asdict(w) for w in windows], "complete": complete}
        write_atomic(self._path(key), json.dumps(content))
        self._evict()

    def remove(self, audio: str) -> None:
        """Removes every drafter's drafts of the audio whose content hash is `audio`."""
        for path in self.root.glob(f"{audio}-*.json"):
            path.unlink(missing_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def _evict(self) -> None:
        """Removes the least recently used files until the store fits in `max_bytes`."""
        files = []
        for path in self.root.glob("*.json"):
            try:
                stat = path.stat()
            except OSError:  # removed meanwhile (another process)
                continue
            files.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size


def _stored_draft(entry: object) -> StoredDraft:
    """One window of a store file, as `save` writes it: ValueError for anything else."""
    if not isinstance(entry, dict) or set(entry) != {"start", "end", "text"}:
        raise ValueError("not a stored window")
    start, end, text = entry["start"], entry["end"], entry["text"]
    times = all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in (start, end))
    if not times or not isinstance(text, str):
        raise ValueError("not a stored window")
    return StoredDraft(float(start), float(end), text)


def draft_store(root: Path | None = None) -> DraftStore:
    """The store under `root`, else `$AS2D_CACHE/drafts`."""
    from as2d.models.bundled import cache_root

    return DraftStore(root or cache_root() / "drafts")


def stored_drafts(options: Options, audio: object) -> Drafts | None:
    """The drafts stored for `audio` (a path) by the drafter of `options` (as2d, with
    `options.drafts` "auto"), else those of the drafter that prepares recordings
    (`preparing`: `as2d prepare`, a server's recordings), else None."""
    spec = drafter_spec(options)
    if spec is None or options.drafts == "off" or not isinstance(audio, (str, Path)):
        return None
    store = draft_store(Path(options.drafts_dir) if options.drafts_dir else None)
    if not store.root.is_dir() or not Path(audio).is_file():
        return None
    ahead = drafter_spec(preparing(options))
    assert ahead is not None  # method as2d
    makers = dict.fromkeys(((spec.name, spec.tail_s), (ahead.name, ahead.tail_s)))  # its own first
    # in the request's language, else drafted with none given (the drafter's own guess): a
    # recording prepared with the language unset serves requests that name it
    languages = dict.fromkeys((spec.language, None))
    for (name, tail_s), language in ((m, lang) for m in makers for lang in languages):
        key = store.key(Path(audio), replace(spec, name=name, tail_s=tail_s, language=language))
        if (drafts := store.load(key)) is not None:
            return drafts
    return None


def drafter_needed(options: Options, files: Sequence[str], seconds: Iterable[float]) -> bool:
    """Whether a command over `files` (`seconds` long) should start a drafter process: not
    where every file's drafts are stored (`as2d draft`), nor (where the gate decides) where
    the files together are too short for its start-up to pay (`ONE_OFF_MIN_S`), nor where
    none is long enough for drafting to pay on this machine (`drafting_may_pay`). The
    command line and each Ray worker ask it alike."""
    from as2d.engine.gate import drafting_may_pay
    from as2d.models.bundled import cache_root

    seconds = list(seconds)
    if all(_complete(stored_drafts(options, file)) for file in files):
        return False
    gated = options.device == "cpu" and options.draft_gate  # else every window is drafted
    if gated and sum(seconds) <= ONE_OFF_MIN_S:
        return False
    return drafting_may_pay(options, cache_root(), seconds)


def _complete(drafts: Drafts | None) -> bool:
    return drafts is not None and drafts.complete


class AheadDrafter:
    """`spec`'s drafter in this process, loaded on first need, drafting files into `store`
    (`as2d draft`, `as2d bench --drafts ready`)."""

    def __init__(self, store: DraftStore, spec: DrafterSpec) -> None:
        self.store = store
        self.spec = spec
        self._model: DraftModel | None = None

    def draft(self, audio: Path, language: str | None = None) -> None:
        """Drafts `audio` (in `language`, else the spec's) unless its drafts are stored."""
        spec = replace(self.spec, language=language or self.spec.language)
        key = self.store.key(audio, spec)
        stored = self.store.load(key)
        if stored is None or not stored.complete:
            self.store.save(key, make_drafts(audio, self.model(), spec) or [])

    def model(self) -> DraftModel:
        """The drafter model, loaded on first use."""
        self._model = self._model or load_drafter(self.spec)
        return self._model


def load_drafter(spec: DrafterSpec) -> DraftModel:
    """`spec`'s drafter model in this process, on `spec.threads` threads (`make_drafts`)."""
    return spec.family.load(spec)


def make_drafts(
    audio: Path,
    drafter: DraftModel,
    spec: DrafterSpec,
    stop: Callable[[], bool] = lambda: False,
    done: list[StoredDraft] | None = None,
) -> list[StoredDraft] | None:
    """Drafts every speech window of `audio` with `drafter` (`load_drafter(spec)`, whose
    encoder input and language `spec` gives) after those in
    `done` (appended to as windows finish). `stop()` is asked before each window: None once it
    answers True, the windows drafted so far kept in `done` to resume from."""
    from as2d.audio.windows import iter_windows

    drafts = [] if done is None else done
    for window in iter_windows(audio):
        if window.index < len(drafts):
            continue  # drafted before a stop
        if stop():
            return None
        drafts.append(draft_window(window, drafter, spec))
    return drafts


def draft_window(window: Window, drafter: DraftModel, spec: DrafterSpec) -> StoredDraft:
    """`drafter`'s text of one window, its encoder input cut as `spec` says."""
    encoded = drafter.encode(draft_audio(window, spec.tail_s), spec.language)
    texts = [text for _, text in drafter.texts(encoded)]
    return StoredDraft(window.start, window.end, texts[-1] if texts else "")
