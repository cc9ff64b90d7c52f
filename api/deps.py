"""Dependencies shared by the routes, as Annotated aliases (`PipelineDep`, `ServiceDep`, ...)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError, retry_later
from api.runtime import Runtime
from api.security import RateLimiter, retry_after_seconds, visitor_address
from api.service import AskService
from rag.pipeline import Pipeline


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_pipeline(runtime: RuntimeDep) -> Pipeline:
    runtime.require_ready()
    return runtime.pipeline


def get_service(runtime: RuntimeDep) -> AskService:
    runtime.require_ready()
    return runtime.service


PipelineDep = Annotated[Pipeline, Depends(get_pipeline)]
ServiceDep = Annotated[AskService, Depends(get_service)]

_api_key_header = APIKeyHeader(
    name="X-API-Key", auto_error=False, description="Required when the server has API keys."
)
_bearer = HTTPBearer(auto_error=False, description="The API key as a Bearer token.")


def _limit(limiter: RateLimiter, bucket: str, per_minute: int, whose: str) -> None:
    wait = limiter.take(bucket)
    if wait > 0:
        raise retry_later(
            429,
            "rate_limited",
            f"Too many requests: at most {per_minute} a minute {whose}.",
            retry_after_seconds(wait),
        )


async def guard(
    request: Request,
    runtime: RuntimeDep,
    api_key: Annotated[str | None, Security(_api_key_header)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> None:
    """The API key (when the server has keys) and its origin, then the rate limits."""
    settings = runtime.settings.api
    peer = request.client.host if request.client else None
    visitor = visitor_address(
        peer, request.headers, settings.trusted_proxies, settings.client_ip_header
    )

    def limit_visitor() -> None:
        per_minute = settings.rate_limit_per_minute
        _limit(runtime.visitor_limiter, "ip:" + visitor, per_minute, "per visitor")

    if not runtime.keys.required:
        limit_visitor()
        return
    grant = runtime.keys.grant(api_key or (bearer.credentials if bearer else None))
    if grant is None:
        limit_visitor()  # failed attempts spend the visitor's tokens
        raise ApiError(
            401,
            "unauthorized",
            "A valid API key is required: send it as X-API-Key or Authorization: Bearer.",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not grant.allows(request.headers):
        limit_visitor()
        raise ApiError(
            403,
            "origin_not_allowed",
            "This key works only from the web pages the server allows it for (by their "
            "Origin); a server calling the API needs a secret key.",
        )
    if not grant.secret:  # a server with a secret key speaks for many visitors at once
        limit_visitor()
    per_key = settings.key_rate_limit_per_minute
    _limit(runtime.key_limiter, grant.bucket, per_key, "for this key, all its visitors together")


Guard = Depends(guard)
