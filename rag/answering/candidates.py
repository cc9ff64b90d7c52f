"""Candidate sentences: the sentences of the retrieved passages, closest to the question first.

The first stage of answering. Quotes are drawn from these sentences and the LLM selects
among the quoted ones, so it reads a few sentences instead of whole passages: on a 2-core
CPU the wait before the first token is the prompt read (about 65 tokens/s), and a 1.5B
model given fewer, closer sentences is distracted less. Sentences are compared with the
question by the same multilingual embedder as retrieval, so a Chinese question picks
English sentences. Each passage's sentence vectors are computed once per process.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rag.lang import split_sentences
from rag.searching.embedding import Embedder
from rag.types import Hit

MIN_SENTENCE_CHARS = 12  # shorter pieces are headings or list labels, not rules


@dataclass(frozen=True)
class Sentence:
    hit: Hit  # the passage the sentence comes from
    passage: int  # that passage's place among the hits ranked
    position: int  # the sentence's place in its passage
    text: str
    score: float  # cosine similarity with the question


class CandidateSelector:
    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
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
