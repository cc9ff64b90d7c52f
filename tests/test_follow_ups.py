"""Follow-ups decided from the conversation: a question that refers back is searched and
answered beside the one before it; any other, in either language, is answered fresh."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from rag.follow_ups import follows_up
from rag.pipeline import Pipeline
from rag.types import Lang, Turn

MONSTERS = "怪物生成在玩家格，是立刻激活吗？"
HAND_LIMIT = "手牌上限是多少？"


@pytest.mark.parametrize(
    ("question", "lang"),
    [
        ("And what if it runs out?", "en"),
        ("What about the second round?", "en"),
        ("Does that count?", "en"),
        ("what happens next", "en"),
        ("那如果怪物生成在玩家格上，而且那个玩家已经倒下了，是立刻激活吗？", "zh"),  # any length
        ("它能移动吗？", "zh"),
        ("手牌上限呢？", "zh"),
        ("「那么这张牌呢」", "zh"),
    ],
)
def test_a_question_that_refers_back_follows_up(question: str, lang: Lang) -> None:
    assert follows_up(question, lang)


@pytest.mark.parametrize(
    ("question", "lang"),
    [
        ("How many cards are in the deck?", "en"),
        ("Can I attack twice?", "en"),
        ("Android tablets: can they run the app during the game for scoring?", "en"),
        # Long enough to carry its own context, though it says "it": a new question.
        ("How many cards can I hold in my hand at the end of the round when it is my turn?", "en"),
        (HAND_LIMIT, "zh"),  # no space in it: not "three words or fewer"
        (MONSTERS, "zh"),
        ("这个游戏里每个玩家的手牌上限是多少？", "zh"),  # long: "this game", not "this"
        ("Suros 每个玩家开始时有多少生命值？", "zh"),
    ],
)
def test_any_other_question_is_new(question: str, lang: Lang) -> None:
    assert not follows_up(question, lang)


def test_a_new_chinese_question_is_searched_and_answered_fresh(pipeline: Pipeline) -> None:
    earlier = (Turn(MONSTERS, "", "maximum-apocalypse"),)
    fresh = pipeline.ask(HAND_LIMIT, "maximum-apocalypse")
    after = pipeline.ask(HAND_LIMIT, "maximum-apocalypse", history=earlier)
    assert after.follows_up is None
    assert [h.chunk.id for h in after.passages] == [h.chunk.id for h in fresh.passages]
    assert after.answer == fresh.answer
    follow_up = pipeline.ask("那如果手牌超过上限呢？", history=earlier)
    assert follow_up.follows_up == MONSTERS and follow_up.game == "maximum-apocalypse"


def test_a_question_about_another_game_is_new(pipeline: Pipeline) -> None:
    earlier = (Turn("How much HP does each player start with?", "", "suros"),)
    asked = "And how does hunger work in Maximum Apocalypse?"
    answer = pipeline.ask(asked, history=earlier)
    assert answer.game == "maximum-apocalypse" and answer.follows_up is None
    assert pipeline.ask("And what if it runs out?", history=earlier).follows_up == (
        earlier[0].question
    )


def test_the_server_decides_from_the_conversation(serve_api: Any, pipeline: Pipeline) -> None:
    url = serve_api(pipeline)
    with httpx.Client(base_url=url, timeout=30) as client:

        def ask(question: str, conversation: str | None = None) -> dict[str, Any]:
            body = {"question": question, "game": "maximum-apocalypse"}
            if conversation:
                body["conversation_id"] = conversation
            answer: dict[str, Any] = client.post("/v1/ask", json=body).json()
            return answer

        first = ask(MONSTERS)
        conversation = first["conversation_id"]
        assert first["follows_up"] is None
        second = ask(HAND_LIMIT, conversation)
        assert second["conversation_id"] == conversation and second["follows_up"] is None
        assert second["quotes"] == ask(HAND_LIMIT)["quotes"]  # as when asked fresh
        third = ask("那如果手牌超过上限呢？", conversation)
        assert third["follows_up"] == HAND_LIMIT
        english = ask("And what if I am starving?", conversation)
        assert english["follows_up"] == "那如果手牌超过上限呢？"
