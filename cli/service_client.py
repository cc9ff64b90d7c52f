"""The warm local service seen as the commands see a Pipeline (`ask_stream`, `games`,
`chunks`, `corpus`), over HTTP: `/v1/ask/stream`'s events come back as the same StreamEvent
records, so an answer is shown by the same code either way.

What the service cannot do before showing anything (it stopped, it is busy, its model failed)
is done in this process instead, after a one-line note.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, fields
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from api.local_state import ServiceState
from cli.rules import Rules
from cli.ui import Ui
from rag.errors import GameNotFoundError, InputError, RulekeeperError
from rag.reading.corpus import Corpus
from rag.settings import Settings
from rag.types import Answer, Chunk, GameSummary, Quote, StreamEvent, Turn

T = TypeVar("T")


class ServiceUnavailable(RulekeeperError):
    """The service cannot answer this request (gone, busy, failing); this process can try."""


class ServiceClient:
    def __init__(
        self, state: ServiceState, settings: Settings, ui: Ui, fallback: Callable[[], Rules]
    ) -> None:
        self.settings = settings
        self._ui = ui
        self._fallback = fallback
        self._corpus: Corpus | None = None
        self._http = httpx.Client(
            base_url=state.url,
            headers={"Authorization": f"Bearer {state.token}"},
            # The service gives up at api.timeout_s and says so; wait a little longer.
            timeout=httpx.Timeout(
                settings.api.timeout_s + 5, connect=settings.service.connect_timeout_s
            ),
        )

    @property
    def corpus(self) -> Corpus:
        """The rulebooks' manifests, read here: naming and detecting games needs no index."""
        if self._corpus is None:
            s = self.settings
            self._corpus = Corpus.load((s.corpus_dir, True), (s.user_books_dir, False))
        return self._corpus

    def games(self) -> list[GameSummary]:
        def listed() -> list[GameSummary]:
            games = self._get("/v1/games")["games"]
            return [GameSummary(self.corpus.resolve(g["slug"]), g["chunks"]) for g in games]

        return self._or_here(listed, lambda rules: rules.games())

    def chunks(self, game: str) -> list[Chunk]:
        def listed() -> list[Chunk]:
            sections = self._get(f"/v1/games/{quote(game, safe='')}/sections")["sections"]
            return [_chunk(s) for s in sections]

        return self._or_here(listed, lambda rules: rules.chunks(game))

    def ask_stream(
        self,
        question: str,
        game: str | None = None,
        k: int | None = None,
        history: Sequence[Turn] = (),
    ) -> Iterator[StreamEvent]:
        # The service keeps as many turns as a conversation holds; the pipeline reads fewer.
        kept = list(history)[-self.settings.api.conversation_turns :]
        body = {
            "question": question,
            "game": game,
            "k": k,
            "history": [asdict(turn) for turn in kept],
        }
        shown = False
        try:
            with self._http.stream("POST", "/v1/ask/stream", json=body) as response:
                _raise_for_error(response)
                for event in _stream_events(response.iter_lines()):
                    shown = True
                    yield event
        except (httpx.TransportError, ServiceUnavailable) as exc:
            if shown:  # part of the answer is on the screen: it cannot be asked again
                raise RulekeeperError(f"The Rulekeeper service stopped answering: {exc}") from exc
            self._note_fallback(exc)
            yield from self._fallback().ask_stream(question, game, k, history)

    def _get(self, path: str) -> Any:
        try:
            response = self._http.get(path)
        except httpx.TransportError as exc:
            raise ServiceUnavailable(str(exc) or type(exc).__name__) from exc
        _raise_for_error(response)
        return response.json()

    def _or_here(self, call: Callable[[], T], here: Callable[[Rules], T]) -> T:
        try:
            return call()
        except ServiceUnavailable as exc:
            self._note_fallback(exc)
            return here(self._fallback())

    def _note_fallback(self, exc: Exception) -> None:
        self._ui.note(f"The Rulekeeper service could not answer ({exc}); answering here.")


def _chunk(section: dict[str, Any]) -> Chunk:
    """A passage of the sections API as the chunk it was (its extra fields left out)."""
    return Chunk.from_dict({f.name: section[f.name] for f in fields(Chunk)})


def _raise_for_error(response: httpx.Response) -> None:
    if response.status_code == 200:
        return
    response.read()
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        error = {"type": "http_error", "message": f"HTTP {response.status_code}"}
    raise _error(error)


def _error(error: dict[str, Any]) -> RulekeeperError:
    """The error the pipeline raised in the service, as it would have been raised here."""
    message = error.get("message", "")
    if error.get("type") == "game_not_found":
        games = list(error.get("games") or [])
        # GameNotFoundError appends the list of games to its message itself.
        return GameNotFoundError(message.removesuffix(f" Known games: {', '.join(games)}."), games)
    if error.get("type") == "invalid_request":
        return InputError(message)
    return ServiceUnavailable(message)


def _stream_events(lines: Iterable[str]) -> Iterator[StreamEvent]:
    """StreamEvents from `/v1/ask/stream`'s server-sent events (each data is one JSON line)."""
    name, data = "message", ""
    for line in lines:
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data = line.removeprefix("data:").strip()
        elif not line and data:
            payload = json.loads(data)
            if name == "done":
                return
            if name == "error":
                raise _error(payload["error"])
            event = _stream_event(name, payload)
            if event is not None:
                yield event
            name, data = "message", ""


def _stream_event(name: str, payload: dict[str, Any]) -> StreamEvent | None:
    if name == "quotes":
        quotes = tuple(Quote.from_json(q) for q in payload["quotes"])
        return StreamEvent("quotes", text=payload["text"], quotes=quotes)
    if name == "token":
        return StreamEvent("token", text=payload["text"])
    if name == "citations":
        return StreamEvent("answer", answer=Answer.from_json(payload))
    return None  # events this client does not know are ignored, as the API asks
