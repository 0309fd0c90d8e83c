"""`as2d serve`: OpenAI's audio API over HTTP (`app.py`), and recordings uploaded ahead of the
question, drafted while the server is idle (`recordings.py`)."""

from as2d.server.app import create_app, serve

__all__ = ["create_app", "serve"]
