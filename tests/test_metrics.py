"""eval.metrics on small hand-made cases; the expected values are worked out in the comments."""

from __future__ import annotations

import pytest

from eval.metrics import (
    ItemScore,
    abstention_correct,
    answer_language,
    build_report,
    contains_any,
    deciding_line,
    facts_covered,
    first_hit_rank,
    hit_at,
    mean,
    percentile,
    reciprocal_rank,
    share,
    summarise,
    supported_citations,
    terms_rendered_otherwise,
)
from rag.prompting import phrases
from rag.reading.glossary import Glossary, Term
from rag.types import Quote

# --- matching ---------------------------------------------------------------------------


def test_evidence_match_collapses_whitespace_and_case() -> None:
    passage = "If you DO NOT have any monster cards\n   attached to you, you may attempt"
    assert contains_any(passage, ["do not have any Monster Cards attached"])
    assert not contains_any(passage, ["monster card attached"])


@pytest.mark.parametrize("needle", ["", "   ", "\n"])
def test_an_empty_needle_matches_nothing(needle: str) -> None:
    assert not contains_any("any text at all", [needle])


def test_first_hit_rank_and_the_retrieval_figures_it_gives() -> None:
    passages = ["Roll the die.", "Draw a card.", "You MAY\nattempt a stealth test.", "stealth"]
    rank = first_hit_rank(passages, ["nowhere", "may attempt a stealth test"])
    assert rank == 3  # the third passage is the first holding an evidence string
    assert not hit_at(rank, 1)
    assert hit_at(rank, 5)
    assert reciprocal_rank(rank) == pytest.approx(1 / 3)


def test_no_hit_scores_zero() -> None:
    rank = first_hit_rank(["Roll the die."], ["stealth"])
    assert rank is None
    assert not hit_at(rank, 5)
    assert reciprocal_rank(rank) == 0.0


def test_key_facts_are_covered_by_any_alternative_case_folded() -> None:
    facts = [["two cards", "2 cards", "两张"], ["DISCARD", "弃"], ["shuffle", "洗牌"]]
    answer = "Conclusion: you draw 2 Cards [1], then discard one [2]."
    # "2 cards" covers fact 1 (case-folded), "discard" fact 2, nothing mentions shuffling.
    assert facts_covered(answer, facts) == (True, True, False)
    assert share(facts_covered(answer, facts)) == pytest.approx(2 / 3)
    # The Chinese wordings count just as well.
    assert facts_covered("结论：抽两张牌，然后弃一张。", facts) == (True, True, False)


@pytest.mark.parametrize(
    ("abstained", "answerable", "correct"),
    [(True, False, True), (False, True, True), (True, True, False), (False, False, False)],
)
def test_abstention_is_correct_when_it_matches_unanswerable(
    abstained: bool, answerable: bool, correct: bool
) -> None:
    assert abstention_correct(abstained, answerable) is correct


def test_supported_citations_count_passages_holding_evidence() -> None:
    cited = ["Each player draws two cards.", "Shuffle the deck.", "draws  TWO cards at once"]
    assert supported_citations(cited, ["draws two cards"]) == 2  # the first and the third


# --- language ---------------------------------------------------------------------------


def test_chinese_answer_naming_cards_in_english_is_chinese() -> None:
    # 13 CJK characters against 1 Latin word ("Stun"): clearly Chinese.
    assert answer_language("结论：你可以打出 Stun 卡 [1]，然后抽 2 张牌。") == "zh"


def test_english_answer_is_english() -> None:
    assert answer_language("Conclusion: you may attack twice [1].") == "en"


def test_english_answer_with_a_chinese_name_stays_english() -> None:
    # 4 CJK characters against 14 Latin words.
    text = "Conclusion: in 末日启示录 you may attack twice when you hold a weapon card [1]."
    assert answer_language(text) == "en"


