"""Okapi BM25 over the project's tokenizer (jieba for Chinese), free of models and FAISS."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from rag.lang import tokenize


class BM25:
    def __init__(self, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        self._k1 = k1
        self._b = b
        self._docs = [Counter(tokenize(t)) for t in texts]
        self._lengths = [sum(d.values()) for d in self._docs]
        self._avg_len = (sum(self._lengths) / len(self._lengths)) if self._lengths else 0.0
        df: Counter[str] = Counter()
        for doc in self._docs:
            df.update(doc.keys())
        n = len(self._docs)
        self._idf = {term: math.log(1 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}

    def scores(self, query: str) -> list[float]:
        terms = [t for t in set(tokenize(query)) if t in self._idf]
        result = []
        for doc, length in zip(self._docs, self._lengths, strict=True):
            norm = self._k1 * (1 - self._b + self._b * length / (self._avg_len or 1.0))
            score = 0.0
            for term in terms:
                tf = doc.get(term, 0)
                if tf:
                    score += self._idf[term] * tf * (self._k1 + 1) / (tf + norm)
            result.append(score)
        return result

    def top(self, query: str, n: int) -> list[tuple[int, float]]:
        """The n best (position, score) pairs with a positive score, best first."""
        ranked = sorted(enumerate(self.scores(query)), key=lambda p: p[1], reverse=True)
        return [(i, s) for i, s in ranked[:n] if s > 0]
