import pytest

from rag.answering.conclusion import conclusion_prompt
from rag.answering.rewording import both_sides
from rag.types import Quote


@pytest.mark.parametrize(
    ("question", "lang", "reworded"),
    [
        ("when can't I do a stealth test?", "en", "when can I do a stealth test, and when not?"),
        ("When can’t I trade", "en", "When can I trade, and when not?"),
        ("Where cannot a player end?", "en", "Where can a player end, and where not?"),
        (
            "In which cases don't docile monsters activate?",
            "en",
            "In which cases do docile monsters activate, and in which cases not?",
        ),
        ("什么时候不能进行潜行判定？", "zh", "什么时候可以进行潜行判定，什么时候不能？"),
        ("玩家什么时候不会受到推动？", "zh", "玩家什么时候会受到推动，什么时候不会？"),
    ],
)
def test_negated_when_questions_are_asked_both_ways(
    question: str, lang: str, reworded: str
) -> None:
    assert both_sides(question, lang) == reworded  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("question", "lang"),
    [
        ("when can I do a stealth test?", "en"),
        ("can't I trade survivor cards?", "en"),  # a yes/no question has no "when" to split
        ("why can't I move diagonally?", "en"),
        ("怪物生成在玩家格，是立刻激活吗？", "zh"),
        ("什么时候可以搜刮？", "zh"),
    ],
)
def test_other_questions_are_left_alone(question: str, lang: str) -> None:
    assert both_sides(question, lang) == question  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "rule",
    [
        "You cannot place an enchantment token on a card that already has one.",
        "The Hero becomes TIRED and can't use the Ability until he/she RESTS.",
        "Monsters with this trait do not activate unless damaged.",
        "如果玩家无法移动，则不会受到推动。",
        "If a player cannot move, they do not suffer push.",
    ],
)
def test_a_negative_closest_rule_keeps_the_question(rule: str) -> None:
    """The model copies a "cannot" rule correctly when the question also says "can't"."""
    assert both_sides("when can't I do it?", "en", rule) == "when can't I do it?"


@pytest.mark.parametrize(
    "rule",
    [
        "If you enter a tile and DO NOT have any monster cards attached, you may attempt one.",
        "Test: Perform a Stealth test, then resolve the Success or Fail text.",
        "A player can decide not to attempt a stealth test: they draw a monster card instead.",
        "玩家可以选择不进行潜行判定。",
        "如果你身上没有怪物卡，可以进行潜行判定。",
    ],
)
def test_a_positive_closest_rule_rewords(rule: str) -> None:
    """A negation inside the rule's leading condition is not the rule's own, nor is a
    choice not to act."""
    reworded = both_sides("when can't I do a stealth test?", "en", rule)
    assert reworded == "when can I do a stealth test, and when not?"


def test_the_closest_rule_decides_the_rewording_not_the_first_quote() -> None:
    """Quotes come in reading order; the sentence closest to the question is named apart."""
    first = Quote(1, "g:1", "g", "G › Ability", None, "You may use the ABILITY at will.")
    closest = "The Hero becomes TIRED and can't use the Ability until he/she RESTS."
    second = Quote(2, "g:1", "g", "G › Ability", None, closest)
    question = "When can't my Hero use their Ability?"
    kept = conclusion_prompt(question, "en", [first, second], game_title="G", closest_rule=closest)
    assert f"<<<{question}>>>" in kept.messages[-1]["content"]
    positive = conclusion_prompt(
        question, "en", [first, second], game_title="G", closest_rule=first.text
    )
    assert (
        "<<<When can my Hero use their Ability, and when not?>>>"
        in positive.messages[-1]["content"]
    )


def test_the_model_reads_the_reworded_question_but_the_prompt_keeps_the_asked_one() -> None:
    rule = Quote(1, "g:1", "g", "G › Stealth", None, "You may attempt a stealth test.")
    prompt = conclusion_prompt("什么时候不能进行潜行判定？", "zh", [rule], game_title="Game")
    assert "<<<什么时候可以进行潜行判定，什么时候不能？>>>" in prompt.messages[-1]["content"]
    assert prompt.question == "什么时候不能进行潜行判定？"
