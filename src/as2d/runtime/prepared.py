"""The target's request-independent work done before the request: each window's encoder output,
kept on disk.

A window's encoder output depends on its audio alone (Whisper's encoder states; an audio
LLM's audio features after its projector), yet without this store it is computed after the
request comes, and it is most of a short request's time. `as2d prepare` and the server's
recordings compute it ahead and store it here, keyed by everything that could change its
bytes (`encoder_key`); a request that finds it skips the encoder, and anything missing or
stale (another window cut, target, dtype, device, runtime or thread count) is computed as
without the store. The bytes stored are the bytes the encoder returned, so the target's
output is the same token for token (tested).

A family's encoder output is a dataclass of tensors (`WhisperTarget.encoded_type`,
`ChatAudioTarget.encoded_type`); it is stored field by field as raw bytes behind a JSON header
with a checksum, written atomically, one file per window under `<store>/encoder/<audio>/`, and
the store is bounded: the least recently used files go first. A file that is not what `save`
wrote (cut short, damaged, another version's) is removed and recomputed, silently.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import struct
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from as2d.runtime.drafts import AheadDrafter, StoredDraft, audio_hash, draft_store, draft_window
from as2d.target import threads_set
from as2d.types import Window
from as2d.writers import atomic_path

if TYPE_CHECKING:
    from as2d.api import Transcriber

MAX_ENCODER_BYTES = 2 << 30  # whisper-base: 3 MB a window (1500 x 512 float32), ~680 windows
_MAGIC = b"AS2DENC1"
_HEADER = struct.Struct("<I")  # the JSON header's length, after the magic
_SUFFIX = ".enc"


@dataclass(frozen=True)
class EncoderIdentity:
    """What computes a window's encoder output besides its audio: a key part each.

    `threads`: the target's threads (a kernel may round differently on another count);
    `runtime`: the target's backend (`Backend.name`: "torch-cpu", "mnn-cpu", ...)."""

    target: str
    dtype: str
    device: str
    threads: int
    runtime: str = "torch-cpu"


def encoder_key(audio: str, window: Window, who: EncoderIdentity) -> str:
    """The one place a stored encoder output's key is made: `<audio>/<digest>`, the digest of
    the window's bounds (to the millisecond) and `who` computed it.

    Example:
        encoder_key("3f2a...", Window(0, 0.0, 11.2, ...), EncoderIdentity("whisper-base",
        "torch.float32", "cpu", 2)) -> "3f2a.../9c1e0b..."
    """
    parts = [f"{window.start:.3f}", f"{window.end:.3f}", *map(str, dataclasses.astuple(who))]
    return f"{audio}/{hashlib.sha256('|'.join(parts).encode()).hexdigest()[:24]}"


class EncoderStore:
    """Encoder outputs on disk, one file per (audio, window, target, dtype, device, threads,
    runtime), the least recently used removed first beyond `max_bytes`."""

    def __init__(self, root: Path, max_bytes: int = MAX_ENCODER_BYTES) -> None:
        self.root = root
        self.max_bytes = max_bytes

    def save(self, key: str, encoded: Any) -> None:
        """Stores `encoded` (a dataclass of tensors) under `key`, atomically."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_bytes(pack(key, encoded))
        self._evict()

    def load(self, key: str, kind: type, device: torch.device) -> Any | None:
        """The `kind` stored under `key`, on `device`, else None; a damaged file is removed."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        encoded = unpack(key, data, kind, device)
        if encoded is None:
            with suppress(OSError):
                path.unlink(missing_ok=True)
            return None
        with suppress(OSError):  # recently used: evicted last
            path.touch()
        return encoded

    def windows(self, audio: str) -> int:
        """How many encoder outputs are stored for the audio `audio` (any target)."""
        folder = self.root / audio
        return sum(1 for _ in folder.glob(f"*{_SUFFIX}")) if folder.is_dir() else 0

    def remove(self, audio: str) -> None:
        """Removes everything stored for the audio `audio`."""
        shutil.rmtree(self.root / audio, ignore_errors=True)

    def path(self, key: str) -> Path:
        """Where `key`'s file lies."""
        return self.root / f"{key}{_SUFFIX}"

    def _files(self) -> Iterator[tuple[float, int, Path]]:
        for path in self.root.glob(f"*/*{_SUFFIX}"):
            with suppress(OSError):  # removed meanwhile (another process)
                stat = path.stat()
                yield stat.st_mtime, stat.st_size, path

    def _evict(self) -> None:
        """Removes the least recently used files until the store fits in `max_bytes`."""
        files = sorted(self._files())
        total = sum(size for _, size, _ in files)
        for _, size, path in files:
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
            with suppress(OSError):  # the audio's last window: its folder goes too
                path.parent.rmdir()


def pack(key: str, encoded: Any) -> bytes:
    """`encoded`'s tensors as raw bytes behind a header naming each field's dtype and shape,
    the key and the payload's checksum."""
    fields, payload = [], []
    for part in dataclasses.fields(encoded):
        tensor = getattr(encoded, part.name).detach().contiguous().cpu()
        raw = tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        fields.append([part.name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape)])
        payload.append(raw)
    body = b"".join(payload)
    sizes = [len(raw) for raw in payload]
    header = {"key": key, "fields": fields, "sizes": sizes, "sha256": _digest(body)}
    head = json.dumps(header).encode()
    return _MAGIC + _HEADER.pack(len(head)) + head + body


