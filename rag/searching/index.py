"""The persisted search index: chunks, their FAISS vectors and a manifest saying what built them.

The index is rebuilt only when the manifest no longer matches: another embedding model,
another chunker version, or a changed corpus (hash of every manifest and rulebook file).
A rebuild embeds only the passages the stored index lacks: a vector depends on nothing but
the model and the text embedded, so every other vector is taken from the stored index
(adding a rulebook embeds its passages alone; removing one embeds nothing). Each passage's
sentences are embedded with it (see sentences), and reused the same way.
Exact inner-product search suits small corpora; past `hnsw_threshold` chunks an HNSW graph
replaces it. Each game's chunks are stored contiguously, so a search is scoped to one game
with an ID range instead of a post-filter that could starve the results.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rag.errors import IndexError_
from rag.reading.chunking import CHUNKER_VERSION
from rag.reading.corpus import MANIFEST, Corpus
from rag.searching.embedding import Embedder, embedding_key
from rag.searching.sentences import SentenceVectors
from rag.settings import Settings
from rag.types import Chunk

Progress = Callable[[str, int, int], None]

# Seconds the default embedder takes per text (a passage or a sentence) on a small CPU: a
# first guess at how long adding a rulebook takes, until a build here has measured it.
DEFAULT_SECONDS_PER_TEXT = 0.06

FORMAT_VERSION = 5  # 2: the manifest counts the passages embedded and reused; 3: sentences;
# 4: a table of numbers is one sentence; 5: sentences read under their section's name too


def corpus_hash(corpus: Corpus) -> str:
    digest = hashlib.sha256()
    for game in sorted(corpus.games, key=lambda g: g.slug):
        digest.update(game.slug.encode())
        digest.update((game.path.parent / MANIFEST).read_bytes())
        digest.update(game.path.read_bytes())
    return digest.hexdigest()


def expected_manifest(corpus: Corpus, settings: Settings, embedder_name: str) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "embedding_model": embedder_name,
        "chunker_version": CHUNKER_VERSION,
        "corpus_hash": corpus_hash(corpus),
        "hnsw_threshold": settings.retrieval.hnsw_threshold,
    }


@dataclass
class ChunkIndex:
    """Chunks in reading order, grouped by game, with their vectors in a FAISS index."""

    chunks: list[Chunk]
    faiss_index: Any
    manifest: dict[str, Any]
    sentences: SentenceVectors | None = None  # None: loaded for its contents alone
    _ranges: dict[str, tuple[int, int]] = field(default_factory=dict, init=False)
    _languages: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        for i, chunk in enumerate(self.chunks):
            start, _ = self._ranges.get(chunk.game, (i, i))
            self._ranges[chunk.game] = (start, i + 1)
        # Each rulebook's language is that of most of its chunks; searches read it per query.
        for slug in self._ranges:
            langs = [c.lang for c in self.chunks_of(slug)]
            self._languages[slug] = max(set(langs), key=langs.count)

    def game_range(self, slug: str) -> tuple[int, int]:
        return self._ranges.get(slug, (0, 0))

    def language(self, slug: str) -> str:
        return self._languages.get(slug, "en")

    def chunks_of(self, slug: str) -> list[Chunk]:
        start, end = self.game_range(slug)
        return self.chunks[start:end]

    def sentence_vectors(self) -> SentenceVectors:
        if self.sentences is None:
            raise IndexError_("The index was loaded without its vectors.")
        return self.sentences

    def chunk_by_id(self, chunk_id: str) -> Chunk | None:
        return next((c for c in self.chunks if c.id == chunk_id), None)

    def search(self, vector: np.ndarray, slug: str, n: int) -> list[tuple[int, float]]:
        """The n nearest (position, cosine) pairs among one game's chunks."""
        faiss: Any = _faiss()  # its stubs lack the selector-aware search parameters
        start, end = self.game_range(slug)
        if end <= start:
            return []
        params = (
            faiss.SearchParametersHNSW(sel=faiss.IDSelectorRange(start, end), efSearch=max(64, n))
            if self.manifest.get("index_type") == "hnsw"
            else faiss.SearchParameters(sel=faiss.IDSelectorRange(start, end))
        )
        scores, ids = self.faiss_index.search(
            vector.reshape(1, -1).astype(np.float32), min(n, end - start), params=params
        )
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]


