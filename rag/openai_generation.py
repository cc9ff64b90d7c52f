"""An OpenAI-compatible server as the model (llama.cpp's server, llama-cpp-python's, Ollama,
vLLM): for a model bigger than this machine runs, or one inference server shared by many API
workers. Same prompts, selection and checks as the local backend (rag.generation).
Imported only when the backend is used.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rag.errors import ModelError
from rag.generation import Generator, stop_repeating
from rag.openai_server import OpenAIServer, ServerRefusedError, server_for
from rag.prompting import Prompt, system_message

if TYPE_CHECKING:
    from rag.settings import Settings

log = logging.getLogger("rulekeeper.openai")


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
                f"it serves {', '.join(map(str, served))}. Fix openai.chat_model."
            )
        self._model_checked = True


def make_openai_generator(settings: Settings) -> OpenAIGenerator:
    gen = settings.generation
    return OpenAIGenerator(
        server_for(settings.openai.chat_url, settings),
        settings.openai.chat_model,
        temperature=gen.temperature,
        max_tokens=gen.max_tokens,
        seed=gen.seed,
    )
