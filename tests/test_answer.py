from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from conftest import make_hits

from rag.answer import assemble_answer, invented_numbers, normalise_markers
from rag.prompting import NOT_COVERED_SENTINEL, build_prompt, whole_passages
from rag.types import Hit

HITS = make_hits(
    "Roll the two Spawn dice to attempt a stealth test.",
    "Your hand limit is 10 cards.",
    "Monsters activate from left to right.",
)


def _assemble(text: str, lang: str = "en", given: int = 2):
    prompt = build_prompt("q?", lang, whole_passages(HITS[:given], 500), game_title="Game")  # type: ignore[arg-type]
    return assemble_answer("q?", "g", lang, text, HITS, prompt, "test")  # type: ignore[arg-type]


def test_markers_are_normalised_and_out_of_range_dropped() -> None:
    text, cited = normalise_markers("A [1, 2]. B 【2】. C [7]. D [passage 1].", valid=2)
    assert text == "A [1][2]. B [2]. C . D [1]."
    assert cited == [1, 2]


def test_citations_only_for_given_passages_and_each_marker_has_one() -> None:
    answer = _assemble("Hand limit is 10 [2]. Monsters go left to right [3].", given=2)
    assert [c.n for c in answer.citations] == [2]
    assert "[3]" not in answer.answer
    assert answer.citations[0].chunk_id == "g:2"
    assert answer.citations[0].section == "Game › Section 2"
    ids = {h.chunk.id for h in answer.passages}
    assert all(c.chunk_id in ids for c in answer.citations)


def test_answer_without_markers_is_repaired_with_best_overlap() -> None:
    answer = _assemble("You roll the two spawn dice for a stealth test.\nMore text.")
    assert answer.answer.startswith("You roll the two spawn dice for a stealth test. [1]")
    assert [c.n for c in answer.citations] == [1]


def test_sentinel_abstains_in_the_question_language() -> None:
    answer = _assemble(NOT_COVERED_SENTINEL, lang="zh")
    assert answer.abstained
    assert answer.citations == []
    assert "规则书中没有找到" in answer.answer
    assert answer.passages == HITS  # nearest passages kept for the reader


def test_reminder_added_once() -> None:
    answer = _assemble("Limit 10 [2].")
    assert answer.answer.count("the rulebook prevails") == 1
    again = _assemble(answer.answer)
    assert again.answer.count("the rulebook prevails") == 1


def test_json_contract_keys() -> None:
    data = _assemble("Limit 10 [2].").to_json()
    assert list(data)[:8] == [
        "question",
        "game",
        "lang",
        "answer",
        "abstained",
        "citations",
        "passages",
        "timings",
    ]
    assert set(data["citations"][0]) == {"n", "chunk_id", "game", "section", "text"}
    assert set(data["passages"][0]) == {"rank", "chunk_id", "game", "section", "text", "score"}
    assert set(data["timings"]) == {"retrieve_s", "generate_s", "total_s"}


def test_padding_lines_go_with_their_markers() -> None:
    answer = _assemble(
        "Conclusion: <Hand limit is 10.> [2]\n"
        "Procedure: [1]\n"
        "Conditions and exceptions: None. [1]\n"
        "Not in the rulebook: <>\n"
        "Conditions and exceptions: [only on your turn] [2]\n"
        "[1] [2]"
    )
    assert answer.answer.splitlines()[0] == "Conclusion: Hand limit is 10. [2]"
    assert "None" not in answer.answer and "Procedure" not in answer.answer
    assert "Conditions and exceptions: only on your turn [2]" in answer.answer
    assert [c.n for c in answer.citations] == [2]  # the padding's [1] cited nothing


def test_an_answer_of_counted_markers_cut_off_by_the_loop_guard_abstains() -> None:
    answer = _assemble("结论: [1] [2] [3] [4]    [8", lang="zh")
    assert answer.abstained and answer.citations == []
    kept = _assemble("Conclusion: Hand limit is 10. [2] [", given=2)
    assert kept.answer.startswith("Conclusion: Hand limit is 10. [2]\n")


