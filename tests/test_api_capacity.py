"""Capacity that degrades gracefully: the rule text never waits for the model, a waiting
conclusion is told its place, a client that leaves or a conclusion that runs too long frees
the model at once, and when the model cannot be had in time the rule text alone answers;
only a full line for the rule text itself is refused, with when to retry."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from conftest import DEFAULT_SELECTION, REAL_MODELS_DIR, FakeEmbedder, first_rule
from test_api import SUROS_Q, sse

from rag.generation import (
    PROMPT_SLICE_TOKENS,
    ExtractiveGenerator,
    Generator,
    LlamaCppGenerator,
    Stopped,
)
from rag.pipeline import Pipeline
from rag.prompting import Prompt, phrases, system_message

if TYPE_CHECKING:
    from conftest import SlowGenerator

BODY = {"question": SUROS_Q}
BUSY = phrases("en")["no_conclusion_busy"]
SLOW = phrases("en")["no_conclusion_slow"]


class HeldGenerator(Generator):
    """Selects at once; a conclusion waits until the test releases it, then restates the
    first rule word by word: while it waits, it holds the model."""

    name = "held"

    def __init__(self) -> None:
        self.concluding = threading.Event()
        self.release = threading.Event()
        self.conclusions = 0

    def stream(self, prompt: Prompt) -> Iterator[str]:
        if prompt.task == "select":
            yield DEFAULT_SELECTION
            return
        self.concluding.set()
        assert self.release.wait(30), "the test never released the model"
        self.conclusions += 1
        for word in first_rule(prompt).split():
            yield word + " "


@pytest.fixture
def held() -> HeldGenerator:
    return HeldGenerator()


@pytest.fixture
def held_pipeline(pipeline: Pipeline, held: HeldGenerator) -> Iterator[Pipeline]:
    yield Pipeline(pipeline.settings, embedder=pipeline.embedder, generator=held)
    held.release.set()  # a test that failed half-way leaves no thread waiting


def quiet(pipeline: Pipeline, generator: Generator) -> Pipeline:
    """The pipeline with `generator`, writing conclusions that can never be shown, only tell
    that the rulebook is silent (every closest sentence taken as far): no draft is streamed,
    so a conclusion holds the model between two of the pipeline's events."""
    generation = pipeline.settings.generation.model_copy(
        update={"conclude_from": 1.0, "min_score_unconcluded": 1.0}
    )
    settings = pipeline.settings.model_copy(update={"generation": generation})
    return Pipeline(settings, embedder=pipeline.embedder, generator=generator)


@contextlib.contextmanager
def model_held(
    serve_api: Any, pipeline: Pipeline, held: HeldGenerator, **api: Any
) -> Iterator[str]:
    """A server whose model a first answer's conclusion holds until the test releases it
    (at the latest, on leaving the block); its URL. The first answer then comes whole."""
    url = serve_api(pipeline, **api)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(httpx.post, f"{url}/v1/ask", json=BODY, timeout=60)
        assert held.concluding.wait(10)
        yield url
        held.release.set()
        assert first.result().json()["rule_text_only"] is False


@contextlib.contextmanager
def streamed(url: str) -> Iterator[Iterator[str]]:
    """The lines of a /v1/ask/stream answer as they come; leaving closes the connection."""
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{url}/v1/ask/stream", json=BODY) as response,
    ):
        assert response.status_code == 200
        yield response.iter_lines()


def read_until(lines: Iterator[str], *events: str) -> tuple[str, Any]:
    """Read up to the first of `events`: (its name, its data)."""
    for line in lines:
        name = line.removeprefix("event: ")
        if name in events:
            return name, json.loads(next(lines).removeprefix("data: "))
    raise AssertionError(f"the stream ended without {events}")


def test_the_rule_text_never_waits_for_the_model(
    serve_api: Any, held_pipeline: Pipeline, held: HeldGenerator
) -> None:
    with model_held(serve_api, held_pipeline, held, queue_size=4) as url, streamed(url) as lines:
        # The model is held by the first answer: the second's rule text comes all the same,
        # and its conclusion waits in line.
        _, quotes = read_until(lines, "quotes")
        assert quotes["quotes"] and quotes["text"].startswith("Deciding rule: [1]")
        assert held.conclusions == 0
        assert read_until(lines, "queued", "citations") == ("queued", {"position": 1})
        held.release.set()
        _, answer = read_until(lines, "citations")
    assert answer["rule_text_only"] is False and held.conclusions == 2


