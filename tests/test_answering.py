"""The answering stages with fakes: quotes, constrained selection, the conclusion's stream,
the checks that do not trust the model, abstention and the order of what is shown."""

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder, ScriptedGenerator, make_hits

from rag.answering.answerer import Answerer
from rag.answering.assembly import rule_text
from rag.answering.candidates import CandidateSelector, Sentence
from rag.answering.checks import (
    answer_word_check,
    bounds,
    language_check,
    negation_check,
    numbers_check,
    own_words_check,
    quantity_check,
    stated_numbers,
    strip_markers,
    when_not_check,
)
from rag.answering.conclusion import conclusion_prompt, parse_conclusion, stream_conclusion
from rag.answering.question import Question, Shape
from rag.answering.quotes import make_quotes
from rag.answering.rewording import asks_yes_or_no
from rag.answering.selection import parse_selection, selection_prompt, selection_schema
from rag.generation import Generator
from rag.pipeline import Pipeline
from rag.prompting import phrases
from rag.searching.sentences import SentenceVectors
from rag.settings import GenerationSettings, Settings
from rag.types import Answer, Check, GameInfo, Hit, Lang, Quote

STEALTH = (
    "If you enter a tile with at least one Monster token and DO NOT have any monster cards "
    "attached to you, you may attempt a stealth test (see below) to sneak by them."
)
HITS = make_hits(f"Encountering monster tokens. {STEALTH}", "Your hand limit is 10 cards.")


def sentence(hit_index: int, text: str, position: int = 0) -> Sentence:
    return Sentence(HITS[hit_index], hit_index, position, text, 0.5)


def quote(text: str, n: int = 1, rendering: str | None = None) -> Quote:
    return Quote(n, f"g:{n}", "g", "Game › Section", 4, text, rendering)


# --- quotes ------------------------------------------------------------------------------


def test_the_rule_text_names_each_passage_once_above_its_sentences() -> None:
    shown = rule_text(
        [
            quote("Draw two cards."),
            quote("Discard one.", rendering="弃一张。"),
            quote("Rest.", n=2),
        ],
        "zh",
    )
    assert shown.splitlines() == [
        "规则原文:",
        "[1] 「Section」 第 4 页:",
        "    “Draw two cards.”",
        "    “Discard one.”",
        "      机器译文: 弃一张。",
        "[2] 「Section」 第 4 页:",
        "    “Rest.”",
    ]


def test_a_quoted_table_keeps_its_rows_on_lines_of_their_own() -> None:
    shown = rule_text([quote("Number players\n4 15 4 1\n5 19 5 1")], "en")
    assert shown.splitlines()[2:] == [
        "    “Number players",
        "     4 15 4 1",
        "     5 19 5 1”",
    ]


def test_quotes_are_verbatim_numbered_by_passage_in_reading_order() -> None:
    quotes, check = make_quotes(
        [sentence(1, "Your hand limit is 10 cards."), sentence(0, STEALTH, 1)]
    )
    assert [(q.n, q.text) for q in quotes] == [(1, "Your hand limit is 10 cards."), (2, STEALTH)]
    assert check.passed and quotes[0].chunk_id == HITS[1].chunk.id


def test_a_sentence_not_verbatim_in_its_passage_is_never_quoted() -> None:
    altered = STEALTH.replace("DO NOT have", "have")
    quotes, check = make_quotes([sentence(0, altered), sentence(1, "Your hand limit is 10 cards.")])
    assert [q.text for q in quotes] == ["Your hand limit is 10 cards."]
    assert not check.passed and "not found verbatim" in check.detail


# --- selection ---------------------------------------------------------------------------


def test_selection_schema_names_only_existing_sentences() -> None:
    schema = selection_schema(count=5, most=3)
    ids = schema["properties"]["ids"]
    assert ids["items"]["enum"] == [1, 2, 3, 4, 5] and ids["maxItems"] == 3


def test_selection_prompt_lists_the_candidates_and_carries_the_schema() -> None:
    candidates = [sentence(0, STEALTH), sentence(1, "Your hand limit is 10 cards.")]
    prompt = selection_prompt("hand limit?", "en", candidates, game_title="G", most=2)
    shown = prompt.messages[-1]["content"]
    assert "1. (Section 1) If you enter a tile" in shown
    assert "2. (Section 2) Your hand limit is 10 cards." in shown
    assert prompt.schema == selection_schema(2, 2) and prompt.task == "select"


@pytest.mark.parametrize(
    ("reply", "ids"),
    [
        ('{"ids": [3, 1]}', [3, 1]),
        ('{"ids": []}', []),
        ('{"ids": [2, 2, 9, 1, 3]}', [2, 1]),  # repeats and unknown ids go, then the most
        ('Sure! {"ids": [4]} is my pick', [4]),  # off-form, read leniently
        ("I think sentence one", None),
        ('{"ids": [9]}', None),  # only sentences that do not exist
    ],
)
def test_selection_replies_are_read_strictly_and_leniently(
    reply: str, ids: list[int] | None
) -> None:
    assert parse_selection(reply, count=5, most=2) == ids


# --- conclusion --------------------------------------------------------------------------


def test_the_conclusion_field_streams_as_it_is_written_with_escapes_decoded() -> None:
    reply = '{"conclusion": "No, \\"Stealth\\" \\u4e0d\\u884c.\\nOk", "extra": "x"}'
    pieces = [reply[i : i + 3] for i in range(0, len(reply), 3)]
    seen: list[str] = []
    streamed = "".join(stream_conclusion(iter(pieces), seen))
    assert streamed == 'No, "Stealth" 不行.\nOk'
    assert "".join(seen) == reply
    assert parse_conclusion(reply, "q", "en") == streamed


def test_a_plain_text_reply_is_the_conclusion() -> None:
    seen: list[str] = []
    assert "".join(stream_conclusion(iter(["  You may ", "not."]), seen)) == "  You may not."
    assert parse_conclusion("You may not.", "q", "en") == "You may not."
    assert parse_conclusion('{"other": 1}', "q", "en") == ""


def test_a_question_echoed_in_the_conclusion_is_left_out() -> None:
    echoed = '{"conclusion": "怪物攻击谁由谁决定？根据规则，老兵和狗都会被打到。"}'
    assert parse_conclusion(echoed, "q", "zh") == "根据规则，老兵和狗都会被打到。"
    asked = '{"conclusion": "Who does it hit? It hits everyone in range. Ok"}'
    assert parse_conclusion(asked, "q", "en") == "It hits everyone in range. Ok"
    assert parse_conclusion('{"conclusion": "中距离是多远？"}', "q", "zh") == ""


def test_a_reply_broken_off_mid_json_is_no_conclusion(settings: Settings) -> None:
    looped = '{"answer": "yes", "conclusion": "You may use it in the current or next mission, or'
    assert parse_conclusion(looped, "Can I keep it?", "en") == ""
    generator = ScriptedGenerator(conclusions=[looped])
    answer = scripted_pipeline_with(settings, generator).ask("What is the hand limit?", "MaxApoc")
    assert answer.conclusion is None and answer.quotes  # the rule text, never the raw reply
    assert '"conclusion"' not in answer.answer
    assert ("conclusion", False) in [(c.name, c.passed) for c in answer.checks]


