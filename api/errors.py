"""Every error leaves the API as JSON `{"error": {"type", "message"}}`; no traceback ever does.
On the routes OpenAI clients call, errors take OpenAI's shape instead:
`{"error": {"message", "type", "param", "code"}}`, our `type` becoming the `code`.

Pipeline errors (rag.errors) are mapped to status codes here, so routes stay thin: a route
lets `GameNotFoundError` or `InputError` propagate and the client gets a 404 or 422.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.schemas import ErrorResponse, OpenAIErrorResponse
from rag.errors import GameNotFoundError, InputError, RulekeeperError

log = logging.getLogger("rulekeeper.api")

_HTTP_TYPES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}

# OpenAI's error categories; its clients pick their exception class by status.
_OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
}
OPENAI_ROUTES = ("/v1/chat/", "/v1/models")

_DESCRIPTIONS = {
    401: "A valid API key is required.",
    403: "The API key is not allowed from this page's origin.",
    404: "Unknown game or section; a game error lists the known games.",
    409: "The section name matches several sections; the message lists them.",
    413: "The request body is too large.",
    422: "Invalid request: wrong field types, an empty or too long question, ...",
    429: "Too many requests from this client; see Retry-After.",
    503: "The server is busy (even its line for finding rule text, which needs no model, is "
    "full) or still loading; see Retry-After. A busy model is no 503: the rule text alone "
    "answers.",
    504: "Finding the rule text took longer than the server's time limit.",
}


def documented(*statuses: int, openai: bool = False) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for these error statuses (`openai`: in OpenAI's shape)."""
    model = OpenAIErrorResponse if openai else ErrorResponse
    return {s: {"model": model, "description": _DESCRIPTIONS[s]} for s in statuses}


def speaks_openai(path: str) -> bool:
    """Whether the route is one OpenAI clients call, so its errors take OpenAI's shape."""
    return path.startswith(OPENAI_ROUTES)


def _openai_type(status: int) -> str:
    return _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


class ApiError(Exception):
    """An error with its HTTP status, a stable `type` for programs and a message for people."""

    def __init__(
        self,
        status: int,
        type_: str,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        games: list[str] | None = None,
        param: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.headers = dict(headers or {})
        if retry_after_s is not None:
            self.headers["Retry-After"] = str(retry_after_s)
        self.games = games
        self.param = param  # the request field at fault, for OpenAI's shape
        self.retry_after_s = retry_after_s  # in the body too, for clients that hide headers

    def body(self, *, openai: bool = False) -> dict[str, Any]:
        # OpenAI's shape stays OpenAI's: its clients read Retry-After from the header.
        extra: dict[str, object] = {"games": self.games}
        error: dict[str, Any] = {
            "message": self.message,
            "type": _openai_type(self.status),
            "param": self.param,
            "code": self.type,
        }
        if not openai:
            error = {"type": self.type, "message": self.message}
            extra["retry_after_s"] = self.retry_after_s
        error.update({name: value for name, value in extra.items() if value is not None})
        return {"error": error}

    def response(self, *, openai: bool = False) -> JSONResponse:
        return JSONResponse(self.body(openai=openai), status_code=self.status, headers=self.headers)


def retry_later(status: int, type_: str, message: str, retry_after_s: int) -> ApiError:
    """429 / 503 errors tell the client when to come back (header and body)."""
    return ApiError(status, type_, message, retry_after_s=retry_after_s)


def from_pipeline_error(exc: RulekeeperError) -> ApiError:
    """Map an error of the pipeline; only the user's own mistakes show their message."""
    if isinstance(exc, GameNotFoundError):
        return ApiError(404, "game_not_found", str(exc), games=exc.choices)
    if isinstance(exc, InputError):
        return ApiError(422, "invalid_request", str(exc))
    log.error("pipeline unavailable: %s: %s", type(exc).__name__, exc)
    return ApiError(
        503,
        "unavailable",
        "The rules service cannot answer right now (its index or model is unavailable); "
        "the server log says why.",
    )


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else error.get("msg", ""))
    return "Invalid request: " + "; ".join(parts) + "."


def _answer(request: Request, error: ApiError) -> JSONResponse:
    return error.response(openai=speaks_openai(request.url.path))


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return _answer(request, exc)


async def _pipeline_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RulekeeperError)
    return _answer(request, from_pipeline_error(exc))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return _answer(request, ApiError(422, "invalid_request", _validation_message(exc)))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    type_ = _HTTP_TYPES.get(exc.status_code, "http_error")
    error = ApiError(exc.status_code, type_, str(exc.detail), headers=exc.headers)
    return _answer(request, error)


class CatchAll:
    """ASGI middleware: an unexpected exception is logged and answered with a generic 500.

    (Starlette's own last-resort handler re-raises after answering, and the server then
    drops the connection under a keep-alive client.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            log.exception("unexpected error on %s", scope.get("path"))
            if started or scope["type"] != "http":
                raise
            error = ApiError(500, "internal_error", "Internal server error.")
            await error.response(openai=speaks_openai(scope["path"]))(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RulekeeperError, _pipeline_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