def _faiss() -> Any:
    import faiss

    return faiss


def build_faiss(vectors: np.ndarray, hnsw_threshold: int) -> tuple[Any, str]:
    faiss = _faiss()
    dim = vectors.shape[1]
    index: Any
    if len(vectors) > hnsw_threshold:
        index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 80
        kind = "hnsw"
    else:
        index = faiss.IndexFlatIP(dim)
        kind = "flat"
    index.add(vectors)
    return index, kind


class IndexStore:
    """An index folder: manifest.json, chunks.jsonl, vectors.faiss and the sentences' files."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @property
    def manifest_path(self) -> Path:
        return self.folder / "manifest.json"

    def read_manifest(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def is_current(self, corpus: Corpus, settings: Settings, embedder_name: str) -> bool:
        stored = self.read_manifest()
        if stored is None:
            return False
        wanted = expected_manifest(corpus, settings, embedder_name)
        return all(stored.get(key) == value for key, value in wanted.items())

    def seconds_per_text(self, embedder_name: str) -> float | None:
        """How long the embedder took per text in the builds of this index, when measured."""
        manifest = self.read_manifest() or {}
        rate = manifest.get("seconds_per_text")
        current = manifest.get("embedding_model") == embedder_name
        return float(rate) if current and isinstance(rate, int | float) else None

    def build(
        self,
        corpus: Corpus,
        settings: Settings,
        embedder: Embedder,
        chunks: list[Chunk],
        progress: Progress | None = None,
        *,
        reuse: bool = True,
    ) -> ChunkIndex:
        """Index the chunks, reusing the stored index's vectors unless `reuse` is off."""
        faiss = _faiss()
        started = time.perf_counter()
        timer = _EmbeddingTimer()
        stored = self.stored_vectors() if reuse else {}
        keys = [vector_key(embedder.name, chunk) for chunk in chunks]
        new = [i for i, key in enumerate(keys) if key not in stored]
        if progress:
            progress("reuse", len(chunks) - len(new), len(chunks))
        if new:  # an empty call would still load the model, for its dimension
            on_batch = (lambda done, total: progress("embed", done, total)) if progress else None
            embedded = embedder.embed_passages(
                [_embedding_text(chunks[i]) for i in new],
                batch_size=settings.embedding.batch_size,
                progress=timer.timing(on_batch),
            )
            stored = {**stored, **dict(zip((keys[i] for i in new), embedded, strict=True))}
        vectors = (
            np.stack([stored[key] for key in keys])
            if chunks
            else np.zeros((0, embedder.dimension), dtype=np.float32)
        )
        faiss_index, kind = build_faiss(vectors, settings.retrieval.hnsw_threshold)
        on_sentences = (
            (lambda done, total: progress("sentences", done, total)) if progress else None
        )
        sentences, sentences_embedded = SentenceVectors.embed(
            chunks,
            embedder,
            stored=self.stored_sentences() if reuse else None,
            batch_size=settings.embedding.batch_size,
            on_batch=timer.timing(on_sentences),
        )
        manifest = {
            **expected_manifest(corpus, settings, embedder.name),
            "dimension": int(vectors.shape[1]),
            "index_type": kind,
            "chunks": len(chunks),
            "embedded": len(new),
            "reused": len(chunks) - len(new),
            "sentences": sum(len(texts) for texts in sentences.texts.values()),
            "sentences_embedded": sentences_embedded,
            "games": corpus.slugs,
            "seconds_per_text": timer.seconds_per_text() or self.seconds_per_text(embedder.name),
            "build_seconds": round(time.perf_counter() - started, 3),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        # Write into a temporary folder and swap it in, so a crash never leaves half an index.
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".index-", dir=self.folder.parent))
        try:
            with (tmp / "chunks.jsonl").open("w", encoding="utf-8") as out:
                for chunk in chunks:
                    out.write(json.dumps(chunk.to_dict(), ensure_ascii=False) + "\n")
            faiss.write_index(faiss_index, str(tmp / "vectors.faiss"))
            sentences.save(tmp)
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._swap_in(tmp)
        return ChunkIndex(chunks, faiss_index, manifest, sentences)

    def load(self) -> ChunkIndex:
        contents = self.load_contents()
        faiss_index = self._read_vectors(contents)
        try:
            sentences = SentenceVectors.load(self.folder)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise self._corrupt(exc) from exc
        if set(sentences.texts) != {chunk.id for chunk in contents.chunks}:
            raise self._inconsistent()
        return ChunkIndex(contents.chunks, faiss_index, contents.manifest, sentences)

    def _read_vectors(self, contents: ChunkIndex) -> Any:
        try:
            faiss_index = _faiss().read_index(str(self.folder / "vectors.faiss"))
        except RuntimeError as exc:
            raise self._corrupt(exc) from exc
        if faiss_index.ntotal != len(contents.chunks):
            raise self._inconsistent()
        return faiss_index

    def _corrupt(self, error: Exception) -> IndexError_:
        return IndexError_(
            f"The index at {self.folder} is corrupt ({error}): run `rules index --rebuild`."
        )

    def _inconsistent(self) -> IndexError_:
        return IndexError_(
            f"The index at {self.folder} is inconsistent: run `rules index --rebuild`."
        )

    def load_contents(self) -> ChunkIndex:
        """The chunks and manifest without the vectors: what the rulebook viewer and the game
        list need, read without importing FAISS (light commands stay fast)."""
        manifest = self.read_manifest()
        if manifest is None:
            raise IndexError_(f"No index at {self.folder}: build it with `rules index --rebuild`.")
        try:
            chunks = [
                Chunk.from_dict(json.loads(line))
                for line in (self.folder / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
                if line.strip()
            ]
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise self._corrupt(exc) from exc
        if manifest.get("chunks") != len(chunks):
            raise self._inconsistent()
        return ChunkIndex(chunks, None, manifest)

    def stored_vectors(self) -> dict[str, np.ndarray]:
        """The stored index's vectors by `vector_key`; none when there is no readable index.
        (An index of an older format, without sentences, still lends its passages' vectors.)"""
        try:
            contents = self.load_contents()
            faiss_index = self._read_vectors(contents)
        except IndexError_:
            return {}
        model = str(contents.manifest["embedding_model"])
        vectors = faiss_index.reconstruct_n(0, faiss_index.ntotal)
        return {
            vector_key(model, chunk): vector
            for chunk, vector in zip(contents.chunks, vectors, strict=True)
        }

    def stored_sentences(self) -> dict[str, np.ndarray]:
        """The stored sentences' vectors by `embedding_key`; none when there are none to read."""
        try:
            return SentenceVectors.load(self.folder).by_key()
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def _swap_in(self, built: Path) -> None:
        """Make `built` the index folder. The old folder is renamed aside, not deleted in
        place: an interruption cannot leave a partly deleted index that looks whole."""
        retired = None
        if self.folder.exists():
            retired = Path(tempfile.mkdtemp(prefix=".index-old-", dir=self.folder.parent))
            self.folder.rename(retired / self.folder.name)
        built.rename(self.folder)
        if retired:
            shutil.rmtree(retired)


class _EmbeddingTimer:
    """Times the embedding of texts, but each call's first batch: the first also loads the
    model, which a rulebook's estimate must not count once per text."""

    MIN_TEXTS = 64  # fewer say more about the machine's load at the time than its speed

    def __init__(self) -> None:
        self.seconds = 0.0
        self.texts = 0

    def timing(self, report: Callable[[int, int], None] | None) -> Callable[[int, int], None]:
        last: list[tuple[float, int]] = []

        def on_batch(done: int, total: int) -> None:
            now = time.perf_counter()
            if last:
                self.seconds += now - last[0][0]
                self.texts += done - last[0][1]
            last[:] = [(now, done)]
            if report:
                report(done, total)

        return on_batch

    def seconds_per_text(self) -> float | None:
        return round(self.seconds / self.texts, 6) if self.texts >= self.MIN_TEXTS else None


def vector_key(embedder_name: str, chunk: Chunk) -> str:
    return embedding_key(embedder_name, _embedding_text(chunk))


def _embedding_text(chunk: Chunk) -> str:
    """Embed the section path with the text: headings carry much of a passage's meaning."""
    return f"{' › '.join(chunk.section[1:])}\n{chunk.text}"