def test_the_appended_reminder_does_not_make_an_english_answer_chinese() -> None:
    # Left in, the reminder's 16 CJK characters would outweigh the 4 English words.
    text = f"You draw two cards [1].\n\n{phrases('zh')['reminder']}"
    assert answer_language(text) == "en"


def test_quoted_english_rules_inside_a_chinese_answer_do_not_count() -> None:
    quote = "You may move up to two spaces and then attack one adjacent monster once per turn."
    # Counted, the 16 quoted words would outweigh the 6 CJK characters (6/22 < 0.3).
    assert answer_language(f"结论：规则书写道 “{quote}” [1]") == "zh"
    assert answer_language(f'结论：规则书写道 "{quote}" [1]') == "zh"
    assert answer_language(f"结论：规则书写道\n> {quote}\n[1]") == "zh"


def test_english_sentences_under_a_chinese_heading_are_english() -> None:
    text = (
        "结论: You may move up to two spaces on your turn, then attack one adjacent "
        "monster, then draw a card and discard down to your hand limit. [1]"
    )
    assert answer_language(text) == "en"  # 2 CJK characters against 26 words


def test_the_books_word_in_brackets_after_a_term_is_not_prose() -> None:
    text = (
        "Machine translation: Do not count Big Three Winds (三风刻), All Pungs (碰碰和), "
        "Prevalent Wind (圈风刻), Seat Wind (门风刻), Pung of Terminals or Honors (幺九刻)."
    )
    assert answer_language(text) == "en"
    assert answer_language("机器译文：你可以进行潜行判定（Stealth test）（Sneak）。") == "zh"
    # Chinese prose outside brackets still reads as Chinese
    assert answer_language("不计三风刻、碰碰和 (All Pungs)、圈风刻、门风刻、幺九刻。") == "zh"


@pytest.mark.parametrize("text", ["", "[1][2]", "   "])
def test_text_without_letters_is_not_chinese(text: str) -> None:
    assert answer_language(text) == "en"


# --- aggregation ------------------------------------------------------------------------


def test_percentiles_interpolate_between_ranks() -> None:
    # p50 of 1..4: position 3 * 0.5 = 1.5, between 2 and 3 -> 2.5.
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    # p95: position 3 * 0.95 = 2.85, between 3 and 4 -> 3.85.
    assert percentile([1.0, 2.0, 3.0, 4.0], 95) == pytest.approx(3.85)
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) is None


def test_empty_denominators_are_none_not_zero() -> None:
    assert share([]) is None
    assert mean([]) is None
    assert ItemScore(lang="en", game="g", type="lookup", answerable=True).fact_recall is None


A = ItemScore(  # English, answerable, found at once, fully answered
    lang="en",
    game="suros",
    type="lookup",
    answerable=True,
    first_hit=1,
    facts=(True, True),
    abstained_ok=True,
    citations=2,
    supported=2,
    answer_lang="en",
    latency_s=1.0,
    concluded=True,
    deciding_holds=True,
    conclusion_right=True,
)
B = ItemScore(  # Chinese, answerable, found third, half answered, answered in English
    lang="zh",
    game="suros",
    type="condition",
    answerable=True,
    first_hit=3,
    facts=(True, False),
    abstained_ok=True,
    citations=2,
    supported=1,
    answer_lang="en",
    latency_s=3.0,
    concluded=True,  # a conclusion shown over a deciding sentence without the evidence
    deciding_holds=False,
    conclusion_right=False,
)
C = ItemScore(  # English, unanswerable, correctly declined
    lang="en",
    game="deck52-final-bus",
    type="unanswerable",
    answerable=False,
    abstained_ok=True,
    answer_lang="en",
    latency_s=2.0,
)
D = ItemScore(  # Chinese, answerable, failed: game not resolved
    lang="zh",
    game="(unresolved)",
    type="lookup",
    answerable=True,
    facts=(False,),
    error="GameNotFoundError: Which game?",
)


