from conftest import FakeEmbedder, ScriptedGenerator, make_hits

from rag.evidence import GAP, EvidenceSelector, excerpts
from rag.generation import ExtractiveGenerator
from rag.pipeline import Pipeline
from rag.prompting import build_prompt
from rag.settings import Settings

HITS = make_hits(
    "Setup is quick. Each player draws four cards. The hand limit is ten cards. "
    "Discard down at the end of the turn.",
    "Monsters activate from left to right. A stunned monster does not activate this turn.",
)


class CountingEmbedder(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.passage_batches = 0

    def embed_passages(self, texts, batch_size=16, progress=None):  # type: ignore[no-untyped-def]
        self.passage_batches += 1
        return super().embed_passages(texts, batch_size, progress)


def test_the_closest_sentences_are_chosen_best_first() -> None:
    chosen = EvidenceSelector(FakeEmbedder(), sentences=2).choose("stunned monster activate", HITS)
    assert [s.text for s in chosen] == [
        "A stunned monster does not activate this turn.",
        "Monsters activate from left to right.",
    ]
    assert chosen[0].score >= chosen[1].score


def test_excerpts_keep_retrieval_and_reading_order_and_mark_gaps() -> None:
    selector = EvidenceSelector(FakeEmbedder(), sentences=9)
    ranked = selector.rank("hand limit setup monsters", HITS)
    by_text = {s.text: s for s in ranked}
    chosen = [
        by_text["Monsters activate from left to right."],
        by_text["The hand limit is ten cards."],
        by_text["Setup is quick."],
    ]
    shown = excerpts(chosen)
    assert [e.hit.chunk.id for e in shown] == ["g:1", "g:2"]
    assert shown[0].text == f"Setup is quick.{GAP}The hand limit is ten cards."
    assert shown[1].text == "Monsters activate from left to right."


def test_sentence_vectors_are_computed_once_per_passage() -> None:
    embedder = CountingEmbedder()
    selector = EvidenceSelector(embedder, sentences=3)
    selector.choose("hand limit", HITS)
    selector.choose("monsters", HITS)
    assert embedder.passage_batches == len(HITS)


def test_extractive_backend_quotes_the_chosen_evidence() -> None:
    chosen = EvidenceSelector(FakeEmbedder(), sentences=1).choose("stunned monster", HITS)
    prompt = build_prompt(
        "stunned monster?", "en", excerpts(chosen), game_title="G", evidence=chosen
    )
    # passage [1] of this prompt is the second hit: numbering follows what the prompt shows
    assert prompt.passages == [HITS[1]]
    assert (
        ExtractiveGenerator()
        .complete(prompt)
        .startswith("Conclusion: A stunned monster does not activate this turn. [1]")
    )


def test_pipeline_prompt_shows_only_the_chosen_sentences(settings: Settings) -> None:
    generator = ScriptedGenerator(["Conclusion: ten cards [1]."])
    pipeline = Pipeline(settings, embedder=FakeEmbedder(), generator=generator)
    answer = pipeline.ask("What is the hand limit?", "Maximum Apocalypse")
    prompt = generator.prompts[0]
    shown = prompt.messages[-1]["content"]
    assert 0 < len(prompt.evidence) <= settings.generation.evidence_sentences
    assert all(sentence in shown for _, sentence in prompt.evidence)
    whole_texts = [hit.chunk.text for hit in prompt.passages]
    assert not any(text in shown for text in whole_texts if len(text) > 300)
    assert answer.citations[0].chunk_id == generator.prompts[0].passages[0].chunk.id


def test_zero_evidence_sentences_shows_whole_passages(settings: Settings) -> None:
    whole = settings.model_copy(
        update={"generation": settings.generation.model_copy(update={"evidence_sentences": 0})}
    )
    generator = ScriptedGenerator()
    Pipeline(whole, embedder=FakeEmbedder(), generator=generator).ask(
        "What is the hand limit?", "Maximum Apocalypse"
    )
    assert generator.prompts[0].evidence == []
    assert len(generator.prompts[0].passages) == whole.generation.passages


def test_the_question_is_embedded_once_per_answer(settings: Settings) -> None:
    class QueryCounting(FakeEmbedder):
        queries = 0

        def _encode(self, texts, *, query):  # type: ignore[no-untyped-def]
            self.queries += query
            return super()._encode(texts, query=query)

    embedder = QueryCounting()
    pipeline = Pipeline(settings, embedder=embedder, generator=ScriptedGenerator())
    pipeline.ensure_index()
    pipeline.ask("What is the hand limit?", "Maximum Apocalypse")  # retrieval and evidence
    assert embedder.queries == 1
    assert not embedder.embed_query("What is the hand limit?").flags.writeable  # shared