@pytest.mark.parametrize(
    ("question", "lang", "opening"),
    [
        ("Can I move diagonally?", "en", "No. You cannot."),
        ("我可以斜着走吗？", "zh", "不可以。 You cannot."),
        ("有没有手牌上限？", "zh", "没有。 You cannot."),
        ("怪物是立刻激活吗？", "zh", "不是。 You cannot."),
    ],
)
def test_a_yes_no_question_is_answered_yes_or_no_in_its_own_verb(
    question: str, lang: str, opening: str
) -> None:
    reply = '{"answer": "no", "conclusion": "You cannot."}'
    assert parse_conclusion(reply, question, lang) == opening  # type: ignore[arg-type]
    prompt = conclusion_prompt(question, lang, [quote(STEALTH)], game_title="G")  # type: ignore[arg-type]
    assert prompt.schema is not None
    assert prompt.schema["properties"]["answer"]["enum"] == ["yes", "no"]
    assert list(prompt.schema["properties"]) == ["answer", "conclusion"]


@pytest.mark.parametrize(
    ("question", "lang", "expected"),
    [
        ("Does a monster that spawns on my tile attack at once?", "en", True),
        ("Can I move diagonally?", "en", True),
        ("When can't I do a stealth test?", "en", False),
        ("Don't I have to resolve Poison first?", "en", True),
        ("Can't I move diagonally?", "en", True),
        ("Won’t it activate?", "en", True),
        ("Cannot statements are rules.", "en", False),
        ("with 8 players do we use every wire card in the box?", "en", True),
        ("Can I put a second token on a card, to double it again?", "en", True),
        ("on the mutant's turn what do I do with the attack card after?", "en", False),
        ("In which turns don't the monsters attached to me activate?", "en", False),
        ("can I just not do the stealth test? what happens then", "en", False),
        ("I scavenged a Fuel card - does it just go in my hand?", "en", True),
        ("an Enter effect and monster tokens - what resolves first?", "en", False),
        ("cant I trade survivor cards?", "en", True),  # typed without its apostrophe
        ("怪物生成在玩家格，是立刻激活吗？", "zh", True),
        ("能不能斜着走？", "zh", True),
        ("什么时候不能进行潜行判定？", "zh", False),
    ],
)
def test_yes_no_questions_are_told_apart(question: str, lang: str, expected: bool) -> None:
    assert asks_yes_or_no(question, lang) is expected  # type: ignore[arg-type]


# --- checks ------------------------------------------------------------------------------


def test_the_reversed_stealth_rule_is_caught_and_the_right_one_passes() -> None:
    quotes = [quote(STEALTH)]
    reversed_ = "You can't do a stealth test if you don't have any monster cards attached."
    right = "You can't do a stealth test when you already have a monster card attached."
    assert not negation_check(reversed_, quotes).passed
    assert negation_check(right, quotes).passed
    assert negation_check(
        "You may attempt a stealth test if you do not have monster cards attached.", quotes
    ).passed


def test_a_chinese_conclusion_is_checked_against_the_quote_rendering() -> None:
    rendering = (
        "如果你进入至少有一个怪物指示物的板块，且身上没有附着任何怪物卡，你可以尝试潜行判定。"
    )
    quotes = [quote(STEALTH, rendering=rendering)]
    assert not negation_check("身上没有附着任何怪物卡时，你不能尝试潜行判定。", quotes).passed
    assert negation_check("身上已附着怪物卡时，你不能尝试潜行判定。", quotes).passed


def test_a_claim_is_read_against_the_rule_it_copies_not_a_longer_neighbour() -> None:
    neighbour = quote(
        "Long Range: eligible targets must be within 1 or 2 orthogonally adjacent tiles "
        "away from your current tile."
    )
    copied = quote("You cannot target your current tile.")
    assert negation_check("You cannot target your current tile.", [neighbour, copied]).passed
    assert not negation_check("You can target your current tile.", [neighbour, copied]).passed
    # ...and the stealth rule reversed is still caught beside another rule on monster cards
    attached = quote(
        "If you enter a tile with at least one monster token and have a monster card "
        "attached to you, immediately draw a monster card for each token."
    )
    reversed_ = "You can't do a stealth test if you don't have any monster cards attached."
    assert not negation_check(reversed_, [attached, quote(STEALTH)]).passed


def test_a_rules_consequence_reversed_under_a_condition_of_its_own_is_caught() -> None:
    """ "If C, Y" read back as "If C', not Y" reverses the rule unless C' is C turned round,
    even though the sentence says "not" as often as the rule does."""
    success = quote(
        "If the combined roll is lower than or equal to your modified stealth, your stealth "
        "attempt is successful."
    )
    reversed_ = "If you cannot do the stealth test, your stealth attempt is not successful."
    failed = negation_check(reversed_, [success])
    assert not failed.passed and "reverses" in failed.detail
    turned = "If you have a monster card attached, you can't attempt a stealth test."
    assert negation_check(turned, [quote(STEALTH)]).passed
    same_way = "If your roll is lower than or equal to your stealth, your attempt is successful."
    assert negation_check(same_way, [success]).passed


GAME_END = [
    quote(
        "The game ends when all players have run out of their own throwdown cards in their "
        "decks and the last player with any of their own throwdown cards remaining in his hand "
        "throws his last card."
    ),
    quote("At that point, there is one final scoring round."),
]


def test_an_outcome_in_words_no_quote_and_not_the_question_uses_is_caught() -> None:
    """Most words of "If a player runs out of cards, they are eliminated" are the rule's,
    so it passes for a restatement of it; no rule eliminates anyone."""
    asked = "what happens if a player runs out of cards?"
    invented = "If a player runs out of cards, they are eliminated from the game."
    assert negation_check(invented, GAME_END).passed  # the gap this check closes
    failed = own_words_check(invented, asked, GAME_END)
    assert not failed.passed and "eliminated" in failed.detail


def test_words_of_the_quotes_question_or_game_in_another_form_pass() -> None:
    asked = "in Throwdown, what happens if a player runs out of cards?"
    said = (
        "The game ends when all players have run out of throwdown cards and the last card is "
        "thrown; then there is one final scoring round in Throwdown, unless stated otherwise."
    )
    failed = own_words_check(said, asked, GAME_END)
    assert failed.detail == "says ['otherwise', 'stated'], which no quote and not the question say"
    plain = said.replace(", unless stated otherwise", "")  # "run", "thrown", "one": the rule's
    assert own_words_check(plain, asked, GAME_END).passed
    assert own_words_check(
        plain.replace("in Throwdown", "in Maximum"), "?", GAME_END, ["Maximum Throwdown"]
    ).passed
    # an irregular plural is its singular's word: "dice" over a rule saying "die"
    die = [quote("Roll one die; on a 6, draw a card.")]
    assert own_words_check("Roll the dice; on a 6, draw a card.", "?", die).passed
    assert not own_words_check("Roll the dice; on a 6, discard a card.", "?", die).passed
    # a conclusion in another language than its quotes is not judged word by word
    assert (
        own_words_check("游戏结束时进行最后一轮计分。", "牌用完了怎么办？", GAME_END).detail
        == "not judged"
    )


