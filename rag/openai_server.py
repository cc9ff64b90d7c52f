"""An OpenAI-compatible server's HTTP API (llama.cpp's server, llama-cpp-python's, Ollama,
vLLM), shared by the backends that use one: the generator (rag.openai_generation) and the
embedder (rag.searching.openai_embedding).

Plain httpx rather than the `openai` package: httpx is a dependency already, the calls are a
JSON POST and server-sent-event lines, and the retries, timeouts and one-line errors naming
the setting to fix are ours to word (the client would add its own retry policy and
exception types to translate). Imported only when such a backend is used.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx

from rag.errors import ModelError

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
                "openai.chat_url an OpenAI-compatible API root?"
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
                f"{self._timeout_s:g} s: it may be overloaded (openai.timeout_s)."
            )
        reason = str(exc) or type(exc).__name__
        return ModelError(
            f"No model server answers at {self.base_url} ({reason}): start it, or fix "
            "openai.chat_url or openai.embedding_url."
        )

    def _refused(self, response: httpx.Response, attempts: int) -> ServerRefusedError:
        status = response.status_code
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        hint = {
            401: " Set RULEKEEPER_OPENAI_API_KEY (or OPENAI_API_KEY) to a key it accepts.",
            403: " Set RULEKEEPER_OPENAI_API_KEY (or OPENAI_API_KEY) to a key it accepts.",
            404: " Check the API root (openai.chat_url or openai.embedding_url, often "
            "ending in /v1) and the model name (openai.chat_model or openai.embedding_model).",
        }.get(status, "")
        detail = _detail(response)
        return ServerRefusedError(
            f"The model server at {self.base_url} answered HTTP {status}{tries}: {detail}.{hint}",
            status,
            detail,
        )


def server_for(base_url: str, settings: Settings) -> OpenAIServer:
    """The server at `base_url`, with the API key from the environment and the openai
    settings' timeout and retries."""
    server = settings.openai
    return OpenAIServer(
        base_url,
        key=api_key(),
        timeout_s=server.timeout_s,
        retries=server.retries,
        backoff_s=server.retry_backoff_s,
    )
