"""Glosses: a rendering or conclusion in the other language names the rulebook's own term in
brackets; the glossary's terms are the book's, drawn up from its headings."""

from __future__ import annotations

import numpy as np
from conftest import FakeEmbedder, ScriptedGenerator

from rag.answering.glossing import Glosser, chinese_phrases
from rag.pipeline import Pipeline
from rag.reading.glossary import Glossary, Term, draw_up
from rag.settings import Settings
from rag.types import Check, Chunk

Alikes = dict[str, list[tuple[str, float]]]


class AliasEmbedder(FakeEmbedder):
    """The fake embedder, but a Chinese phrase listed here is embedded as alike as given to
    English terms (cosine similarity): the pairs a real embedder finds alike."""

    name = "alias-hash-embedder"

    def __init__(self, aliases: Alikes) -> None:
        super().__init__(dim=4096)  # words seldom share a bucket: unrelated texts differ
        self.aliases = aliases

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        out = super()._encode(texts, query=query)
        for row, text in enumerate(texts):
            if text in self.aliases:
                own = out[row] / np.linalg.norm(out[row])
                vector = (1 - sum(w * w for _, w in self.aliases[text])) ** 0.5 * own
                for term, weight in self.aliases[text]:
                    alike = super()._encode([term], query=query)[0]
                    vector += weight * alike / np.linalg.norm(alike)
                out[row] = vector
        return out


def chunk(*section: str, text: str = "Some rule.") -> Chunk:
    return Chunk(
        id="|".join(section), game="g", section=section, text=text, lang="en", start=0, end=1
    )


# Each heading's text uses its name, as a book's sentences do: a heading no sentence uses is
# no term of its rules.
NAMES = "Player Actions, Stealth test, Glossary, Attached, Wire Cutter Token, the map, a round"
BOOK = [
    chunk("Game", "3. Player Actions", "Stealth test", text=f"{NAMES}."),
    chunk("Game", "Glossary", "Attached"),
    chunk("Game", "Encountering monster tokens"),
    chunk("Game", "Overview of a round"),
    chunk("Game", "Wire Cutter Token (or card)"),
    chunk("Game", "Mission 3"),
    chunk("Game", "STEALTH TEST"),
    chunk("Game", "THE MAP"),
    chunk("Game", "Credits"),
]
GLOSSARY = draw_up(BOOK, "en")
RULE = "If you have no monster cards attached, you may attempt a stealth test."


def glosser(aliases: Alikes, min_score: float = 0.6) -> Glosser:
    return Glosser(AliasEmbedder(aliases), min_score)


def glossed(glosser: Glosser, text: str, sources: list[str]) -> tuple[str, Check]:
    texts, check = glosser.gloss([text], [sources], GLOSSARY)
    return texts[0], check


def test_a_rulebooks_terms_are_its_headings_that_read_as_names() -> None:
    assert [t.original for t in GLOSSARY.terms] == [
        "Player Actions",
        "Stealth test",  # once, whatever its case
        "Glossary",
        "Attached",
        "Wire Cutter Token",  # what the parenthesis adds is not the name
        "MAP",
    ]  # not the title, a procedure ("Encountering …"), a phrase, a numbered heading, or
    # a heading no sentence uses ("Credits")
    assert all(t.rendering is None and t.seen_in == f"{NAMES}." for t in GLOSSARY.terms)


def test_terms_are_found_in_the_quotes_as_words_in_any_case_or_number() -> None:
    names = ["Test", "Stealth test", "Attached", "Rest", "Monster token"]
    book = Glossary("en", tuple(Term(name) for name in names))

    def used(*sources: str) -> list[str]:
        return sorted(t.original for t in book.used_in(sources))

    # not "Rest" in "Restore", nor "Test" in "stealth test" only
    assert used("Remove all Monster tokens.", "Restore one HP.", RULE) == [
        "Attached",
        "Monster token",
        "Stealth test",
    ]
    assert "Test" in used(RULE, "Test: roll a die.")


def test_phrases_are_chinese_words_alone_or_together() -> None:
    phrases = chinese_phrases("你可以进行潜行判定，然后抽牌。")
    assert "潜行判定" in phrases and "潜行" in phrases and "抽牌" in phrases
    assert not any("，" in p or "。" in p for p in phrases)
    # a particle begins or ends no term
    assert set(chinese_phrases("附着了的怪物")) == {"附着", "怪物"}


def test_the_english_term_follows_its_chinese_phrase_the_first_time() -> None:
    conclusion = "没有附着怪物卡时可以进行潜行判定。潜行判定失败则抽怪物卡。"
    text, check = glossed(glosser({"潜行判定": [("stealth test", 1.0)]}), conclusion, [RULE])
    assert text == "没有附着怪物卡时可以进行潜行判定（Stealth test）。潜行判定失败则抽怪物卡。"
    assert check.passed and "潜行判定 = Stealth test" in check.detail


def test_a_pair_not_alike_enough_or_a_term_the_quotes_do_not_use_is_not_glossed() -> None:
    conclusion = "可以进行潜行判定。"
    weak = glosser({"潜行判定": [("stealth test", 0.5)]})
    assert glossed(weak, conclusion, [RULE])[0] == conclusion
    close = glosser({"潜行判定": [("stealth test", 1.0)]})
    unused, check = glossed(close, conclusion, ["Discard a card."])
    assert unused == conclusion and check.detail == "no term paired"
    off = glosser({"潜行判定": [("stealth test", 1.0)]}, min_score=1)
    assert glossed(off, conclusion, [RULE])[0] == conclusion