def test_a_not_spelled_out_of_a_privative_word_is_no_reversal() -> None:
    removed = [quote("All non-location cards are removed from the game.")]
    spelled_out = "All cards that are not locations are removed from the game."
    assert negation_check(spelled_out, removed).passed
    kept = "All non-location cards are not removed from the game."  # its own "non" kept
    assert not negation_check(kept, removed).passed


def test_a_claim_restating_one_of_two_clauses_keeps_that_clauses_negations() -> None:
    quotes = [
        quote(
            "The maximum is 3 Monster tokens per tile; do not place any new tokens on tiles "
            "that already have 3 tokens."
        )
    ]
    assert negation_check("The maximum is 3 Monster tokens on a tile.", quotes).passed
    assert not negation_check(
        "You may place new tokens on tiles that have 3 tokens.", quotes
    ).passed


def test_a_yes_no_answer_word_is_not_counted_as_the_claims_negation() -> None:
    quotes = [quote("Monsters, in the current player's play area, activate and attack.")]
    assert negation_check(
        "No. Monsters in the current player's play area activate and attack.", quotes
    ).passed


def test_a_conclusion_restating_no_quote_cannot_be_checked_so_it_fails() -> None:
    quotes = [quote("Monsters activate from left to right.")]
    check = negation_check("Not immediately: they wait until step 4 of the turn.", quotes)
    assert not check.passed and "restates no quote" in check.detail
    assert not negation_check("是", quotes).passed  # a bare yes vouches for nothing
    glossed = [quote("Revive: roll a die.", rendering="复活（Revive）：掷一个骰子。")]
    assert not negation_check("能。 复活（Revive）", glossed).passed  # one word and its gloss
    two = "No. They wait. Monsters activate from left to right."
    assert negation_check(two, quotes).passed  # one sentence restating a quote is enough


def test_the_yes_or_no_must_agree_with_the_claim_after_it() -> None:
    question = "Can I move diagonally?"
    assert answer_word_check("No, you cannot move diagonally.", question, "en").passed
    assert not answer_word_check("Yes, you cannot move diagonally.", question, "en").passed
    assert not answer_word_check("不可以，你可以斜着移动。", "我可以斜着移动吗？", "zh").passed
    assert answer_word_check("不可以，你不能斜着移动。", "我可以斜着移动吗？", "zh").passed
    unrelated = answer_word_check("Yes. Roll the two Spawn dice.", question, "en")
    assert unrelated.passed and unrelated.detail == "not judged"


HOW_MANY = "how many wire cards does everyone get at the start?"
WHEN_NOT = "When doesn't a Fuel card resolve my Fuel objective?"


@pytest.mark.parametrize(
    ("check", "question", "lang", "conclusion", "passes"),
    [
        # a how-many question is answered with a number, or with there being no limit
        (quantity_check, HOW_MANY, "en", "Each gets as many Wire cards as players.", False),
        (quantity_check, HOW_MANY, "en", "Each player gets five Wire cards.", True),
        (quantity_check, HOW_MANY, "en", "You may hold any number of tokens.", True),
        (quantity_check, "手牌上限几张？", "zh", "如果你的牌堆为空，你被淘汰。", False),
        (quantity_check, "手牌上限几张？", "zh", "你的手牌上限是10张牌。", True),
        (quantity_check, "手牌最多多少张？", "zh", "手牌数量不限。", True),
        # a when-not question is answered by a "not" or an "only"
        (when_not_check, WHEN_NOT, "en", "It resolves when you use its Fuel option.", False),
        (when_not_check, WHEN_NOT, "en", "It does not when you use its other option.", True),
        (when_not_check, WHEN_NOT, "en", "Only its Fuel option resolves it.", True),
        (when_not_check, "什么时候不能打黄色地图卡？", "zh", "你必须先打橙色卡。", False),
        (when_not_check, "什么时候不能打黄色地图卡？", "zh", "相邻的橙色卡没打之前不能打。", True),
        (when_not_check, "什么时候不能打黄色地图卡？", "zh", "只有打完相邻的橙色卡才能打。", True),
    ],
)
def test_a_question_asking_how_many_or_when_not_is_answered_in_that_shape(
    check: Callable[[str, Shape], Check],
    question: str,
    lang: Lang,
    conclusion: str,
    passes: bool,
) -> None:
    result = check(conclusion, Shape.of(question, lang))
    assert result.passed is passes
    if not passes:
        assert result.detail.startswith("the question asks")


@pytest.mark.parametrize(
    ("check", "question", "lang"),
    [
        (quantity_check, "搜刮牌分成哪几堆？", "zh"),  # "which ones" (哪几) is not a count
        (quantity_check, "What do I roll?", "en"),
        (when_not_check, "When do I roll?", "en"),
    ],
)
def test_a_question_not_asking_that_shape_is_not_judged_by_it(
    check: Callable[[str, Shape], Check], question: str, lang: Lang
) -> None:
    assert check("燃料、食物和弹药三堆。", Shape.of(question, lang)).detail == "not asked"


def test_numbers_must_appear_in_the_quotes() -> None:
    quotes = [quote("Your hand limit is ten cards."), quote("Roll the two Spawn dice.", n=2)]
    assert numbers_check("You may hold 10 cards and roll 2 dice.", quotes).passed
    failed = numbers_check("You may hold 12 cards.", quotes)
    assert not failed.passed and "12" in failed.detail
    assert numbers_check("Draw one card (抽一张).", quotes).passed  # "a card" in rule text
    assert not numbers_check("每回合抽三张牌。", quotes).passed


def test_the_games_own_name_states_no_number() -> None:
    quotes = [quote("You WIN a mission when you resolve all 3 Objective cards.")]
    said = "To win a mission in DECK 52: Final Bus, resolve all 3 Objective cards."
    assert not numbers_check(said, quotes).passed  # 52 is in no quote...
    names = ("DECK 52: Final Bus", "deck-52", "Deck 52")
    assert numbers_check(said, quotes, names).passed  # ...but it is the game's name
    assert numbers_check("In Deck 52, resolve all 3 Objective cards.", quotes, names).passed
    assert not numbers_check("In Deck 52, resolve all 4 Objective cards.", quotes, names).passed


def test_a_thing_counted_otherwise_than_in_every_quote_that_counts_it_fails() -> None:
    quotes = [quote("Roll the two Spawn dice."), quote("Draw a card.", n=2)]
    failed = numbers_check("To spawn monsters, roll one die.", quotes)  # "one" is let pass...
    assert not failed.passed and "roll 1 die" in failed.detail  # ...but not as a count of dice
    assert numbers_check("Roll both dice, then draw one card.", quotes).passed  # a card: one
    assert numbers_check("Roll one or two dice.", quotes).passed  # "one" counts no die here
    assert numbers_check("Roll one die per monster.", [quote("Draw a card.")]).passed


