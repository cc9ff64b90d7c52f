"""OpenAI-compatible chat, so standard clients (the openai package, chat UIs) work."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from api.deps import Guard, PipelineDep, ServiceDep
from api.errors import ApiError, documented
from api.schemas import (
    AskResponse,
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkChoice,
    ChunkDelta,
    ModelCard,
    ModelList,
    Usage,
)
from api.service import AskQuery, AskService, cancelled_on_disconnect
from api.sse import comment, event_stream, frame, sse_doc
from rag.errors import GameNotFoundError
from rag.lang import CJK_RE
from rag.pipeline import Pipeline
from rag.types import Answer, StreamEvent

router = APIRouter(
    prefix="/v1",
    tags=["openai"],
    dependencies=[Guard],
    responses=documented(401, 403, 404, 413, 422, 429, 503, 504, openai=True),
)

DEFAULT_MODEL = "rulekeeper"
_SOURCES = {"en": ("Sources:", "p. {}"), "zh": ("来源：", "第 {} 页")}
CHARS_PER_TOKEN = 4  # alphabetic text, as BPE tokenizers usually split it


def _game_named_by_model(model: str, service: AskService) -> str | None:
    """The game `model` names; None for the service's own id; 404 for anything else."""
    if model == DEFAULT_MODEL:
        return None
    try:
        return service.pipeline.corpus.resolve(model).slug
    except GameNotFoundError:
        raise ApiError(
            404,
            "model_not_found",
            f"The model {model!r} does not exist here: use {DEFAULT_MODEL!r} or a game's id "
            "from /v1/models.",
            param="model",
        ) from None


def estimated_tokens(text: str) -> int:
    """A token count for `usage`, since the local models report none: one per Chinese
    character, and CHARS_PER_TOKEN characters per token for the rest."""
    cjk = len(CJK_RE.findall(text))
    return cjk + math.ceil((len(text) - cjk) / CHARS_PER_TOKEN)


def _usage(body: ChatCompletionRequest, content: str) -> Usage:
    prompt = sum(estimated_tokens(m.text) for m in body.messages)
    completion = estimated_tokens(content)
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )


def _sources(answer: Answer, pipeline: Pipeline) -> str:
    """The cited passages as a list a chat UI shows: marker, section path and page."""
    heading, page = _SOURCES[answer.lang]
    lines = []
    for citation in answer.citations:
        where = citation.section
        number = pipeline.chunk(citation.chunk_id).page
        if number is not None:
            where += ", " + page.format(number)
        lines.append(f"[{citation.n}] {where}")
    return "\n".join([heading, *lines])


def _content(answer: Answer, service: AskService, with_sources: bool) -> str:
    if not with_sources or not answer.citations:
        return answer.answer
    return f"{answer.answer}\n\n{_sources(answer, service.pipeline)}"


def _query(body: ChatCompletionRequest, service: AskService) -> AskQuery:
    """The last user message is the question; earlier user/assistant pairs the history."""
    said = [m for m in body.messages if m.role in ("user", "assistant")]
    if not said or said[-1].role != "user":
        raise ApiError(422, "invalid_request", "The last message must be the user's question.")
    exchanges: list[tuple[str, str, str | None]] = []
    question: str | None = None
    for message in said[:-1]:
        if message.role == "user":
            if question is not None:
                exchanges.append((question, "", None))
            question = message.text
        elif question is not None:
            exchanges.append((question, message.text, None))
            question = None
    if question is not None:
        exchanges.append((question, "", None))
    named = _game_named_by_model(body.model, service)
    game = body.game or named
    return AskQuery(said[-1].text, game, body.k, history=service.turns(exchanges))


_STREAM_EXAMPLE = (
    'data: {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, '
    '"delta": {"role": "assistant", "content": ""}}], ...}\n\n'
    ": checking\n\n"
    'data: {"id": "chatcmpl-1", ..., "choices": [{"index": 0, "delta": {"content": '
    '"Conclusion: Each player draws two cards. [1]\\n\\nRule text:\\n[1] Setup p. 4: '
    '“Each player draws two cards.”\\n\\nThis answer is for reference only; ..."}}]}\n\n'
    'data: {"id": "chatcmpl-1", ..., "choices": [{"index": 0, "delta": {}, "finish_reason": '
    '"stop"}], "rulekeeper": {"answer": "...", "conclusion": "...", "quotes": [...], '
    '"checks": [...], "citations": [...], ...}}\n\n'
    "data: [DONE]\n\n"
)

