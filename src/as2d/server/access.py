"""Who may use `as2d serve`: the API key and the origins of web pages.

Why a module of its own: the checks wrap the whole app (every HTTP route and the WebSocket)
as one ASGI middleware, so no route can forget them and the routes know nothing of keys.

- **Key** (`--api-key` or `AS2D_API_KEY`): HTTP requests carry `Authorization: Bearer KEY`, as
  OpenAI's clients send it. Browsers cannot set headers on a WebSocket, so there the key may
  also come as the subprotocol `openai-insecure-api-key.KEY`, as OpenAI's browser clients
  offer it (with `realtime`, which the server then picks: it never echoes the key). The page
  (`/` and `/static/`) is public: it holds no data and asks for the key.
- **Origin**: a browser says which page a request comes from. A WebSocket or a request with
  an `Origin` other than the server's own (the `Host` it was reached at) is refused unless
  listed with `--allow-origin`; listed origins also get CORS headers, so their pages can read
  the HTTP answers. Clients that are not browsers send no `Origin` and are not concerned.

A refused WebSocket is accepted, told why in OpenAI's `error` event and closed (1008): a
browser sees no reason for a refused handshake, and the page should say one.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

KEY_ENV = "AS2D_API_KEY"
KEY_PROTOCOL = "openai-insecure-api-key."  # + the key: how OpenAI's browser clients send it
CHOSEN_PROTOCOL = "realtime"  # the subprotocol the server answers with (OpenAI's)
BETA_PROTOCOL = "openai-beta.realtime-v1"  # a browser's `OpenAI-Beta: realtime=v1`
PUBLIC_PATHS = ("/", "/favicon.ico")  # the page, served to anyone: it asks for the key
PUBLIC_PREFIX = "/static/"
CLOSE_POLICY = 1008  # WebSocket close code: a request the server will not serve
CORS_HEADERS = "Authorization, Content-Type, OpenAI-Beta"


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: its HTTP status, OpenAI's error code and one line."""

    status: int
    code: str
    message: str


@dataclass(frozen=True)
class Access:
    """The server's rules: its key (None: none, loopback only) and the foreign origins it
    serves (`*`: any)."""

    api_key: str | None = None
    allowed_origins: frozenset[str] = frozenset()

    def check(self, scope: Scope) -> Refusal | None:
        """None where the request may go on, else why not (origin first: a foreign page
        should hear that its origin is refused, not that its key is wrong)."""
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is not None and not self.origin_allowed(origin, headers.get("host", "")):
            message = (
                f"this server does not serve pages from {origin} "
                "(start it with --allow-origin to allow them)"
            )
            return Refusal(403, "origin_not_allowed", message)
        if self.api_key is None or _public(scope):
            return None
        given = bearer(headers.get("authorization", "")) or protocol_key(scope)
        if given is None:
            return Refusal(401, "missing_api_key", "this server needs an API key (--api-key)")
        if not hmac.compare_digest(given.encode(), self.api_key.encode()):
            return Refusal(401, "invalid_api_key", "the API key is wrong")
        return None

    def origin_allowed(self, origin: str, host: str) -> bool:
        """The page's own origin (same host and port as the request), or one listed."""
        own = origin.split("://", 1)[-1] == host
        return own or origin in self.allowed_origins or "*" in self.allowed_origins

    def cors(self, origin: str | None) -> dict[str, str]:
        """CORS headers for a listed foreign origin, so its pages can read our answers."""
        if origin is None or not (origin in self.allowed_origins or "*" in self.allowed_origins):
            return {}
        return {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Headers": CORS_HEADERS,
            "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
            "Vary": "Origin",
        }


def bearer(authorization: str) -> str | None:
    """The key of `Authorization: Bearer KEY`, else None."""
    scheme, _, key = authorization.partition(" ")
    return key.strip() or None if scheme.lower() == "bearer" else None


def protocol_key(scope: Scope) -> str | None:
    """The key a browser offered as the subprotocol `openai-insecure-api-key.KEY`."""
    for protocol in scope.get("subprotocols", []):
        if protocol.startswith(KEY_PROTOCOL):
            return str(protocol[len(KEY_PROTOCOL) :])
    return None


