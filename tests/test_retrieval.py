from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder, ungated

from rag.errors import GameNotFoundError, IndexError_, InputError, ModelError
from rag.generation import ExtractiveGenerator, Generator
from rag.pipeline import Pipeline
from rag.prompting import Prompt
from rag.searching.index import IndexStore, build_faiss
from rag.searching.reranking import LlmYesNoReranker, make_reranker
from rag.searching.retrieval import place_glossary, rrf
from rag.settings import RetrievalSettings, Settings


def test_rrf_fuses_ranks_not_scores() -> None:
    dense = [(1, 0.9), (2, 0.8), (3, 0.1)]
    lexical = [(3, 12.0), (1, 3.0)]
    fused = rrf([dense, lexical], k=60)
    # 1: 1/61 + 1/62; 3: 1/63 + 1/61; 2: 1/62
    assert [p for p, _ in fused] == [1, 3, 2]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)


def test_weighted_rrf() -> None:
    fused = rrf([[(1, 0.9), (2, 0.8)], [(2, 5.0)]], k=60, weights=[1.0, 0.5])
    # 1: 1/61 = 0.01639; 2: 1/62 + 0.5/61 = 0.02433
    assert [p for p, _ in fused] == [2, 1]


def test_glossary_entry_takes_the_last_slot_unless_already_ranked() -> None:
    fused = [(1, 0.5), (2, 0.4), (3, 0.3), (4, 0.2)]
    assert [p for p, _ in place_glossary(fused, [(9, 1.0)], k=3)] == [1, 2, 9, 3, 4]
    assert place_glossary(fused, [(2, 1.0)], k=3) == fused


def test_bm25_sits_out_a_question_in_another_language(pipeline: Pipeline) -> None:
    _, zh_hits = pipeline.retrieve("潜行判定 stealth test 怎么做？", "maximum-apocalypse", k=5)
    assert all(h.lexical_score is None for h in zh_hits)
    _, en_hits = pipeline.retrieve("how do I do a stealth test?", "maximum-apocalypse", k=5)
    assert any(h.lexical_score for h in en_hits)


def test_index_is_built_once_then_loaded(pipeline: Pipeline, settings: Settings) -> None:
    first = pipeline.ensure_index()
    manifest = IndexStore(settings.index_dir).read_manifest()
    assert manifest is not None
    assert manifest["embedding_model"] == "fake-hash-embedder"
    assert manifest["chunks"] == len(first.index.chunks)
    assert manifest["index_type"] == "flat"
    built_at = (settings.index_dir / "manifest.json").stat().st_mtime_ns
    again = Pipeline(settings, embedder=FakeEmbedder()).ensure_index()
    assert (settings.index_dir / "manifest.json").stat().st_mtime_ns == built_at
    assert [c.id for c in again.index.chunks] == [c.id for c in first.index.chunks]


