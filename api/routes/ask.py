from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from api.conversations import ConversationStore
from api.deps import Guard, ServiceDep
from api.errors import documented
from api.schemas import AskRequest, AskResponse, QuotesEvent
from api.service import AskQuery, AskService, Place, cancelled_on_disconnect
from api.sse import event_stream, frame, sse_doc
from rag.types import StreamEvent

router = APIRouter(
    prefix="/v1",
    tags=["ask"],
    dependencies=[Guard],
    responses=documented(401, 403, 404, 413, 422, 429, 503, 504),
)

_STREAM_EXAMPLE = (
    'event: quotes\ndata: {"text": "Rule text:\\n[1] Setup p. 4:\\n    “Each player draws '
    'two cards.”\\n    “Then draw one more card for each Scout you hold.”", "quotes": '
    '[{"n": 1, "chunk_id": "suros-0007", "game": "suros", "section": "Suros › Setup", '
    '"page": 4, "text": "Each player draws two cards.", "translation": null}, ...]}\n\n'
    'event: queued\ndata: {"position": 1}\n\n'
    'event: token\ndata: {"text": "Each player "}\n\n'
    'event: token\ndata: {"text": "draws two cards."}\n\n'
    'event: citations\ndata: {"question": "...", "answer": "Conclusion: Each player draws two '
    'cards. [1]\\n\\nRule text: ...", "conclusion": "Each player draws two cards.", '
    '"quotes": [...], "checks": [...], "citations": [...], '
    '"conversation_id": "c_7Qm2xY9kLp3Z", ...}\n\n'
    "event: done\ndata: {}\n\n"
)

_STREAM_DESCRIPTION = (
    'Quote first, then a checked conclusion. A `quotes` event (`{"text", "quotes"}`: the '
    "rule text rendered in the asker's language, and its quotes one by one, each as in the "
    "answer's `quotes`) comes as soon as the passages are found, whatever other questions "
    "the model is busy with; a later `quotes` event replaces it (the same quotes, rendered "
    "for a question in another language). When nothing near the question is found there is "
    "none (and the answer may still abstain after one). While the conclusion waits for the "
    'model, `queued` events (`{"position"}`: the answers still ahead of it) tell its place, '
    "when it changes and every few seconds. `token` events "
    '(`{"text"}`) carry the conclusion\'s draft as the model writes it: not yet checked, and '
    "it may be withheld from the answer. Then one `citations` event with the full answer (as "
    "`/v1/ask` returns it, with `conclusion`, `quotes` and `checks`); it is authoritative and "
    "replaces everything streamed before it. Then `done`. When the model cannot be had in "
    "time (its line full, a wait past the server's `queue_timeout_s`, a conclusion past its "
    "`timeout_s`) the answer is the rule text alone, `rule_text_only` with a failed `load` "
    "check and a line saying so; when that is known before the stream starts (the line "
    "full), the response carries `Retry-After`. An error after the stream started "
    'arrives as an `error` event (`{"error": {"type", "message"}}`). Clients should ignore '
    "events they do not know."
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
    description="Answers from the rulebook, quote first: the rule text verbatim (`quotes`) "
    "and a conclusion shown only when it passed its `checks`, with cited passages; the "
    "`rules ask --json` contract, plus `conversation_id` for follow-ups. When the model "
    "cannot be had in time the rule text alone answers (`rule_text_only`, with "
    "`Retry-After`).",
)
async def ask(
    body: AskRequest, request: Request, response: Response, service: ServiceDep
) -> AskResponse:
    stream = await service.start(_query(body, service), request)
    async with cancelled_on_disconnect(request, stream):
        answer = await stream.answer()
    if stream.retry_after is not None:
        response.headers["Retry-After"] = str(stream.retry_after)
    return AskResponse.of(answer, stream.conversation_id, stream.waited)


@router.post(
    "/ask/stream",
    summary="Ask, streaming the answer as server-sent events",
    description=_STREAM_DESCRIPTION,
    response_class=StreamingResponse,
    responses=sse_doc(
        "The answer as server-sent events.",
        _STREAM_EXAMPLE,
        ["quotes", "queued", "token", "citations", "done", "error"],
    ),
)
async def ask_stream(body: AskRequest, request: Request, service: ServiceDep) -> StreamingResponse:
    stream = await service.start(_query(body, service), request)

    async def frames(events: AsyncIterator[StreamEvent | Place]) -> AsyncIterator[str]:
        async for event in events:
            if isinstance(event, Place):
                yield frame({"position": event.position}, "queued")
            elif event.kind == "answer" and event.answer is not None:
                answer = AskResponse.of(event.answer, stream.conversation_id, stream.waited)
                yield frame(answer.model_dump(mode="json"), "citations")
            elif event.kind == "quotes":
                quotes = QuotesEvent.of(event)
                yield frame(quotes.model_dump(mode="json"), "quotes")
            elif event.kind == "token":
                yield frame({"text": event.text}, "token")
        yield frame({}, "done")

    return event_stream(request, stream, frames, error_event="error")
