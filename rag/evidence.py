"""Evidence selection: the sentences of the retrieved passages closest to the question.

The LLM sees these sentences instead of whole passages. On a 2-core CPU the wait before the
first token is the prompt read (about 65 tokens/s), so a shorter prompt answers sooner, and
a 1.5B model given fewer, closer sentences is distracted less. Sentences are compared with
the question by the same multilingual embedder as retrieval, so a Chinese question picks
English sentences. Each passage's sentence vectors are computed once per process.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rag.embedding import Embedder
from rag.lang import split_sentences
from rag.types import Hit

MIN_SENTENCE_CHARS = 12  # shorter pieces are headings or list labels, not rules
GAP = " … "  # marks left-out sentences between two chosen ones of a passage


@dataclass(frozen=True)
class Sentence:
    hit: Hit  # the passage the sentence comes from
    passage: int  # that passage's place among the hits ranked
    position: int  # the sentence's place in its passage
    text: str
    score: float  # cosine similarity with the question


@dataclass(frozen=True)
class Excerpt:
    """What the prompt shows of one passage: its chosen sentences, in reading order."""

    hit: Hit
    text: str


class EvidenceSelector:
    def __init__(self, embedder: Embedder, sentences: int) -> None:
        self.embedder = embedder
        self.sentences = sentences
        self._vectors: dict[str, tuple[list[str], np.ndarray]] = {}
        self._lock = threading.Lock()

    def _sentences_of(self, hit: Hit) -> tuple[list[str], np.ndarray]:
        with self._lock:
            if hit.chunk.id not in self._vectors:
                texts = [
                    s.strip()
                    for s in split_sentences(hit.chunk.text)
                    if len(s.strip()) >= MIN_SENTENCE_CHARS
                ]
                self._vectors[hit.chunk.id] = (texts, self.embedder.embed_passages(texts))
            return self._vectors[hit.chunk.id]

    def rank(self, question: str, hits: Sequence[Hit]) -> list[Sentence]:
        """Every sentence of the hits, closest to the question first."""
        query = self.embedder.embed_query(question)
        ranked: list[Sentence] = []
        for passage, hit in enumerate(hits):
            texts, vectors = self._sentences_of(hit)
            if not texts:
                continue
            scores = vectors @ query
            ranked.extend(
                Sentence(hit, passage, position, text, float(score))
                for position, (text, score) in enumerate(zip(texts, scores, strict=True))
            )
        return sorted(ranked, key=lambda s: s.score, reverse=True)

    def support(self, claims: Sequence[str], hits: Sequence[Hit]) -> np.ndarray:
        """How well each passage supports each claim: the best cosine similarity between
        the claim and one of the passage's sentences; shape (claims, passages)."""
        claim_vectors = self.embedder.embed_passages(list(claims))
        scores = np.zeros((len(claims), len(hits)), dtype=np.float32)
        for column, hit in enumerate(hits):
            texts, vectors = self._sentences_of(hit)
            if texts:
                scores[:, column] = (claim_vectors @ vectors.T).max(axis=1)
        return scores

    def choose(self, question: str, hits: Sequence[Hit]) -> list[Sentence]:
        """The `sentences` best sentences, best first."""
        return self.rank(question, hits)[: self.sentences]


def excerpts(chosen: Sequence[Sentence]) -> list[Excerpt]:
    """Group chosen sentences by passage: passages in retrieval order, sentences in reading
    order, with GAP where sentences were left out between them."""
    by_passage: dict[int, list[Sentence]] = {}
    for sentence in chosen:
        by_passage.setdefault(sentence.passage, []).append(sentence)
    result = []
    for passage in sorted(by_passage):
        text = ""
        previous: int | None = None
        sentences = sorted(by_passage[passage], key=lambda s: s.position)
        for sentence in sentences:
            if previous is not None:
                text += " " if sentence.position == previous + 1 else GAP
            text += sentence.text
            previous = sentence.position
        result.append(Excerpt(sentences[0].hit, text))
    return result