def test_index_rebuilds_when_corpus_or_embedder_changes(settings: Settings, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    (corpus / "g").mkdir(parents=True)
    (corpus / "g" / "manifest.toml").write_text(
        'title = "G"\nslug = "g"\nlanguage = "en"\nfile = "r.txt"\n'
    )
    rulebook = corpus / "g" / "r.txt"
    rulebook.write_text("Setup\nShuffle the deck and deal five cards.\n")
    local = settings.model_copy(update={"corpus_dir": corpus})
    store = IndexStore(local.index_dir)
    pipe = Pipeline(local, embedder=FakeEmbedder())
    assert store.is_current(pipe.corpus, local, "fake-hash-embedder") is False
    pipe.ensure_index()
    assert store.is_current(pipe.corpus, local, "fake-hash-embedder")
    assert store.is_current(pipe.corpus, local, "another-embedder") is False
    rulebook.write_text("Setup\nShuffle the deck and deal six cards.\n")
    fresh = Pipeline(local, embedder=FakeEmbedder())
    assert store.is_current(fresh.corpus, local, "fake-hash-embedder") is False
    assert "six cards" in fresh.ensure_index().index.chunks[0].text


def test_corrupt_index_is_a_clear_error(pipeline: Pipeline, settings: Settings) -> None:
    pipeline.ensure_index()
    (settings.index_dir / "vectors.faiss").write_bytes(b"garbage")
    with pytest.raises(IndexError_, match="rules index --rebuild"):
        IndexStore(settings.index_dir).load()
    rebuilt = Pipeline(settings, embedder=FakeEmbedder()).ensure_index(rebuild=True)
    assert len(rebuilt.index.chunks) > 100


def test_hnsw_past_the_threshold() -> None:
    vectors = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    _, small = build_faiss(vectors, hnsw_threshold=100)
    index, large = build_faiss(vectors, hnsw_threshold=10)
    assert (small, large) == ("flat", "hnsw")
    _, ids = index.search(vectors[:1], 1)
    assert ids[0][0] == 0


def test_search_is_scoped_to_one_game(pipeline: Pipeline) -> None:
    for slug in ("suros", "deck52-final-bus"):
        _, hits = pipeline.retrieve("how do I move?", slug, k=8)
        assert hits and all(h.chunk.game == slug for h in hits)


def test_glossary_term_in_question_finds_its_entry(pipeline: Pipeline) -> None:
    _, hits = pipeline.retrieve("what does Docile do?", "Maximum Apocalypse", k=5)
    assert ("glossary", "Docile") in [(h.chunk.kind, h.chunk.section[-1]) for h in hits]


def test_stealth_question_finds_the_stealth_rule(pipeline: Pipeline) -> None:
    _, hits = pipeline.retrieve("when can't I do a stealth test?", "maximum-apocalypse", k=5)
    assert any("Roll the two Spawn dice" in h.chunk.text for h in hits)


def test_a_question_naming_no_game_goes_to_the_clearly_closest_rulebook(
    settings: Settings,
) -> None:
    def pipeline_with_margin(margin: float) -> Pipeline:
        retrieval = settings.retrieval.model_copy(update={"game_margin": margin})
        configured = settings.model_copy(update={"retrieval": retrieval})
        return Pipeline(configured, embedder=FakeEmbedder(), generator=ExtractiveGenerator())

    question = "how do Ichor tokens on gear work?"
    info, hits = pipeline_with_margin(0.0).retrieve(question)
    assert info.slug == "suros" and hits[0].chunk.game == "suros"
    with pytest.raises(GameNotFoundError, match="Which game"):
        pipeline_with_margin(2.0).retrieve(question)  # no game can be that much closer


def test_unknown_or_missing_game_is_not_guessed(pipeline: Pipeline) -> None:
    with pytest.raises(GameNotFoundError) as err:
        pipeline.retrieve("when can't I do a stealth test?")
    assert "maximum-apocalypse" in err.value.choices
    with pytest.raises(GameNotFoundError):
        pipeline.retrieve("how do I win?", "Maximum")  # both Maximum games
    _, hits = pipeline.retrieve("末日启示录里怎么潜行？")
    assert hits[0].chunk.game == "maximum-apocalypse"


def test_empty_question_is_rejected(pipeline: Pipeline) -> None:
    with pytest.raises(InputError, match="empty"):
        pipeline.retrieve("   ", "suros")


@pytest.mark.real_models
def test_chinese_question_retrieves_english_passage_with_real_embedder(
    real_settings: Settings,
) -> None:
    pipe = Pipeline(real_settings)  # the default embedder, EmbeddingGemma
    _, hits = pipe.retrieve("什么时候不能进行潜行判定？", "末日启示录", k=5)
    assert any("Roll the two Spawn dice" in h.chunk.text for h in hits[:5])
    _, hits = pipe.retrieve("苏罗斯里闪避怎么用？", None, k=5)
    assert hits[0].chunk.game == "suros"
    assert any(h.chunk.section[-1] == "DODGE" for h in hits)


@pytest.mark.real_models
def test_chinese_question_quotes_the_deciding_english_sentence(
    real_settings: Settings,
) -> None:
    pipe = Pipeline(ungated(real_settings))
    events = list(pipe.ask_stream("什么时候不能进行潜行判定？", "末日启示录", conclude=False))
    quotes = events[-1].answer.quotes if events[-1].answer else []
    assert any("DO NOT have any monster cards attached" in q.text for q in quotes)
    # The passage that answers best and, for a "when can't I" question whose closest
    # sentences alone choose another, that one too.
    assert len({q.chunk_id for q in quotes}) <= 2


@pytest.mark.real_models
def test_real_embedder_places_a_question_naming_no_game(real_settings: Settings) -> None:
    default_margin = RetrievalSettings().game_margin
    retrieval = real_settings.retrieval.model_copy(update={"game_margin": default_margin})
    pipe = Pipeline(real_settings.model_copy(update={"retrieval": retrieval}))
    info, _ = pipe.retrieve("怪物生成在玩家格，是立刻激活吗？")
    assert info.slug == "maximum-apocalypse"
    info, _ = pipe.retrieve("how many AP do I gain at the start of my turn?")
    assert info.slug == "suros"


class _YesForStealth(Generator):
    """Says yes only for passages about stealth; records what it was asked."""

    name = "fake-judge"

    def __init__(self) -> None:
        self.prompts: list[Prompt] = []

    def stream(self, prompt: Prompt) -> Iterator[str]:
        self.prompts.append(prompt)
        passage = prompt.messages[-1]["content"].split("Rulebook passage")[1]
        yield "Yes" if "stealth" in passage.lower() else "No"


def test_yes_no_reranker_moves_judged_passages_ahead_keeping_order(
    pipeline: Pipeline,
) -> None:
    judge = _YesForStealth()
    reranker = LlmYesNoReranker(judge)
    _, hits = pipeline.retrieve("what happens when I enter a tile?", "maximum-apocalypse", k=8)
    reranked = reranker.rerank("what happens when I enter a tile?", hits)
    judged = ["stealth" in h.chunk.text.lower() for h in reranked]
    assert any(judged) and not all(judged)
    assert judged == sorted(judged, reverse=True)
    assert [h for h in reranked if "stealth" not in h.chunk.text.lower()] == [
        h for h in hits if "stealth" not in h.chunk.text.lower()
    ]
    assert sorted(h.chunk.id for h in reranked) == sorted(h.chunk.id for h in hits)
    assert {p.task for p in judge.prompts} == {"judge"} and len(judge.prompts) == len(hits)


def test_the_reranker_asks_the_answering_model_whichever_backend(settings: Settings) -> None:
    judge = _YesForStealth()  # as an openai backend would be: a model, but not a local one
    assert make_reranker(settings, judge).generator is judge
    with pytest.raises(ModelError, match="Unknown reranker"):
        bad = settings.retrieval.model_copy(update={"reranker": "cross-encoder"})
        make_reranker(settings.model_copy(update={"retrieval": bad}), judge)


@pytest.mark.real_models
def test_bfloat16_embedder_matches_float32(real_settings: Settings) -> None:
    from rag.searching.embedding import make_embedder

    texts = ["when can't I do a stealth test?", "什么时候不能进行潜行判定？"]
    full = make_embedder("embeddinggemma-300m", real_settings.model_dir)
    half = make_embedder("embeddinggemma-300m", real_settings.model_dir, precision="bfloat16")
    assert half.name == "embeddinggemma-300m@bfloat16" != full.name  # separate indexes
    for text in texts:
        assert float(np.dot(full.embed_query(text), half.embed_query(text))) > 0.999


def test_follow_up_keeps_the_game_an_earlier_turn_named(pipeline: Pipeline) -> None:
    from rag.types import Turn

    history = [Turn(question="How does DODGE work in Suros?", answer="...", game=None)]
    assert pipeline.resolve_game(None, "and if I have no AP?", history).slug == "suros"
    tagged = [Turn(question="and then?", answer="...", game="deck52-final-bus")]
    assert pipeline.resolve_game(None, "what next?", history + tagged).slug == "deck52-final-bus"
