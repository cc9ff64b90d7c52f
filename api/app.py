"""The app factory: `create_app()` builds the FastAPI app; its lifespan builds the pipeline.

    uvicorn --factory api.app:create_app        (or `rules serve`, see api.server)

Tests and tools pass a ready `Pipeline` (e.g. with fake models) and/or `Settings`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from api.errors import CatchAll, install_error_handlers
from api.local_state import rulekeeper_version
from api.routes import ask, chat, games, health, pages, widget
from api.runtime import Runtime
from api.security import ApiKeys, BodyLimit
from rag.factory import make_pipeline
from rag.pipeline import Pipeline
from rag.settings import Settings, load_settings

DESCRIPTION = """\
Board-game rules answered from the rulebooks, with the passages cited.

* `POST /v1/ask` answers (the `rules ask --json` contract); `/v1/ask/stream` streams it.
* `POST /v1/chat/completions` speaks OpenAI's chat protocol.
* `/v1/games/...` lists the games and shows their rulebooks passage by passage.
* `/v1/games/{game}/pages/{n}.png` shows a PDF rulebook's page with a quote highlighted;
  `/v1/games/{game}/sections/{id}/view` a section as HTML with it marked.
* `/widget.js` is an embeddable widget; `/demo` shows it.

When the server has API keys, send one as `X-API-Key` or `Authorization: Bearer`: a
publishable key from the pages it is bound to (their `Origin`), a secret key from a server.
Errors are `{"error": {"type", "message"}}` (OpenAI's shape on the OpenAI routes); 429 and 503
carry `Retry-After`.
"""


def _document_no_auth(app: FastAPI) -> None:
    """Keys off: the spec declares no security (the routes' key dependency would)."""
    full_spec = app.openapi

    def openapi() -> dict[str, Any]:
        spec = full_spec()  # built once and cached by FastAPI; the removals are idempotent
        spec.get("components", {}).pop("securitySchemes", None)
        for operations in spec["paths"].values():
            for operation in operations.values():
                operation.pop("security", None)
                for status in ("401", "403"):
                    operation["responses"].pop(status, None)
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(settings: Settings | None = None, *, pipeline: Pipeline | None = None) -> FastAPI:
    """The API app. Without `pipeline`, the lifespan builds one from `settings`."""
    if settings is None:
        settings = pipeline.settings if pipeline is not None else load_settings()
    configured = settings

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = Runtime.build(configured, pipeline or make_pipeline(configured))
        app.state.runtime = runtime
        warm_up = asyncio.create_task(runtime.warm_up())
        try:
            yield
        finally:
            warm_up.cancel()
            runtime.close()

    app = FastAPI(
        title="Rulekeeper",
        summary="Offline board-game rules assistant",
        description=DESCRIPTION,
        version=rulekeeper_version(),
        lifespan=lifespan,
    )
    install_error_handlers(app)
    keys = ApiKeys.configured(settings.api)
    if not keys.required:
        _document_no_auth(app)
    # Innermost first: errors become JSON inside the body limit, and CORS wraps them all.
    app.add_middleware(CatchAll)
    app.add_middleware(BodyLimit, max_bytes=settings.api.max_body_bytes)
    cors_origins = sorted({*settings.api.cors_origins, *keys.origins})
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=cors_origins,
            allow_credentials=False,
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type", "X-API-Key", "Authorization"],
            expose_headers=["Retry-After"],
            max_age=600,
        )
    for module in (health, ask, chat, games, pages, widget):
        app.include_router(module.router)
    return app
