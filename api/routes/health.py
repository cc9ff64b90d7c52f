from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import RuntimeDep
from api.schemas import Health, Readiness

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process is up")
async def healthz() -> Health:
    return Health()


@router.get(
    "/readyz",
    summary="The index is loaded; which models answer",
    responses={503: {"model": Readiness, "description": "Still loading, or loading failed."}},
)
async def readyz(runtime: RuntimeDep, response: Response) -> Readiness:
    readiness = runtime.readiness()
    if readiness.status != "ready":
        response.status_code = 503
    return readiness
