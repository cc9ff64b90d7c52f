"""The deciding sentence: its signals, its model, and how answers show it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder, ScriptedGenerator, make_hits

from eval.metrics import holds_evidence
from rag.answering.answerer import Answerer
from rag.answering.assembly import quoted_answer, rule_text
from rag.answering.candidates import CandidateSelector, Sentence
from rag.answering.checks import CONCLUSION_CHECKS, Draft
from rag.answering.deciding import FEATURES, DecidingModel, judge, sentence_features
from rag.answering.question import Question
from rag.answering.quotes import make_quotes, quoted_sentences
from rag.prompting import phrases
from rag.searching.sentences import SentenceVectors
from rag.settings import GenerationSettings
from rag.types import Check, GameInfo, Hit, Lang

GAME = GameInfo("g", "Game", (), "en", "", Path("book"))


def model_weighing(**weights: float) -> DecidingModel:
    """A model that weighs the named features alone (unstandardised)."""
    return DecidingModel(
        weights=tuple(weights.get(name, 0.0) for name in FEATURES),
        bias=0.0,
        mean=(0.0,) * len(FEATURES),
        scale=(1.0,) * len(FEATURES),
    )


def ranked_for(question: str, hits: list[Hit]) -> list[Sentence]:
    embedder = FakeEmbedder()
    sentences, _ = SentenceVectors.embed([hit.chunk for hit in hits], embedder)
    return CandidateSelector(embedder, lambda: sentences).rank(question, hits)


HITS = make_hits(
    "Draw. Draw two cards at the start of your turn. Your hand limit is ten cards.",
    "Discard. At the end of your turn discard down to your hand limit.",
)


def test_each_sentence_gets_one_row_of_every_signal() -> None:
    ranked = ranked_for("what is the hand limit for cards", HITS)
    features = sentence_features(ranked)
    assert features.shape == (len(ranked), len(FEATURES))
    closeness = features[:, FEATURES.index("closeness")]
    assert list(closeness) == [s.score for s in ranked]
    assert sentence_features([]).shape == (0, len(FEATURES))


def test_the_model_orders_the_sentences_by_its_chances() -> None:
    ranked = ranked_for("what is the hand limit for cards", HITS)
    by_closeness = judge(ranked, model_weighing(closeness=5.0))
    assert [j.sentence for j in by_closeness] == ranked
    # a model weighing the signal the other way puts the furthest sentence first
    reversed_ = judge(ranked, model_weighing(closeness=-5.0))
    assert [j.sentence for j in reversed_] == ranked[::-1]
    confidences = [j.confidence for j in by_closeness]
    assert confidences == sorted(confidences, reverse=True)
    assert all(0.0 < c < 1.0 for c in confidences)


def test_the_model_round_trips_through_its_data_file() -> None:
    model = DecidingModel(
        weights=tuple(float(i) for i in range(len(FEATURES))),
        bias=-1.5,
        mean=(0.25,) * len(FEATURES),
        scale=(2.0,) * len(FEATURES),
    )
    assert DecidingModel.from_dict(tomllib.loads(model.to_toml())) == model
    data = tomllib.loads(model.to_toml())
    del data["features"]["closeness"]
    with pytest.raises(ValueError, match="closeness"):
        DecidingModel.from_dict(data)


def test_the_shipped_model_is_complete_and_prefers_the_closer_sentence() -> None:
    shipped = DecidingModel.shipped()
    assert len(shipped.weights) == len(FEATURES)
    closer, further = np.array([[0.7]]), np.array([[0.4]])
    assert shipped.chances(closer)[0] > shipped.chances(further)[0]


def test_the_deciding_quote_comes_first_marked_and_its_passage_is_one() -> None:
    ranked = ranked_for("discard down to your hand limit", HITS)
    deciding = next(s for s in ranked if "discard down" in s.text)
    others = [s for s in ranked if s is not deciding]
    quotes, check = make_quotes([*others, deciding], deciding)
    assert check.passed and quotes[0].deciding and quotes[0].text == deciding.text
    assert quotes[0].n == 1 and not any(q.deciding for q in quotes[1:])
    # the others keep passage order, and reading order within their passage
    rest = [(q.n, q.chunk_id) for q in quotes[1:]]
    assert rest == sorted(rest)
    unmarked, _ = make_quotes(others)
    assert not any(q.deciding for q in unmarked)


def test_the_answer_shows_the_deciding_rule_then_the_conclusion_then_the_context() -> None:
    ranked = ranked_for("how many cards do I draw", HITS)
    deciding = next(s for s in ranked if "Draw two cards" in s.text)
    quotes, _ = make_quotes(ranked, deciding)
    for lang in ("en", "zh"):
        words = phrases(lang)
        answer = quoted_answer(
            "q", "g", lang, quotes=quotes, conclusion="Two.", checks=[], hits=HITS,
            backend="test",
        )  # fmt: skip
        text = answer.answer
        assert text.startswith(f"{words['heading_deciding']}: [1]")
        assert text.index("Draw two cards") < text.index("Two.") < text.index("hand limit")
        assert text.index(words["heading_rule_text"]) > text.index("Two.")
    # with no conclusion, the deciding rule is the answer: no line stands above it
    plain = quoted_answer(
        "q", "g", "en", quotes=quotes, conclusion=None, checks=[], hits=HITS,
        backend="test", line="read_the_rule",
    )  # fmt: skip
    assert plain.answer.startswith("Deciding rule: [1]")
    # a rulebook that seems silent says so first, and marks no sentence as deciding
    silent, _ = make_quotes(ranked)
    seeming = quoted_answer(
        "q", "g", "en", quotes=silent, conclusion=None, checks=[], hits=HITS,
        backend="test", line="not_answered",
    )  # fmt: skip
    assert seeming.answer.startswith(phrases("en")["not_answered"])
    assert "Deciding rule" not in seeming.answer and seeming.abstained
    assert rule_text(silent, "en").startswith("Rule text:")


def answerer(generator: ScriptedGenerator, **settings: float) -> Answerer:
    embedder = FakeEmbedder()
    sentences, _ = SentenceVectors.embed([hit.chunk for hit in HITS], embedder)
    return Answerer(
        CandidateSelector(embedder, lambda: sentences),
        generator,
        GenerationSettings(**{"min_sentence_score": 0, "min_score_unconcluded": 0, **settings}),
        deciding=model_weighing(closeness=5.0),
    )


def test_a_conclusion_is_shown_only_when_the_deciding_sentence_is_sure() -> None:
    question = Question("what is the hand limit for cards", "en", GAME)
    sure = ScriptedGenerator(conclusions=['{"conclusion": "{rule}"}'])
    events = list(answerer(sure, conclude_from=0.5).stream(question, HITS))
    first, answer = events[0], events[-1].answer
    assert first.kind == "quotes" and first.quotes[0].deciding  # marked from the first event
    assert "token" in [e.kind for e in events]
    assert answer is not None and answer.conclusion and answer.confidence is not None
    assert answer.confidence >= 0.5 and answer.quotes[0].deciding
    assert answer.conclusion == answer.quotes[0].text  # it restates the deciding sentence

    unsure = ScriptedGenerator(conclusions=['{"conclusion": "{rule}"}'])
    events = list(answerer(unsure).stream(question, HITS))  # by default: never sure
    answer = events[-1].answer
    assert answer is not None and answer.conclusion is None and not answer.abstained
    # Neither to be shown nor, the closest sentence being close, a sign of silence: the
    # model is not asked, and the deciding rule is the answer.
    assert unsure.prompts == []
    assert answer.answer.startswith("Deciding rule: [1]") and "Conclusion" not in answer.answer
    assert ("deciding", False) in [(c.name, c.passed) for c in answer.checks]
    assert answer.to_json()["confidence"] == round(answer.confidence or 0, 4)

    # The closest sentence far: written, for what its failing would say of the rulebook's
    # silence, but neither streamed nor shown.
    far = ScriptedGenerator(conclusions=['{"conclusion": "{rule}"}'])
    events = list(answerer(far, min_score_unconcluded=1.0).stream(question, HITS))
    answer = events[-1].answer
    assert [p.task for p in far.prompts] == ["conclude"]
    assert "token" not in [e.kind for e in events]
    assert answer is not None and answer.conclusion is None and not answer.abstained
    assert answer.answer.startswith("Deciding rule: [1]") and "Conclusion" not in answer.answer


def test_the_deciding_sentence_is_the_closest_quoted_and_the_model_gives_its_confidence() -> None:
    question = Question("what is the hand limit for cards", "en", GAME)
    generator = ScriptedGenerator()
    ranked = ranked_for(question.text, HITS)
    backwards = answerer(generator, conclude_from=1.0)
    # a model that prefers the furthest of the candidates chooses nothing: it only says how
    # likely the closest quoted sentence is to settle the question
    backwards.deciding = model_weighing(closeness=-5.0)
    answer = list(backwards.stream(question, HITS))[-1].answer
    assert answer is not None
    quoted_texts = [q.text for q in answer.quotes]
    closest = next(s for s in ranked if s.text in quoted_texts)
    assert answer.quotes[0].deciding and answer.quotes[0].text == closest.text
    chances = backwards.deciding.chances(sentence_features([closest]))
    assert answer.confidence == pytest.approx(float(chances[0]))


@pytest.mark.parametrize(
    ("sentence", "holds"),
    [
        ("Draw two cards at the start of your turn.", True),  # contains the evidence
        ("Draw two cards", False),  # too short a piece to count
        ("Draw two cards at the start", True),  # within the evidence
        ("At the start of your turn. Then discard one.", True),  # shares half of it
        ("Discard one card.", False),
        ("", False),
    ],
)
def test_a_sentence_holds_evidence_it_contains_lies_in_or_mostly_shares(
    sentence: str, holds: bool
) -> None:
    assert holds_evidence(sentence, ["draw two cards at the start of your turn"]) is holds


@pytest.mark.parametrize(
    ("sentence", "holds"),
    [
        ("如无「发」，可计清一色。", True),  # a whole rule within the evidence
        ("计88番。", False),  # a phrase many rules share
        ("不计混一色。", False),
    ],
)
def test_chinese_counts_by_width_a_character_about_a_word(sentence: str, holds: bool) -> None:
    evidence = [
        "由「23468条」及「发」之中的任何牌组成的和牌，计88番。不计混一色。如无「发」，可计清一色。"
    ]
    assert holds_evidence(sentence, evidence) is holds


def test_the_terminal_sets_the_deciding_rule_apart() -> None:
    from cli.render import _answer_text

    for lang in ("en", "zh"):
        heading = phrases(lang)["heading_deciding"]
        text = f"{heading}: [1] Draw\n    “Draw two cards.”\n\nRule text:\n[1] Draw:\n    “x”"
        styled = _answer_text(text)
        block = [s for s in styled.spans if str(s.style) == "bold yellow"]
        assert [(s.start, s.end) for s in block] == [(0, text.index("\n\n"))]


def test_a_conclusion_rests_on_distinct_sentences_when_the_likeliest_is_not_quoted() -> None:
    """The likeliest sentence of all may lie outside the quoted passage: the deciding one
    (the likeliest quoted) is then not counted again among those that follow it."""
    question = Question("what is the hand limit for cards", "en", GAME)
    hits = make_hits(
        "Hand. Your hand limit is ten cards. Draw two cards at the start of your turn. "
        "Discard down to your hand limit at the end of your turn.",
        "Trading. Trading happens on a tile with another player present.",
    )
    ranked = ranked_for(question.text, hits)
    quoted = quoted_sentences(question.shape, ranked, 12, titled=[s.score for s in ranked])
    # weigh closeness whichever way puts an unquoted sentence first
    direction = 5.0 if ranked[0] not in quoted else -5.0
    model = model_weighing(closeness=direction)
    assert judge(ranked, model)[0].sentence not in quoted  # the case
    generator = ScriptedGenerator()
    concluding = answerer(generator, conclude_from=0.0)
    concluding.deciding = model
    concluding.candidates = CandidateSelector(
        FakeEmbedder(), lambda: SentenceVectors.embed([h.chunk for h in hits], FakeEmbedder())[0]
    )
    list(concluding.stream(question, hits))
    content = generator.prompts[0].messages[-1]["content"]
    rules = re.findall(r"^\d+\. \([^)]*\) (.*)$", content, re.M)
    assert len(quoted) >= 3 and len(rules) == len(set(rules)) == 3  # three, not two


class Refusing:
    """A conclusion check that refuses every conclusion, reading what it is given."""

    def __init__(self) -> None:
        self.judged: list[Draft] = []

    def judge(self, draft: Draft) -> Check:
        self.judged.append(draft)
        return Check("refusing", False, "refuses everything")


def test_a_conclusion_is_shown_only_when_every_check_in_the_list_passes() -> None:
    question = Question("what is the hand limit for cards", "en", GAME)
    shown = answerer(ScriptedGenerator(conclusions=['{"conclusion": "{rule}"}']), conclude_from=0)
    answer = list(shown.stream(question, HITS))[-1].answer
    assert answer is not None and answer.conclusion
    # every check of the list judged it, each under its own name
    names = [c.name for c in answer.checks]
    assert {"numbers", "negation", "answer_word", "quantity", "when_not", "language"} <= set(names)
    assert len(CONCLUSION_CHECKS) == len({type(c) for c in CONCLUSION_CHECKS})

    refusing = Refusing()
    withheld = answerer(
        ScriptedGenerator(conclusions=['{"conclusion": "{rule}"}']), conclude_from=0
    )
    withheld.conclusion_checks = [*CONCLUSION_CHECKS, refusing]
    answer = list(withheld.stream(question, HITS))[-1].answer
    assert answer is not None and answer.conclusion is None
    assert ("refusing", False) in [(c.name, c.passed) for c in answer.checks]
    # the check read the conclusion written, its quotes and the question parsed once
    (draft,) = refusing.judged
    assert draft.text == answer.quotes[0].text and draft.quotes
    assert draft.question is question and draft.question.shape is question.shape


@pytest.mark.parametrize(
    ("text", "lang", "asks"),
    [
        ("Is it immediate?", "en", {"yes_no"}),
        ("怪物生成在玩家格，是立刻激活吗？", "zh", {"yes_no"}),
        ("how many wire cards does everyone get?", "en", {"how_many"}),
        ("when can't I do a stealth test?", "en", {"when_not", "when_not_allowed"}),
        ("When doesn't a Fuel card resolve my Fuel objective?", "en", {"when_not"}),
        ("What do I roll?", "en", set()),
    ],
)
def test_a_question_s_shape_is_told_once_from_its_words(
    text: str, lang: Lang, asks: set[str]
) -> None:
    question = Question(text, lang, GAME)
    shape = question.shape
    assert {f for f, v in vars(shape).items() if v} == asks
    assert question.shape is shape  # computed once, carried through the stages