def test_a_waiting_stream_is_told_its_place(
    serve_api: Any, slow_pipeline: Pipeline, slow: SlowGenerator
) -> None:
    slow.pieces, slow.delay = 10, 0.1
    url = serve_api(slow_pipeline, queue_size=2)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(httpx.post, f"{url}/v1/ask", json=BODY, timeout=60)
        assert slow.started.wait(10)
        events = sse(httpx.post(f"{url}/v1/ask/stream", json=BODY, timeout=60))
        assert first.result().status_code == 200
    names = [name for name, _ in events]
    assert names[:2] == ["quotes", "queued"] and events[1][1] == {"position": 1}
    assert names.index("token") > max(i for i, n in enumerate(names) if n == "queued")
    assert names[-2:] == ["citations", "done"]
    answer = events[-2][1]
    assert answer["rule_text_only"] is False and answer["timings"]["queue_s"] > 0.3


@pytest.mark.parametrize("path", ["/v1/ask", "/v1/ask/stream"])
def test_a_full_line_answers_with_the_rule_text_and_when_to_retry(
    serve_api: Any, held_pipeline: Pipeline, held: HeldGenerator, path: str
) -> None:
    with model_held(serve_api, held_pipeline, held, queue_size=0) as url:
        full = httpx.post(f"{url}{path}", json=BODY, timeout=60)
        assert held.conclusions == 0  # answered while the model was still held
    assert full.status_code == 200 and int(full.headers["retry-after"]) >= 1
    if path.endswith("stream"):
        events = sse(full)
        assert [name for name, _ in events] == ["quotes", "citations", "done"]
        answer = events[1][1]
    else:
        answer = full.json()
    assert answer["rule_text_only"] is True and answer["conclusion"] is None
    assert answer["quotes"] and answer["backend"] == "extractive"
    load = answer["checks"][-1]
    assert load["name"] == "load" and load["passed"] is False and "busy" in load["detail"]
    assert answer["answer"].startswith(BUSY + "\n\nDeciding rule:")
    assert held.conclusions == 1  # the model wrote only the first answer's


def test_rule_text_alone_after_waiting_too_long(
    serve_api: Any, held_pipeline: Pipeline, held: HeldGenerator
) -> None:
    with model_held(serve_api, held_pipeline, held, queue_size=1, queue_timeout_s=0.5) as url:
        events = sse(httpx.post(f"{url}/v1/ask/stream", json=BODY, timeout=60))
    assert [name for name, _ in events] == ["quotes", "queued", "citations", "done"]
    assert events[1][1] == {"position": 1}
    answer = events[2][1]
    assert answer["rule_text_only"] is True and answer["answer"].startswith(BUSY)
    assert answer["timings"]["queue_s"] >= 0.4
    assert held.conclusions == 1


def leave_while_queued_plain(url: str) -> None:
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes the connection
        httpx.post(f"{url}/v1/ask", json=BODY, timeout=httpx.Timeout(5.0, read=0.5))


def leave_while_queued_streaming(url: str) -> None:
    with streamed(url) as lines:
        assert read_until(lines, "queued", "citations")[0] == "queued"
    # leaving the block closes the connection


@pytest.mark.parametrize("leave", [leave_while_queued_plain, leave_while_queued_streaming])
def test_a_client_that_leaves_the_line_frees_its_place(
    serve_api: Any, held_pipeline: Pipeline, held: HeldGenerator, leave: Any
) -> None:
    with model_held(serve_api, held_pipeline, held, queue_size=1) as url:  # one place in line
        leave(url)
        # The place is free while the first answer still holds the model: a third question
        # takes it, and is told it is next (until the server has seen the client leave, a
        # question finds the line full and gets the rule text alone).
        deadline = time.monotonic() + 2
        while True:
            with streamed(url) as lines:
                name, data = read_until(lines, "queued", "citations")
                if name == "queued":
                    assert data == {"position": 1}  # only the running answer ahead
                    held.release.set()
                    _, answer = read_until(lines, "citations")
                    break
            assert time.monotonic() < deadline, "the place of the client that left stayed taken"
            time.sleep(0.05)
    assert answer["rule_text_only"] is False
    assert held.conclusions == 2  # the one that left never had the model


