"""as2d: lossless target-decoupled speculative decoding (AS2D) for audio language models."""

from as2d.types import RunStats, Window, WindowResult

__all__ = ["RunStats", "Window", "WindowResult"]
