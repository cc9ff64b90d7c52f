"""Ready means ready: /readyz turns 200 only after the index and models are loaded and a
warm-up ran; an answer's timings account for the time it waited in the queue."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest
from conftest import FakeEmbedder
from fastapi.testclient import TestClient
from test_api import SUROS_Q

from api import runtime
from api.app import create_app
from rag.errors import ModelError
from rag.generation import ExtractiveGenerator, LlamaCppGenerator
from rag.pipeline import Pipeline
from rag.prompting import phrases, system_message

if TYPE_CHECKING:
    from conftest import SlowGenerator


class GatedEmbedder(FakeEmbedder):
    """Its first query waits for the gate, as a real model's first use waits for loading."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.queries = 0

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        if query:
            self.gate.wait(30)
            self.queries += 1
        return super()._encode(texts, query=query)


class WarmedGenerator(ExtractiveGenerator):
    def __init__(self) -> None:
        self.warmed = False

    def warm_up(self) -> None:
        self.warmed = True


def test_ready_only_after_the_models_are_loaded_and_warmed(pipeline: Pipeline) -> None:
    embedder, generator = GatedEmbedder(), WarmedGenerator()
    gated = Pipeline(pipeline.settings, embedder=embedder, generator=generator)
    with TestClient(create_app(pipeline=gated)) as client:
        loading = client.get("/readyz")
        assert loading.status_code == 503 and loading.json()["status"] == "loading"
        asked = client.post("/v1/ask", json={"question": SUROS_Q})
        assert asked.status_code == 503 and asked.json()["error"]["type"] == "not_ready"
        assert not generator.warmed
        embedder.gate.set()
        deadline = time.monotonic() + 30
        while (ready := client.get("/readyz")).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert generator.warmed and embedder.queries >= 1  # the embedder has run
        assert ready.json()["warm_up_s"] > 0
        timings = client.post("/v1/ask", json={"question": SUROS_Q}).json()["timings"]
        assert timings["load_s"] < 0.05 and timings["queue_s"] < 0.05


def test_a_failed_warm_up_is_retried_until_it_succeeds(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    class ServerNotUpYet(ExtractiveGenerator):
        """Fails its first warm-up, as an inference server still starting does."""

        def __init__(self) -> None:
            self.attempts = 0

        def warm_up(self) -> None:
            self.attempts += 1
            if self.attempts == 1:
                raise ModelError("The model server at http://127.0.0.1:8080/v1 is not reachable.")

    monkeypatch.setattr(runtime, "WARM_UP_RETRY_S", 1.0)
    generator = ServerNotUpYet()
    late = Pipeline(pipeline.settings, embedder=pipeline.embedder, generator=generator)
    with TestClient(create_app(pipeline=late)) as client:
        deadline = time.monotonic() + 30
        while (ready := client.get("/readyz")).json()["status"] == "loading":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        failed = ready.json()  # between the failure and the retry, a second later
        assert ready.status_code == 503 and failed["status"] == "failed"
        assert "not reachable" in failed["error"] and generator.attempts == 1
        while (ready := client.get("/readyz")).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert generator.attempts == 2 and ready.json()["error"] is None


def test_queue_time_is_accounted_for(
    serve_api: Any, slow_pipeline: Pipeline, slow: SlowGenerator
) -> None:
    slow.pieces, slow.delay = 8, 0.1  # each answer takes about a second
    url = serve_api(slow_pipeline, queue_size=2)

    def ask() -> tuple[float, dict[str, float]]:
        started = time.monotonic()
        answer = httpx.post(f"{url}/v1/ask", json={"question": SUROS_Q}, timeout=30).json()
        return time.monotonic() - started, answer["timings"]

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(ask)
        assert slow.started.wait(10)
        second = pool.submit(ask)
        results = [first.result(), second.result()]
    _, timings = results[1]
    assert timings["queue_s"] > 0.2  # behind the first answer
    for elapsed, t in results:
        parts = t["queue_s"] + t["load_s"] + t["retrieve_s"] + t["generate_s"]
        assert parts <= t["total_s"] + 0.001 and t["total_s"] - parts < 0.1
        # The client saw little beyond it (HTTP and JSON; a loaded machine stretches them).
        assert elapsed - t["total_s"] < 0.25 + 0.2 * elapsed


def test_the_llm_warm_up_reads_the_system_prompt(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []

    class FakeLlama:
        def create_chat_completion(self, **kwargs: Any) -> Iterator[Any]:
            calls.append(kwargs)
            return iter(())

    llm = LlamaCppGenerator("fake", tmp_path / "none.gguf")
    llm._llm = FakeLlama()
    llm.warm_up()
    assert calls == [{"messages": [system_message()], "max_tokens": 1}]


def test_a_request_timed_out_in_the_queue_is_busy_not_slow(
    serve_api: Any, slow_pipeline: Pipeline, slow: SlowGenerator
) -> None:
    slow.pieces, slow.delay = 3, 2.0  # the model stays busy ~2 s past a cancellation
    url = serve_api(slow_pipeline, queue_size=1, queue_timeout_s=0.5, timeout_s=3.0)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(httpx.post, f"{url}/v1/ask", json={"question": SUROS_Q}, timeout=30)
        assert slow.started.wait(10)
        started = time.monotonic()
        queued = httpx.post(f"{url}/v1/ask", json={"question": SUROS_Q}, timeout=30)
        waited = time.monotonic() - started
        slow_answer = running.result().json()
    assert queued.status_code == 200 and 0.4 < waited < 2.0  # its own limit, not timeout_s
    answer = queued.json()
    assert answer["rule_text_only"] is True and answer["checks"][-1]["name"] == "load"
    assert answer["answer"].startswith(phrases("en")["no_conclusion_busy"])
    assert int(queued.headers["retry-after"]) >= 1
    # It was running: the conclusion itself was too slow, and was stopped.
    assert slow_answer["rule_text_only"] is True
    assert slow_answer["answer"].startswith(phrases("en")["no_conclusion_slow"])


def test_time_in_line_does_not_count_against_the_answer_time_limit(
    serve_api: Any, slow_pipeline: Pipeline, slow: SlowGenerator
) -> None:
    slow.pieces, slow.delay = 1, 2.0  # each answer takes ~2 s of the model's time
    url = serve_api(slow_pipeline, queue_size=1, queue_timeout_s=10.0, timeout_s=2.5)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(httpx.post, f"{url}/v1/ask", json={"question": SUROS_Q}, timeout=30)
        assert slow.started.wait(10)
        second = pool.submit(httpx.post, f"{url}/v1/ask", json={"question": SUROS_Q}, timeout=30)
        answers = [first.result(), second.result()]
    assert [a.status_code for a in answers] == [200, 200]
    timings = answers[1].json()["timings"]
    assert timings["queue_s"] > 0.5 and timings["total_s"] > 2.5  # past timeout_s in all