def test_a_timed_out_conclusion_frees_the_model_at_its_next_token(
    serve_api: Any, pipeline: Pipeline, slow: SlowGenerator
) -> None:
    slow.pieces, slow.delay = 200, 0.05  # ten seconds, if nothing stopped it
    url = serve_api(quiet(pipeline, slow), timeout_s=0.5)
    with httpx.Client(base_url=url, timeout=30) as client:
        timed_out = client.post("/v1/ask", json=BODY)
        at_answer = slow.produced
        assert timed_out.status_code == 200
        answer = timed_out.json()
        assert answer["rule_text_only"] is True and answer["answer"].startswith(SLOW)
        load = answer["checks"][-1]
        assert load["name"] == "load" and "time limit" in load["detail"]
        assert slow.finished.wait(5)
        assert slow.produced - at_answer <= 2  # stopped at its next token, not at its end
        slow.pieces = 2
        after = client.post("/v1/ask", json=BODY).json()
    assert after["rule_text_only"] is False
    assert after["timings"]["queue_s"] < 1  # nothing left ahead of it


def test_a_client_that_leaves_mid_conclusion_frees_the_model(
    serve_api: Any, pipeline: Pipeline, slow: SlowGenerator
) -> None:
    slow.pieces, slow.delay = 200, 0.05  # ten seconds, if nothing stopped it
    url = serve_api(quiet(pipeline, slow))
    with pytest.raises(httpx.ReadTimeout):  # the client gives up mid-conclusion
        httpx.post(f"{url}/v1/ask", json=BODY, timeout=httpx.Timeout(5.0, read=1.0))
    gave_up = slow.produced
    assert slow.started.is_set()
    # Stopped as soon as the server saw the client go, not at the end of its conclusion.
    assert slow.finished.wait(5) and slow.produced - gave_up <= 5
    slow.pieces = 2
    after = httpx.post(f"{url}/v1/ask", json=BODY, timeout=30).json()
    assert after["rule_text_only"] is False
    assert after["timings"]["queue_s"] < 1  # the line was freed for it


class ReadingGenerator(Generator):
    """Reads a conclusion's prompt for `seconds` before its first piece, as a model given a
    long prompt does, looking at the check `stop_when` gave it as it reads."""

    name = "reading"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.stopping: Callable[[], bool] = lambda: False
        self.stopped = threading.Event()

    def stop_when(self, stopping: Callable[[], bool]) -> None:
        self.stopping = stopping

    def stream(self, prompt: Prompt) -> Iterator[str]:
        if prompt.task == "select":
            yield DEFAULT_SELECTION
            return
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            if self.stopping():
                self.stopped.set()
                raise Stopped
            time.sleep(0.02)
        yield first_rule(prompt)


def test_a_conclusion_timed_out_while_its_prompt_is_read_frees_the_model(
    serve_api: Any, pipeline: Pipeline
) -> None:
    reading = ReadingGenerator(seconds=0)
    reader = quiet(pipeline, reading)
    reader.ask(SUROS_Q)  # what a first answer loads, loaded: the time limit is the model's
    reading.seconds = 10  # no token for ten seconds
    url = serve_api(reader, timeout_s=0.5)
    with httpx.Client(base_url=url, timeout=30) as client:
        answer = client.post("/v1/ask", json=BODY).json()
        assert answer["rule_text_only"] is True and answer["answer"].startswith(SLOW)
        assert reading.stopped.wait(2), "the model kept reading the prompt"
        reading.seconds = 0
        after = client.post("/v1/ask", json=BODY).json()
    assert after["rule_text_only"] is False
    assert after["timings"]["queue_s"] < 1


