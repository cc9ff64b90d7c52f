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
from api.runner import Job, JobCancelled, ModelRunner
from api.waiting import Waited
from rag.errors import GameNotFoundError
from rag.pipeline import Pipeline
from rag.settings import ApiSettings
from rag.types import Answer, Check, StreamEvent, Turn

QUEUED_RETRY_AFTER_S = 5
UNPLACED_QUESTION = (
    "Which game? Name it in the question, or choose one: the `game` field, or a game's id "
    "(from /v1/models) as the chat `model`."
)
# While a request waits in line its place is told this often, even unchanged, which also
# keeps proxies from closing the quiet connection.
PLACE_EVERY_S = 5.0
# A rule-text-only answer says why it has no conclusion, in the asker's language.
_BUSY_NOTE = {
    "en": "The server is busy, so no conclusion was written: read the rule text below.",
    "zh": "服务器繁忙，没有撰写结论：请直接阅读下面的规则原文。",
}
BUSY_CHECK = Check(
    "load", False, "the model was busy with other questions: the rule text alone, no conclusion"
)


@dataclass(frozen=True)
class AskQuery:
    question: str
    game: str | None = None
    k: int | None = None
    history: tuple[Turn, ...] = ()
    conversation_id: str | None = None  # the server keeps this conversation's history


def mark_rule_text_only(answer: Answer) -> None:
    """Say in the answer that its conclusion was skipped for load."""
    answer.checks.append(BUSY_CHECK)
    if answer.quotes:
        answer.answer = f"{_BUSY_NOTE[answer.lang]}\n\n{answer.answer}"


class AnswerStream:
    """A queued answer: its place in line while it waits, then the pipeline's events as they
    come, the last carrying the Answer."""

    def __init__(
        self,
        job: Job[StreamEvent],
        settings: ApiSettings,
        on_answer: Callable[[Answer], None],
        conversation_id: str | None,
        waited: Waited,
        *,
        game_named: bool,
        quote_instead: Callable[[], Job[StreamEvent]] | None,
    ) -> None:
        self._job = job
        self._loop = asyncio.get_running_loop()
        self._queue_deadline = self._loop.time() + settings.queue_timeout_s
        self._timeout_s = settings.timeout_s
        self._deadline: float | None = None  # set when the model starts on it
        self._on_answer = on_answer
        self._game_named = game_named
        self._quote_instead = quote_instead  # the rule-text lane, when the owner enabled it
        self._first: StreamEvent | None = None
        self._begun = False
        self.conversation_id = conversation_id
        self.waited = waited  # filled in on the model thread before the first event

    @property
    def waiting(self) -> bool:
        """Whether other calls are ahead of it."""
        return self._job.position > 0

    async def places(self) -> AsyncIterator[int]:
        """Its place (calls ahead) while it waits in line: when it changes and every
        PLACE_EVERY_S. Past `queue_timeout_s` it is busy (503 with its place) or, with the
        rule-text lane, answered there."""
        told: int | None = None
        while not self._job.started.is_set() and self._deadline is None:
            if self._job.cancelled:
                raise JobCancelled
            position = self._job.position
            if position != told:
                told = position
                yield position
            wake = min(self._queue_deadline, self._loop.time() + PLACE_EVERY_S)
            try:
                async with asyncio.timeout_at(wake):
                    await self._job.wait_moved()
            except TimeoutError:
                if self._loop.time() >= self._queue_deadline and not self._job.started.is_set():
                    self._give_up_waiting(position)
                told = None  # tell it again
        if self._deadline is None:
            self._deadline = self._loop.time() + self._timeout_s

    def _give_up_waiting(self, position: int) -> None:
        self._job.cancel()
        if self._quote_instead is None:
            raise busy_after_waiting(position)
        self._job = self._quote_instead()
        self._deadline = self._loop.time() + self._timeout_s

    async def begin(self) -> None:
        """Wait for its turn, then for the first event, so a bad question fails before any
        answer starts."""
        if self._begun:
            return
        self._begun = True
        async for _ in self.places():
            pass
        try:
            self._first = await self._next()
        except GameNotFoundError as exc:
            if self._game_named:  # the game asked for is unknown: the pipeline's message says so
                raise
            # None named or detected; the pipeline's wording is the command line's.
            raise GameNotFoundError(UNPLACED_QUESTION, exc.choices) from exc

    async def events(self) -> AsyncIterator[StreamEvent]:
        await self.begin()
        event = self._first
        while event is not None:
            if event.answer is not None:
                if self.waited.rule_text_only:
                    mark_rule_text_only(event.answer)
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
        assert self._deadline is not None, "the model has not started on it"
        try:
            async with asyncio.timeout_at(self._deadline):
                return await self._job.next()
        except TimeoutError:
            self._job.cancel()
            raise ApiError(
                504, "timeout", "Answering took longer than the server's time limit."
            ) from None


