"""The rulebook as printed: a page with a quoted sentence highlighted (PDFs), a section as
HTML with it marked (any book), and the table of contents, for a viewer that lets a player
check a quote at a glance. The answer's quotes carry what these take: `game`, `page`,
`chunk_id` and `text`.

Images and pages are named by a digest of what they show, sent as the ETag: a client
holding it gets a 304 without the page being drawn again.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, cast
from urllib.parse import urlencode

import annotated_types
from fastapi import APIRouter, Query, Request, Response
from fastapi import Path as PathParam

from api.deps import Guard, PipelineDep, RuntimeDep
from api.errors import ApiError, documented
from api.routes.games import GamePath, find_section
from api.runtime import Runtime
from api.schemas import ContentsOut, ContentsSectionOut, HighlightOut, PageOut
from rag.contents import table_of_contents
from rag.reading.report import page_count
from rag.settings import ShowingSettings
from rag.showing.finding import QuoteNotFoundError, ShowingError
from rag.showing.pages import is_paged
from rag.showing.sections import section_html
from rag.showing.views import Views, section_containing
from rag.types import GameInfo

router = APIRouter(
    prefix="/v1/games",
    tags=["rulebooks"],
    dependencies=[Guard],
    responses=documented(401, 403, 404, 429, 503),
)

CACHE_CONTROL = (
    "private, max-age=86400"  # a page with its quote never changes; a book anew is a new name
)
_WIDTH = ShowingSettings.model_fields["width"]
_WIDTH_MIN = cast(int, next(m.ge for m in _WIDTH.metadata if isinstance(m, annotated_types.Ge)))
_WIDTH_MAX = cast(int, next(m.le for m in _WIDTH.metadata if isinstance(m, annotated_types.Le)))

PageNumber = Annotated[int, PathParam(description="The page, from 1.", examples=[8])]
QuoteQuery = Annotated[
    str | None,
    Query(
        description="A sentence of the page or section, as a quote's `text` gives it, to "
        "highlight; the server's `max_question_chars` applies.",
        examples=["Shuffle the Wire cards and deal five face down to each player."],
    ),
]
WidthQuery = Annotated[
    int | None,
    Query(
        ge=_WIDTH_MIN,
        le=_WIDTH_MAX,
        description="The image's width in pixels; default the server's `showing.width`.",
    ),
]
Responses = dict[int | str, dict[str, Any]]
_QUOTE_ERRORS: Responses = {
    422: {
        "model": documented(422)[422]["model"],
        "description": "`quote_not_found`: the quote is not on that page or in that section; "
        "or the quote is too long, or the width out of bounds.",
    }
}


def _served(media_type: str, description: str) -> Responses:
    """A file route's documented responses: the file, 304 and the quote's 422."""
    return {
        200: {"content": {media_type: {}}, "description": description},
        304: {"description": "The client's copy (its If-None-Match) is current."},
        **_QUOTE_ERRORS,
    }


def _quote(quote: str | None, runtime: Runtime) -> str | None:
    text = (quote or "").strip()
    limit = runtime.settings.api.max_question_chars
    if len(text) > limit:
        raise ApiError(422, "invalid_request", f"The quote is longer than {limit} characters.")
    return text or None


def _book(info: GameInfo) -> Path:
    """The PDF of a game whose pages can be shown; 404 `no_pages` for other books."""
    if not is_paged(info.path):
        raise ApiError(
            404,
            "no_pages",
            f"{info.title} is a book without pages ({info.path.suffix or 'a folder'}): show a "
            f"section instead, at /v1/games/{info.slug}/sections/{{section_id}}/view (a "
            "quote's chunk_id, a section number or name).",
        )
    return info.path


def _refused(exc: ShowingError, info: GameInfo) -> ApiError:
    status = 422 if isinstance(exc, QuoteNotFoundError) else 404
    return ApiError(status, exc.code, f"{info.title}: {exc}")


def _cached(request: Request, etag: str) -> bool:
    """Whether the client's If-None-Match names this ETag (or any)."""
    given = request.headers.get("if-none-match", "")
    return any(tag.strip().removeprefix("W/") in (etag, "*") for tag in given.split(",") if tag)


def _headers(etag: str) -> dict[str, str]:
    return {"Cache-Control": CACHE_CONTROL, "ETag": etag}