def test_summary_over_hand_made_items() -> None:
    s = summarise([A, B, C, D])
    assert s["n"] == 4
    assert s["errors"] == 1
    # Answerable: A, B, D. hit@1: A -> 1/3; hit@5: A, B -> 2/3; mrr: (1 + 1/3 + 0) / 3 = 4/9.
    assert s["retrieval"] == {"hit@1": 0.3333, "hit@5": 0.6667, "mrr": 0.4444}
    assert s["answer"] == {
        "key_fact_recall": 0.5,  # (1 + 1/2 + 0) / 3 over A, B, D
        "abstention_accuracy": 0.75,  # A, B, C right; D failed: 3/4
        "citation_precision": 0.75,  # (2 + 1) supported of (2 + 2) cited by answerable items
        "language_match": 0.5,  # A and C match; B answered in English, D not at all: 2/4
        "conclusion_shown": 0.6667,  # A and B of the answerable A, B, D
        "deciding_holds_evidence": 0.3333,  # A's; D, failed, shows nothing
        "conclusion_right": 0.5,  # A's of the shown A and B
        "right_way_round": None,  # no probe items
        "probe_conclusion_shown": None,
        "invented_numbers_shown": 0,
        "renderings_shown": 0,  # hand-made items show no rendering
        "renderings_withheld": 0,
        "deciding_rendered": None,
        "deciding_word_by_word": None,
        "terms_rendered_otherwise": 0,
    }
    # Latencies of the answered items 1, 3, 2: p50 = 2; p95 at position 1.9 -> 2 + 0.9.
    assert s["latency"] == {"p50_s": 2.0, "p95_s": 2.9}


def test_report_groups_by_language_game_and_type() -> None:
    report = build_report([A, B, C, D])
    en, zh = report["by_lang"]["en"], report["by_lang"]["zh"]
    # en: A and C; only A is answerable, and it is perfect.
    assert en["retrieval"] == {"hit@1": 1.0, "hit@5": 1.0, "mrr": 1.0}
    assert en["answer"]["abstention_accuracy"] == 1.0
    assert en["latency"] == {"p50_s": 1.5, "p95_s": 1.95}  # 1 + 0.95 * (2 - 1)
    # zh: B and D. mrr (1/3 + 0) / 2 = 1/6; facts (1/2 + 0) / 2; cited 1 of 2; no match.
    assert zh["retrieval"] == {"hit@1": 0.0, "hit@5": 0.5, "mrr": 0.1667}
    assert zh["answer"] == {
        "key_fact_recall": 0.25,
        "abstention_accuracy": 0.5,
        "citation_precision": 0.5,
        "language_match": 0.0,
        "conclusion_shown": 0.5,  # B's
        "deciding_holds_evidence": 0.0,
        "conclusion_right": 0.0,
        "right_way_round": None,  # no probe items
        "probe_conclusion_shown": None,
        "invented_numbers_shown": 0,
        "renderings_shown": 0,  # hand-made items show no rendering
        "renderings_withheld": 0,
        "deciding_rendered": None,
        "deciding_word_by_word": None,
        "terms_rendered_otherwise": 0,
    }
    assert list(report["by_game"]) == ["(unresolved)", "deck52-final-bus", "suros"]
    assert report["by_game"]["suros"]["n"] == 2
    assert sorted(report["by_type"]) == ["condition", "lookup", "unanswerable"]


def test_a_group_without_answerable_items_reports_null_retrieval() -> None:
    declined = build_report([A, B, C, D])["by_type"]["unanswerable"]
    assert declined["retrieval"] == {"hit@1": None, "hit@5": None, "mrr": None}
    assert declined["answer"] == {
        "key_fact_recall": None,
        "abstention_accuracy": 1.0,
        "citation_precision": None,
        "language_match": 1.0,
        "conclusion_shown": None,  # nothing answerable
        "deciding_holds_evidence": None,
        "conclusion_right": None,  # no conclusion shown
        "right_way_round": None,  # no probe items
        "probe_conclusion_shown": None,
        "invented_numbers_shown": 0,
        "renderings_shown": 0,  # hand-made items show no rendering
        "renderings_withheld": 0,
        "deciding_rendered": None,
        "deciding_word_by_word": None,
        "terms_rendered_otherwise": 0,
    }


