"""Server-sent events over a started answer; the stream stops when the client leaves."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from api.errors import ApiError, from_pipeline_error, speaks_openai
from api.service import AnswerStream, ClientGone, Place, cancelled_on_disconnect
from rag.errors import RulekeeperError
from rag.types import StreamEvent

log = logging.getLogger("rulekeeper.api")

Frames = Callable[[AsyncIterator[StreamEvent | Place]], AsyncIterator[str]]


def frame(data: Any, event: str | None = None) -> str:
    """One event; JSON data never holds a raw newline, so it fits one `data:` line."""
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"{head}data: {payload}\n\n"


def comment(text: str = "") -> str:
    """A comment line: clients ignore it, but it keeps proxies from closing an idle stream."""
    return f": {text}\n\n" if text else ":\n\n"


def _error(exc: Exception) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, RulekeeperError):
        return from_pipeline_error(exc)
    log.exception("unexpected error while streaming", exc_info=exc)
    return ApiError(500, "internal_error", "Internal server error.")


def event_stream(
    request: Request, stream: AnswerStream, frames: Frames, *, error_event: str | None
) -> StreamingResponse:
    """Stream `frames(events)`; an error after the start becomes a last error event. When
    the answer is known before it starts to come without a conclusion (the model's line was
    full), `Retry-After` says when one could be had."""

    async def body() -> AsyncIterator[str]:
        try:
            async with cancelled_on_disconnect(request, stream):
                async for item in frames(stream.events()):
                    yield item
        except ClientGone:
            return
        except Exception as exc:
            yield frame(_error(exc).body(openai=speaks_openai(request.url.path)), error_event)
        finally:
            stream.cancel()

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    if stream.retry_after is not None:
        headers["Retry-After"] = str(stream.retry_after)
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


def sse_doc(description: str, example: str, events: list[str] | None) -> dict[int | str, Any]:
    """OpenAPI `responses` entry for a server-sent-events body: the schema of one event
    (`events`: the event names used; None: unnamed events) and an example stream."""
    event: dict[str, Any] = {
        "type": "object",
        "required": ["data"],
        "properties": {"data": {"type": "string", "description": "JSON, or `[DONE]`."}},
    }
    if events:
        event["required"].append("event")
        event["properties"]["event"] = {"type": "string", "enum": events}
    stream = {"schema": event, "example": example}
    return {200: {"description": description, "content": {"text/event-stream": stream}}}
