"""A rulebook's glossary: its terms drawn up when it is added, each rendered once and kept
with the book; renderings keep each term as the glossary renders it, with the book's own word
in brackets the first time; an English asker always gets an English line beside the rule."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FakeEmbedder, ScriptedGenerator

from rag.answering.assembly import rule_text
from rag.answering.glossing import Glosser, word_by_word
from rag.answering.rendering import Renderer, rendering_prompt
from rag.generation import Generator
from rag.pipeline import Pipeline
from rag.prompting import Prompt, phrases
from rag.reading.glossary import (
    GLOSSARY_FILE,
    Glossary,
    Term,
    draw_up,
    read_glossary,
    term_span,
)
from rag.settings import Settings
from rag.types import Chunk, Quote

KILL = "已经确定势力的角色杀死相同势力的角色须弃置所有手牌和装备区的牌。"
HEALTH = "武将牌决定你的体力上限。"


def chunk(*section: str, text: str) -> Chunk:
    return Chunk(
        id="|".join(section), game="g", section=section, text=text, lang="zh", start=0, end=1
    )


def test_a_chinese_books_terms_are_its_headings_quotes_and_the_nouns_it_repeats() -> None:
    book = [
        chunk("三国杀", "武将牌（General card）", text=f"每名玩家抽取一张武将牌。{HEALTH}"),
        chunk("三国杀", "势力", text=KILL),
        chunk("三国杀", "出牌阶段的规则", text="「桃园结义」可以使用。「桃园结义」只能使用一次。"),
        chunk("三国杀", "致谢", text="感谢各位玩家。"),  # a heading no sentence uses
        chunk("三国杀", "弃牌", text="弃置手牌。" * 10 + "弃置装备区。" * 9),
    ]
    glossary = draw_up(book, "zh")
    terms = {t.original: t for t in glossary.terms}
    # the heading's bracket is its English: the book renders the term itself
    assert terms["武将牌"] == Term("武将牌", "General card", "book", "每名玩家抽取一张武将牌。")
    assert terms["势力"].rendering is None and terms["势力"].seen_in == KILL
    assert "桃园结义" in terms  # quoted twice
    assert "手牌" in terms and "装备区" not in terms  # ten times alone, and nine
    # a heading that says how ("…的规则"), and one no sentence uses, name no term
    assert "出牌阶段的规则" not in terms and "致谢" not in terms
    assert glossary.into == "en" and glossary.unasked() == [
        t for t in glossary.terms if t.original != "武将牌"
    ]


def test_a_term_used_inside_a_longer_one_is_not_used_and_english_matches_any_form() -> None:
    chinese = Glossary("zh", (Term("武将"), Term("武将牌"), Term("体力")))
    assert [t.original for t in chinese.used_in([HEALTH])] == ["武将牌", "体力"]
    english = Glossary("en", (Term("Stealth test"), Term("Test")))
    assert [t.original for t in english.used_in(["Two STEALTH TESTS."])] == ["Stealth test"]


SANGUOSHA = f"""# 三国杀

## 武将牌（General card）

每名玩家抽取一张武将牌。{HEALTH}

## 势力

{KILL}

## 手牌

手牌上限等于体力值。

## 装备区

