"""OpenAI-compatible chat, so standard clients (the openai package, chat UIs) work."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, Response
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
from api.service import AskQuery, AskService, Place, cancelled_on_disconnect, skipped_for_load
from api.sse import comment, event_stream, frame, sse_doc
from rag.answering.assembly import rule_text
from rag.errors import GameNotFoundError
from rag.lang import CJK_RE, detect_lang
from rag.pipeline import Pipeline
from rag.prompting import phrases
from rag.types import Answer, Lang, Quote, StreamEvent

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


def _with_sources(text: str, answer: Answer, service: AskService, with_sources: bool) -> str:
    """`text`, followed by the answer's sources when it has some and they are wanted."""
    if not with_sources or not answer.citations:
        return text
    return f"{text}\n\n{_sources(answer, service.pipeline)}"


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
    'data: {"id": "chatcmpl-1", ..., "choices": [{"index": 0, "delta": {"content": '
    '"Deciding rule: [1] Setup p. 4:\\n    “Each player draws two cards.”"}}]}\n\n'
    'data: {..., "choices": [{"index": 0, "delta": {"content": "\\n\\nConclusion: Each "}}]}\n\n'
    'data: {..., "choices": [{"index": 0, "delta": {"content": "player draws two cards."}}]}\n\n'
    'data: {..., "choices": [{"index": 0, "delta": {"content": "\\n\\nThis answer is for '
    'reference only; ...\\n\\nSources:\\n[1] Suros › Setup, p. 4"}}]}\n\n'
    'data: {"id": "chatcmpl-1", ..., "choices": [{"index": 0, "delta": {}, "finish_reason": '
    '"stop"}], "rulekeeper": {"answer": "...", "conclusion": "...", "quotes": [...], '
    '"checks": [...], "citations": [...], ...}}\n\n'
    "data: [DONE]\n\n"
)


def _after_rule_text(answer: Answer, sent: str, draft: str) -> str:
    """What a streamed reply adds once the answer is final, after the rule text `sent` at
    once and the conclusion's `draft` streamed as written (both may be empty): the
    renderings made since, the answer's own lines (why it has no conclusion, the
    reminder), and the conclusion unless the draft said it already; a draft that then
    failed the checks is disowned."""
    words = phrases(answer.lang)
    if not sent:  # nothing was sent early: the whole answer
        return answer.answer
    shown = set(rule_text(answer.quotes, answer.lang).split("\n\n"))
    parts = [p for p in answer.answer.split("\n\n") if p not in shown]
    rendered = [q for q in answer.quotes if q.rendering or q.rendering_withheld]
    if rendered and rule_text(answer.quotes, answer.lang) != sent:
        parts.insert(0, _renderings(rendered, answer.lang))
    if draft:
        heading = f"{words['heading_conclusion']}: "
        said = next((p for p in parts if p.startswith(heading)), None)
        if said is not None:
            parts.remove(said)
            if " ".join(draft.split()) != " ".join((answer.conclusion or "").split()):
                parts.insert(0, f"{words['heading_checked']}: {said[len(heading) :]}")
        elif answer.conclusion is None and not skipped_for_load(answer):
            parts.insert(0, words["draft_withheld"])
    return "\n\n".join(parts)


def _renderings(quotes: list[Quote], lang: Lang) -> str:
    """The quotes with their renderings (or why one is withheld), each under its marker."""
    words = phrases(lang)
    return "\n".join(
        f"[{q.n}] “{q.text}”\n      {words['rendering']}: "
        f"{q.rendering or words['rendering_withheld']}"
        for q in quotes
    )


@router.post(
    "/chat/completions",
    summary="Chat (OpenAI-compatible)",
    description="`model` may name the game (its slug or title), or set `game`; otherwise the "
    "game is detected from the messages; a `model` that is neither a game nor `rulekeeper` is "
    "a 404 `model_not_found`. The message ends with its sources (section and page; the "
    "`api.chat_sources` setting turns that off). `usage` is an estimate (see `Usage`). The "
    "answer's citations, passages, quotes and checks come in the `rulekeeper` field (the "
    "finishing chunk's, when streaming). A stream sends the rule text as soon as it is found "
    "(whatever other questions the model is busy with), then the conclusion token by token "
    "as the model writes it (only when it may be shown; a draft that then fails the checks is "
    "followed by a line saying so, and a checked one that differs from its draft is given "
    "again), then the answer's own lines, the reminder and the sources. When the model cannot "
    "be had in time, the rule text is the answer, with a line saying so. Errors are in "
    "OpenAI's shape.",
    response_model=ChatCompletion,
    responses=sse_doc(
        "A `chat.completion`, or with `stream: true` server-sent `chat.completion.chunk` "
        "events ending with `data: [DONE]`.",
        _STREAM_EXAMPLE,
        None,
    ),
)
async def chat_completions(
    body: ChatCompletionRequest, request: Request, response: Response, service: ServiceDep
) -> ChatCompletion | StreamingResponse:
    query = _query(body, service)
    stream = await service.start(query, request)
    completion_id = "chatcmpl-" + secrets.token_hex(12)
    created = int(time.time())
    with_sources = service.settings.chat_sources
    if not body.stream:
        async with cancelled_on_disconnect(request, stream):
            answer = await stream.answer()
        if stream.retry_after is not None:
            response.headers["Retry-After"] = str(stream.retry_after)
        content = _with_sources(answer.answer, answer, service, with_sources)
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

    conclusion_heading = phrases(detect_lang(query.question))["heading_conclusion"]

    async def frames(events: AsyncIterator[StreamEvent | Place]) -> AsyncIterator[str]:
        yield chunk(ChunkDelta(role="assistant", content=""))
        sent = draft = content = ""
        async for event in events:
            if isinstance(event, Place):  # waiting for the model: a comment keeps it open
                yield comment(f"queued {event.position}")
                continue
            text = ""
            if event.kind == "quotes" and not sent:  # later ones add renderings: at the end
                text = sent = event.text
            elif event.kind == "token":
                heading = "" if draft else f"\n\n{conclusion_heading}: "
                draft += event.text
                text = heading + event.text
            elif event.answer is not None:
                rest = _after_rule_text(event.answer, sent, draft)
                rest = f"\n\n{rest}" if sent else rest
                text = _with_sources(rest, event.answer, service, with_sources)
            if text:
                content += text
                yield chunk(ChunkDelta(content=text))
            if event.answer is not None:
                yield chunk(ChunkDelta(), AskResponse.of(event.answer, None, stream.waited))
                if body.stream_options and body.stream_options.include_usage:
                    yield chunk(None, usage=_usage(body, content))
        yield frame("[DONE]")

    return event_stream(request, stream, frames, error_event=None)


@router.get("/models", summary="Models (OpenAI-compatible): `rulekeeper` and one per game")
def list_models(pipeline: PipelineDep) -> ModelList:
    games = [ModelCard(id=game.slug) for game in pipeline.corpus.games]
    return ModelList(data=[ModelCard(id=DEFAULT_MODEL), *games])
