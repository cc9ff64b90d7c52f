from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder, ScriptedGenerator, make_hits

from rag.answering.candidates import CandidateSelector, Sentence
from rag.answering.question import Shape
from rag.answering.quotes import (
    BY_SENTENCES,
    deciding_sentences,
    quoted_sentences,
)
from rag.pipeline import Pipeline
from rag.searching.embedding import SentenceTransformerEmbedder
from rag.searching.sentences import TITLED_FILE, SentenceVectors, passage_sentences
from rag.settings import Settings
from rag.types import Hit, Lang

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


SETUP = (
    "Prepare the Wire cards according to the number of players.\n"
    "Number players\n"
    "4 15 4 1\n"
    "5 19 5 1\n"
    "Deal five face down to each player. Roll dice.\n"
    "2 6\n"
    "Keep the rest in the box."
)


def test_a_table_of_numbers_is_quoted_whole_with_its_header_line() -> None:
    assert passage_sentences(SETUP) == [
        "Prepare the Wire cards according to the number of players.",
        "Number players\n4 15 4 1\n5 19 5 1",
        "Deal five face down to each player.",
        "Keep the rest in the box.",
    ]  # "Roll dice." and the lone row "2 6" are too short to quote


def test_a_table_read_from_a_pdf_is_quoted_whole_with_its_cell_marks() -> None:
    text = "Number of players | Sherlock Team | Moriarty Team\n4*- 5 | 3 | 2\n6 | 4 | 2"
    assert passage_sentences(text) == [text]


def test_a_sentence_above_a_table_is_not_its_header() -> None:
    text = "Use this table.\n2 13 1\n4 15 2\nMissions 2-3\n7-9 12"
    assert passage_sentences(text) == ["Use this table.", "2 13 1\n4 15 2", "Missions 2-3"]


class Counting(FakeEmbedder):
    passages = 0

    def embed_passages(self, texts, batch_size=16, progress=None):
        self.passages += len(texts)
        return super().embed_passages(texts, batch_size, progress)


def test_ranking_and_choosing_the_deciding_sentence_embed_the_question_and_no_sentence() -> None:
    embedder = Counting()
    chosen = selector(embedder)
    embedded_with_the_index = embedder.passages
    chosen.rank("hand limit", HITS)
    ranked = chosen.rank("monsters", HITS)
    chosen.by_titled_closeness("monsters", ranked)
    assert embedded_with_the_index == 12  # each sentence alone and under its section's name
    assert embedder.passages == embedded_with_the_index


def test_an_index_without_titled_sentences_has_them_embedded_at_answer_time_once(
    tmp_path: Path,
) -> None:
    embedder = Counting()
    stored, _ = SentenceVectors.embed([hit.chunk for hit in HITS], embedder)
    stored.save(tmp_path)
    (tmp_path / TITLED_FILE).unlink()  # as an index built before they were stored
    old = SentenceVectors.load(tmp_path)
    assert old.titled == {} and old.texts == stored.texts
    chosen = CandidateSelector(embedder, lambda: old)
    before = embedder.passages
    ranked = chosen.rank("monsters", HITS)
    first = chosen.by_titled_closeness("monsters", ranked)
    assert embedder.passages == before + len(ranked)
    assert chosen.by_titled_closeness("monsters", ranked) == first
    assert embedder.passages == before + len(ranked)  # kept for the process


def test_titled_sentence_vectors_are_saved_loaded_and_reused_by_a_rebuild(
    tmp_path: Path,
) -> None:
    embedder = Counting()
    chunks = [hit.chunk for hit in HITS]
    stored, embedded = SentenceVectors.embed(chunks, embedder)
    assert embedded == 12 and set(stored.titled) == set(stored.texts)
    stored.save(tmp_path)
    loaded = SentenceVectors.load(tmp_path)
    for chunk in chunks:
        title = chunk.section[-1]
        texts, _ = loaded.of(chunk.id)
        expected = embedder.embed_titled(texts, [title] * len(texts))
        assert np.allclose(loaded.titled[chunk.id], expected)
        assert loaded.titled_of(chunk.id, 0, title) is not None
        assert loaded.titled_of(chunk.id, 0, "another section") is None
    again, embedded = SentenceVectors.embed(chunks, embedder, stored=loaded.by_key())
    assert embedded == 0 and again.titles == loaded.titles