装备区可以放置装备牌。
"""
# The model's renderings of the glossary's terms: none fit to keep for any other (装备区).
TERMS = {"势力": "faction", "体力上限": "maximum health", "手牌": "hand cards"}


class RenderingGenerator(Generator):
    """Renders the glossary's terms as TERMS does, and every sentence as `sentences` says
    (by default, as the Chinese sentence itself: no English rendering passes the checks)."""

    name = "rendering-fake"

    def __init__(self, sentences: dict[str, str] | None = None) -> None:
        self.sentences = sentences or {}
        self.prompts: list[Prompt] = []

    def stream(self, prompt: Prompt) -> Iterator[str]:
        self.prompts.append(prompt)
        task = prompt.messages[1]["content"] if prompt.task == "render" else ""
        if "game term" in task:
            yield json.dumps({"translation": TERMS.get(prompt.question, "")})
        elif prompt.task == "render":
            said = self.sentences.get(prompt.question, prompt.question)
            yield json.dumps({"translation": said}, ensure_ascii=False)
        else:
            yield '{"conclusion": "See the rule."}'


def added(settings: Settings, tmp_path: Path, generator: Generator) -> Pipeline:
    book = tmp_path / "sanguosha.md"
    book.write_text(SANGUOSHA, encoding="utf-8")
    retrieval = settings.retrieval.model_copy(update={"min_dense_score": 0})
    glosses = settings.generation.model_copy(update={"min_gloss_score": 0.6})
    pipeline = Pipeline(
        settings.model_copy(update={"retrieval": retrieval, "generation": glosses}),
        embedder=FakeEmbedder(),
        generator=generator,
    )
    pipeline.add_book(book, "Sanguosha", ["三国杀"])
    return pipeline


def test_the_glossary_is_kept_with_the_book_and_each_term_rendered_once(
    settings: Settings, tmp_path: Path
) -> None:
    generator = RenderingGenerator()
    pipeline = added(settings, tmp_path, generator)
    folder = settings.user_books_dir / "sanguosha"
    kept = read_glossary(folder)
    assert kept is not None and (folder / GLOSSARY_FILE).is_file()
    assert all(t.by != "model" for t in kept.terms)  # drawn up when added, no model asked
    glossary = pipeline.render_glossary("三国杀")
    asked = {p.question for p in generator.prompts}
    assert "武将牌" not in asked  # the book renders it
    rendered = {t.original: t.rendering for t in glossary.terms if t.by == "model"}
    assert rendered == {t: TERMS.get(t) for t in asked}
    assert "势力" in rendered
    # a reply that reads as no English name is not kept, and not asked for again
    unfit = [t for t in glossary.terms if t.rendering is None]
    assert unfit and all(t.original not in TERMS and t.by == "model" for t in unfit)
    assert glossary.unasked() == []
    assert read_glossary(folder) == glossary  # kept with the book
    before = len(generator.prompts)
    again = Pipeline(pipeline.settings, embedder=FakeEmbedder(), generator=generator)
    assert again.render_glossary("sanguosha") == glossary
    assert len(generator.prompts) == before  # fixed: made once


GENERALS = Glossary(
    "zh",
    (
        Term("武将牌", "general card", "book"),
        Term("体力上限", "maximum health", "model"),
        Term("势力", "faction", "model"),
    ),
)


def quote(text: str, n: int = 1) -> Quote:
    return Quote(n, f"g:{n}", "g", "三国杀 › 武将牌", None, text)


def test_a_rendering_that_changes_a_term_is_asked_again_with_the_terms_spelt_out() -> None:
    generator = ScriptedGenerator(
        conclusions=[
            "Martial arts cards decide your maximum health.",  # 武将牌 rendered otherwise
            "General cards decide your maximum health.",
        ]
    )
    quotes, check = Renderer(generator).render_quotes([quote(HEALTH)], "en", GENERALS)
    assert quotes[0].rendering == "General cards decide your maximum health."
    assert check.passed and "asked again word for word: quote(s) 1" in check.detail
    first, again = (p.messages for p in generator.prompts)
    terms = "体力上限 = maximum health; 武将牌 = general card"
    assert first[-1]["content"] == f"Terms: {terms}\n{HEALTH}"
    assert "word for word" in again[1]["content"] and "word for word" not in first[1]["content"]


def test_a_rendering_that_loses_a_term_or_mixes_in_chinese_is_never_shown() -> None:
    mixed = "The maximum体力 limit is decided by the general card."
    generator = ScriptedGenerator(conclusions=["Martial arts cards decide your health.", mixed])
    quotes, check = Renderer(generator).render_quotes([quote(HEALTH)], "en", GENERALS)
    assert quotes[0].rendering is None and quotes[0].rendering_withheld
    assert not check.passed and check.detail.startswith("Chinese left in the English")
    # the line beside it says the sentence's terms as the glossary renders them, in order
    assert quotes[0].word_by_word == "general card … maximum health"
    shown = rule_text([quote(HEALTH), quotes[0]], "en")
    label = phrases("en")["word_by_word"]
    assert f"Machine translation: {phrases('en')['rendering_withheld']}" in shown
    assert f"{label}: general card … maximum health" in shown
    first_try = Renderer(ScriptedGenerator(conclusions=["Martial arts cards decide health."] * 2))
    _, lost = first_try.render_quotes([quote(HEALTH)], "en", GENERALS)
    assert lost.detail.startswith("a term not as the glossary renders it (")
    assert "武将牌 = general card" in lost.detail


@pytest.mark.parametrize(
    ("rendering", "said"),
    [
        ("if you have 7 or more cards in your hand", "cards in your hand"),  # another order
        ("Hand-cards are kept.", "Hand-cards"),
        ("they are summoned normally", None),  # not this term
        ("discard all cards to the graveyard", None),  # the hand lost
    ],
)
def test_a_term_may_be_said_in_another_order_or_form_but_not_lost(
    rendering: str, said: str | None
) -> None:
    span = term_span(rendering, "Hand Card", "en")
    assert (rendering[slice(*span)] if span else None) == said
    assert term_span("先攻玩家不能抽卡。", "玩家", "zh") == (2, 4)


def test_word_by_word_keeps_numbers_and_rule_words_and_needs_a_term() -> None:
    said = word_by_word("先攻第1回合玩家不能抽卡，除非势力相同。", GENERALS)
    assert said == "… 1 … cannot … unless faction …"
    # no term: it would say nothing of the rule
    assert word_by_word("先攻第1回合玩家不能抽卡。", GENERALS) is None


def test_each_term_gets_the_books_word_in_brackets_the_first_time() -> None:
    glosser = Glosser(FakeEmbedder(), min_score=0.6)
    texts, check = glosser.gloss(
        ["General cards decide your maximum health.", "Draw a general card and a faction."],
        [[HEALTH], ["每名玩家抽取一张武将牌和势力。"]],
        GENERALS,
    )
    assert texts == [
        "General cards (武将牌) decide your maximum health (体力上限).",
        "Draw a general card and a faction (势力).",
    ]
    assert "General cards = 武将牌 (glossary)" in check.detail
    # an English book's term rendered into Chinese: the same, the other way round
    english = Glossary("en", (Term("Stealth test", "潜行判定", "model"),))
    rule = "You may attempt a stealth test."
    glossed, _ = glosser.gloss(["你可以进行潜行判定。"], [[rule]], english)
    assert glossed == ["你可以进行潜行判定（Stealth test）。"]
    already, _ = glosser.gloss(["你可以进行潜行判定（stealth test）。"], [[rule]], english)
    assert already == ["你可以进行潜行判定（stealth test）。"]


def test_an_english_asker_always_gets_an_english_line_beside_the_deciding_rule(
    settings: Settings, tmp_path: Path
) -> None:
    generator = RenderingGenerator()  # no sentence rendering passes the checks
    pipeline = added(settings, tmp_path, generator)
    pipeline.render_glossary("sanguosha")
    answer = pipeline.ask("What happens when a 势力 kills its own?", "三国杀")
    deciding = next(q for q in answer.quotes if q.deciding)
    assert answer.lang == "en" and deciding.text == KILL
    assert deciding.rendering is None and deciding.rendering_withheld
    assert deciding.word_by_word == "… faction … faction … must … all hand cards and …"
    label = phrases("en")["word_by_word"]
    assert f"{label}: … faction … faction … must … all hand cards and …" in answer.answer
    # asked once, then once more word for word; never shown
    asked = [p for p in generator.prompts if p.question == KILL]
    assert len(asked) == 2
    # the section's Chinese name is quoted, the rulebook's words: the answer reads as English
    assert "[1] “势力”" in answer.answer


def test_a_rendering_kept_from_before_is_checked_again_against_the_glossary(
    settings: Settings, tmp_path: Path
) -> None:
    right = (
        "A character whose faction is known who kills a character of the same faction must "
        "discard all hand cards and the cards in the equipment area."
    )
    generator = RenderingGenerator({KILL: right})
    pipeline = added(settings, tmp_path, generator)
    pipeline.render_glossary("sanguosha")
    answer = pipeline.ask("What happens when a 势力 kills its own?", "三国杀")
    deciding = next(q for q in answer.quotes if q.deciding)
    # the first time each term is read it has the book's word beside it
    assert deciding.rendering == right.replace("faction", "faction (势力)", 1).replace(
        "hand cards", "hand cards (手牌)"
    )
    assert deciding.word_by_word is None


@pytest.mark.parametrize(
    ("reply", "kept"),
    [
        ("General card", "General card"),
        ('"general card".', "general card"),
        ("武将牌", None),  # not English
        ("Martial general hero card", None),  # longer than the term: words of its context
        ("5 cards", None),  # a number the term does not hold
    ],
)
def test_a_term_rendering_that_reads_as_no_english_name_is_not_kept(
    reply: str, kept: str | None
) -> None:
    generator = ScriptedGenerator(conclusions=[json.dumps({"translation": reply})])
    assert Renderer(generator).render_term(Term("武将牌", seen_in=HEALTH), "en") == kept


def test_the_terms_a_question_in_the_other_language_names_are_found_by_their_rendering() -> None:
    named = GENERALS.named_in("Does my general card's faction set my Maximum Health?")
    assert [t.original for t in named] == ["体力上限", "武将牌", "势力"]
    assert GENERALS.named_in("Can I discard my hand?") == []
    # a rendering inside a longer one named is not named again
    nested = Glossary("zh", (Term("手卡", "Hand Card"), Term("卡", "Card")))
    assert [t.original for t in nested.named_in("How many hand cards?")] == ["手卡"]


def test_a_question_naming_a_term_in_the_other_language_is_searched_with_the_books_word(
    settings: Settings, tmp_path: Path
) -> None:
    generator = RenderingGenerator()
    pipeline = added(settings, tmp_path, generator)
    question = "What happens when a faction kills its own?"
    info = pipeline.resolve_game("三国杀", question)
    assert pipeline.book_terms(question, info) == ()  # no term rendered yet
    pipeline.render_glossary("三国杀")
    assert pipeline.book_terms(question, info) == ("势力",)
    assert pipeline.book_terms("势力是什么？", info) == ()  # asked in the book's language
    # the word-hashing embedder shares no word between the English question and the book:
    # only the book's own word finds the rule
    _, hits = pipeline.retrieve(question, "三国杀", 1)
    assert KILL in hits[0].chunk.text
    answer = pipeline.ask(question, "三国杀")
    assert next(q for q in answer.quotes if q.deciding).text == KILL


MAHJONG = Glossary(
    "zh",
    (
        Term("幺九刻", "Pung of Terminals or Honors", "book"),
        Term("不求人", "Fully Concealed Hand", "book"),
    ),
)


def test_a_terms_name_is_no_number_or_negation_of_the_rule() -> None:
    rule = "不计不求人、幺九刻。"
    terms = MAHJONG.used_in([rule])
    right = "Do not count Fully Concealed Hand or Pung of Terminals or Honors."
    renderer = Renderer(ScriptedGenerator(conclusions=[json.dumps({"translation": right})]))
    # 幺九 is no 1 or 9 to keep, 不求人 no "not" to say
    assert renderer.checked(rule, "en", terms).text == right
    # the rule's own "not" still counts
    wrong = json.dumps(
        {"translation": "Count Fully Concealed Hand and Pung of Terminals or Honors."}
    )
    renderer = Renderer(ScriptedGenerator(conclusions=[wrong, wrong]))
    assert renderer.checked(rule, "en", terms).why_not == "not faithful"
    # a term the glossary has no rendering for is read as the rule's words
    unrendered = [Term("不求人"), Term("幺九刻", "Pung of Terminals or Honors", "book")]
    said = json.dumps({"translation": right})
    renderer = Renderer(ScriptedGenerator(conclusions=[said, said]))
    assert renderer.checked(rule, "en", unrendered).why_not == "not faithful"


def test_asked_again_the_sentence_comes_with_its_terms_already_rendered() -> None:
    terms = GENERALS.used_in([KILL])
    first = rendering_prompt(KILL, "en", terms).messages[-1]["content"]
    again = rendering_prompt(KILL, "en", terms, strict=True).messages[-1]["content"]
    assert KILL in first
    assert "已经确定 faction 的角色杀死相同 faction 的角色" in again
    assert "势力 = faction" in again  # still listed


def test_the_rendering_time_stated_at_add_leaves_out_the_first_rendering(
    settings: Settings, tmp_path: Path
) -> None:
    class FirstSlow(RenderingGenerator):
        """Reads the prompt every rendering shares on its first call only, as llama.cpp."""

        def stream(self, prompt: Prompt) -> Iterator[str]:
            if prompt.task == "render" and not any(p.task == "render" for p in self.prompts):
                time.sleep(0.5)
            yield from super().stream(prompt)

    generator = FirstSlow()
    pipeline = added(settings, tmp_path, generator)
    pipeline.render_glossary("sanguosha")
    before = len(generator.prompts)
    sentences, each = pipeline.time_rendering("en", "sanguosha", 2)
    rendered = {p.question for p in generator.prompts[before:]}
    assert len(rendered) == 3  # one untimed, then the two timed
    assert sentences >= 3 and each is not None and each < 0.25