# While the conclusion is written and checked nothing final can be sent; a comment line this
# often keeps proxies from closing the quiet connection.
KEEP_ALIVE_S = 5.0


@router.post(
    "/chat/completions",
    summary="Chat (OpenAI-compatible)",
    description="`model` may name the game (its slug or title), or set `game`; otherwise the "
    "game is detected from the messages; a `model` that is neither a game nor `rulekeeper` is "
    "a 404 `model_not_found`. The message ends with its sources (section and page; the "
    "`api.chat_sources` setting turns that off). `usage` is an estimate (see `Usage`). The "
    "answer's citations, passages, quotes and checks come in the `rulekeeper` field (the "
    "finishing chunk's, when streaming). A stream carries only final text: the whole checked "
    "answer arrives in one chunk once it is ready (the draft being checked is never sent); "
    "until then the stream holds only comment lines. Errors are in OpenAI's shape.",
    response_model=ChatCompletion,
    responses=sse_doc(
        "A `chat.completion`, or with `stream: true` server-sent `chat.completion.chunk` "
        "events ending with `data: [DONE]`.",
        _STREAM_EXAMPLE,
        None,
    ),
)
async def chat_completions(
    body: ChatCompletionRequest, request: Request, service: ServiceDep
) -> ChatCompletion | StreamingResponse:
    stream = await service.start(_query(body, service), request)
    completion_id = "chatcmpl-" + secrets.token_hex(12)
    created = int(time.time())
    with_sources = service.settings.chat_sources
    if not body.stream:
        async with cancelled_on_disconnect(request, stream):
            answer = await stream.answer()
        content = _content(answer, service, with_sources)
        return ChatCompletion(
            id=completion_id,
            created=created,
            model=body.model,
            choices=[ChatChoice(message=AssistantMessage(content=content))],
            usage=_usage(body, content),
            rulekeeper=AskResponse.of(answer, None, stream.waited),
        )

    def chunk(
        delta: ChunkDelta | None,
        answer: AskResponse | None = None,
        usage: Usage | None = None,
    ) -> str:
        finish = None if answer is None else "stop"
        choices = [] if delta is None else [ChunkChoice(delta=delta, finish_reason=finish)]
        event = ChatCompletionChunk(
            id=completion_id,
            created=created,
            model=body.model,
            choices=choices,
            usage=usage,
            rulekeeper=answer,
        )
        return frame(event.model_dump(mode="json"))

    async def frames(events: AsyncIterator[StreamEvent]) -> AsyncIterator[str]:
        yield chunk(ChunkDelta(role="assistant", content=""))
        quiet_since = time.monotonic()
        async for event in events:
            if event.kind != "answer" or event.answer is None:
                # Rule text and the conclusion's unchecked draft: content a chat client
                # shows must be final, and the final answer starts with the conclusion.
                if time.monotonic() - quiet_since >= KEEP_ALIVE_S or event.kind == "quotes":
                    quiet_since = time.monotonic()
                    yield comment("checking")
                continue
            content = _content(event.answer, service, with_sources)
            yield chunk(ChunkDelta(content=content))
            yield chunk(ChunkDelta(), AskResponse.of(event.answer, None, stream.waited))
            if body.stream_options and body.stream_options.include_usage:
                yield chunk(None, usage=_usage(body, content))
        yield frame("[DONE]")

    return event_stream(request, stream, frames, error_event=None)


@router.get("/models", summary="Models (OpenAI-compatible): `rulekeeper` and one per game")
def list_models(pipeline: PipelineDep) -> ModelList:
    games = [ModelCard(id=game.slug) for game in pipeline.corpus.games]
    return ModelList(data=[ModelCard(id=DEFAULT_MODEL), *games])
