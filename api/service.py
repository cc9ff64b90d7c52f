"""Asking through the API: limits, conversation memory and the model runner around
`Pipeline.ask_stream`. Every ask endpoint (plain, streamed, OpenAI chat) goes through here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass

from fastapi import Request

from api.conversations import ConversationStore
from api.errors import ApiError, retry_later
from api.runner import Job, ModelRunner
from rag.errors import GameNotFoundError
from rag.pipeline import Pipeline
from rag.settings import ApiSettings
from rag.types import Answer, StreamEvent, Turn

QUEUED_RETRY_AFTER_S = 5
UNPLACED_QUESTION = (
    "Which game? Name it in the question, or choose one: the `game` field, or a game's id "
    "(from /v1/models) as the chat `model`."
)


@dataclass
class Waited:
    """A request's time outside the pipeline's own timings: in the model's queue, and
    loading the index or models (nothing once warm; again after the corpus changed)."""

    queue_s: float = 0.0
    load_s: float = 0.0
    started: bool = False  # the model began on it (before that, it was still queued)


@dataclass(frozen=True)
class AskQuery:
    question: str
    game: str | None = None
    k: int | None = None
    history: tuple[Turn, ...] = ()
    conversation_id: str | None = None  # the server keeps this conversation's history


class AnswerStream:
    """A started answer: the pipeline's events as they come, the last carrying the Answer."""

    def __init__(
        self,
        job: Job[StreamEvent],
        deadline: float,
        on_answer: Callable[[Answer], None],
        conversation_id: str | None,
        waited: Waited,
    ) -> None:
        self._job = job
        self._deadline = deadline
        self._on_answer = on_answer
        self._first: StreamEvent | None = None
        self.conversation_id = conversation_id
        self.waited = waited  # filled in on the model thread before the first event

    async def begin(self) -> None:
        """Wait for the first event, so a bad question fails before any response starts."""
        self._first = await self._next()

    async def events(self) -> AsyncIterator[StreamEvent]:
        event = self._first
        while event is not None:
            if event.answer is not None:
                self._on_answer(event.answer)
            yield event
            event = await self._next()

    async def answer(self) -> Answer:
        final: Answer | None = None
        async for event in self.events():
            final = event.answer or final
        if final is None:
            raise RuntimeError("the pipeline's stream ended without an answer")
        return final

    def cancel(self) -> None:
        self._job.cancel()

    async def _next(self) -> StreamEvent | None:
        try:
            async with asyncio.timeout_at(self._deadline):
                return await self._job.next()
        except TimeoutError:
            self._job.cancel()
            if not self.waited.started:  # the time went to other questions, not this one
                raise retry_later(
                    503,
                    "busy",
                    "The server was busy answering other questions until the time limit; "
                    "retry shortly.",
                    QUEUED_RETRY_AFTER_S,
                ) from None
            raise ApiError(
                504, "timeout", "Answering took longer than the server's time limit."
            ) from None


@contextlib.asynccontextmanager
async def cancelled_on_disconnect(request: Request, stream: AnswerStream) -> AsyncIterator[None]:
    """Cancel the answer (freeing the model) as soon as the client goes away."""

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        stream.cancel()

    watcher = asyncio.create_task(watch())
    try:
        yield
    finally:
        watcher.cancel()


class AskService:
    def __init__(
        self,
        pipeline: Pipeline,
        runner: ModelRunner,
        conversations: ConversationStore,
        settings: ApiSettings,
    ) -> None:
        self.pipeline = pipeline
        self._runner = runner
        self._conversations = conversations
        self.settings = settings

    def turns(self, exchanges: Iterable[tuple[str, str, str | None]]) -> tuple[Turn, ...]:
        """History from (question, answer, game name) triples, each named game resolved to
        its slug (a turn without one is placed by the pipeline from its question)."""
        corpus = self.pipeline.corpus
        turns = [
            Turn(question=q, answer=a, game=corpus.resolve(name).slug if name else None)
            for q, a, name in exchanges
        ]
        return tuple(turns[-self.settings.conversation_turns :])

    async def start(self, query: AskQuery) -> AnswerStream:
        """Queue the question for the model and wait for its first event."""
        limit = self.settings.max_question_chars
        if len(query.question.strip()) > limit:
            raise ApiError(
                422, "invalid_request", f"The question is longer than {limit} characters."
            )
        cid = query.conversation_id
        history = self._conversations.history(cid) if cid else query.history
        waited = Waited()
        queued_at = time.perf_counter()

        def call() -> Iterator[StreamEvent]:  # runs on the model thread
            loading = time.perf_counter()
            waited.queue_s = loading - queued_at
            waited.started = True
            self.pipeline.ensure_index()
            waited.load_s = time.perf_counter() - loading
            yield from self.pipeline.ask_stream(query.question, query.game, query.k, history)

        job = self._runner.start(call)
        deadline = asyncio.get_running_loop().time() + self.settings.timeout_s

        def remember(answer: Answer) -> None:
            if cid:
                turn = Turn(question=answer.question, answer=answer.answer, game=answer.game)
                self._conversations.append(cid, turn)

        stream = AnswerStream(job, deadline, remember, cid, waited)
        try:
            await stream.begin()
        except GameNotFoundError as exc:
            stream.cancel()
            if query.game:  # the game asked for is unknown: the pipeline's message says so
                raise
            # None named or detected; the pipeline's wording is the command line's.
            raise GameNotFoundError(UNPLACED_QUESTION, exc.choices) from exc
        except BaseException:
            stream.cancel()
            raise
        return stream
