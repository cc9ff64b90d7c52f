"""The chat route driven by the real `openai` Python client over a live server: what a
website's standard chat UI sees (streaming and not, sources in the text, usage, errors)."""

from __future__ import annotations

from typing import Any

import pytest
from test_api import SUROS_Q

from rag.pipeline import Pipeline

openai = pytest.importorskip("openai")


@pytest.fixture
def client(serve_api: Any, pipeline: Pipeline) -> Any:
    return openai.OpenAI(base_url=f"{serve_api(pipeline)}/v1", api_key="unused", max_retries=0)


def _ask(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def test_an_answer_with_its_sources_and_usage(client: Any) -> None:
    completion = client.chat.completions.create(model="rulekeeper", messages=_ask(SUROS_Q))
    message = completion.choices[0].message
    assert message.role == "assistant" and completion.choices[0].finish_reason == "stop"
    assert "Sources:" in message.content and "Suros ›" in message.content
    usage = completion.usage
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_a_streamed_answer_is_the_same_text(client: Any) -> None:
    whole = client.chat.completions.create(model="suros", messages=_ask(SUROS_Q))
    stream = client.chat.completions.create(model="suros", messages=_ask(SUROS_Q), stream=True)
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    assert len(pieces) > 1 and "".join(pieces) == whole.choices[0].message.content


def test_errors_arrive_as_the_clients_own_exceptions(client: Any) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-4o", messages=_ask(SUROS_Q))
    assert unknown.value.code == "model_not_found" and "gpt-4o" in unknown.value.message
    with pytest.raises(openai.UnprocessableEntityError) as empty:
        client.chat.completions.create(model="rulekeeper", messages=[])
    assert "messages" in empty.value.message  # read from our {"error": {"message": …}}
