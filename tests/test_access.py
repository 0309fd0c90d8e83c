"""`as2d serve`'s key and origin checks (`server/access.py`): the pure rules on request scopes,
and `as2d serve`'s one-line refusals of a key a browser cannot send or a public address
without a key (before any model loads). The same checks in a real browser: `test_page.py`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from as2d.server.access import Access, chosen_subprotocol, parse_origins, server_access

KEY = "k3y"


def scope(
    path: str = "/v1/models",
    kind: str = "http",
    headers: dict[str, str] | None = None,
    subprotocols: list[str] | None = None,
) -> dict[str, object]:
    """An ASGI scope as uvicorn makes it, reached at 127.0.0.1:8000."""
    raw = {"host": "127.0.0.1:8000", **(headers or {})}
    return {
        "type": kind, "path": path, "method": "GET", "subprotocols": subprotocols or [],
        "headers": [(k.lower().encode(), v.encode()) for k, v in raw.items()],
    }  # fmt: skip


def code(access: Access, **kwargs: object) -> str | None:
    refusal = access.check(scope(**kwargs))  # type: ignore[arg-type]
    return None if refusal is None else refusal.code


def test_without_a_key_everything_passes_but_a_foreign_origin():
    assert code(Access()) is None
    assert code(Access(), headers={"origin": "http://127.0.0.1:8000"}) is None
    assert code(Access(), headers={"origin": "https://evil.example"}) == "origin_not_allowed"


def test_a_key_is_needed_by_every_route_but_the_page():
    access = Access(KEY)
    assert code(access) == "missing_api_key"
    assert code(access, path="/health") == "missing_api_key"
    assert code(access, kind="websocket", path="/v1/realtime") == "missing_api_key"
    assert code(access, headers={"authorization": "Bearer nope"}) == "invalid_api_key"
    assert code(access, headers={"authorization": f"Bearer {KEY}"}) is None
    for public in ("/", "/static/page.js"):
        assert code(access, path=public) is None


def test_a_browser_s_socket_carries_the_key_as_a_subprotocol_and_never_hears_it_back():
    access = Access(KEY)
    offered = ["realtime", f"openai-insecure-api-key.{KEY}"]
    assert code(access, kind="websocket", subprotocols=offered) is None
    wrong = ["realtime", "openai-insecure-api-key.nope"]
    assert code(access, kind="websocket", subprotocols=wrong) == "invalid_api_key"
    assert chosen_subprotocol(scope(subprotocols=offered)) == "realtime"  # type: ignore[arg-type]
    assert chosen_subprotocol(scope()) is None  # type: ignore[arg-type]


def test_listed_origins_pass_and_get_cors_headers():
    access = Access(KEY, parse_origins(["https://app.example/"]))
    headers = {"origin": "https://app.example", "authorization": f"Bearer {KEY}"}
    assert code(access, headers=headers) is None
    assert access.cors("https://app.example")["Access-Control-Allow-Origin"] == (
        "https://app.example"
    )
    assert access.cors("https://evil.example") == {}
    assert code(Access(None, parse_origins(["*"])), headers={"origin": "https://x.example"}) is None


@pytest.mark.parametrize("value", ["app.example", "https://app.example/path", "https://"])
def test_an_origin_that_is_not_one_is_refused(value: str):
    with pytest.raises(ValueError, match="--allow-origin"):
        parse_origins([value])


def test_a_public_address_needs_a_key_and_a_key_must_be_a_token():
    with pytest.raises(ValueError, match="without a key the server listens"):
        server_access(None, [], "0.0.0.0")
    with pytest.raises(ValueError, match="letters, digits"):
        server_access("a key", [], "127.0.0.1")
    assert server_access(KEY, [], "0.0.0.0").api_key == KEY
    assert server_access(None, [], "localhost").api_key is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--host", "0.0.0.0"], "as2d: error: --host 0.0.0.0 reaches other machines"),
        (["--allow-origin", "example.org"], "as2d: error: --allow-origin 'example.org'"),
    ],
)
def test_serve_refuses_in_one_line_before_loading_models(args: list[str], says: str):
    command = [sys.executable, "-m", "as2d.cli", "serve", "--target", "whisper-tiny.en", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith(says) and len(done.stderr.strip().splitlines()) == 1
