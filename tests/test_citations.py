from collections.abc import Sequence

import numpy as np

from rag.citations import recite


def scorer(table: dict[str, list[float]]):
    """Support scores looked up by claim, so each test states what supports what."""

    def support(claims: Sequence[str]) -> np.ndarray:
        return np.array([table[claim] for claim in claims], dtype=np.float32)

    return support


def test_markers_of_passages_that_do_not_support_the_claim_are_dropped() -> None:
    support = scorer({"You may attempt a stealth test.": [0.6, 0.95, 0.5]})
    assert recite("You may attempt a stealth test. [1] [2] [3]", support) == (
        "You may attempt a stealth test. [2]"
    )


def test_a_claim_citing_only_the_wrong_passage_cites_the_best_one() -> None:
    support = scorer({"结论: 可以进行潜行判定。": [0.69, 0.58, 0.40, 0.82]})
    assert recite("结论: 可以进行潜行判定。 [1]", support) == "结论: 可以进行潜行判定。 [4]"


def test_passages_supporting_about_as_well_as_the_best_are_kept() -> None:
    support = scorer({"Rest when tired.": [0.85, 0.78, 0.4]})
    assert recite("Rest when tired. [2][1][3]", support) == "Rest when tired. [2][1]"


def test_each_claim_is_checked_on_its_own() -> None:
    support = scorer({"A is true.": [0.9, 0.2], "B is true.": [0.3, 0.8], "- C then D": [0.5, 0.5]})
    text = "A is true. [2] B is true. [2]\n- C then D [1]\nNo marker here."
    assert recite(text, support) == "A is true. [1] B is true. [2]\n- C then D [1]\nNo marker here."


def test_text_without_markers_or_with_too_short_claims_is_unchanged() -> None:
    def support(claims: Sequence[str]) -> np.ndarray:
        raise AssertionError(f"nothing to check, yet asked about {claims}")

    for text in ("No markers at all.", "1. [2]", ""):
        assert recite(text, support) == text