# Registered before the JSON route: "/pages/8.png" must not be read as page "8.png".
@router.get(
    "/{game}/pages/{n}.png",
    summary="A PDF rulebook's page as an image, a quoted sentence highlighted",
    response_class=Response,
    responses=_served("image/png", "The page as a PNG."),
)
def page_image(
    game: GamePath,
    n: PageNumber,
    request: Request,
    pipeline: PipelineDep,
    runtime: RuntimeDep,
    quote: QuoteQuery = None,
    width: WidthQuery = None,
) -> Response:
    info = pipeline.corpus.resolve(game)
    book = _book(info)
    views = Views(runtime.settings)
    text = _quote(quote, runtime)
    size = width or views.width
    etag = f'"{views.image_tag(book, n, text, size)}"'
    if _cached(request, etag):
        return Response(status_code=304, headers=_headers(etag))
    try:
        png = views.page_image(book, n, text, size).read_bytes()
    except ShowingError as exc:
        raise _refused(exc, info) from None
    return Response(png, media_type="image/png", headers=_headers(etag))


@router.get(
    "/{game}/pages/{n}",
    summary="A PDF rulebook's page: its size, a quote's boxes on it and its image's URL",
    responses=_QUOTE_ERRORS,
)
def page_info(
    game: GamePath,
    n: PageNumber,
    pipeline: PipelineDep,
    runtime: RuntimeDep,
    quote: QuoteQuery = None,
) -> PageOut:
    info = pipeline.corpus.resolve(game)
    book = _book(info)
    text = _quote(quote, runtime)
    try:
        layout = Views(runtime.settings).page_layout(book, n, text)
    except ShowingError as exc:
        raise _refused(exc, info) from None
    image = f"/v1/games/{info.slug}/pages/{n}.png"
    return PageOut(
        game=info.slug,
        title=info.title,
        page=layout.page,
        pages=layout.pages,
        width=layout.width,
        height=layout.height,
        highlights=[HighlightOut(**asdict(box)) for box in layout.highlights],
        image=f"{image}?{urlencode({'quote': text})}" if text else image,
    )


@router.get(
    "/{game}/sections/{section_id}/view",
    summary='A section as a small HTML page, a quoted sentence marked `<mark id="rk-quote">`',
    response_class=Response,
    responses=_served("text/html", "A standalone HTML page, no script.") | documented(409),
)
def section_view(
    game: GamePath,
    section_id: Annotated[
        str,
        PathParam(
            max_length=300,
            description="A passage's chunk id (a quote's `chunk_id`): the section holding "
            "it. Or a section's number in the table of contents, or part of its name.",
        ),
    ],
    request: Request,
    pipeline: PipelineDep,
    runtime: RuntimeDep,
    quote: QuoteQuery = None,
) -> Response:
    info = pipeline.corpus.resolve(game)
    chunks = pipeline.chunks(info.slug)
    text = _quote(quote, runtime)
    section = section_containing(chunks, section_id) or find_section(
        info, table_of_contents(chunks), section_id
    )
    try:
        page = section_html(section, info.title, text)
    except ShowingError as exc:
        raise _refused(exc, info) from None
    etag = f'"{hashlib.sha256(page.encode("utf-8")).hexdigest()[:32]}"'
    headers = {
        **_headers(etag),
        # The page is text and style only: nothing in it may run or load anything.
        "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
        "X-Content-Type-Options": "nosniff",
    }
    if _cached(request, etag):
        return Response(status_code=304, headers=headers)
    return Response(page, media_type="text/html; charset=utf-8", headers=headers)


@router.get("/{game}/contents", summary="A rulebook's table of contents, with pages")
def contents(game: GamePath, pipeline: PipelineDep) -> ContentsOut:
    info = pipeline.corpus.resolve(game)
    toc = table_of_contents(pipeline.chunks(info.slug))
    return ContentsOut(
        game=info.slug,
        title=info.title,
        has_pages=is_paged(info.path),
        pages=page_count(info.path),
        sections=[
            ContentsSectionOut(
                number=s.number,
                title=s.path[-1] if s.path else s.title,
                path=list(s.path),
                pages=s.pages,
                chunk_id=s.chunks[0].id,
            )
            for s in toc
        ],
    )
