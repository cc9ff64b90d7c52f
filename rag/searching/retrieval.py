"""Hybrid retrieval scoped to one game: dense (FAISS) and BM25 ranked independently, then fused.

The dense results stand on their own: no keyword filter gates them. BM25 joins the fusion
(at `lexical_weight`) only when the question is in the rulebook's language, since a Chinese
question shares no words with an English rulebook and its BM25 list is noise. A question
naming a glossary term (Stun, Docile, Break, Ichor...) gets that term's entry among its
results: it takes the last slot when fusion did not rank it, so the rule itself stays first.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

from rag.lang import detect_lang
from rag.reading.abbreviations import BookSpelling
from rag.searching.embedding import Embedder
from rag.searching.index import ChunkIndex
from rag.searching.lexical import BM25
from rag.searching.reranking import Reranker
from rag.settings import RetrievalSettings
from rag.types import Hit

Mode = Literal["hybrid", "dense", "bm25"]
Ranking = list[tuple[int, float]]  # (chunk position, score), best first
_Made = TypeVar("_Made")


def rrf(
    rankings: Sequence[Ranking], k: int = 60, weights: Sequence[float] | None = None
) -> Ranking:
    """Reciprocal rank fusion: each list adds weight / (k + rank) for the items it ranks."""
    fused: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        for rank, (position, _) in enumerate(ranking, start=1):
            fused[position] = fused.get(position, 0.0) + weight / (k + rank)
    return sorted(fused.items(), key=lambda p: p[1], reverse=True)


class Retriever:
    def __init__(self, index: ChunkIndex, embedder: Embedder, settings: RetrievalSettings):
        self.index = index
        self.embedder = embedder
        self.settings = settings
        self._bm25: dict[str, BM25] = {}
        self._spellings: dict[str, BookSpelling] = {}
        self._lock = threading.Lock()

    def _lexical(self, slug: str) -> BM25:
        return self._of_book(self._bm25, slug, BM25)

    def spelling(self, slug: str) -> BookSpelling:
        """The abbreviations a game's book defines, and how it spells them."""
        return self._of_book(self._spellings, slug, BookSpelling.of)

    def _of_book(
        self, made: dict[str, _Made], slug: str, make: Callable[[list[str]], _Made]
    ) -> _Made:
        """What `make` makes of a game's passages, each with its section path: once."""
        with self._lock:
            if slug not in made:
                made[slug] = make(
                    [_lexical_text(c.section, c.text) for c in self.index.chunks_of(slug)]
                )
            return made[slug]

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
        same_language = detect_lang(query) == self.index.language(slug)
        dense = self.dense(query, slug, n) if mode != "bm25" else []
        lexical = self.lexical(query, slug, n) if mode == "bm25" or same_language else []
        if mode == "hybrid":
            weights = [1.0, self.settings.lexical_weight]
            fused = rrf([dense, lexical], self.settings.rrf_k, weights)
            fused = place_glossary(fused, self.glossary(query, slug), k)
        else:
            fused = dense if mode == "dense" else lexical
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

    def clear_best_game(self, query: str, slugs: Sequence[str]) -> str | None:
        """The game whose closest passage is clearly closer than any other game's, if one is."""
        vector = self.embedder.embed_query(query)
        best = sorted(
            (
                (found[0][1], slug)
                for slug in slugs
                if (found := self.index.search(vector, slug, 1))
            ),
            reverse=True,
        )
        if not best:
            return None
        if len(best) == 1 or best[0][0] - best[1][0] >= self.settings.game_margin:
            return best[0][1]
        return None

    def is_relevant(self, hits: Sequence[Hit]) -> bool:
        """Whether anything found is close enough to the question to answer from."""
        best = max((h.dense_score for h in hits if h.dense_score is not None), default=None)
        if best is None:  # BM25-only search: any lexical match counts
            return any((h.lexical_score or 0) > 0 for h in hits)
        return best >= self.settings.min_dense_score


def place_glossary(fused: Ranking, glossary: Ranking, k: int) -> Ranking:
    """Put the named terms' entries within the top k, after the fused ranking's best."""
    top = {position for position, _ in fused[:k]}
    missing = [(p, s) for p, s in glossary if p not in top][: max(k - 1, 0)]
    if not missing:
        return fused
    keep = k - len(missing)
    rest = [(p, s) for p, s in fused if p not in {m for m, _ in missing}]
    floor = rest[keep - 1][1] if 0 < keep <= len(rest) else 0.0
    return rest[:keep] + [(p, floor) for p, _ in missing] + rest[keep:]


def _lexical_text(section: Sequence[str], text: str) -> str:
    return " ".join(section[1:]) + "\n" + text


def _names_term(query: str, term: str) -> bool:
    term = term.strip()
    if len(term) < 3:
        return False
    return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", query, re.IGNORECASE) is not None
