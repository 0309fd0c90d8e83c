"""The `auto` drafter: a model per window chosen by its language, so that every language the
target speaks gets drafts. English windows go to the English-only tiny.en (the fastest);
windows in another language, or in one not known yet (before the target has detected it on
a recording's first window), to the multilingual bundled base, which detects it itself."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from as2d.drafting.family import (
    ANY_LANGUAGE,
    ENGLISH_DRAFTER,
    MULTILINGUAL_DRAFTER,
    DraftCosts,
    DrafterFamily,
    DraftModel,
)
from as2d.runtime.spec import DrafterSpec


@dataclass(frozen=True)
class _Chosen:
    model: DraftModel
    encoded: Any


class ByLanguage:
    """tiny.en for English windows, base for the others. tiny.en loads at once unless the
    language is given and is not English; base loads on the first window that needs it (a
    window in another language, or one whose language is not known), where no language is
    given, so that an English recording's drafter is ready two seconds sooner."""

    streams = True

    def __init__(self, spec: DrafterSpec) -> None:
        self.spec = spec
        self.english: DraftModel | None = None
        self.other: DraftModel | None = None
        self._costs: dict[str, DraftCosts] = {}
        if spec.language in (None, "en"):
            self.english = self._load(ENGLISH_DRAFTER)
        else:
            self.other = self._load(MULTILINGUAL_DRAFTER)

    def _load(self, name: str, timed: bool | None = None) -> DraftModel:
        timed = self.spec.timed if timed is None else timed
        return DrafterFamily(name).load(replace(self.spec, name=name, timed=timed))

    def _model(self, language: str | None) -> DraftModel:
        if language == "en" and self.english is not None:
            return self.english
        if self.other is None:  # first needed now: loaded and timed
            self.other = self._load(MULTILINGUAL_DRAFTER, timed=True)
            self._costs = {**self._costs, ANY_LANGUAGE: self.other.warm_up()[ANY_LANGUAGE]}
        return self.other

    def encode(self, audio: np.ndarray, language: str | None) -> _Chosen:
        model = self._model(language)
        return _Chosen(model, model.encode(audio, language))

    def texts(self, encoded: _Chosen) -> Iterator[tuple[int, str]]:
        return encoded.model.texts(encoded.encoded)

    def warm_up(self) -> dict[str, DraftCosts]:
        """English's costs under "en", the multilingual model's under every other language
        ("*"); only the loaded models' (the parent keeps earlier runs' for the others)."""
        for key, model in (("en", self.english), (ANY_LANGUAGE, self.other)):
            timed = model.warm_up() if model is not None else {}
            if timed:  # else not timed (`DrafterSpec.timed`)
                self._costs[key] = timed[ANY_LANGUAGE]
        return self._costs

    def costs(self) -> dict[str, DraftCosts]:
        return self._costs


def load(spec: DrafterSpec, model: str) -> ByLanguage:
    """`auto`'s drafter (`family.KINDS`); `model` is "auto" itself."""
    return ByLanguage(spec)