@pytest.mark.real_models
def test_a_real_model_stops_between_slices_of_its_prompt() -> None:
    generator = LlamaCppGenerator("smollm2-135m", REAL_MODELS_DIR / "smollm2-135m.gguf")
    looked = 0

    def stopping() -> bool:  # given up once two slices of the prompt are read
        nonlocal looked
        looked += 1
        return looked > 2

    rules = " ".join(f"Rule {n}: draw two cards, then discard one." for n in range(60))
    long = Prompt("conclude", "?", [system_message(), {"role": "user", "content": rules}])
    generator.stop_when(stopping)
    with pytest.raises(Stopped):
        list(generator.stream(long))
    assert generator.load().n_tokens == 2 * PROMPT_SLICE_TOKENS  # the rest was never read
    generator.stop_when(lambda: False)
    hello = [system_message(), {"role": "user", "content": "Hello."}]
    short = Prompt("conclude", "?", hello, max_tokens=4)
    assert "".join(generator.stream(short)).strip()  # the model still answers after a stop


def chat_pieces(lines: Iterator[str]) -> Iterator[str]:
    """The content pieces of a streamed chat reply as they come (the role's empty one and
    the finishing chunk's none dropped)."""
    for line in lines:
        if line.startswith("data: {"):
            choices = json.loads(line.removeprefix("data: "))["choices"]
            if choices and choices[0]["delta"].get("content"):
                yield choices[0]["delta"]["content"]


CHAT_BODY = {"model": "suros", "stream": True, "messages": [{"role": "user", "content": SUROS_Q}]}


def test_a_chat_stream_sends_the_rule_text_while_the_model_is_held(
    serve_api: Any, held_pipeline: Pipeline, held: HeldGenerator
) -> None:
    with (
        model_held(serve_api, held_pipeline, held, queue_size=4) as url,
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{url}/v1/chat/completions", json=CHAT_BODY) as response,
    ):
        pieces = chat_pieces(response.iter_lines())
        rule = next(pieces)
        assert rule.startswith("Deciding rule: [1]") and held.conclusions == 0
        held.release.set()
        *drafted, last = list(pieces)
    assert len(drafted) > 3 and drafted[0].startswith("\n\nConclusion: ")  # token by token
    assert "\n\nSources:\n[1] " in last


def test_a_chat_stream_with_the_line_full_has_the_rule_text_and_when_to_retry(
    serve_api: Any, held_pipeline: Pipeline, held: HeldGenerator
) -> None:
    with model_held(serve_api, held_pipeline, held, queue_size=0) as url:
        full = httpx.post(f"{url}/v1/chat/completions", json=CHAT_BODY, timeout=30)
    assert full.status_code == 200 and int(full.headers["retry-after"]) >= 1
    rule, rest = chat_pieces(iter(full.text.splitlines()))
    assert rule.startswith("Deciding rule: [1]")
    assert rest.startswith(f"\n\n{BUSY}\n\n") and "Conclusion" not in rest


class HeldSearch(FakeEmbedder):
    """Once `holding` is set, each question's search waits until the test releases it:
    the questions hold the rule text's line."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = threading.Event()
        self.release = threading.Event()
        self.held = 0

    def embed_query(self, text: str) -> Any:
        if self.holding.is_set():
            self.held += 1
            assert self.release.wait(30), "the test never released the search"
        return super().embed_query(text)


@pytest.mark.parametrize("path", ["/v1/ask", "/v1/ask/stream"])
def test_a_full_rule_text_line_is_refused_busy_with_when_to_retry(
    serve_api: Any, pipeline: Pipeline, path: str
) -> None:
    search = HeldSearch()
    held = Pipeline(pipeline.settings, embedder=search, generator=ExtractiveGenerator())
    url = serve_api(held, rule_text_queue_size=0)  # its threads alone, no place in line
    search.holding.set()
    with ThreadPoolExecutor(2) as pool:
        try:
            first = [
                pool.submit(httpx.post, f"{url}/v1/ask", json={"question": f"{SUROS_Q} {n}"})
                for n in (1, 2)
            ]
            deadline = time.monotonic() + 10
            while search.held < 2:  # both of the line's threads are searching
                assert time.monotonic() < deadline, "the searches never started"
                time.sleep(0.01)
            refused = httpx.post(f"{url}{path}", json=BODY, timeout=10)
        finally:
            search.release.set()
        assert [f.result().status_code for f in first] == [200, 200]
    assert refused.status_code == 503
    error = refused.json()["error"]
    assert error["type"] == "busy" and int(refused.headers["retry-after"]) >= 1
    assert error["retry_after_s"] == int(refused.headers["retry-after"])
