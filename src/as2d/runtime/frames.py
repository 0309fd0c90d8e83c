"""Framing of the drafter's messages on a pipe: length-prefixed pickles.

The child writes whole frames (it may block; nothing waits on it). The parent reads with
O_NONBLOCK and keeps a partial frame until the rest arrives, so a message cut in half by a
crash can never make the parent block.
"""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any

HEADER = struct.Struct("<I")  # frame header: payload length in bytes
_READ_CHUNK = 1 << 16  # bytes per os.read; a poll reads at most _MAX_POLL_BYTES
_MAX_POLL_BYTES = 1 << 20


class Outbox:
    """Child -> parent: length-prefixed pickles on the pipe (only the child ever blocks)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def send(self, *message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(self._fd, view) :]


class FrameReader:
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
        while len(buffer) - pos >= HEADER.size:
            (size,) = HEADER.unpack_from(buffer, pos)
            if len(buffer) - pos - HEADER.size < size:
                break
            found.append(pickle.loads(buffer[pos + HEADER.size : pos + HEADER.size + size]))
            pos += HEADER.size + size
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
