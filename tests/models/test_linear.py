"""The private-op probes of `as2d.models.linear`: they pass here, and a missing or wrong op
falls back to torch's public path with one warning."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from as2d.models import linear
from as2d.models.linear import choose_arithmetic, decoder_linear

needs_onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN"
)
needs_int8 = pytest.mark.skipif(
    "x86" not in torch.backends.quantized.supported_engines, reason="no x86 quantized engine"
)


class _Without:
    """An op namespace (`torch.ops.mkldnn`) in which op `missing` does not exist."""

    def __init__(self, namespace: Any, missing: str) -> None:
        self._namespace = namespace
        self._missing = missing

    def __getattr__(self, name: str) -> Any:
        if name == self._missing:
            raise AttributeError(f"'_OpNamespace' 'mkldnn' object has no attribute '{name}'")
        return getattr(self._namespace, name)


def _clear_probes() -> None:
    linear.onednn_works.cache_clear()
    linear.int8_works.cache_clear()


@pytest.fixture(autouse=True)
def fresh_probes() -> Iterator[None]:
    """Each test probes anew, and leaves no failed probe cached for later tests."""
    _clear_probes()
    yield
    _clear_probes()


def _float_weight() -> torch.Tensor:
    return torch.randn(8, 4)  # [out, in]


def _arithmetic_with_warnings(approximate: bool) -> tuple[str, list[str]]:
    """`choose_arithmetic` on a float32 CPU weight, and the RuntimeWarnings it emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        arithmetic = choose_arithmetic(_float_weight(), approximate=approximate)
    return arithmetic, [str(w.message) for w in caught if w.category is RuntimeWarning]


def _assert_one_warning(messages: list[str], op: str) -> None:
    assert len(messages) == 1, messages
    assert op in messages[0]
    assert "public" in messages[0]
    assert "\n" not in messages[0]


@needs_onednn
@needs_int8
def test_probes_pass_here() -> None:
    assert choose_arithmetic(_float_weight(), approximate=False) == "float32+rows"
    assert choose_arithmetic(_float_weight(), approximate=True) == "int8"


def test_probe_runs_once() -> None:
    assert linear.onednn_works() == linear.onednn_works()
    assert linear.onednn_works.cache_info().misses == 1


@needs_onednn
def test_missing_reorder_falls_back_to_mkl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.ops, "mkldnn", _Without(torch.ops.mkldnn, "_reorder_linear_weight"))
    arithmetic, messages = _arithmetic_with_warnings(approximate=False)
    assert arithmetic == "float32"
    _assert_one_warning(messages, "_reorder_linear_weight")
    torch.manual_seed(1)
    weight, bias = torch.randn(24, 16), torch.randn(24)  # [out, in], [out]
    layer = decoder_linear(weight, bias, arithmetic)
    for rows in (1, linear.VERIFY_ROWS):
        x = torch.randn(rows, 16)  # [rows, in]
        torch.testing.assert_close(layer(x), F.linear(x, weight, bias))


@needs_onednn
def test_wrong_linear_pointwise_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def wrong(x: torch.Tensor, packed: torch.Tensor, bias: Any, *args: Any) -> torch.Tensor:
        return torch.zeros(x.shape[0], packed.shape[0])

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", wrong)
    arithmetic, messages = _arithmetic_with_warnings(approximate=False)
    assert arithmetic == "float32"
    _assert_one_warning(messages, "_linear_pointwise")
    assert "disagree" in messages[0]


@needs_int8
def test_missing_quantize_falls_back_to_float(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch, "quantize_per_channel")
    arithmetic, messages = _arithmetic_with_warnings(approximate=True)
    assert arithmetic in ("float32", "float32+rows")
    _assert_one_warning(messages, "quantize_per_channel")


@needs_onednn
def test_missing_bf16_query_means_no_bfloat16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        torch.ops, "mkldnn", _Without(torch.ops.mkldnn, "_is_mkldnn_bf16_supported")
    )
    with pytest.warns(RuntimeWarning, match="_is_mkldnn_bf16_supported"):
        assert not linear.fast_bfloat16()