def test_a_number_bounded_otherwise_than_in_the_quotes_fails() -> None:
    quotes = [quote("As soon as you reduce the value on your Hunger die below 6, flip it back.")]
    failed = numbers_check("Reduce your Hunger die to 6 or below.", quotes)
    assert not failed.passed and "6 or below" in failed.detail
    assert not numbers_check("Your Hunger die must be at least 6.", quotes).passed
    assert numbers_check("Flip it back once your Hunger die is below 6.", quotes).passed
    assert numbers_check("饥饿骰降到6以下时翻回。", quotes).passed  # 以下 is read either way
    assert not numbers_check("饥饿骰不超过6时翻回。", quotes).passed
    assert numbers_check("你不能有超过5张牌。", [quote("You can't have more than 5 cards.")]).passed


def test_bounds_are_read_in_both_languages() -> None:
    def read(text: str) -> list[tuple[int, str, bool | None]]:
        return [(b.value, b.side, b.inclusive) for b in bounds(text)]

    assert read("no more than 5 cards, at least one token") == [
        (5, "below", True), (1, "above", True)
    ]  # fmt: skip
    assert read("two or more players; 3+ icons; fewer than ten") == [
        (2, "above", True), (3, "above", True), (10, "below", False)
    ]  # fmt: skip
    assert read("不超过10个, 至少有一个, 5张或以上") == [
        (10, "below", True), (1, "above", True), (5, "above", None)
    ]  # fmt: skip
    assert read("roll a D6 or more dice; 5+6=11; more than once") == []


def test_numbers_are_read_in_every_form() -> None:
    assert stated_numbers("roll 2 dice, draw three, 两张, 十二点, 第二十五步, D6 [7]") == {
        2, 3, 12, 25
    }  # fmt: skip
    assert stated_numbers("the first player draws, the third best scores") == {3}


def test_a_conclusion_must_be_in_the_askers_language() -> None:
    copied = "Stealth test: roll the two Spawn dice and compare the result."
    assert not language_check(copied, "zh").passed
    assert language_check("进行潜行判定（Stealth test）时，掷两个生成骰子。", "zh").passed
    assert language_check(copied, "en").passed
    assert not language_check("掷两个生成骰子。", "en").passed


def test_markers_the_model_wrote_must_point_at_a_shown_quote() -> None:
    text, check = strip_markers("You may hold ten cards [1].", shown=[1, 2])
    assert text == "You may hold ten cards." and check.passed
    _, stray = strip_markers("You may hold ten cards [7].", shown=[1, 2])
    assert not stray.passed and "[7]" in stray.detail


# --- the pipeline with fakes --------------------------------------------------------------


def scripted_pipeline_with(settings: Settings, generator: ScriptedGenerator) -> Pipeline:
    return Pipeline(settings, embedder=FakeEmbedder(), generator=generator)


def selecting(settings: Settings) -> Settings:
    """The settings with the LLM's selection on (generation.select)."""
    generation = settings.generation.model_copy(update={"select": True})
    return settings.model_copy(update={"generation": generation})


def test_quotes_come_before_any_token_and_the_conclusion_cites_them(settings: Settings) -> None:
    generator = ScriptedGenerator(conclusions=['{"conclusion": "You have a hand limit."}'])
    events = list(
        scripted_pipeline_with(settings, generator).ask_stream(
            "What is the hand limit?", "Maximum Apocalypse"
        )
    )
    kinds = [e.kind for e in events]
    assert kinds[0] == "quotes" and kinds.index("quotes") < kinds.index("token")
    assert kinds[-1] == "answer" and kinds.count("answer") == 1
    answer = events[-1].answer
    assert answer is not None and not answer.abstained
    assert answer.conclusion == "You have a hand limit."
    deciding = answer.quotes[0]
    assert deciding.deciding and not any(q.deciding for q in answer.quotes[1:])
    # The deciding sentence first, with its source; then the conclusion; then the context.
    assert answer.answer.startswith(f"Deciding rule: [1] Draw\n    “{deciding.text}”")
    assert "\n\nConclusion: You have a hand limit. [1]\n\nRule text:" in answer.answer
    assert all(q.text in answer.answer for q in answer.quotes)
    assert {c.n for c in answer.citations} == {q.n for q in answer.quotes}
    assert [p.task for p in generator.prompts] == ["conclude"]  # from the closest quotes
    data = answer.to_json()
    assert data["conclusion"] and data["quotes"] and {c["name"] for c in data["checks"]} >= {
        "quotes", "selection", "numbers", "negation", "markers"
    }  # fmt: skip


def test_a_failed_check_withholds_the_conclusion_but_keeps_the_quotes(settings: Settings) -> None:
    invented = '{"conclusion": "You may hold 99 cards."}'
    generator = ScriptedGenerator(conclusions=[invented, invented])  # the same when asked again
    answer = scripted_pipeline_with(settings, generator).ask(
        "What is the hand limit?", "Maximum Apocalypse"
    )
    assert answer.conclusion is None and not answer.abstained
    assert "99" not in answer.answer
    # The deciding sentence is the answer: no line stands above it.
    assert answer.answer.startswith("Deciding rule: [1]")
    assert answer.quotes and answer.citations
    failed = [c.name for c in answer.checks if not c.passed]
    assert "numbers" in failed and "quotes" not in failed
    assert json.loads(json.dumps(answer.to_json()))["checks"]


def answer_to(question: str, hits: list[Hit], generator: Generator) -> Answer:
    """The answer an Answerer over `hits` alone gives (fake embedder, gates off)."""
    embedder = FakeEmbedder()
    sentences, _ = SentenceVectors.embed([hit.chunk for hit in hits], embedder)
    answerer = Answerer(
        CandidateSelector(embedder, lambda: sentences),
        generator,
        GenerationSettings(min_sentence_score=0, min_score_unconcluded=0, conclude_from=0),
    )
    game = GameInfo("maximum-apocalypse", "Maximum Apocalypse", (), "en", "", Path("book"))
    events = list(answerer.stream(Question(question, "en", game), hits))
    assert events[-1].answer is not None
    return events[-1].answer


def test_a_when_not_question_is_answered_by_the_rules_condition_turned_round() -> None:
    """Asked when a stealth test is not allowed, over the rule saying when it is, the answer
    is that rule's condition turned round, written by no model and checked like any."""
    generator = ScriptedGenerator()
    answer = answer_to("when can't I do a stealth test?", HITS, generator)
    assert answer.conclusion == (
        "You can't do a stealth test unless you enter a tile with at least one Monster token "
        "and DO NOT have any monster cards attached to you."
    )
    assert generator.prompts == []
    assert all(c.passed for c in answer.checks)
    assert "unless" in {c.name for c in answer.checks}
    # a question the frame does not fit goes to the model as before
    answer_to("when can I do a stealth test?", HITS, generator)
    assert [p.task for p in generator.prompts] == ["conclude"]


