"""The deciding sentence: which candidate sentence settles the question, and how sure that is.

Each candidate sentence (of the passages retrieval found) is described by measured
signals, and a logistic model over them gives each the chance that it holds the rule that
answers; the likeliest quoted one is the deciding sentence, shown first, and its chance is
the confidence that decides whether a conclusion is written at all.

The signals are those that held up on books left out of the fit (`bench/deciding.py`):
so far the embedder's closeness alone, as the passage's rank and scores, keyword scores,
length, place and an LLM's judgement ranked no better held out. The weights are data
(`deciding.toml`), fitted against the gold sets' evidence sentences. No word list takes
part: the signals hold for any rulebook in either language.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rag.answering.candidates import Sentence
from rag.answering.data import data

WEIGHTS_FILE = "deciding.toml"

# The signals, in the order of a feature row. `bench/deciding.py` fits a weight for each.
FEATURES: tuple[str, ...] = ("closeness",)  # cosine similarity of sentence and question


def sentence_features(ranked: Sequence[Sentence]) -> np.ndarray:
    """One row of FEATURES per sentence of `ranked`, in that order."""
    return np.asarray([[s.score] for s in ranked], dtype=float).reshape(-1, len(FEATURES))


@dataclass(frozen=True)
class Judged:
    """A candidate sentence with the chance that it holds the rule that answers."""

    sentence: Sentence
    confidence: float


@dataclass(frozen=True)
class DecidingModel:
    """A logistic model over FEATURES: standardised by `mean` and `scale`, then weighted."""

    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]

    def chances(self, features: np.ndarray) -> np.ndarray:
        if not len(features):
            return np.zeros(0)
        standard = (features - np.asarray(self.mean)) / np.asarray(self.scale)
        return 1.0 / (1.0 + np.exp(-(standard @ np.asarray(self.weights) + self.bias)))

    def to_toml(self) -> str:
        lines = [
            "# The deciding sentence's logistic model: written by `python bench/deciding.py fit",
            "# --write`, fitted on the gold sets' evidence sentences. Each feature is",
            "# standardised, (value - mean) / scale, then weighted.",
            f"bias = {self.bias!r}",
            "",
        ]
        for name, weight, mean, scale in zip(
            FEATURES, self.weights, self.mean, self.scale, strict=True
        ):
            lines += [
                f"[features.{name}]",
                f"weight = {weight!r}",
                f"mean = {mean!r}",
                f"scale = {scale!r}",
                "",
            ]
        return "\n".join(lines)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DecidingModel:
        features = data["features"]
        missing = [name for name in FEATURES if name not in features]
        if missing:
            raise ValueError(f"{WEIGHTS_FILE} lacks features {missing}")
        return cls(
            weights=tuple(float(features[n]["weight"]) for n in FEATURES),
            bias=float(data["bias"]),
            mean=tuple(float(features[n]["mean"]) for n in FEATURES),
            scale=tuple(float(features[n]["scale"]) for n in FEATURES),
        )

    @classmethod
    def shipped(cls) -> DecidingModel:
        return cls.from_dict(data(WEIGHTS_FILE))


def judge(ranked: Sequence[Sentence], model: DecidingModel) -> list[Judged]:
    """The candidate sentences, the likeliest to decide the question first."""
    chances = model.chances(sentence_features(ranked))
    judged = [Judged(s, float(c)) for s, c in zip(ranked, chances, strict=True)]
    return sorted(judged, key=lambda j: j.confidence, reverse=True)