def _sentence(passage: int, position: int, score: float) -> Sentence:
    hit = HITS[passage]
    return Sentence(hit, passage, position, f"sentence {position} of {hit.chunk.id}", score)


def test_by_sentences_quotes_come_from_the_passage_whose_two_closest_are_closest() -> None:
    ranked = [_sentence(1, 0, 0.70), _sentence(0, 2, 0.65), _sentence(1, 1, 0.40),
              _sentence(0, 0, 0.50), _sentence(1, 2, 0.30)]  # fmt: skip
    # passage 0: 0.65 + 0.50 beats passage 1: 0.70 + 0.40
    chosen = deciding_sentences(ranked, 5, BY_SENTENCES)
    assert [(s.passage, s.position) for s in chosen] == [(0, 2), (0, 0)]
    by_closest = replace(BY_SENTENCES, summed=1)
    assert [s.passage for s in deciding_sentences(ranked, 5, by_closest)] == [1, 1, 1]
    assert len(deciding_sentences(ranked, 2, by_closest)) == 2


def test_with_a_rank_penalty_a_passage_ranked_lower_must_be_closer_by_more() -> None:
    first = [_sentence(0, 0, 0.60), _sentence(0, 1, 0.50)]
    second = [_sentence(1, 0, 0.62), _sentence(1, 1, 0.52)]  # 0.04 closer, a place lower
    penalised = replace(BY_SENTENCES, rank_penalty=0.05)
    assert {s.passage for s in deciding_sentences([*second, *first], 5, penalised)} == {0}
    assert {s.passage for s in deciding_sentences([*second, *first], 5, BY_SENTENCES)} == {1}


def test_a_one_sentence_passage_adds_up_one_sentence() -> None:
    glossary = [_sentence(0, 0, 0.54)]  # an entry echoing the question's words
    rule = [_sentence(1, 0, 0.49), _sentence(1, 1, 0.45)]
    assert {s.passage for s in deciding_sentences([*glossary, *rule], 5, BY_SENTENCES)} == {1}
    assert deciding_sentences([], 5) == []


def test_a_one_sentence_passage_may_count_its_sentence_again() -> None:
    definition = [_sentence(0, 0, 0.60)]  # 0.60 + 0.4 x 0.60 = 0.84
    rule = [_sentence(1, 0, 0.50), _sentence(1, 1, 0.30)]  # 0.80
    lone = replace(BY_SENTENCES, lone_weight=0.4)
    assert {s.passage for s in deciding_sentences([*definition, *rule], 5, lone)} == {0}
    assert {s.passage for s in deciding_sentences([*definition, *rule], 5, BY_SENTENCES)} == {1}
    closer_rule = [_sentence(1, 0, 0.50), _sentence(1, 1, 0.40)]  # 0.90: two close ones win
    assert {s.passage for s in deciding_sentences([*definition, *closer_rule], 5, lone)} == {1}


def _scored(passage: int, dense: float, lexical: float | None, *scores: float) -> list[Sentence]:
    hit = replace(HITS[passage], dense_score=dense, lexical_score=lexical)
    return [Sentence(hit, passage, i, f"sentence {i}", score) for i, score in enumerate(scores)]