def test_a_conclusion_written_the_allowed_way_round_is_said_as_asked() -> None:
    """No quoted rule has the "If C, you may X" shape, so the model writes; what it writes
    the allowed way round is turned to answer "when can't I …?", then checked."""
    hits = make_hits("Trading. Players on the same tile trade cards freely.")
    allowed = '{"conclusion": "You can trade cards only if you are on the same tile."}'
    generator = ScriptedGenerator(conclusions=[allowed, allowed])
    turned = answer_to("When can't I trade cards?", hits, generator)
    assert turned.conclusion == "You can't trade cards unless you are on the same tile."
    assert "unless" in {c.name for c in turned.checks}
    asked_so = answer_to("When can I trade cards?", hits, generator)
    assert asked_so.conclusion == "You can trade cards only if you are on the same tile."


def test_a_when_not_question_concluded_the_allowed_way_round_is_not_concluded() -> None:
    """ "X happens when C" to "when doesn't X happen?" is not turned round (something else
    may bring X about) and states no "not" case: the player reads the rule instead."""
    hits = make_hits("Objectives. A Fuel card resolves the Fuel objective with its Fuel option.")
    allowed = '{"conclusion": "A Fuel card resolves the objective with its Fuel option."}'
    generator = ScriptedGenerator(conclusions=[allowed, allowed])
    answer = answer_to("When doesn't a Fuel card resolve the objective?", hits, generator)
    assert answer.conclusion is None and answer.answer.startswith("Deciding rule: [1]")
    assert [c.name for c in answer.checks if not c.passed] == ["when_not"]
    asked_so = answer_to("When does a Fuel card resolve the objective?", hits, generator)
    assert asked_so.conclusion == "A Fuel card resolves the objective with its Fuel option."


def test_a_player_count_question_over_a_table_is_answered_by_its_row() -> None:
    """The closest quoted sentence is a table by player count: its row is the answer,
    written by no model and checked like any conclusion."""
    table = "Number of players | Sherlock Team | Moriarty Team\n4 | 3 | 1\n6 | 4 | 2\n8 | 5 | 3"
    hits = make_hits(f"Teams.\n{table}\n", "Each player takes a role card in secret.")
    generator = ScriptedGenerator()
    answer = answer_to(
        "With 6 players, how many on each team: Sherlock, Moriarty?", hits, generator
    )
    assert answer.conclusion == "With 6 players: Sherlock Team 4, Moriarty Team 2."
    assert generator.prompts == []
    assert all(c.passed for c in answer.checks)
    assert "table" in {c.name for c in answer.checks}
    # a count no row has goes to the model as before
    answer_to("With 7 players, how many on each team: Sherlock, Moriarty?", hits, generator)
    assert [p.task for p in generator.prompts] == ["conclude"]


def test_a_how_many_question_answered_without_a_number_is_not_concluded(
    settings: Settings,
) -> None:
    evasive = '{"conclusion": "Draw a card from your Survivor deck and add it to your hand."}'
    generator = ScriptedGenerator(conclusions=[evasive])
    answer = scripted_pipeline_with(settings, generator).ask(
        "How many cards can I hold?", "Maximum Apocalypse"
    )
    assert answer.conclusion is None and answer.answer.startswith("Deciding rule: [1]")
    assert ("quantity", False) in [(c.name, c.passed) for c in answer.checks]


def test_selecting_no_sentence_abstains(settings: Settings) -> None:
    generator = ScriptedGenerator(selections=['{"ids": []}'])
    answer = scripted_pipeline_with(selecting(settings), generator).ask(
        "How do I trade cards with the bus driver?", "DECK 52"
    )
    assert answer.abstained and answer.citations == [] and answer.passages
    assert "The rulebook does not say" in answer.answer
    assert [p.task for p in generator.prompts] == ["select"]  # nothing more was written


def test_an_invented_number_and_no_close_sentence_seem_silent(settings: Settings) -> None:
    generation = settings.generation.model_copy(update={"min_score_unconcluded": 0.99})
    doubtful = settings.model_copy(update={"generation": generation})
    question = ("What is the hand limit?", "Maximum Apocalypse")
    invented = '{"conclusion": "You may hold 99 cards."}'  # fails the numbers check
    answer = scripted_pipeline_with(doubtful, ScriptedGenerator(conclusions=[invented])).ask(
        *question
    )
    assert answer.abstained and answer.conclusion is None and answer.quotes
    assert answer.answer.startswith(phrases("en")["not_answered"])
    assert "Rule text:" in answer.answer and answer.citations  # what was found stays shown
    assert ("closeness", False) in [(c.name, c.passed) for c in answer.checks]
    # A conclusion that passes is shown however far the closest sentence is...
    restating = ScriptedGenerator(conclusions=['{"conclusion": "{rule}"}'])
    shown = scripted_pipeline_with(doubtful, restating).ask(*question)
    assert not shown.abstained and shown.conclusion
    # ...and one that fails, with the closest sentence close enough (and its number stated
    # again when asked again), leaves the rule to read.
    plain = scripted_pipeline_with(
        settings, ScriptedGenerator(conclusions=[invented, invented])
    ).ask(*question)
    assert not plain.abstained and plain.answer.startswith("Deciding rule: [1]")
    # So does one that misreads a rule (its negation), however far: the rule is there.
    misread = '{"conclusion": "There is no hand limit."}'
    flipped = scripted_pipeline_with(doubtful, ScriptedGenerator(conclusions=[misread])).ask(
        *question
    )
    failed = {c.name for c in flipped.checks if not c.passed}
    assert "negation" in failed and "numbers" not in failed and flipped.conclusion is None
    assert not flipped.abstained and flipped.answer.startswith("Deciding rule: [1]")


def test_numbers_the_model_does_not_state_again_seem_silent(settings: Settings) -> None:
    question = ("What is the hand limit?", "Maximum Apocalypse")
    invented = '{"conclusion": "You may hold 99 cards."}'  # fails the numbers check
    others = ['{"conclusion": "You may hold 98 cards."}', '{"conclusion": "See the rule."}']
    varying = ScriptedGenerator(conclusions=[invented, *others])
    answer = scripted_pipeline_with(settings, varying).ask(*question)
    assert answer.abstained and answer.conclusion is None and answer.quotes
    assert answer.answer.startswith(phrases("en")["not_answered"])
    assert ("numbers_repeated", False) in [(c.name, c.passed) for c in answer.checks]
    asked_again = varying.prompts[1:]
    assert [p.task for p in asked_again] == ["conclude"] * settings.generation.reasks
    assert {p.temperature for p in asked_again} == {settings.generation.reask_temperature}
    assert len({p.seed for p in asked_again}) == settings.generation.reasks
    assert all(p.messages == varying.prompts[0].messages for p in asked_again)
    # The model stating the same numbers again is asked no more: the rule is there to read.
    repeating = ScriptedGenerator(conclusions=[invented, others[0], invented, others[1]])
    answer = scripted_pipeline_with(settings, repeating).ask(*question)
    assert not answer.abstained and answer.answer.startswith("Deciding rule: [1]")
    assert len(repeating.prompts) == 3 and "numbers_repeated" not in {c.name for c in answer.checks}
    # A withheld conclusion stating no number, a shown one, or reasks 0: not asked again.
    misread = ScriptedGenerator(conclusions=['{"conclusion": "There is no hand limit."}'])
    assert not scripted_pipeline_with(settings, misread).ask(*question).abstained
    restating = ScriptedGenerator(conclusions=['{"conclusion": "{rule}"}'])
    assert scripted_pipeline_with(settings, restating).ask(*question).conclusion
    once = settings.generation.model_copy(update={"reasks": 0})
    trusting = ScriptedGenerator(conclusions=[invented])
    answer = scripted_pipeline_with(settings.model_copy(update={"generation": once}), trusting).ask(
        *question
    )
    assert not answer.abstained
    assert [len(g.prompts) for g in (misread, restating, trusting)] == [1, 1, 1]