def unpack(key: str, data: bytes, kind: type, device: torch.device) -> Any | None:
    """The `kind` that `pack(key, ...)` wrote into `data`, else None (anything else)."""
    try:
        if not data.startswith(_MAGIC):
            return None
        start = len(_MAGIC) + _HEADER.size
        (length,) = _HEADER.unpack_from(data, len(_MAGIC))
        header = json.loads(data[start : start + length])
        body = memoryview(data)[start + length :]
        names = {f.name for f in dataclasses.fields(kind)}
        fields, sizes = header["fields"], header["sizes"]
        if header["key"] != key or {f[0] for f in fields} != names or sum(sizes) != len(body):
            return None
        if header["sha256"] != _digest(body):
            return None
        tensors, at = {}, 0
        for (name, dtype, shape), size in zip(fields, sizes, strict=True):
            tensors[name] = _tensor(bytearray(body[at : at + size]), dtype, shape).to(device)
            at += size
        return kind(**tensors)
    except (ValueError, KeyError, TypeError, RuntimeError, struct.error, RecursionError):
        return None


def _tensor(raw: bytearray, dtype: str, shape: list[int]) -> torch.Tensor:
    """A tensor of `dtype` and `shape` over `raw` (ValueError for a dtype torch lacks)."""
    kind = getattr(torch, dtype, None)
    if not isinstance(kind, torch.dtype):
        raise ValueError(f"not a dtype: {dtype}")
    if not raw:
        return torch.empty(shape, dtype=kind)
    return torch.frombuffer(raw, dtype=torch.uint8).view(kind).reshape(shape)


def _digest(body: bytes | memoryview) -> str:
    return hashlib.sha256(body).hexdigest()


@dataclass
class PreparedEncodings:
    """One recording's encoder outputs for one target: looked up per window by a request,
    saved per window by preparation."""

    store: EncoderStore
    audio: str  # the recording's content hash
    who: EncoderIdentity
    kind: type  # the target family's encoder output (`encoded_type`)
    device: torch.device

    def get(self, window: Window) -> Any | None:
        """The window's stored encoder output, else None (compute it as usual)."""
        return self.store.load(encoder_key(self.audio, window, self.who), self.kind, self.device)

    def has(self, window: Window) -> bool:
        return self.store.path(encoder_key(self.audio, window, self.who)).is_file()

    def put(self, window: Window, encoded: Any) -> None:
        self.store.save(encoder_key(self.audio, window, self.who), encoded)


def encoder_store(drafts_dir: str | None) -> EncoderStore:
    """The encoder store beside the draft store (`<drafts_dir>/encoder`, else
    `$AS2D_CACHE/drafts/encoder`): one `--store` holds everything prepared."""
    return EncoderStore(draft_store(Path(drafts_dir) if drafts_dir else None).root / "encoder")


def prepared_encodings(
    audio: object,
    target: Any,
    target_name: str,
    threads: int,
    drafts_dir: str | None,
    create: bool = False,
) -> PreparedEncodings | None:
    """The lookup of `audio`'s stored encoder outputs (a file path) for `target` (loaded as
    `target_name`, on `threads` threads), else None (samples, a stream, a missing file, no
    store yet unless `create`: a request does not hash audio that nothing was prepared for)."""
    if not isinstance(audio, (str, Path)) or not Path(audio).is_file():
        return None
    if getattr(target, "encoded_type", None) is None:  # a family whose output is not stored
        return None
    store = encoder_store(drafts_dir)
    if not (create or store.root.is_dir()):
        return None
    backend = target.backend.name
    who = EncoderIdentity(target_name, str(target.dtype), target.device.type, threads, backend)
    return PreparedEncodings(
        store, audio_hash(Path(audio)), who, target.encoded_type, target.device
    )


@dataclass
class Preparation:
    """What is prepared of one recording so far (`prepare` appends to it as windows finish)."""

    drafts: list[StoredDraft] = field(default_factory=list)  # the windows drafted so far
    encoded: int = 0  # windows prepared (drafted and encoded), from the first
    complete: bool = False  # every window is prepared


def prepare(
    audio: Path,
    transcriber: Transcriber,
    drafter: AheadDrafter | None,
    stop: Callable[[], bool] = lambda: False,
    done: Preparation | None = None,
    max_windows: int | None = None,
) -> Preparation:
    """Prepares every speech window of `audio` in order, as `transcriber` will cut and decode
    it: `drafter`'s draft (saved as it grows, so a request meanwhile takes the first windows'
    drafts and drafts the rest live), then the target's encoder output on the target's own
    thread count (its key's). `stop()` is asked before each window, and at most `max_windows`
    windows are worked on; work done is kept, and a later call with the same `done` resumes
    after it."""
    done = done or Preparation()
    worked = 0
    encodings = transcriber.prepared(audio, create=True)
    key = drafter.store.key(audio, drafter.spec) if drafter is not None else ""
    if drafter is not None and not done.drafts and (stored := drafter.store.load(key)):
        done.drafts = stored.windows
    for window in transcriber.windower().windows(audio):
        drafting = drafter is not None and window.index >= len(done.drafts)
        encoding = encodings is not None and not encodings.has(window)
        if (drafting or encoding) and (stop() or worked == max_windows):
            return done
        if drafter is not None and drafting:
            done.drafts.append(draft_window(window, drafter.model(), drafter.spec))
            drafter.store.save(key, done.drafts, complete=False)
        if encodings is not None and encoding:
            with threads_set(transcriber.backend, transcriber.threads):
                encodings.put(window, transcriber.target.encode(window.audio))
        worked += drafting or encoding
        done.encoded = window.index + 1
    if drafter is not None:
        drafter.store.save(key, done.drafts)
    done.complete = True
    return done