def test_several_texts_are_glossed_each_by_its_own_sources() -> None:
    aliases = {"潜行判定": [("stealth test", 1.0)], "附着": [("attached", 1.0)]}
    texts, check = glosser(aliases).gloss(
        ["附着后不能进行潜行判定。", "附着后不能进行潜行判定。"],
        [["Monster cards attached to you."], ["You may attempt a stealth test."]],
        GLOSSARY,
    )
    assert texts == [
        "附着（Attached）后不能进行潜行判定。",
        "附着后不能进行潜行判定（Stealth test）。",
    ]
    assert check.name == "glosses" and check.detail.count(" = ") == 2


def test_the_closest_phrase_is_glossed_not_a_part_of_it() -> None:
    aliases = {"潜行判定": [("stealth test", 0.95)], "潜行": [("stealth test", 0.8)]}
    text, _ = glossed(glosser(aliases), "可以进行潜行判定。", [RULE])
    assert text == "可以进行潜行判定（Stealth test）。"


def test_a_phrase_is_glossed_only_by_the_term_it_is_closest_to() -> None:
    # 怪物卡 is the closest phrase to "Stealth test", but closer still to "Attached",
    # whose own closest phrase is 附着: 怪物卡 is no rendering of either
    aliases = {
        "附着": [("attached", 1.0)],
        "怪物卡": [("attached", 0.75), ("stealth test", 0.65)],
    }
    text, check = glossed(glosser(aliases), "没有附着的怪物卡才能检定。", [RULE])
    assert text == "没有附着（Attached）的怪物卡才能检定。"
    assert check.detail == "附着 = Attached (1.00)"


def test_a_term_already_written_or_bracketed_is_left_as_it_is() -> None:
    aliases = {"潜行判定": [("stealth test", 1.0)], "附着": [("attached", 1.0)]}
    bracketed = "可以进行潜行判定（Stealth test）。"
    assert glossed(glosser(aliases), bracketed, [RULE]) == (
        bracketed,
        Check("glosses", True, "no term paired"),
    )
    aside = "可以尝试潜行判定（见下文）。"  # a bracket, but no gloss
    assert (
        glossed(glosser(aliases), aside, [RULE])[0]
        == "可以尝试潜行判定（Stealth test）（见下文）。"
    )
    own = "没有附着（attached）怪物卡时可以进行潜行判定。"
    assert glossed(glosser(aliases), own, [RULE])[0] == own.replace(
        "潜行判定", "潜行判定（Stealth test）"
    )


def glossing(settings: Settings, generator: ScriptedGenerator, **generation: bool) -> Pipeline:
    """A pipeline that glosses, where 幸存者 is as alike to "survivor" as a real embedder
    finds them (and any passage is close enough to answer from, on this embedder's scale)."""
    update = {"min_gloss_score": 0.6, **generation}
    return Pipeline(
        settings.model_copy(
            update={
                "generation": settings.generation.model_copy(update=update),
                "retrieval": settings.retrieval.model_copy(update={"min_dense_score": 0}),
            }
        ),
        embedder=AliasEmbedder({"幸存者": [("survivor", 1.0)]}),
        generator=generator,
    )


def test_a_term_is_glossed_where_it_is_first_read_and_the_model_reads_no_gloss(
    settings: Settings,
) -> None:
    generator = ScriptedGenerator(
        selections=['{"ids": [1]}'],
        # the rendering of the sentence selected, then the conclusion
        conclusions=["幸存者牌堆：抽一张牌加入手牌", '{"conclusion": "幸存者牌堆：抽一张牌。"}'],
    )
    pipeline = glossing(settings, generator, select=True)
    question = "draw a card from your Survivor deck 幸存者牌堆：抽牌是什么意思？"
    events = list(pipeline.ask_stream(question, "末日启示录"))
    answer = events[-1].answer
    assert answer is not None
    selected = generator.prompts[1].question
    assert selected == "Draw a card from your Survivor deck and add it to your hand."
    assert "(幸存者牌堆：抽一张牌加入手牌)" in generator.prompts[-1].messages[-1]["content"]
    # the deciding sentence's rendering is read first, above the conclusion: glossed there,
    # and not again in the conclusion below it
    deciding = next(q for q in answer.quotes if q.deciding)
    assert deciding.text == selected
    assert deciding.rendering == "幸存者（Survivor）牌堆：抽一张牌加入手牌"
    assert answer.conclusion == "幸存者牌堆：抽一张牌。"
    assert answer.answer.index("幸存者（Survivor）") < answer.answer.index("结论: 幸存者牌堆")
    glosses = [c for c in answer.checks if c.name == "glosses"]
    assert [c.detail for c in glosses] == ["幸存者 = Survivor (1.00)"]


def test_the_renderings_of_a_rule_left_to_read_are_glossed(settings: Settings) -> None:
    # a yes/no question: renderings, no conclusion
    generator = ScriptedGenerator(conclusions=["幸存者牌堆：抽一张牌加入手牌"] * 3)
    question = "draw a card from your Survivor deck 幸存者牌堆可以抽吗？"
    answer = glossing(settings, generator).ask(question, "末日启示录")
    assert answer.conclusion is None
    rendered = [q for q in answer.quotes if q.rendering]
    naming = [q for q in rendered if "Survivor" in q.text]
    assert naming, "the Survivor deck sentence is rendered"
    assert naming[0].rendering == "幸存者（Survivor）牌堆：抽一张牌加入手牌"
    assert all(
        q.rendering == "幸存者牌堆：抽一张牌加入手牌" for q in rendered if q is not naming[0]
    )
    assert "机器译文: 幸存者（Survivor）牌堆" in answer.answer
