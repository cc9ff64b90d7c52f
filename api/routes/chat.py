"""OpenAI-compatible chat, so standard clients (the openai package, chat UIs) work."""

from __future__ import annotations

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
)
from api.service import AskQuery, AskService, cancelled_on_disconnect
from api.sse import comment, event_stream, frame, sse_doc
from rag.errors import GameNotFoundError
from rag.types import StreamEvent

router = APIRouter(
    prefix="/v1",
    tags=["openai"],
    dependencies=[Guard],
    responses=documented(401, 404, 413, 422, 429, 503, 504),
)

DEFAULT_MODEL = "rulekeeper"


def _game_named_by_model(model: str, service: AskService) -> str | None:
    try:
        return service.pipeline.corpus.resolve(model).slug
    except GameNotFoundError:
        return None


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
    game = body.game or _game_named_by_model(body.model, service)
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
    "game is detected from the messages. The answer's citations, passages, quotes and checks "
    "come in the `rulekeeper` field (the last chunk's, when streaming). A stream carries only "
    "final text: the whole checked answer arrives in one chunk once it is ready (the draft "
    "being checked is never sent); until then the stream holds only comment lines.",
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
    stream = await service.start(_query(body, service))
    completion_id = "chatcmpl-" + secrets.token_hex(12)
    created = int(time.time())
    if not body.stream:
        async with cancelled_on_disconnect(request, stream):
            answer = await stream.answer()
        return ChatCompletion(
            id=completion_id,
            created=created,
            model=body.model,
            choices=[ChatChoice(message=AssistantMessage(content=answer.answer))],
            rulekeeper=AskResponse.of(answer, None),
        )

    def chunk(delta: ChunkDelta, answer: AskResponse | None = None) -> str:
        choice = ChunkChoice(delta=delta, finish_reason=None if answer is None else "stop")
        event = ChatCompletionChunk(
            id=completion_id, created=created, model=body.model, choices=[choice], rulekeeper=answer
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
            final = AskResponse.of(event.answer, None)
            yield chunk(ChunkDelta(content=final.answer))
            yield chunk(ChunkDelta(), final)
        yield frame("[DONE]")

    return event_stream(request, stream, frames, error_event=None)


@router.get("/models", summary="Models (OpenAI-compatible): `rulekeeper` and one per game")
def list_models(pipeline: PipelineDep) -> ModelList:
    games = [ModelCard(id=game.slug) for game in pipeline.corpus.games]
    return ModelList(data=[ModelCard(id=DEFAULT_MODEL), *games])
