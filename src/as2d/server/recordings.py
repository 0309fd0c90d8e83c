"""Recordings uploaded before the question: kept on disk and drafted while the server is idle.

`POST /v1/recordings` stores an upload under the draft store (`recordings/<id><suffix>`, the
id its content hash) and answers at once; the decoding thread drafts it window by window
whenever no request waits, with the drafter model in its own process on every core, and
keeps its drafts in the draft store. A request that names the recording later finds them
there (`Transcriber.transcribe` looks them up), so the target decodes alone on every core with
every draft ready. Drafting stops between windows as soon as a request arrives and resumes
where it stopped.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from as2d.runtime.drafts import DraftStore, StoredDraft, load_drafter, make_drafts
from as2d.runtime.spec import DrafterSpec


@dataclass
class Recording:
    id: str
    path: Path
    duration_s: float
    status: str = "queued"  # queued, drafting, ready, failed
    error: str | None = None
    drafts: list[StoredDraft] = field(default_factory=list)  # the windows drafted so far

    @property
    def drafted_s(self) -> float:
        """Audio drafted so far."""
        if self.status == "ready":
            return self.duration_s
        return self.drafts[-1].end if self.drafts else 0.0

    def public(self) -> dict[str, Any]:
        """What `GET /v1/recordings/{id}` shows."""
        return {
            "id": self.id,
            "object": "recording",
            "status": self.status,
            "duration_s": round(self.duration_s, 3),
            "drafted_s": round(self.drafted_s, 3),
            "error": self.error,
        }


class Recordings:
    """The server's recordings and their drafting (`draft_some` runs in the decoding thread)."""

    def __init__(self, store: DraftStore, spec: DrafterSpec | None) -> None:
        self.store = store
        self.spec = spec  # None: the method drafts nothing (target-only, pld, sd)
        if spec is not None:  # drafting in this process, while the target waits
            self.spec = replace(spec, threads=os.cpu_count() or 1)
        self.root = store.root / "recordings"
        self._lock = threading.Lock()
        self._items: dict[str, Recording] = {}
        self._drafter: Any = None

    def add(self, data: bytes, suffix: str, duration_s: float) -> Recording:
        """Stores `data` (already checked to be audio) and queues its drafting."""
        rid = "rec_" + hashlib.sha256(data).hexdigest()[:32]
        with self._lock:
            known = self._items.get(rid)
            if known is not None:
                return known
            self.root.mkdir(parents=True, exist_ok=True)
            path = self.root / f"{rid}{suffix}"
            if not path.exists():
                path.write_bytes(data)
            recording = Recording(rid, path, duration_s)
            if self.spec is None or self.store.load(self.store.key(path, self.spec)) is not None:
                recording.status = "ready"
            self._items[rid] = recording
            return recording

    def get(self, rid: str) -> Recording | None:
        with self._lock:
            return self._items.get(rid)

    def pending(self) -> Recording | None:
        with self._lock:
            return next(
                (r for r in self._items.values() if r.status in ("queued", "drafting")), None
            )

    def draft_some(self, busy: Callable[[], bool]) -> None:
        """Drafts pending recordings until `busy()` (a request waits) or none is left."""
        assert self.spec is not None
        while (recording := self.pending()) is not None and not busy():
            recording.status = "drafting"
            try:
                # On every core while the target waits, then back to the target's count.
                with self.spec.family.threads(os.cpu_count() or 1):
                    self._drafter = self._drafter or load_drafter(self.spec)
                    drafts = make_drafts(
                        recording.path, self._drafter, self.spec, busy, recording.drafts
                    )
                if drafts is None:
                    return  # a request waits; the drafts so far are kept in the recording
                self.store.save(self.store.key(recording.path, self.spec), drafts)
                recording.status = "ready"
            except Exception as err:  # this recording fails, the server goes on
                recording.status, recording.error = "failed", f"{type(err).__name__}: {err}"
