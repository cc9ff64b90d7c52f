"""Asking through the API: limits, conversation memory and the two lanes around
`Pipeline.ask_stream`. Every ask endpoint (plain, streamed, OpenAI chat) goes through here.

A question goes to both lanes at once. The rule-text lane (retrieval and the verified
quotes, no LLM) answers it at once, whatever the model's line holds; the model's lane writes
the conclusion (and renderings) when the question's turn comes. When the model cannot be
had in time (its line full, a wait past `queue_timeout_s`, a conclusion past `timeout_s`),
the rule-text answer is the answer, with a line saying why it has no conclusion.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from fastapi import Request

from api.conversations import ConversationStore
from api.errors import ApiError
from api.runner import Job, JobCancelled, Lane
from api.waiting import Waited
from rag.errors import GameNotFoundError
from rag.pipeline import Pipeline
from rag.prompting import phrases
from rag.settings import ApiSettings
from rag.types import Answer, Check, StreamEvent, Turn

UNPLACED_QUESTION = (
    "Which game? Name it in the question, or choose one: the `game` field, or a game's id "
    "(from /v1/models) as the chat `model`."
)
# While a request waits for the model its place is told this often, even unchanged, which
# also keeps proxies from closing the quiet connection.
PLACE_EVERY_S = 5.0

Skipped = Literal["busy", "slow"]
_SKIPPED_CHECKS = {
    "busy": Check(
        "load", False, "the model was busy with other questions: the rule text alone, no conclusion"
    ),
    "slow": Check("load", False, "the conclusion ran past the server's time limit and was stopped"),
}


@dataclass(frozen=True)
class AskQuery:
    question: str
    game: str | None = None
    k: int | None = None
    history: tuple[Turn, ...] = ()
    conversation_id: str | None = None  # the server keeps this conversation's history


@dataclass(frozen=True)
class Place:
    """The answer's place in the model's line while its conclusion waits: calls ahead."""

    position: int


def mark_rule_text_only(answer: Answer, why: Skipped) -> None:
    """Say in the answer that its conclusion was skipped, and why."""
    answer.checks.append(_SKIPPED_CHECKS[why])
    if answer.quotes:
        answer.answer = f"{phrases(answer.lang)[f'no_conclusion_{why}']}\n\n{answer.answer}"


def skipped_for_load(answer: Answer) -> bool:
    """Whether the answer's conclusion was skipped because the model was not had in time
    (its own line says so)."""
    return any(check in _SKIPPED_CHECKS.values() for check in answer.checks)


class AnswerStream:
    """One question's answer from the two lanes: the rule text's events as soon as they
    come, then the place in the model's line while the conclusion waits, then the model's
    events; the last event carries the Answer."""

    def __init__(
        self,
        quoting: Job[StreamEvent],
        concluding: Job[StreamEvent] | None,
        settings: ApiSettings,
        on_answer: Callable[[Answer], None],
        conversation_id: str | None,
        waited: Waited,
        *,
        game_named: bool,
        retry_after_s: Callable[[], int],
        backend: str,
    ) -> None:
        self._quoting = quoting
        self._concluding = concluding  # None: the model's line was full, or there is no LLM
        self._loop = asyncio.get_running_loop()
        self._submitted = self._loop.time()
        self._settings = settings
        self._on_answer = on_answer
        self._game_named = game_named
        self._retry_after_s = retry_after_s
        self._backend = backend  # the generator's name, which answers name
        self._first: StreamEvent | None = None
        self._begun = False
        self.conversation_id = conversation_id
        self.waited = waited  # filled in on the model's thread when it starts
        # Set when the conclusion is known to be skipped for load: when to ask again.
        self.retry_after: int | None = None

    async def begin(self) -> None:
        """Wait for the rule text's first event, so a bad question fails before any answer
        starts."""
        if self._begun:
            return
        self._begun = True
        try:
            self._first = await self._next(self._quoting, self._submitted)
        except GameNotFoundError as exc:
            if self._game_named:  # the game asked for is unknown: the pipeline's message says so
                raise
            # None named or detected; the pipeline's wording is the command line's.
            raise GameNotFoundError(UNPLACED_QUESTION, exc.choices) from exc

    async def events(self) -> AsyncIterator[StreamEvent | Place]:
        await self.begin()
        quoted: Answer | None = None
        shown = ""  # the rule text sent, so the model's lane does not send it again
        event = self._first
        while event is not None:
            if event.answer is not None:
                quoted = event.answer
            else:
                shown = event.text
                yield event
            event = await self._next(self._quoting, self._submitted)
        if quoted is None:
            raise RuntimeError("the pipeline's stream ended without an answer")
        final = quoted
        job = self._concluding
        if job is not None and not quoted.quotes:
            # Nothing to conclude from: the model's lane would give the same answer without
            # calling the model, under the model's name.
            job.cancel()
            quoted.backend = self._backend
        elif job is not None:
            async for item in self._concluded(job, quoted, shown):
                if isinstance(item, Answer):
                    final = item
                else:
                    yield item
        elif self.retry_after is not None:
            final = self._without_conclusion(quoted, "busy")
        self._on_answer(final)
        yield StreamEvent("answer", answer=final)

    async def _concluded(
        self, job: Job[StreamEvent], quoted: Answer, shown: str
    ) -> AsyncIterator[StreamEvent | Place | Answer]:
        """The model lane's events, then its answer; the rule-text answer `quoted`, marked,
        when the model cannot be had in time."""
        async for position in self._places(job):
            yield Place(position)
        if job.started_at is None:  # waited `queue_timeout_s`: the rule text answers
            job.cancel()
            yield self._without_conclusion(quoted, "busy")
            return
        try:
            while (event := await self._next(job, job.started_at)) is not None:
                if event.answer is not None:
                    yield event.answer
                elif not (event.kind == "quotes" and event.text == shown):
                    yield event
        except TimeoutError:
            job.cancel()  # frees the model at its next token
            ran = self._loop.time() - job.started_at
            quoted.timings.generate_s += ran  # the time the model spent on it, in vain
            quoted.timings.total_s += ran
            yield self._without_conclusion(quoted, "slow")

    async def _places(self, job: Job[StreamEvent]) -> AsyncIterator[int]:
        """Its place (calls ahead) while it waits for the model: when it changes and every
        PLACE_EVERY_S, until the model starts on it or `queue_timeout_s` has passed since it
        was asked."""
        deadline = self._submitted + self._settings.queue_timeout_s
        told: int | None = None
        while not job.started.is_set() and self._loop.time() < deadline:
            if job.cancelled:
                raise JobCancelled
            position = job.position
            if position != told and position > 0:
                told = position
                yield position
            wake = min(deadline, self._loop.time() + PLACE_EVERY_S)
            try:
                async with asyncio.timeout_at(wake):
                    await job.wait_moved()
            except TimeoutError:
                told = None  # tell it again

    def _without_conclusion(self, quoted: Answer, why: Skipped) -> Answer:
        """The rule-text answer as the answer, marked with `why` the model wrote none. Busy,
        its time waiting for the model is what it spent beyond finding the rule text."""
        self.waited.rule_text_only = True
        if why == "busy":
            self.retry_after = self._retry_after_s()
            spent = self._loop.time() - self._submitted
            self.waited.queue_s = max(0.0, spent - quoted.timings.total_s)
        mark_rule_text_only(quoted, why)
        return quoted

    async def answer(self) -> Answer:
        final: Answer | None = None
        async for event in self.events():
            if isinstance(event, StreamEvent) and event.answer is not None:
                final = event.answer
        assert final is not None  # events() always ends with the answer
        return final

    def cancel(self) -> None:
        self._quoting.cancel()
        if self._concluding is not None:
            self._concluding.cancel()

    async def _next(self, job: Job[StreamEvent], since: float) -> StreamEvent | None:
        """The job's next event; TimeoutError past `timeout_s` from `since` for the model's
        lane, 504 for the rule text's (retrieval itself hung)."""
        try:
            async with asyncio.timeout_at(since + self._settings.timeout_s):
                return await job.next()
        except TimeoutError:
            if job is self._concluding:
                raise
            job.cancel()
            raise ApiError(
                504, "timeout", "Finding the rule text took longer than the server's time limit."
            ) from None


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
        model: Lane,
        quoting: Lane,
        conversations: ConversationStore,
        settings: ApiSettings,
    ) -> None:
        self.pipeline = pipeline
        self._model = model
        self._quoting = quoting  # the rule-text lane: retrieval and quotes, no LLM
        self._conversations = conversations
        self.settings = settings

    def close(self) -> None:
        self._model.close()
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
        """Put the question in both lanes: the rule text's (503 busy only when even that
        line is full) and, when there is an LLM and room in its line, the model's."""
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

        def quote() -> Iterator[StreamEvent]:  # on the rule-text lane
            yield from self.pipeline.ask_stream(
                query.question, query.game, query.k, history, conclude=False
            )

        def conclude() -> Iterator[StreamEvent]:  # on the model's lane, when its turn comes
            loading = time.perf_counter()
            waited.queue_s = loading - queued_at
            self.pipeline.ensure_index()
            waited.load_s = time.perf_counter() - loading
            yield from self.pipeline.ask_stream(query.question, query.game, query.k, history)

        quoting = self._quoting.start(quote)
        concluding = None
        full = False
        if self.pipeline.generator.writes:  # else the rule text is the whole answer
            try:
                concluding = self._model.start(conclude)
            except ApiError:
                full = True
            except BaseException:
                quoting.cancel()
                raise

        def remember(answer: Answer) -> None:
            if cid:
                turn = Turn(question=answer.question, answer=answer.answer, game=answer.game)
                self._conversations.append(cid, turn)

        stream = AnswerStream(
            quoting,
            concluding,
            self.settings,
            remember,
            cid,
            waited,
            game_named=bool(query.game),
            retry_after_s=self._model.expected_wait_s,
            backend=self.pipeline.generator.name,
        )
        if full:
            stream.retry_after = self._model.expected_wait_s()
        return stream

    async def start(self, query: AskQuery, request: Request) -> AnswerStream:
        """Put the question in the lanes and wait for the rule text's first event; a client
        that leaves meanwhile gives its places up."""
        stream = self.submit(query)
        try:
            async with cancelled_on_disconnect(request, stream):
                await stream.begin()
        except BaseException:
            stream.cancel()
            raise
        return stream
