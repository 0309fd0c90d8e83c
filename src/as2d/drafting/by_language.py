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
    """tiny.en for English windows, base for the others; only the model that `spec.language`
    needs is loaded where the language is given."""

    streams = True

    def __init__(self, spec: DrafterSpec) -> None:
        self.english: DraftModel | None = None
        self.other: DraftModel | None = None
        if spec.language in (None, "en"):
            self.english = DrafterFamily(ENGLISH_DRAFTER).load(replace(spec, name=ENGLISH_DRAFTER))
        if spec.language != "en":
            self.other = DrafterFamily(MULTILINGUAL_DRAFTER).load(
                replace(spec, name=MULTILINGUAL_DRAFTER)
            )

    def _model(self, language: str | None) -> DraftModel:
        if language == "en" and self.english is not None:
            return self.english
        return self.other or self.english  # type: ignore[return-value]  # one is loaded

    def encode(self, audio: np.ndarray, language: str | None) -> _Chosen:
        model = self._model(language)
        return _Chosen(model, model.encode(audio, language))

    def texts(self, encoded: _Chosen) -> Iterator[tuple[int, str]]:
        return encoded.model.texts(encoded.encoded)

    def warm_up(self) -> dict[str, DraftCosts]:
        costs: dict[str, DraftCosts] = {}
        if self.english is not None:
            costs["en"] = costs[ANY_LANGUAGE] = self.english.warm_up()[ANY_LANGUAGE]
        if self.other is not None:
            costs[ANY_LANGUAGE] = self.other.warm_up()[ANY_LANGUAGE]
        return costs
