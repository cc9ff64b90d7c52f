"""The openai generator backend against a scripted OpenAI-compatible server on loopback."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from conftest import FakeEmbedder, first_rule
from loopback import free_port

from rag.backends import make_generator
from rag.errors import ModelError
from rag.openai_generation import OpenAIGenerator
from rag.openai_server import OpenAIServer, ServerRefusedError
from rag.pipeline import Pipeline
from rag.prompting import Prompt
from rag.settings import Settings

SCHEMA = {"type": "object", "properties": {"ids": {"type": "array"}}, "required": ["ids"]}
SELECT = Prompt("select", "q", [{"role": "user", "content": "pick"}], schema=SCHEMA)


@dataclass
class Reply:
    status: int = 200
    pieces: tuple[str, ...] = ("Hello", " world")
    headers: dict[str, str] = field(default_factory=dict)
    error: str = "failed"
    delay_s: float = 0.0


@dataclass
class FakeServer:
    """Answers /v1/chat/completions with the queued replies (then with `default`), streamed
    as OpenAI does; /v1/models lists `models` (None: 404); records every request body."""

    url: str
    replies: list[Reply] = field(default_factory=list)
    default: Callable[[dict[str, Any]], Reply] = lambda _body: Reply()
    models: list[str] | None = field(default_factory=lambda: ["test-model"])
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    embedded: list[str] = field(default_factory=list)

    def reply_to(self, body: dict[str, Any]) -> Reply:
        self.bodies.append(body)
        return self.replies.pop(0) if self.replies else self.default(body)


def _handler(fake: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            return

        def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/v1/models" and fake.models is not None:
                self._json(200, {"object": "list", "data": [{"id": m} for m in fake.models]})
            else:
                self._json(404, {"error": {"message": "Not Found"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/v1/embeddings":
                fake.embedded.extend(body["input"])
                vectors = FakeEmbedder()._encode(body["input"], query=False).tolist()
                data = [{"index": i, "embedding": v} for i, v in enumerate(vectors)]
                self._json(200, {"object": "list", "data": data[::-1]})  # any order: by index
                return
            if self.path != "/v1/chat/completions":
                self._json(404, {"error": {"message": "Not Found"}})
                return
            fake.headers.append(dict(self.headers))
            reply = fake.reply_to(body)
            time.sleep(reply.delay_s)
            # The client may have given up waiting, as the timeout test wants.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._reply(reply)

        def _reply(self, reply: Reply) -> None:
            if reply.status != 200:
                self._json(reply.status, {"error": {"message": reply.error}}, reply.headers)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for piece in reply.pieces:
                chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True

    return Handler


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    fake = FakeServer(url=f"http://127.0.0.1:{server.server_address[1]}/v1")
    server.RequestHandlerClass = _handler(fake)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def generator(url: str, sleeps: Sleeps | None = None, **server: Any) -> OpenAIGenerator:
    options = {
        "retries": 2,
        "backoff_s": 0.5,
        "sleep": Sleeps() if sleeps is None else sleeps,
        **server,
    }
    return OpenAIGenerator(OpenAIServer(url, **options), "test-model", max_tokens=64, seed=3)


def served(settings: Settings, url: str, model: str = "test-model", **generation: Any) -> Settings:
    """The settings with the chat server at `url` serving `model` as the LLM."""
    gen = settings.generation.model_copy(update={"backend": "openai", **generation})
    server = settings.openai.model_copy(update={"chat_url": url, "chat_model": model})
    return settings.model_copy(update={"generation": gen, "openai": server})


def test_streams_pieces_with_the_schema_as_response_format(fake: FakeServer) -> None:
    pieces = list(generator(fake.url).stream(SELECT))
    assert pieces == ["Hello", " world"]
    body = fake.bodies[0]
    assert body["model"] == "test-model" and body["stream"] is True
    assert body["messages"] == SELECT.messages and body["max_tokens"] == 64 and body["seed"] == 3
    shape = body["response_format"]
    assert shape == {"type": "json_schema", "json_schema": {"name": "select", "schema": SCHEMA}}


def test_a_prompt_asked_again_sends_its_own_temperature_and_seed(fake: FakeServer) -> None:
    again = replace(SELECT, temperature=0.8, seed=2)
    list(generator(fake.url).stream(again))
    list(generator(fake.url).stream(SELECT))
    assert [(b["temperature"], b["seed"]) for b in fake.bodies] == [(0.8, 2), (0.1, 3)]


def test_a_prompt_without_schema_sends_no_response_format(fake: FakeServer) -> None:
    plain = Prompt("conclude", "q", [{"role": "user", "content": "say"}], max_tokens=9)
    assert generator(fake.url).complete(plain) == "Hello world"
    assert "response_format" not in fake.bodies[0] and fake.bodies[0]["max_tokens"] == 9


def test_the_api_key_comes_from_the_environment(
    fake: FakeServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RULEKEEPER_OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-general")
    monkeypatch.setenv("RULEKEEPER_OPENAI_API_KEY", "sk-ours")
    made = make_generator(served(settings, fake.url))
    assert made.name == "openai:test-model"
    made.complete(SELECT)
    assert fake.headers[0]["Authorization"] == "Bearer sk-ours"


def test_429_and_5xx_are_retried_with_backoff(fake: FakeServer) -> None:
    sleeps = Sleeps()
    fake.replies = [Reply(429, headers={"Retry-After": "2"}), Reply(503)]
    assert generator(fake.url, sleeps).complete(SELECT) == "Hello world"
    assert sleeps == [2.0, 1.0]  # the server's Retry-After, then the second backoff step
    assert len(fake.bodies) == 3


def test_retries_run_out_in_one_clear_line(fake: FakeServer) -> None:
    fake.replies = [Reply(500, error="kaput")] * 3
    with pytest.raises(ServerRefusedError) as caught:
        generator(fake.url).complete(SELECT)
    message = str(caught.value)
    assert "HTTP 500 after 3 attempts: kaput" in message and "\n" not in message
    assert caught.value.status == 500


def test_a_client_error_is_not_retried(fake: FakeServer) -> None:
    fake.replies = [Reply(401, error="bad key")]
    with pytest.raises(ModelError, match=r"HTTP 401: bad key\. Set RULEKEEPER_OPENAI_API_KEY"):
        generator(fake.url).complete(Prompt("conclude", "q", []))
    assert len(fake.bodies) == 1


def test_unsupported_response_formats_fall_back_and_stay_fallen_back(fake: FakeServer) -> None:
    def no_json_schema(body: dict[str, Any]) -> Reply:
        if body.get("response_format", {}).get("type") == "json_schema":
            return Reply(422, error="response_format.type: not json_schema")
        return Reply()

    fake.default = no_json_schema
    gen = generator(fake.url)
    assert gen.complete(SELECT) == "Hello world"
    assert gen.complete(SELECT) == "Hello world"
    shapes = [b["response_format"]["type"] for b in fake.bodies]
    assert shapes == ["json_schema", "json_object", "json_object"]
    assert fake.bodies[1]["response_format"]["schema"] == SCHEMA


def test_a_500_naming_the_format_falls_back_at_once(fake: FakeServer) -> None:
    """llama-cpp-python's server: a 500 whose message names the field it does not take."""
    sleeps = Sleeps()
    fake.replies = [Reply(500, error="('body', 'response_format', 'type'): not 'json_schema'")]
    assert generator(fake.url, sleeps).complete(SELECT) == "Hello world"
    assert sleeps == [] and fake.bodies[1]["response_format"]["type"] == "json_object"


