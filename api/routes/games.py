"""The games and their rulebooks, passage by passage, for a rulebook viewer."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.deps import Guard, PipelineDep
from api.errors import ApiError, documented
from api.schemas import GameList, GameOut, SectionList, SectionOut
from rag.contents import Section, find_sections, table_of_contents
from rag.errors import InputError
from rag.types import Chunk, GameInfo

router = APIRouter(
    prefix="/v1/games",
    tags=["rulebooks"],
    dependencies=[Guard],
    responses=documented(401, 403, 404, 429, 503),
)

GamePath = Annotated[
    str, Path(max_length=200, description="Game slug, title or alias.", examples=["suros"])
]


def _numbers(toc: list[Section]) -> dict[str, int]:
    """Each passage's section number (a section may come back later in reading order)."""
    return {chunk.id: section.number for section in toc for chunk in section.chunks}


def _passage(chunk: Chunk, number: int) -> SectionOut:
    return SectionOut(
        id=chunk.id,
        number=number,
        game=chunk.game,
        section=list(chunk.section),
        section_path=chunk.section_path,
        page=chunk.page,
        pages=[] if chunk.page is None else [chunk.page],
        chunk_ids=[chunk.id],
        kind=chunk.kind,
        text=chunk.text,
        lang=chunk.lang,
        start=chunk.start,
        end=chunk.end,
    )


def _whole(section: Section) -> SectionOut:
    """A section of the table of contents, its passages joined (their overlap dropped)."""
    first = section.chunks[0]
    pages = section.pages
    return SectionOut(
        id=first.id,
        number=section.number,
        game=first.game,
        section=list(section.path),
        section_path=section.title,
        page=pages[0] if pages else None,
        pages=pages,
        chunk_ids=[c.id for c in section.chunks],
        kind=first.kind,
        text=section.text,
        lang=first.lang,
        start=first.start,
        end=section.chunks[-1].end,
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
    chunks = pipeline.chunks(info.slug)
    number = _numbers(table_of_contents(chunks))
    return SectionList(
        game=info.slug,
        title=info.title,
        sections=[_passage(c, number[c.id]) for c in chunks],
    )


@router.get(
    "/{game}/sections/{section_id}",
    summary="One passage by chunk id, or one section by number or name (as `rules show`)",
    responses=documented(409),
)
def get_section(
    game: GamePath,
    section_id: Annotated[
        str,
        Path(
            max_length=300,
            description="A passage's chunk id (a citation's `chunk_id`): that passage. Or a "
            "section's `number` in the table of contents, or part of its name "
            "(case-insensitive; `Setup > Map` narrows by path): the whole section.",
        ),
    ],
    pipeline: PipelineDep,
) -> SectionOut:
    info = pipeline.corpus.resolve(game)
    chunks = pipeline.chunks(info.slug)
    toc = table_of_contents(chunks)
    number = _numbers(toc)
    passage = next((c for c in chunks if c.id == section_id), None)
    if passage is not None:
        return _passage(passage, number[passage.id])
    return _whole(find_section(info, toc, section_id))


def find_section(info: GameInfo, toc: list[Section], section_id: str) -> Section:
    """The one section a number or name names, as `rules show` finds it; 404 when none
    does, 409 when several do."""
    try:
        found = find_sections(toc, section_id)
    except InputError as exc:  # a number past the table of contents
        raise ApiError(404, "section_not_found", f"{info.title}: {exc}") from None
    if not found:
        raise ApiError(
            404,
            "section_not_found",
            f"{info.title} has no section or passage {section_id!r}; list them at "
            f"/v1/games/{info.slug}/sections.",
        )
    if len(found) > 1:
        matches = "; ".join(f"{s.number}. {s.title}" for s in found[:10])
        raise ApiError(
            409,
            "ambiguous_section",
            f"{section_id!r} matches {len(found)} sections of {info.title}; give one's number: "
            f"{matches}.",
        )
    return found[0]
