"""The answer's JSON contract has one source: `Answer.to_json()` (`rules ask --json`), which the
API's AskResponse validates, adding only its own fields. Tools parse these names."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from api.schemas import (
    AskResponse,
    CheckOut,
    CitationOut,
    PassageOut,
    QuoteOut,
    QuotesEvent,
    TimingsOut,
)
from api.waiting import Waited
from rag.pipeline import Pipeline
from rag.types import Answer, StreamEvent

API_ONLY = {"conversation_id", "rule_text_only"}
TIMINGS_API_ONLY = {"queue_s", "load_s"}  # the wait before the pipeline ran
PARTS: dict[str, type[BaseModel]] = {
    "citations": CitationOut,
    "passages": PassageOut,
    "quotes": QuoteOut,
    "checks": CheckOut,
}


@pytest.fixture
def answer(pipeline: Pipeline) -> Answer:
    """An answer with every part, a quote rendered and one withheld among them."""
    answered = pipeline.ask("How much HP does each player start with?", "suros")
    assert answered.citations and answered.passages and answered.checks
    assert len(answered.quotes) >= 2
    first, second, *rest = answered.quotes
    answered.quotes = [
        replace(first, rendering="每名玩家开始时有 HP。"),
        replace(second, rendering_withheld=True),
        *rest,
    ]
    return answered


def test_every_key_of_the_answer_is_a_field_of_the_api_response_and_back(
    answer: Answer,
) -> None:
    data = answer.to_json()
    assert set(data) == set(AskResponse.model_fields) - API_ONLY
    for key, part in PARTS.items():
        assert data[key], key
        for item in data[key]:
            assert set(item) == set(part.model_fields), key
    assert set(data["timings"]) == set(TimingsOut.model_fields) - TIMINGS_API_ONLY


def test_a_rendering_keeps_its_contract_name(answer: Answer) -> None:
    rendered, withheld = answer.to_json()["quotes"][:2]
    assert rendered["translation"] == "每名玩家开始时有 HP。" and "rendering" not in rendered
    assert withheld["translation_withheld"] is True
    assert Answer.from_json(answer.to_json()).quotes == answer.quotes  # read back alike
    event = QuotesEvent.of(StreamEvent("quotes", text="", quotes=tuple(answer.quotes)))
    assert event.quotes[0].translation == "每名玩家开始时有 HP。"


@pytest.mark.parametrize("part", [None, "quotes", "citations", "checks", "passages"])
def test_a_key_the_api_response_does_not_declare_fails_the_answer(
    answer: Answer, part: str | None
) -> None:
    """A key added to `to_json()` (or to one of its parts) alone is refused, not dropped."""
    data: dict[str, Any] = answer.to_json()
    if part is None:
        data["undeclared"] = 1
    else:
        data[part][0]["undeclared"] = 1
    AskResponse.of(answer, "c_7Qm2xY9kLp3Z", Waited())  # as it is, it validates
    with pytest.raises(ValidationError, match="undeclared"):
        AskResponse.model_validate({**data, "conversation_id": None})
