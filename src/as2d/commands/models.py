"""`as2d models`: the bundled models and whether they are cached on this machine."""

from __future__ import annotations

from as2d.commands.common import EXIT_OK


def list_models() -> int:
    from as2d.models.bundled import bundled_names, is_cached

    for name in bundled_names():
        print(f"{name}\t{'cached' if is_cached(name) else 'not cached (built on first use)'}")
    return EXIT_OK
