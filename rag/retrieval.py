"""Hybrid retrieval scoped to one game: dense (FAISS) and BM25 ranked independently, then fused.

The dense results stand on their own: no keyword filter gates them, because a Chinese
question shares no words with an English rulebook. A question naming a glossary term
(Stun, Docile, Break, Ichor...) also ranks that term's entry.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Literal

from rag.embedding import Embedder
from rag.index import ChunkIndex
from rag.lexical import BM25
from rag.reranking import Reranker
from rag.settings import RetrievalSettings
from rag.types import Hit

Mode = Literal["hybrid", "dense", "bm25"]
Ranking = list[tuple[int, float]]  # (chunk position, score), best first


def rrf(rankings: Sequence[Ranking], k: int = 60) -> Ranking:
    """Reciprocal rank fusion: each list adds 1 / (k + rank) for the items it ranks."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, (position, _) in enumerate(ranking, start=1):
            fused[position] = fused.get(position, 0.0) + 1.0 / (k + rank)
    return sorted(fused.items(), key=lambda p: p[1], reverse=True)


class Retriever:
    def __init__(self, index: ChunkIndex, embedder: Embedder, settings: RetrievalSettings):
        self.index = index
        self.embedder = embedder
        self.settings = settings
        self._bm25: dict[str, BM25] = {}
        self._lock = threading.Lock()

    def _lexical(self, slug: str) -> BM25:
        with self._lock:
            if slug not in self._bm25:
                texts = [_lexical_text(c.section, c.text) for c in self.index.chunks_of(slug)]
                self._bm25[slug] = BM25(texts)
            return self._bm25[slug]

    def dense(self, query: str, slug: str, n: int) -> Ranking:
        return self.index.search(self.embedder.embed_query(query), slug, n)

    def lexical(self, query: str, slug: str, n: int) -> Ranking:
        offset = self.index.game_range(slug)[0]
        return [(offset + i, s) for i, s in self._lexical(slug).top(query, n)]

    def glossary(self, query: str, slug: str) -> Ranking:
        """Glossary entries whose term the question names, as whole words."""
        offset = self.index.game_range(slug)[0]
        found = []
        for i, chunk in enumerate(self.index.chunks_of(slug)):
            term = chunk.section[-1]
            if chunk.kind == "glossary" and _names_term(query, term):
                found.append((offset + i, 1.0))
        return found

    def search(
        self,
        query: str,
        slug: str,
        k: int,
        *,
        mode: Mode | None = None,
        reranker: Reranker | None = None,
    ) -> list[Hit]:
        mode = mode or self.settings.mode
        n = max(self.settings.candidates, k)
        dense = self.dense(query, slug, n) if mode != "bm25" else []
        lexical = self.lexical(query, slug, n) if mode != "dense" else []
        if mode == "hybrid":
            fused = rrf([dense, lexical, self.glossary(query, slug)], self.settings.rrf_k)
        else:
            fused = dense or lexical
        dense_scores, lexical_scores = dict(dense), dict(lexical)
        hits = [
            Hit(
                chunk=self.index.chunks[position],
                score=score,
                rank=rank,
                dense_score=dense_scores.get(position),
                lexical_score=lexical_scores.get(position),
            )
            for rank, (position, score) in enumerate(fused, start=1)
        ]
        if reranker is not None:
            head = reranker.rerank(query, hits[: self.settings.rerank_candidates])
            hits = head + hits[self.settings.rerank_candidates :]
            hits = [
                Hit(h.chunk, h.score, rank, h.dense_score, h.lexical_score)
                for rank, h in enumerate(hits, start=1)
            ]
        return hits[:k]

    def is_relevant(self, hits: Sequence[Hit]) -> bool:
        """Whether anything found is close enough to the question to answer from."""
        best = max((h.dense_score for h in hits if h.dense_score is not None), default=None)
        if best is None:  # BM25-only search: any lexical match counts
            return any((h.lexical_score or 0) > 0 for h in hits)
        return best >= self.settings.min_dense_score


def _lexical_text(section: Sequence[str], text: str) -> str:
    return " ".join(section[1:]) + "\n" + text


def _names_term(query: str, term: str) -> bool:
    term = term.strip()
    if len(term) < 3:
        return False
    return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", query, re.IGNORECASE) is not None
