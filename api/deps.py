"""Dependencies shared by the routes, as Annotated aliases (`PipelineDep`, `ServiceDep`, ...)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError, retry_later
from api.runtime import Runtime
from api.security import ApiKeys, retry_after_seconds
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


def _limit(runtime: Runtime, client: str) -> None:
    wait = runtime.limiter.take(client)
    if wait > 0:
        raise retry_later(
            429,
            "rate_limited",
            f"Too many requests: at most {runtime.settings.api.rate_limit_per_minute} a "
            "minute per client.",
            retry_after_seconds(wait),
        )


async def guard(
    request: Request,
    runtime: RuntimeDep,
    api_key: Annotated[str | None, Security(_api_key_header)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> None:
    """API key (when the server has keys), then the client's rate limit."""
    presented = api_key or (bearer.credentials if bearer else None)
    address = "ip:" + (request.client.host if request.client else "unknown")
    if not runtime.keys.required:
        _limit(runtime, address)
        return
    if presented is None or not runtime.keys.valid(presented):
        _limit(runtime, address)  # failed attempts spend the address's tokens
        raise ApiError(
            401,
            "unauthorized",
            "A valid API key is required: send it as X-API-Key or Authorization: Bearer.",
            headers={"WWW-Authenticate": "Bearer"},
        )
    _limit(runtime, ApiKeys.client_id(presented))


Guard = Depends(guard)
