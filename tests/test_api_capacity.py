"""Capacity that degrades gracefully: a waiting request is told its place, a client that
leaves gives its place up, and (when the owner allows it) a saturated model still answers
with the verified rule text alone."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from test_api import SUROS_Q, error_of, sse

from rag.pipeline import Pipeline

if TYPE_CHECKING:
    from conftest import SlowGenerator

BODY = {"question": SUROS_Q}


def running_answer(pool: ThreadPoolExecutor, url: str, slow: SlowGenerator) -> Future[Any]:
    """A slow answer that holds the model (its conclusion started) until it ends."""
    answer = pool.submit(httpx.post, f"{url}/v1/ask", json=BODY, timeout=60)
    assert slow.started.wait(10)
    return answer


def test_a_waiting_stream_is_told_its_place(
    serve_api: Any, slow_pipeline: Pipeline, slow: SlowGenerator
) -> None:
    slow.pieces, slow.delay = 10, 0.1
    url = serve_api(slow_pipeline, queue_size=2)
    with ThreadPoolExecutor(1) as pool:
        first = running_answer(pool, url, slow)
        events = sse(httpx.post(f"{url}/v1/ask/stream", json=BODY, timeout=60))
        assert first.result().status_code == 200
    names = [name for name, _ in events]
    assert names[0] == "queued" and events[0][1] == {"position": 1}
    assert names.index("quotes") > max(i for i, n in enumerate(names) if n == "queued")
    assert names[-2:] == ["citations", "done"]
    assert events[-2][1]["timings"]["queue_s"] > 0.3


def test_a_full_line_is_busy_with_when_to_retry(
    serve_api: Any, slow_pipeline: Pipeline, slow: SlowGenerator
) -> None:
    slow.pieces, slow.delay = 10, 0.1
    url = serve_api(slow_pipeline, queue_size=0)
    with ThreadPoolExecutor(1) as pool:
        first = running_answer(pool, url, slow)
        busy = httpx.post(f"{url}/v1/ask/stream", json=BODY)
        error = error_of(busy, 503, "busy")
        assert first.result().status_code == 200
    assert error["retry_after_s"] == int(busy.headers["retry-after"]) >= 1
    assert "position" not in error  # it never had a place


def leave_while_queued_plain(url: str) -> None:
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes the connection
        httpx.post(f"{url}/v1/ask", json=BODY, timeout=httpx.Timeout(5.0, read=0.5))


def leave_while_queued_streaming(url: str) -> None:
    with (
        httpx.Client(timeout=10) as client,
        client.stream("POST", f"{url}/v1/ask/stream", json=BODY) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        assert next(lines) == "event: queued" and next(lines) == 'data: {"position": 1}'
    # leaving the block closes the connection


@pytest.mark.parametrize("leave", [leave_while_queued_plain, leave_while_queued_streaming])
def test_a_client_that_leaves_the_line_frees_its_place(
    serve_api: Any, slow_pipeline: Pipeline, slow: SlowGenerator, leave: Any
) -> None:
    slow.pieces, slow.delay = 30, 0.1  # the first answer holds the model ~3 s
    url = serve_api(slow_pipeline, queue_size=1)  # one place in line
    with ThreadPoolExecutor(1) as pool:
        first = running_answer(pool, url, slow)
        leave(url)
        # The place is free while the first answer still runs: a third request takes it.
        deadline = time.monotonic() + 2
        while (
            third := httpx.post(f"{url}/v1/ask/stream", json=BODY, timeout=60)
        ).status_code == 503:
            assert time.monotonic() < deadline, "the place of the client that left stayed taken"
            time.sleep(0.05)
        events = sse(third)
        assert events[0] == ("queued", {"position": 1})  # only the running answer ahead
        assert events[-1][0] == "done"
        assert first.result().status_code == 200
    assert slow.produced == 2 * slow.pieces  # the one that left never ran


def test_rule_text_alone_when_the_line_is_full(
    serve_api: Any, slow_pipeline: Pipeline, slow: SlowGenerator
) -> None:
    slow.pieces, slow.delay = 30, 0.1
    url = serve_api(slow_pipeline, queue_size=0, rule_text_when_busy=True)
    with ThreadPoolExecutor(1) as pool:
        first = running_answer(pool, url, slow)
        started = time.monotonic()
        quoted = httpx.post(f"{url}/v1/ask", json=BODY, timeout=60)
        took = time.monotonic() - started
        events = sse(httpx.post(f"{url}/v1/ask/stream", json=BODY, timeout=60))
        assert first.result().json()["rule_text_only"] is False
    assert quoted.status_code == 200 and took < 2  # not behind the running answer
    answer = quoted.json()
    assert answer["rule_text_only"] is True and answer["conclusion"] is None
    assert answer["quotes"] and answer["backend"] == "extractive"
    load = answer["checks"][-1]
    assert load["name"] == "load" and load["passed"] is False and "busy" in load["detail"]
    assert answer["answer"].startswith("The server is busy")
    assert "Deciding rule:" in answer["answer"]
    assert [name for name, _ in events] == ["quotes", "citations", "done"]
    assert events[1][1]["rule_text_only"] is True


def test_rule_text_alone_after_waiting_too_long(
    serve_api: Any, slow_pipeline: Pipeline, slow: SlowGenerator
) -> None:
    slow.pieces, slow.delay = 30, 0.1
    url = serve_api(slow_pipeline, queue_size=1, queue_timeout_s=0.5, rule_text_when_busy=True)
    with ThreadPoolExecutor(1) as pool:
        first = running_answer(pool, url, slow)
        events = sse(httpx.post(f"{url}/v1/ask/stream", json=BODY, timeout=60))
        assert first.result().status_code == 200
    assert events[0] == ("queued", {"position": 1})
    assert [name for name, _ in events[1:]] == ["quotes", "citations", "done"]
    answer = events[-2][1]
    assert answer["rule_text_only"] is True and answer["timings"]["queue_s"] >= 0.5
    assert slow.produced == slow.pieces  # the model wrote only the first answer
