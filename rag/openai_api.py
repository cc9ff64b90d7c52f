"""An OpenAI-compatible server as the model (llama.cpp's server, llama-cpp-python's, Ollama,
vLLM): for a model bigger than this machine runs, or one inference server shared by many API
workers. Same prompts, selection and checks as the local backend; optionally the embedder
too (`/v1/embeddings`).

Plain httpx rather than the `openai` package: httpx is a dependency already, the calls are a
JSON POST and server-sent-event lines, and the retries, timeouts and one-line errors naming
the setting to fix are ours to word (the client would add its own retry policy and
exception types to translate). Imported only when the backend is used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from rag.errors import ModelError
from rag.generation import Generator, stop_repeating
from rag.prompting import Prompt, system_message
from rag.searching.embedding import Embedder

if TYPE_CHECKING:
    from rag.settings import Settings

log = logging.getLogger("rulekeeper.openai")

API_KEY_VARIABLES = ("RULEKEEPER_OPENAI_API_KEY", "OPENAI_API_KEY")
CONNECT_TIMEOUT_S = 5.0  # a server that is up accepts at once; the read timeout is the setting
MAX_RETRY_AFTER_S = 30.0  # a server asking for longer is treated as down
# A request the server could not take: with a response_format it may not support, the next
# shape is tried. llama-cpp-python's server says so with a 500 naming the field.
_BAD_REQUEST_STATUSES = frozenset({400, 422})
_FORMAT_FIELD = "response_format"


def api_key() -> str | None:
    return next((os.environ[v] for v in API_KEY_VARIABLES if os.environ.get(v)), None)


class ServerRefusedError(ModelError):
    """The server answered with an error status (after any retries)."""

    def __init__(self, message: str, status: int, detail: str) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail

    @property
    def blames_format(self) -> bool:
        return self.status in _BAD_REQUEST_STATUSES or _FORMAT_FIELD in self.detail


def _detail(response: httpx.Response) -> str:
    """The server's own error message, on one line and short."""
    try:
        body = response.json()
    except ValueError:
        text = response.text
    else:
        error = body.get("error", body) if isinstance(body, dict) else body
        text = error.get("message", error) if isinstance(error, dict) else error
        text = text if isinstance(text, str) else json.dumps(text)
    return " ".join(text.split())[:300] or response.reason_phrase