class TitledFakeEmbedder(FakeEmbedder):
    """Reads a sentence under its section's name as the words of both."""

    def embed_titled(self, texts: Sequence[str], titles: Sequence[str]) -> np.ndarray:
        titled = [f"{title} {text}" for text, title in zip(texts, titles, strict=True)]
        return self.embed_passages(titled)


@pytest.mark.parametrize(
    ("embedder", "silent"), [(TitledFakeEmbedder(), False), (FakeEmbedder(), True)]
)
def test_silence_is_told_by_the_closest_sentence_read_under_its_sections_name(
    settings: Settings, tmp_path: Path, embedder: FakeEmbedder, silent: bool
) -> None:
    book = tmp_path / "sneak.md"
    book.write_text(
        "# Sneak\n\n## Stealth\n\nRoll two dice and compare them with your score.\n\n"
        "## Setup\n\nEach player takes a board.\n",
        encoding="utf-8",
    )
    gate = settings.generation.model_copy(update={"min_sentence_score": 0.2})
    retrieval = settings.retrieval.model_copy(update={"min_dense_score": 0})
    pipeline = Pipeline(
        settings.model_copy(update={"generation": gate, "retrieval": retrieval}),
        embedder=embedder,
        generator=ScriptedGenerator(),
    )
    pipeline.add_book(book, "Sneak", [])
    # no word of the rule is in the question: only its section's name says what it is about
    answer = pipeline.ask("How does stealth work?", "Sneak")
    assert answer.abstained is silent
    assert [c.passed for c in answer.checks if c.name == "closeness"] == ([False] if silent else [])
    if not silent:
        assert answer.quotes[0].deciding and answer.quotes[0].text.startswith("Roll two dice")


def test_a_question_far_from_every_sentence_abstains_before_the_llm(settings: Settings) -> None:
    generator = ScriptedGenerator(selections=['{"ids": [1]}'])
    strict = settings.model_copy(
        update={"generation": settings.generation.model_copy(update={"min_sentence_score": 0.99})}
    )
    events = list(
        scripted_pipeline_with(strict, generator).ask_stream(
            "What is the hand limit?", "Maximum Apocalypse"
        )
    )
    assert [e.kind for e in events] == ["answer"]  # no rule text is offered as an answer
    answer = events[0].answer
    assert answer is not None and answer.abstained and answer.passages
    assert [(c.name, c.passed) for c in answer.checks] == [("closeness", False)]
    assert generator.prompts == []  # the model was not asked


def test_the_llm_selection_chooses_what_the_conclusion_rests_on(settings: Settings) -> None:
    generator = ScriptedGenerator(selections=['{"ids": [2]}'])
    pipeline = scripted_pipeline_with(selecting(settings), generator)
    events = list(pipeline.ask_stream("What is the hand limit?", "Maximum Apocalypse"))
    quote_events = [e for e in events if e.kind == "quotes"]
    answer = events[-1].answer
    assert answer is not None and len(answer.quotes) > 1
    listed = generator.prompts[0].messages[-1]["content"].splitlines()
    second = next(line for line in listed if line.startswith("2. "))
    others = [line for line in listed if line[:1].isdigit() and line is not second]
    conclusion_prompt = generator.prompts[1].messages[-1]["content"]
    assert second.split(") ", 1)[1] in conclusion_prompt
    assert not any(line.split(") ", 1)[1] in conclusion_prompt for line in others)
    # every quote stays shown: the rule text sent first is the rule text of the answer
    assert [e.quotes for e in quote_events] == [tuple(answer.quotes)]


def test_a_chinese_question_on_an_english_book_gets_renderings_beside_the_quotes(
    settings: Settings,
) -> None:
    generator = ScriptedGenerator(
        selections=['{"ids": [1]}'],
        # the rendering, then the conclusion
        conclusions=["手牌上限是10张牌", '{"conclusion": "手牌上限是10张牌。"}'],
    )
    pipeline = scripted_pipeline_with(selecting(settings), generator)
    events = list(pipeline.ask_stream("What is the hand limit? 手牌上限是多少？", "末日启示录"))
    answer = events[-1].answer
    assert answer is not None and answer.lang == "zh"
    assert [p.task for p in generator.prompts] == ["select", "render", "conclude"]
    selected = generator.prompts[1].question  # the sentence rendered: the one selected
    assert [q.rendering for q in answer.quotes if q.text == selected] == ["手牌上限是10张牌"]
    assert all(q.rendering is None for q in answer.quotes if q.text != selected)
    assert "机器译文: 手牌上限是10张牌" in answer.answer and "规则原文" in answer.answer
    rendered = [e for e in events if e.kind == "quotes"][-1]
    assert rendered.quotes == tuple(answer.quotes)  # sent before the conclusion
    assert "(手牌上限是10张牌)" in generator.prompts[2].messages[-1]["content"]
    assert answer.conclusion == "手牌上限是10张牌。"  # restates the rendering: checkable


def test_without_selection_the_closest_quotes_are_rendered_and_concluded_from(
    settings: Settings,
) -> None:
    generator = ScriptedGenerator()
    events = list(
        scripted_pipeline_with(settings, generator).ask_stream(
            "What is the hand limit? 手牌上限是多少？", "末日启示录"
        )
    )
    answer = events[-1].answer
    assert answer is not None and len(answer.quotes) > 1
    tasks = [p.task for p in generator.prompts]
    most = min(3, len(answer.quotes))
    # the model selected nothing; each rendering ("See the rule.", unscripted) is no Chinese,
    # so it is asked for once more, word for word
    assert tasks == ["render"] * (2 * most) + ["conclude"]
    rendered = {p.question for p in generator.prompts[:-1]}
    assert len(rendered) == most and rendered <= {q.text for q in answer.quotes}
    assert ("selection", True) in [(c.name, c.passed) for c in answer.checks]


