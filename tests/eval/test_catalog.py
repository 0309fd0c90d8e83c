"""The catalog: axes expanded into configurations, passed to Options unchanged."""

from __future__ import annotations

from as2d.api import Options
from as2d.eval.catalog import Config, catalog


def test_catalog_expands_axes_target_first():
    configs = catalog(
        ["as2d", "pld", "target"], ["whisper-tiny.en", "ct2:whisper-base"], [None, 4], 2
    )
    assert [c.name for c in configs] == [
        "target 1t",
        "target 2t",
        "as2d whisper-tiny.en k=auto",
        "as2d whisper-tiny.en k=4",
        "as2d ct2:whisper-base k=auto",
        "as2d ct2:whisper-base k=4",
        "pld k=auto",
        "pld k=4",
    ]


def test_one_core_measures_target_only_once():
    assert catalog(["target"], [], [None], 1) == [Config("target", threads=1)]


def test_a_configuration_is_passed_through_as_options():
    """The catalog is data: its method, drafter and budget become Options unchanged."""
    target_1t, target_2t, config = catalog(["sd"], ["whisper-tiny.en"], [8], 2)
    assert (target_1t.method, target_2t.threads) == ("target", 2)  # always: the baseline
    options = config.options(Options(target="whisper-base", language="en"))
    assert (options.method, options.drafter, options.budget) == ("sd", "whisper-tiny.en", 8)
    assert (options.target, options.language) == ("whisper-base", "en")


def test_sd_takes_only_pytorch_drafters() -> None:
    configs = catalog(["sd"], ["whisper-tiny.en", "ct2:whisper-tiny.en"], [4], cores=2)
    assert [c.name for c in configs] == ["target 1t", "target 2t", "sd whisper-tiny.en k=4"]


def test_runtimes_side_by_side_name_theirs_and_one_runtime_keeps_its_names() -> None:
    """With two runtimes every name ends with its runtime (sd on torch only); with one the
    names are as they were, whichever the runtime."""
    both = catalog(["as2d", "sd", "pld"], ["auto"], [None], 2, runtimes=["torch", "mnn"])
    assert [c.name for c in both] == [
        "target 1t torch",
        "target 2t torch",
        "as2d auto k=auto torch",
        "sd auto k=auto torch",
        "pld k=auto torch",
        "target 1t mnn",
        "target 2t mnn",
        "as2d auto k=auto mnn",
        "pld k=auto mnn",
    ]
    base = Options(target="whisper-base", language="en")
    assert [c.options(base).runtime for c in both] == ["torch"] * 5 + ["mnn"] * 4
    alone = catalog(["as2d", "pld"], ["auto"], [None], 2, runtimes=["mnn"])
    assert [c.name for c in alone] == [
        "target 1t",
        "target 2t",
        "as2d auto k=auto",
        "pld k=auto",
    ]
    assert {c.options(base).runtime for c in alone} == {"mnn"}
    assert catalog(["pld"], [], [4], 2) == catalog(["pld"], [], [4], 2, runtimes=["torch"])