def test_by_default_the_passage_as_a_whole_and_its_keywords_count_too() -> None:
    # passage 1's sentences are 0.03 closer, but passage 0 is closer as a whole (retrieval's
    # dense score), matches more of the question's words and ranks first.
    first = _scored(0, 0.60, 8.0, 0.50, 0.45)
    second = _scored(1, 0.45, 4.0, 0.52, 0.46)
    assert {s.passage for s in deciding_sentences([*second, *first], 5, BY_SENTENCES)} == {1}
    assert {s.passage for s in deciding_sentences([*second, *first], 5)} == {0}
    # Without keyword scores (a question in another language than the rulebook's) the
    # passage's similarity and place still count, and nothing is divided by zero.
    first, second = _scored(0, 0.60, None, 0.50, 0.45), _scored(1, 0.45, None, 0.52, 0.46)
    assert {s.passage for s in deciding_sentences([*second, *first], 5)} == {0}


# Passage 0 answers best as a whole (retrieval's first, closer and more of the question's
# words); passage 1's two closest sentences add up to more.
WHOLE = _scored(0, 0.60, 8.0, 0.55, 0.40, 0.35, 0.30, 0.20)
SENTENCES = _scored(1, 0.40, 3.0, 0.54, 0.50, 0.25, 0.22, 0.10)
BOTH_RANKED = sorted([*WHOLE, *SENTENCES], key=lambda s: s.score, reverse=True)
_AS_WRITTEN = [s.score for s in BOTH_RANKED]  # read under their sections' names, no closer


@pytest.mark.parametrize(
    ("question", "lang"),
    [("when can't I do a stealth test?", "en"), ("什么时候不能进行潜行判定？", "zh")],
)
def test_a_when_not_question_quotes_both_passages_when_the_two_choices_differ(
    question: str, lang: Lang
) -> None:
    quoted = quoted_sentences(Shape.of(question, lang), BOTH_RANKED, 7, titled=_AS_WRITTEN)
    # the closest half, rounded up, of the sentences' choice; the rest of the other; best first
    assert [(s.passage, s.score) for s in quoted] == [
        (0, 0.55), (1, 0.54), (1, 0.50), (0, 0.40), (0, 0.35), (1, 0.25), (1, 0.22)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("question", "lang"),
    [
        ("when can I do a stealth test?", "en"),
        ("can I skip the stealth test?", "en"),
        ("什么时候进行潜行判定？", "zh"),
    ],
)
def test_other_questions_quote_the_passage_that_answers_best_as_a_whole(
    question: str, lang: Lang
) -> None:
    quoted = quoted_sentences(Shape.of(question, lang), BOTH_RANKED, 7, titled=_AS_WRITTEN)
    assert {s.passage for s in quoted} == {0}


def test_a_when_not_question_quotes_one_passage_when_both_choices_agree() -> None:
    agreed = sorted([*WHOLE, *SENTENCES[1:]], key=lambda s: s.score, reverse=True)
    when_not = Shape.of("when can't I do a stealth test?", "en")
    assert quoted_sentences(when_not, agreed, 7, titled=[s.score for s in agreed]) == WHOLE
    assert quoted_sentences(when_not, [], 7, titled=[]) == []


def test_a_when_not_question_finds_its_other_passage_by_its_sentences_as_written() -> None:
    """A heading naming the thing pulls toward its own section; the rule may be stated where
    the situation arises, so that second choice is not read under section names."""
    when_not = Shape.of("when can't I do a stealth test?", "en")
    titled = [s.score + (0.4 if s.passage == 0 else 0.0) for s in BOTH_RANKED]
    quoted = quoted_sentences(when_not, BOTH_RANKED, 7, titled=titled)
    assert {s.passage for s in quoted} == {0, 1}


def test_the_passage_is_chosen_by_closeness_read_under_section_names_too() -> None:
    shape = Shape.of("when can I do a stealth test?", "en")
    # read under its section's name, passage 1 says far more plainly what it is about
    titled = [s.score + (0.4 if s.passage == 1 else 0.0) for s in BOTH_RANKED]
    quoted = quoted_sentences(shape, BOTH_RANKED, 7, titled=titled)
    assert {s.passage for s in quoted} == {1}
    assert all(s in SENTENCES for s in quoted)  # the sentences as ranked, scores as written
    as_written = quoted_sentences(shape, BOTH_RANKED, 7, titled=titled, titled_share=0.0)
    assert {s.passage for s in as_written} == {0}


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