def test_with_no_conclusion_to_write_only_the_deciding_sentence_is_rendered(
    settings: Settings,
) -> None:
    never = settings.generation.model_copy(update={"conclude_from": 1.0})
    generator = ScriptedGenerator()
    pipeline = scripted_pipeline_with(settings.model_copy(update={"generation": never}), generator)
    events = list(pipeline.ask_stream("What is the hand limit? 手牌上限是多少？", "末日启示录"))
    answer = events[-1].answer
    assert answer is not None and len(answer.quotes) > 1
    # the closest sentence is close (the gate is off on the fake's scale): no conclusion is
    # written, and only the deciding sentence is rendered (asked twice, as no Chinese came)
    assert [p.task for p in generator.prompts] == ["render", "render"]
    deciding = next(q for q in answer.quotes if q.deciding)
    assert {p.question for p in generator.prompts} == {deciding.text}
    assert answer.conclusion is None and not answer.abstained

    # another's rendering made before (as `rules render` makes them) is shown, and none is
    # asked for
    draw = "Spend 1 action to draw a card from your Survivor deck to your hand."
    assert [q.deciding for q in answer.quotes if q.text == draw] == [False]
    rendered = "花费1行动从你的幸存者牌堆中抽一张牌到你的手中。"
    generator.conclusions = [rendered]
    pipeline.answerer.renderer.make(draw, "zh")
    generator.prompts.clear()
    again = list(pipeline.ask_stream("What is the hand limit? 手牌上限是多少？", "末日启示录"))
    answer = again[-1].answer
    assert answer is not None and generator.prompts == []
    assert [q.rendering for q in answer.quotes if q.text == draw] == [rendered]


def test_an_english_question_on_a_chinese_book_gets_english_renderings() -> None:
    from rag.answering.rendering import Renderer

    lost = "You can move two kittens in one turn."
    generator = ScriptedGenerator(conclusions=[lost, lost, "If you roll a 6, roll again."])
    quotes, check = Renderer(generator).render_quotes(
        [quote("你不能在同一回合内移动两只小猫。"), quote("如果你掷出6，你可以再掷一次。", n=2)],
        "en",
    )
    assert "Translate this Chinese" in generator.prompts[0].messages[1]["content"]
    # the first rendering lost the rule's "not", and so did the one asked for again word for
    # word: withheld, as in Chinese
    assert "word for word" in generator.prompts[1].messages[1]["content"]
    assert [q.rendering for q in quotes] == [None, "If you roll a 6, roll again."]
    assert [q.rendering_withheld for q in quotes] == [True, False] and not check.passed


def test_an_english_conclusion_on_a_chinese_book_is_checked_against_the_renderings() -> None:
    rule = quote(
        "如果你的小猫停在陷阱格上，它必须退回起点。",
        rendering=("If your kitten stops on a trap square, it must go back to the start."),
    )
    assert negation_check("Your kitten must go back to the start.", [rule]).passed
    flipped_rule = negation_check("Your kitten does not go back to the start.", [rule])
    assert not flipped_rule.passed and "reverses" in flipped_rule.detail


def test_a_rendering_that_failed_the_checks_is_said_to_be_withheld() -> None:
    from rag.answering.rendering import Renderer

    twelve = "你的手牌上限是十二张。"
    generator = ScriptedGenerator(conclusions=[twelve, twelve, "抽两张牌。"])
    quotes, _ = Renderer(generator).render_quotes(
        [quote("Your hand limit is ten cards."), quote("Draw two cards.", n=2)], "zh"
    )
    assert [q.rendering_withheld for q in quotes] == [True, False]
    shown = rule_text(quotes, "zh")
    assert "机器译文: 未通过核对，不显示" in shown and "机器译文: 抽两张牌。" in shown
    assert "Machine translation: withheld by the checks" in rule_text(quotes, "en")
    # A quote no rendering was made for (not among those the conclusion rests on) says nothing.
    assert "机器译文" not in rule_text([quote("Draw two cards.")], "zh")


