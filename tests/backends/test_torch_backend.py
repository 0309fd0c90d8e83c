"""The torch backend: threads set and lent through it, its bound by dtype, its costs' key."""

from __future__ import annotations

import torch

from as2d.backends.torch_backend import ROUNDING_BOUND, TorchBackend, rounding_bound
from as2d.drafting.family import DrafterFamily
from as2d.engine.costs import machine_key
from as2d.target import threads_set


def test_threads_set_lends_and_gives_back() -> None:
    backend = TorchBackend()
    before = backend.threads()
    with threads_set(backend, before + 1):
        assert torch.get_num_threads() == backend.threads() == before + 1
    assert torch.get_num_threads() == before


def test_bound_follows_the_dtype() -> None:
    assert TorchBackend().bound == ROUNDING_BOUND[torch.float32]
    assert TorchBackend("cpu", torch.bfloat16).bound == ROUNDING_BOUND[torch.bfloat16]
    assert rounding_bound(torch.float64) == max(ROUNDING_BOUND.values())  # unknown: the largest


def test_cost_key_names_torch_and_the_device() -> None:
    backend = TorchBackend()
    assert backend.cost_key() == machine_key("cpu") and "-torch" in backend.cost_key()
    assert backend.name == "torch-cpu"
    backend.sync()  # nothing queued on the CPU


def test_a_drafter_kind_sets_threads_through_its_backend() -> None:
    before = torch.get_num_threads()
    with DrafterFamily("whisper-tiny.en").threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before
    with DrafterFamily("ct2:whisper-tiny.en").threads(before + 1):  # fixed when it loads
        assert torch.get_num_threads() == before