class OpenAIServer:
    """One server's HTTP API: 429, 5xx and lost connections retried with exponential backoff
    (or the server's Retry-After), every failure a one-line ModelError."""

    def __init__(
        self,
        base_url: str,
        *,
        key: str | None = None,
        timeout_s: float = 60.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._retries = retries
        self._backoff_s = backoff_s
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.base_url + "/",
            headers={"Authorization": f"Bearer {key}"} if key else {},
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S)),
        )

    def json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The JSON a request returns; None if it is not JSON."""
        response = self._send(method, path, body)
        try:
            response.read()
            return response.json()
        except ValueError:
            return None
        finally:
            response.close()

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The server-sent events of a streamed POST, parsed. The request is sent (and any
        refusal raised) before this returns, so that a caller can try another request."""
        return self._events(self._send("POST", path, body))

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        """An open 200 response; the caller closes it."""
        attempt = 0
        while True:
            try:
                request = self._http.build_request(method, path, json=body)
                response = self._http.send(request, stream=True)
            except httpx.TransportError as exc:
                if attempt >= self._retries:
                    raise self._unreachable(exc) from exc
                wait = self._backoff_s * 2**attempt
            else:
                if response.status_code == 200:
                    return response
                response.read()
                response.close()
                refusal = self._refused(response, attempt + 1)
                # A complaint about the request's shape would come back the same.
                retryable = refusal.status == 429 or refusal.status >= 500
                if not retryable or refusal.blames_format or attempt >= self._retries:
                    raise refusal
                wait = self._retry_after(response) or self._backoff_s * 2**attempt
            log.info("retrying %s %s in %.1f s", method, path, wait)
            self._sleep(wait)
            attempt += 1

    def _events(self, response: httpx.Response) -> Iterator[dict[str, Any]]:
        try:
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue  # comments (keep-alives), event names, blank separators
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                event = json.loads(data)
                if "error" in event:  # a failure after the 200 arrives as an event
                    error = event["error"]
                    message = error.get("message", error) if isinstance(error, dict) else error
                    raise ModelError(f"The model server at {self.base_url} failed: {message}")
                yield event
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        except json.JSONDecodeError as exc:
            raise ModelError(
                f"The model server at {self.base_url} sent a malformed event ({exc}): is "
                "generation.base_url an OpenAI-compatible API root?"
            ) from exc
        finally:
            response.close()

    def _retry_after(self, response: httpx.Response) -> float | None:
        value = response.headers.get("retry-after", "")
        try:
            return min(float(value), MAX_RETRY_AFTER_S)
        except ValueError:
            return None

    def _unreachable(self, exc: httpx.TransportError) -> ModelError:
        if isinstance(exc, httpx.TimeoutException):
            return ModelError(
                f"The model server at {self.base_url} did not answer within "
                f"{self._timeout_s:g} s: it may be overloaded (generation.timeout_s)."
            )
        reason = str(exc) or type(exc).__name__
        return ModelError(
            f"No model server answers at {self.base_url} ({reason}): start it, or fix "
            "generation.base_url."
        )

    def _refused(self, response: httpx.Response, attempts: int) -> ServerRefusedError:
        status = response.status_code
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        hint = {
            401: " Set RULEKEEPER_OPENAI_API_KEY (or OPENAI_API_KEY) to a key it accepts.",
            403: " Set RULEKEEPER_OPENAI_API_KEY (or OPENAI_API_KEY) to a key it accepts.",
            404: " Check base_url (the API root, often ending in /v1) and the model name "
            "(generation's or embedding's settings).",
        }.get(status, "")
        detail = _detail(response)
        return ServerRefusedError(
            f"The model server at {self.base_url} answered HTTP {status}{tries}: {detail}.{hint}",
            status,
            detail,
        )


class OpenAIGenerator(Generator):
    """Chat completions streamed from an OpenAI-compatible server.

    The reply's JSON schema goes as `response_format` in the first shape the server accepts:
    OpenAI's json_schema (vLLM, llama.cpp's server, Ollama), else json_object with a schema
    (llama-cpp-python's server), else none, the reply then parsed leniently as with any
    backend. The shape that worked is kept for the following prompts.
    """

    SHAPES = ("json_schema", "json_object", None)

    def __init__(
        self,
        server: OpenAIServer,
        model: str,
        *,
        temperature: float = 0.1,
        max_tokens: int = 512,
        seed: int | None = None,
    ) -> None:
        self.name = f"openai:{model}"
        self.model = model
        self._server = server
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._seed = seed
        self._shapes: tuple[str | None, ...] = self.SHAPES
        self._model_checked = False

    def warm_up(self) -> None:
        # One token after the system prompt: the server caches the prefix every prompt
        # shares, as the local backend does; and a wrong URL, key or model shows at once.
        self.complete(Prompt("judge", "", [system_message()], max_tokens=1))

    def stream(self, prompt: Prompt) -> Iterator[str]:
        return stop_repeating(self._pieces(prompt))

    def _pieces(self, prompt: Prompt) -> Iterator[str]:
        for event in self._open(prompt):
            choices = event.get("choices") or [{}]
            text = (choices[0].get("delta") or {}).get("content")
            if text:
                yield text

    def _open(self, prompt: Prompt) -> Iterator[dict[str, Any]]:
        self._check_model()
        if prompt.schema is None:
            return self._server.stream("chat/completions", self._body(prompt, None))
        first_refusal: ServerRefusedError | None = None
        for n, shape in enumerate(self._shapes):
            try:
                events = self._server.stream("chat/completions", self._body(prompt, shape))
            except ServerRefusedError as exc:
                if not exc.blames_format:
                    raise
                first_refusal = first_refusal or exc
                continue
            if n:
                log.warning(
                    "%s refused response_format %s; using %s from now on",
                    self._server.base_url,
                    self._shapes[0],
                    shape or "none (replies parsed leniently)",
                )
                self._shapes = self._shapes[n:]
            return events
        assert first_refusal is not None
        raise first_refusal  # refused in every shape: not the format's fault

    def _body(self, prompt: Prompt, shape: str | None) -> dict[str, Any]:
        temperature, seed = prompt.sampling(self._temperature, self._seed)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": prompt.messages,
            "temperature": temperature,
            "max_tokens": prompt.max_tokens or self._max_tokens,
            "stream": True,
        }
        if seed is not None:
            body["seed"] = seed
        if shape == "json_schema":
            schema = {"name": prompt.task, "schema": prompt.schema}
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif shape == "json_object":
            body["response_format"] = {"type": "json_object", "schema": prompt.schema}
        return body

    def _check_model(self) -> None:
        """A model name the server does not list is a clear error (some servers, such as
        llama-cpp-python's with one model, would answer with their own model instead).
        Servers without a model list are taken at their word."""
        if self._model_checked:
            return
        try:
            listing = self._server.json("GET", "models")
        except ServerRefusedError:
            listing = None
        served = [m.get("id") for m in (listing or {}).get("data", []) if isinstance(m, dict)]
        if served and self.model not in served:
            raise ModelError(
                f"The model server at {self._server.base_url} has no model {self.model!r}; "
                f"it serves {', '.join(map(str, served))}. Fix generation.model."
            )
        self._model_checked = True


