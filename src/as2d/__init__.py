"""as2d: lossless target-decoupled speculative decoding (AS2D) for audio language models."""

from typing import TYPE_CHECKING

from as2d.types import RunStats, Window, WindowResult

if TYPE_CHECKING:
    from as2d.api import Transcriber

__all__ = ["RunStats", "Transcriber", "Window", "WindowResult"]


def __getattr__(name: str) -> object:
    """`as2d.Transcriber`, imported on first use: it brings torch, and `import as2d` (the
    command line, the drafter process) must not."""
    if name == "Transcriber":
        from as2d.api import Transcriber

        return Transcriber
    raise AttributeError(f"module 'as2d' has no attribute {name!r}")
