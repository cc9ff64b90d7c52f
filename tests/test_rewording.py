import pytest

from rag.answering.conclusion import conclusion_prompt
from rag.answering.rewording import (
    allowing_condition,
    asks_yes_or_no,
    both_sides,
    turned_round,
    unless_frame,
)
from rag.types import Lang, Quote

ALLOWING = "If you enter a tile and DO NOT have any monster cards attached, you may attempt one."


@pytest.mark.parametrize(
    ("question", "lang", "reworded", "frame"),
    [
        (
            "when can't I do a stealth test?",
            "en",
            "when can I do a stealth test, and when not?",
            "You can't do a stealth test unless {condition}.",
        ),
        (
            "When can’t I hand my cards over",
            "en",
            "When can I hand my cards over, and when not?",
            "You can't hand your cards over unless {condition}.",
        ),
        ("Where cannot a player end?", "en", "Where can a player end, and where not?", None),
        (
            "In which cases don't docile monsters activate?",
            "en",
            "In which cases do docile monsters activate, and in which cases not?",
            None,  # "X happens when C" does not say that nothing else brings X about
        ),
        (
            "什么时候不能进行潜行判定？",
            "zh",
            "什么时候可以进行潜行判定，什么时候不能？",
            "除非{condition}，否则不能进行潜行判定。",
        ),
        (
            "什么情况下我不能搜刮？",
            "zh",
            "什么情况下我可以搜刮，什么情况下不能？",
            "除非{condition}，否则你不能搜刮。",
        ),
        ("玩家什么时候不会受到推动？", "zh", "玩家什么时候会受到推动，什么时候不会？", None),
        # the "not" after the subject, or any 不 before a verb
        (
            "When does a monster not activate?",
            "en",
            "When does a monster activate, and when not?",
            None,
        ),
        (
            "When am I not allowed to scavenge?",
            "en",
            "When am I allowed to scavenge, and when not?",
            None,  # its subject is not the rest's: no frame to fill
        ),
        (
            "Which cards can't I discard?",
            "en",
            "Which cards can I discard, and which cards not?",
            "You can't discard unless {condition}.",
        ),
        ("什么情况下，怪物却不会攻击？", "zh", "什么情况下，怪物却会攻击，什么情况下不会？", None),
        ("哪些时候图标不算激活？", "zh", "哪些时候图标算激活，哪些时候不？", None),
        (
            "什么时候没法调查？",
            "zh",
            "什么时候可以调查，什么时候没法？",
            "除非{condition}，否则没法调查。",
        ),
    ],
)
def test_negated_when_questions_are_asked_both_ways_or_answered_around_a_condition(
    question: str, lang: Lang, reworded: str, frame: str | None
) -> None:
    """Asked both ways round for the model; a question whether something is allowed, by the
    asker (English) or anyone (Chinese), is answered around the allowing rule's condition."""
    assert both_sides(question, lang) == reworded
    assert unless_frame(question, lang, ALLOWING) == frame


@pytest.mark.parametrize(
    ("question", "lang"),
    [
        ("when can I do a stealth test?", "en"),
        ("can't I trade survivor cards?", "en"),  # a yes/no question has no "when" to split
        ("why can't I move diagonally?", "en"),
        ("怪物生成在玩家格，是立刻激活吗？", "zh"),
        ("什么时候可以搜刮？", "zh"),
        ("When do I roll and not move?", "en"),  # "not" joined to another verb
        ("什么时候不同的玩家交换手牌？", "zh"),  # 不同 negates nothing
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
        "None of your cards may be thrown twice.",
        "敌人未被击败时，你不可以离开。",
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
        "无论在哪个版块，你都可以进行潜行判定。",
        "每名玩家的潜行值不同，可以随时进行潜行判定。",
    ],
)
def test_a_positive_closest_rule_rewords(rule: str) -> None:
    """A negation inside the rule's leading condition is not the rule's own, nor is a
    choice not to act, nor a 不 or 无 that negates nothing (不同 different, 无论 whatever)."""
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


@pytest.mark.parametrize(
    ("question", "rule"),
    [
        ("when can't I do a stealth test?", "You cannot attempt a stealth test while stunned."),
        ("When don't I get the 3 AP?", "Players gain 3 AP at the start of every turn."),
        ("When can't I rest?", "You gain 3 AP at the start of every turn except the first."),
        ("When can't my hero rest?", "A Hero may rest if TIRED."),
        ("When can I rest?", "A Hero may rest if TIRED."),
    ],
)
def test_no_frame_for_a_negative_or_excepting_rule_another_subject_or_not_being_allowed(
    question: str, rule: str
) -> None:
    """A "cannot" rule or one naming its exception is copied the right way round; "X happens
    when C" does not say that nothing else brings X about; "my hero" is not the asker."""
    assert unless_frame(question, "en", rule) is None


