from conftest import FakeEmbedder, ScriptedGenerator, make_hits

from rag.answering.candidates import CandidateSelector
from rag.pipeline import Pipeline
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

    def embed_passages(self, texts, batch_size=16, progress=None):
        self.passage_batches += 1
        return super().embed_passages(texts, batch_size, progress)


def test_the_closest_sentences_are_chosen_best_first() -> None:
    chosen = CandidateSelector(FakeEmbedder(), sentences=2).choose("stunned monster activate", HITS)
    assert [s.text for s in chosen] == [
        "A stunned monster does not activate this turn.",
        "Monsters activate from left to right.",
    ]
    assert chosen[0].score >= chosen[1].score


def test_sentence_vectors_are_computed_once_per_passage() -> None:
    embedder = CountingEmbedder()
    selector = CandidateSelector(embedder, sentences=3)
    selector.choose("hand limit", HITS)
    selector.choose("monsters", HITS)
    assert embedder.passage_batches == len(HITS)


def test_the_llm_reads_only_the_candidate_sentences(settings: Settings) -> None:
    generator = ScriptedGenerator()
    pipeline = Pipeline(settings, embedder=FakeEmbedder(), generator=generator)
    answer = pipeline.ask("What is the hand limit?", "Maximum Apocalypse")
    selection = generator.prompts[0].messages[-1]["content"]
    listed = [line for line in selection.splitlines() if line[:1].isdigit()]
    assert 0 < len(listed) <= settings.generation.evidence_sentences
    whole_texts = [hit.chunk.text for hit in answer.passages]
    assert not any(text in selection for text in whole_texts if len(text) > 300)


def test_the_question_is_embedded_once_per_answer(settings: Settings) -> None:
    class QueryCounting(FakeEmbedder):
        queries = 0

        def _encode(self, texts, *, query):
            self.queries += query
            return super()._encode(texts, query=query)

    embedder = QueryCounting()
    pipeline = Pipeline(settings, embedder=embedder, generator=ScriptedGenerator())
    pipeline.ensure_index()
    pipeline.ask("What is the hand limit?", "Maximum Apocalypse")  # retrieval and evidence
    assert embedder.queries == 1
    assert not embedder.embed_query("What is the hand limit?").flags.writeable  # shared
