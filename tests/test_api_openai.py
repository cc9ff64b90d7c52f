"""The OpenAI-compatible routes as a standard chat client sees them, over a live server.

These tests speak the wire protocol with httpx, byte by byte (usage in a stream, the error
shape, `data: [DONE]`); tests/test_api_openai_client.py drives the same routes with the
real `openai` package.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import DEFAULT_SELECTION
from test_api import GAMES, SUROS_Q, sse
from test_ingest import _write_pdf

from api.routes.chat import estimated_tokens
from rag.generation import Generator
from rag.pipeline import Pipeline
from rag.prompting import Prompt

CHAT = "/v1/chat/completions"
OPENAI_ERROR_KEYS = {"message", "type", "param", "code"}


def chat(question: str, model: str = "rulekeeper", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": question}], **extra}


def openai_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """OpenAI's error shape: the openai package reads `error.message`, `type` and `code`."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) - {"games"} == OPENAI_ERROR_KEYS, error
    assert error["code"] == code and error["message"] and "Traceback" not in response.text
    assert error["type"] in {
        "invalid_request_error", "authentication_error", "permission_error",
        "rate_limit_error", "server_error",
    }  # fmt: skip
    return dict(error)


@pytest.fixture
def client(serve_api: Any, pipeline: Pipeline) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=serve_api(pipeline), timeout=30) as client:
        yield client


@pytest.fixture
def paged_pipeline(pipeline: Pipeline, tmp_path: Path) -> Pipeline:
    """The built-in books (plain text, no pages) and a PDF one, whose passages have pages."""
    pdf = tmp_path / "space.pdf"
    _write_pdf(pdf)
    pipeline.add_book(pdf, "Space Race")
    return pipeline


def test_the_message_ends_with_its_sources_and_usage_is_counted(
    serve_api: Any, paged_pipeline: Pipeline
) -> None:
    with httpx.Client(base_url=serve_api(paged_pipeline), timeout=30) as client:
        body = chat("How many cards does each player get at setup?", "space-race")
        completion = client.post(CHAT, json=body).json()
        content = completion["choices"][0]["message"]["content"]
        answer = completion["rulekeeper"]
        assert content.startswith(answer["answer"] + "\n\nSources:\n")
        sources = content.split("\n\nSources:\n", 1)[1].split("\n")
        listing = client.get("/v1/games/space-race/sections").json()["sections"]
        pages = {s["id"]: s["page"] for s in listing}
        expected = [
            f"[{c['n']}] {c['section']}, p. {pages[c['chunk_id']]}" for c in answer["citations"]
        ]
        assert sources == expected and "Space Race › Setup, p. 1" in sources[0]
        usage = completion["usage"]
        assert usage["prompt_tokens"] == estimated_tokens(body["messages"][0]["content"])
        assert usage["completion_tokens"] == estimated_tokens(content)
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        # A book without pages: the section path alone.
        suros = client.post(CHAT, json=chat(SUROS_Q)).json()
        listed = suros["choices"][0]["message"]["content"].split("Sources:\n", 1)[1]
        assert listed.split("\n")[0] == "[1] " + suros["rulekeeper"]["citations"][0]["section"]


def test_sources_can_be_turned_off(serve_api: Any, pipeline: Pipeline) -> None:
    with httpx.Client(base_url=serve_api(pipeline, chat_sources=False), timeout=30) as client:
        completion = client.post(CHAT, json=chat(SUROS_Q)).json()
        assert completion["choices"][0]["message"]["content"] == completion["rulekeeper"]["answer"]


def test_chinese_answers_list_their_sources_in_chinese(client: httpx.Client) -> None:
    completion = client.post(CHAT, json=chat("Suros 每个玩家开始时有多少生命值？")).json()
    assert completion["rulekeeper"]["lang"] == "zh"
    assert "\n\n来源：\n[1] " in completion["choices"][0]["message"]["content"]


