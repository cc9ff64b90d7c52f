"""Index builds are incremental: a rebuild embeds only the passages (and the sentences) the
stored index lacks."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder

import rag.pipeline
import rag.searching.index
from rag.errors import IndexError_
from rag.pipeline import Pipeline
from rag.reading.chunking import chunk_document
from rag.reading.files import load_document
from rag.searching.index import IndexStore
from rag.searching.sentences import passage_sentences
from rag.settings import Settings
from rag.types import Chunk


class CountingEmbedder(FakeEmbedder):
    """The fake embedder, remembering what a build asked it to embed: passages first, then
    sentences (a kind with nothing new is not asked for)."""

    def __init__(self, name: str = FakeEmbedder.name) -> None:
        super().__init__()
        self.name = name
        self.calls: list[list[str]] = []
        self.titled: list[tuple[str, str]] = []  # the sentences read under section names

    def embed_passages(self, texts, batch_size=16, progress=None):  # type: ignore[no-untyped-def]
        self.calls.append(list(texts))
        return super().embed_passages(texts, batch_size, progress)

    def embed_titled(self, texts, titles):  # type: ignore[no-untyped-def]
        self.titled.extend(zip(titles, texts, strict=True))
        return super().embed_passages(texts)  # the fake has no title slot; not recorded


def _distinct_sentences(chunks: list[Chunk]) -> set[str]:
    return {text for chunk in chunks for text in passage_sentences(chunk.text)}


def _titled_sentences(chunks: list[Chunk]) -> set[tuple[str, str]]:
    return {(c.section[-1], text) for c in chunks for text in passage_sentences(c.text)}


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
    passages, sentences = embedder.calls
    assert len(passages) == len(built.chunks) > 100
    assert sorted(sentences) == sorted(_distinct_sentences(built.chunks))
    assert sorted(embedder.titled) == sorted(_titled_sentences(built.chunks))
    embedder.calls.clear()
    embedder.titled.clear()

    pipeline.add_book(rulebook, "Pebble Race")

    index = pipeline.ensure_index().index
    own = index.chunks_of("pebble-race")
    assert len(own) == 3
    passages, sentences = embedder.calls
    # Each embedded passage text is its passage's, after a line of section headings.
    assert sorted(text.split("\n", 1)[1] for text in passages) == sorted(c.text for c in own)
    assert (index.manifest["embedded"], index.manifest["reused"]) == (3, len(built.chunks))
    assert set(sentences) == _distinct_sentences(own) - _distinct_sentences(built.chunks)
    assert set(embedder.titled) == _titled_sentences(own) - _titled_sentences(built.chunks)
    assert index.manifest["sentences_embedded"] == len(sentences) + len(embedder.titled) > 0
    # Every reused vector is still its own passage's: the same as a build from scratch.
    fresh = settings.model_copy(update={"home": settings.home.parent / "fresh"})
    shutil.copytree(settings.user_books_dir, fresh.user_books_dir)
    Pipeline(fresh, embedder=FakeEmbedder()).ensure_index()
    incremental, scratch = _vectors(pipeline.index_store()), _vectors(IndexStore(fresh.index_dir))
    assert incremental.keys() == scratch.keys()
    assert all(np.allclose(incremental[key], scratch[key]) for key in scratch)
    kept, fresh_sentences = (
        IndexStore(folder).load().sentence_vectors()
        for folder in (settings.index_dir, fresh.index_dir)
    )
    assert kept.texts == fresh_sentences.texts
    assert all(np.allclose(kept.vectors[i], fresh_sentences.vectors[i]) for i in kept.texts)
    assert all(np.allclose(kept.titled[i], fresh_sentences.titled[i]) for i in kept.texts)


def test_removing_a_book_embeds_nothing(settings: Settings, rulebook: Path) -> None:
    embedder = CountingEmbedder()
    pipeline = Pipeline(settings, embedder=embedder)
    pipeline.add_book(rulebook, "Pebble Race")
    before = pipeline.ensure_index().index
    embedder.calls.clear()

    pipeline.remove_book("pebble-race")

    after = pipeline.ensure_index().index
    assert embedder.calls == []
    assert "pebble-race" not in after.manifest["games"]
    assert after.manifest["reused"] == len(after.chunks) == len(before.chunks) - 3
    assert _vectors(pipeline.index_store()).keys() <= {c.id for c in before.chunks}


def test_another_embedder_re_embeds_everything(settings: Settings) -> None:
    Pipeline(settings, embedder=CountingEmbedder()).ensure_index()
    other = CountingEmbedder(name="another-embedder")

    index = Pipeline(settings, embedder=other).ensure_index().index

    assert index.manifest["embedding_model"] == "another-embedder"
    assert len(other.calls[0]) == len(index.chunks) == index.manifest["embedded"]
    assert len(other.calls[1]) + len(other.titled) == index.manifest["sentences_embedded"]
    assert len(other.calls[1]) > len(index.chunks)


def test_a_rebuild_asked_for_re_embeds_everything(settings: Settings) -> None:
    Pipeline(settings, embedder=CountingEmbedder()).ensure_index()
    embedder = CountingEmbedder()

    index = Pipeline(settings, embedder=embedder).ensure_index(rebuild=True).index

    assert len(embedder.calls[0]) == len(index.chunks) == index.manifest["embedded"]
    assert set(embedder.calls[1]) == _distinct_sentences(index.chunks)


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
    assert changed and len(embedder.calls[0]) == len(changed) == index.manifest["embedded"]
    # Only sentences the old passages did not have are embedded (a long one cut in two).
    new_sentences = _distinct_sentences(index.chunks) - _distinct_sentences(old.chunks)
    assert set(embedder.calls[1] if len(embedder.calls) > 1 else []) == new_sentences
    assert len(new_sentences) < len(_distinct_sentences(index.chunks)) / 10


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


def test_an_index_from_before_sentence_vectors_lends_its_passages(settings: Settings) -> None:
    pipeline = Pipeline(settings, embedder=FakeEmbedder())
    built = pipeline.ensure_index().index
    store = pipeline.index_store()
    manifest = json.loads(store.manifest_path.read_text(encoding="utf-8"))
    store.manifest_path.write_text(json.dumps({**manifest, "format": 2}), encoding="utf-8")
    for name in ("sentences.json", "sentences.npy"):
        (store.folder / name).unlink()
    with pytest.raises(IndexError_, match="corrupt"):
        store.load()
    embedder = CountingEmbedder()

    index = Pipeline(settings, embedder=embedder).ensure_index().index

    assert (index.manifest["embedded"], index.manifest["reused"]) == (0, len(built.chunks))
    assert [set(call) for call in embedder.calls] == [_distinct_sentences(built.chunks)]
    assert store.load().sentence_vectors().texts == built.sentence_vectors().texts
