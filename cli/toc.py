"""The table of contents as a printed rulebook shows it (rag.contents builds and searches it)."""

from __future__ import annotations

from collections.abc import Sequence

from rag.contents import Section

OutlineRow = tuple[int | None, int, str]  # (TOC number, or None for a bare heading; depth; label)


def outline(sections: Sequence[Section]) -> list[OutlineRow]:
    """The contents as an indented outline, the way a printed rulebook shows them.

    Headings that hold no text of their own ("Game Setup" above "1. Pick Survivors") appear
    unnumbered, again wherever reading order returns under them. A root every path shares
    (the book's title) is left out.
    """
    roots = {s.path[0] for s in sections if s.path}
    skip = 1 if len(roots) == 1 and any(len(s.path) > 1 for s in sections) else 0
    rows: list[OutlineRow] = []
    previous: tuple[str, ...] = ()
    for section in sections:
        path = section.path
        for depth in range(skip, len(path) - 1):
            if path[: depth + 1] != previous[: depth + 1]:
                rows.append((None, depth - skip, path[depth]))
        rows.append((section.number, max(len(path) - 1 - skip, 0), path[-1] if path else ""))
        previous = path
    return rows