class OpenAIEmbedder(Embedder):
    """Vectors from a server's /embeddings: one embedding server for many API workers.

    Its name (in the index manifest) names the server's model and the prefixes, so changing
    either rebuilds the index. The server applies no query or passage prompt of its own; the
    settings' prefixes stand in for a model's prompts (EmbeddingGemma's, E5's).
    """

    def __init__(
        self, server: OpenAIServer, model: str, *, query_prefix: str = "", passage_prefix: str = ""
    ) -> None:
        super().__init__()
        self.name = f"openai:{model}"
        if query_prefix or passage_prefix:
            prefixes = json.dumps([query_prefix, passage_prefix]).encode()
            self.name += "#" + hashlib.sha256(prefixes).hexdigest()[:8]
        self.model = model
        self._server = server
        self._prefixes = {True: query_prefix, False: passage_prefix}
        self._dimension: int | None = None

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._dimension = self._encode(["dimension"], query=False).shape[1]
        return self._dimension

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        prefix = self._prefixes[query]
        body = {"model": self.model, "input": [prefix + t for t in texts]}
        reply = self._server.json("POST", "embeddings", body)
        try:
            rows = sorted(reply["data"], key=lambda row: row["index"])
            vectors = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except (TypeError, KeyError, ValueError) as exc:
            raise ModelError(
                f"The embedding server at {self._server.base_url} sent no embeddings "
                f"({type(exc).__name__}: {exc}): does it serve {self.model!r} for embeddings?"
            ) from exc
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ModelError(
                f"The embedding server at {self._server.base_url} sent {len(vectors)} vectors "
                f"for {len(texts)} texts."
            )
        self._dimension = vectors.shape[1]
        return vectors


def _server(base_url: str, settings: Settings) -> OpenAIServer:
    gen = settings.generation
    return OpenAIServer(
        base_url,
        key=api_key(),
        timeout_s=gen.timeout_s,
        retries=gen.retries,
        backoff_s=gen.retry_backoff_s,
    )


def make_openai_generator(settings: Settings) -> OpenAIGenerator:
    gen = settings.generation
    return OpenAIGenerator(
        _server(gen.base_url, settings),
        gen.model,
        temperature=gen.temperature,
        max_tokens=gen.max_tokens,
        seed=gen.seed,
    )


def make_openai_embedder(settings: Settings) -> OpenAIEmbedder:
    emb = settings.embedding
    return OpenAIEmbedder(
        _server(emb.base_url, settings),
        emb.model,
        query_prefix=emb.query_prefix,
        passage_prefix=emb.passage_prefix,
    )