class TitledEmbedder(FakeEmbedder):
    """Reads a passage's title as words of it, as EmbeddingGemma's title slot does."""

    def embed_titled(self, texts: Sequence[str], titles: Sequence[str]) -> np.ndarray:
        return self.embed_passages([f"{t} {x}" for x, t in zip(texts, titles, strict=True)])


def titled_hits() -> list[Hit]:
    alike = "Roll two dice and discard a card."
    hits = make_hits(alike, alike)
    return [
        replace(hit, chunk=replace(hit.chunk, section=("Game", name)))
        for hit, name in zip(hits, ["Setup", "Stealth"], strict=True)
    ]


def test_a_sentence_read_under_its_sections_name_tells_rules_alike_apart() -> None:
    hits = titled_hits()
    embedder = TitledEmbedder()
    stored, _ = SentenceVectors.embed([hit.chunk for hit in hits], embedder)
    chooser = CandidateSelector(embedder, lambda: stored)
    ranked = chooser.rank("stealth roll dice", hits)
    assert ranked[0].score == ranked[1].score  # the same words: plain closeness ties
    ordered = chooser.by_titled_closeness("stealth roll dice", ranked)
    assert [s.hit.chunk.section[-1] for s in ordered] == ["Stealth", "Setup"]
    assert chooser.by_titled_closeness("setup roll dice", ranked)[0].hit.chunk.section[-1] == (
        "Setup"
    )


def test_a_model_without_a_title_slot_embeds_the_text_alone() -> None:
    embedder = FakeEmbedder()
    texts, titles = ["Roll two dice."], ["Stealth"]
    assert (embedder.embed_titled(texts, titles) == embedder.embed_passages(texts)).all()


def test_embeddinggemmas_title_slot_gets_the_sections_name() -> None:
    seen: list[str] = []

    class Model:
        def __init__(self) -> None:
            self.prompts = {"document": "title: none | text: ", "query": "task: search | query: "}

        def encode(self, texts: list[str], **options: object) -> np.ndarray:
            assert options["prompt"] == ""  # the title is in the text: no prompt added
            seen.extend(texts)
            return np.ones((len(texts), 4), dtype=np.float32)

    embedder = SentenceTransformerEmbedder("gemma", "/nowhere")
    embedder._model = Model()
    embedder.embed_titled(["Roll two dice.", "Draw."], ["Stealth", ""])
    assert seen == ["title: Stealth | text: Roll two dice.", "title: none | text: Draw."]


def test_the_deciding_sentence_is_the_quoted_one_closest_read_under_its_section(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = Pipeline(settings, embedder=FakeEmbedder(), generator=ScriptedGenerator())
    plain = pipeline.ask("What is the hand limit?", "Maximum Apocalypse")
    assert len(plain.quotes) > 1 and plain.quotes[0].deciding

    other = plain.quotes[-1].text  # a quoted sentence not shown first

    def last_closest(question: str, sentences: Sequence[Sentence]) -> list[float]:
        """As written, but that sentence reads closest of all under its section's name."""
        scores = [s.score for s in sentences]
        return [max(scores) + 0.01 if s.text == other else s.score for s in sentences]

    candidates = pipeline.answerer.candidates
    monkeypatch.setattr(candidates, "titled_scores", last_closest)
    answer = pipeline.ask("What is the hand limit?", "Maximum Apocalypse")
    deciding = next(q for q in answer.quotes if q.deciding)
    assert answer.quotes[0] is deciding
    assert deciding.text == other != plain.quotes[0].text
    assert {q.text for q in answer.quotes} == {q.text for q in plain.quotes}  # another first
