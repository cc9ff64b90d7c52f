"""The deciding sentence: which candidate sentence settles the question, and how sure that is.

Every candidate sentence (of the passages retrieval found) is described by a few measured
signals: its closeness to the question by the embedder, how far it stands behind the
closest, the rank and scores of its passage, its keyword score among the candidates, its
length and place. A logistic model over those signals gives each sentence the chance that
it holds the rule that answers; the best is the deciding sentence, shown first, and its
chance is the confidence that decides whether a conclusion is written at all and whether
the rulebook is taken as silent.

The weights are data (`deciding.toml`), fitted by `bench/deciding.py` against the gold
sets' evidence sentences and measured on books left out of the fit. No word list takes
part: the signals hold for any rulebook in either language.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from rag.answering.candidates import Sentence
from rag.answering.quotes import deciding_sentences
from rag.searching.lexical import BM25

WEIGHTS_FILE = "deciding.toml"

# The signals, in the order of a feature row. `bench/deciding.py` fits a weight for each.
FEATURES: tuple[str, ...] = (
    "closeness",  # cosine similarity of sentence and question
    "behind_closest",  # closeness less the closest candidate's (0 for the closest)
    "closeness_rank",  # log(1 + its place among the candidates by closeness)
    "passage_rank",  # log(1 + its passage's place in retrieval's order)
    "passage_closeness",  # its passage's dense score
    "passage_keywords",  # its passage's keyword score, relative to the best hit's
    "in_quoted_passage",  # 1 when its passage is the one the quotes are drawn from
    "keywords",  # its own keyword (BM25) score among the candidates, relative to the best
    "length",  # log of its length in characters
    "opens_passage",  # 1 when it is its passage's first sentence (often a heading's echo)
    "glossary",  # 1 when its passage is a glossary entry
)


def sentence_features(question: str, ranked: Sequence[Sentence]) -> np.ndarray:
    """One row of FEATURES per sentence of `ranked` (closest first), in that order."""
    if not ranked:
        return np.zeros((0, len(FEATURES)))
    closest = ranked[0].score
    best_lexical = max((s.hit.lexical_score or 0.0) for s in ranked)
    quoted = deciding_sentences(ranked, 1)
    quoted_id = quoted[0].hit.chunk.id if quoted else None
    keywords = BM25([s.text for s in ranked]).scores(question)
    best_keywords = max(keywords)
    rows = [
        (
            s.score,
            s.score - closest,
            math.log1p(place),
            math.log1p(s.passage),
            s.hit.dense_score or 0.0,
            (s.hit.lexical_score or 0.0) / best_lexical if best_lexical > 0 else 0.0,
            float(s.hit.chunk.id == quoted_id),
            keyword / best_keywords if best_keywords > 0 else 0.0,
            math.log(max(len(s.text), 1)),
            float(s.position == 0),
            float(s.hit.chunk.kind == "glossary"),
        )
        for place, (s, keyword) in enumerate(zip(ranked, keywords, strict=True))
    ]
    return np.asarray(rows, dtype=float)


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
        text = resources.files("rag.answering").joinpath(WEIGHTS_FILE).read_text("utf-8")
        return cls.from_dict(tomllib.loads(text))


def judge(question: str, ranked: Sequence[Sentence], model: DecidingModel) -> list[Judged]:
    """The candidate sentences, the likeliest to decide the question first."""
    chances = model.chances(sentence_features(question, ranked))
    judged = [Judged(s, float(c)) for s, c in zip(ranked, chances, strict=True)]
    return sorted(judged, key=lambda j: j.confidence, reverse=True)