def test_an_unfaithful_rendering_is_not_shown() -> None:
    from rag.answering.rendering import Renderer

    twelve, ten = "你的手牌上限是十二张。", "手牌上限是十张。"
    generator = ScriptedGenerator(conclusions=[twelve, twelve, ten, ten])
    quotes, check = Renderer(generator).render_quotes(
        [quote("Your hand limit is ten cards."), quote("Draw two cards.", n=2)], "zh"
    )
    assert quotes[0].rendering is None and quotes[1].rendering is None
    assert not check.passed and "not faithful: quote(s) 1, 2" in check.detail  # 12, two: not 10

    # A reply that copies the rule in English is no rendering for a Chinese question.
    copied = "Sherlock's team wins the game if they defuse the bomb."
    renderer = Renderer(ScriptedGenerator(conclusions=[copied, copied]))
    shown, check = renderer.render_quotes([quote(copied)], "zh")
    assert shown[0].rendering is None and not check.passed
    assert check.detail.startswith("not in the question's language: quote(s) 1")

    def rendering_shown(sentence: str, reply: str) -> str | None:
        """The rendering shown beside `sentence` when the model renders it as `reply`, the
        first time and when asked again word for word."""
        renderer = Renderer(ScriptedGenerator(conclusions=[reply, reply]))
        return renderer.render_quotes([quote(sentence)], "zh")[0][0].rendering

    condition = "If you ever have 10 cards and draw a card, you draw and then discard a card."
    lost = "你每次抽一张牌，然后弃一张牌。"  # the condition's 10 left out
    kept = "如果你有10张牌时抽牌，你先抽牌再弃一张牌。"
    step = "2. Shuffle the deck."  # a list item's own number may be left out
    pdf_step = "4 Shuffle the Wire cards and deal five face down to each player."
    dealt = "洗混线牌，面朝下发给每位玩家5张。"
    ranks = "The second best scores 1 point, the third best gets 0."  # 第二 is 2, as "second"
    ranked = "第二名得1分，第三名得0分。"
    for sentence, reply, shown in ((condition, lost, None), (condition, kept, kept),
                                   (step, "洗牌。", "洗牌。"), (pdf_step, dealt, dealt),
                                   (pdf_step, "洗混线牌，面朝下发给每位玩家。", None),
                                   (ranks, ranked, ranked),
                                   (ranks, "第二名得1分，第四名得0分。", None)):  # fmt: skip
        assert rendering_shown(sentence, reply) == shown

    # A unit written against its number ("3AP") is the quote's word; a bracket holding
    # Chinese is an aside, not a gloss.
    gain = "At the beginning of a player's turn, they gain 3AP."
    options = "To use a card, choose one option (A or B) and do all included actions."
    gained, chosen = "每回合开始时，该玩家获得3点行动点（AP）。", "选择一个选项（A或B）并执行。"
    for sentence, reply in ((gain, gained), (options, chosen)):
        assert rendering_shown(sentence, reply) == reply
    # An English word holding a "not" is said with a negator in Chinese: one more "not" is
    # its, one fewer is a lost negation; a bare "instead" holds none.
    infinite, unrecruited = "Mutants have infinite movement.", "An attached Ally is unrecruited."
    missed = "If the thrown card does not touch another card in play, it has missed."
    hunger = "When you would increase your Hunger, instead move the hunger die one step down."
    missed_kept = "如果投掷的牌没有接触场上的牌，它就未命中。"
    touched = "如果投掷的牌接触场上的牌，它就命中了。"  # its "not" lost
    in_its_place = "你要增加饥饿时，而不是把饥饿骰下移。"
    # Only 未, 非, 无, 没有 or 而不是 spell a privative word out, not a verb's 不 nor 除非:
    uncovered = "Cards you throw are not active until your next turn, and only if uncovered."
    misread = "扔出的牌不会在下一回合开始时生效，除非图标完全露出。"
    for sentence, reply, shown in ((infinite, "变异体可以无限移动。", "变异体可以无限移动。"),
                                   (unrecruited, "附着的盟友未被招募。", "附着的盟友未被招募。"),
                                   (missed, missed_kept, missed_kept), (missed, touched, None),
                                   (hunger, in_its_place, None),
                                   (uncovered, misread, None)):  # fmt: skip
        assert rendering_shown(sentence, reply) == shown

    # "After", "before" and "only" bound a rule: a rendering without them states another.
    later = "At the beginning of a player turn after their first, gain 3 AP."
    dodge = "After an enemy rolls attack dice, before damage is applied, you may roll dice."
    top = "Only the card on top of the stack is active."
    discuss = "Discuss before choosing which wire to cut."
    same_tile = "You may attack only if you are on the same tile."
    solo = "If you're playing with only one character, Long Range damage is halved."
    objectives = "3. Draw 3 Objective cards."
    survivor = "Then take that Survivor's deck and draw 4 cards from it."
    star = "Place a Star token on that tile."
    loot = "Take the top card of their deck."
    shuffle = "Shuffle the Loot deck."
    enter = "If you enter a tile with monster tokens, immediately draw a monster card for each."
    throws = "You may make additional throws."
    renderings = [  # (sentence, rendering, shown)
        (later, "在第一次回合开始时，获得3点行动点（AP）。", False),
        (later, "第一个回合之后，每回合开始时获得3 AP。", True),
        (dodge, "在敌人掷攻击骰之前，你可以掷骰，然后结算伤害。", False),
        (dodge, "敌人掷攻击骰后、伤害结算前，你可以掷骰。", True),
        (top, "堆顶的牌是激活的。", False),
        (top, "只有堆顶的牌是激活的。", True),
        (discuss, "讨论，然后选择剪哪根线。", False),  # 然后 is "then"
        (discuss, "先讨论，再选择剪哪根线。", True),
        (same_tile, "除非在同一格，否则不能攻击。", True),
        (solo, "如果与一个角色一起玩，远程卡的伤害减半。", True),  # the number holds it
        # "Each round" belongs to a rule that names a round or turn.
        (objectives, "每轮开始时，玩家抽取3张目标卡。", False),
        (objectives, "抽取3张目标卡。", True),
        (gain, "每回合开始时，该玩家获得3点行动点（AP）。", True),
        # The components a rule names, and where a card lies, are kept: a deck is not the
        # hand, a token not a card; a word kept in English names it, a gloss does not.
        (survivor, "然后从该幸存者的手牌中抽取4张牌。", False),
        (survivor, "然后拿起该幸存者的牌堆，从中抽4张牌。", True),
        (survivor, "然后从该幸存者的 deck 中抽4张牌。", True),
        (star, "将星星牌（Star token）放在该牌上。", False),
        (star, "将星星标记（Star token）放在该版块上。", True),
        (loot, "从他们的牌堆中拿一张牌。", False),
        (loot, "从他们的牌堆顶拿一张牌。", True),
        (loot, "从他们的桌上（deck）拿最上面一张牌。", False),
        (shuffle, "洗牌。", True),  # shuffling the cards is shuffling the deck
        # Nor does it name a hand or dice its quote does not.
        (enter, "你进入有怪物标记的版块时，立即从你的手牌中为每个标记抽一张怪物卡。", False),
        (enter, "你进入有怪物标记的版块时，立即为每个标记抽一张怪物卡。", True),
        (throws, "你可以进行额外的掷骰。", False),
        (throws, "你可以额外投掷。", True),
        ("- 30 Gunslinger cards", "30张枪手牌", True),  # 枪手 is the Gunslinger
        ("All the dices are returned to the centre.", "所有骰子回到中央。", True),
    ]
    for sentence, reply, shown in renderings:
        assert rendering_shown(sentence, reply) == (reply if shown else None), reply

    expanded = "每回合开始时，该玩家获得3点行动点（Action Points）。"  # not the quote's words
    assert rendering_shown(gain, expanded) is None

    echo = (
        "请遵守所有条件、数字和否定（not、only、unless）。"
        "在每个游戏术语之后给出英语单词（例如：潜行判定（Stealth test））。"
    )
    glossed = (
        "在你回合开始时的“评估激活图标”（Evaluate Active Icons）步骤中，你的图标才被视为激活。"
    )
    icons = (
        "Your icons are only evaluated and considered active at the beginning of your turn "
        'during the "Evaluate Active Icons" step.'
    )
    for reply, shown in ((echo, None), (glossed, glossed)):  # the instruction given back
        assert rendering_shown(icons, reply) == shown

    generator = ScriptedGenerator(conclusions=["手牌上限是十张。"])
    renderer = Renderer(generator)
    again = [quote("Your hand limit is ten cards.")] * 2
    assert [q.rendering for q in renderer.render_quotes(again, "zh")[0]] == ["手牌上限是十张。"] * 2
    assert len(generator.prompts) == 1  # a sentence is rendered once


def test_the_extractive_backend_answers_with_quotes_alone(pipeline: Pipeline) -> None:
    answer = pipeline.ask("What is the hand limit?", "Maximum Apocalypse")
    assert answer.conclusion is None and not answer.abstained and answer.quotes
    assert answer.answer.startswith("Deciding rule: [1]") and answer.quotes[0].deciding
    assert all(q.text in answer.answer for q in answer.quotes)


def test_follow_ups_show_the_earlier_question(settings: Settings) -> None:
    from rag.types import Turn

    generator = ScriptedGenerator()
    pipeline = scripted_pipeline_with(settings, generator)
    history = [Turn("What is the hand limit in Maximum Apocalypse?", "…", "maximum-apocalypse")]
    answer = pipeline.ask("and if I'm starving?", history=history)
    assert answer.game == "maximum-apocalypse"
    shown = generator.prompts[0].messages[-1]["content"]
    assert "Earlier question: <<<What is the hand limit in Maximum Apocalypse?>>>" in shown


def test_a_yes_no_question_gets_the_rule_and_no_untrusted_yes_or_no(settings: Settings) -> None:
    question = "Is there a hand limit?"
    generator = ScriptedGenerator(conclusions=['{"answer": "yes", "conclusion": "{rule}"}'])
    answer = scripted_pipeline_with(settings, generator).ask(question, "MaxApoc")
    assert generator.prompts == []  # no conclusion asked for, so nothing selected for one
    assert answer.conclusion is None and answer.quotes and not answer.abstained
    # The deciding rule is the answer: the player reads its wording, first.
    assert answer.answer.startswith("Deciding rule: [1]")
    assert phrases("en")["read_the_rule_yes_no"] not in answer.answer
    assert ("yes_no", False) in [(c.name, c.passed) for c in answer.checks]

    generation = settings.generation.model_copy(update={"answer_yes_no": True})
    trusting = settings.model_copy(update={"generation": generation})
    generator = ScriptedGenerator(conclusions=['{"answer": "yes", "conclusion": "{rule}"}'])
    answer = scripted_pipeline_with(trusting, generator).ask(question, "MaxApoc")
    assert [p.task for p in generator.prompts] == ["conclude"]
    assert answer.conclusion is not None and answer.conclusion.startswith("Yes")