def test_empty_report_keeps_both_languages_with_nulls() -> None:
    report = build_report([])
    assert report["n"] == 0
    assert set(report["by_lang"]) == {"en", "zh"}
    assert report["by_lang"]["zh"]["retrieval"]["mrr"] is None
    assert report["latency"] == {"p50_s": None, "p95_s": None}
    assert report["by_game"] == {}


def test_an_extra_k_adds_its_hit_rate() -> None:
    # k = 3: A (rank 1) and B (rank 3) hit, D does not: 2/3.
    retrieval = build_report([A, B, D], ks=[3])["retrieval"]
    assert list(retrieval) == ["hit@1", "hit@3", "hit@5", "mrr"]
    assert retrieval["hit@3"] == 0.6667


def test_item_json_leaves_retrieval_unmeasured_for_unanswerable_items() -> None:
    metrics = C.to_json([1, 5])
    assert metrics["hit@1"] is None
    assert metrics["reciprocal_rank"] is None
    assert metrics["language_match"] is True
    assert B.to_json([1, 5])["hit@5"] is True


# --- what an asker in the other language reads beside the rule ---------------------------

RULE = "召唤怪兽时，可以把怪兽放置到主怪兽区域。"
GLOSSARY = Glossary("zh", (Term("主怪兽区域", "Main Monster Zone", "book"),))


def quote(text: str = RULE, *, deciding: bool = True, **fields: object) -> Quote:
    return Quote(1, "g:1", "g", "Game › Zones", 2, text, deciding=deciding, **fields)  # type: ignore[arg-type]


def test_the_deciding_line_says_what_stands_beside_a_sentence_in_the_other_language() -> None:
    rendered = quote(rendering="When summoning, you may place it in the Main Monster Zone.")
    glossed = quote(word_by_word="summon · monster · Main Monster Zone")
    assert deciding_line([rendered], "en") == "rendering"
    assert deciding_line([glossed], "en") == "word_by_word"
    assert deciding_line([quote()], "en") == "none"
    # in the asker's own language, or with no deciding sentence, there is nothing to count
    assert deciding_line([quote()], "zh") is None
    assert deciding_line([quote(deciding=False)], "en") is None


def test_a_rendering_naming_a_glossary_term_otherwise_is_counted_once() -> None:
    kept = quote(rendering="You may place the monster in the Main Monster Zone.")
    changed = quote(rendering="You may place the monster in the main beast area.")
    assert terms_rendered_otherwise([kept], GLOSSARY) == 0
    assert terms_rendered_otherwise([changed], GLOSSARY) == 1
    assert terms_rendered_otherwise([changed, changed], GLOSSARY) == 1
    assert terms_rendered_otherwise([changed], None) == 0
    # a quote with no rendering shown says no term at all
    assert terms_rendered_otherwise([quote()], GLOSSARY) == 0


def test_the_summary_shares_are_over_deciding_sentences_in_the_other_language() -> None:
    def score(line: str | None, otherwise: int = 0) -> ItemScore:
        return ItemScore("en", "g", "lookup", True, deciding_line=line, terms_otherwise=otherwise)

    answer = summarise([score("rendering"), score("word_by_word", 2), score("none"), score(None)])[
        "answer"
    ]
    assert answer["deciding_rendered"] == round(1 / 3, 4)
    assert answer["deciding_word_by_word"] == round(1 / 3, 4)
    assert answer["terms_rendered_otherwise"] == 2
    assert summarise([score(None)])["answer"]["deciding_rendered"] is None
