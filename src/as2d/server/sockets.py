"""The WebSocket protocol `as2d serve` runs under uvicorn: uvicorn's own (websockets' sans-I/O
implementation), where a socket that does not drain is dropped, and a server that stops
lets a live session finish what it heard.

uvicorn closes a socket gracefully, and asyncio's graceful close waits for the socket's
write buffer to drain: a client that never reads (its receive window full) kept its
Realtime session after the keepalive gave up on it, and SIGTERM waited out the graceful
timeout (300 s) before cancelling its task. Here:

- keepalive timeout (no pong within `ws_ping_timeout`): the connection is aborted, its
  pending writes dropped, and the app's blocked send fails at once;
- an app done with a socket that has not closed `CLOSE_GRACE_S` later: aborted;
- shutdown: a socket the app serves hears `websocket.disconnect` with code `CLOSE_STOPPING`
  first and has `STOP_GRACE_S` to close itself (`realtime.py` finishes the open utterance);
  one whose writes are stuck is aborted at once.
"""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

CLOSE_STOPPING = 1012  # WebSocket close code "service restart": the server stops
STOP_GRACE_S = 6.0  # after a shutdown, a socket the app serves has this long to close itself
CLOSE_GRACE_S = 10.0  # after its app is done, a socket has this long to drain and close


class DroppingWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, whose sockets never wait on a client that does not read."""

    def keepalive_timeout(self) -> None:
        """The client did not answer a ping: dropped, whatever it has not read."""
        super().keepalive_timeout()
        self._abort()

    def shutdown(self) -> None:
        """The server stops: the app is told first (`CLOSE_STOPPING`), unless the socket
        cannot take another word (its writes are stuck) or the app is not serving it."""
        serving = self.handshake_complete and self.initial_response is None and not self.close_sent
        if not serving or self.disconnected:
            super().shutdown()
        elif not self.writable.is_set():
            super().shutdown()
            self._abort()
        else:
            self.queue.put_nowait({"type": "websocket.disconnect", "code": CLOSE_STOPPING})
            self.loop.call_later(STOP_GRACE_S, self._stop_now)

    async def run_asgi(self) -> None:
        await super().run_asgi()
        if not self.disconnected:  # closing, its buffer not yet drained
            self.loop.call_later(CLOSE_GRACE_S, self._abort)

    def _stop_now(self) -> None:
        """The app did not close the socket in `STOP_GRACE_S`: uvicorn's shutdown, aborted."""
        if not self.disconnected:
            super().shutdown()
            self._abort()

    def _abort(self) -> None:
        if not self.disconnected:
            self.transport.abort()