def test_stream_ends_with_sources_then_usage_then_done(client: httpx.Client) -> None:
    body = chat(SUROS_Q, "suros", stream=True, stream_options={"include_usage": True})
    events = [data for _, data in sse(client.post(CHAT, json=body))]
    assert events[-1] == "[DONE]"
    *chunks, usage_chunk = events[:-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["total_tokens"] > 0
    text = "".join(c["choices"][0]["delta"]["content"] or "" for c in chunks)
    answer = chunks[-1]["rulekeeper"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert text.startswith(answer["answer"] + "\n\nSources:\n[1] ")
    assert usage_chunk["usage"]["completion_tokens"] == estimated_tokens(text)
    assert all(c["usage"] is None for c in chunks)  # as OpenAI: only when asked, only last
    plain = [data for _, data in sse(client.post(CHAT, json={**body, "stream_options": None}))]
    assert all(c["choices"] for c in plain[:-1])


def test_models_are_the_service_and_its_games(client: httpx.Client) -> None:
    for model in ("suros", "Suros", "SUROS", "deck52"):  # slug, title, any case, alias
        response = client.post(CHAT, json=chat("How much HP does each player start with?", model))
        assert response.status_code == 200, (model, response.text)
        assert response.json()["model"] == model
    for model in ("gpt-4o", "rulekeeper-2", ""):
        error = openai_error(client.post(CHAT, json=chat(SUROS_Q, model)), 404, "model_not_found")
        assert error["type"] == "invalid_request_error" and error["param"] == "model"
        assert "/v1/models" in error["message"]
    # Naming the game elsewhere does not make an unknown model acceptable.
    body = chat(SUROS_Q, "gpt-4o", game="suros")
    openai_error(client.post(CHAT, json=body), 404, "model_not_found")


def test_every_chat_error_is_in_openai_shape(serve_api: Any, pipeline: Pipeline) -> None:
    url = serve_api(pipeline, api_keys=["secret"], max_body_bytes=2048, key_rate_limit_per_minute=5)
    key = {"Authorization": "Bearer secret"}
    with httpx.Client(base_url=url, timeout=30) as client:
        error = openai_error(client.post(CHAT, json=chat(SUROS_Q)), 401, "unauthorized")
        assert error["type"] == "authentication_error"
        invalid = client.post(CHAT, json={"messages": "hi"}, headers=key)
        openai_error(invalid, 422, "invalid_request")
        big = chat("q" * 3000)
        openai_error(client.post(CHAT, json=big, headers=key), 413, "payload_too_large")
        unplaced = client.post(CHAT, json=chat("How do I win?"), headers=key)
        error = openai_error(unplaced, 404, "game_not_found")
        assert "--" not in error["message"] and set(error["games"]) == GAMES
        for _ in range(3):
            client.get("/v1/models", headers=key)
        limited = openai_error(client.get("/v1/models", headers=key), 429, "rate_limited")
        assert limited["type"] == "rate_limit_error"
        # The Rulekeeper routes keep their own shape.
        own = client.post("/v1/ask", json={"question": "Hi?"}, headers=key).json()["error"]
        assert set(own) == {"type", "message", "retry_after_s"} and own["retry_after_s"] >= 1


def test_an_error_mid_stream_is_in_openai_shape(serve_api: Any, pipeline: Pipeline) -> None:
    class Failing(Generator):
        """Selects, then fails while concluding: after the stream has started."""

        name = "failing"

        def stream(self, prompt: Prompt) -> Iterator[str]:
            if prompt.task == "select":
                yield DEFAULT_SELECTION
                return
            raise RuntimeError("secret internals")

    broken = Pipeline(pipeline.settings, embedder=pipeline.embedder, generator=Failing())
    with httpx.Client(base_url=serve_api(broken), timeout=30) as client:
        response = client.post(CHAT, json=chat(SUROS_Q, stream=True))
        assert response.status_code == 200
        error = [data for _, data in sse(response)][-1]["error"]
        assert set(error) == OPENAI_ERROR_KEYS and error["code"] == "internal_error"
        assert error["type"] == "server_error" and "secret" not in response.text


def test_unplaced_questions_do_not_name_command_line_flags(client: httpx.Client) -> None:
    for path, body in (("/v1/ask", {"question": "How do I win?"}), (CHAT, chat("How do I win?"))):
        message = client.post(path, json=body).json()["error"]["message"]
        assert message.startswith("Which game?") and not re.search(r"--\w", message)
        assert "`game`" in message