def test_no_response_format_at_all_as_the_last_resort(fake: FakeServer) -> None:
    fake.default = lambda body: Reply(400) if "response_format" in body else Reply()
    assert generator(fake.url).complete(SELECT) == "Hello world"
    assert len(fake.bodies) == 3 and "response_format" not in fake.bodies[2]


def test_a_request_refused_in_every_shape_keeps_the_shapes(fake: FakeServer) -> None:
    fake.default = lambda body: Reply(400, error="prompt too long")
    gen = generator(fake.url)
    with pytest.raises(ServerRefusedError, match="prompt too long"):
        gen.complete(SELECT)
    fake.default = lambda body: Reply()
    gen.complete(SELECT)
    assert fake.bodies[-1]["response_format"]["type"] == "json_schema"


def test_a_server_that_is_down_is_one_clear_line() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    sleeps = Sleeps()
    with pytest.raises(ModelError) as caught:
        generator(url, sleeps).complete(SELECT)
    message = str(caught.value)
    assert message.startswith(f"No model server answers at {url} (")
    assert message.endswith("start it, or fix openai.chat_url or openai.embedding_url.")
    assert "\n" not in message
    assert sleeps == [0.5, 1.0]  # retried: a server restarting gets a moment


def test_a_wrong_model_name_names_the_served_ones(fake: FakeServer) -> None:
    fake.models = ["qwen2.5-7b", "llama-3-8b"]
    with pytest.raises(ModelError) as caught:
        generator(fake.url).warm_up()
    assert str(caught.value) == (
        f"The model server at {fake.url} has no model 'test-model'; it serves qwen2.5-7b, "
        "llama-3-8b. Fix openai.chat_model."
    )
    assert fake.bodies == []  # nothing generated by the wrong model


