"""A rulebook's table of contents built from its chunks, and finding sections by number or
name: the one lookup behind `rules show` and the API's sections endpoint."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rag.errors import InputError
from rag.types import Chunk


@dataclass(frozen=True)
class Section:
    number: int  # 1-based position in the table of contents
    path: tuple[str, ...]
    chunks: tuple[Chunk, ...]  # in reading order

    @property
    def title(self) -> str:
        return self.chunks[0].section_path

    @property
    def pages(self) -> list[int]:
        return sorted({c.page for c in self.chunks if c.page is not None})

    @property
    def text(self) -> str:
        """The section's text once: pieces of a long section repeat a few sentences of the
        piece before (the chunker's overlap), which the character offsets let us drop."""
        parts: list[str] = []
        shown_to = 0
        for chunk in self.chunks:
            parts.append(chunk.text[max(0, shown_to - chunk.start) :].strip())
            shown_to = max(shown_to, chunk.end)
        return "\n\n".join(part for part in parts if part)


def table_of_contents(chunks: Sequence[Chunk]) -> list[Section]:
    """Distinct section paths in reading order (a long section spans several chunks)."""
    by_path: dict[tuple[str, ...], list[Chunk]] = {}
    for chunk in chunks:
        by_path.setdefault(chunk.section, []).append(chunk)
    return [
        Section(number, path, tuple(parts))
        for number, (path, parts) in enumerate(by_path.items(), start=1)
    ]


def find_sections(toc: Sequence[Section], query: str) -> list[Section]:
    """Sections named by a TOC number, or by a case-insensitive part of their path.

    A section whose own heading (or whole path) equals the query wins over mere substring
    matches, so "Move" finds "Move" rather than also "Movement track".
    """
    query = query.strip()
    if query.isdigit():
        number = int(query)
        if not 1 <= number <= len(toc):
            raise InputError(f"No section {number}: the table of contents runs 1–{len(toc)}.")
        return [toc[number - 1]]
    # Accept "Playing the Game > Move" as well as the › the paths are shown with.
    wanted = " › ".join(part.strip() for part in re.split(r"[>›]", query)).casefold()
    exact = [
        s for s in toc if wanted in (s.path[-1].casefold() if s.path else "", s.title.casefold())
    ]
    return exact or [s for s in toc if wanted in s.title.casefold()]
