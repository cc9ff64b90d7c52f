"""Questions as a careless hand or a hostile page types them: invisible control and
bidirectional characters, and languages Rulekeeper does not answer in."""

from __future__ import annotations

import pytest

from rag.errors import InputError
from rag.lang import detect_lang, unsupported_language
from rag.pipeline import Pipeline
from rag.prompting import phrases
from rag.settings import MAX_QUESTION_CHARS

QUESTION = "When can't I do a stealth test?"


@pytest.mark.parametrize(
    ("typed", "kept"),
    [
        ("\x1b[31mWhen can't I do a stealth test?\x1b[0m", QUESTION),  # terminal colours
        ("When can't I do a\x00 stealth test?\x07", QUESTION),
        ("\u202eWhen can't I do a stealth test?\u202c", QUESTION),  # right-to-left override
        ("\u2066When can't\u200f I do a stealth test?\u2069\x85", QUESTION),  # isolate, C1
        ("When can't I do\ta stealth\x1b\r\ntest?", "When can't I do\ta stealth\ntest?"),
    ],
)
def test_control_and_bidi_characters_are_stripped(
    pipeline: Pipeline, typed: str, kept: str
) -> None:
    answer = pipeline.ask(typed, game="maximum-apocalypse")
    assert answer.question == kept
    assert "\x1b" not in answer.answer and "\u202e" not in answer.answer


def test_a_question_of_control_characters_alone_is_empty(pipeline: Pipeline) -> None:
    with pytest.raises(InputError, match="The question is empty"):
        pipeline.ask("\x00\x1b[2J\u202e\u2066 \x07\u200e", game="suros")


def test_a_question_longer_than_any_front_end_takes_is_refused(pipeline: Pipeline) -> None:
    pipeline.ask("x" * MAX_QUESTION_CHARS, game="suros")  # the longest still answered
    with pytest.raises(InputError, match=f"longer than {MAX_QUESTION_CHARS} characters"):
        pipeline.ask("x" * (MAX_QUESTION_CHARS + 1), game="suros")


@pytest.mark.parametrize(
    "question",
    [
        "スタンしたモンスターは攻撃できますか？",  # Japanese, kanji among the kana
        "스텔스 테스트는 언제 못 하나요?",  # Korean
    ],
)
def test_japanese_or_korean_is_answered_in_english_and_says_so(
    pipeline: Pipeline, question: str
) -> None:
    assert unsupported_language(question) and detect_lang(question) == "en"
    answer = pipeline.ask(question, game="maximum-apocalypse")
    assert answer.lang == "en"
    line = phrases("en")["unsupported_language"]
    assert answer.answer.startswith(line + "\n")
    assert answer.answer.count(line) == 1
    # English and Chinese get no such line; a Chinese name's middle dot (・, in the kana
    # block) does not make a question Japanese.
    for supported in (QUESTION, "哈利・波特什么时候不能做潜行判定？"):
        assert not unsupported_language(supported)
        shown = pipeline.ask(supported, game="maximum-apocalypse").answer
        assert line not in shown and phrases("zh")["unsupported_language"] not in shown
