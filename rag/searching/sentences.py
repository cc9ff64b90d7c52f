"""Each passage's sentences with their vectors, embedded when the index is built.

Quotes are drawn from these sentences, ranked by closeness to the question. Embedding them
at question time took most of an extractive answer's time, and every API worker paid it
again for each passage it quoted first; stored with the index, an answer embeds only its
question. A sentence's vector depends on nothing but the model and the sentence, so a
rebuild reuses every stored vector whose sentence is unchanged (overlapping windows repeat
sentences: each distinct one is embedded once).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rag.lang import is_number_row, sentence_spans
from rag.searching.embedding import Embedder, embedding_key
from rag.types import Chunk

MIN_SENTENCE_CHARS = 12  # shorter pieces are headings or list labels, not rules
TEXTS_FILE = "sentences.json"
VECTORS_FILE = "sentences.npy"

OnBatch = Callable[[int, int], None]


# A table row is numbers alone ("7*- 8 5 3", "4 15 4 1": players, then a count per column).
# One row is too short to quote and says nothing without its header, so a rulebook's
# player-count tables were in no answer; a table is quoted whole, with the header line
# above its rows when there is one (a short line that ends no sentence).
MIN_TABLE_ROWS = 2
MAX_HEADER_WORDS = 8


def passage_sentences(text: str) -> list[str]:
    """The sentences of a passage that can be quoted, in reading order; a table of numbers
    (header line and rows) is one."""
    texts = [text[start:end] for start, end in _quotable_spans(text)]
    return [t for t in texts if len(t) >= MIN_SENTENCE_CHARS]


def _quotable_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    pending = sentence_spans(text)
    while pending:
        rows = 0
        while rows < len(pending) and is_number_row(text[slice(*pending[rows])]):
            rows += 1
        if rows < MIN_TABLE_ROWS:
            spans.append(pending.pop(0))
            continue
        start, end = pending[0][0], pending[rows - 1][1]
        if spans and _is_header(text, *spans[-1], start):
            start = spans.pop()[0]
        spans.append((start, end))
        del pending[:rows]
    return spans


def _is_header(text: str, start: int, end: int, table: int) -> bool:
    """Whether text[start:end] is the line right above a table starting at `table`."""
    line = text[start:end]
    on_own_line = start == 0 or text[start - 1] == "\n"
    return (
        on_own_line
        and "\n" in text[end:table]
        and not text[end:table].strip()
        and len(re.findall(r"\w+", line)) <= MAX_HEADER_WORDS
        and not line.rstrip().endswith(tuple(".!?:;。！？：；"))
    )


@dataclass(frozen=True)
class SentenceVectors:
    """Sentences and their unit vectors, by passage id."""

    model: str
    texts: dict[str, list[str]]
    vectors: dict[str, np.ndarray]

    def of(self, chunk_id: str) -> tuple[list[str], np.ndarray]:
        return self.texts[chunk_id], self.vectors[chunk_id]

    def by_key(self) -> dict[str, np.ndarray]:
        return {
            embedding_key(self.model, text): vector
            for chunk_id, texts in self.texts.items()
            for text, vector in zip(texts, self.vectors[chunk_id], strict=True)
        }

    @classmethod
    def embed(
        cls,
        chunks: Iterable[Chunk],
        embedder: Embedder,
        *,
        stored: Mapping[str, np.ndarray] | None = None,
        batch_size: int = 16,
        on_batch: OnBatch | None = None,
    ) -> tuple[SentenceVectors, int]:
        """The chunks' sentence vectors, embedding only sentences `stored` lacks (by
        `embedding_key`); also how many sentences were embedded."""
        known = dict(stored or {})
        texts = {chunk.id: passage_sentences(chunk.text) for chunk in chunks}
        keys = {t: embedding_key(embedder.name, t) for ts in texts.values() for t in ts}
        missing = [text for text, key in keys.items() if key not in known]
        if missing:
            embedded = embedder.embed_passages(missing, batch_size=batch_size, progress=on_batch)
            known.update(zip((keys[text] for text in missing), embedded, strict=True))
        empty = np.zeros((0, embedder.dimension), dtype=np.float32)
        vectors = {
            chunk_id: np.stack([known[keys[t]] for t in sentences]) if sentences else empty
            for chunk_id, sentences in texts.items()
        }
        return cls(embedder.name, texts, vectors), len(missing)

    def save(self, folder: Path) -> None:
        order = list(self.texts)
        (folder / TEXTS_FILE).write_text(
            json.dumps({"model": self.model, "passages": [[i, self.texts[i]] for i in order]}),
            encoding="utf-8",
        )
        matrices = [self.vectors[i] for i in order]
        dimension = matrices[0].shape[1] if matrices else 0
        stacked = np.concatenate(matrices) if matrices else np.zeros((0, dimension))
        np.save(folder / VECTORS_FILE, stacked.astype(np.float32), allow_pickle=False)

    @classmethod
    def load(cls, folder: Path) -> SentenceVectors:
        """Read a saved store; OSError or ValueError when it is missing or does not add up."""
        data = json.loads((folder / TEXTS_FILE).read_text(encoding="utf-8"))
        matrix = np.load(folder / VECTORS_FILE, allow_pickle=False)
        passages: list[tuple[str, list[str]]] = [(i, list(t)) for i, t in data["passages"]]
        if sum(len(t) for _, t in passages) != len(matrix):
            raise ValueError("the sentence vectors do not match their sentences")
        texts, vectors, start = {}, {}, 0
        for chunk_id, sentences in passages:
            texts[chunk_id] = sentences
            vectors[chunk_id] = matrix[start : start + len(sentences)]
            start += len(sentences)
        return cls(str(data["model"]), texts, vectors)
