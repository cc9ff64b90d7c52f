"""Index builds are incremental: a rebuild embeds only the passages the stored index lacks."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder

import rag.pipeline
import rag.searching.index
from rag.pipeline import Pipeline
from rag.reading.chunking import chunk_document
from rag.reading.files import load_document
from rag.searching.index import IndexStore
from rag.settings import Settings


class CountingEmbedder(FakeEmbedder):
    """The fake embedder, remembering every passage text it was asked to embed."""

    def __init__(self, name: str = FakeEmbedder.name) -> None:
        super().__init__()
        self.name = name
        self.embedded: list[str] = []

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        if not query:
            self.embedded.extend(texts)
        return super()._encode(texts, query=query)


class BatchRecorder(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        self.batches.append(texts)
        return super()._encode(texts, query=query)


def test_passages_are_embedded_in_batches_of_like_length_and_returned_in_order() -> None:
    texts = ["a b c d e f g", "x", "move two spaces", "y z", "draw a card now", "w"]
    recorder = BatchRecorder()

    vectors = recorder.embed_passages(texts, batch_size=2)

    assert recorder.batches == [
        ["x", "w"],
        ["y z", "a b c d e f g"],
        ["move two spaces", "draw a card now"],
    ]
    one_by_one = np.vstack([FakeEmbedder().embed_passages([text]) for text in texts])
    assert np.allclose(vectors, one_by_one)


class BrokenEmbedder(FakeEmbedder):
    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        raise RuntimeError("the embedder died mid-build")


def _vectors(store: IndexStore) -> dict[str, np.ndarray]:
    index = store.load()
    vectors = index.faiss_index.reconstruct_n(0, index.faiss_index.ntotal)
    return {chunk.id: vector for chunk, vector in zip(index.chunks, vectors, strict=True)}


def test_adding_a_book_embeds_only_its_passages(settings: Settings, rulebook: Path) -> None:
    embedder = CountingEmbedder()
    pipeline = Pipeline(settings, embedder=embedder)
    built = pipeline.ensure_index().index
    assert len(embedder.embedded) == len(built.chunks) > 100
    embedder.embedded.clear()

    pipeline.add_book(rulebook, "Pebble Race")

    index = pipeline.ensure_index().index
    own = index.chunks_of("pebble-race")
    assert len(own) == 3
    # Each embedded text is its passage's, after a line of section headings.
    embedded = sorted(text.split("\n", 1)[1] for text in embedder.embedded)
    assert embedded == sorted(c.text for c in own)
    assert (index.manifest["embedded"], index.manifest["reused"]) == (3, len(built.chunks))
    # Every reused vector is still its own passage's: the same as a build from scratch.
    fresh = settings.model_copy(update={"home": settings.home.parent / "fresh"})
    shutil.copytree(settings.user_books_dir, fresh.user_books_dir)
    Pipeline(fresh, embedder=FakeEmbedder()).ensure_index()
    incremental, scratch = _vectors(pipeline.index_store()), _vectors(IndexStore(fresh.index_dir))
    assert incremental.keys() == scratch.keys()
    assert all(np.allclose(incremental[key], scratch[key]) for key in scratch)


def test_removing_a_book_embeds_nothing(settings: Settings, rulebook: Path) -> None:
    embedder = CountingEmbedder()
    pipeline = Pipeline(settings, embedder=embedder)
    pipeline.add_book(rulebook, "Pebble Race")
    before = pipeline.ensure_index().index
    embedder.embedded.clear()

    pipeline.remove_book("pebble-race")

    after = pipeline.ensure_index().index
    assert embedder.embedded == []
    assert "pebble-race" not in after.manifest["games"]
    assert after.manifest["reused"] == len(after.chunks) == len(before.chunks) - 3
    assert _vectors(pipeline.index_store()).keys() <= {c.id for c in before.chunks}


def test_another_embedder_re_embeds_everything(settings: Settings) -> None:
    Pipeline(settings, embedder=CountingEmbedder()).ensure_index()
    other = CountingEmbedder(name="another-embedder")

    index = Pipeline(settings, embedder=other).ensure_index().index

    assert index.manifest["embedding_model"] == "another-embedder"
    assert len(other.embedded) == len(index.chunks) == index.manifest["embedded"]


def test_a_rebuild_asked_for_re_embeds_everything(settings: Settings) -> None:
    Pipeline(settings, embedder=CountingEmbedder()).ensure_index()
    embedder = CountingEmbedder()

    index = Pipeline(settings, embedder=embedder).ensure_index(rebuild=True).index

    assert len(embedder.embedded) == len(index.chunks) == index.manifest["embedded"]


def test_another_chunker_version_rechunks_every_book(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = Pipeline(settings, embedder=CountingEmbedder()).ensure_index().index
    monkeypatch.setattr(rag.searching.index, "CHUNKER_VERSION", "test-2")
    smaller = functools.partial(chunk_document, max_chars=400, overlap_chars=0)
    monkeypatch.setattr(rag.pipeline, "chunk_document", smaller)
    embedder = CountingEmbedder()
    pipeline = Pipeline(settings, embedder=embedder)

    index = pipeline.ensure_index().index

    assert index.manifest["chunker_version"] == "test-2"
    expected = [c for g in pipeline.corpus.games for c in smaller(load_document(g.path, g.slug), g)]
    assert [c.id for c in index.chunks] == [c.id for c in expected] != [c.id for c in old.chunks]
    # A vector depends only on the model and the text it embeds: the passages the new
    # chunker left as they were keep theirs, every other one is embedded.
    old_texts = {(c.section, c.text) for c in old.chunks}
    changed = [c for c in index.chunks if (c.section, c.text) not in old_texts]
    assert changed and len(embedder.embedded) == len(changed) == index.manifest["embedded"]


def test_a_crash_mid_build_leaves_the_old_index(settings: Settings, rulebook: Path) -> None:
    pipeline = Pipeline(settings, embedder=FakeEmbedder())
    old = pipeline.ensure_index().index
    broken = Pipeline(settings, embedder=BrokenEmbedder())

    with pytest.raises(RuntimeError, match="died mid-build"):
        broken.add_book(rulebook, "Pebble Race")

    again = Pipeline(settings, embedder=FakeEmbedder())
    store = again.index_store()
    assert store.is_current(again.corpus, settings, FakeEmbedder.name)
    assert [c.id for c in store.load().chunks] == [c.id for c in old.chunks]
    assert sorted(p.name for p in settings.home.iterdir()) == ["books", "index"]


def test_a_crash_while_writing_leaves_the_old_index(
    settings: Settings, rulebook: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = Pipeline(settings, embedder=FakeEmbedder()).ensure_index().index

    def crash(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(rag.searching.index._faiss(), "write_index", crash)
    with pytest.raises(OSError, match="disk full"):
        Pipeline(settings, embedder=FakeEmbedder()).add_book(rulebook, "Pebble Race")
    monkeypatch.undo()

    assert [c.id for c in IndexStore(settings.index_dir).load().chunks] == [
        c.id for c in old.chunks
    ]
    assert sorted(p.name for p in settings.home.iterdir()) == ["books", "index"]
