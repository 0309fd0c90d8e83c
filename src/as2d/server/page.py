"""The page `as2d serve` shows at `/`: live captions from the microphone and files dropped on
it, in plain HTML, CSS and JavaScript shipped in `static/` (no build step, nothing fetched
from elsewhere, so it works offline).

Why a module of its own: the page only talks to the API the server already speaks (the
Realtime WebSocket, `/v1/audio/transcriptions`); what it needs besides is one fact the
OpenAI API has no place for, `GET /v1/server`: the target, how live sessions decode (as2d,
with provisional text, or target-only, finals only) and the languages, behind the key like
every API route, so that its 401 is how the page learns it must ask for one.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from as2d.models.targets import target_languages
from as2d.server.decoding import Engine
from as2d.server.realtime import live_method

STATIC = Path(__file__).parent / "static"


class PageApi:
    """`/` (the page), `/static/` (its files) and `/v1/server` (what the page shows)."""

    def __init__(self, engine: Engine, needs_key: bool) -> None:
        self.engine = engine
        self.needs_key = needs_key

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/", self.index, methods=["GET"]),
            Route("/v1/server", self.server, methods=["GET"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def server(self, request: Request) -> Response:
        """What the page says about the server (our extension, not OpenAI's)."""
        options = self.engine.options
        languages = target_languages(options.target)
        return JSONResponse(
            {
                "target": options.target,
                "method": options.method,  # files (HTTP requests)
                "live_method": live_method(options),  # target: finals only
                "languages": None if languages is None else sorted(languages),  # None: any
                "language": options.language,  # the server's default (None: detected)
                "needs_key": self.needs_key,
            }
        )
