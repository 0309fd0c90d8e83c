"""The MNN backend: its threads per call, its own bound and a cost key apart from torch's."""

from __future__ import annotations

import pytest

from as2d.backends.mnn_backend import ROUNDING_BOUND, MnnBackend
from as2d.engine.costs import machine_key
from as2d.models.mnn_whisper import mnn_available

pytestmark = pytest.mark.skipif(not mnn_available(), reason="MNN is not installed")


def test_threads_change_per_call_and_costs_are_kept_apart() -> None:
    backend = MnnBackend(threads=1)
    backend.set_threads(2)
    assert backend.threads() == 2
    assert backend.bound == ROUNDING_BOUND
    assert "-mnn" in backend.cost_key() and backend.cost_key() != machine_key("cpu")
    backend.sync()  # an MNN call returns with its outputs read
