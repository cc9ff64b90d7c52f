"""A book that defines a short form (灵摆区域（P区域）) and writes it throughout is searched in
its own spelling: a player's long form (灵摆怪兽) finds the rule written short (P怪兽)."""

from __future__ import annotations

from pathlib import Path

from conftest import FakeEmbedder, ScriptedGenerator

from rag.answering.question import Question
from rag.pipeline import Pipeline
from rag.reading.abbreviations import Abbreviation, BookSpelling, defined_abbreviations
from rag.settings import Settings

DEFINITIONS = """
额外卡组区域（EX卡组区域）
- 放在额外怪兽区域（EX怪兽区域）的怪兽。
灵摆区域（P区域）
- 反转时（的场合）发动。「黑魔导阵」（永续魔法）。刻子（杠）。国际麻将联盟（MIL）
"""


def test_a_short_form_defined_beside_its_long_one_ending_on_the_same_words() -> None:
    assert defined_abbreviations(DEFINITIONS) == [
        Abbreviation("额外", "EX"),
        Abbreviation("灵摆", "P"),
    ]


def test_nothing_is_an_abbreviation_that_shares_no_ending_or_has_no_latin_short_form() -> None:
    unpaired = "反转时（的场合）。刻子（杠）。国际麻将联盟（MIL）。Deck (D)"
    assert defined_abbreviations(unpaired) == []


BOOK = BookSpelling.of(
    [
        "灵摆区域（P区域）",
        "P怪兽可以P召唤。P怪兽送去墓地的场合加入EX卡组。「灵摆切换」可以发动。「灵摆切换」是魔法卡。",
        "额外卡组区域（EX卡组区域）。连接怪兽（LINK怪兽）。连接怪兽的连接标记。",
    ]
)


def test_a_question_is_respelt_as_the_book_writes_each_form_before_the_same_words() -> None:
    assert BOOK.respell("灵摆怪兽灵摆召唤出来去哪？") == "P怪兽P召唤出来去哪？"
    # a card's name the book writes long stays long
    assert BOOK.respell("灵摆切换能发动吗？") == "灵摆切换能发动吗？"
    # the long form, where the book writes it more: LINK怪兽 once, 连接怪兽 twice
    assert BOOK.respell("LINK怪兽有几个箭头？") == "连接怪兽有几个箭头？"
    # a short form inside a longer Latin word is not the short form
    assert BOOK.respell("PP怪兽是什么？") == "PP怪兽是什么？"
    assert BookSpelling.of(["没有缩写的书。"]).respell("灵摆怪兽？") == "灵摆怪兽？"


GAME = """# 卡牌游戏

## 灵摆区域（P区域）

P区域放置P怪兽。

## P怪兽

P怪兽离场时加入EX卡组。

## 灵摆切换

「灵摆切换」可以让怪兽去任何区域。
"""


def pipeline_with(book_text: str, settings: Settings, tmp_path: Path) -> Pipeline:
    book = tmp_path / "game.md"
    book.write_text(book_text, encoding="utf-8")
    retrieval = settings.retrieval.model_copy(update={"min_dense_score": 0})
    pipeline = Pipeline(
        settings.model_copy(update={"retrieval": retrieval}),
        embedder=FakeEmbedder(),
        generator=ScriptedGenerator(),
    )
    pipeline.add_book(book, "Card Game", ["卡牌游戏"])
    return pipeline


def test_a_question_in_the_long_form_finds_the_rule_the_book_writes_short(
    settings: Settings, tmp_path: Path
) -> None:
    question = "灵摆怪兽离场去哪里？"
    pipeline = pipeline_with(GAME, settings, tmp_path)
    info = pipeline.resolve_game("卡牌游戏", question)
    assert pipeline.book_spelling(question, info) == "P怪兽离场去哪里？"
    _, hits = pipeline.retrieve(question, "卡牌游戏", 1)
    assert hits[0].chunk.section[-1] == "P怪兽"
    answer = pipeline.ask(question, "卡牌游戏")
    assert next(q for q in answer.quotes if q.deciding).text.startswith("P怪兽离场时")
    # an English question is not respelt: the book's terms in English are the glossary's
    assert pipeline.book_spelling("Where does it go?", info) == "Where does it go?"


def test_without_the_definition_the_long_form_finds_another_rule(
    settings: Settings, tmp_path: Path
) -> None:
    undefined = GAME.replace("灵摆区域（P区域）", "P区域")
    _, hits = pipeline_with(undefined, settings, tmp_path).retrieve(
        "灵摆怪兽离场去哪里？", "卡牌游戏", 1
    )
    assert hits[0].chunk.section[-1] != "P怪兽"


def test_candidates_are_ranked_by_the_question_in_the_books_spelling(
    settings: Settings, tmp_path: Path
) -> None:
    info = pipeline_with(GAME, settings, tmp_path).resolve_game("卡牌游戏", "")
    asked = Question("灵摆怪兽呢？", "zh", info, earlier="P区域是什么？", book_spelling="P怪兽呢？")
    assert asked.searched == "P区域是什么？ P怪兽呢？"
    assert asked.in_context == "P区域是什么？ 灵摆怪兽呢？"  # what the player said
