"""Each passage's sentences with their vectors, embedded when the index is built.

Quotes are drawn from these sentences, ranked by closeness to the question. Embedding them
at question time took most of an extractive answer's time, and every API worker paid it
again for each passage it quoted first; stored with the index, an answer embeds only its
question. A sentence's vector depends on nothing but the model and the sentence, so a
rebuild reuses every stored vector whose sentence is unchanged (overlapping windows repeat
sentences: each distinct one is embedded once). Each sentence is also stored read under its
passage's section name (the embedder's title slot), which chooses the deciding sentence:
embedded at answer time, that took the cores the model renders with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rag.lang import is_number_row, sentence_spans
from rag.searching.embedding import Embedder, embedding_key
from rag.types import Chunk

MIN_SENTENCE_CHARS = 12  # shorter pieces are headings or list labels, not rules
TEXTS_FILE = "sentences.json"
VECTORS_FILE = "sentences.npy"
TITLED_FILE = "sentences-titled.npy"

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


def titled_key(embedder_name: str, title: str, text: str) -> str:
    """What a sentence's vector read under its section's name depends on."""
    return embedding_key(embedder_name, f"title: {title} | text: {text}")


@dataclass(frozen=True)
class SentenceVectors:
    """Sentences and their unit vectors, by passage id; `titled` has each read under its
    passage's section name, `titles` (empty for an index built before they were stored)."""

    model: str
    texts: dict[str, list[str]]
    vectors: dict[str, np.ndarray]
    titles: dict[str, str] = field(default_factory=dict)
    titled: dict[str, np.ndarray] = field(default_factory=dict)

    def of(self, chunk_id: str) -> tuple[list[str], np.ndarray]:
        return self.texts[chunk_id], self.vectors[chunk_id]

    def titled_of(self, chunk_id: str, position: int, title: str) -> np.ndarray | None:
        """The stored vector of a passage's sentence read under `title`, if it has one."""
        matrix = self.titled.get(chunk_id)
        if matrix is None or self.titles.get(chunk_id) != title or position >= len(matrix):
            return None
        return matrix[position]

    def by_key(self) -> dict[str, np.ndarray]:
        plain = {
            embedding_key(self.model, text): vector
            for chunk_id, texts in self.texts.items()
            for text, vector in zip(texts, self.vectors[chunk_id], strict=True)
        }
        titled = {
            titled_key(self.model, self.titles[chunk_id], text): vector
            for chunk_id, matrix in self.titled.items()
            for text, vector in zip(self.texts[chunk_id], matrix, strict=True)
        }
        return {**plain, **titled}

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
        """The chunks' sentence vectors, plain and titled, embedding only those `stored`
        lacks (by `embedding_key` and `titled_key`); also how many were embedded."""
        known = dict(stored or {})
        chunks = list(chunks)
        texts = {chunk.id: passage_sentences(chunk.text) for chunk in chunks}
        titles = {chunk.id: chunk.section[-1] if chunk.section else "" for chunk in chunks}
        keys = {t: embedding_key(embedder.name, t) for ts in texts.values() for t in ts}
        titled_keys = {
            (titles[i], t): titled_key(embedder.name, titles[i], t)
            for i, ts in texts.items()
            for t in ts
        }
        missing = [text for text, key in keys.items() if key not in known]
        # By length, as embed_passages batches: a batch is padded to its longest text.
        missing_titled = sorted(
            (pair for pair, key in titled_keys.items() if key not in known),
            key=lambda pair: len(pair[0]) + len(pair[1]),
        )
        total = len(missing) + len(missing_titled)
        if missing:
            progress = None if on_batch is None else (lambda done, _: on_batch(done, total))
            embedded = embedder.embed_passages(missing, batch_size=batch_size, progress=progress)
            known.update(zip((keys[text] for text in missing), embedded, strict=True))
        for start in range(0, len(missing_titled), batch_size):
            batch = missing_titled[start : start + batch_size]
            embedded = embedder.embed_titled([t for _, t in batch], [h for h, _ in batch])
            known.update(zip((titled_keys[pair] for pair in batch), embedded, strict=True))
            if on_batch:
                on_batch(len(missing) + start + len(batch), total)
        empty = np.zeros((0, embedder.dimension), dtype=np.float32)

        def stacked(keyed: Callable[[str, str], str]) -> dict[str, np.ndarray]:
            return {
                i: np.stack([known[keyed(i, t)] for t in sentences]) if sentences else empty
                for i, sentences in texts.items()
            }

        return cls(
            embedder.name,
            texts,
            stacked(lambda _, t: keys[t]),
            titles,
            stacked(lambda i, t: titled_keys[(titles[i], t)]),
        ), total

    def save(self, folder: Path) -> None:
        order = list(self.texts)
        (folder / TEXTS_FILE).write_text(
            json.dumps(
                {
                    "model": self.model,
                    "passages": [[i, self.texts[i], self.titles.get(i)] for i in order],
                }
            ),
            encoding="utf-8",
        )
        np.save(folder / VECTORS_FILE, _stacked(self.vectors, order), allow_pickle=False)
        if self.titled:
            np.save(folder / TITLED_FILE, _stacked(self.titled, order), allow_pickle=False)

    @classmethod
    def load(cls, folder: Path) -> SentenceVectors:
        """Read a saved store; OSError or ValueError when it is missing or does not add up.
        One saved before titled vectors were stored loads without them."""
        data = json.loads((folder / TEXTS_FILE).read_text(encoding="utf-8"))
        matrix = np.load(folder / VECTORS_FILE, allow_pickle=False)
        passages = [(str(p[0]), list(p[1]), p[2] if len(p) > 2 else None) for p in data["passages"]]
        count = sum(len(t) for _, t, _ in passages)
        if count != len(matrix):
            raise ValueError("the sentence vectors do not match their sentences")
        titled_path = folder / TITLED_FILE
        titled_matrix = np.load(titled_path, allow_pickle=False) if titled_path.exists() else None
        if titled_matrix is not None and len(titled_matrix) != count:
            raise ValueError("the titled sentence vectors do not match their sentences")
        texts, vectors, titles, titled, start = {}, {}, {}, {}, 0
        for chunk_id, sentences, title in passages:
            texts[chunk_id] = sentences
            vectors[chunk_id] = matrix[start : start + len(sentences)]
            if titled_matrix is not None and title is not None:
                titles[chunk_id] = title
                titled[chunk_id] = titled_matrix[start : start + len(sentences)]
            start += len(sentences)
        return cls(str(data["model"]), texts, vectors, titles, titled)


def _stacked(matrices: Mapping[str, np.ndarray], order: list[str]) -> np.ndarray:
    """The passages' matrices one under another, in `order`."""
    rows = [matrices[i] for i in order]
    dimension = rows[0].shape[1] if rows else 0
    stacked = np.concatenate(rows) if rows else np.zeros((0, dimension))
    return stacked.astype(np.float32)