def test_chinese_filler_and_repeated_lines_are_dropped() -> None:
    answer = _assemble(
        "结论: 手牌上限是10张。[2]\n条件与例外: 手牌上限是10张。[2]\n规则书未提及: 无。\n"
        "具体做法: 没有条件或例外。[1]\n规则书未提及: 没有规则书未提及的内容。",
        lang="zh",
    )
    assert answer.answer.splitlines()[0] == "结论: 手牌上限是10张。[2]"
    assert answer.answer.splitlines()[1:] == ["", "本内容仅供参考，如有冲突以说明书为准。"]


def test_a_heading_over_a_list_stays() -> None:
    answer = _assemble("Conclusion: Yes. [1]\nConditions and exceptions:\n- Only on your turn. [2]")
    assert "Conditions and exceptions:\n- Only on your turn. [2]" in answer.answer


def test_an_answer_of_only_padding_or_saying_no_passage_answers_abstains() -> None:
    assert _assemble("Conclusion: [1] [2]\nProcedure: None").abstained
    assert _assemble("Conclusion: No passage answers the question. [1]").abstained


def test_angle_brackets_inside_text_are_kept() -> None:
    answer = _assemble("Conclusion: keep <10 cards, draw >two [2]")
    assert answer.answer.startswith("Conclusion: keep <10 cards, draw >two [2]")


def test_a_number_no_passage_states_makes_the_answer_abstain() -> None:
    # HITS state "two" (passage 1) and "10" (passage 2) only.
    assert _assemble("Conclusion: 4 tadpoles [1]").abstained
    assert not _assemble("Conclusion: 10 cards [2]").abstained
    assert not _assemble("Conclusion: roll 2 dice [1]").abstained  # "two" in the rule
    # only the conclusion is checked: later lines may count steps
    assert not _assemble(
        "Conclusion: roll the two dice [1]\nProcedure: 3. then compare [1]"
    ).abstained


def test_invented_numbers_ignores_markers_and_section_numbers() -> None:
    hit = make_hits("Pick a starting player.")[0]
    numbered = Hit(replace(hit.chunk, section=("Game", "7. Pick a starting player")), 1.0, 1, 0.8)
    assert invented_numbers("Conclusion: see step 7 [1][2]", [numbered]) == set()
    assert invented_numbers("Conclusion: eleven or 12", [numbered]) == {"11", "12"}
    assert invented_numbers("Conclusion: roll a D6, gain 3AP", [numbered]) == {"3"}


def _support_for_passage(best: int):
    """A support scorer under which passage `best` (1-based) supports every claim."""

    def support(claims: Sequence[str]) -> np.ndarray:
        scores = np.full((len(claims), 2), 0.3, dtype=np.float32)
        scores[:, best - 1] = 0.9
        return scores

    return support


def test_with_a_support_scorer_claims_cite_the_passage_supporting_them() -> None:
    prompt = build_prompt("q?", "zh", whole_passages(HITS[:2], 500), game_title="Game")
    cited_wrong = "结论: 手牌上限是十张。 [1]"
    answer = assemble_answer(
        "q?", "g", "zh", cited_wrong, HITS, prompt, "test", support=_support_for_passage(2)
    )
    assert answer.answer.startswith("结论: 手牌上限是十张。 [2]")
    assert [c.n for c in answer.citations] == [2]


def test_with_a_support_scorer_an_unmarked_answer_cites_across_languages() -> None:
    """Word overlap cannot match a Chinese line to English passages; the scorer can."""
    prompt = build_prompt("q?", "zh", whole_passages(HITS[:2], 500), game_title="Game")
    answer = assemble_answer(
        "q?",
        "g",
        "zh",
        "结论: 手牌上限是十张。\n其他",
        HITS,
        prompt,
        "test",
        support=_support_for_passage(2),
    )
    assert answer.answer.startswith("结论: 手牌上限是十张。 [2]\n其他")
