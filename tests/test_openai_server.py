"""The openai backend against a real llama-cpp-python server with the small test model."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator

import httpx
import pytest
from conftest import REAL_MODELS_DIR, FakeEmbedder
from loopback import free_port, process

from rag.answering.selection import parse_selection
from rag.errors import ModelError
from rag.openai_generation import OpenAIGenerator
from rag.openai_server import OpenAIServer
from rag.pipeline import Pipeline
from rag.prompting import Prompt
from rag.settings import Settings

pytestmark = pytest.mark.slow

TEST_MODEL = REAL_MODELS_DIR / "smollm2-135m.gguf"
ALIAS = "smollm2"


def _served(url: str) -> bool:
    try:
        return httpx.get(f"{url}/models", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's server on loopback serving the test model as "smollm2"; its URL."""
    missing = [m for m in ("sse_starlette", "starlette_context") if not importlib.util.find_spec(m)]
    if missing or importlib.util.find_spec("llama_cpp") is None:
        pytest.skip(f"llama-cpp-python's server needs {missing or 'llama_cpp'}: scripts/setup.sh")
    if not TEST_MODEL.is_file():
        pytest.skip(f"{TEST_MODEL} is missing: `rules models fetch smollm2-135m`")
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    args = [sys.executable, "-m", "llama_cpp.server", "--model", str(TEST_MODEL)]
    args += ["--model_alias", ALIAS, "--host", "127.0.0.1", "--port", str(port)]
    args += ["--n_ctx", "2048", "--n_threads", "1"]
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with process(args, lambda: _served(url), log=log, timeout_s=120):
        yield url


def generator(url: str, model: str = ALIAS) -> OpenAIGenerator:
    return OpenAIGenerator(OpenAIServer(url, retries=1, backoff_s=0.1), model, max_tokens=24)


def test_streams_a_reply_held_to_the_schema(llama_server: str) -> None:
    schema = {
        "type": "object",
        "properties": {"ids": {"type": "array", "items": {"type": "integer"}}},
        "required": ["ids"],
    }
    ask = [{"role": "user", "content": "Which of these is a colour? 1. red 2. seven"}]
    pieces = list(generator(llama_server).stream(Prompt("select", "q", ask, schema=schema)))
    assert len(pieces) > 1  # streamed, not sent whole
    # The server takes no json_schema: the fallback sends json_object with the schema,
    # which its grammar holds the reply to.
    assert parse_selection("".join(pieces), 2, 2) is not None


def test_a_wrong_model_name_is_one_clear_line(llama_server: str) -> None:
    with pytest.raises(ModelError, match=r"has no model 'qwen-72b'; it serves smollm2\."):
        generator(llama_server, "qwen-72b").warm_up()


def test_the_pipeline_answers_through_the_server(llama_server: str, settings: Settings) -> None:
    gen = settings.generation.model_copy(update={"backend": "openai", "max_tokens": 48})
    server = settings.openai.model_copy(update={"chat_url": llama_server, "chat_model": ALIAS})
    pipeline = Pipeline(
        settings.model_copy(update={"generation": gen, "openai": server}), embedder=FakeEmbedder()
    )
    pipeline.generator.warm_up()
    answer = pipeline.ask("How much HP does each player start with?", "suros")
    assert answer.backend == f"openai:{ALIAS}" and answer.quotes and not answer.abstained