def test_a_server_without_a_model_list_is_taken_at_its_word(fake: FakeServer) -> None:
    fake.models = None
    gen = generator(fake.url)
    gen.warm_up()
    assert fake.bodies[0]["max_tokens"] == 1  # the warm-up reads the system prompt once


def test_a_silent_server_times_out(fake: FakeServer) -> None:
    fake.replies = [Reply(delay_s=2.0)]
    with pytest.raises(ModelError, match=r"did not answer within 0\.3 s"):
        generator(fake.url, retries=0, timeout_s=0.3).complete(SELECT)


def test_the_pipeline_answers_through_the_server(fake: FakeServer, settings: Settings) -> None:
    """Same prompts, selection and checks as the local backend: a conclusion restating the
    selected rule passes the checks and is shown."""

    def model(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        if "ids" in json.dumps(body.get("response_format", {})):
            return Reply(pieces=('{"ids": ', "[1]}"))
        rule = first_rule(Prompt("conclude", "", messages))
        return Reply(pieces=('{"conclusion": ', json.dumps(rule)[:-1], '"}'))

    fake.default = model
    pipeline = Pipeline(served(settings, fake.url, select=True), embedder=FakeEmbedder())
    answer = pipeline.ask("What HP does each player start with?", "suros")
    assert answer.backend == "openai:test-model"
    assert answer.conclusion and answer.conclusion in answer.answer and not answer.abstained
    names = [b.get("response_format", {}).get("json_schema", {}).get("name") for b in fake.bodies]
    assert names[:2] == ["select", "conclude"]


def test_an_api_worker_without_its_model_server_says_why_it_is_not_ready(
    settings: Settings,
) -> None:
    from api.app import create_app
    from api.server import running

    url = f"http://127.0.0.1:{free_port()}/v1"
    down = Pipeline(served(settings, url), embedder=FakeEmbedder())
    failed = rf"failed to load: No model server answers at {url}"
    with pytest.raises(RuntimeError, match=failed), running(create_app(pipeline=down)):
        pass


def test_an_embedding_server_builds_the_index_and_finds_passages(
    fake: FakeServer, settings: Settings
) -> None:
    embedding = settings.embedding.model_copy(
        update={"backend": "openai", "query_prefix": "query: ", "passage_prefix": "passage: "}
    )
    server = settings.openai.model_copy(
        update={"embedding_url": fake.url, "embedding_model": "embed-model"}
    )
    generation = settings.generation.model_copy(update={"backend": "extractive"})
    pipeline = Pipeline(
        settings.model_copy(
            update={"embedding": embedding, "generation": generation, "openai": server}
        )
    )
    assert pipeline.embedder.name.startswith("openai:embed-model#")
    pipeline.ensure_index()
    manifest = pipeline.index_store().read_manifest()
    assert manifest is not None and manifest["embedding_model"] == pipeline.embedder.name
    question = "How much HP does each player start with?"
    answer = pipeline.ask(question, "suros")
    assert answer.quotes and "HP" in answer.answer
    assert f"query: {question}" in fake.embedded
    passages = [t for t in fake.embedded if t.startswith("passage: ")]
    assert len(passages) > 100  # every passage of the four rulebooks, once


def test_an_embedding_server_without_embeddings_is_one_clear_line(fake: FakeServer) -> None:
    from rag.searching.openai_embedding import OpenAIEmbedder

    fake.models = None
    embedder = OpenAIEmbedder(OpenAIServer(f"{fake.url}/no-such-root"), "embed-model")
    with pytest.raises(ModelError, match=r"answered HTTP 404: Not Found\. Check the API root"):
        embedder.embed_query("hello")
