"""Candidate sentences: the sentences of the retrieved passages, closest to the question first.

The first stage of answering. Quotes are drawn from these sentences and the LLM selects
among the quoted ones, so it reads a few sentences instead of whole passages: on a CPU the
wait before the first token is mostly the prompt being read, and a small model given fewer,
closer sentences is distracted less. Sentences are compared with the
question by the same multilingual embedder as retrieval, so a Chinese question picks
English sentences. The sentences' vectors were computed when the index was built; an answer
embeds only its question.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rag.searching.embedding import Embedder
from rag.searching.sentences import SentenceVectors
from rag.types import Hit


@dataclass(frozen=True)
class Sentence:
    hit: Hit  # the passage the sentence comes from
    passage: int  # that passage's place among the hits ranked
    position: int  # the sentence's place in its passage
    text: str
    score: float  # cosine similarity with the question


class CandidateSelector:
    def __init__(self, embedder: Embedder, sentences: Callable[[], SentenceVectors]) -> None:
        self.embedder = embedder
        self.sentences = sentences  # the current index's: a rebuild replaces them

    def rank(self, question: str, hits: Sequence[Hit]) -> list[Sentence]:
        """Every sentence of the hits, closest to the question first."""
        query = self.embedder.embed_query(question)
        stored = self.sentences()
        ranked: list[Sentence] = []
        for passage, hit in enumerate(hits):
            texts, vectors = stored.of(hit.chunk.id)
            if not texts:
                continue
            scores = vectors @ query
            ranked.extend(
                Sentence(hit, passage, position, text, float(score))
                for position, (text, score) in enumerate(zip(texts, scores, strict=True))
            )
        return sorted(ranked, key=lambda s: s.score, reverse=True)
