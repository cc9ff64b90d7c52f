from conftest import make_hits

from rag.answer import assemble_answer, normalise_markers
from rag.prompting import NOT_COVERED_SENTINEL, build_prompt

HITS = make_hits(
    "Roll the two Spawn dice to attempt a stealth test.",
    "Your hand limit is 10 cards.",
    "Monsters activate from left to right.",
)


def _assemble(text: str, lang: str = "en", given: int = 2):
    prompt = build_prompt("q?", lang, HITS[:given], game_title="Game", passage_chars=500)  # type: ignore[arg-type]
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
