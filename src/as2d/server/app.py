"""`as2d serve`: OpenAI's audio API over HTTP, with one target and one drafter process; this
module wires the parts together (`create_app`) and runs them under uvicorn (`serve`).

Requests queue in arrival order for the one target: a single decoding thread owns the
`Transcriber` (`decoding.py`) and runs one recording at a time; the routes (`audio_api.py`),
on the event loop, only read requests (`forms.py`, `chat.py`) and render answers
(`responses.py`). A full queue answers 503 with `Retry-After`, a client that goes away
cancels its work at the next window, and a drafter process that dies is replaced before the
next request (the answer it was drafting for is unchanged: the target carries on alone).

Endpoints: `POST /v1/audio/transcriptions` and `/v1/audio/translations` (OpenAI's multipart
form; `stream=true` sends server-sent events as windows finish), `POST /v1/chat/completions`
(audio LLM targets only: one `input_audio` part and the request as text), `POST
/v1/recordings` and `GET`/`DELETE /v1/recordings/{id}` (recordings prepared ahead,
`recordings.py`), `GET /v1/models`, `/health`, `/metrics` (Prometheus text);
`/v1/realtime?intent=transcription`, OpenAI's Realtime transcription over a WebSocket
(`realtime.py`); `/`, the page (`page.py`). Errors are OpenAI's JSON: `{"error": {"message",
"type", "param", "code"}}`.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware

from as2d.options import Options, drafter_spec, preparing
from as2d.runtime.drafts import draft_store
from as2d.server.access import Access, AccessMiddleware
from as2d.server.audio_api import AudioApi
from as2d.server.decoding import Engine, Metrics
from as2d.server.page import PageApi
from as2d.server.realtime import RealtimeApi
from as2d.server.recordings import MAX_RECORDING_BYTES, Recordings
from as2d.server.sockets import DroppingWebSocketProtocol


def create_app(
    options: Options,
    max_upload_mb: float = 200,
    queue_size: int = 16,
    realtime_sessions: int = 4,
    max_recordings_mb: float = MAX_RECORDING_BYTES / 2**20,
    access: Access | None = None,
) -> Starlette:
    """The ASGI app; its models load when it starts (lifespan) and close when it stops.
    Every request passes `access` (the key, the origins) first; `/` is the page."""
    access = access or Access()  # None: no key, no foreign origin
    metrics = Metrics()
    store = draft_store(Path(options.drafts_dir) if options.drafts_dir else None)
    accurate = preparing(options)  # nobody waits for it
    spec = drafter_spec(accurate) if options.drafts == "auto" else None
    recordings = Recordings(store, spec, int(max_recordings_mb * 2**20))
    engine = Engine(options, queue_size, metrics, recordings)
    upload_dir = Path(tempfile.mkdtemp(prefix="as2d-uploads-"))
    api = AudioApi(engine, int(max_upload_mb * 2**20), upload_dir)

    live = RealtimeApi(engine, realtime_sessions)
    api.live = live

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(engine.start)
        try:
            yield
        finally:
            await asyncio.to_thread(engine.stop)
            live.close()
            shutil.rmtree(upload_dir, ignore_errors=True)

    page = PageApi(engine, access.api_key is not None)
    routes = [*page.routes(), *api.routes(), live.route()]
    middleware = [Middleware(AccessMiddleware, access=access)]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


class _Server(uvicorn.Server):
    """uvicorn's server, saying on stderr where it listens once it does (models loaded,
    socket bound): one line, what `uvicorn.run` would log at info level."""

    def __init__(self, config: uvicorn.Config, target: str) -> None:
        super().__init__(config)
        self.target = target

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started:
            host = self.config.host
            url = f"http://{f'[{host}]' if ':' in host else host}:{self.config.port}"
            line = f"as2d: serving {self.target} on {url} (Ctrl-C to stop)"
            print(line, file=sys.stderr, flush=True)


def serve(
    options: Options,
    host: str,
    port: int,
    max_upload_mb: float,
    queue_size: int,
    realtime_sessions: int = 4,
    max_recordings_mb: float = MAX_RECORDING_BYTES / 2**20,
    access: Access | None = None,
) -> None:
    """Runs the server until SIGINT/SIGTERM: uvicorn stops taking requests, answers those in
    flight, and the lifespan closes the models.

    Raises:
        SystemExit: the server could not start (uvicorn has said why).
    """
    # A malformed multipart body is answered 400; python-multipart also warns about it on
    # stderr (through logging's last resort). Its errors (a temporary file that cannot be
    # made) are still shown.
    logging.getLogger("python_multipart").setLevel(logging.ERROR)
    app = create_app(
        options, max_upload_mb, queue_size, realtime_sessions, max_recordings_mb, access
    )
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=300,
        ws=DroppingWebSocketProtocol,  # never waits on a client that does not read
    )  # fmt: skip
    server = _Server(config, options.target)
    with suppress(KeyboardInterrupt):  # raised again by uvicorn once it has shut down
        server.run()
    if not server.started:
        raise SystemExit(3)  # uvicorn's STARTUP_FAILURE, as uvicorn.run exits
