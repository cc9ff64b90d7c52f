from conftest import FakeEmbedder, ScriptedGenerator, make_hits

from rag.answering.candidates import CandidateSelector, Sentence
from rag.answering.quotes import deciding_sentences
from rag.pipeline import Pipeline
from rag.searching.sentences import SentenceVectors
from rag.settings import Settings

HITS = make_hits(
    "Setup is quick. Each player draws four cards. The hand limit is ten cards. "
    "Discard down at the end of the turn.",
    "Monsters activate from left to right. A stunned monster does not activate this turn.",
)


def selector(embedder: FakeEmbedder) -> CandidateSelector:
    stored, _ = SentenceVectors.embed([hit.chunk for hit in HITS], embedder)
    return CandidateSelector(embedder, lambda: stored)


def test_sentences_are_ranked_closest_first() -> None:
    ranked = selector(FakeEmbedder()).rank("stunned monster activate", HITS)
    assert [s.text for s in ranked[:2]] == [
        "A stunned monster does not activate this turn.",
        "Monsters activate from left to right.",
    ]
    assert [s.score for s in ranked] == sorted((s.score for s in ranked), reverse=True)
    assert len(ranked) == 6  # "Setup is quick." is kept: 15 characters


def test_ranking_embeds_the_question_and_no_sentence() -> None:
    class Counting(FakeEmbedder):
        passages = 0

        def embed_passages(self, texts, batch_size=16, progress=None):
            self.passages += len(texts)
            return super().embed_passages(texts, batch_size, progress)

    embedder = Counting()
    chosen = selector(embedder)
    embedded_with_the_index = embedder.passages
    chosen.rank("hand limit", HITS)
    chosen.rank("monsters", HITS)
    assert embedded_with_the_index == 6
    assert embedder.passages == embedded_with_the_index


def _sentence(passage: int, position: int, score: float) -> Sentence:
    hit = HITS[passage]
    return Sentence(hit, passage, position, f"sentence {position} of {hit.chunk.id}", score)


def test_quotes_come_from_the_passage_whose_two_closest_sentences_are_closest() -> None:
    ranked = [_sentence(1, 0, 0.70), _sentence(0, 2, 0.65), _sentence(1, 1, 0.40),
              _sentence(0, 0, 0.50), _sentence(1, 2, 0.30)]  # fmt: skip
    # passage 0: 0.65 + 0.50 beats passage 1: 0.70 + 0.40
    chosen = deciding_sentences(ranked, most=5)
    assert [(s.passage, s.position) for s in chosen] == [(0, 2), (0, 0)]
    assert [s.passage for s in deciding_sentences(ranked, most=5, summed=1)] == [1, 1, 1]
    assert len(deciding_sentences(ranked, most=2, summed=1)) == 2


def test_with_a_rank_penalty_a_passage_ranked_lower_must_be_closer_by_more() -> None:
    first = [_sentence(0, 0, 0.60), _sentence(0, 1, 0.50)]
    second = [_sentence(1, 0, 0.62), _sentence(1, 1, 0.52)]  # 0.04 closer, one place lower
    assert {s.passage for s in deciding_sentences([*second, *first], 5, rank_penalty=0.03)} == {0}
    assert {s.passage for s in deciding_sentences([*second, *first], 5)} == {1}


def test_a_one_sentence_passage_adds_up_one_sentence() -> None:
    glossary = [_sentence(0, 0, 0.54)]  # an entry echoing the question's words
    rule = [_sentence(1, 0, 0.49), _sentence(1, 1, 0.45)]
    assert {s.passage for s in deciding_sentences([*glossary, *rule], 5)} == {1}
    assert deciding_sentences([], 5) == []


def test_the_llm_reads_only_the_quoted_sentences(settings: Settings) -> None:
    settings.generation.select = True  # the selection lists every quoted sentence
    generator = ScriptedGenerator()
    pipeline = Pipeline(settings, embedder=FakeEmbedder(), generator=generator)
    answer = pipeline.ask("What is the hand limit?", "Maximum Apocalypse")
    selection = generator.prompts[0].messages[-1]["content"]
    listed = [line for line in selection.splitlines() if line[:1].isdigit()]
    assert len(listed) == len(answer.quotes) <= settings.generation.quotes
    assert all(any(q.text in line for line in listed) for q in answer.quotes)
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
