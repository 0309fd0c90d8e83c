"""Handing freed heap back to the system once a burst of work is over.

glibc's allocator keeps what a process freed in its arenas for the next allocation: after
ten live streams decode at once, the server and its drafter keep their peak, though nothing
holds it. `malloc_trim(0)` returns the free pages; elsewhere (musl, macOS) it is a no-op here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(ctypes.util.find_library("c") or None)  # None: the process's own symbols


def release_memory() -> None:
    """Returns the allocator's free pages to the system (tens of milliseconds on a large heap)."""
    libc = _libc()
    if hasattr(libc, "malloc_trim"):  # glibc only
        libc.malloc_trim(0)
