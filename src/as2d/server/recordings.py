"""Recordings uploaded before the question: kept on disk and prepared while the server is idle.

`POST /v1/recordings` stores an upload under the draft store (`recordings/<id><suffix>`, the
id its content hash) and answers at once; the decoding thread prepares it window by window
whenever no request waits (`runtime/prepared.py`): the drafter model's draft, in this process
on every core, then the target's encoder output, on the target's own thread count. A request
that names the recording later finds both (`Transcriber.transcribe` looks them up), so the
target skips its encoder and verifies ready drafts; a request that comes while the recording
is still being prepared takes what is there and does the rest live. Preparation stops between
windows as soon as a request arrives and resumes where it stopped.

`GET /v1/recordings/{id}` shows what is prepared; `DELETE` removes the recording and
everything kept for it. Recordings on disk are bounded (`MAX_RECORDING_BYTES`): beyond it the
least recently used ones go, with their drafts and encoder outputs.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from as2d.runtime.drafts import AheadDrafter, DraftStore
from as2d.runtime.prepared import EncoderStore, Preparation, prepare
from as2d.runtime.spec import DrafterSpec
from as2d.target import threads_set

MAX_RECORDING_BYTES = 1 << 30  # uploads kept on disk; their drafts and encoder outputs aside
_ID = "rec_"  # a recording's id: this and its audio's content hash (`drafts.audio_hash`)


@dataclass
class Recording:
    id: str
    path: Path
    duration_s: float
    status: str = "queued"  # queued, preparing, ready, failed
    error: str | None = None
    done: Preparation = field(default_factory=Preparation)  # what is prepared so far

    @property
    def audio(self) -> str:
        """The audio's content hash: its name in the stores."""
        return self.id.removeprefix(_ID)

    @property
    def drafted_s(self) -> float:
        """Audio drafted so far."""
        if self.status == "ready" and self.done.drafts:
            return self.duration_s
        return self.done.drafts[-1].end if self.done.drafts else 0.0

    def public(self, drafter: str | None, encoded: int) -> dict[str, Any]:
        """What `GET /v1/recordings/{id}` shows: `encoded`, the windows whose encoder output
        is stored (for this server's target, or another's)."""
        return {
            "id": self.id,
            "object": "recording",
            "status": self.status,
            "duration_s": round(self.duration_s, 3),
            "drafted_s": round(self.drafted_s, 3),
            "prepared": {
                "drafter": drafter,
                "drafted_windows": len(self.done.drafts),
                "encoded_windows": encoded,
                "windows": self.done.encoded,  # from the first, with both kinds of work done
                "complete": self.done.complete,
            },
            "error": self.error,
        }


class Recordings:
    """The server's recordings and their preparation (`prepare_some` runs in the decoding
    thread, which owns the target)."""

    def __init__(
        self,
        store: DraftStore,
        spec: DrafterSpec | None,
        max_bytes: int = MAX_RECORDING_BYTES,
    ) -> None:
        self.store = store
        self.encoders = EncoderStore(store.root / "encoder")
        self.spec = spec  # None: the method drafts nothing (target-only, pld, sd)
        self.drafter: AheadDrafter | None = None
        if spec is not None:  # drafting in this process, while the target waits
            self.spec = replace(spec, threads=os.cpu_count() or 1)
            self.drafter = AheadDrafter(store, self.spec)
        self.root = store.root / "recordings"
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._items: dict[str, Recording] = {}

    def add(self, data: bytes, suffix: str, duration_s: float) -> Recording:
        """Stores `data` (already checked to be audio) and queues its preparation."""
        rid = _ID + hashlib.sha256(data).hexdigest()[:32]
        with self._lock:
            known = self._items.get(rid)
            if known is not None:
                return known
            self.root.mkdir(parents=True, exist_ok=True)
            path = self.root / f"{rid}{suffix}"
            if not path.exists():
                path.write_bytes(data)
            recording = self._items[rid] = Recording(rid, path, duration_s)
        self._evict(keep=rid)
        return recording

    def get(self, rid: str) -> Recording | None:
        """The recording `rid`, now used (evicted last), else None."""
        with self._lock:
            recording = self._items.get(rid)
        if recording is not None:
            with suppress(OSError):
                os.utime(recording.path)
        return recording

    def public(self, recording: Recording) -> dict[str, Any]:
        drafter = self.spec.label if self.spec is not None else None
        return recording.public(drafter, self.encoders.windows(recording.audio))

    def delete(self, rid: str) -> bool:
        """Removes the recording `rid` and everything kept for it; False if there is none."""
        with self._lock:
            recording = self._items.pop(rid, None)
        if recording is None:
            return False
        recording.status = "deleted"  # its preparation, if under way, stops at the next window
        self._remove(recording)
        return True

    def _remove(self, recording: Recording) -> None:
        recording.path.unlink(missing_ok=True)
        self.store.remove(recording.audio)
        self.encoders.remove(recording.audio)

    def _evict(self, keep: str) -> None:
        """Deletes the least recently used recordings (but `keep`) beyond `max_bytes`."""
        with self._lock:
            sizes = []
            for recording in self._items.values():
                with suppress(OSError):
                    stat = recording.path.stat()
                    sizes.append((stat.st_mtime, stat.st_size, recording.id))
        total = sum(size for _, size, _ in sizes)
        for _, size, rid in sorted(sizes):
            if total <= self.max_bytes:
                break
            if rid != keep:
                self.delete(rid)
                total -= size

    def pending(self) -> Recording | None:
        with self._lock:
            return next(
                (r for r in self._items.values() if r.status in ("queued", "preparing")), None
            )

    def prepare_some(self, busy: Callable[[], bool], transcriber: Any, lock: Any) -> None:
        """Prepares pending recordings until `busy()` (a request waits) or none is left, one
        window at a time under `lock` (the target's: a live session may use it between)."""
        while (recording := self.pending()) is not None and not busy():
            recording.status = "preparing"
            try:
                with (
                    lock,
                    threads_set(transcriber.backend, os.cpu_count() or 1),
                ):  # the target waits
                    stop = partial(_stopped, recording, busy)
                    prepare(recording.path, transcriber, self.drafter, stop, recording.done, 1)
            except Exception as err:  # this recording fails, the server goes on
                recording.status, recording.error = "failed", f"{type(err).__name__}: {err}"
                continue
            if recording.status == "deleted":
                self._remove(recording)  # anything saved since it was deleted
            elif recording.done.complete:
                recording.status = "ready"


def _stopped(recording: Recording, busy: Callable[[], bool]) -> bool:
    """Whether `recording`'s preparation stops before its next window."""
    return busy() or recording.status == "deleted"
