from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from api.conversations import ConversationStore
from api.deps import Guard, ServiceDep
from api.errors import documented
from api.schemas import AskRequest, AskResponse
from api.service import AskQuery, AskService, cancelled_on_disconnect
from api.sse import event_stream, frame, sse_doc
from rag.types import StreamEvent

router = APIRouter(
    prefix="/v1",
    tags=["ask"],
    dependencies=[Guard],
    responses=documented(401, 404, 413, 422, 429, 503, 504),
)

_STREAM_EXAMPLE = (
    'event: token\ndata: {"text": "Conclusion: "}\n\n'
    'event: token\ndata: {"text": "Each player draws two cards [1]"}\n\n'
    'event: citations\ndata: {"question": "...", "answer": "...", "citations": [...], '
    '"conversation_id": "c_7Qm2xY9kLp3Z", ...}\n\n'
    "event: done\ndata: {}\n\n"
)


def _query(body: AskRequest, service: AskService) -> AskQuery:
    if body.history is not None:
        history = service.turns((t.question, t.answer, t.game) for t in body.history)
        return AskQuery(body.question, body.game, body.k, history=history)
    return AskQuery(
        body.question,
        body.game,
        body.k,
        conversation_id=body.conversation_id or ConversationStore.new_id(),
    )


@router.post(
    "/ask",
    summary="Ask a rules question",
    description="Answers from the rulebook with cited passages: the `rules ask --json` "
    "contract, plus `conversation_id` for follow-ups.",
)
async def ask(body: AskRequest, request: Request, service: ServiceDep) -> AskResponse:
    stream = await service.start(_query(body, service))
    async with cancelled_on_disconnect(request, stream):
        answer = await stream.answer()
    return AskResponse.of(answer, stream.conversation_id)


@router.post(
    "/ask/stream",
    summary="Ask, streaming the answer as server-sent events",
    description='`token` events carry the answer\'s text as generated (`{"text"}`); then '
    "one `citations` event with the full answer (as `/v1/ask` returns it; its `answer` is "
    "authoritative), then `done`. An error after the stream started arrives as an `error` "
    'event (`{"error": {"type", "message"}}`).',
    response_class=StreamingResponse,
    responses=sse_doc(
        "The answer as server-sent events.",
        _STREAM_EXAMPLE,
        ["token", "citations", "done", "error"],
    ),
)
async def ask_stream(body: AskRequest, request: Request, service: ServiceDep) -> StreamingResponse:
    stream = await service.start(_query(body, service))

    async def frames(events: AsyncIterator[StreamEvent]) -> AsyncIterator[str]:
        async for event in events:
            if event.answer is not None:
                answer = AskResponse.of(event.answer, stream.conversation_id)
                yield frame(answer.model_dump(mode="json"), "citations")
            else:
                yield frame({"text": event.text}, "token")
        yield frame({}, "done")

    return event_stream(request, stream, frames, error_event="error")