def chosen_subprotocol(scope: Scope) -> str | None:
    """What the WebSocket answers a browser that offered subprotocols: `realtime` where
    offered (a browser fails a handshake whose offer is not answered), never the key."""
    return CHOSEN_PROTOCOL if CHOSEN_PROTOCOL in scope.get("subprotocols", []) else None


def offers_beta(scope: Scope) -> bool:
    """Whether a browser asked for the beta's events (its stand-in for `OpenAI-Beta`)."""
    return BETA_PROTOCOL in scope.get("subprotocols", [])


def _public(scope: Scope) -> bool:
    path = scope.get("path", "")
    return scope["type"] == "http" and (path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX))


def parse_origins(values: Iterable[str]) -> frozenset[str]:
    """`--allow-origin` values as browsers write an origin (`https://host:port`, no slash).

    Raises:
        ValueError: a value that is not an origin (one line, for the command line).
    """
    origins = set()
    for value in values:
        origin = value.strip().rstrip("/")
        if origin != "*" and (
            "://" not in origin or "/" in origin.split("://", 1)[1] or not origin.split("://")[1]
        ):
            raise ValueError(f"--allow-origin {value!r}: write an origin, e.g. https://example.org")
        origins.add(origin)
    return frozenset(origins)


class AccessMiddleware:
    """Applies `Access` to every request before the app sees it."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app, self.access = app, access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        origin = Headers(scope=scope).get("origin")
        if scope["type"] == "http" and scope["method"] == "OPTIONS" and origin is not None:
            cors = self.access.cors(origin)  # a preflight: allowed or not, nothing else runs
            await Response(status_code=204 if cors else 403, headers=cors)(scope, receive, send)
            return
        refusal = self.access.check(scope)
        if refusal is None:
            await self.app(scope, receive, _with_headers(send, self.access.cors(origin)))
        elif scope["type"] == "websocket":
            await _refuse_socket(WebSocket(scope, receive, send), refusal)
        else:
            await _response(refusal, self.access.cors(origin))(scope, receive, send)


def _response(refusal: Refusal, headers: dict[str, str]) -> Response:
    """OpenAI's error object, as its API answers a missing or wrong key."""
    error = {"message": refusal.message, "type": "invalid_request_error", "param": None}
    if refusal.status == 401:
        headers = {**headers, "WWW-Authenticate": "Bearer"}
    return JSONResponse({"error": {**error, "code": refusal.code}}, refusal.status, headers)


async def _refuse_socket(ws: WebSocket, refusal: Refusal) -> None:
    await ws.accept(subprotocol=chosen_subprotocol(ws.scope))
    error = {"type": "invalid_request_error", "code": refusal.code, "message": refusal.message}
    await ws.send_json({"type": "error", "error": {**error, "param": None, "event_id": None}})
    await ws.close(CLOSE_POLICY)


def _with_headers(send: Send, headers: dict[str, str]) -> Send:
    """`send`, adding `headers` to the response's start (CORS for a listed origin)."""
    return _AddHeaders(send, headers) if headers else send


class _AddHeaders:
    """An ASGI `send` that adds headers to `http.response.start`."""

    def __init__(self, send: Send, headers: dict[str, str]) -> None:
        self.send = send
        self.raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *self.raw]}
        await self.send(message)


def server_access(api_key: str | None, origins: Iterable[str], host: str) -> Access:
    """The rules `as2d serve` runs under: `--api-key` (else `AS2D_API_KEY`), `--allow-origin`.

    Raises:
        ValueError: a server without a key on an address other hosts can reach, a key that a
            browser cannot send (one line, for the command line).
    """
    if api_key is not None and not _token(api_key):
        raise ValueError(
            "--api-key: use letters, digits and -._~ only (a browser sends it as a WebSocket "
            "subprotocol)"
        )
    if api_key is None and not _loopback(host):
        raise ValueError(
            f"--host {host} reaches other machines: give --api-key (or {KEY_ENV}); without a "
            "key the server listens on 127.0.0.1 only"
        )
    return Access(api_key, parse_origins(origins))


def _token(key: str) -> bool:
    """Whether `key` is safe in a subprotocol and a header (RFC 6455's token, stricter)."""
    return bool(key) and all(c.isascii() and (c.isalnum() or c in "-._~") for c in key)


def _loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")
