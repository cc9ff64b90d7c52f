"""The embeddable widget (one static JS file) and a demo page that uses it."""

from __future__ import annotations

import html
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse

from api.deps import RuntimeDep

router = APIRouter(tags=["widget"])

STATIC = Path(__file__).resolve().parent.parent / "static"
_NOSNIFF = {"X-Content-Type-Options": "nosniff"}
# The demo runs only the widget from this server; the widget sets styles inline.
_DEMO_CSP = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self' "
    "'unsafe-inline'; img-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


@router.get(
    "/widget.js",
    summary="The embeddable widget script",
    response_class=FileResponse,
    responses={200: {"content": {"text/javascript": {}}}},
)
async def widget_js() -> FileResponse:
    return FileResponse(
        STATIC / "widget.js",
        media_type="text/javascript; charset=utf-8",
        headers={**_NOSNIFF, "Cache-Control": "public, max-age=300"},
    )


@router.get(
    "/demo",
    summary="A demo page embedding the widget",
    response_class=HTMLResponse,
    responses={200: {"content": {"text/html": {}}}},
)
async def demo(runtime: RuntimeDep) -> HTMLResponse:
    page = (STATIC / "demo.html").read_text(encoding="utf-8")
    key = runtime.keys.demo_key
    if key:  # keys on: the demo's own publishable key, valid only from this server's pages
        widget = f'<div data-rulekeeper data-api-key="{html.escape(key)}">'
        page = page.replace("<div data-rulekeeper>", widget, 1)
    return HTMLResponse(page, headers={**_NOSNIFF, "Content-Security-Policy": _DEMO_CSP})