def busy_after_waiting(position: int) -> ApiError:
    # The time went to other questions, not this one: busy (503), never a timeout.
    return retry_later(
        503,
        "busy",
        "The server was busy answering other questions until the time limit; retry shortly.",
        QUEUED_RETRY_AFTER_S,
        position=position,
    )


class ClientGone(ApiError):
    """The client left before its answer: nobody reads the response (nginx's 499)."""

    def __init__(self) -> None:
        super().__init__(499, "client_closed_request", "The client closed the request.")


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
    except JobCancelled:
        raise ClientGone from None
    finally:
        watcher.cancel()


class AskService:
    def __init__(
        self,
        pipeline: Pipeline,
        runner: ModelRunner,
        conversations: ConversationStore,
        settings: ApiSettings,
        quoting: ModelRunner | None = None,
    ) -> None:
        self.pipeline = pipeline
        self._runner = runner
        self._quoting = quoting  # the rule-text lane (no LLM), for when the model is saturated
        self._conversations = conversations
        self.settings = settings

    def close(self) -> None:
        self._runner.close()
        if self._quoting is not None:
            self._quoting.close()

    def turns(self, exchanges: Iterable[tuple[str, str, str | None]]) -> tuple[Turn, ...]:
        """History from (question, answer, game name) triples, each named game resolved to
        its slug (a turn without one is placed by the pipeline from its question)."""
        corpus = self.pipeline.corpus
        turns = [
            Turn(question=q, answer=a, game=corpus.resolve(name).slug if name else None)
            for q, a, name in exchanges
        ]
        return tuple(turns[-self.settings.conversation_turns :])

    def submit(self, query: AskQuery) -> AnswerStream:
        """Put the question in the model's line (or, when the line is full and the owner
        allows it, in the rule-text lane); 503 busy when there is no room."""
        limit = self.settings.max_question_chars
        if len(query.question.strip()) > limit:
            raise ApiError(
                422, "invalid_request", f"The question is longer than {limit} characters."
            )
        if query.game:  # an unknown game is a 404 before the request waits in any line
            self.pipeline.corpus.resolve(query.game)
        cid = query.conversation_id
        history = self._conversations.history(cid) if cid else query.history
        waited = Waited()
        queued_at = time.perf_counter()

        def call(conclude: bool) -> Callable[[], Iterator[StreamEvent]]:
            def events() -> Iterator[StreamEvent]:  # runs on the model thread
                loading = time.perf_counter()
                waited.queue_s = loading - queued_at
                waited.rule_text_only = not conclude
                self.pipeline.ensure_index()
                waited.load_s = time.perf_counter() - loading
                yield from self.pipeline.ask_stream(
                    query.question, query.game, query.k, history, conclude=conclude
                )

            return events

        quoting = self._quoting

        def quote_instead() -> Job[StreamEvent]:
            assert quoting is not None
            return quoting.start(call(conclude=False))

        fallback = quote_instead if quoting is not None else None
        try:
            job = self._runner.start(call(conclude=True))
        except ApiError:
            if fallback is None:
                raise
            job, fallback = quote_instead(), None  # already in the rule-text lane

        def remember(answer: Answer) -> None:
            if cid:
                turn = Turn(question=answer.question, answer=answer.answer, game=answer.game)
                self._conversations.append(cid, turn)

        return AnswerStream(
            job,
            self.settings,
            remember,
            cid,
            waited,
            game_named=bool(query.game),
            quote_instead=fallback,
        )

    async def start(self, query: AskQuery, request: Request) -> AnswerStream:
        """Queue the question and wait for its first event; a client that leaves while it
        waits gives its place up."""
        return await self.start_submitted(self.submit(query), request)

    async def start_submitted(self, stream: AnswerStream, request: Request) -> AnswerStream:
        try:
            async with cancelled_on_disconnect(request, stream):
                await stream.begin()
        except BaseException:
            stream.cancel()
            raise
        return stream
