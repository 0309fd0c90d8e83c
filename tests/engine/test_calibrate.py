"""Measured costs are kept per machine: a cost timed on one processor or torch never steers
another's budget."""

from __future__ import annotations

import torch

from as2d.engine.costs import machine_key


def test_machine_key_names_the_processor_torch_and_device() -> None:
    key = machine_key("cpu")
    assert f"torch{torch.__version__.split('+')[0]}" in key and "-cpu-" in key
    assert key == machine_key("cpu")  # stable, so the cache is found again
    assert "/" not in key and " " not in key  # one path component