@pytest.mark.parametrize(
    ("rule", "lang", "condition"),
    [
        (
            "If you enter a tile and DO NOT have any monster cards attached, you may attempt one.",
            "en",
            "you enter a tile and DO NOT have any monster cards attached",
        ),
        (
            "You may give Scavenge cards to another player as long as you are on the same tile.",
            "en",
            "you are on the same tile",
        ),
        (
            "如果你进入一个有怪物标记的方块，且你没有附着任何怪物卡，你可以尝试潜行判定。",
            "zh",
            "你进入一个有怪物标记的方块，且你没有附着任何怪物卡",
        ),
        ("你可以把搜刮卡交给其他玩家，只要你们在同一个方块上。", "zh", "你们在同一个方块上"),
    ],
)
def test_the_condition_a_rule_allows_under_is_found(rule: str, lang: str, condition: str) -> None:
    assert allowing_condition(rule, lang) == condition  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rule", "lang"),
    [
        ("A player can decide not to attempt a stealth test: they draw a card instead.", "en"),
        ("Roll the two Spawn dice, and compare the result with your stealth.", "en"),
        ("If the roll is higher, draw a monster card for each token.", "en"),
        ("玩家可以选择不进行潜行判定。", "zh"),
    ],
)
def test_a_rule_allowing_nothing_under_a_condition_has_none(rule: str, lang: str) -> None:
    assert allowing_condition(rule, lang) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("conclusion", "as_asked"),
    [
        (
            "You can restore 2 health at the Hospital only if you end your turn there.",
            "You can't restore 2 health at the Hospital unless you end your turn there.",
        ),
        (
            "Players may trade cards as long as they are on the same tile.",
            "Players can't trade cards unless they are on the same tile.",
        ),
        ("You can trade with anyone, but you cannot trade twice.", None),
        ("You can rest if TIRED. Resting takes a turn.", None),  # two sentences
        ("You can rest if TIRED, unless you are stunned.", None),  # an exception of its own
        ("A Hero may rest if TIRED.", "A Hero can't rest unless TIRED."),  # anyone named
        ("You must rest if TIRED.", None),  # an obligation, not a permission
    ],
)
def test_a_conclusion_saying_when_it_is_allowed_is_turned_round(
    conclusion: str, as_asked: str | None
) -> None:
    assert turned_round(conclusion, "en") == as_asked


@pytest.mark.parametrize(
    ("conclusion", "as_asked"),
    [
        (
            "地图上的特殊规则只能在与变异体战斗时使用。",
            "除非在与变异体战斗时，否则地图上的特殊规则不能使用。",
        ),
        ("只有在疲惫时，英雄才能休息。", "除非在疲惫时，否则英雄不能休息。"),
        ("英雄只有在疲惫时才能休息。", "除非在疲惫时，否则英雄不能休息。"),
        ("你只能打正面朝上的地图牌。", None),  # a restriction, no condition to turn
        ("英雄只有在疲惫时才能休息。休息占一回合。", None),  # two sentences
        ("只有在疲惫时，除了被眩晕，英雄才能休息。", None),  # an exception of its own
    ],
)
def test_a_chinese_conclusion_saying_only_when_it_is_allowed_is_turned_round(
    conclusion: str, as_asked: str | None
) -> None:
    assert turned_round(conclusion, "zh") == as_asked


@pytest.mark.parametrize(
    ("typed", "reworded", "frame"),
    [
        (
            "when cant I do a stealth test",
            "when can I do a stealth test, and when not?",
            "You can't do a stealth test unless {condition}.",
        ),
        (
            "when doesnt a missed card go to the discard pile?",
            "when does a missed card go to the discard pile, and when not?",
            None,  # not about being allowed
        ),
    ],
)
def test_a_negation_typed_without_its_apostrophe_reads_as_one(
    typed: str, reworded: str, frame: str | None
) -> None:
    """At the table "cant" is typed for "can't": the question has the same shape."""
    assert both_sides(typed, "en") == reworded
    assert unless_frame(typed, "en", ALLOWING) == frame
    assert asks_yes_or_no("Dont I get 3 AP on my first turn?", "en")
