"""The games and their rulebooks, passage by passage, for a rulebook viewer."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.deps import Guard, PipelineDep
from api.errors import ApiError, documented
from api.schemas import GameList, GameOut, SectionList, SectionOut
from rag.errors import InputError
from rag.types import Chunk

router = APIRouter(
    prefix="/v1/games",
    tags=["rulebooks"],
    dependencies=[Guard],
    responses=documented(401, 404, 429, 503),
)

GamePath = Annotated[
    str, Path(max_length=200, description="Game slug, title or alias.", examples=["suros"])
]


def _section(chunk: Chunk) -> SectionOut:
    return SectionOut(
        id=chunk.id,
        game=chunk.game,
        section=list(chunk.section),
        section_path=chunk.section_path,
        page=chunk.page,
        kind=chunk.kind,
        text=chunk.text,
        lang=chunk.lang,
        start=chunk.start,
        end=chunk.end,
    )


@router.get("", summary="The games with a rulebook")
def list_games(pipeline: PipelineDep) -> GameList:
    return GameList(
        games=[
            GameOut(
                slug=s.game.slug,
                title=s.game.title,
                aliases=list(s.game.aliases),
                language=s.game.language,
                builtin=s.game.builtin,
                chunks=s.chunks,
            )
            for s in pipeline.games()
        ]
    )


@router.get("/{game}/sections", summary="A rulebook's passages in reading order")
def list_sections(game: GamePath, pipeline: PipelineDep) -> SectionList:
    info = pipeline.corpus.resolve(game)
    return SectionList(
        game=info.slug,
        title=info.title,
        sections=[_section(c) for c in pipeline.chunks(info.slug)],
    )


@router.get("/{game}/sections/{section_id}", summary="One passage (e.g. a citation's chunk_id)")
def get_section(
    game: GamePath,
    section_id: Annotated[str, Path(max_length=300, description="A passage's chunk id.")],
    pipeline: PipelineDep,
) -> SectionOut:
    info = pipeline.corpus.resolve(game)
    try:
        chunk = pipeline.chunk(section_id)
    except InputError:
        chunk = None
    if chunk is None or chunk.game != info.slug:
        raise ApiError(
            404,
            "section_not_found",
            f"{info.title} has no passage {section_id!r}; list them at "
            f"/v1/games/{info.slug}/sections.",
        )
    return _section(chunk)
