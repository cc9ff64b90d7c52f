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

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rag.searching.embedding import Embedder
from rag.searching.sentences import SentenceVectors
from rag.types import Hit

_MOST_TITLED = 4096  # sentences kept embedded under their section's name


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
        self._titled: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

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

    def by_titled_closeness(self, question: str, sentences: Sequence[Sentence]) -> list[Sentence]:
        """The sentences, closest to the question first by `titled_scores`."""
        scores = self.titled_scores(question, sentences)
        order = sorted(range(len(sentences)), key=lambda i: scores[i], reverse=True)
        return [sentences[i] for i in order]

    def titled_scores(self, question: str, sentences: Sequence[Sentence]) -> list[float]:
        """Each sentence's cosine similarity with the question when it is read under the
        name of its section, in the context the section gives it ("If the roll is lower, …"
        under "Stealth"): as the index stores them, else (a store without them) embedded
        so at answer time, each once for the life of the process."""
        keys = [(s.hit.chunk.section[-1], s.text) for s in sentences]
        stored = self.sentences()
        kept = [
            stored.titled_of(s.hit.chunk.id, s.position, h)
            for s, (h, _) in zip(sentences, keys, strict=True)
        ]
        with self._lock:
            missing = list(
                dict.fromkeys(
                    k
                    for k, v in zip(keys, kept, strict=True)
                    if v is None and k not in self._titled
                )
            )
        if missing:
            vectors = self.embedder.embed_titled([t for _, t in missing], [h for h, _ in missing])
            with self._lock:
                self._titled.update(zip(missing, vectors, strict=True))
                while len(self._titled) > _MOST_TITLED:
                    self._titled.popitem(last=False)
        query = self.embedder.embed_query(question)
        with self._lock:
            read = [
                v if v is not None else self._titled.get(k) for k, v in zip(keys, kept, strict=True)
            ]
        return [float(v @ query) if v is not None else -1.0 for v in read]
